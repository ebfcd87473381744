/*
 * fabxfer: one-sided RDMA writes of model weights between GPU jobs, over
 * libfabric (efa, verbs;ofi_rxm, cxi; tcp;ofi_rxm and shm without RDMA).
 *
 * This is the only installed header. Every handle is opaque; every call
 * returns an fx_status_t (0 is success, errors are negative) and, on failure,
 * leaves a sentence naming the culprit in fx_last_error().
 *
 * Threading: a context and everything made from it is used by one thread at
 * a time (the caller serialises); different contexts are independent. The
 * threads fabxfer starts itself (a session's pusher and progress thread)
 * take the context's lock, and so do the calls that touch the fabric.
 */
#ifndef FABXFER_H
#define FABXFER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FX_EXPORT __attribute__((visibility("default")))
#else
#define FX_EXPORT
#endif

/* Compile-time API version; fx_version() gives the library's at run time. */
#define FX_VERSION_MAJOR 0
#define FX_VERSION_MINOR 7
#define FX_VERSION_PATCH 0
#define FX_VERSION_ENCODE(maj, min, pat) (((maj) << 16) | ((min) << 8) | (pat))
#define FX_VERSION \
    FX_VERSION_ENCODE(FX_VERSION_MAJOR, FX_VERSION_MINOR, FX_VERSION_PATCH)

/* Status codes. 0 is success, every error is negative. */
#define FX_STATUS_LIST(X)                                                    \
    X(FX_OK,               0, "success")                                    \
    X(FX_ERR_INVALID,     -1, "invalid argument")                           \
    X(FX_ERR_NOMEM,       -2, "out of memory")                              \
    X(FX_ERR_NO_PROVIDER, -3, "no usable libfabric provider")               \
    X(FX_ERR_UNSUPPORTED, -4, "operation not supported by this provider or build") \
    X(FX_ERR_REGISTER,    -5, "memory registration failed")                 \
    X(FX_ERR_RANGE,       -6, "range outside a registered region")          \
    X(FX_ERR_BLOB,        -7, "incompatible or corrupt peer blob")          \
    X(FX_ERR_TIMEOUT,     -8, "timed out waiting for a peer")               \
    X(FX_ERR_PEER,        -9, "a peer failed or an operation to it failed") \
    X(FX_ERR_FABRIC,     -10, "libfabric call failed")                      \
    X(FX_ERR_BOOTSTRAP,  -11, "bootstrap (out-of-band exchange) failed")    \
    X(FX_ERR_STATE,      -12, "call not valid in the current state")        \
    X(FX_ERR_SYSTEM,     -13, "operating system call failed")              \
    X(FX_ERR_DEVICE,     -14, "GPU memory or CUDA call failed")           \
    X(FX_ERR_VERIFY,     -15, "bytes did not match their checksum")

typedef enum fx_status {
#define FX_STATUS_ENUM_(name, value, text) name = (value),
    FX_STATUS_LIST(FX_STATUS_ENUM_)
#undef FX_STATUS_ENUM_
} fx_status_t;

typedef struct fx_ctx fx_ctx_t;       /* one per process: fabric + bootstrap */
typedef struct fx_region fx_region_t; /* memory registered once, reused */

/* What a region is for. A region may be both. */
enum fx_region_flags {
    FX_REGION_SOURCE = 1u << 0, /* bytes are written from it */
    FX_REGION_TARGET = 1u << 1, /* peers write into it (remote write only,
                                 * never remote read) */
    FX_REGION_SHADOW = 1u << 2, /* with FX_REGION_TARGET: peers write into
                                 * a receive area of the same size that
                                 * fabxfer allocates (host memory for a
                                 * host region; the pinned slab of the
                                 * staged GPU path; device memory on the
                                 * direct path), and the region's own
                                 * memory changes only in
                                 * fx_session_apply(). A session's
                                 * target pieces on a rank are all in
                                 * shadow regions or none (set-up
                                 * refuses a mix) */
};

/* Where a region's memory lives. */
typedef enum fx_mem_kind {
    FX_MEM_HOST = 0,
    FX_MEM_CUDA = 1, /* CUDA device memory (cudaMalloc, cuMemAlloc) */
} fx_mem_kind_t;

/* The application's own out-of-band exchange, for jobs that no launcher
 * of fabxfer's started (Ray actors, torch.distributed, Kubernetes, MPI):
 * sessions run their collectives through these two callbacks.
 *
 * allgather: every rank calls it with its own bytes (len differs by rank,
 * may be 0); before returning 0 it hands every rank's bytes, its own
 * included, to fx_gather_set(all, rank, data, len), which copies them.
 * barrier: returns 0 once every rank has entered it.
 * Both return 0 on success; a negative fx_status_t (FX_ERR_TIMEOUT,
 * FX_ERR_PEER, ...) is passed on as it is, any other non-zero value as
 * FX_ERR_BOOTSTRAP, with a message naming the collective. fabxfer cannot
 * interrupt a callback: one that never returns hangs the call that made
 * it, so bound them by the application's own timeout. Every rank makes
 * the same calls in the same order, from the thread that uses the
 * context. */
typedef struct fx_gather fx_gather_t;
typedef int (*fx_allgather_fn)(void *arg, const void *mine, size_t len,
                               fx_gather_t *all);
typedef int (*fx_barrier_fn)(void *arg);
/* FX_ERR_INVALID for a rank outside the job or given twice. all is good
 * only until the callback it was given to returns: a later call returns
 * FX_ERR_STATE without touching it (unless a later allgather's handle
 * took its address: never keep one). Threads of the callback may call it
 * at once; they take turns. */
FX_EXPORT fx_status_t fx_gather_set(fx_gather_t *all, int rank,
                                    const void *data, size_t len);

