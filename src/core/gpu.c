/*
 * CUDA regions: registered path by path, device memory where the path's
 * provider takes FI_HMEM (the direct path) and, for a target whose peers
 * on the other paths stage, a pinned slab there (a path per pair); the
 * first one decides the context's GPU path. The engine moves what they
 * hold (program.c, slab.c).
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/ctx_int.h"
#include "mem/mem.h"
#include "util/cfg.h"
#include "util/log.h"

const char *fx_ctx_gpu_path(const fx_ctx_t *ctx)
{
    if (ctx == NULL)
        return NULL;
    switch (ctx->gpu_path) {
    case GPU_PATH_STAGED: return "staged";
    case GPU_PATH_DIRECT: return "direct";
    case GPU_PATH_MIXED: return "mixed";
    default: return NULL;
    }
}

/* Whether every path of the context registers CUDA memory. */
static int all_paths_hmem(const struct fx_ctx *ctx)
{
    for (int p = 0; p < fab_npaths(ctx->fab); p++)
        if (!fab_path_hmem(ctx->fab, p, NULL))
            return 0;
    return 1;
}

/* The direct path for r: its CUDA memory registered on every path with
 * FI_HMEM and, for a target whose peers on the other paths stage (a path
 * per pair), a pinned slab registered on those. *bad_path: the path a
 * registration failed on, or -1. */
static fx_status_t register_device(struct fx_ctx *ctx, struct fx_region *r,
                                   size_t len, int *bad_path)
{
    int target = (r->flags & FX_REGION_TARGET) != 0;
    struct mem_info mi;
    void *mem = r->base, *saved;
    fx_status_t st = FX_OK;

    *bad_path = -1;
    /* A shadow on the direct path: the NIC writes device memory of ours
     * (or the application's), never the weights. */
    if ((r->flags & FX_REGION_SHADOW) && r->shadow == NULL &&
        (st = mem_dev_alloc(r->device, len, &r->shadow)) == FX_OK)
        r->shadow_owned = 1;
    if (r->flags & FX_REGION_SHADOW)
        mem = r->shadow;
    if (st == FX_OK && target && !all_paths_hmem(ctx))
        st = mem_pinned_alloc(r->device, len, &r->slab);
    if (st == FX_OK && (st = mem_query(mem, &mi)) == FX_OK &&
        (st = mem_enter_device(r->device, &saved)) == FX_OK) {
        st = fab_mr_reg_cuda(ctx->fab, mem, r->slab, len, r->device, target,
                             !mi.managed, &r->mr, bad_path);
        mem_leave_device(saved);
    }
    /* A target must also be able to see what the NIC wrote: asked now,
     * so that auto can still stage rather than fail every wait. */
    if (st == FX_OK && target && (st = mem_rdma_flush(r->device)) != FX_OK)
        fab_mr_dereg(ctx->fab, &r->mr);
    if (st == FX_OK) {
        r->direct = 1;
        return FX_OK;
    }
    r->mr.base = r->base; /* mr_reg_rails zeroed it before failing */
    r->mr.len = len;
    mem_pinned_free(r->slab);
    r->slab = NULL;
    if (r->shadow_owned) {
        mem_dev_free(r->shadow);
        r->shadow = NULL;
        r->shadow_owned = 0;
    }
    return st;
}

/* The paths with FI_HMEM (hmem 1) or those without and why (0), for the
 * log. */
static void paths_text(const struct fx_ctx *ctx, int hmem, char *text,
                       size_t len)
{
    size_t n = 0;
    const char *why;

    text[0] = '\0';
    for (int p = 0; p < fab_npaths(ctx->fab) && n < len; p++) {
        const char *prov = fab_path_profile(ctx->fab, p)->prov;

        if (fab_path_hmem(ctx->fab, p, &why) != hmem)
            continue;
        n += (size_t)(hmem ? snprintf(text + n, len - n, "%s%s",
                                      n ? ", " : "", prov)
                           : snprintf(text + n, len - n, "%s%s (%s)",
                                      n ? "; " : "", prov, why));
    }
}

/* Until a CUDA region has registered, a path whose registration fails
 * leaves the direct path, its pairs staged (the reason logged); none
 * left is an error under direct, and stages the context under auto.
 * After, a failure is the region's. */
