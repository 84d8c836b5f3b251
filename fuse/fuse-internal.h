/* fuse-internal.h — the pieces of strata-fuse shared between its files.
 *
 * strata-fuse is a libfuse3 low-level client: every FUSE request is turned
 * into calls on fs/meta_client.h (namespace, sessions, lengths) and
 * fs/chunk_client.h (file bytes). This header holds the daemon context
 * (struct sfs), the inode table (per-inode client state: lookup count,
 * layout, the length of writes not yet recorded in meta), open-file and
 * open-directory handles, the retry helper for transport failures and the
 * pure chunk-splitting helper. See fuse/README.md for the design.
 *
 * Invariants:
 *  1. An inode-table entry lives while the kernel holds lookups on it
 *     (nlookup > 0) or anyone holds a reference (open handles, a request in
 *     progress: nref > 0).
 *  2. inode->size >= the length recorded in meta whenever inode->size_dirty;
 *     size_dirty is cleared only after meta has recorded inode->size.
 *  3. Chunk bytes past a file's length never exist after a shrinking
 *     truncate returns: chunks are trimmed before meta records the length. */
#pragma once
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "fuse/blobcache.h"
#include "fs/chunk_client.h"
#include "fs/meta_client.h"
#include "fs/types.h"

#define SFS_MAX_IO (1u << 20)	 /* max_write / max_read / readahead */
#define SFS_DIR_PAGE 128	 /* directory entries fetched per meta_readdir */
#define SFS_ITABLE_BUCKETS 65536 /* inode-table hash buckets (power of two) */
#define SFS_CLIENT_ID_MAX 64	 /* meta's limit on session client ids */
/* Default kernel cache timeouts (seconds), see "Caching and consistency" in
 * README.md: long, as in 3FS, because this mount's own changes are always
 * seen at once; another node's after at most this long. */
#define SFS_ATTR_TIMEOUT 30.0
#define SFS_ENTRY_TIMEOUT 30.0
#define SFS_NEGATIVE_TIMEOUT 1.0

/* ---- inode table --------------------------------------------------------- */
struct sfs_inode {
	strata_ino_t ino;
	struct sfs_inode *next; /* hash chain; table lock */
	uint64_t nlookup;	/* kernel lookups; table lock */
	uint32_t nref;		/* handles and requests in flight; table lock */

	pthread_mutex_t lock; /* everything below */
	uint32_t mode, gid;   /* from the last attr seen (setgid inheritance) */
	bool have_layout;
	struct strata_layout layout;
	uint64_t size;	     /* best known length: max(meta, local writes) */
	bool size_dirty;     /* size not yet recorded in meta */
	bool data_written;   /* writes since the last length/mtime record */
	int64_t write_mtime; /* time of the last such write */
	bool unsynced;	     /* chunk writes since the last fsync */
	uint32_t nopen;	     /* open file handles */
	uint32_t nkwriters;  /* ... of them the kernel's, open for writing (usrbio.c) */
	int8_t has_caps;     /* security.capability: -1 unknown, 0 no, 1 yes */
	int64_t seen_mtime;  /* meta's mtime/size in the last attr seen */
	uint64_t seen_size;
	bool cache_valid; /* kernel page cache matches cache_mtime/size */
	int64_t cache_mtime;
	uint64_t cache_size;
	/* attribute cache (attrcache.c) */
	struct strata_attr cattr; /* meta's attributes as fetched (not adjusted) */
	uint64_t cattr_stamp;	  /* fs->attr_clock when that fetch started; 0: none */
	uint64_t cattr_expire_ns; /* sfs_now_ns() past which cattr is stale */
	uint64_t changed_at;	  /* fs->attr_clock at the last local change */
	bool unlinked;		  /* its last link was removed here: no listing shows it */
	bool times_echo;	  /* the kernel will write back the ctime of our
				   * last change, which meta already set (attrcache.c) */
};

struct sfs_itable {
	pthread_mutex_t lock;
	struct sfs_inode **buckets;
	uint64_t count;
	/* the highest changed_at of an entry freed: what is known of the local
	 * changes of inodes no longer in the table (attrcache.c) */
	_Atomic uint64_t freed_changed_at;
};