/* Options for fx_ctx_create(). Call fx_ctx_opts_init() first. A field left
 * as fx_ctx_opts_init() set it takes its value from the FABXFER_*
 * environment (or the variable's default); a field set here wins over the
 * environment, since a program that sets it means it.
 *
 * ABI: struct_size says which fields the caller knows. A program built
 * against an older fabxfer passes its smaller struct and the fields it
 * lacks take their defaults; a struct_size this library does not know
 * (larger, or between versions) is refused. */
typedef struct fx_ctx_opts {
    uint32_t struct_size; /* set by fx_ctx_opts_init(), for ABI growth */
    const char *provider; /* e.g. "tcp;ofi_rxm"; NULL: FABXFER_PROVIDER or
                           * the preference order */
    const char *bootstrap; /* "local", "pmix", "none", "auto"; NULL:
                            * FABXFER_BOOTSTRAP; with an exchange, NULL,
                            * "auto" or "none" (the exchange replaces it) */
    int rank;              /* with an exchange or bootstrap "none": this
                            * process's rank */
    int size;              /* ... and the number of ranks */
    int single_host;       /* ... 1 if all ranks share this host (lets shm
                            * be chosen), 0 if not; -1 (the default): with
                            * an exchange, found out through it by
                            * comparing hosts; without, 0 */
    int timeout_ms;        /* 0: FABXFER_TIMEOUT_MS */
    /* ---- since 0.4 ---- */
    fx_allgather_fn exchange_allgather; /* both, or neither */
    fx_barrier_fn exchange_barrier;
    void *exchange_arg;    /* passed to both callbacks */
    int log_level;         /* fx_log_level_t; -1: FABXFER_LOG. The sink is
                            * the process's: the last context created with
                            * a level sets it */
    int bucket_depth;      /* 0: FABXFER_BUCKET_DEPTH */
    uint64_t bucket_size;  /* bytes; 0: FABXFER_BUCKET_SIZE */
    const char *notify;    /* NULL: FABXFER_NOTIFY */
    const char *gpu_path;  /* NULL: FABXFER_GPU_PATH */
    const char *rails;     /* NULL: FABXFER_RAILS */
    /* ---- since 0.7 ---- */
    const char *verify;    /* "auto", "full", "sample", "off"; NULL:
                            * FABXFER_VERIFY */
} fx_ctx_opts_t;

/* struct_size of fabxfer 0.3's fx_ctx_opts_t, the first this library
 * accepts. */
#define FX_CTX_OPTS_SIZE_0_3 \
    (offsetof(fx_ctx_opts_t, timeout_ms) + sizeof(int))
/* ... and of 0.4 to 0.6's */
#define FX_CTX_OPTS_SIZE_0_4 \
    (offsetof(fx_ctx_opts_t, rails) + sizeof(const char *))

/* Library */
FX_EXPORT uint32_t fx_version(void);
FX_EXPORT const char *fx_version_string(void);
FX_EXPORT const char *fx_strerror(fx_status_t status);
/* The last error's detail for this context; with ctx NULL, the calling
 * thread's last error (for calls that failed before a context existed). */
FX_EXPORT const char *fx_last_error(const fx_ctx_t *ctx);

typedef enum fx_log_level {
    FX_LOG_NONE = 0, FX_LOG_ERROR, FX_LOG_WARN, FX_LOG_INFO, FX_LOG_DEBUG
} fx_log_level_t;
typedef void (*fx_log_fn)(fx_log_level_t level, const char *msg, void *arg);
/* Replace the default sink (stderr, filtered by FABXFER_LOG). NULL restores
 * it. The callback sees every message at or above the FABXFER_LOG level. */
FX_EXPORT void fx_set_log_callback(fx_log_fn fn, void *arg);

/* Configuration: every FABXFER_* variable, its default and one line of doc.
 * Iterate with index 0, 1, ... until it returns FX_ERR_RANGE. */
FX_EXPORT fx_status_t fx_config_describe(int index, const char **name,
                                         const char **default_value,
                                         const char **doc);

/* Context. Its calls that touch the fabric (regions, blobs, exchanges,
 * writes) take the context's lock in turn, as a session's threads do:
 * they may come from several threads, and wait for a push in flight;
 * fx_last_error() then holds whichever failed last. A session's own
 * calls come from one thread at a time. fx_ctx_destroy comes last, after
 * fx_session_destroy of each of its sessions, with no other call of the
 * context running. */
FX_EXPORT void fx_ctx_opts_init(fx_ctx_opts_t *opts);
FX_EXPORT fx_status_t fx_ctx_create(const fx_ctx_opts_t *opts, fx_ctx_t **ctx);
FX_EXPORT void fx_ctx_destroy(fx_ctx_t *ctx);
FX_EXPORT int fx_ctx_rank(const fx_ctx_t *ctx);
FX_EXPORT int fx_ctx_size(const fx_ctx_t *ctx);
FX_EXPORT const char *fx_ctx_provider(const fx_ctx_t *ctx);
/* A peer that failed by a timeout (FX_ERR_TIMEOUT: silent for
 * FABXFER_TIMEOUT_MS, or a write or message to it that the provider gave
 * up on with FI_ETIMEDOUT) stays failed, so that later calls about it fail at
 * once, until the application resets it here: call this only once the
 * application's own exchange says the peer is back and no longer reads
 * what this rank writes (a target still checking an old version would see
 * it overwritten). The next push then writes to it again. FX_ERR_STATE if
 * the failure was final (an error completion, the launcher's word) or if
 * writes of this rank toward it are still unanswered. */
