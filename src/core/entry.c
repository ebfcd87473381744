/*
 * What every public entry point shares: the library's version, the
 * context's lock, and its last error (ctx_fail keeps the detail of a
 * failed call for fx_last_error). Apart from ctx.c, which makes contexts
 * with blob.c and opts.c: those lock and name the version too.
 */
#include <pthread.h>
#include <string.h>

#include "core/ctx_int.h"
#include "util/log.h"

#define STR_(x) #x
#define STR(x) STR_(x)

uint32_t fx_version(void)
{
    return FX_VERSION;
}

const char *fx_version_string(void)
{
    return STR(FX_VERSION_MAJOR) "." STR(FX_VERSION_MINOR) "." STR(
        FX_VERSION_PATCH);
}

const char *fx_last_error(const fx_ctx_t *ctx)
{
    return ctx != NULL ? ctx->errmsg : err_last();
}

void ctx_lock(struct fx_ctx *ctx)
{
    if (ctx != NULL)
        pthread_mutex_lock(&ctx->lock);
}

void ctx_unlock(struct fx_ctx *ctx)
{
    if (ctx != NULL)
        pthread_mutex_unlock(&ctx->lock);
}

fx_status_t ctx_fail(struct fx_ctx *ctx, fx_status_t st)
{
    if (st != FX_OK && ctx != NULL) {
        memcpy(ctx->errmsg, err_last(), sizeof(ctx->errmsg));
        LOG_ERROR("%s", ctx->errmsg);
    }
    return st;
}