struct sfs;
int sfs_itable_init(struct sfs_itable *t);
void sfs_itable_done(struct sfs_itable *t);
/* Records attr from meta: creates the entry if `lookup` (an entry reply, which
 * also counts one kernel lookup) and updates size/mode/layout if present.
 * Then adjusts *a to what the kernel should see: size = max(meta's, local
 * unrecorded writes), mtime/ctime no older than unrecorded writes.
 * stamp is sfs_attr_stamp() taken before the meta call (0: unknown): a reply
 * whose call began before this mount's last change of the inode is stale and
 * never changes the local size (a getattr racing a write + fsync would
 * otherwise shrink it back, and reads would be clamped short). */
void sfs_inode_note(struct sfs *fs, struct strata_attr *a, bool lookup, uint64_t stamp);
/* Drops n kernel lookups. */
void sfs_inode_forget(struct sfs *fs, strata_ino_t ino, uint64_t n);
/* Returns a referenced entry, or NULL if the kernel holds no lookup of ino
 * and create is false. Release with sfs_inode_put. */
/* Pins the SHA-256 of blob ino's digest table (setxattr of
 * SFS_BLOB_PIN_XATTR, blobcache.h) and loads and checks the table. Returns
 * 0, -EIO (the table differs), -EINVAL (not a blob, or not 32 bytes),
 * -ENOTSUP (no --cache-dir) or -errno. */
int sfs_blob_pin(struct sfs *fs, fuse_ino_t ino, const void *value, size_t size);
struct sfs_inode *sfs_inode_get(struct sfs *fs, strata_ino_t ino, bool create);
void sfs_inode_put(struct sfs *fs, struct sfs_inode *in);
/* Calls fn on every entry (shutdown: record pending lengths). */
void sfs_inode_foreach(struct sfs *fs, void (*fn)(struct sfs *, struct sfs_inode *));

/* ---- handles ------------------------------------------------------------- */
/* fi->fh of an open file is its meta session id, and of a directory a
 * number from fs->dir_next (seeded from the wall clock at start, so that no
 * two lives of the daemon hand out the same one): after a takeover
 * (takeover.c) the kernel still holds the handles of the dead daemon, and
 * the successor rebuilds a handle it does not know from fh and the inode
 * (sfs_file_get, ops_dir.c) instead of following a pointer. */
#define SFS_FH_BUCKETS 4096 /* handle-table buckets (power of two) */
struct sfs_file {
	struct sfs_inode *inode; /* referenced */
	uint64_t session;	 /* also the fh the kernel knows it by */
	uint32_t flags;
	const struct sfs_blob_table *blob; /* image blob: reads verified via fs->bc */
	bool native;			   /* the native client's (usrbio.c), not the kernel's */
	struct sfs_file *prev, *next;	   /* fs->files; fs->files_lock */
	struct sfs_file *hnext;		   /* fs->fh_buckets chain; fs->files_lock */
};

struct sfs_dir {
	pthread_mutex_t lock;
	uint64_t fh;
	struct sfs_dir *hnext; /* fs->dir_buckets chain; fs->dirs_lock */
	strata_ino_t ino;
	bool plus;		  /* entries carry attrs */
	struct meta_dirent *ents; /* window of the listing */
	int n;			  /* entries in the window */
	uint64_t base;		  /* listing index of ents[0] */
	bool more;		  /* meta has entries after the window */
	bool loaded;		  /* the window has been fetched at least once */
	uint64_t stamp;		  /* sfs_attr_stamp() before the window's fetch */
};

/* ---- daemon context -------------------------------------------------------- */
struct sfs_opts {
	const char *meta_addr;
	const char *mountpoint;
	const char *client_id;
	const char *cache_dir; /* node chunk cache of image blobs (blobcache.h) */
	uint64_t cache_bytes;
	bool foreground;
	bool writeback;
	double attr_timeout, entry_timeout, negative_timeout;
	int retry_ms;	    /* total time to retry transport failures */
	const char *holder; /* socket of strata-fuse-holder (takeover.c), or NULL */
	const char *key;    /* --key: the cluster key file (else $STRATA_KEY) */
	const char *usrbio; /* --usrbio: the native client's socket (usrbio.c), or NULL */
};