FX_EXPORT fx_status_t fx_ctx_peer_reset(fx_ctx_t *ctx, int rank);
/* "writedata" or "message": how targets learn that bytes arrived (with
 * a list of providers: "message" where any path's pairs hear messages;
 * fx_ctx_rail_info gives each path's). */
FX_EXPORT const char *fx_ctx_notify_mode(const fx_ctx_t *ctx);
/* Rails (NICs) this context stripes writes over (FABXFER_RAILS), and for
 * rail i (0 <= i < fx_ctx_rails) its domain name and the bytes this rank
 * has written through it; FX_ERR_RANGE past the last rail. */
FX_EXPORT int fx_ctx_rails(const fx_ctx_t *ctx);
FX_EXPORT fx_status_t fx_ctx_rail(const fx_ctx_t *ctx, int rail,
                                  const char **domain, uint64_t *bytes);
/* Paths per pair: with FABXFER_PROVIDER (or fx_ctx_opts_t.provider) a
 * list, such as "shm,efa,tcp;ofi_rxm", a rank opens a path (one rail) for
 * each listed provider its node offers, and each pair of ranks takes the
 * first of a fixed order that both offer and that reaches: shm (the same
 * host only: boot id and host name), efa, cxi, verbs;ofi_rxm, any other,
 * tcp;ofi_rxm, tcp. fx_ctx_provider then gives the opened list.
 * The provider of the path this rank takes to rank ("shm", "tcp;ofi_rxm";
 * its own for itself); NULL until that rank's blob came in. */
FX_EXPORT const char *fx_ctx_peer_path(const fx_ctx_t *ctx, int rank);
/* A rail's provider (its path), domain, the bytes and writes this rank
 * posted through it, and how its path's pairs learn of writes
 * ("writedata" or "message": fx_ctx_notify_mode per path); FX_ERR_RANGE
 * past the last rail. The struct grows at its end: set struct_size to
 * sizeof(fx_rail_info_t). */
typedef struct fx_rail_info {
    uint32_t struct_size;
    const char *provider;
    const char *domain;
    uint64_t bytes;
    uint64_t writes;
    const char *notify;
} fx_rail_info_t;
FX_EXPORT fx_status_t fx_ctx_rail_info(const fx_ctx_t *ctx, int rail,
                                       fx_rail_info_t *out);

/* Regions: register once, then address tensors as (region, offset). */
FX_EXPORT fx_status_t fx_region_register(fx_ctx_t *ctx, void *base, size_t len,
                                         unsigned flags, fx_region_t **region);
/* The same for memory of a given kind: device is the CUDA device ordinal
 * (ignored for host memory). The pointer must be what is declared, on that
 * device, and [base, base+len) must lie in one allocation. How CUDA memory
 * moves (FABXFER_GPU_PATH): "direct" registers it with the provider
 * (FI_HMEM); "staged" goes through pinned host buckets on the source and a
 * pinned host slab on the target, copied to the device before
 * fx_session_wait() returns. */
FX_EXPORT fx_status_t fx_region_register_mem(fx_ctx_t *ctx, void *base,
                                             size_t len, unsigned flags,
                                             fx_mem_kind_t kind, int device,
                                             fx_region_t **region);
/* A shadow target region (FX_REGION_TARGET | FX_REGION_SHADOW) whose
 * receive area the application gives: shadow is len bytes of the same kind
 * and device as base, not overlapping it, and stays allocated while the
 * region is registered. Memory the engine already owns (a spare weight
 * buffer) saves fabxfer's allocation. FX_ERR_UNSUPPORTED for CUDA memory
 * on the staged path, whose receive area is its pinned host slab (pass
 * FX_REGION_SHADOW to fx_region_register_mem instead). */
FX_EXPORT fx_status_t fx_region_register_shadow(fx_ctx_t *ctx, void *base,
                                                void *shadow, size_t len,
                                                fx_mem_kind_t kind,
                                                int device,
                                                fx_region_t **region);
/* "direct" or "staged": the path CUDA regions of this context take, decided
 * at the first CUDA region; "mixed" where the context opened several
 * providers and only some register CUDA memory (their pairs direct, the
 * others' staged: providers.md); NULL before. fx_last_error() is
 * untouched. */
FX_EXPORT const char *fx_ctx_gpu_path(const fx_ctx_t *ctx);
/* Deregistering a target region that peers have imported leaves them with
 * a stale key: deregister target regions only when tearing down. A region
 * bound in a session stays registered until fx_session_destroy; another
 * may go while a session's threads run (this waits for a push in flight). */
FX_EXPORT void fx_region_deregister(fx_region_t *region);
/* A target region's id, which peers name in fx_write(). Ids are given in
 * registration order, from 0, among this context's target regions. */
FX_EXPORT uint32_t fx_region_id(const fx_region_t *region);

/* Address exchange. fx_ctx_exchange() publishes this rank's blob (endpoint
 * address and target regions) through the bootstrap or the application's
 * exchange and imports every peer's: call it on every rank after
 * registering target regions.
 * With neither ("none"), move the blobs yourself: export on each
 * rank, carry them (Ray, torch.distributed, Kubernetes...), import on the
 * others. A blob is refused if it comes from another fabxfer version,
 * another provider or another notification mode (FABXFER_NOTIFY).
 * Register every target region before exporting: region ids are not
 * reused, and a blob names the regions that existed when it was made.
 * Either may run again, also while sessions of the context are set up
 * and push or serve (it waits for a push in flight): a known rank's blob
 * with the same regions changes nothing, one that lists other regions
 * serves fx_write from then on, while a session set up before keeps the
 * keys it was set up with (kept until fx_ctx_destroy); set up a new
 * session to write to the new regions. A known rank's blob with another
 * address or secret is refused (FX_ERR_BLOB). */
