/* fuse_holder.h — the contract between strata-fuse and strata-fuse-holder,
 * the tiny process that keeps a FUSE connection alive while strata-fuse is
 * dead (fuse/README.md, "Surviving a crash").
 *
 * The kernel aborts a FUSE connection when the last file descriptor of its
 * /dev/fuse file is closed. strata-fuse hands the holder a duplicate of its
 * descriptor (SCM_RIGHTS over a unix socket, mode 0600, peers of another
 * uid refused) together with the FUSE_INIT request the kernel sent at mount
 * time and the mount point; when strata-fuse dies the holder's reference
 * keeps the connection and the requests the dead daemon had read but not
 * answered. Its successor takes a duplicate back, replays the INIT into its
 * own libfuse session and asks the kernel to resend those requests.
 *
 * Messages (SOCK_SEQPACKET, one datagram each, little-endian):
 *   header   u32 magic FUSE_HOLDER_MAGIC, u16 version, u16 type, u32 payload length
 *   payload  (DEPOSIT, and the replies TAKE/STATUS)  u32 holder pid, u32 flags,
 *            u32 takeovers, u32 init length, u32 mount length, init bytes,
 *            mount bytes, then (appended in 2026-12; absent: 0) u64 conn id
 * DEPOSIT carries the fd; the reply to TAKE carries a duplicate of it. A
 * newer minor version may append fields; a newer major is refused. The
 * functions return negative errno; they never log. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FUSE_HOLDER_MAGIC 0x44484653u /* "SFHD" */
#define FUSE_HOLDER_VERSION 1
#define FUSE_HOLDER_INIT_MAX 512   /* bytes of the saved FUSE_INIT request */
#define FUSE_HOLDER_MOUNT_MAX 4095 /* bytes of the mount point */
#define FUSE_HOLDER_HDR 12
#define FUSE_HOLDER_MSG_MAX                                                                        \
	(FUSE_HOLDER_HDR + 20 + FUSE_HOLDER_INIT_MAX + FUSE_HOLDER_MOUNT_MAX + 8)
#define FUSE_HOLDER_TIMEOUT_MS 5000 /* a reply of the holder */

enum fuse_holder_type {
	FUSE_HOLDER_DEPOSIT = 1, /* keep this fd (replaces one held before) */
	FUSE_HOLDER_TAKE = 2,	 /* give me a duplicate (reply TAKE or NONE) */
	FUSE_HOLDER_STATUS = 3,	 /* reply STATUS */
	FUSE_HOLDER_STOP = 4,	 /* close the fd and exit (reply OK first) */
	FUSE_HOLDER_OK = 5,
	FUSE_HOLDER_NONE = 6, /* holding nothing */
	FUSE_HOLDER_BUSY = 7, /* TAKE refused: the depositor is still connected */
};

enum {
	FUSE_HOLDER_F_HOLDING = 1 << 0,	  /* has a connection */
	FUSE_HOLDER_F_CONNECTED = 1 << 1, /* ... that the kernel has not aborted */
	FUSE_HOLDER_F_SERVED = 1 << 2,	  /* the strata-fuse that deposited it is connected */
};

struct fuse_holder_info {
	uint32_t pid; /* the holder's */
	uint32_t flags;
	uint32_t takeovers; /* TAKEs answered with the fd */
	size_t init_len;
	uint8_t init[FUSE_HOLDER_INIT_MAX];
	char mount[FUSE_HOLDER_MOUNT_MAX + 1];
	/* The connection's operation-id namespace (fuse/opid.c), made by the
	 * strata-fuse that mounted it and handed to every successor; 0 from a
	 * holder that predates it (the successor makes a new one). */
	uint64_t conn_id;
};

/* Encodes a message into buf[FUSE_HOLDER_MSG_MAX] (info only for the types
 * with a payload, else NULL). Returns its length or -EINVAL (a field past
 * its limit). */
int fuse_holder_encode(uint16_t type, const struct fuse_holder_info *info, uint8_t *buf);
/* Decodes a message of n bytes: its type into *ret_type and the payload (if
 * any) into *ret_info. Returns 0, -EBADMSG (malformed) or -EPROTO (another
 * major version). */
int fuse_holder_decode(const uint8_t *buf, size_t n, uint16_t *ret_type,
		       struct fuse_holder_info *ret_info);

/* Sends one message on a connected socket, with fd attached if >= 0. */
int fuse_holder_send(int sock, uint16_t type, const struct fuse_holder_info *info, int fd);
/* Receives one message; an attached fd goes to *ret_fd (else -1; ret_fd
 * may be NULL: then an attached fd is closed). Returns 0, -ECONNRESET at
 * the peer's end, or -errno. */
int fuse_holder_recv(int sock, uint16_t *ret_type, struct fuse_holder_info *ret_info, int *ret_fd);

/* Connects to the holder at path (timeouts of FUSE_HOLDER_TIMEOUT_MS).
 * Returns the socket, or -errno (-ENOENT / -ECONNREFUSED: no holder). */
int fuse_holder_connect(const char *path);
/* One request and its reply over a fresh connection. TAKE: returns 1 and
 * the fd in *ret_fd, 0 when the holder holds nothing, -EBUSY while the
 * strata-fuse that deposited it is still connected. STATUS: 0. STOP:
 * 0 once the holder acknowledged (it exits right after). ret_info may be
 * NULL for STOP. */
int fuse_holder_call(const char *path, uint16_t type, struct fuse_holder_info *ret_info,
		     int *ret_fd);