struct sfs {
	struct sfs_opts o;
	struct meta_client *mc;
	struct chunk_client *cc;
	struct sfs_blobcache *bc; /* NULL without --cache-dir */
	struct fuse_session *se;
	struct sfs_itable itable;
	pthread_mutex_t files_lock;
	struct sfs_file *files;	      /* open files, closed at shutdown */
	struct sfs_file **fh_buckets; /* files by fh (session); files_lock */
	pthread_mutex_t adopt_lock;   /* rebuilding handles of a predecessor */
	pthread_mutex_t dirs_lock;
	struct sfs_dir **dir_buckets;	/* directory handles by fh; dirs_lock */
	_Atomic uint64_t dir_next;	/* the next directory fh */
	bool taken_over;		/* serving a predecessor's connection */
	struct sfs_takeover *tk;	/* takeover.c's state, NULL without --holder */
	_Atomic bool held;		/* a holder has the connection (takeover.c) */
	bool handing_over;		/* a planned restart (restart.c): keep sessions */
	bool writeback;			/* negotiated with the kernel */
	_Atomic uint64_t attr_clock;	/* attrcache.c: ticks at every change */
	_Atomic uint64_t ns_changed_at; /* attr_clock at the last unlink/rename/... */
	/* operation ids (opid.c): the FUSE connection's id (kept by the
	 * holder across restarts), and this process's own for requests
	 * whose unique it could not read, with their counter */
	uint64_t conn_id, life_id;
	_Atomic uint64_t life_ops;
	struct sfs_usrbio *usrbio; /* usrbio.c's server, NULL without --usrbio */
	struct sfs_dircache *dc;   /* dircache.c, NULL when the negative timeout is 0 */
	struct sfs_closer *closer; /* closer.c, NULL when not serving */
};

extern const struct fuse_lowlevel_ops sfs_ops;

/* ops_*.c entry points shared across files. */
void sfs_op_init(void *userdata, struct fuse_conn_info *conn);
void sfs_op_destroy(void *userdata);
void sfs_fill_stat(struct sfs *fs, const struct strata_attr *a, struct stat *st);
/* Trims chunks past `size` (when shrinking from `old`) and records size in
 * meta together with the other fields of sa. Caller holds in->lock if in. */
int sfs_truncate_locked(struct sfs *fs, struct sfs_inode *in, strata_ino_t ino,
			const struct strata_layout *layout, uint64_t old, struct strata_setattr *sa,
			struct strata_attr *ret_attr);
/* Records a pending length / mtime of in with meta. Caller holds in->lock. */
int sfs_record_length_locked(struct sfs *fs, struct sfs_inode *in);
/* Owner of a new inode: the caller, with a setgid parent's group (and its
 * setgid bit for directories). */
void sfs_new_owner(fuse_req_t req, fuse_ino_t parent, bool isdir, uint32_t *mode, uint32_t *uid,
		   uint32_t *gid);
/* Shutdown: records pending lengths and closes every open session. */
void sfs_close_all(struct sfs *fs);
/* Handle tables (ops_file.c, ops_dir.c). Returns 0 or -ENOMEM. */
int sfs_handles_init(struct sfs *fs);
void sfs_handles_done(struct sfs *fs);
/* The layout of ino, from the table or from meta. */
int sfs_get_layout(struct sfs *fs, strata_ino_t ino, struct strata_layout *ret);

/* ---- the data path of an open file (ops_file.c), shared by the FUSE
 * requests and the native client (usrbio.c) ---------------------------------- */
/* Reads up to len (<= SFS_MAX_IO) bytes at off into buf, never past the
 * file's length (holes read as zeros; blobs verified). Returns the bytes
 * read or -errno. */
ssize_t sfs_file_read(struct sfs *fs, struct sfs_file *f, uint64_t off, size_t len, char *buf);
/* One read of a batch (sfs_file_read_many). */
struct sfs_read {
	struct sfs_file *f;
	uint64_t off;
	size_t len;
	char *buf;
	ssize_t result; /* out: what sfs_file_read would return */
};
#define SFS_READ_MANY_MAX 64
/* Reads rd[0..n) (n <= SFS_READ_MANY_MAX) as sfs_file_read would, the
 * reads of plain files within one chunk sent to the chunkservers together
 * (chunk_read_many: one round trip per chunkserver for the batch); others,
 * and any the batch failed, one by one through sfs_file_read. */