static fx_status_t try_direct(struct fx_ctx *ctx, struct fx_region *r,
                              size_t len)
{
    const char *var = cfg_name(CFG_GPU_PATH);
    char text[ERR_MSG_MAX], rest[ERR_MSG_MAX];
    fx_status_t st;
    int bad;

    while ((st = register_device(ctx, r, len, &bad)) != FX_OK) {
        if (ctx->gpu_path != GPU_PATH_UNDECIDED)
            return err_prefix(st, "the GPU path is %s (%s=%s chose it at "
                              "the first CUDA region)", fx_ctx_gpu_path(ctx),
                              var, ctx->gpu_want == GPU_PATH_DIRECT
                                       ? "direct" : "auto");
        if (bad < 0 || fab_npaths(ctx->fab) == 1)
            return ctx->gpu_want == GPU_PATH_DIRECT
                       ? err_prefix(st, "%s=direct", var) : st;
        log_msg(FX_LOG_WARN, "GPU path: staged over %s, because %s",
                fab_path_profile(ctx->fab, bad)->prov, err_last());
        fab_path_drop_hmem(ctx->fab, bad, err_last());
        if (fab_hmem_probe(ctx->fab, text, sizeof(text)) != FX_OK) {
            paths_text(ctx, 0, text, sizeof(text));
            return ctx->gpu_want == GPU_PATH_DIRECT
                       ? err_set(st, "%s=direct: no path registers CUDA "
                                 "memory: %s", var, text)
                       : err_set(st, "no path registers CUDA memory: %s",
                                 text);
        }
        err_clear();
    }
    if (ctx->gpu_path == GPU_PATH_UNDECIDED) {
        ctx->gpu_path = all_paths_hmem(ctx) ? GPU_PATH_DIRECT
                                            : GPU_PATH_MIXED;
        paths_text(ctx, 1, text, sizeof(text));
        paths_text(ctx, 0, rest, sizeof(rest));
        log_msg(FX_LOG_INFO, "GPU path: direct over %s (it registers CUDA "
                "memory)%s%s", text, rest[0] ? "; staged over " : "", rest);
    }
    return FX_OK;
}

/* A CUDA region: registered with the provider where the direct path
 * holds, else given what the staged path needs. The first one decides the
 * context's path, per path: under auto, a path whose provider cannot
 * register device memory stages its pairs (every path failing: the whole
 * context stages), with the reason logged; under direct, no path that
 * can is an error. */
fx_status_t ctx_register_cuda(struct fx_ctx *ctx, struct fx_region *r,
                              size_t len)
{
    const char *var = cfg_name(CFG_GPU_PATH);
    int target = (r->flags & FX_REGION_TARGET) != 0;
    char why[ERR_MSG_MAX];
    fx_status_t st;

    if (ctx->gpu_path == GPU_PATH_UNDECIDED) {
        if (ctx->gpu_want == GPU_PATH_STAGED) {
            ctx->gpu_path = GPU_PATH_STAGED;
            log_msg(FX_LOG_INFO, "GPU path: staged (%s=staged)", var);
        } else if (fab_hmem_probe(ctx->fab, why, sizeof(why)) != FX_OK) {
            if (ctx->gpu_want == GPU_PATH_DIRECT)
                return err_set(FX_ERR_UNSUPPORTED, "%s=direct: %s", var,
                               why);
            ctx->gpu_path = GPU_PATH_STAGED;
            log_msg(FX_LOG_WARN, "GPU path: staged, not direct, because %s", why);
        }
    }
    /* A shadow's receive area is one place that fx_session_apply copies
     * from: where some pairs stage, every peer writes its slab. */
    if (ctx->gpu_path != GPU_PATH_STAGED &&
        !((r->flags & FX_REGION_SHADOW) && !all_paths_hmem(ctx))) {
        if ((st = try_direct(ctx, r, len)) == FX_OK)
            return FX_OK;
        if (ctx->gpu_path != GPU_PATH_UNDECIDED ||
            ctx->gpu_want == GPU_PATH_DIRECT)
            return st;
        ctx->gpu_path = GPU_PATH_STAGED;
        log_msg(FX_LOG_WARN, "GPU path: staged, not direct, because %s", err_last());
        err_clear();
    }
    if (!target) /* read only by the GPU packer, never by the provider */
        return FX_OK;
    if (r->shadow != NULL)
        return err_set(FX_ERR_UNSUPPORTED, "fx_region_register_shadow: on "
                       "the staged GPU path the receive area is fabxfer's "
                       "pinned host slab; register with FX_REGION_SHADOW "
                       "and no shadow buffer");
    /* Peers write into a pinned host slab of the same size; the target
     * copies what arrived to the GPU before its wait returns, or, for a
     * shadow, in fx_session_apply. */
    if ((st = mem_pinned_alloc(r->device, len, &r->slab)) != FX_OK)
        return st;
    r->slab_all = 1;
    if (r->flags & FX_REGION_SHADOW)
        r->shadow = r->slab;
    return fab_mr_reg(ctx->fab, r->slab, len, 1, &r->mr);
}

