/*
 * The public API: contexts, regions, address exchange and writes. Each
 * entry point checks its arguments, calls the layer below and, on failure,
 * keeps the detail in the context for fx_last_error() (entry.c).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/ctx_int.h"
#include "mem/mem.h"
#include "util/cfg.h"
#include "util/host.h"
#include "util/log.h"

static int ctx_peer_dead(void *boot, int rank)
{
    return boot_peer_dead(boot, rank);
}

/* Rank and size come from the bootstrap or the exchange, or from the
 * options with neither. */
static fx_status_t ctx_identity(struct fx_ctx *ctx, const fx_ctx_opts_t *o,
                                int *single_host)
{
    if (ctx->boot != NULL) {
        ctx->rank = ctx->boot->rank;
        ctx->size = ctx->boot->size;
        *single_host = ctx->boot->single_host;
        return FX_OK;
    }
    if (o->size < 1 || o->rank < 0 || o->rank >= o->size)
        return err_set(FX_ERR_INVALID,
                       "without a bootstrap (FABXFER_BOOTSTRAP=none, or not "
                       "started by fabxfer-run) the options must give rank "
                       "and size; got rank %d, size %d", o->rank, o->size);
    ctx->rank = o->rank;
    ctx->size = o->size;
    *single_host = o->single_host > 0;
    return FX_OK;
}

/* The application's exchange, or the named bootstrap. */
static fx_status_t ctx_channel(struct fx_ctx *ctx, const fx_ctx_opts_t *o)
{
    const char *name = o->bootstrap ? o->bootstrap : cfg_str(CFG_BOOTSTRAP);
    struct boot_app_args a = {o->exchange_allgather, o->exchange_barrier,
                              o->exchange_arg, o->rank, o->size,
                              o->single_host, ctx->timeout_ms};

    if (o->exchange_allgather == NULL && o->exchange_barrier == NULL)
        return boot_open(name, ctx->timeout_ms, &ctx->boot);
    /* An explicit other channel is a contradiction, not a preference. */
    if (o->bootstrap != NULL && strcmp(o->bootstrap, "auto") != 0 &&
        strcmp(o->bootstrap, "none") != 0)
        return err_set(FX_ERR_INVALID, "fx_ctx_opts_t: bootstrap \"%s\" "
                       "and an exchange both given; the exchange is the "
                       "channel (leave bootstrap NULL)", o->bootstrap);
    return boot_open_app(&a, &ctx->boot);
}

/* For the fabric, once it knows its provider: no GPU is no error. */
static int gpu_present(void)
{
    int n = mem_cuda_device_count();

    err_clear();
    return n > 0;
}

fx_status_t fx_ctx_create(const fx_ctx_opts_t *opts, fx_ctx_t **out)
{
    struct fab_open_args fa;
    fx_ctx_opts_t o;
    char gpu_pci[64];
    struct fx_ctx *ctx;
    int isolate = 0;
    fx_status_t st;

    err_clear();
    if (out == NULL)
        return err_set(FX_ERR_INVALID, "fx_ctx_create: ctx is NULL");
    *out = NULL;
    if ((st = opts_normalize(opts, &o)) != FX_OK)
        return st;
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for a context");
    {
        pthread_mutexattr_t ma;

        pthread_mutexattr_init(&ma);
        pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
        pthread_mutex_init(&ctx->lock, &ma);
        pthread_mutexattr_destroy(&ma);
    }
    memset(&fa, 0, sizeof(fa));
    if ((st = opts_tuning(ctx, &o, &fa)) != FX_OK)
        goto fail;
    log_warn_unknown(); /* now that the log level is the options' */
    if ((st = opts_isolation(&o, &isolate)) != FX_OK ||
        (st = opts_rails(&o, &fa, gpu_pci, sizeof(gpu_pci))) != FX_OK ||
        (st = ctx_channel(ctx, &o)) != FX_OK ||
        (st = ctx_identity(ctx, &o, &fa.single_host)) != FX_OK)
        goto fail;
    if (isolate)
        fa.single_host = 0; /* shm is not allowed */
    ctx->remote = calloc((size_t)ctx->size, sizeof(*ctx->remote));
    if (ctx->remote == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory for %d peers", ctx->size);
        goto fail;
    }
    host_identity(ctx->host, sizeof(ctx->host));
    fa.isolate = isolate;
    fa.provider = o.provider ? o.provider : cfg_str(CFG_PROVIDER);
    fa.rank = ctx->rank;
    fa.size = ctx->size;
    fa.timeout_ms = ctx->timeout_ms;
    fa.gpu_present = gpu_present;
    if ((st = fab_open(&fa, &ctx->fab)) != FX_OK)
        goto fail;
    if (isolate && opts_names_shm(fab_profile(ctx->fab)->prov)) {
        st = err_set(FX_ERR_NO_PROVIDER, "%s=1, yet the provider chosen is "
                     "%s", cfg_name(CFG_ISOLATE), fab_profile(ctx->fab)->prov);
        goto fail;
    }
    if (ctx->boot != NULL)
        fab_set_liveness(ctx->fab, ctx_peer_dead, ctx->boot);
    *out = ctx;
    return FX_OK;
fail:
    fx_ctx_destroy(ctx);
    return st;
}

