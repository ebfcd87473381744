/* Status names and the thread-local error detail (see error.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

static __thread char err_buf[ERR_MSG_MAX];

const char *fx_strerror(fx_status_t status)
{
    switch (status) {
#define FX_STATUS_CASE_(name, value, text) case name: return text;
        FX_STATUS_LIST(FX_STATUS_CASE_)
#undef FX_STATUS_CASE_
    }
    return "unknown fabxfer status";
}

fx_status_t err_set(fx_status_t status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof(err_buf), fmt, ap);
    va_end(ap);
    return status;
}

fx_status_t err_prefix(fx_status_t status, const char *fmt, ...)
{
    char head[ERR_MSG_MAX], joined[2 * ERR_MSG_MAX + 4];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(head, sizeof(head), fmt, ap);
    va_end(ap);
    snprintf(joined, sizeof(joined), "%s: %s", head,
             err_buf[0] != '\0' ? err_buf : fx_strerror(status));
    memcpy(err_buf, joined, sizeof(err_buf) - 1);
    err_buf[sizeof(err_buf) - 1] = '\0';
    return status;
}

const char *err_last(void)
{
    return err_buf;
}

void err_clear(void)
{
    err_buf[0] = '\0';
}
