/* agent_tar.c — trees in and out of the sandbox as tar archives, made and
 * unpacked by the agent itself (TAR_OUT, TAR_IN; protocol 1.6): for a VM
 * sandbox, whose files the host cannot reach (the container backend's
 * host-side tar, sandboxd's tar_stream.c, works through the sandbox's root
 * instead).
 *
 * The archive is a file in the sandbox (the host reads it with READ and
 * writes it with WRITE, then removes it), so a tree of any size crosses the
 * protocol in its usual 1 MiB chunks. Format: ustar with pax extended
 * headers (path, linkpath, size, uid, gid, mtime, SCHILY.xattr.*), as GNU tar
 * --xattrs and Python's tarfile write and read them; GNU 'L'/'K' long names
 * are read too.
 *
 * Out: the tree under dir, staying on dir's filesystem (as tar
 * --one-file-system: not into /proc or /dev), never following a symlink:
 * regular files, directories, symlinks, hard links (a second name of an
 * inode already archived), character and block devices, FIFOs (sockets are
 * left out, as tar does), each with its mode, owner, mtime and extended
 * attributes.
 * In: every member under dir (made, with its parents); a name with ".."
 * or a bad header anywhere refuses the archive before anything is written
 * (-EINVAL; a first pass reads every header); an existing non-directory is replaced; owners,
 * modes, xattrs and mtimes as the archive says (a directory's mtime last).
 * Everything runs as the agent, root of the sandbox (a VM's guest: the VM is
 * the boundary). */
#include "sandbox/agent/agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/xattr.h>
#include <unistd.h>

#define TAR_DEPTH_MAX 64
#define TAR_MEMBERS_MAX 1000000
#define XATTR_LIST_MAX_ 65536

/* ---- out ------------------------------------------------------------------ */

struct inode_seen {
	dev_t dev;
	ino_t ino;
	char *name;
};

struct tar_out {
	int fd;
	dev_t dev; /* dir's filesystem */
	uint64_t off;
	uint32_t members;
	struct inode_seen *links;
	size_t nlinks, caplinks;
	int err;
};

static void put(struct tar_out *t, const void *p, size_t n)
{
	while (!t->err && n) {
		ssize_t k = write(t->fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			t->err = k < 0 ? -errno : -EIO;
			return;
		}
		p = (const char *)p + k;
		n -= (size_t)k;
		t->off += (uint64_t)k;
	}
}

static void pad(struct tar_out *t)
{
	static const char zero[512];
	if (t->off % 512)
		put(t, zero, 512 - t->off % 512);
}

static void octal(char *dst, size_t w, uint64_t v)
{
	snprintf(dst, w, "%0*llo", (int)w - 1, (unsigned long long)v);
}

/* One pax record "LEN key=value\n" (LEN counts itself). */
static void pax_rec(char **buf, size_t *len, const char *key, const void *val, size_t vlen)
{
	size_t body = 1 + strlen(key) + 1 + vlen + 1, n = body + 1;
	while (n < body + snprintf(NULL, 0, "%zu", n))
		n++;
	char *b = realloc(*buf, *len + n + 1);
	if (!b)
		return;
	int k = snprintf(b + *len, n + 1, "%zu %s=", n, key);
	memcpy(b + *len + k, val, vlen);
	b[*len + k + vlen] = '\n';
	*buf = b;
	*len += n;
}

/* The pax records of path's extended attributes. */
static void pax_xattrs(const char *path, char **buf, size_t *len)
{
	char names[XATTR_LIST_MAX_];
	ssize_t n = llistxattr(path, names, sizeof(names));
	for (ssize_t i = 0; n > 0 && i < n; i += (ssize_t)strlen(names + i) + 1) {
		char val[XATTR_LIST_MAX_], key[300];
		ssize_t v = lgetxattr(path, names + i, val, sizeof(val));
		if (v < 0 ||
		    snprintf(key, sizeof(key), "SCHILY.xattr.%s", names + i) >= (int)sizeof(key))
			continue;
		pax_rec(buf, len, key, val, (size_t)v);
	}
}