void fx_ctx_destroy(fx_ctx_t *ctx)
{
    if (ctx == NULL)
        return;
    /* Nothing lands in a region once its registration goes. */
    fab_quiesce(ctx->fab);
    while (ctx->regions != NULL)
        fx_region_deregister(ctx->regions);
    for (int i = 0; ctx->remote != NULL && i < ctx->size; i++)
        remote_peer_clear(ctx, &ctx->remote[i]);
    free(ctx->remote);
    fab_close(ctx->fab);
    boot_close(ctx->boot);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

fx_status_t ctx_grow(fx_ctx_t *ctx, int size)
{
    struct remote_peer *remote;
    fx_status_t st;

    if (size < ctx->size) { /* undone: the ranks past size forgotten */
        for (int r = size; r < ctx->size; r++)
            remote_peer_clear(ctx, &ctx->remote[r]);
        fab_resize(ctx->fab, size);
        ctx->size = size;
        ctx->grown = ctx->boot != NULL && size > ctx->boot->size;
        return FX_OK;
    }
    if (size == ctx->size)
        return FX_OK;
    if ((st = fab_resize(ctx->fab, size)) != FX_OK)
        return st;
    remote = realloc(ctx->remote, (size_t)size * sizeof(*remote));
    if (remote == NULL) {
        fab_resize(ctx->fab, ctx->size);
        return err_set(FX_ERR_NOMEM, "no memory for %d peers", size);
    }
    memset(remote + ctx->size, 0,
           (size_t)(size - ctx->size) * sizeof(*remote));
    ctx->remote = remote;
    ctx->size = size;
    ctx->grown = 1;
    return FX_OK;
}

int fx_ctx_rank(const fx_ctx_t *ctx)
{
    return ctx ? ctx->rank : -1;
}

int fx_ctx_size(const fx_ctx_t *ctx)
{
    return ctx ? ctx->size : -1;
}

fx_status_t fx_ctx_peer_reset(fx_ctx_t *ctx, int rank)
{
    fx_status_t st;

    if (ctx == NULL)
        return err_set(FX_ERR_INVALID, "fx_ctx_peer_reset: ctx is NULL");
    ctx_lock(ctx);
    st = fab_peer_revive(ctx->fab, rank);
    ctx_unlock(ctx);
    return st == FX_OK ? FX_OK : ctx_fail(ctx, st);
}

const char *fx_ctx_provider(const fx_ctx_t *ctx)
{
    return ctx ? fab_profile(ctx->fab)->prov : NULL;
}

const char *fx_ctx_notify_mode(const fx_ctx_t *ctx)
{
    if (ctx == NULL)
        return NULL;
    return fab_profile(ctx->fab)->notify == FAB_NOTIFY_WRITEDATA ? "writedata"
                                                                 : "message";
}

static void region_free(struct fx_region *r)
{
    fab_mr_dereg(r->ctx->fab, &r->mr);
    mem_pinned_free(r->slab);
    if (r->shadow_owned && r->kind == FX_MEM_CUDA)
        mem_dev_free(r->shadow);
    else if (r->shadow_owned)
        free(r->shadow);
    free(r);
}

/* A host shadow: peers write into it instead of the weights. */
static fx_status_t register_host_shadow(struct fx_ctx *ctx,
                                        struct fx_region *r, size_t len)
{
    if (r->shadow == NULL) {
        if (posix_memalign(&r->shadow, 4096, len) != 0) {
            r->shadow = NULL;
            return err_set(FX_ERR_NOMEM, "no memory for a %zu-byte receive "
                           "area (FX_REGION_SHADOW)", len);
        }
        r->shadow_owned = 1;
        memset(r->shadow, 0, len);
    }
    return fab_mr_reg(ctx->fab, r->shadow, len, 1, &r->mr);
}

static fx_status_t region_create(fx_ctx_t *ctx, void *base, void *shadow,
                                 size_t len, unsigned flags,
                                 fx_mem_kind_t kind, int device,
                                 fx_region_t **out);

fx_status_t fx_region_register_shadow(fx_ctx_t *ctx, void *base,
                                      void *shadow, size_t len,
                                      fx_mem_kind_t kind, int device,
                                      fx_region_t **out)
{
    fx_status_t st;

    if (ctx == NULL || out == NULL || shadow == NULL)
        return ctx_fail(ctx, err_set(FX_ERR_INVALID,
                        "fx_region_register_shadow: NULL %s", ctx == NULL
                        ? "context" : out == NULL ? "out" : "shadow"));
    if (base != NULL && len > 0 &&
        (uintptr_t)shadow < (uintptr_t)base + len &&
        (uintptr_t)base < (uintptr_t)shadow + len)
        return ctx_fail(ctx, err_set(FX_ERR_INVALID,
                        "fx_region_register_shadow: the receive area %p "
                        "overlaps the region [%p, +%zu)", shadow, base,
                        len));
    if (kind == FX_MEM_HOST || kind == FX_MEM_CUDA) {
        st = mem_check("fx_region_register_shadow (shadow)", shadow, len,
                       kind, device);
        if (st != FX_OK)
            return ctx_fail(ctx, st);
    }
    return region_create(ctx, base, shadow, len,
                         FX_REGION_TARGET | FX_REGION_SHADOW, kind, device,
                         out);
}

fx_status_t fx_region_register_mem(fx_ctx_t *ctx, void *base, size_t len,
                                   unsigned flags, fx_mem_kind_t kind,
                                   int device, fx_region_t **out)
{
    return region_create(ctx, base, NULL, len, flags, kind, device, out);
}

static fx_status_t region_create(fx_ctx_t *ctx, void *base, void *shadow,
                                 size_t len, unsigned flags,
                                 fx_mem_kind_t kind, int device,
                                 fx_region_t **out)
{
    const unsigned known = FX_REGION_SOURCE | FX_REGION_TARGET;
    struct fx_region *r;
    fx_status_t st;

    if (ctx == NULL || out == NULL)
        return err_set(FX_ERR_INVALID, "fx_region_register: NULL argument");
    if (base == NULL || len == 0)
        return ctx_fail(ctx, err_set(FX_ERR_INVALID,
                        "fx_region_register: empty region (addr=%p, len=%zu)",
                        base, len));
    if ((flags & known) == 0 || (flags & ~(known | FX_REGION_SHADOW)) != 0)
        return ctx_fail(ctx, err_set(FX_ERR_INVALID,
                        "fx_region_register: flags 0x%x are not a mix of "
                        "FX_REGION_SOURCE, FX_REGION_TARGET and "
                        "FX_REGION_SHADOW", flags));
    if ((flags & FX_REGION_SHADOW) &&
        (flags & (FX_REGION_SOURCE | FX_REGION_TARGET)) != FX_REGION_TARGET)
        return ctx_fail(ctx, err_set(FX_ERR_INVALID,
                        "fx_region_register: FX_REGION_SHADOW is for target "
                        "regions only (flags 0x%x): a source reads the "
                        "tensors themselves", flags));
    if (kind != FX_MEM_HOST && kind != FX_MEM_CUDA)
        return ctx_fail(ctx, err_set(FX_ERR_INVALID,
                        "fx_region_register: unknown memory kind %d", kind));
    if ((st = mem_check("fx_region_register", base, len, kind, device)) !=
        FX_OK)
        return ctx_fail(ctx, st);
    if (kind == FX_MEM_CUDA && (flags & known) == known)
        return ctx_fail(ctx, err_set(FX_ERR_INVALID,
                        "fx_region_register: a CUDA region is a source or a "
                        "target, not both (the staged path gives each its own "
                        "host memory)"));
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return ctx_fail(ctx, err_set(FX_ERR_NOMEM, "no memory for a region"));
    r->ctx = ctx;
    r->flags = flags;
    r->kind = kind;
    r->device = kind == FX_MEM_CUDA ? device : -1;
    r->base = base;
    r->shadow = shadow;
    r->mr.base = base;
    r->mr.len = len;
    ctx_lock(ctx);
    if (kind == FX_MEM_HOST && (flags & FX_REGION_SHADOW))
        st = register_host_shadow(ctx, r, len);
    else if (kind == FX_MEM_HOST)
        st = fab_mr_reg(ctx->fab, base, len, (flags & FX_REGION_TARGET) != 0,
                        &r->mr);
    else
        st = ctx_register_cuda(ctx, r, len);
    if (st != FX_OK) {
        region_free(r);
        ctx_unlock(ctx);
        return ctx_fail(ctx, st);
    }
    /* The list is read by the session threads (flush_direct, slabs). */
    r->id = (flags & FX_REGION_TARGET) ? ctx->ntargets++ : UINT32_MAX;
    r->next = ctx->regions;
    ctx->regions = r;
    ctx_unlock(ctx);
    *out = r;
    return FX_OK;
}

fx_status_t fx_region_register(fx_ctx_t *ctx, void *base, size_t len,
                               unsigned flags, fx_region_t **out)
{
    return fx_region_register_mem(ctx, base, len, flags, FX_MEM_HOST, -1,
                                  out);
}

void fx_region_deregister(fx_region_t *r)
{
    struct fx_region **pp;
    struct fx_ctx *ctx;

    if (r == NULL)
        return;
    /* Under the lock: a session's pusher or progress thread may be in the
     * fabric (the domain's MR table, the count of registrations). */
    ctx = r->ctx;
    ctx_lock(ctx);
    for (pp = &ctx->regions; *pp != NULL && *pp != r; pp = &(*pp)->next)
        ;
    if (*pp == r)
        *pp = r->next;
    region_free(r);
    ctx_unlock(ctx);
}

int fx_ctx_rails(const fx_ctx_t *ctx)
{
    return ctx ? fab_rails(ctx->fab) : 0;
}

fx_status_t fx_ctx_rail(const fx_ctx_t *ctx, int rail, const char **domain,
                        uint64_t *bytes)
{
    if (ctx == NULL)
        return err_set(FX_ERR_INVALID, "fx_ctx_rail: ctx is NULL");
    /* The detail buffer is not the context's state: const stays true of
     * everything a caller can observe but fx_last_error(). */
    if (rail < 0 || rail >= fab_rails(ctx->fab))
        return ctx_fail((fx_ctx_t *)ctx, err_set(FX_ERR_RANGE,
                        "fx_ctx_rail: rail %d; this context "
                       "has %d", rail, fab_rails(ctx->fab)));
    if (domain != NULL)
        *domain = fab_rail_name(ctx->fab, rail);
    /* counted by whichever thread writes: a session's pusher too */
    ctx_lock((fx_ctx_t *)ctx);
    if (bytes != NULL)
        *bytes = fab_rail_bytes(ctx->fab, rail);
    ctx_unlock((fx_ctx_t *)ctx);
    return FX_OK;
}

fx_status_t fx_ctx_rail_info(const fx_ctx_t *ctx, int rail,
                             fx_rail_info_t *out)
{
    const struct fab_profile *prof;
    fx_rail_info_t info;

    if (ctx == NULL || out == NULL)
        return err_set(FX_ERR_INVALID, "fx_ctx_rail_info: %s is NULL",
                       ctx == NULL ? "ctx" : "out");
    if (out->struct_size < offsetof(fx_rail_info_t, domain))
        return ctx_fail((fx_ctx_t *)ctx,
                        err_set(FX_ERR_INVALID, "fx_ctx_rail_info: "
                                "struct_size %u; set it to "
                                "sizeof(fx_rail_info_t)",
                                out->struct_size));
    if (rail < 0 || rail >= fab_rails(ctx->fab))
        return ctx_fail((fx_ctx_t *)ctx, err_set(FX_ERR_RANGE,
                        "fx_ctx_rail_info: rail %d; this context has %d",
                        rail, fab_rails(ctx->fab)));
    info.struct_size = out->struct_size < sizeof(info) ? out->struct_size
                                                         : sizeof(info);
    prof = fab_path_profile(ctx->fab, fab_rail_path(ctx->fab, rail));
    info.provider = prof->prov;
    info.notify = prof->notify == FAB_NOTIFY_WRITEDATA ? "writedata"
                                                       : "message";
    info.domain = fab_rail_name(ctx->fab, rail);
    ctx_lock((fx_ctx_t *)ctx);
    info.bytes = fab_rail_bytes(ctx->fab, rail);
    info.writes = fab_rail_writes(ctx->fab, rail);
    ctx_unlock((fx_ctx_t *)ctx);
    memcpy(out, &info, info.struct_size);
    return FX_OK;
}

const char *fx_ctx_peer_path(const fx_ctx_t *ctx, int rank)
{
    int path;

    if (ctx == NULL || rank < 0 || rank >= ctx->size)
        return NULL;
    ctx_lock((fx_ctx_t *)ctx);
    path = fab_peer_path_of(ctx->fab, rank);
    ctx_unlock((fx_ctx_t *)ctx);
    return path < 0 ? NULL : fab_path_profile(ctx->fab, path)->prov;
}

uint32_t fx_region_id(const fx_region_t *r)
{
    return r ? r->id : UINT32_MAX;
}

fx_status_t fx_blob_export(fx_ctx_t *ctx, void **blob, size_t *len)
{
    fx_status_t st;

    if (ctx == NULL || blob == NULL || len == NULL)
        return err_set(FX_ERR_INVALID, "fx_blob_export: NULL argument");
    ctx_lock(ctx);
    st = blob_encode(ctx, blob, len);
    ctx_unlock(ctx);
    return ctx_fail(ctx, st);
}

void fx_blob_free(void *blob)
{
    free(blob);
}

fx_status_t fx_blob_import(fx_ctx_t *ctx, const void *blob, size_t len)
{
    if (ctx == NULL)
        return err_set(FX_ERR_INVALID, "fx_blob_import: ctx is NULL");
    return ctx_fail(ctx, blob_decode_import(ctx, blob, len, -1));
}

fx_status_t fx_ctx_exchange(fx_ctx_t *ctx)
{
    struct fx_gather *all = NULL;
    void *mine = NULL;
    size_t len;
    fx_status_t st;

    if (ctx == NULL)
        return err_set(FX_ERR_INVALID, "fx_ctx_exchange: ctx is NULL");
    /* The lock is not held across the collective: the progress thread
     * must land what other ranks write meanwhile. */
    ctx_lock(ctx);
    st = blob_encode(ctx, &mine, &len);
    ctx_unlock(ctx);
    if (st != FX_OK || (st = boot_allgatherv(ctx->boot, "fx_ctx_exchange",
                                             mine, len, &all)) != FX_OK)
        goto out;
    /* Each import locks the context; sessions keep their peers' keys
     * (blob.c). */
    for (int r = 0; r < ctx->size && st == FX_OK; r++)
        st = blob_decode_import(ctx, all->val[r], all->len[r], r);
out:
    boot_gather_free(all);
    free(mine);
    return ctx_fail(ctx, st);
}

fx_status_t fx_allgather(fx_ctx_t *ctx, const void *mine, size_t len,
                         void *all)
{
    if (ctx == NULL)
        return err_set(FX_ERR_INVALID, "fx_allgather: ctx is NULL");
    return ctx_fail(ctx, boot_allgather(ctx->boot, "fx_allgather", mine, len,
                                        all));
}

fx_status_t fx_barrier(fx_ctx_t *ctx)
{
    if (ctx == NULL)
        return err_set(FX_ERR_INVALID, "fx_barrier: ctx is NULL");
    return ctx_fail(ctx, boot_barrier(ctx->boot, "fx_barrier"));
}

fx_status_t fx_gather_set(fx_gather_t *all, int rank, const void *data,
                          size_t len)
{
    return boot_app_gather_set(all, rank, data, len);
}
