/* cleanup.h — scope-bound cleanup helpers built on __attribute__((cleanup)).
 *
 * Declare `_cleanup_free_ char *p = NULL;` or `_cleanup_close_ int fd = -1;`
 * and the resource is released when the variable leaves scope. Use TAKE_PTR /
 * TAKE_FD to hand ownership out of the scope. */
#pragma once
#include <stdlib.h>
#include <unistd.h>
#include <errno.h>

static inline void strata_freep(void *p)
{
	free(*(void **)p);
}
static inline void strata_closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(strata_freep)
#define _cleanup_close_ _cleanup_(strata_closep)

#define TAKE_PTR(p)                                                                                \
	({                                                                                         \
		typeof(p) _tp = (p);                                                               \
		(p) = NULL;                                                                        \
		_tp;                                                                               \
	})
#define TAKE_FD(fd)                                                                                \
	({                                                                                         \
		int _tf = (fd);                                                                    \
		(fd) = -1;                                                                         \
		_tf;                                                                               \
	})

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define STRATA_MIN(a, b) ((a) < (b) ? (a) : (b))
#define STRATA_MAX(a, b) ((a) > (b) ? (a) : (b))
