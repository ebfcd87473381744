/*
 * The public write path: resolve (peer, region id) to the key learned at
 * exchange, refuse anything outside what the peer advertised before a byte
 * is posted, then hand over to the fabric layer.
 */
#include "core/ctx_int.h"

static fx_status_t remote_region(struct fx_ctx *ctx, int peer, uint32_t id,
                                 const struct fab_rkey **out)
{
    struct remote_peer *rp;

    if (peer < 0 || peer >= ctx->size)
        return err_set(FX_ERR_INVALID, "peer rank %d outside [0, %d)", peer,
                       ctx->size);
    rp = &ctx->remote[peer];
    if (!rp->known)
        return err_set(FX_ERR_STATE, "no blob from rank %d yet (call "
                       "fx_ctx_exchange or fx_blob_import)", peer);
    if (id >= rp->nregions)
        return err_set(FX_ERR_RANGE, "rank %d has no target region %u (it "
                       "exposes %u)", peer, id, rp->nregions);
    *out = &rp->regions[id];
    return FX_OK;
}

fx_status_t fx_write(fx_ctx_t *ctx, fx_region_t *src, size_t src_off,
                     int peer, uint32_t dst_region, uint64_t dst_off,
                     size_t len)
{
    const struct fab_rkey *rk = NULL;
    fx_status_t st;

    if (ctx == NULL || src == NULL || src->ctx != ctx)
        return ctx_fail(ctx, err_set(FX_ERR_INVALID, "fx_write: source "
                        "region is NULL or belongs to another context"));
    /* Staged CUDA memory is registered nowhere: a session's GPU packer
     * gathers it, and a provider given its address would read device
     * memory as host memory. */
    if (src->kind == FX_MEM_CUDA && !src->direct)
        return ctx_fail(ctx, err_set(FX_ERR_UNSUPPORTED, "fx_write: the "
                        "source region is CUDA memory on the staged GPU "
                        "path, which no provider reads; a session moves it "
                        "(its GPU packer gathers it), or take the direct "
                        "path where the provider registers CUDA memory "
                        "(FABXFER_GPU_PATH)"));
    if (src_off > src->mr.len || len > src->mr.len - src_off)
        return ctx_fail(ctx, err_set(FX_ERR_RANGE, "write of %zu bytes from "
                        "offset %zu falls outside its %zu-byte source "
                        "region; nothing was posted", len, src_off,
                        src->mr.len));
    /* The peer's keys are read under the lock: another thread may import
     * its blob again meanwhile (blob.c rewrites records in place). */
    ctx_lock(ctx);
    if ((st = remote_region(ctx, peer, dst_region, &rk)) != FX_OK)
        goto out;
    if (dst_off > rk->len || len > rk->len - dst_off) {
        st = err_set(FX_ERR_RANGE, "write of %zu bytes at offset %llu into "
                     "region %u of rank %d falls outside its %llu bytes; "
                     "nothing was posted", len, (unsigned long long)dst_off,
                     dst_region, peer, (unsigned long long)rk->len);
        goto out;
    }
    if (len > 0)
        st = fab_write(ctx->fab, peer, &src->mr, src_off, rk, dst_off, len,
                       NULL);
out:
    ctx_unlock(ctx);
    return ctx_fail(ctx, st);
}

/* call, with the context locked (the session threads share the fabric);
 * its failure recorded in the context. */
#define locked(ctx, call)                                                    \
    ({                                                                       \
        fx_status_t st_;                                                     \
        ctx_lock(ctx);                                                       \
        st_ = (call);                                                        \
        ctx_unlock(ctx);                                                     \
        ctx_fail(ctx, st_);                                                  \
    })

fx_status_t fx_quiet(fx_ctx_t *ctx)
{
    if (ctx == NULL)
        return err_set(FX_ERR_INVALID, "fx_quiet: ctx is NULL");
    return locked(ctx, fab_quiet(ctx->fab, -1));
}

/* A notification may be this rank's last word for a while (a fence or a
 * barrier follows, which progresses nothing): what tcp held back of it,
 * or of the writes before it, leaves now (fab_flush). test_p2p's target
 * waited out its timeout for a notification so held. */
static fx_status_t notify_flushed(struct fab *f, int peer, uint64_t tag)
{
    fx_status_t st = fab_notify(f, peer, tag);

    return st == FX_OK ? fab_flush_peer(f, peer) : st;
}

fx_status_t fx_notify(fx_ctx_t *ctx, int peer, uint64_t tag)
{
    if (ctx == NULL)
        return err_set(FX_ERR_INVALID, "fx_notify: ctx is NULL");
    return locked(ctx, notify_flushed(ctx->fab, peer, tag));
}

fx_status_t fx_wait_notify(fx_ctx_t *ctx, int peer, uint64_t *tag)
{
    uint64_t ignored;

    if (ctx == NULL)
        return err_set(FX_ERR_INVALID, "fx_wait_notify: ctx is NULL");
    return locked(ctx, fab_wait_notify(ctx->fab, peer,
                                       tag ? tag : &ignored));
}

fx_status_t fx_progress(fx_ctx_t *ctx)
{
    if (ctx == NULL)
        return err_set(FX_ERR_INVALID, "fx_progress: ctx is NULL");
    return locked(ctx, fab_progress(ctx->fab));
}
