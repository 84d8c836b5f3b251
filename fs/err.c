/* err.c — struct strata_err (see err.h). */
#include "fs/err.h"

#include <stdio.h>
#include <string.h>

int strata_err_vset(struct strata_err *e, int code, const char *fmt, va_list ap)
{
	if (!e || e->code != 0)
		return code;
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	e->code = code;
	return code;
}

int strata_err_set(struct strata_err *e, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	strata_err_vset(e, code, fmt, ap);
	va_end(ap);
	return code;
}

void strata_err_clear(struct strata_err *e)
{
	if (!e)
		return;
	e->code = 0;
	e->msg[0] = '\0';
}

const char *strata_err_msg(const struct strata_err *e)
{
	if (!e || e->code == 0)
		return "";
	if (e->msg[0])
		return e->msg;
	return strerror(-e->code);
}