void sfs_file_read_many(struct sfs *fs, struct sfs_read *rd, int n);
/* Writes len (<= SFS_MAX_IO) bytes at off (O_DSYNC handles write through).
 * Returns 0 or -errno. */
int sfs_file_write(struct sfs *fs, struct sfs_file *f, uint64_t off, size_t len, const char *buf);
/* fsync(2) of f's inode: chunks, length, meta's WAL. Returns 0 or -errno. */
int sfs_file_fsync(struct sfs *fs, struct sfs_file *f, bool datasync);
/* Opens ino for the native client as open(2) would (flags: O_ACCMODE and
 * O_DSYNC are used): a meta session of its own. Returns the handle (free
 * with sfs_file_close) or NULL with *ret_err set. */
struct sfs_file *sfs_file_open_native(struct sfs *fs, strata_ino_t ino, uint32_t flags,
				      int *ret_err);
/* Closes f's session (recording a pending length) and frees f. */
int sfs_file_close(struct sfs *fs, struct sfs_file *f);
/* What is left once f's session was closed (r: how that went, logged if
 * it failed): f leaves its inode, and is freed. */
void sfs_file_closed(struct sfs *fs, struct sfs_file *f, int r);

/* ---- batched closes (closer.c) ---------------------------------------------- */
int sfs_closer_start(struct sfs *fs); /* 0 or -errno: then releases close one by one */
/* Drains the queue (every queued RELEASE answered), then stops. */
void sfs_closer_stop(struct sfs *fs);
/* Queues the close of f (no longer in the handle table) and the answer to
 * req, its RELEASE; false when there is no closer (close it here). */
bool sfs_closer_queue(struct sfs *fs, fuse_req_t req, struct sfs_file *f);

/* ---- the native client's server (usrbio.c, fs/usrbio_proto.h) -------------
 * No-ops without --usrbio. Started once the mount serves, stopped after the
 * session loop (before sessions are closed). */
int sfs_usrbio_start(struct sfs *fs);
void sfs_usrbio_stop(struct sfs *fs);

/* ---- takeover (takeover.c): surviving a crash of strata-fuse -------------
 * All no-ops without --holder. */
/* Asks the holder for a live connection of our mount point. Returns 1 with
 * the fd in *ret_fd, 0 when there is none (mount anew), -EBUSY if another
 * strata-fuse still serves it. */
int sfs_takeover_take(struct sfs *fs, int *ret_fd);
/* Serves the taken-over fd in fs->se: replays the saved INIT, then asks the
 * kernel to resend what the dead daemon had read. Returns 0 or -errno. */
int sfs_takeover_start(struct sfs *fs, int fd);
/* After a fresh mount: reads and answers the kernel's INIT, keeping its
 * bytes for a successor. Returns 0 or -errno. */
int sfs_takeover_first_request(struct sfs *fs);
/* Hands the connection to the holder (starting one) and watches it. */
int sfs_takeover_hold(struct sfs *fs);
/* Stops watching; with stop_holder also tells the holder to exit. */
void sfs_takeover_done(struct sfs *fs, bool stop_holder);

/* ---- planned restart (restart.c): SIGUSR2 hands the connection over ------ */
/* Installs the SIGUSR2 handler (after the session exists). Returns 0 or -errno. */
int sfs_restart_arm(struct sfs *fs);
/* Removes it (SIGUSR2 ignored from then on). */
void sfs_restart_disarm(void);
/* True once SIGUSR2 ended the loop for a hand-over. */
bool sfs_restart_requested(void);
/* After the loop: records pending lengths and lets the holder give the
 * connection to a successor; the caller exits without unmounting. */
void sfs_restart_handover(struct sfs *fs);

/* ---- operation ids (opid.c) ------------------------------------------------
 * Every mutation strata-meta may have carried out before its answer was
 * lost (create, mknod, mkdir, symlink, link, unlink, rmdir, rename, open,
 * setxattr, removexattr) is sent with the id of its FUSE request, so that
 * the kernel's resend after a crash and our own retries are answered, not
 * done again (README.md "Replayed requests"). */