FX_EXPORT fx_status_t fx_ctx_exchange(fx_ctx_t *ctx);
FX_EXPORT fx_status_t fx_blob_export(fx_ctx_t *ctx, void **blob, size_t *len);
FX_EXPORT void fx_blob_free(void *blob);
FX_EXPORT fx_status_t fx_blob_import(fx_ctx_t *ctx, const void *blob,
                                     size_t len);

/* Collectives over the same out-of-band channel that carries the blobs
 * (FX_ERR_STATE with neither a bootstrap nor an exchange).
 * fx_allgather: every rank contributes len bytes; all receives size * len
 * bytes in rank order. */
FX_EXPORT fx_status_t fx_allgather(fx_ctx_t *ctx, const void *mine, size_t len,
                                   void *all);
FX_EXPORT fx_status_t fx_barrier(fx_ctx_t *ctx);

/* One-sided writes. fx_write() posts a write of len bytes from
 * src + src_off into the peer's target region dst_region at dst_off; the
 * remote range is checked against the peer's advertised bounds before
 * anything is posted. It returns once the write is posted (the source
 * buffer must stay unchanged until fx_notify() or fx_quiet() returns). */
FX_EXPORT fx_status_t fx_write(fx_ctx_t *ctx, fx_region_t *src, size_t src_off,
                               int peer, uint32_t dst_region, uint64_t dst_off,
                               size_t len);
/* Wait until every write posted so far has completed locally. */
FX_EXPORT fx_status_t fx_quiet(fx_ctx_t *ctx);
/* Tell peer that every write posted to it so far is complete, with a tag of
 * the caller's (e.g. a version). The peer learns it through
 * fx_wait_notify() never before those bytes are visible in its memory.
 * It returns once the notification has left this process (nothing of it
 * waits for a later call of this rank's), as a session's push does. */
FX_EXPORT fx_status_t fx_notify(fx_ctx_t *ctx, int peer, uint64_t tag);
/* Target side: wait (driving progress) for the next notification from peer,
 * and every write it covers; returns its tag. FX_ERR_TIMEOUT names the peer
 * after the context's timeout. */
FX_EXPORT fx_status_t fx_wait_notify(fx_ctx_t *ctx, int peer, uint64_t *tag);
/* Drive progress once (targets on providers with manual progress land
 * writes only while someone polls). */
FX_EXPORT fx_status_t fx_progress(fx_ctx_t *ctx);

/* ---- Weight sync: manifest, session, versions ------------------------ */

typedef struct fx_manifest fx_manifest_t; /* tensors and who holds what */
typedef struct fx_session fx_session_t;   /* a manifest bound to a job */

typedef enum fx_role { FX_SOURCE = 0, FX_TARGET = 1 } fx_role_t;

/* A manifest from JSON (docs/manifest.md), or built call by call. Errors
 * name the tensor, the rank and, for JSON, the path of the bad field. */
FX_EXPORT fx_status_t fx_manifest_load(const char *path, fx_manifest_t **m);
FX_EXPORT fx_status_t fx_manifest_parse(const char *json, size_t len,
                                        fx_manifest_t **m);
FX_EXPORT fx_status_t fx_manifest_create(fx_manifest_t **m);
FX_EXPORT fx_status_t fx_manifest_add_tensor(fx_manifest_t *m,
                                             const char *name,
                                             const char *dtype, int ndim,
                                             const int64_t *shape);
/* dim -1: the whole tensor; else the range [start, end) along dim. */
FX_EXPORT fx_status_t fx_manifest_add_piece(fx_manifest_t *m, int rank,
                                            fx_role_t role,
                                            const char *tensor, int dim,
                                            int64_t start, int64_t end);
/* Since 0.6. Targets hold tensor in dtype: sources' elements are converted
 * while packed (f32 masters to bf16 with round to nearest even, bf16 to
 * f32, f32 or bf16 to fp8_e4m3 with block scales, set next);
 * FX_ERR_UNSUPPORTED for another pair. Call it before any piece or
 * view names the tensor (a view takes its parts'). */
FX_EXPORT fx_status_t fx_manifest_set_target_dtype(fx_manifest_t *m,
                                                   const char *tensor,
                                                   const char *dtype);
/* Since 0.6. FP8 with block scales (DeepSeek-V3's checkpoints): targets
 * hold tensor (f32 or bf16, target dtype "fp8_e4m3") divided by one f32
 * scale per block of rows x cols of its last two dims, which they receive
 * in tensor scale (f32, tensor's shape with its last two dims divided by
 * the block, rounded up: its weight_scale_inv). Sources hold whole blocks
 * and compute the scales every version (the block's largest magnitude
 * over 448); they give no piece of scale themselves. Before any piece
 * names either tensor. */
FX_EXPORT fx_status_t fx_manifest_set_block_scale(fx_manifest_t *m,
                                                  const char *tensor,
                                                  const char *scale,
                                                  int64_t rows, int64_t cols);
/* Since 0.6. A box: [start[i], end[i]) along each of the tensor's ndim
 * dims, stored densely, row-major in its own shape (tensor x expert
 * parallel cuts). */
FX_EXPORT fx_status_t fx_manifest_add_box(fx_manifest_t *m, int rank,
                                          fx_role_t role, const char *tensor,
                                          int ndim, const int64_t *start,
                                          const int64_t *end);
/* Since 0.6. Elements [start, end) of the tensor's row-major flattening,
 * stored in that order (FSDP's FlatParameter, ZeRO-3's partitions). */
FX_EXPORT fx_status_t fx_manifest_add_flat(fx_manifest_t *m, int rank,
                                           fx_role_t role, const char *tensor,
                                           int64_t start, int64_t end);