/* The ustar magic and the checksum, last: the header block is whole. */
static void seal(char b[512])
{
	memcpy(b + 257,
	       "ustar\0"
	       "00",
	       8);
	memset(b + 148, ' ', 8);
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += (unsigned char)b[i];
	snprintf(b + 148, 8, "%06o", sum);
}

static void header(struct tar_out *t, const char *path, const char *name, char type,
		   const struct stat *st, uint64_t size, const char *link)
{
	char *pax = NULL, b[512] = {0}, num[32];
	size_t plen = 0;
	if (strlen(name) > 99)
		pax_rec(&pax, &plen, "path", name, strlen(name));
	if (link && strlen(link) > 99)
		pax_rec(&pax, &plen, "linkpath", link, strlen(link));
	if (size >= 077777777777ull) {
		snprintf(num, sizeof(num), "%llu", (unsigned long long)size);
		pax_rec(&pax, &plen, "size", num, strlen(num));
	}
	if (type != '1')
		pax_xattrs(path, &pax, &plen);
	if (plen) { /* an extended header for the member that follows */
		snprintf(b, 100, "PaxHeaders/%.80s", name);
		octal(b + 100, 8, 0644);
		octal(b + 108, 8, 0);
		octal(b + 116, 8, 0);
		octal(b + 124, 12, plen);
		octal(b + 136, 12, (uint64_t)st->st_mtime);
		b[156] = 'x';
		seal(b);
		put(t, b, 512);
		put(t, pax, plen);
		pad(t);
		memset(b, 0, sizeof(b));
	}
	free(pax);
	snprintf(b, 100, "%s", name);
	octal(b + 100, 8, st->st_mode & 07777);
	octal(b + 108, 8, st->st_uid <= 07777777 ? st->st_uid : 0);
	octal(b + 116, 8, st->st_gid <= 07777777 ? st->st_gid : 0);
	octal(b + 124, 12, size < 077777777777ull ? size : 0);
	octal(b + 136, 12, st->st_mtime > 0 ? (uint64_t)st->st_mtime : 0);
	b[156] = type;
	if (link)
		snprintf(b + 157, 100, "%s", link);
	if (type == '3' || type == '4') {
		octal(b + 329, 8, major(st->st_rdev));
		octal(b + 337, 8, minor(st->st_rdev));
	}
	seal(b);
	put(t, b, 512);
	t->members++;
}

/* A second name of an inode already archived: its first name. */
static const char *seen_link(struct tar_out *t, const struct stat *st, const char *name)
{
	for (size_t i = 0; i < t->nlinks; i++)
		if (t->links[i].dev == st->st_dev && t->links[i].ino == st->st_ino)
			return t->links[i].name;
	if (t->nlinks == t->caplinks) {
		size_t cap = t->caplinks ? 2 * t->caplinks : 64;
		struct inode_seen *v = realloc(t->links, cap * sizeof(*v));
		if (!v)
			return NULL;
		t->links = v;
		t->caplinks = cap;
	}
	t->links[t->nlinks++] = (struct inode_seen){st->st_dev, st->st_ino, strdup(name)};
	return NULL;
}

static void out_file(struct tar_out *t, const char *path, const char *name, const struct stat *st)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		t->err = -errno;
		return;
	}
	header(t, path, name, '0', st, (uint64_t)st->st_size, NULL);
	char buf[65536];
	uint64_t left = (uint64_t)st->st_size;
	while (!t->err && left) { /* exactly the size the header says */
		ssize_t k = read(fd, buf, left < sizeof(buf) ? left : sizeof(buf));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) { /* it shrank meanwhile: zeros */
			memset(buf, 0, sizeof(buf));
			k = (ssize_t)(left < sizeof(buf) ? left : sizeof(buf));
		}
		put(t, buf, (size_t)k);
		left -= (uint64_t)k;
	}
	close(fd);
	pad(t);
}

static void out_tree(struct tar_out *t, const char *path, const char *name, int depth);

