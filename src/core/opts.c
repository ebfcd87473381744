/*
 * fx_ctx_opts_t: its ABI (struct_size), and the tunables it and the
 * FABXFER_* environment give a context. One rule throughout: a field the
 * application set wins, a field left as fx_ctx_opts_init() set it takes
 * the environment's value, and the table's default after that. Every value
 * is checked here, on every rank, before the bootstrap is opened: a rank
 * with a bad value fails at once, never halfway through a collective that
 * the others then wait out.
 */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/ctx_int.h"
#include "mem/mem.h"
#include "util/cfg.h"
#include "util/log.h"

/* Every struct_size a release has had, oldest first. */
static const size_t opts_sizes[] = {FX_CTX_OPTS_SIZE_0_3,
                                    FX_CTX_OPTS_SIZE_0_4,
                                    sizeof(fx_ctx_opts_t)};

void fx_ctx_opts_init(fx_ctx_opts_t *opts)
{
    if (opts == NULL)
        return;
    memset(opts, 0, sizeof(*opts));
    opts->struct_size = sizeof(*opts);
    opts->rank = -1;
    opts->single_host = -1;
    opts->log_level = -1;
}

fx_status_t opts_normalize(const fx_ctx_opts_t *in, fx_ctx_opts_t *out)
{
    size_t known = 0;

    fx_ctx_opts_init(out);
    if (in == NULL)
        return FX_OK;
    for (size_t i = 0; i < sizeof(opts_sizes) / sizeof(opts_sizes[0]); i++)
        if (in->struct_size == opts_sizes[i])
            known = opts_sizes[i];
    if (known == 0)
        return err_set(FX_ERR_INVALID, "fx_ctx_create: fx_ctx_opts_t."
                       "struct_size is %u, which this fabxfer (%s, whose "
                       "struct is %zu bytes) does not know: set the options "
                       "up with fx_ctx_opts_init() and build against this "
                       "library's header", in->struct_size,
                       fx_version_string(), sizeof(*out));
    /* A 0.3 struct keeps its single_host as given: 0.3 had no exchange
     * to find it out through, so its 0 still means "not one host". */
    memcpy(out, in, known);
    out->struct_size = sizeof(*out);
    return FX_OK;
}

/* Who set a text tunable, for its errors: the option or the variable. */
static const char *who(const char *opt, const char *field, enum cfg_key key)
{
    return opt != NULL ? field : cfg_name(key);
}

/* Which of words (NULL-terminated) a text tunable is, into *i; else an
 * error naming who set it, its value, and what it may be. */
static fx_status_t one_of(const char *name, const char *value,
                          const char *const *words, const char *expected,
                          int *i)
{
    for (*i = 0; words[*i] != NULL; (*i)++)
        if (strcmp(value, words[*i]) == 0)
            return FX_OK;
    return err_set(FX_ERR_INVALID, "%s=\"%s\": %s", name, value, expected);
}

/* FABXFER_RAILS=auto or auto:N: the PCI address of CUDA device N (0),
 * whose nearest NICs become the rails. */
static fx_status_t rails_near_gpu(const char *var, const char *value,
                                  char *pci, size_t len)
{
    char *end;
    long dev = 0;
    fx_status_t st;

    if (value[4] == ':') {
        errno = 0;
        dev = strtol(value + 5, &end, 10);
        if (errno != 0 || end == value + 5 || *end != '\0' || dev < 0 ||
            dev > INT_MAX)
            return err_set(FX_ERR_INVALID, "%s=\"%s\": use auto, "
                           "auto:N (CUDA device N) or a list of domains",
                           var, value);
    } else if (value[4] != '\0') {
        return err_set(FX_ERR_INVALID, "%s=\"%s\": use auto, auto:N "
                       "(CUDA device N) or a list of domains", var, value);
    }
    if ((st = mem_cuda_pci((int)dev, pci, len)) != FX_OK)
        return err_prefix(st, "%s=%s chooses the NICs nearest a GPU", var,
                          value);
    return FX_OK;
}

fx_status_t opts_rails(const fx_ctx_opts_t *o, struct fab_open_args *fa,
                       char *pci, size_t len)
{
    fx_status_t st;

    fa->rails = o->rails != NULL ? o->rails : cfg_str(CFG_RAILS);
    if (fa->rails == NULL || strncmp(fa->rails, "auto", 4) != 0)
        return FX_OK;
    if ((st = rails_near_gpu(who(o->rails, "fx_ctx_opts_t.rails", CFG_RAILS),
                             fa->rails, pci, len)) != FX_OK)
        return st;
    fa->rails_near = pci;
    return FX_OK;
}

/* The GPU path, and so what the fabric is opened with: FI_HMEM for direct
 * wherever it is offered, for auto only on GPUDirect NICs, and never
 * without a GPU. The direct path is proven later, by registering the
 * first CUDA region. */
