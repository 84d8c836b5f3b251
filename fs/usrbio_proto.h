/* usrbio_proto.h — the contract between the native client (sdk/c,
 * strata_usrbio.h) and the node's strata-fuse (fuse/usrbio.c): I/O on strata
 * files through shared-memory rings, without FUSE's copies, as 3FS's USRBIO.
 *
 * Two channels:
 *
 *  1. The control socket (SOCK_SEQPACKET, strata-fuse --usrbio PATH; `strata
 *     up` uses <home>/run/usrbio.sock), one datagram per message, fixed
 *     little-endian fields, file descriptors attached with SCM_RIGHTS:
 *       header   u32 magic USRBIO_MAGIC, u16 major, u16 minor, u16 type,
 *                u16 reserved (0), u32 payload length
 *       payload  u32 sq_entries, u32 cq_entries, u64 buf_size, u32 file_id,
 *                i32 status, u64 value, u64 file_size  (USRBIO_PAYLOAD)
 *     SETUP  (fds: ring memfd, submission eventfd, completion eventfd)
 *            sq_entries, cq_entries: the ring's shape (usrbio_ring_size)
 *     REG_BUF  (fd: a memfd sealed with F_SEAL_SHRINK) buf_size: its bytes;
 *            the reply's value is the buffer's index
 *     REG_FILE (fd: a file opened through the strata mount; the kernel
 *            checked the permissions at that open, and the fd's access mode
 *            is what the ring may do) — the reply's value is the file id,
 *            file_size the length strata-fuse knows
 *     UNREG_FILE file_id — operations already taken finish first
 *     REPLY  status (0 or -errno) and value / file_size
 *   Every request gets one REPLY. A newer minor may append payload fields;
 *   a newer major is refused (-EPROTO).
 *
 *  2. The rings, in the SETUP memfd (MAP_SHARED by both sides), in the
 *     machine's own byte order (both ends are on one host; the indices are
 *     atomics). Layout (usrbio_ring_size):
 *       0      u32 magic USRBIO_RING_MAGIC (informational)
 *       64     u32 sq_head   written by the server: submissions it took
 *       128    u32 sq_tail   written by the client: submissions it made
 *       192    u32 cq_head   written by the client: completions it reaped
 *       256    u32 cq_tail   written by the server: completions it made
 *       320    u32 cq_wake   written by the client: wake me (the completion
 *                            eventfd) once cq_tail reaches this index
 *       4096   sq_entries submission entries of USRBIO_SQE_SIZE bytes
 *       then   cq_entries completion entries of USRBIO_CQE_SIZE bytes
 *     Indices run freely (mod 2^32); entry i is at i & (entries - 1). The
 *     client writes an entry, then publishes sq_tail (release) and writes
 *     1 to the submission eventfd; the server posts a completion, publishes
 *     cq_tail, and writes 1 to the completion eventfd if cq_tail reached
 *     cq_wake (both sides fence between their store and their load, so a
 *     client that sets cq_wake and then finds too few completions is
 *     always woken). A client waiting for 8 completions is woken once, not
 *     8 times. Entries are
 *     encoded little-endian (usrbio_sqe_encode / usrbio_cqe_encode) like
 *     every other record.
 *
 * The server trusts nothing in shared memory: it keeps its own copy of the
 * indices it owns, copies each submission out once before checking it, and
 * stops serving a ring whose client index is impossible (more submissions
 * than entries, completions reaped that were never posted). It takes a
 * submission only when its completion will fit (in flight + unreaped <=
 * cq_entries), so a client that stops reaping stops its own ring, nobody
 * else's. A malformed submission gets an error completion.
 *
 * The functions return negative errno; they never log. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define USRBIO_MAGIC 0x4f425553u      /* "SUBO" */
#define USRBIO_RING_MAGIC 0x52425553u /* "SUBR" */
#define USRBIO_MAJOR 1
#define USRBIO_MINOR 0
#define USRBIO_HDR 16
#define USRBIO_PAYLOAD 40
#define USRBIO_MSG_MAX (USRBIO_HDR + USRBIO_PAYLOAD)

/* Limits (every one is a clear error when exceeded). */
#define USRBIO_MAX_ENTRIES 4096		  /* sq_entries and cq_entries: powers of two */
#define USRBIO_MAX_BUFS 16		  /* registered buffers per connection */
#define USRBIO_MAX_BUF_BYTES (4ull << 30) /* one buffer, and all of a connection's */
#define USRBIO_MAX_FILES 1024		  /* registered files per connection */
#define USRBIO_MAX_IO (1u << 20)	  /* bytes of one read or write */
#define USRBIO_MAX_CONNS 64		  /* clients of one strata-fuse */
#define USRBIO_TIMEOUT_MS 15000		  /* a control reply */