static void out_entry(struct tar_out *t, const char *path, const char *name, int depth)
{
	struct stat st;
	if (lstat(path, &st) < 0) {
		t->err = errno == ENOENT ? 0 : -errno; /* gone meanwhile */
		return;
	}
	if (t->members >= TAR_MEMBERS_MAX) {
		t->err = -E2BIG;
		return;
	}
	const char *first =
	    !S_ISDIR(st.st_mode) && st.st_nlink > 1 ? seen_link(t, &st, name) : NULL;
	if (first) {
		header(t, path, name, '1', &st, 0, first);
	} else if (S_ISREG(st.st_mode)) {
		out_file(t, path, name, &st);
	} else if (S_ISDIR(st.st_mode)) {
		char d[AG_MAX_PATH + 2];
		snprintf(d, sizeof(d), "%s/", name);
		if (name[0])
			header(t, path, d, '5', &st, 0, NULL);
		if (st.st_dev == t->dev) /* one filesystem: not into /proc */
			out_tree(t, path, name, depth + 1);
	} else if (S_ISLNK(st.st_mode)) {
		char target[AG_MAX_PATH];
		ssize_t n = readlink(path, target, sizeof(target) - 1);
		if (n < 0) {
			t->err = -errno;
			return;
		}
		target[n] = 0;
		header(t, path, name, '2', &st, 0, target);
	} else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISFIFO(st.st_mode)) {
		header(t, path, name,
		       S_ISCHR(st.st_mode)   ? '3'
		       : S_ISBLK(st.st_mode) ? '4'
					     : '6',
		       &st, 0, NULL);
	} /* sockets: left out */
}

static void out_tree(struct tar_out *t, const char *path, const char *name, int depth)
{
	if (depth > TAR_DEPTH_MAX) {
		t->err = -ELOOP;
		return;
	}
	DIR *d = opendir(path);
	if (!d) {
		t->err = -errno;
		return;
	}
	struct dirent *de;
	while (!t->err && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char cp[AG_MAX_PATH + 1], cn[AG_MAX_PATH + 1];
		if (snprintf(cp, sizeof(cp), "%s/%s", strcmp(path, "/") ? path : "", de->d_name) >=
			(int)sizeof(cp) ||
		    snprintf(cn, sizeof(cn), "%s%s%s", name, name[0] ? "/" : "", de->d_name) >=
			(int)sizeof(cn)) {
			t->err = -ENAMETOOLONG;
			break;
		}
		out_entry(t, cp, cn, depth);
	}
	closedir(d);
}

void ag_tar_out(struct agent *a, uint32_t id, const void *p, size_t len)
{
	struct ag_rd r;
	ag_rd_init(&r, p, len);
	char *dir = ag_rd_strdup(&r, AG_MAX_PATH), *archive = ag_rd_strdup(&r, AG_MAX_PATH);
	struct tar_out t = {.fd = -1};
	struct stat st;
	t.err = r.err ? r.err : 0;
	if (!t.err && (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)))
		t.err = errno && !S_ISDIR(st.st_mode) ? -errno : -ENOTDIR;
	if (!t.err) {
		t.dev = st.st_dev;
		t.fd = open(archive, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		t.err = t.fd < 0 ? -errno : 0;
	}
	if (!t.err)
		out_tree(&t, dir, "", 0);
	static const char end[1024];
	put(&t, end, sizeof(end));
	if (t.fd >= 0)
		close(t.fd);
	if (t.err && t.fd >= 0)
		unlink(archive);
	for (size_t i = 0; i < t.nlinks; i++)
		free(t.links[i].name);
	free(t.links);
	free(dir);
	free(archive);
	size_t off = ag_wr_begin(&a->out, AG_T_TAR_OUT | AG_T_REPLY, id);
	ag_wr_u32(&a->out, (uint32_t)t.err);
	ag_wr_u64(&a->out, t.err ? 0 : t.off);
	ag_wr_u32(&a->out, t.members);
	ag_wr_end(&a->out, off);
}

/* ---- in ------------------------------------------------------------------- */

struct member {
	char name[AG_MAX_PATH], link[AG_MAX_PATH];
	char type;
	uint32_t mode;
	uint64_t uid, gid, size;
	int64_t mtime;
	unsigned dev_major, dev_minor;
	char *xattrs; /* the pax records of SCHILY.xattr.*, or NULL */
	size_t xlen;
};

struct dir_time {
	char *path;
	int64_t mtime;
};