static fx_status_t progress_mode(struct fx_ctx *ctx);
static fx_status_t verify_mode(struct fx_ctx *ctx, const fx_ctx_opts_t *o);

static fx_status_t gpu_path_want(struct fx_ctx *ctx, const fx_ctx_opts_t *o,
                                 enum fab_hmem_want *hmem)
{
    static const char *const words[] = {"staged", "direct", "auto", NULL};
    static const int path[] = {GPU_PATH_STAGED, GPU_PATH_DIRECT,
                               GPU_PATH_UNDECIDED};
    static const enum fab_hmem_want asks[] = {FAB_HMEM_NO, FAB_HMEM_ANY,
                                              FAB_HMEM_RDMA};
    const char *want = o->gpu_path ? o->gpu_path : cfg_str(CFG_GPU_PATH);
    fx_status_t st;
    int i;

    *hmem = FAB_HMEM_NO;
    if ((st = one_of(who(o->gpu_path, "fx_ctx_opts_t.gpu_path",
                         CFG_GPU_PATH), want, words,
                     "use direct, staged or auto", &i)) != FX_OK)
        return st;
    ctx->gpu_want = path[i];
    *hmem = asks[i];
    return FX_OK;
}

/* The level: a misspelt FABXFER_LOG would silently log nothing. */
static fx_status_t log_level(const fx_ctx_opts_t *o)
{
    const char *v = cfg_str(CFG_LOG);

    if (o->log_level >= 0) {
        if (o->log_level > FX_LOG_DEBUG)
            return err_set(FX_ERR_INVALID, "fx_ctx_opts_t.log_level=%d: "
                           "use FX_LOG_NONE (0) to FX_LOG_DEBUG (4), or -1 "
                           "for %s", o->log_level, cfg_name(CFG_LOG));
        log_set_level((fx_log_level_t)o->log_level);
        return FX_OK;
    }
    if (log_level_named(v) >= 0)
        return FX_OK;
    return err_set(FX_ERR_INVALID, "%s=\"%s\": use none, error, warn, info "
                   "or debug", cfg_name(CFG_LOG), v);
}

/* An option's integer within the table's bounds of its variable, or the
 * variable itself where the option is unset (0). */
static fx_status_t opt_or_env(enum cfg_key key, const char *field,
                              long long v, long long *out)
{
    long long min, max;
    long env;
    fx_status_t st;

    if (v == 0) {
        if (key == CFG_BUCKET_SIZE) {
            size_t sz;

            st = cfg_size(key, &sz);
            *out = (long long)sz;
            return st;
        }
        st = cfg_int(key, &env);
        *out = env;
        return st;
    }
    cfg_bounds(key, &min, &max);
    if (v < min || v > max)
        return err_set(FX_ERR_INVALID, "fx_ctx_opts_t.%s=%lld is outside "
                       "%lld to %lld, the bounds of %s", field, v, min, max,
                       cfg_name(key));
    *out = v;
    return FX_OK;
}

fx_status_t opts_tuning(struct fx_ctx *ctx, const fx_ctx_opts_t *o,
                        struct fab_open_args *fa)
{
    static const char *const notify_words[] = {"auto", "writedata",
                                               "message", NULL};
    static const char *const copy_words[] = {"auto", "target", "both",
                                             NULL};
    long long timeout, depth, bucket;
    long spin = 0, iov_max = 0, thread = 0;
    fx_status_t st;
    int i;

    if ((st = opt_or_env(CFG_TIMEOUT_MS, "timeout_ms", o->timeout_ms,
                         &timeout)) != FX_OK ||
        (st = opt_or_env(CFG_BUCKET_DEPTH, "bucket_depth", o->bucket_depth,
                         &depth)) != FX_OK ||
        (st = opt_or_env(CFG_BUCKET_SIZE, "bucket_size",
                         o->bucket_size > (uint64_t)LLONG_MAX
                             ? LLONG_MAX : (long long)o->bucket_size,
                         &bucket)) != FX_OK ||
        (st = log_level(o)) != FX_OK)
        return st;
    ctx->timeout_ms = (int)timeout;
    ctx->tune.bucket_depth = (int)depth;
    ctx->tune.bucket_size = (size_t)bucket;
    fa->tuning.notify = o->notify != NULL ? o->notify : cfg_str(CFG_NOTIFY);
    if ((st = one_of(who(o->notify, "fx_ctx_opts_t.notify", CFG_NOTIFY),
                     fa->tuning.notify, notify_words,
                     "expected auto, writedata or message", &i)) != FX_OK ||
        (st = one_of(cfg_name(CFG_SHM_COPY), cfg_str(CFG_SHM_COPY),
                     copy_words, "expected auto, target or both",
                     &fa->tuning.shm_copy)) != FX_OK ||
        (st = cfg_int(CFG_SPIN_US, &spin)) != FX_OK ||
        (st = cfg_size(CFG_CHUNK_SIZE, &fa->tuning.chunk)) != FX_OK ||
        (st = cfg_long(CFG_IOV_MAX, 0, FAB_IOV_MAX, &iov_max)) != FX_OK ||
        (st = cfg_size(CFG_PACK_MAX, &ctx->tune.pack_max)) != FX_OK ||
        (st = cfg_int(CFG_PACK_THREAD, &thread)) != FX_OK ||
        (st = gpu_path_want(ctx, o, &fa->hmem)) != FX_OK)
        return st;
    fa->spin_us = (int)spin;
    fa->tuning.iov_max = (size_t)iov_max;
    ctx->tune.pack_thread = (int)thread;
    if ((st = verify_mode(ctx, o)) != FX_OK)
        return st;
    return progress_mode(ctx);
}