/* Since 0.6. A view named name: along dim, the ranges [start[i], end[i])
 * of tensors[i] (plain tensors declared before it, of one dtype and equal
 * on every other dim), one after the other, e.g. a fused qkv_proj of
 * q_proj, k_proj and v_proj. Its dtype and shape follow from them; its
 * pieces are added and bound like any tensor's. Since 0.7 tensors[i] may
 * be NULL: end[i] - start[i] indices of padding, which nothing writes (a
 * vocabulary padded to a multiple of 64). */
FX_EXPORT fx_status_t fx_manifest_add_view(fx_manifest_t *m, const char *name,
                                           int dim, uint32_t n,
                                           const char *const *tensors,
                                           const int64_t *start,
                                           const int64_t *end);
/* Since 0.7. A stacked view: n / per slabs along a new leading dim, slab
 * s the ranges s per .. s per + per - 1 joined along dim (of the tensors)
 * as fx_manifest_add_view joins them, every slab as long, e.g. vLLM's
 * w13_weight [E, 2I, H], slab e being expert e's gate_proj then up_proj
 * (per 2, dim 0). start and end NULL: each range is all of dim; a NULL
 * tensor is padding as above. */
FX_EXPORT fx_status_t fx_manifest_add_stack(fx_manifest_t *m, const char *name,
                                            int dim, uint32_t n, uint32_t per,
                                            const char *const *tensors,
                                            const int64_t *start,
                                            const int64_t *end);
FX_EXPORT void fx_manifest_destroy(fx_manifest_t *m);
/* Bytes of rank's piece of tensor (dense: a box row-major in its shape, a
 * flat range in order), or FX_ERR_INVALID if it holds none: what the
 * application must bind. */
FX_EXPORT fx_status_t fx_manifest_piece_bytes(const fx_manifest_t *m,
                                              int rank, fx_role_t role,
                                              const char *tensor,
                                              uint64_t *bytes);
/* Since 0.6. rank's piece of tensor as a box of the tensor: [start[d],
 * end[d]) along each of its *ndim dims ([0, shape) for a whole tensor),
 * listed or by rules: the shape a program allocates for it, and the slice
 * of the full tensor it holds. start and end have room for max_dims (8
 * is always enough). FX_ERR_INVALID where rank holds none, and
 * FX_ERR_UNSUPPORTED for a flat range, which is no box
 * (fx_manifest_piece_flat gives it). */
FX_EXPORT fx_status_t fx_manifest_piece_box(const fx_manifest_t *m, int rank,
                                            fx_role_t role,
                                            const char *tensor, int max_dims,
                                            int64_t *start, int64_t *end,
                                            int *ndim);
/* Since 0.6. rank's piece of tensor as elements [*start, *end) of the
 * tensor's row-major flattening, listed or by a rules' flat cut (FSDP's
 * flat shards): FX_ERR_INVALID where rank holds none, FX_ERR_UNSUPPORTED
 * for a box (a flat range that is one box is kept as that box, and
 * fx_manifest_piece_box gives it). */
FX_EXPORT fx_status_t fx_manifest_piece_flat(const fx_manifest_t *m,
                                             int rank, fx_role_t role,
                                             const char *tensor,
                                             int64_t *start, int64_t *end);
/* Since 0.7. The checks set-up makes of a listed manifest for a job of
 * nranks, without a job: every source piece distinct or a replica,
 * every target element (but padding) held by some source, each culprit
 * named as set-up names it (for a manifest of rules, that its grids fit:
 * each rank checks its own part at set-up). */
FX_EXPORT fx_status_t fx_manifest_validate(const fx_manifest_t *m,
                                           int nranks);
FX_EXPORT uint32_t fx_manifest_tensor_count(const fx_manifest_t *m);
FX_EXPORT const char *fx_manifest_tensor_name(const fx_manifest_t *m,
                                              uint32_t index);

/* A path's share of a version: peers, this session's ranks that this
 * rank reaches over it; bytes and writes, what a push posted on its rails
 * (a source's report), or what the sources on it write to this rank each
 * version, writes 0 (a target's). */
#define FX_REPORT_PATHS 4
typedef struct fx_report_path {
    char provider[32];
    uint32_t peers;
    uint64_t bytes;
    uint64_t writes;
} fx_report_path_t;

/* Per-version figures (seconds; bytes this rank sent or expected). The
 * struct grows at its end: struct_size says how much of it a given copy
 * holds. */