enum usrbio_type {
	USRBIO_SETUP = 1,
	USRBIO_REG_BUF = 2,
	USRBIO_REG_FILE = 3,
	USRBIO_UNREG_FILE = 4,
	USRBIO_REPLY = 5,
};

struct usrbio_msg {
	uint16_t type;
	uint32_t sq_entries, cq_entries; /* SETUP */
	uint64_t buf_size;		 /* REG_BUF */
	uint32_t file_id;		 /* UNREG_FILE */
	int32_t status;			 /* REPLY: 0 or -errno */
	uint64_t value;			 /* REPLY: buffer index, file id */
	uint64_t file_size;		 /* REPLY to REG_FILE */
};

/* Encodes m into buf[USRBIO_MSG_MAX]. Returns the length. */
size_t usrbio_msg_encode(const struct usrbio_msg *m, uint8_t *buf);
/* Decodes n bytes. Returns 0, -EBADMSG (malformed, unknown type) or -EPROTO
 * (another major version). */
int usrbio_msg_decode(const uint8_t *buf, size_t n, struct usrbio_msg *ret);

/* Sends m with up to 3 fds attached (nfds may be 0). MSG_DONTWAIT if
 * nonblock. Returns 0 or -errno. */
int usrbio_msg_send(int sock, const struct usrbio_msg *m, const int *fds, int nfds, bool nonblock);
/* Receives one message and up to max_fds attached fds into fds (the count
 * into *ret_nfds; any beyond max_fds are closed; unused slots are -1).
 * Returns 0, -ECONNRESET at the peer's end, -EBADMSG / -EPROTO, or -errno. */
int usrbio_msg_recv(int sock, struct usrbio_msg *ret, int *fds, int max_fds, int *ret_nfds);

/* ---- the rings ------------------------------------------------------------ */
#define USRBIO_OFF_MAGIC 0
#define USRBIO_OFF_SQ_HEAD 64
#define USRBIO_OFF_SQ_TAIL 128
#define USRBIO_OFF_CQ_HEAD 192
#define USRBIO_OFF_CQ_TAIL 256
#define USRBIO_OFF_CQ_WAKE 320
#define USRBIO_OFF_SQES 4096
#define USRBIO_SQE_SIZE 64
#define USRBIO_CQE_SIZE 16

/* Whether (sq, cq) is a shape the server accepts: powers of two, 1 <= sq <=
 * cq <= USRBIO_MAX_ENTRIES. */
bool usrbio_shape_ok(uint32_t sq_entries, uint32_t cq_entries);
/* Bytes of the ring memfd for a valid shape (page-rounded). */
size_t usrbio_ring_size(uint32_t sq_entries, uint32_t cq_entries);
/* Offset of the completion entries. */
size_t usrbio_cqes_offset(uint32_t sq_entries);

enum usrbio_op {
	USRBIO_OP_READ = 1,  /* len bytes at off into the buffer; result: bytes read */
	USRBIO_OP_WRITE = 2, /* len bytes from the buffer at off; result: len */
	USRBIO_OP_FSYNC = 3, /* as fsync(2) on the mount; result: 0 */
};
#define USRBIO_SQE_F_DATASYNC 0x1 /* FSYNC: as fdatasync(2) */

/* A submission entry (USRBIO_SQE_SIZE bytes):
 *   0 u8 op, 1 u8 flags, 2 u16 buf_index, 4 u32 file_id, 8 u64 off,
 *   16 u64 buf_off, 24 u32 len, 28 u32 reserved (0), 32 u64 user_data,
 *   40..63 reserved (0) */
struct usrbio_sqe {
	uint8_t op, flags;
	uint16_t buf_index;
	uint32_t file_id;
	uint64_t off;	  /* in the file */
	uint64_t buf_off; /* in the registered buffer */
	uint32_t len;
	uint64_t user_data; /* returned in the completion */
};
void usrbio_sqe_encode(const struct usrbio_sqe *s, uint8_t out[USRBIO_SQE_SIZE]);
/* Decodes and checks what needs no server state: op, flags, reserved bytes
 * zero, 1 <= len <= USRBIO_MAX_IO for reads and writes (0 for FSYNC), no
 * overflow of off + len or buf_off + len. Fills *ret even on failure
 * (user_data for the error completion). Returns 0 or -EINVAL. */
int usrbio_sqe_decode(const uint8_t in[USRBIO_SQE_SIZE], struct usrbio_sqe *ret);

/* A completion entry: 0 u64 user_data, 8 i32 result (bytes, or -errno),
 * 12 u32 flags (0). */
struct usrbio_cqe {
	uint64_t user_data;
	int32_t result;
};
void usrbio_cqe_encode(const struct usrbio_cqe *c, uint8_t out[USRBIO_CQE_SIZE]);
void usrbio_cqe_decode(const uint8_t in[USRBIO_CQE_SIZE], struct usrbio_cqe *ret);