/* FABXFER_VERIFY and _EVERY: what every version's checksums cover. */
static fx_status_t verify_mode(struct fx_ctx *ctx, const fx_ctx_opts_t *o)
{
    static const char *const words[] = {"auto", "full", "sample", "off",
                                        NULL};
    static const int verify[] = {ENG_VERIFY_SAMPLE, ENG_VERIFY_FULL,
                                 ENG_VERIFY_SAMPLE, ENG_VERIFY_OFF};
    const char *mode = o->verify ? o->verify : cfg_str(CFG_VERIFY);
    long every, threads;
    fx_status_t st;
    int i;

    if ((st = cfg_int(CFG_VERIFY_EVERY, &every)) != FX_OK ||
        (st = cfg_int(CFG_VERIFY_THREADS, &threads)) != FX_OK)
        return st;
    ctx->tune.verify.every = (uint32_t)every;
    ctx->tune.verify_threads = (int)threads;
    ctx->tune.verify_auto = strcmp(mode, "auto") == 0;
    if ((st = one_of(who(o->verify, "fx_ctx_opts_t.verify", CFG_VERIFY),
                     mode, words, "expected auto, full, sample or off",
                     &i)) != FX_OK)
        return st;
    ctx->tune.verify.mode = verify[i];
    return FX_OK;
}

/* FABXFER_PROGRESS and _PROGRESS_US, for the sessions' progress thread. */
static fx_status_t progress_mode(struct fx_ctx *ctx)
{
    static const char *const words[] = {"auto", "thread", "call", NULL};
    static const int progress[] = {-1, 1, 0};
    const char *mode = cfg_str(CFG_PROGRESS);
    long us;
    fx_status_t st;
    int i;

    if ((st = cfg_int(CFG_PROGRESS_US, &us)) != FX_OK)
        return st;
    ctx->tune.progress_us = us;
    if ((st = one_of(cfg_name(CFG_PROGRESS), mode, words,
                     "expected auto, thread or call", &i)) != FX_OK)
        return st;
    ctx->tune.progress = progress[i];
    return FX_OK;
}

/* Whether name (a provider, layered or not) is or contains shm. */
int opts_names_shm(const char *name)
{
    size_t n;

    for (; name != NULL && *name != '\0'; name += n + (name[n] == ';')) {
        n = strcspn(name, ";");
        if (n == 3 && strncasecmp(name, "shm", 3) == 0)
            return 1;
    }
    return 0;
}

/* FABXFER_ISOLATE=1: shm lets every process of the same user on this host
 * read and write this one's memory, registered or not (its RMA is
 * cross-memory attach, which checks no key), so it is never taken: not
 * chosen automatically (the fabric is told shm is not allowed, as for a
 * job spread over hosts), and refused here when named, before the
 * bootstrap opens. */
fx_status_t opts_isolation(const fx_ctx_opts_t *o, int *isolate)
{
    char ebuf[ERR_ESC_MAX];
    const char *prov = o->provider ? o->provider : cfg_str(CFG_PROVIDER);
    long v = 0;
    fx_status_t st;

    if ((st = cfg_int(CFG_ISOLATE, &v)) != FX_OK)
        return st;
    *isolate = (int)v;
    if (*isolate && opts_names_shm(prov))
        return err_set(FX_ERR_INVALID, "%s=\"%s\" is refused with %s=1: "
                       "shm isolates nothing between processes of the same "
                       "user on this host (CMA: any of them may read or "
                       "write this process's memory, registered or not); "
                       "choose another provider (tcp;ofi_rxm) or unset %s",
                       o->provider ? "fx_ctx_opts_t.provider"
                                   : cfg_name(CFG_PROVIDER),
                       err_esc(ebuf, prov), cfg_name(CFG_ISOLATE),
                       cfg_name(CFG_ISOLATE));
    return FX_OK;
}