typedef struct fx_report {
    uint32_t struct_size;
    uint64_t version;
    uint64_t bytes;
    uint64_t writes;       /* writes posted (source) */
    uint64_t packed_bytes; /* of bytes, those that went through buckets */
    double seconds;        /* the whole push or wait */
    double pack_s;         /* copying into buckets: the packer thread's
                            * time, plus pack_main_s */
    double post_s;         /* posting writes */
    double wait_s;         /* waiting for completions and notifications
                            * (or, with manual progress, driving them) */
    double stall_s;        /* idle waiting for the packer with nothing in
                            * flight: the overlap that was missed */
    int packer_thread;     /* source: 1 if a packer thread filled the
                            * buckets, 0 if the posting thread did (then
                            * pack and post add up; FABXFER_PACK_THREAD);
                            * -1 on a rank with nothing to send */
    uint64_t pool_bytes;   /* source: its bucket pool, registered once */
    double pack_main_s;    /* of pack_s, what the posting thread packed
                            * itself: all of it inline, else the buckets
                            * the packer had not started when they were
                            * due */
    /* What this rank's context dropped since it opened, never acted on:
     * control messages from no member of the job (wrong token or source
     * address), malformed ones, stale or replayed ones, and writedata
     * beyond what notifications announced (a duplicated completion). Each
     * is also logged at FABXFER_LOG=warn. */
    uint64_t ctrl_forged;
    uint64_t ctrl_malformed;
    uint64_t ctrl_stale;
    uint64_t writedata_surplus;
    /* Memory registrations the context holds now, one per rail each (its
     * message buffers and probe included): flat from one version to the
     * next, or something leaks. */
    uint64_t registrations;
    /* ---- since 0.5 ---- */
    double ready_wait_s;   /* source: waiting for targets to release the
                            * previous version (flow control) */
    double apply_s;        /* target: the last fx_session_apply's copies
                            * (doing them for host regions, queueing them
                            * for CUDA ones), not its wait before them */
    uint64_t apply_bytes;  /* ... bytes it copied */
    /* ---- since 0.7 ---- */
    /* Per path (fx_ctx_peer_path): one for each provider this rank
     * opened, in its list's order; one for a single provider. */
    uint32_t npaths;
    fx_report_path_t paths[FX_REPORT_PATHS];
    /* FABXFER_VERIFY. Source: the bytes the push checksummed, the bytes
     * of checksums it wrote (not in bytes; in paths[].bytes), and the
     * versions of this session its targets rejected so far. Target: the
     * bytes and units (segments) of the version checked, and the sources
     * whose bytes did not match (the wait failed with FX_ERR_VERIFY). */
    uint64_t verify_bytes;
    uint64_t verify_sent;
    uint64_t verify_units;
    uint64_t verify_failed;
    /* Membership. Source: the targets of this session it no longer
     * serves (fx_session_leave, fx_session_remove_target), and the new
     * processes of targets its joins took in so far (fx_session_join).
     * Both sides: the last join's seconds on this rank, 0 before any. */
    uint64_t targets_left;
    uint64_t targets_joined;
    double join_s;
    /* Source: of bytes, those it copied into its targets itself (shm's
     * plain writes, FABXFER_SHM_COPY); the targets or the NIC moved the
     * rest. */
    uint64_t source_copied;
    /* FABXFER_VERIFY's own time in this push or wait. Source: waiting
     * for its checksums before telling its targets (the threads summing
     * direct writes, the GPU's kernels). Target: checking the version
     * after it was in (the checks made while it arrived are not
     * counted). */
    double verify_s;
} fx_report_t;

/* A session binds the manifest to the context's job (the manifest must
 * outlive the session). Sessions need a collective channel: fabxfer-run's
 * or PMIx's bootstrap, or the application's exchange (fx_ctx_opts_t).
 * Bind every piece this rank holds,
 * then fx_session_setup() on every rank: it validates the manifest,
 * compares it across ranks, plans, and exchanges addresses and bindings
 * with the ranks it has segments with only, before any byte moves (so
 * fx_write to a rank outside the plan needs fx_ctx_exchange first). Each
 * version then costs only packing, writes and notifications. */
/* Versions, their notifications and releases belong to a session: one
 * set up after another on the same contexts starts afresh (its versions
 * may start at 1 again), and the application's fx_notify tags are no
 * session's versions. Two sessions of one context must not move versions
 * between the same ranks at once. */
FX_EXPORT fx_status_t fx_session_create(fx_ctx_t *ctx, const fx_manifest_t *m,
                                        fx_session_t **s);
FX_EXPORT fx_status_t fx_session_bind(fx_session_t *s, fx_role_t role,
                                      const char *tensor, fx_region_t *region,
                                      size_t offset);
FX_EXPORT fx_status_t fx_session_setup(fx_session_t *s);
/* Refuse this rank's set-up with status (< 0) and why (a sentence; NULL:
 * fx_strerror's), for a check the application makes before set-up (the
 * Python binding's bind() compares dtypes and shapes): fx_session_setup
 * then still takes part in set-up's first collective, and fails on every
 * rank, here with this error, elsewhere "rank N refused the session
 * set-up: why". A failed fx_session_bind refuses the same way, so a rank
 * whose bind failed must still call fx_session_setup (or the others wait
 * for it); a new session starts afresh. The first refusal stands.
 * FX_ERR_STATE once set-up has run. (since 0.7) */
FX_EXPORT fx_status_t fx_session_refuse(fx_session_t *s, fx_status_t status,
                                        const char *why);
/* Source: write version (> every version pushed before) to every target
 * this rank serves, and notify them; returns once every write and
 * notification has completed at this rank, and the source tensors may
 * change again.
 * Flow control: before the first byte of version v goes to a target,
 * the target must have released the version this source wrote it before
 * (live mode: called fx_session_wait for a newer version, or
 * fx_session_release; shadow mode: applied it or a newer one): each
 * target sends every source a "ready" message when it releases. So the
 * tensors a target reads never change under it, even where writes land
 * without its CPU (FABXFER_PROGRESS=thread, RDMA NICs), and no
 * application barrier between versions is needed.
 * A target that does not release within FABXFER_TIMEOUT_MS fails with
 * FX_ERR_TIMEOUT naming it, nothing is written to it, and the others get
 * the version (see fx_ctx_peer_reset). So every version reaches every
 * live target, in order, and the slowest target paces its sources; a
 * target that waits for or applies a newer version releases the older
 * one unread.
 * GPU tensors are read after the work queued on the legacy default
 * stream; work on other streams that writes them must be finished
 * (synchronised) before this call, or use fx_session_push_start.
 * Not yet so for GPU tensors written directly over shm (CUDA IPC, up to
 * libfabric 2.6): a target's copy out of them may still run when the
 * push returns, until that target's fx_session_wait has returned; change
 * them after that (the application's step barrier), not at once
 * (providers.md, GPU path per provider).
 * FX_ERR_STATE on a rank that holds no source piece of the session. */