struct tar_in {
	int fd;
	uint64_t off;
	const char *dir;
	uint32_t members;
	struct dir_time *dirs;
	size_t ndirs;
};

static uint64_t num(const char *p, size_t n)
{
	if ((unsigned char)p[0] & 0x80) { /* GNU base-256 */
		uint64_t v = (unsigned char)p[0] & 0x3f;
		for (size_t i = 1; i < n; i++)
			v = v << 8 | (unsigned char)p[i];
		return v;
	}
	char b[16] = {0};
	memcpy(b, p, n < 15 ? n : 15);
	return strtoull(b, NULL, 8);
}

static int in_read(struct tar_in *t, void *p, size_t n)
{
	ssize_t k = pread(t->fd, p, n, (off_t)t->off);
	if (k != (ssize_t)n)
		return k < 0 ? -errno : -EINVAL; /* truncated */
	t->off += n;
	return 0;
}

static uint64_t padded(uint64_t n)
{
	return (n + 511) / 512 * 512;
}

/* Applies pax records p[0..n) to m. */
static int pax_apply(struct member *m, char *p, size_t n)
{
	for (size_t off = 0; off < n;) {
		char *sp = memchr(p + off, ' ', n - off);
		size_t len = sp ? strtoull(p + off, NULL, 10) : 0;
		if (!sp || len < 5 || len > n - off || p[off + len - 1] != '\n')
			return -EINVAL;
		char *key = sp + 1, *eq = memchr(key, '=', (size_t)(p + off + len - key));
		if (!eq)
			return -EINVAL;
		*eq = 0;
		char *val = eq + 1;
		size_t vlen = (size_t)(p + off + len - 1 - val);
		if (!strcmp(key, "path") && vlen < sizeof(m->name))
			snprintf(m->name, sizeof(m->name), "%.*s", (int)vlen, val);
		else if (!strcmp(key, "linkpath") && vlen < sizeof(m->link))
			snprintf(m->link, sizeof(m->link), "%.*s", (int)vlen, val);
		else if (!strcmp(key, "size"))
			m->size = strtoull(val, NULL, 10);
		else if (!strcmp(key, "uid"))
			m->uid = strtoull(val, NULL, 10);
		else if (!strcmp(key, "gid"))
			m->gid = strtoull(val, NULL, 10);
		else if (!strcmp(key, "mtime"))
			m->mtime = strtoll(val, NULL, 10);
		else if (!strncmp(key, "SCHILY.xattr.", 13)) {
			*eq = '=';
			char *x = realloc(m->xattrs, m->xlen + len);
			if (!x)
				return -ENOMEM;
			memcpy(x + m->xlen, p + off, len);
			m->xattrs = x;
			m->xlen += len;
		}
		*eq = '=';
		off += len;
	}
	return 0;
}

/* The next member's header (pax and GNU long names folded in). 1 at the
 * archive's end. */