struct sfs_op {
	struct meta_opid id;
	bool resent; /* the kernel resent it, or we retried: it may be done already */
};
/* Reads the FUSE device through opid.c (after the session's fd is set):
 * notes each request's header for sfs_op_of. Returns 0 or -errno. */
int sfs_opid_attach(struct sfs *fs);
/* A random connection id (never 0). */
uint64_t sfs_opid_new_conn(void);
/* The operation id of req (call in the request's handler). */
void sfs_op_of(struct sfs *fs, fuse_req_t req, struct sfs_op *ret);

/* ---- device read buffers (devbuf.c) ----------------------------------------
 * Makes every page of buf (the calling thread's buffer for reading
 * /dev/fuse) present and writable, once per buffer and fork, so that the
 * kernel's copy of a request into it never fails under a pending SIGKILL
 * (which would end the request with EIO instead of leaving it for the
 * successor's resend). */
void sfs_devbuf_ready(void *buf, size_t len);
/* Call after this process forked: its pages are write-protected again. */
void sfs_devbuf_forked(void);

/* ---- request counters (stats.c) -------------------------------------------- */
/* The node-local xattr whose value is the counters' text. */
#define SFS_STATS_XATTR "trusted.strata.stats"
/* Counts one FUSE request of opcode (called for every request read). */
void sfs_stats_request(uint32_t opcode);
/* The counters as text ("fuse.LOOKUP 12\nmeta.lookup 12\n..."), malloc'ed
 * into *ret. Returns 0 or -ENOMEM. */
int sfs_stats_text(struct sfs *fs, char **ret, size_t *ret_len);

/* ---- attribute cache (attrcache.c) ---------------------------------------
 * GETATTR answered from the attributes meta returned less than attr_timeout
 * ago, unless this mount changed the inode since the call that fetched them
 * started. A stamp from the clock is taken before each meta call whose reply
 * is cached; every local change ticks the clock after it is done, so a reply
 * that may predate a change is never cached. */
/* Returns the stamp to take before a meta call whose reply may be cached. */
uint64_t sfs_attr_stamp(struct sfs *fs);
/* Caches a (meta's reply to a call started at stamp) if ino is in the table. */
void sfs_attr_put(struct sfs *fs, const struct strata_attr *a, uint64_t stamp);
/* Sets *ret to fresh cached attributes of ino; returns false if there are none. */
bool sfs_attr_get(struct sfs *fs, strata_ino_t ino, struct strata_attr *ret);
/* in (or ino) changed through this mount. The _locked form needs in->lock. */
void sfs_attr_changed_locked(struct sfs *fs, struct sfs_inode *in);
void sfs_attr_changed(struct sfs *fs, strata_ino_t ino);
/* A change that touches inodes we cannot name (unlink, rmdir, rename, link). */
void sfs_attr_changed_all(struct sfs *fs);
/* child was created in parent by a call started at stamp: applies meta's
 * change of the parent (mtime = ctime = child's ctime, nlink+1 for a
 * directory) to its cached attributes, or drops them. */
void sfs_attr_created(struct sfs *fs, strata_ino_t parent, const struct strata_attr *child,
		      uint64_t stamp);
/* a is meta's answer to this mount's change of a->ino, by a call started at
 * stamp: it replaces the cached attributes (or drops them when another
 * local change of the inode raced the call). echo: the kernel writes back
 * a ctime of its own for this change (sfs_attr_echo): the removed inode of
 * an unlink or rmdir, the inodes a rename moved or replaced; such an inode
 * left with nlink 0 is gone from the namespace. */
void sfs_attr_replied(struct sfs *fs, const struct strata_attr *a, uint64_t stamp, bool echo);
/* A SETATTR of mtime_ns and a ctime only, the kernel's write-back after a
 * change sfs_attr_replied marked: true, with *ret the cached attributes,
 * when mtime_ns is meta's own and no write is unrecorded (the call would
 * change nothing meta does not have). Clears the mark. */
bool sfs_attr_echo(struct sfs *fs, strata_ino_t ino, int64_t mtime_ns, struct strata_attr *ret);

/* Whether ino was changed through this mount after stamp (an inode the table
 * forgot counts as changed when any forgotten one changed after stamp). */