FX_EXPORT fx_status_t fx_session_push(fx_session_t *s, uint64_t version);
/* The same without blocking: returns once the push is queued, and a
 * thread of the session does it. stream (a cudaStream_t or CUstream of
 * the source tensors' device; NULL: the legacy default stream): GPU
 * tensors are read only after the work queued on it so far, by an event
 * recorded there now; host tensors are read from the moment this returns.
 * The source tensors must not change until fx_session_push_test() has
 * said done or fx_session_push_wait() has returned (whatever they
 * return). Until then this context's other calls wait for the push (the
 * session's thread holds the context); fx_session_push_test and
 * fx_session_push_wait do not. FX_ERR_STATE if a push is under way. */
FX_EXPORT fx_status_t fx_session_push_start(fx_session_t *s,
                                            uint64_t version, void *stream);
/* *done = 1 once the push started last has finished, with its status as
 * the return value (and its report in fx_session_report); else *done = 0
 * and FX_OK. Does not block. */
FX_EXPORT fx_status_t fx_session_push_test(fx_session_t *s, int *done);
/* Wait for the push started last to finish; its status (again, if
 * fx_session_push_test already said done). */
FX_EXPORT fx_status_t fx_session_push_wait(fx_session_t *s);
/* Target: return once every byte of version from every source is in this
 * rank's memory (driving progress meanwhile), or fail after the timeout
 * naming the sources that are missing. Live regions: the bytes are in the
 * tensors, and they stay exactly this version's until the application
 * releases it: its next fx_session_wait (for a newer version) releases
 * it first, then waits, or fx_session_release() does, for an engine done
 * with it earlier; the first wait of a session releases nothing, and
 * versions older than version that were never waited for are released
 * unread. Shadow regions: the bytes are in the receive area, nothing is
 * released, and fx_session_apply() moves them. GPU tensors written
 * directly (FABXFER_GPU_PATH=direct) hold the version for every stream
 * and for the host: where the provider lands it with copies of its own on
 * the legacy default stream (shm's CUDA IPC), this call waits for the
 * work queued there, the application's too. FX_ERR_STATE on a rank that
 * holds no target piece of the session. */
FX_EXPORT fx_status_t fx_session_wait(fx_session_t *s, uint64_t version);
/* Live target: release version, the one fx_session_wait returned last:
 * its sources may write the next one into the tensors from now on.
 * FX_ERR_INVALID for another version (never waited for, or older: those
 * were released by the wait that went past them), FX_ERR_STATE where it
 * is released already, and on a shadow target (fx_session_apply
 * releases there). */
FX_EXPORT fx_status_t fx_session_release(fx_session_t *s, uint64_t version);
/* Target with shadow regions: wait for version as fx_session_wait does,
 * then copy it from the receive area into the tensors: with memcpy for
 * host regions (done when this returns), and for CUDA regions as copies
 * queued on stream (a cudaStream_t or CUstream of the regions' device;
 * NULL: the legacy default stream), so that the kernels queued after
 * this call see the new version with no host synchronisation (the stream
 * first waits for the provider's own copies into a direct receive area,
 * on the legacy default stream). Returns
 * once the copies are queued. The receive area is released to the
 * sources once the copies have run: at once for host regions, else as
 * soon as a later call of this session (or its progress thread) sees the
 * copies' event complete. Versions older than version still in the
 * receive area are released unapplied. The pause an engine takes for an
 * update is this call. FX_ERR_STATE on a rank that holds no target piece
 * of the session, as for fx_session_received. */
FX_EXPORT fx_status_t fx_session_apply(fx_session_t *s, uint64_t version,
                                       void *stream);
/* Target with shadow regions, without waiting: drive progress once and
 * set *version to the newest version wholly in the receive area and not
 * yet applied, 0 if none (so an engine can apply between decode steps
 * only when there is something to apply). */
FX_EXPORT fx_status_t fx_session_received(fx_session_t *s,
                                          uint64_t *version);
/* Drive this session's progress once: land writes on providers that need
 * the target to poll (tcp, shm), send releases whose copies have run.
 * With FABXFER_PROGRESS=thread (the default for a target with shadow
 * regions on such a provider: auto) a thread of the session does this
 * between the application's calls; with FABXFER_PROGRESS=call the engine
 * calls this between its steps, or its sources stall and, after
 * FABXFER_TIMEOUT_MS, fail it. */
FX_EXPORT fx_status_t fx_session_progress(fx_session_t *s);
/* The last push's or wait's report, the library's own (its struct_size
 * is this library's sizeof), valid until the next push, wait or destroy. */
FX_EXPORT const fx_report_t *fx_session_report(const fx_session_t *s);
/* The same copied into the caller's struct: out->struct_size set by the
 * caller to what it knows (a smaller, older struct gets the fields it
 * has); FX_ERR_INVALID for a size this library does not know. */
FX_EXPORT fx_status_t fx_session_report_copy(const fx_session_t *s,
                                             fx_report_t *out);
/* A report (the library's, or a caller's copy: only the fields its
 * struct_size covers are printed) as one JSON object; returns the length
 * snprintf would, -1 for a struct_size this library does not know. */
FX_EXPORT int fx_report_json(const fx_report_t *r, char *buf, size_t len);
/* Since 0.7. Membership, between versions. A target leaves the session:
 * each of its sources hears so (a message) and from its next push on
 * skips it, without an error and without waiting for it; the others get
 * every version as before. Returns once the messages are sent; the
 * session then refuses this rank's target calls, and the process may
 * exit. Leave while holding the version waited for (before
 * fx_session_release): its sources write nothing newer before they hear
 * the message; after a release (or a shadow's apply) the next version may
 * still land until they do. FX_ERR_STATE on a rank that is a source of
 * the session too. A source may also drop a target itself, one that failed (its
 * death named by a push, as ever) or that the application knows is gone:
 * fx_session_remove_target, after which pushes skip it quietly.
 * FX_ERR_STATE on a rank without the role, FX_ERR_INVALID for a rank
 * this source does not write to. Left or removed, a rank stays gone
 * until a new process of it joins (fx_session_join). */
