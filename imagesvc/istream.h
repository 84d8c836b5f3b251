/* istream.h — the decompression front-end of layer import.
 *
 * A layer arrives as a byte stream: gzip (RFC 1952, possibly multi-member),
 * zstd (one or more frames) or a plain tar. istream_open() peeks at the first
 * bytes, picks the decoder by magic and then hands out decompressed bytes in
 * bounded memory (one 64 KiB input buffer plus the decoder state; zstd windows
 * are capped at 2^27 bytes). Every stream has a limit on its expanded size, so
 * a decompression bomb ends with -EFBIG instead of filling the disk.
 *
 * Errors are negative errno: -EBADMSG for corrupt or truncated streams,
 * -EFBIG for the size limit, -ENOMEM, or whatever the source returned.
 * istream_error() names the reason in words. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A byte source: returns bytes read (>0), 0 at end of stream, or -errno. */
typedef ssize_t (*img_read_fn)(void *ctx, void *buf, size_t n);

enum istream_kind { ISTREAM_PLAIN, ISTREAM_GZIP, ISTREAM_ZSTD };

struct istream;

/* Opens a decoder over fn/ctx (not owned). max_out bounds the decompressed
 * size (0 = unlimited). Returns 0 and the stream in *ret (free with
 * istream_free), or a negative errno (the source's error, -ENOMEM). */
int istream_open(img_read_fn fn, void *ctx, uint64_t max_out, struct istream **ret);
/* Returns up to n decompressed bytes (>0), 0 at the clean end of the stream,
 * or a negative errno (see above). Errors are sticky. */
ssize_t istream_read(struct istream *s, void *buf, size_t n);
/* Adapter with the img_read_fn signature (ctx is a struct istream *). */
ssize_t istream_read_fn(void *ctx, void *buf, size_t n);
enum istream_kind istream_kind(const struct istream *s);
const char *istream_kind_name(enum istream_kind k);
/* Returns the reason of the last error in words (static or owned by s). */
const char *istream_error(const struct istream *s);
/* Same, with a void * argument (for tar_reader_describe_source). */
const char *istream_error_fn(void *ctx);
/* Returns the number of decompressed bytes handed out so far. */
uint64_t istream_total_out(const struct istream *s);
/* Frees s; accepts NULL; returns NULL. */
struct istream *istream_free(struct istream *s);

/* A source over a file descriptor (ctx is an int * holding the fd). */
ssize_t img_fd_read(void *ctx, void *buf, size_t n);