bool sfs_attr_unchanged_since(struct sfs *fs, strata_ino_t ino, uint64_t stamp);

/* ---- directory listings (dircache.c) -------------------------------------
 * LOOKUPs in a directory looked up often answered from its whole listing,
 * for one window (the negative timeout). */
enum sfs_dc_answer {
	SFS_DC_MISS,   /* ask meta */
	SFS_DC_ABSENT, /* no such entry: cache the negative for *ret_ttl s */
	SFS_DC_FOUND,  /* *ret, listed by a fetch started at *ret_stamp */
};
int sfs_dircache_init(struct sfs *fs); /* 0 or -ENOMEM */
void sfs_dircache_done(struct sfs *fs);
enum sfs_dc_answer sfs_dircache_lookup(struct sfs *fs, strata_ino_t parent, const char *name,
				       struct strata_attr *ret, uint64_t *ret_stamp,
				       double *ret_ttl);
/* This mount's change of parent/name, once meta answered it r: on success
 * name now exists (added: with attributes unknown here) or no longer does;
 * on failure the outcome is not known and the listing goes. */
void sfs_dircache_after(struct sfs *fs, strata_ino_t parent, const char *name, int r, bool added);

/* ---- retries ----------------------------------------------------------------
 * Transport failures (a restarted strata-meta or chunkserver) are retried
 * with backoff for up to opts.retry_ms, then reported as -EIO. Mutations
 * that are not idempotent are retried only when the request cannot have
 * been delivered (-ECONNREFUSED) or the pooled connection was stale. */
struct sfs_retry {
	uint64_t deadline_ns;
	int attempt;
};
bool sfs_is_transport_err(long r);
/* Returns true if the call should be repeated (after sleeping). */
bool sfs_retry_again(struct sfs *fs, struct sfs_retry *rt, long r, bool idempotent);
/* Maps a final error for the kernel: transport failures become -EIO. */
long sfs_final_err(long r);

/* Calls expr until it succeeds or sfs_retry_again says stop; on_retry runs
 * before each repeat. */
#define SFS_RETRYING(fs, idem, on_retry, expr)                                                     \
	({                                                                                         \
		struct sfs_retry _rt = {0};                                                        \
		__typeof__(expr) _r;                                                               \
		for (;;) {                                                                         \
			_r = (expr);                                                               \
			if (!sfs_retry_again((fs), &_rt, (long)_r, (idem)))                        \
				break;                                                             \
			on_retry;                                                                  \
		}                                                                                  \
		(__typeof__(expr))sfs_final_err((long)_r);                                         \
	})
#define SFS_CALL(fs, idem, expr) SFS_RETRYING(fs, idem, (void)0, expr)
#define SFS_IDEM true
#define SFS_ONCE false

/* SFS_CALL for a mutation sent with the operation id op (struct sfs_op *):
 * retried like a read while strata-meta keeps ids (the retry is answered,
 * not done again), like SFS_ONCE by an older one; op->resent is set from
 * the first retry on. */
#define SFS_MUTATE(fs, op, expr)                                                                   \
	SFS_RETRYING(fs, meta_keeps_opids((fs)->mc) == 1, (op)->resent = true, expr)

/* Starts a helper thread with every signal blocked. Returns 0 or -errno. */
int sfs_thread_start(pthread_t *ret, void *(*fn)(void *), void *arg);
uint64_t sfs_now_ns(void);
int64_t sfs_realtime_ns(void);

/* ---- chunk splitting (split.c; pure, unit-tested) ------------------------- */
struct sfs_seg {
	uint32_t index;	 /* chunk index */
	uint32_t off;	 /* offset within the chunk */
	uint32_t len;	 /* bytes in this chunk */
	uint64_t bufoff; /* offset within the request buffer */
};
/* Splits [off, off+len) into per-chunk segments. Returns the number of
 * segments (<= max), or -EINVAL if chunk_size is not a power of two, the
 * range overflows, or more than max segments would be needed. */
int sfs_split(uint32_t chunk_size, uint64_t off, uint64_t len, struct sfs_seg *segs, int max);
/* Bytes of a read at off of len that lie before the file length. */
uint64_t sfs_clamp_read(uint64_t size, uint64_t off, uint64_t len);