static int in_header(struct tar_in *t, struct member *m)
{
	char *longname = NULL, *longlink = NULL;
	struct member pax = {0};
	bool has_pax = false;
	int r;
	for (;;) {
		char b[512];
		if ((r = in_read(t, b, sizeof(b))) < 0)
			break;
		bool zero = true;
		for (int i = 0; i < 512 && zero; i++)
			zero = !b[i];
		if (zero) {
			r = 1;
			break;
		}
		unsigned sum = 0;
		for (int i = 0; i < 512; i++)
			sum += i >= 148 && i < 156 ? ' ' : (unsigned char)b[i];
		if (sum != num(b + 148, 8)) {
			r = -EINVAL;
			break;
		}
		char type = b[156];
		uint64_t size = num(b + 124, 12);
		if (type == 'x' || type == 'L' || type == 'K' || type == 'g') {
			char *d = size < (16u << 20) ? malloc(size + 1) : NULL;
			if (!d || (r = in_read(t, d, size)) < 0) {
				free(d);
				r = d ? r : -E2BIG;
				break;
			}
			d[size] = 0;
			t->off += padded(size) - size;
			if (type == 'x') {
				has_pax = true;
				r = pax_apply(&pax, d, size);
				free(d);
				if (r < 0)
					break;
			} else if (type == 'L') {
				free(longname);
				longname = d;
			} else if (type == 'K') {
				free(longlink);
				longlink = d;
			} else
				free(d);
			continue;
		}
		*m = (struct member){.type = type,
				     .mode = (uint32_t)num(b + 100, 8),
				     .uid = num(b + 108, 8),
				     .gid = num(b + 116, 8),
				     .size = size,
				     .mtime = (int64_t)num(b + 136, 12),
				     .dev_major = (unsigned)num(b + 329, 8),
				     .dev_minor = (unsigned)num(b + 337, 8)};
		if (!memcmp(b + 257, "ustar", 5) && b[345])
			snprintf(m->name, sizeof(m->name), "%.155s/%.100s", b + 345, b);
		else
			snprintf(m->name, sizeof(m->name), "%.100s", b);
		snprintf(m->link, sizeof(m->link), "%.100s", b + 157);
		if (longname)
			snprintf(m->name, sizeof(m->name), "%s", longname);
		if (longlink)
			snprintf(m->link, sizeof(m->link), "%s", longlink);
		if (has_pax) {
			if (pax.name[0])
				memcpy(m->name, pax.name, sizeof(m->name));
			if (pax.link[0])
				memcpy(m->link, pax.link, sizeof(m->link));
			if (pax.size)
				m->size = pax.size;
			if (pax.uid)
				m->uid = pax.uid;
			if (pax.gid)
				m->gid = pax.gid;
			if (pax.mtime)
				m->mtime = pax.mtime;
			m->xattrs = pax.xattrs;
			m->xlen = pax.xlen;
			pax.xattrs = NULL;
		}
		r = 0;
		break;
	}
	free(longname);
	free(longlink);
	free(pax.xattrs);
	return r;
}

/* name under t->dir, normalised; -EINVAL when it has "..". */
static int join(const struct tar_in *t, const char *name, char *out, size_t cap)
{
	size_t n = (size_t)snprintf(out, cap, "%s", strcmp(t->dir, "/") ? t->dir : "");
	for (const char *p = name; *p;) {
		while (*p == '/')
			p++;
		const char *e = strchrnul(p, '/');
		size_t len = (size_t)(e - p);
		if (len == 2 && !memcmp(p, "..", 2))
			return -EINVAL;
		if (len && !(len == 1 && *p == '.')) {
			if (n + 1 + len >= cap)
				return -ENAMETOOLONG;
			out[n++] = '/';
			memcpy(out + n, p, len);
			n += len;
			out[n] = 0;
		}
		p = e;
	}
	if (!n)
		snprintf(out, cap, "/");
	return 0;
}

/* mkdir -p of path's parent. */
static void parents(char *path)
{
	for (char *s = strchr(path + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = 0;
		mkdir(path, 0755);
		*s = '/';
	}
}

static void set_xattrs(const char *path, const struct member *m)
{
	for (size_t off = 0; off < m->xlen;) {
		char *rec = m->xattrs + off, *sp = memchr(rec, ' ', m->xlen - off);
		size_t len = strtoull(rec, NULL, 10);
		char *key = sp ? sp + 1 + 13 : NULL,
		     *eq = key ? memchr(key, '=', (size_t)(rec + len - key)) : NULL;
		if (eq) {
			*eq = 0;
			lsetxattr(path, key, eq + 1, (size_t)(rec + len - 1 - (eq + 1)), 0);
			*eq = '=';
		}
		off += len;
	}
}

static int in_file(struct tar_in *t, const char *path, const struct member *m)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	char buf[65536];
	int r = 0;
	for (uint64_t left = m->size; r == 0 && left;) {
		size_t n = left < sizeof(buf) ? left : sizeof(buf);
		r = in_read(t, buf, n);
		if (r == 0 && write(fd, buf, n) != (ssize_t)n)
			r = -errno;
		left -= n;
	}
	close(fd);
	t->off += padded(m->size) - m->size;
	return r;
}

