/* image_rootfs.c — `img-rootbench LOWER SCRATCH_DIR TARGET N`: creates and
 * removes N sandbox roots (imagesvc/rootfs.h: an overlay over the mounted
 * image LOWER with a fresh upper directory under SCRATCH_DIR, mounted at
 * TARGET) one after the other and prints the creation times: median, p90,
 * p99 and mean in microseconds, and the mean removal time. Used by
 * bench/image for the warm case (the image is already mounted). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "imagesvc/rootfs.h"

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: img-rootbench LOWER SCRATCH_DIR TARGET N\n");
		return 2;
	}
	int n = atoi(argv[4]);
	double *t = calloc(n > 0 ? (size_t)n : 1, sizeof(double)), rm = 0, sum = 0;
	char scratch[4096];
	for (int i = 0; t && i < n; i++) {
		snprintf(scratch, sizeof(scratch), "%s/r%d", argv[2], i);
		double t0 = now_us();
		int r = img_rootfs_create(argv[1], scratch, argv[3]);
		double t1 = now_us();
		if (r < 0) {
			fprintf(stderr, "img-rootbench: creating a root: %s\n", strerror(-r));
			return 1;
		}
		t[i] = t1 - t0;
		sum += t[i];
		r = img_rootfs_remove(scratch, argv[3]);
		rm += now_us() - t1;
		if (r < 0) {
			fprintf(stderr, "img-rootbench: removing a root: %s\n", strerror(-r));
			return 1;
		}
	}
	if (!t || n <= 0)
		return 1;
	qsort(t, (size_t)n, sizeof(double), cmp);
	printf(
	    "create_median_us %.1f\ncreate_p90_us %.1f\ncreate_p99_us %.1f\ncreate_mean_us %.1f\n"
	    "remove_mean_us %.1f\n",
	    t[n / 2], t[n * 9 / 10], t[n * 99 / 100], sum / n, rm / n);
	free(t);
	return 0;
}
