/*
 * Error detail. Every layer reports a failure by returning err_set(status,
 * "sentence naming the culprit"); the sentence lands in a thread-local
 * buffer that the public entry points copy into the context, so lower layers
 * need no context to report well.
 */
#ifndef FX_CORE_ERROR_H
#define FX_CORE_ERROR_H

#include "fabxfer.h"

#define ERR_MSG_MAX 512

fx_status_t err_set(fx_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Keep the existing detail but put "prefix: " in front of it. */
fx_status_t err_prefix(fx_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *err_last(void);
void err_clear(void);

#endif
