/* warm.h — the warm-start snapshots of VM sandboxes (sandboxd's qemu
 * backend; sandbox/vm/README.md): a booted guest saved once per shape and
 * restored by later creates of that shape, on this node or, when the root
 * is on the strata filesystem, on any node that mounts it.
 *
 * Layout. ROOT/KEY/ holds three files, written by one saver and never
 * changed after:
 *   state     the VM's RAM and devices (vmm_save's migration stream)
 *   disk      its writable disk as it was at the save, packed: its
 *             non-zero VM_WARM_BLOCK blocks in order (the disk's last one
 *             may be short), then their offsets (LE64 each, ascending),
 *             then a trailer: "STRVMDK1", the count (LE64), the disk's
 *             size (LE64). A snapshot of a 128 MiB disk is a few MiB to
 *             read, on any filesystem (the strata mount has no SEEK_DATA).
 *   manifest  the record below
 * KEY (vm_warm_key) hashes what the saved guest depends on: the contents of
 * the image, kernel, initramfs and VMM binary, the vCPUs, RAM, disk size and
 * accelerator. No path or mtime is in it, so two nodes with the same image
 * and guest agree on it.
 *
 * Saving (vm_warm_save_*): into ROOT/.tmp-KEY-TAG-PID-N/ (mkdir is
 * exclusive, its files are made O_EXCL), each file fsynced, the manifest
 * last, the directory fsynced, then renamed to ROOT/KEY and ROOT fsynced.
 * rename(2) of a directory onto a non-empty one fails: of two savers racing
 * (two creates, on one node or two), the first rename wins and the other
 * removes its own. A reader sees no ROOT/KEY or a complete one.
 *
 * Restoring (vm_warm_restore): the manifest's magic, version, length,
 * checksum and key; the state's size and XXH3-64 (read through before QEMU
 * reads it); the disk's trailer and index (offsets ascending, inside the
 * disk, the file exactly that long) and its checksum while it is unpacked
 * into the new VM's disk (zero pages left as holes). Any mismatch is -EBADMSG with what differs:
 * the caller removes the snapshot (vm_warm_remove) and boots.
 *
 * Manifest (VM_WARM_MANIFEST_BYTES, little-endian):
 *    0  8  magic "STRVMSNP"
 *    8  2  major version (VM_WARM_MAJOR: another one is refused)
 *   10  2  minor version (a newer one is read: its extra bytes ignored)
 *   12  4  length of the record (>= 96, <= VM_WARM_MANIFEST_MAX)
 *   16 32  key (lower-case hex)
 *   48  8  state bytes
 *   56  8  state XXH3-64
 *   64  8  disk bytes (its logical size)
 *   72  8  disk checksum: XXH3-64 over, for every VM_WARM_BLOCK-aligned
 *          block that is not all zero, its offset (LE64) then its bytes
 *   80  8  saved at (unix seconds)
 *   88  8  XXH3-64 of the record's bytes before this field (length - 8)
 * The disk checksum is the same whether the VM's disk file has holes or
 * not (a filesystem without SEEK_DATA reads the holes as zeros, which it
 * skips).
 *
 * All functions return 0 or a negative errno with the reason in e (where
 * they take one); the library never logs. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/err.h"

#define VM_WARM_MAGIC "STRVMSNP"
#define VM_WARM_MAJOR 1
#define VM_WARM_MINOR 0
#define VM_WARM_MANIFEST_BYTES 96
#define VM_WARM_MANIFEST_MAX 4096
#define VM_WARM_KEY_LEN 32	  /* hex digits of a key or a content sum */
#define VM_WARM_BLOCK (64u << 10) /* the disk checksum's and packing's block */
#define VM_WARM_DISK_MAGIC "STRVMDK1"
#define VM_WARM_DISK_TRAILER 24

/* What a saved guest depends on. The sums are content ids (hex, e.g.
 * vm_warm_file_sum): image a store image's digest or a directory's
 * conversion. */
struct vm_warm_shape {
	const char *image, *kernel, *initrd, *vmm;
	unsigned vcpus;
	uint64_t memory_mb, disk_mb;
	bool kvm;
};

/* The shape's key into ret (VM_WARM_KEY_LEN hex digits and a NUL). Returns
 * 0, -EINVAL (a sum missing or not hex). */
int vm_warm_key(const struct vm_warm_shape *s, char ret[VM_WARM_KEY_LEN + 1]);
/* XXH3-128 of the file's contents into ret (hex). Returns 0 or -errno. */
int vm_warm_file_sum(const char *path, char ret[VM_WARM_KEY_LEN + 1], struct strata_err *e);