FX_EXPORT fx_status_t fx_session_leave(fx_session_t *s);
FX_EXPORT fx_status_t fx_session_remove_target(fx_session_t *s, int rank);
/* Since 0.7. A target comes back: a new process of a rank that failed or
 * left takes its place in a running session, between versions, and
 * nothing else is set up again. A small collective of "the group": the
 * session's sources and the new processes, size members, this one at
 * index, through the application's allgather over them (as
 * exchange_allgather, with indexes in the group for ranks: a store, a
 * process group of those ranks), or, allgather NULL, through the folder
 * of a fabxfer-run job, arg then a tag (a string: the same on every
 * member, new for each join, 1 to 32 of [A-Za-z0-9._-]), where
 * fabxfer-run --restart started the new process (FABXFER_RESTARTED);
 * the other targets take no part.
 * The new process: a context with bootstrap "none" and the job's rank
 * and size (opts.rank, opts.size); its target regions registered as the
 * old process did and its pieces bound at the same offsets of the same
 * regions (the sources keep their program); the session created and
 * bound, then fx_session_join in place of fx_session_setup. Its first
 * version is the sources' last, if each source that writes to it pushes
 * that one to it alone (fx_session_push_to), or the next one pushed, the
 * application's choice; a wait for an older one is refused. Its join
 * waits its context's timeout for the sources, who come only once a push
 * named the old process (their timeout, after the push began): give it a
 * longer timeout than theirs. A source's join waits its own timeout for
 * the new process, whose start (a launcher's restart, CUDA's set-up) may
 * take longer: join once the application knows it has come.
 * Each source, between pushes, on its set-up session, once it no longer
 * writes to the old process: a push named its failure, it left, or
 * fx_session_remove_target dropped it (else FX_ERR_STATE, naming it):
 * the old address leaves the source's address vectors, and nothing more
 * is written to the old process's keys.
 * Every member fails if one does, naming it (a source then keeps the
 * rank out); a failed new process destroys its session and joins again
 * with a new one. A source that gives nothing to a new process takes
 * part and changes nothing. FX_ERR_UNSUPPORTED for a new process that
 * holds source pieces (new sources set up a new session). */
FX_EXPORT fx_status_t fx_session_join(fx_session_t *s, int size, int index,
                                      fx_allgather_fn allgather, void *arg);
/* Since 0.7. The job grows: ranks new to it (a third inference group, a
 * data-parallel grid of targets grown from 2 groups to 3) join a running
 * session as targets, between versions, through the same group as
 * fx_session_join (the session's sources and the new ranks). Each new
 * rank: a context with bootstrap "none", its rank and the grown job's
 * size; a session of m, bound; fx_session_join. Each source, on its
 * set-up session: fx_session_grow with m, the job's manifest grown by
 * the new ranks' pieces (listed, or the same rules over a larger grid):
 * it must hold the session's tensors and every piece of the ranks the job
 * had as the session's manifest does (else FX_ERR_INVALID, naming the
 * first that differs), and give the new ranks target pieces only. The
 * other targets take no part and see nothing change; a source keeps
 * their writes as they were, and only a source that writes to a new rank
 * rebuilds its program. Their first version: as for fx_session_join. The
 * source's context must hold this session alone, and no new session is
 * set up on it after (FX_ERR_STATE: its channel has the first ranks
 * only); FX_ERR_UNSUPPORTED for FP8 block scales. m is copied: the
 * caller may destroy it after. */
FX_EXPORT fx_status_t fx_session_grow(fx_session_t *s, const fx_manifest_t *m,
                                      int size, int index,
                                      fx_allgather_fn allgather, void *arg);
/* Since 0.7. Source: push version, the one pushed last (the source
 * tensors must still hold it), to target rank alone, a new process that
 * joined: the other targets see nothing of it, and nothing waits for
 * their release. FX_OK at once where this source writes nothing to rank;
 * FX_ERR_INVALID for another version, a rank that holds no target piece,
 * or one that has this version already. */
FX_EXPORT fx_status_t fx_session_push_to(fx_session_t *s, uint64_t version,
                                         int rank);
/* Since 0.7. The session's membership as this rank sees it, one JSON
 * object: "epoch" (the changes it has seen: joins, and targets gone),
 * "joins" and "join_s" (the report's), "joined_at" (a new process: the
 * sources' last version when it joined, else 0); a source's "targets",
 * each with its "state" ("member", "left": it left or the application
 * removed it, "failed", "out": its new process joined another session),
 * "incarnation" (0 for the process set up, then one more per new
 * process), "joined_at" and "join_s" of its last join; a target's
 * "sources" and their "state". Returns the length snprintf would, -1 for
 * a NULL session. */
FX_EXPORT int fx_session_members_json(fx_session_t *s, char *buf, size_t len);
/* Destroy sessions before their context. */
FX_EXPORT void fx_session_destroy(fx_session_t *s);

/* Local launcher: start nranks copies of argv on this host, each with the
 * FABXFER_LOCAL_* variables that the "local" bootstrap reads and
 * torch.distributed's RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
 * MASTER_ADDR and MASTER_PORT (the last two unless set), wait for them
 * (at most timeout_ms, 0 for no limit; the job is killed past it) and
 * return 0 if every rank exited 0. Failed ranks are reported on stderr.
 * On Linux a rank is killed when the thread that called this dies. */
FX_EXPORT fx_status_t fx_launch_local(int nranks, char *const argv[],
                                      int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif /* FABXFER_H */
