/* unix_seqpacket.h — the client end of the node's local protocols
 * (strata-fuse-holder, fs/fuse_holder.h; the native client,
 * fs/usrbio_proto.h): a SOCK_SEQPACKET unix socket with send and receive
 * timeouts. Depends on libc only (the native client's library uses it). */
#pragma once

/* Connects to path. Returns the socket (close-on-exec), -ENAMETOOLONG,
 * -ENOENT / -ECONNREFUSED (nobody listens), or -errno. */
int unix_seqpacket_connect(const char *path, int timeout_ms);
