/* netlog.c — the decision log: one JSONL file per sandbox in the node's
 * log directory (<id>.jsonl), a record per DNS answer and per verdict on a
 * connection. Records are appended while node->mu is held, so a reader
 * (sbn_log_read) sees whole lines. A log stops at the node's log_cap bytes:
 * later records are counted, and one last record says how many were
 * dropped when the box is detached (the sandbox's own traffic must not be
 * able to fill the node's disk). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/net/net-internal.h"

int64_t mono_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec;
}

static void log_path(const struct sbn_node *n, const char *id, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/%s.jsonl", n->log_dir, id);
}

int netlog_open(struct sbn_box *bx)
{
	char p[4096];
	log_path(bx->node, bx->id, p, sizeof(p));
	bx->log_fd = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
	if (bx->log_fd < 0)
		return -errno;
	struct stat st;
	bx->log_bytes = fstat(bx->log_fd, &st) == 0 ? (uint64_t)st.st_size : 0;
	return 0;
}

void netlog_write(struct sbn_box *bx, const char *rec, size_t len)
{
	if (bx->log_fd < 0 || len < 2 || rec[0] != '{')
		return;
	if (bx->log_bytes + len + 40 > bx->node->log_cap) {
		bx->log_dropped++;
		return;
	}
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	char head[48];
	int h = snprintf(head, sizeof(head), "{\"time\":%lld.%03ld%s", (long long)t.tv_sec,
			 t.tv_nsec / 1000000, len > 2 ? "," : "");
	char *line = malloc((size_t)h + len + 1);
	if (!line)
		return;
	memcpy(line, head, (size_t)h);
	memcpy(line + h, rec + 1, len - 1);
	line[(size_t)h + len - 1] = '\n';
	ssize_t w = write(bx->log_fd, line, (size_t)h + len);
	if (w > 0)
		bx->log_bytes += (uint64_t)w;
	free(line);
}

int sbn_log_read(struct sbn_node *n, const char *id, uint64_t offset, size_t max, char **ret,
		 size_t *ret_len)
{
	char p[4096];
	log_path(n, id, p, sizeof(p));
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	char *buf = malloc(max + 1);
	ssize_t k = buf ? pread(fd, buf, max, (off_t)offset) : -1;
	int r = k < 0 ? (buf ? -errno : -ENOMEM) : 0;
	close(fd);
	if (r < 0) {
		free(buf);
		return r;
	}
	/* Whole lines only: a reader continues from the last newline. */
	while (k > 0 && buf[k - 1] != '\n' && (size_t)k == max)
		k--;
	buf[k] = 0;
	*ret = buf;
	*ret_len = (size_t)k;
	return 0;
}

void sbn_log_remove(struct sbn_node *n, const char *id)
{
	char p[4096];
	log_path(n, id, p, sizeof(p));
	unlink(p);
}