static int in_member(struct tar_in *t, const struct member *m)
{
	char path[AG_MAX_PATH + 1], target[AG_MAX_PATH + 1];
	int r = join(t, m->name, path, sizeof(path));
	if (r < 0)
		return r;
	parents(path);
	struct stat st;
	bool is_dir = lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
	if (m->type != '5' && lstat(path, &st) == 0)
		(void)(is_dir ? rmdir(path) : unlink(path)); /* replaced */
	mode_t mode = m->mode & 07777;
	switch (m->type) {
	case '0':
	case '7':
	case 0:
		r = in_file(t, path, m);
		break;
	case '1':
		r = join(t, m->link, target, sizeof(target));
		if (r == 0 && link(target, path) < 0)
			r = -errno;
		return r; /* the inode has its metadata already */
	case '2':
		r = symlink(m->link, path) < 0 ? -errno : 0;
		break;
	case '3':
	case '4':
		r = mknod(path, (m->type == '3' ? S_IFCHR : S_IFBLK) | mode,
			  makedev(m->dev_major, m->dev_minor)) < 0
			? -errno
			: 0;
		break;
	case '5':
		r = is_dir || mkdir(path, 0700) == 0 ? 0 : -errno;
		break;
	case '6':
		r = mkfifo(path, mode) < 0 ? -errno : 0;
		break;
	default:
		t->off += padded(m->size); /* another type: skipped */
		return 0;
	}
	if (r < 0)
		return r;
	lchown(path, (uid_t)m->uid, (gid_t)m->gid);
	if (m->type != '2')
		chmod(path, mode); /* after chown, which drops setuid bits */
	set_xattrs(path, m);
	struct timespec ts[2] = {{m->mtime, 0}, {m->mtime, 0}};
	if (m->type == '5') { /* set once its members were written */
		struct dir_time *v = realloc(t->dirs, (t->ndirs + 1) * sizeof(*v));
		if (v) {
			t->dirs = v;
			t->dirs[t->ndirs++] = (struct dir_time){strdup(path), m->mtime};
		}
	} else
		utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW);
	return 0;
}

void ag_tar_in(struct agent *a, uint32_t id, const void *p, size_t len)
{
	struct ag_rd r;
	ag_rd_init(&r, p, len);
	char *archive = ag_rd_strdup(&r, AG_MAX_PATH), *dir = ag_rd_strdup(&r, AG_MAX_PATH);
	struct tar_in t = {.fd = -1, .dir = dir};
	int err = r.err;
	if (!err) {
		t.fd = open(archive, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		err = t.fd < 0 ? -errno : 0;
	}
	/* Twice: a bad name or header anywhere refuses the archive before
	 * anything is written, then the members */
	for (int pass = 0; !err && pass < 2; pass++) {
		t.off = 0;
		t.members = 0;
		char d[AG_MAX_PATH + 2];
		snprintf(d, sizeof(d), "%s/x", dir);
		if (pass == 1) /* the destination, once the archive is known good */
			parents(d);
		while (!err) {
			struct member m;
			char path[AG_MAX_PATH + 1];
			int h = in_header(&t, &m);
			if (h == 1)
				break;
			if (h < 0)
				err = h;
			else if (t.members >= TAR_MEMBERS_MAX)
				err = -E2BIG;
			else if (pass == 0) {
				err = join(&t, m.name, path, sizeof(path));
				if (!err && m.type == '1')
					err = join(&t, m.link, path, sizeof(path));
				t.off +=
				    padded(m.type == '1' || m.type == '2' || m.type == '3' ||
						   m.type == '4' || m.type == '5' || m.type == '6'
					       ? 0
					       : m.size);
			} else
				err = in_member(&t, &m);
			free(m.xattrs);
			t.members++;
		}
	}
	for (size_t i = t.ndirs; i-- > 0;) { /* the deepest first */
		struct timespec ts[2] = {{t.dirs[i].mtime, 0}, {t.dirs[i].mtime, 0}};
		utimensat(AT_FDCWD, t.dirs[i].path, ts, AT_SYMLINK_NOFOLLOW);
		free(t.dirs[i].path);
	}
	free(t.dirs);
	if (t.fd >= 0)
		close(t.fd);
	free(archive);
	free(dir);
	size_t off = ag_wr_begin(&a->out, AG_T_TAR_IN | AG_T_REPLY, id);
	ag_wr_u32(&a->out, (uint32_t)err);
	ag_wr_u32(&a->out, t.members);
	ag_wr_end(&a->out, off);
}
