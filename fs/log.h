/* log.h — daemon logging. Libraries in fs/ never log; daemons log where they
 * act, naming the object and the errno text.
 *
 *   log_error_errno(r, "Failed to open chunk %s", name);   // r is -errno
 *
 * Output goes to stderr (daemons started by `strata up` have stderr redirected
 * to <home>/log/<name>.log). One line per call, prefixed with a UTC timestamp,
 * the level and the program name; writes are atomic per line. */
#pragma once
#include <stdarg.h>

enum log_level { LOG_LVL_ERROR = 0, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

/* The process-wide log level and program name: parsed configuration, the only
 * global mutable state allowed (STYLE.md rule 7). */
void log_init(const char *progname, enum log_level level);
void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* Returns the level named by s ("error", "warn", "info", "debug") or -1. */
int log_level_parse(const char *s);

void log_msg(enum log_level level, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_error(...) log_msg(LOG_LVL_ERROR, 0, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARN, 0, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, 0, __VA_ARGS__)
#define log_debug(...)                                                                             \
	do {                                                                                       \
		if (log_get_level() >= LOG_LVL_DEBUG)                                              \
			log_msg(LOG_LVL_DEBUG, 0, __VA_ARGS__);                                    \
	} while (0)
/* err is a negative errno; its text is appended as ": <strerror>". Returns err
 * so that `return log_error_errno(r, ...)` works. */
int log_msg_errno(enum log_level level, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define log_error_errno(err, ...) log_msg_errno(LOG_LVL_ERROR, (err), __VA_ARGS__)
#define log_warn_errno(err, ...) log_msg_errno(LOG_LVL_WARN, (err), __VA_ARGS__)
