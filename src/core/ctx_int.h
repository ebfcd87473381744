/*
 * The context and region structures behind the public handles, shared by
 * the files of src/core that implement the public API.
 */
#ifndef FX_CORE_CTX_INT_H
#define FX_CORE_CTX_INT_H

#include <pthread.h>

#include "boot/boot.h"
#include "engine/engine.h"
#include "fabric/fabric.h"
#include "plan/plan.h"
#include "util/error.h"

struct fx_region {
    struct fx_ctx *ctx;
    struct fab_mr mr;       /* staged CUDA source: base only, unregistered;
                             * staged CUDA target: the slab's */
    unsigned flags;
    fx_mem_kind_t kind;
    int device;             /* FX_MEM_CUDA: device ordinal, else -1 */
    void *base;             /* the application's memory */
    void *slab;             /* staged CUDA target: pinned host memory that
                             * peers write into, copied to base */
    int slab_all;           /* ... peers write it over every path; else
                             * only over the paths without FI_HMEM (the
                             * others write base: a path per pair) */
    int direct;             /* CUDA memory registered with the provider:
                             * the NIC reads or writes it itself */
    void *shadow;           /* FX_REGION_SHADOW: the receive area peers
                             * write into (the slab, on the staged path) */
    int shadow_owned;       /* ... fabxfer allocated it (not the slab) */
    uint32_t id;            /* among target regions; UINT32_MAX otherwise */
    struct fx_region *next;
};

/* A peer's region keys that its blob outgrew: a session set up before
 * points into them (its eng_dst_bind), so they stay, keys mapped, until
 * the context goes. */
struct remote_old {
    uint32_t nslots;
    struct fab_rkey *regions;
    struct remote_old *next;
};

/* What a peer's blob told us. A session's bindings point into regions,
 * so a later blob of the peer (fx_ctx_exchange, fx_blob_import, another
 * session's set-up) never moves an entry: the same records change
 * nothing, others are written in place, and one with more regions than
 * the array holds gets a new array of twice the room (the old one kept
 * in old: a peer's blobs leave at most log2 of its regions behind). */
struct remote_peer {
    int known;
    int hmem;               /* its end of our pair's path registers CUDA
                             * memory: its mixed regions take our writes
                             * in device memory, not in their slab */
    uint32_t nregions;      /* listed by its latest blob */
    uint32_t nslots;        /* entries holding a key (>= nregions) */
    uint32_t cap;           /* entries allocated */
    struct fab_rkey *regions;
    void *records;          /* the blob's region records, as sent */
    size_t records_len;
    struct remote_old *old;
};

/* The FABXFER_* tunables sessions use, read and checked against the
 * table's bounds at fx_ctx_create on every rank. */
struct ctx_tuning {
    size_t bucket_size;     /* FABXFER_BUCKET_SIZE */
    size_t pack_max;        /* FABXFER_PACK_MAX; 0: the provider's */
    int bucket_depth;       /* FABXFER_BUCKET_DEPTH */
    int pack_thread;        /* FABXFER_PACK_THREAD: -1 auto, 0, 1 */
    int progress;           /* FABXFER_PROGRESS: -1 auto, 0 call, 1 thread */
    long progress_us;       /* FABXFER_PROGRESS_US */
    struct eng_verify verify; /* FABXFER_VERIFY, _EVERY */
    int verify_threads;     /* FABXFER_VERIFY_THREADS; 0: the CPUs */
    int verify_auto;        /* auto: sample, or off for a session where
                             * some rank cannot read all it moves */
};

struct fx_ctx {
    /* Taken by the calls that touch the fabric and by the session threads
     * (pusher, progress): recursive, since public calls nest. */
    pthread_mutex_t lock;
    struct boot *boot;      /* NULL: blobs move through the application */
    struct fab *fab;
    int rank;
    int size;
    int grown;              /* size grew past the channel's (ctx_grow) */
    int nsessions;          /* created and not destroyed */
    int timeout_ms;
    struct ctx_tuning tune;
    struct fx_region *regions;
    uint32_t ntargets;
    struct remote_peer *remote;
    int gpu_want;           /* FABXFER_GPU_PATH: GPU_PATH_*, UNDECIDED
                             * for auto */
    int gpu_path;           /* GPU_PATH_* once the first CUDA region came */
    char host[128];         /* host_identity(): which peers share the host */
    char errmsg[ERR_MSG_MAX];
};

/* MIXED: direct over the paths with FI_HMEM, staged over the others */
enum { GPU_PATH_UNDECIDED, GPU_PATH_STAGED, GPU_PATH_DIRECT, GPU_PATH_MIXED };

/* gpu.c: register CUDA region r of len bytes, path by path; the first
 * decides the context's GPU path. */
fx_status_t ctx_register_cuda(struct fx_ctx *ctx, struct fx_region *r,
                              size_t len);

/* entry.c: the context's lock (ctx may be NULL: nothing to lock). */
void ctx_lock(struct fx_ctx *ctx);
void ctx_unlock(struct fx_ctx *ctx);

/* The job grows to size ranks (fx_session_grow): room for the new
 * ranks' blobs. The channel keeps its ranks, so no set-up follows. A
 * smaller size undoes a growth that failed, forgetting its ranks. */
fx_status_t ctx_grow(struct fx_ctx *ctx, int size);

/* entry.c: record the detail of a failed public call in the context. */
fx_status_t ctx_fail(struct fx_ctx *ctx, fx_status_t st);

/* opts.c: fx_ctx_opts_t's struct_size and the tunables it and the
 * environment set. opts_normalize copies a caller's struct, of any size a
 * release has had, into a whole one. */
fx_status_t opts_normalize(const fx_ctx_opts_t *in, fx_ctx_opts_t *out);
fx_status_t opts_tuning(struct fx_ctx *ctx, const fx_ctx_opts_t *o,
                        struct fab_open_args *fa);
fx_status_t opts_isolation(const fx_ctx_opts_t *o, int *isolate);
/* fa->rails, and with "auto" the GPU's PCI address (in pci) nearest. */
fx_status_t opts_rails(const fx_ctx_opts_t *o, struct fab_open_args *fa,
                       char *pci, size_t len);
int opts_names_shm(const char *name);

/* manifest.c */
const struct plan_manifest *manifest_of(const fx_manifest_t *m);
/* The index of rank's piece of the named tensor, or an error naming what
 * is missing. */
fx_status_t manifest_piece_named(const struct plan_manifest *pm, int rank,
                                 fx_role_t role, const char *tensor,
                                 int *piece);

/* blob.c */
fx_status_t blob_encode(struct fx_ctx *ctx, void **blob, size_t *len);
/* from: the rank the channel says sent it, which the blob must name; -1
 * where nothing says (fx_blob_import). */
fx_status_t blob_decode_import(struct fx_ctx *ctx, const void *blob,
                               size_t len, int from);
/* The same for rank's new process, in place of the old one, which
 * failed or left (fab_peer_replace): its keys
 * are renewed where they are, so that a session's program writes to the
 * new process (fx_session_join). */
fx_status_t blob_import_replace(struct fx_ctx *ctx, const void *blob,
                                size_t len, int rank);
void remote_peer_clear(struct fx_ctx *ctx, struct remote_peer *rp);

#endif
