/* log.c — the daemon logger behind log.h: one line per call on stderr,
 * "2026-11-30T03:34:36.123Z ERROR strata-meta: message: errno text". */
#include "fs/log.h"
#include "fs/rpc.h"
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <stdatomic.h>

static char log_progname[64] = "strata";
static _Atomic int log_level = LOG_LVL_INFO;

void log_init(const char *progname, enum log_level level)
{
	snprintf(log_progname, sizeof(log_progname), "%s", progname);
	log_level = level;
}

void log_set_level(enum log_level level)
{
	log_level = level;
}

enum log_level log_get_level(void)
{
	return log_level;
}

int log_level_parse(const char *s)
{
	static const char *names[] = {"error", "warn", "info", "debug"};
	for (int i = 0; i < 4; i++)
		if (strcasecmp(s, names[i]) == 0)
			return i;
	return -1;
}

static void log_vmsg(enum log_level level, int err, const char *fmt, va_list ap)
{
	static const char *tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};
	if ((int)level > log_level)
		return;
	char line[2048];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	int n = snprintf(line, sizeof(line),
			 "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s: ", tm.tm_year + 1900,
			 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
			 ts.tv_nsec / 1000000, tags[level], log_progname);
	n += vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	if (n > (int)sizeof(line) - 2)
		n = sizeof(line) - 2;
	if (err < 0) {
		n += snprintf(line + n, sizeof(line) - n, ": %s", rpc_strerror(err));
		if (n > (int)sizeof(line) - 2)
			n = sizeof(line) - 2;
	}
	line[n++] = '\n';
	/* one write(2) per line keeps lines from concurrent threads whole */
	ssize_t w = write(STDERR_FILENO, line, n);
	(void)w;
}

void log_msg(enum log_level level, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_vmsg(level, err, fmt, ap);
	va_end(ap);
}

int log_msg_errno(enum log_level level, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_vmsg(level, err, fmt, ap);
	va_end(ap);
	return err;
}
