/* qmp.c — a synchronous client of QEMU's machine protocol (QMP) on the
 * VMM's descriptor 4: one command at a time, its answer awaited with a
 * deadline (VMM_QMP_TIMEOUT_MS). QMP is one JSON object per line; events
 * ({"event": ...}) come between answers and are skipped. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/json.h"
#include "sandbox/vm/vmm-internal.h"

#define QMP_LINE_MAX (1u << 20) /* query-blockstats of 66 disks is ~70 KiB */

/* Reads the next line (NUL-terminated, without its newline) into a
 * malloc'ed *ret. */
static int qmp_line(struct vmm *v, int64_t end, char **ret)
{
	for (;;) {
		char *nl = v->qmp_len ? memchr(v->qmp_buf, '\n', v->qmp_len) : NULL;
		if (nl) {
			size_t n = (size_t)(nl - v->qmp_buf);
			char *line = malloc(n + 1);
			if (!line)
				return -ENOMEM;
			memcpy(line, v->qmp_buf, n);
			line[n] = 0;
			memmove(v->qmp_buf, nl + 1, v->qmp_len - n - 1);
			v->qmp_len -= n + 1;
			*ret = line;
			return 0;
		}
		if (v->qmp_len + 4096 > v->qmp_cap) {
			if (v->qmp_cap >= QMP_LINE_MAX)
				return -EMSGSIZE;
			size_t cap = v->qmp_cap ? v->qmp_cap * 2 : 8192;
			char *b = realloc(v->qmp_buf, cap);
			if (!b)
				return -ENOMEM;
			v->qmp_buf = b;
			v->qmp_cap = cap;
		}
		struct pollfd p = {.fd = v->qmp_fd, .events = POLLIN};
		int64_t left = end - vmm_now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		if (poll(&p, 1, (int)left) < 0 && errno != EINTR)
			return -errno;
		if (!p.revents)
			continue;
		ssize_t k = read(v->qmp_fd, v->qmp_buf + v->qmp_len, v->qmp_cap - v->qmp_len);
		if (k == 0)
			return -EPIPE;
		if (k < 0 && errno != EINTR && errno != EAGAIN)
			return -errno;
		if (k > 0)
			v->qmp_len += (size_t)k;
	}
}

static int qmp_send(struct vmm *v, const char *execute, const char *args)
{
	char *msg = NULL;
	int n = asprintf(&msg, "{\"execute\":\"%s\"%s%s}\n", execute, args ? ",\"arguments\":" : "",
			 args ? args : "");
	if (n < 0)
		return -ENOMEM;
	ssize_t w = 0;
	for (size_t off = 0; off < (size_t)n; off += (size_t)w) {
		w = write(v->qmp_fd, msg + off, (size_t)n - off);
		if (w < 0 && errno == EINTR)
			w = 0;
		else if (w < 0) {
			int r = errno == EPIPE || errno == ECONNRESET ? -EPIPE : -errno;
			free(msg);
			return r;
		}
	}
	free(msg);
	return 0;
}

int vmm_qmp(struct vmm *v, const char *execute, const char *args, char **ret_reply,
	    struct strata_err *e)
{
	int r = qmp_send(v, execute, args);
	if (r < 0)
		return strata_err_set(e, r, "QMP %s: %s", execute,
				      r == -EPIPE ? "the VMM is gone" : strerror(-r));
	return vmm_qmp_answer(v, execute, ret_reply, e);
}

int vmm_qmp_answer(struct vmm *v, const char *execute, char **ret_reply, struct strata_err *e)
{
	int r = 0;
	int64_t end = vmm_now_ms() + VMM_QMP_TIMEOUT_MS;
	while (r == 0) {
		char *line = NULL;
		r = qmp_line(v, end, &line);
		if (r < 0)
			break;
		struct json *j = json_parse(line, strlen(line), NULL, 0);
		struct json *err = json_get(j, "error");
		if (err) {
			const char *d = json_cstr(json_get(err, "desc"));
			strata_err_set(e, -EIO, "QMP %s: %s", execute, d ? d : line);
			json_free(j);
			free(line);
			return -EIO;
		}
		bool answer = json_get(j, "return") != NULL;
		json_free(j);
		if (answer) {
			if (ret_reply)
				*ret_reply = line;
			else
				free(line);
			return 0;
		}
		free(line); /* an event */
	}
	return strata_err_set(e, r, "QMP %s: %s", execute,
			      r == -EPIPE ? "the VMM is gone" : strerror(-r));
}

int vmm_qmp_greet(struct vmm *v, struct strata_err *e)
{
	char *line = NULL;
	int r = qmp_line(v, vmm_now_ms() + VMM_QMP_TIMEOUT_MS * 4, &line);
	if (r < 0)
		return strata_err_set(e, r == -EPIPE ? -ECHILD : r, "no QMP greeting: %s",
				      strerror(-r));
	bool ok = strstr(line, "\"QMP\"") != NULL;
	free(line);
	if (!ok)
		return strata_err_set(e, -EPROTO, "not a QMP greeting");
	return vmm_qmp(v, "qmp_capabilities", NULL, NULL, e);
}

int vmm_pause(struct vmm *v, struct strata_err *e)
{
	return vmm_qmp(v, "stop", NULL, NULL, e);
}

int vmm_resume(struct vmm *v, struct strata_err *e)
{
	return vmm_qmp(v, "cont", NULL, NULL, e);
}

/* The rd_bytes of the disk whose qdev id is serial's drive in an answer
 * of query-blockstats: [{"device": "meta", "stats": {"rd_bytes": N, ...
 * Our drives are named as their serials (build_argv). */
int vmm_read_bytes(struct vmm *v, const char *serial, uint64_t *ret, struct strata_err *e)
{
	char *reply = NULL;
	int r = vmm_qmp(v, "query-blockstats", NULL, &reply, e);
	if (r < 0)
		return r;
	struct json *j = json_parse(reply, strlen(reply), NULL, 0);
	struct json *list = json_get(j, "return");
	r = -ENOENT;
	for (struct json *d = list && list->type == JSON_ARR ? list->child : NULL; d; d = d->next) {
		const char *name = json_cstr(json_get(d, "device"));
		int64_t n;
		if (name && !strcmp(name, serial) &&
		    json_int(json_get(json_get(d, "stats"), "rd_bytes"), 0, INT64_MAX, &n)) {
			*ret = (uint64_t)n;
			r = 0;
			break;
		}
	}
	json_free(j);
	free(reply);
	return r == 0 ? 0 : strata_err_set(e, r, "no disk %s in query-blockstats", serial);
}
