/*
 * Error detail. Every layer reports a failure by returning err_set(status,
 * "sentence naming the culprit"); the sentence lands in a thread-local
 * buffer that the public entry points copy into the context, so lower layers
 * need no context to report well.
 */
#ifndef FX_UTIL_ERROR_H
#define FX_UTIL_ERROR_H

#include <stddef.h>

#include "fabxfer.h"

#define ERR_MSG_MAX 512

fx_status_t err_set(fx_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Keep the existing detail but put "prefix: " in front of it. */
fx_status_t err_prefix(fx_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *err_last(void);
void err_clear(void);

/* Room for one escaped input in a message; longer ones end in "...". */
#define ERR_ESC_MAX 192

/* Write len bytes of s into buf (size bytes, at least 8) so that they are
 * safe inside "%s" of an error message: control bytes, DEL, '"', '\\',
 * C1 controls and bytes that are not UTF-8 become C escapes ("\n", "\x01"),
 * so that a name from a manifest or a blob can neither hide its NUL nor
 * move the terminal's cursor. Valid UTF-8 is kept as it is. Returns buf. */
const char *err_escape(char *buf, size_t size, const void *s, size_t len);
/* The same for a C string s into buf of ERR_ESC_MAX bytes. */
const char *err_esc(char *buf, const char *s);

#endif
