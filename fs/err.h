/* err.h — the one error object of strata's outer boundaries.
 *
 * Inside a module, functions return 0 or a negative errno (STYLE.md rule 3).
 * Where a failure must reach a person — a CLI message, an RPC or HTTP reply,
 * a sandbox's failure reason — the function also takes a struct strata_err
 * and records the errno with one line saying what failed and on what
 * ("layer 3: digest mismatch (sha256:…)"). The first, innermost message wins:
 * callers further out may call strata_err_set again without overwriting the
 * more specific reason.
 *
 * Every function taking a struct strata_err *e accepts NULL. */
#pragma once
#include <stdarg.h>

#define STRATA_ERR_MSG_MAX 768

struct strata_err {
	int code;		      /* negative errno, 0 when nothing failed */
	char msg[STRATA_ERR_MSG_MAX]; /* one line, no trailing newline */
};

/* Records code (negative errno) and a printf-style message in e unless an
 * error is already recorded there. Returns code, so that a failure path can
 * read `return strata_err_set(e, -ENOENT, "no image '%s'", ref);`. */
int strata_err_set(struct strata_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same with a va_list. */
int strata_err_vset(struct strata_err *e, int code, const char *fmt, va_list ap);
/* Forgets whatever e holds (e.g. before a retry). */
void strata_err_clear(struct strata_err *e);
/* The message of e: its text, or strerror of its code when it has none, or
 * "" when nothing failed. Returns a pointer into e or a static string. */
const char *strata_err_msg(const struct strata_err *e);
