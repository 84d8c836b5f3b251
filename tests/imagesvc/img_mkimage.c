/* img_mkimage.c — test driver: layer tars in, EROFS metadata image out.
 *
 *   img-mkimage STORE_DIR OUT.img LAYER.tar[.gz|.zst]...
 *
 * Applies the layers in order into one tree (chunks go to STORE_DIR through
 * the local blob store), writes OUT.img and prints, one per line, the blob
 * files to pass as `-o device=` in that order. Statistics go to stderr. Exit
 * 0 on success, 1 with one clear line on failure. The real import/pull
 * commands will live in tools/ once the strata mount backs the blob store. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "imagesvc/blobstore.h"
#include "fs/cleanup.h"
#include "imagesvc/erofs_writer.h"
#include "imagesvc/istream.h"
#include "imagesvc/tar.h"
#include "imagesvc/tree.h"

static int apply_one(struct tree *t, struct blobstore *bs, const char *path, unsigned layer,
		     struct tree_stats *st)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "img-mkimage: cannot open '%s': %s\n", path, strerror(errno));
		return -errno;
	}
	struct istream *in = NULL;
	struct tar_reader *r = NULL;
	uint32_t blob;
	int err = istream_open(img_fd_read, &fd, 256ull << 30, &in);
	if (err == 0)
		err = tar_reader_new(NULL, istream_read_fn, in, &r);
	if (err == 0) {
		tar_reader_describe_source(r, istream_error_fn);
		err = blobstore_begin_blob(bs, &blob);
	}
	if (err == 0) {
		err = tree_apply_layer(t, r, bs, blob, layer, st);
		if (err < 0)
			fprintf(stderr, "img-mkimage: layer '%s' (%s): %s\n", path,
				istream_kind_name(istream_kind(in)), tree_error(t));
		int e2 = blobstore_end_blob(bs, blob);
		if (err == 0)
			err = e2;
	} else {
		fprintf(stderr, "img-mkimage: layer '%s': %s\n", path, strerror(-err));
	}
	tar_reader_free(r);
	istream_free(in);
	return err;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: img-mkimage STORE_DIR OUT.img LAYER...\n");
		return 2;
	}
	struct blobstore *bs = NULL;
	struct tree *t = NULL;
	struct tree_stats st = {0};
	int err = blobstore_local_open(argv[1], &bs);
	if (err < 0) {
		fprintf(stderr, "img-mkimage: blob store '%s': %s\n", argv[1], strerror(-err));
		return 1;
	}
	err = tree_new(&t);
	for (int i = 3; err == 0 && i < argc; i++)
		err = apply_one(t, bs, argv[i], (unsigned)(i - 3), &st);
	struct erofs_image_info info = {0};
	if (err == 0) {
		_cleanup_close_ int fd =
		    open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		err = fd < 0 ? -errno : erofs_write_image(t, fd, &info);
		if (err < 0)
			fprintf(stderr, "img-mkimage: writing '%s': %s\n", argv[2], strerror(-err));
	}
	for (size_t i = 0; err == 0 && i < info.n_blobs; i++) {
		char path[4096];
		err = blobstore_blob_path(bs, info.blobs[i], path, sizeof(path));
		if (err == 0)
			printf("%s\n", path);
	}
	if (err == 0)
		fprintf(stderr,
			"img-mkimage: %llu entries, %llu files, %llu bytes, %llu chunks (%llu new, "
			"%llu dedup, %llu holes), %llu inlined, %llu whiteouts; image %llu bytes, "
			"%llu inodes, "
			"%zu blobs\n",
			(unsigned long long)st.entries, (unsigned long long)st.files,
			(unsigned long long)st.bytes, (unsigned long long)st.chunks,
			(unsigned long long)st.chunks_new, (unsigned long long)st.chunks_dedup,
			(unsigned long long)st.holes, (unsigned long long)st.inlined,
			(unsigned long long)st.whiteouts, (unsigned long long)info.size,
			(unsigned long long)info.inodes, info.n_blobs);
	free(info.blobs);
	tree_free(t);
	blobstore_free(bs);
	return err < 0 ? 1 : 0;
}