/* The manifest as read (vm_warm_manifest_decode) or to be written. */
struct vm_warm_manifest {
	uint16_t major, minor;
	char key[VM_WARM_KEY_LEN + 1];
	uint64_t state_bytes, state_sum, disk_bytes, disk_sum, saved_at;
};
/* Encodes m into buf (VM_WARM_MANIFEST_BYTES). */
void vm_warm_manifest_encode(const struct vm_warm_manifest *m, uint8_t *buf);
/* Decodes n bytes. Returns 0, -EBADMSG (bad magic, length, checksum or
 * key), -EPROTO (another major version). */
int vm_warm_manifest_decode(const uint8_t *buf, size_t n, struct vm_warm_manifest *ret,
			    struct strata_err *e);

/* Which snapshot directory a restore read (for vm_warm_remove): its inode
 * and the XXH3-64 of its manifest's bytes (an inode number alone may be
 * reused by the next snapshot's directory). */
struct vm_warm_seen {
	uint64_t dev, ino, manifest;
};

/* Which snapshot directory dfd is (its inode, its manifest's sum). */
void vm_warm_seen_of(int dfd, struct vm_warm_seen *ret);

/* Opens the snapshot ROOT/KEY, verified: disk_fd (the new VM's disk, open
 * read-write) becomes a copy of the saved disk, *ret_state_fd the state
 * file (read it with pread or from offset 0; the caller closes it).
 * *ret_seen (may be NULL) names the directory read, once it was opened.
 * Returns 0, -ENOENT (no snapshot), -EBADMSG (it does not match its
 * manifest: what differs in e), -errno. */
int vm_warm_restore(const char *root, const char *key, int disk_fd, int *ret_state_fd,
		    struct vm_warm_seen *ret_seen, struct strata_err *e);
/* (The state fd holds a shared flock, which keeps eviction off the snapshot
 * until it and every copy of it (the VMM's) are closed; the directory's
 * mtime is set to the restore's time: its last use.) */

/* A snapshot being saved. */
struct vm_warm_save;
/* Starts saving KEY under root (made if missing): a temp directory named
 * with tag (this saver, for vm_warm_sweep). *ret holds the state file to
 * give vmm_save (vm_warm_save_state_fd). Returns 0 or -errno. */
int vm_warm_save_begin(const char *root, const char *key, const char *tag,
		       struct vm_warm_save **ret, struct strata_err *e);
int vm_warm_save_state_fd(const struct vm_warm_save *s);
/* Copies the VM's disk (disk_fd, while the guest is paused). */
int vm_warm_save_disk(struct vm_warm_save *s, int disk_fd, struct strata_err *e);
/* Syncs the files, writes the manifest and publishes the snapshot. Returns
 * 0 (published), 1 (another saver's was there first: ours is removed) or
 * -errno (ours is removed). Frees s. */
int vm_warm_save_commit(struct vm_warm_save *s, struct strata_err *e);
/* Removes what the save wrote and frees s. Accepts NULL. */
void vm_warm_save_abort(struct vm_warm_save *s);

/* Removes ROOT/KEY: renamed aside first (to a name vm_warm_sweep knows),
 * so that no reader opens half of it. With seen (a restore's), only that
 * directory: one another saver put there since is renamed back. Returns 0,
 * -ENOENT, -ESTALE (ROOT/KEY is another one now: kept), -errno. */
int vm_warm_remove(const char *root, const char *key, const char *tag,
		   const struct vm_warm_seen *seen);
/* Removes what savers left under root: the temp and removed directories
 * named with tag (this saver's earlier life) and any older than max_age_s
 * (another saver's that died). Returns how many. */
int vm_warm_sweep(const char *root, const char *tag, int64_t max_age_s);

/* Keeps the snapshots under root within max_bytes (their files' sizes):
 * removes those used least recently (their directory's mtime: the save, or
 * the last restore) until the rest fit, never keep (a key, or NULL: the
 * snapshot just saved, even alone over the bound) nor one a restore holds
 * (its state's flock, taken exclusively here before the removal: busy, it
 * is skipped; a restore that comes meanwhile finds it gone or locked and
 * boots). Within one node: flock on the strata mount is each node's own,
 * so a restore on another node of a snapshot evicted here fails its
 * verification and boots. Returns how many were removed; *ret_bytes (may
 * be NULL) what is left. */
int vm_warm_evict(const char *root, uint64_t max_bytes, const char *keep, const char *tag,
		  uint64_t *ret_bytes);
