/* fsck_tool.c — injects real damage for the fsck tests (the scripts in tests/fsck/).
 *
 * On a stopped strata-meta's RocksDB (linked against meta's kv and record
 * code, so the records are exactly what strata-meta writes):
 *   fsck_tool db DIR lookup PARENT NAME          prints the inode a dentry names
 *   fsck_tool db DIR del-dentry PARENT NAME      deletes a dentry only (its inode stays)
 *   fsck_tool db DIR add-dentry PARENT NAME INO  adds a dentry to INO (regular file type)
 *   fsck_tool db DIR set-nlink INO N             rewrites an inode's nlink
 *   fsck_tool db DIR set-counter NAME V          rewrites a counter (M NAME)
 *   fsck_tool db DIR get INO                     prints "nlink size mode" of an inode
 * On a running cluster, through chunk_client (the same writes a client makes):
 *   fsck_tool chunk META INO INDEX               writes a 64 KiB chunk for INO on the
 *                                                default table (an orphan: no such inode)
 *   fsck_tool chunk-path META PATH INDEX         writes a 64 KiB chunk INDEX of the file
 *                                                at PATH with its own layout
 * Exit 0 on success, 1 with a message otherwise. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/chunk_client.h"
#include "fs/cleanup.h"
#include "meta/ns-internal.h"
#include "tests/fs/testkey.h"

static int die(const char *what, int r)
{
	fprintf(stderr, "fsck_tool: %s: %s\n", what, strerror(r < 0 ? -r : r));
	return 1;
}

static uint64_t num(const char *s)
{
	return strtoull(s, NULL, 0);
}

static int get_inode(struct kv *kv, uint64_t ino, struct inode *in)
{
	_cleanup_free_ void *v = NULL;
	size_t n;
	struct key k;

	key_ino(&k, K_INODE, ino);
	int r = kv_get(kv, k.b, k.len, &v, &n);
	if (r == 0)
		r = inode_decode(v, n, in);
	in->a.ino = ino;
	return r;
}

static int db_cmd(const char *dir, int argc, char **argv)
{
	struct kv *kv;
	char why[256] = "";
	int r = kv_open(dir, &kv, why, sizeof(why));

	if (r < 0) {
		fprintf(stderr, "fsck_tool: %s: %s\n", dir, why);
		return 1;
	}
	struct kv_batch *b = kv_batch_new();
	struct inode in;
	struct key k;
	const char *op = argv[0];
	if (!strcmp(op, "lookup") && argc == 3) {
		_cleanup_free_ uint8_t *v = NULL;
		size_t n;
		key_dentry(&k, num(argv[1]), argv[2]);
		if ((r = kv_get(kv, k.b, k.len, (void **)&v, &n)) == 0 && n >= 9)
			printf("%llu\n", (unsigned long long)le64_get(v + 1));
	} else if (!strcmp(op, "del-dentry") && argc == 3) {
		key_dentry(&k, num(argv[1]), argv[2]);
		if ((r = kv_exists(kv, k.b, k.len)) == 0) {
			kv_batch_del(b, k.b, k.len);
			r = kv_write(kv, b);
		}
	} else if (!strcmp(op, "add-dentry") && argc == 4) {
		ns_put_dentry(b, num(argv[1]), argv[2], &(struct dentry){num(argv[3]), 0100000});
		r = kv_write(kv, b);
	} else if (!strcmp(op, "set-nlink") && argc == 3) {
		if ((r = get_inode(kv, num(argv[1]), &in)) == 0) {
			in.a.nlink = (uint32_t)num(argv[2]);
			ns_put_inode(b, &in);
			r = kv_write(kv, b);
		}
	} else if (!strcmp(op, "set-counter") && argc == 3) {
		ns_put_counter(b, argv[1], num(argv[2]));
		r = kv_write(kv, b);
	} else if (!strcmp(op, "get") && argc == 2) {
		if ((r = get_inode(kv, num(argv[1]), &in)) == 0)
			printf("%u %llu %o\n", in.a.nlink, (unsigned long long)in.a.size,
			       in.a.mode);
	} else {
		r = -EINVAL;
	}
	kv_batch_free(b);
	kv_close(kv);
	return r < 0 ? die(op, r) : 0;
}

/* Looks an absolute path up from the root. */
static int walk(struct meta_client *mc, const char *path, struct strata_attr *a)
{
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", path);
	int r = meta_getattr(mc, STRATA_ROOT_INO, a);
	for (char *save = NULL, *c = strtok_r(buf, "/", &save); c && r == 0;
	     c = strtok_r(NULL, "/", &save))
		r = meta_lookup(mc, a->ino, c, a);
	return r;
}

static int chunk_cmd(const char *meta, const char *op, const char *what, uint32_t index)
{
	struct meta_client *mc = meta_client_new(meta, "fsck-tool", NULL);
	struct chunk_client *cc = mc ? chunk_client_new(mc, NULL) : NULL;
	struct strata_attr a = {0};
	static uint8_t data[64 << 10];
	int r;

	if (!cc)
		return die("client", -ENOMEM);
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7 + index);
	if (!strcmp(op, "chunk-path")) {
		r = walk(mc, what, &a);
	} else {
		/* the root's layout: the default table */
		r = meta_getattr(mc, STRATA_ROOT_INO, &a);
		a.ino = num(what);
		a.layout.stripe_seed = 0;
	}
	if (r == 0)
		r = chunk_write(cc, &a.layout, (struct chunk_id){a.ino, index}, 0, sizeof(data),
				data, CHUNK_WRITE_SYNC);
	if (r == 0)
		printf("%llu\n", (unsigned long long)a.ino);
	chunk_client_free(cc);
	meta_client_free(mc);
	return r < 0 ? die(what, r) : 0;
}

int main(int argc, char **argv)
{
	test_key_setup(RPC_ROLE_ADMIN);
	if (argc >= 5 && !strcmp(argv[1], "db"))
		return db_cmd(argv[2], argc - 3, argv + 3);
	if (argc == 5 && (!strcmp(argv[1], "chunk") || !strcmp(argv[1], "chunk-path")))
		return chunk_cmd(argv[2], argv[1], argv[3], (uint32_t)num(argv[4]));
	fprintf(stderr, "usage: see the top of tests/fsck/fsck_tool.c\n");
	return 1;
}
