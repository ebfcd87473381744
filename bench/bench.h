/*
 * fabxfer-bench: shared declarations of its subcommands and modes.
 */
#ifndef FX_BENCH_H
#define FX_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <fabxfer.h>

#include "util/clock.h" /* clock_now() for every timing */

#define BENCH_MAX_SIZES 32

struct p2p_args {
    const char *provider;
    size_t sizes[BENCH_MAX_SIZES];
    int nsizes;
    int raw, fabxfer; /* modes asked for */
    long iters;       /* 0: chosen per size */
    int reps;         /* timed rounds per (mode, size); best reported */
    const char *json;
};

struct bench_row {
    const char *mode;
    const char *provider;
    size_t bytes;
    long iters;
    double seconds;
};

int bench_p2p(const struct p2p_args *a);
/* Every mode takes its provider by one rule: --provider (opt), else
 * FABXFER_PROVIDER, else fabxfer's own choice (shm when every rank is on
 * this host). Where the one in use came from, for each table's first
 * line. */
const char *bench_provider_origin(const char *opt);

/* raw.c: the provider's ceiling, straight on libfabric. */
struct raw;
int raw_open(fx_ctx_t *ctx, const char *prov, void *buf, size_t len,
             struct raw **out);
/* Source: iters whole-buffer writes, up to depth in flight; returns the
 * seconds from the first post to the last completion. Target: progress
 * until the source says it is done. */
int raw_run(struct raw *r, int is_source, size_t len, long iters,
            double *seconds);
void raw_close(struct raw *r);

/* ---- sync: weight sync from M source ranks to N target ranks ---------- */

enum sync_mode { SYNC_FABXFER = 0, SYNC_NAIVE = 1, SYNC_NMODES };
/* How fabxfer's sources push (--push): fx_session_push, or
 * fx_session_push_start, --train-ms of CPU work, fx_session_push_wait. */
enum sync_push { SYNC_PUSH_BLOCK = 0, SYNC_PUSH_START = 1, SYNC_NPUSH };
/* Their names, as --modes and --push take them and the table prints them
 * (sync.c). */
extern const char *const sync_mode_names[SYNC_NMODES];
extern const char *const sync_push_names[SYNC_NPUSH];
/* How fabxfer's targets receive (--receive): into the tensors, or into
 * shadow areas that fx_session_apply copies into them. */
enum sync_receive { SYNC_LIVE = 0, SYNC_SHADOW = 1 };

struct sync_args {
    int sources, targets;        /* ranks 0..M-1 are sources, M..M+N-1 */
    const char *model;           /* the SPEC of --model */
    int modes[SYNC_NMODES];      /* enum sync_mode, in the order given */
    int nmodes;
    int versions;                /* timed versions, after one warm-up */
    int rounds;                  /* times the list of modes runs */
    int verify;
    const char *provider;        /* NULL: FABXFER_PROVIDER, else tcp;ofi_rxm */
    const char *json;
    int device;                  /* --device cuda[:N]: CUDA device, else -1 */
    uint64_t target_gap;         /* --target-gap: bytes after each target
                                  * piece (0: back to back) */
    int pushes[SYNC_NPUSH];      /* enum sync_push, in the order given:
                                  * fabxfer runs once per push kind */
    int npushes;
    int train_ms;                /* --push start: CPU work between start
                                  * and wait */
    enum sync_receive receive;
    int compact;                 /* --compact: the manifest by rules */
    const char *layouts[3];      /* --source-layout, --target-layout:
                                  * NULL for dp and tp, else a name
                                  * model_layout_known takes; --dtypes:
                                  * NULL or "fp8-block" */
};

int bench_sync(const struct sync_args *a);

/* pack.c: the GPU packer alone (fabxfer-bench pack). */
int pack_main(int argc, char **argv);

/* model.c: the tensors of a model and the pieces each rank holds. */
#define MODEL_MAX_DIMS 8

/* A range of a plain tensor that a view joins, along the view's dim. */
struct model_view_part {
    uint32_t tensor;
    int64_t start, end;
    int rank;                    /* the TP rank of the vllm layout these
                                  * rows are for; -1: every rank's (the
                                  * view is held whole) */
};

struct model_tensor {
    char *name;
    char dtype[24];
    size_t esize;
    char tdtype[24];             /* what targets hold */
    size_t tesize;
    int scale, scale_of;         /* FP8 weight: its scales; scales: their
                                  * weight; else -1 */
    int ndim;
    int64_t shape[MODEL_MAX_DIMS];
    uint64_t bytes;
    int fused;                   /* a plain tensor that a view of the
                                  * vllm layout joins: that view (its
                                  * side holds the view, not this); -1 */
    int view_dim;                /* a view: the dim it joins along; -1 */
    uint32_t nparts;
    struct model_view_part *part; /* a view: its ranges, in order */
};

/* --dtypes fp8-block: DeepSeek-V3's FP8 checkpoints quantize the linear
 * weights (not the embedding, the router or the output head) in blocks
 * of 128 x 128, each with its f32 weight_scale_inv. */
#define MODEL_FP8_BLOCK 128

#define MODEL_FLAT (-3)          /* a piece's dim: a flat range */
struct model_piece {
    int rank;
    fx_role_t role;
    uint32_t tensor;
    int dim;                     /* -1: the whole tensor; MODEL_FLAT:
                                  * elements [start, end) of its row-major
                                  * flattening */
    int64_t start, end;          /* along dim */
    int as_box;                  /* tp-box: handed to the manifest as a
                                  * box over every dim (same bytes) */
    uint64_t bytes;
    uint64_t off;                /* in its rank's region (model_layout) */
};

struct model {
    const char *file;            /* the manifest file, or NULL: generated */
    struct model_tensor *t;
    uint32_t nt;
    size_t tcap;
    struct model_piece *p;
    size_t np, pcap;
    int nsrc, ntgt, nranks;
    uint64_t *rank_len;          /* region bytes per rank */
    uint64_t tgt_gap;            /* bytes after each target piece */
};

/* The piece as a box over its tensor's first ndim dims (a flat piece has
 * none: callers look at MODEL_FLAT first). Derived, not stored: every rank
 * holds every rank's pieces, so 128 bytes of box per piece dominated a
 * large model's memory. */
static inline void model_piece_box(const struct model *m,
                                   const struct model_piece *p,
                                   int64_t lo[MODEL_MAX_DIMS],
                                   int64_t hi[MODEL_MAX_DIMS])
{
    const struct model_tensor *t = &m->t[p->tensor];

    for (int i = 0; i < t->ndim; i++) {
        lo[i] = i == p->dim ? p->start : 0;
        hi[i] = i == p->dim ? p->end : t->shape[i];
    }
}

/* SPEC: a manifest file, synthetic:COUNT:SIZE or hf:CONFIG.json[:LAYERS].
 * Generated models are cut by layouts[0] (sources) and layouts[1]
 * (targets): "dp" (every rank holds every tensor whole), "tp" (2-D tensors
 * along dim 0, 1-D whole), "fsdp" (every tensor a flat range of its
 * elements), "ep" (routed expert e whole on rank e mod N, the rest as
 * tp) or "vllm" (an hf: model's fused qkv_proj, gate_up_proj and
 * fused_qkv_a_proj as views, in TP order so that rank j's rows are one
 * range; the rest as tp); NULL: dp for sources, tp for targets. A view
 * comes after every plain tensor. layouts[2]
 * "fp8-block": targets hold the linear weights of an hf: model as FP8
 * with 128 x 128 block scales (tensors "..._scale_inv" added, which only
 * targets name). Pieces are laid out
 * (offsets, region lengths) on return, targets with tgt_gap bytes after
 * each piece. On failure err holds a sentence and -1 is returned. */
int model_load(const char *spec, int nsrc, int ntgt, uint64_t tgt_gap,
               const char *const *layouts, struct model **out, char *err,
               size_t errlen);
/* 1 if a layout name is one model_load knows. */
int model_layout_known(const char *name);
/* The same model as an fx manifest (the file itself for a manifest). */
int model_manifest(const struct model *m, fx_manifest_t **out);
/* The same as a compact manifest, the layouts given by rules (--compact:
 * dp and tp sides, no --dtypes); -1 with a sentence in err else. */
int model_manifest_compact(const struct model *m, const char *const *layouts,
                           fx_manifest_t **out, char *err, size_t errlen);
void model_free(struct model *m);
/* Sizes with K/M/G suffixes (powers of 1024). */
int bench_parse_size(const char *text, uint64_t *out);
/* --device: "host" (-1), "cuda" (0) or "cuda:N"; -1 on error, said. */
int bench_parse_device(const char *text, int *device);

/* The overlap of boxes a and b of tensor t as contiguous runs: fn gets
 * each run's byte offsets in a's and b's dense row-major layouts and its
 * length. Stops at, and returns, fn's first non-zero answer. */
typedef int (*model_run_fn)(void *arg, uint64_t a_off, uint64_t b_off,
                            uint64_t len);
int model_runs(const struct model_tensor *t, const int64_t *alo,
               const int64_t *ahi, const int64_t *blo, const int64_t *bhi,
               model_run_fn fn, void *arg);
/* The same over the part of the overlap inside box c too (clo NULL: no
 * third box); offsets still in a's and b's layouts. */
int model_runs_clip(const struct model_tensor *t, const int64_t *alo,
                    const int64_t *ahi, const int64_t *blo,
                    const int64_t *bhi, const int64_t *clo,
                    const int64_t *chi, model_run_fn fn, void *arg);

/* verify.c: the pattern sources write and targets check, byte g of each
 * plain tensor at a version's seed. */
void pattern_fill(const struct model *m, const struct model_piece *p,
                  unsigned char *mem, uint64_t seed);
struct pattern_scales; /* FP8 weights' block scales, made as checks ask */
struct pattern_miss {
    uint32_t tensor;             /* the plain tensor the byte comes from */
    uint64_t off;                /* the byte in the piece */
    uint64_t elem;               /* its element in tensor */
    unsigned char got, want;
};
/* 0: the piece at mem holds seed's pattern (converted as targets hold
 * it); 1: it differs, first where *miss says; -1: no memory. *scales
 * starts NULL, and is kept for the next checks. */
int pattern_check(const struct model *m, const struct model_piece *p,
                  const unsigned char *mem, uint64_t seed,
                  struct pattern_scales **scales, struct pattern_miss *miss);
void pattern_scales_free(struct pattern_scales *scales, uint32_t nt);

/* plan_names.c: fabxfer-plan's tensor list, a family of tensors whose
 * names differ by their numbers one entry with ranges. */
int plan_put_tensors(FILE *f, const struct model *m);

/* naive.c: what a straightforward port does every version, straight on
 * libfabric: register each tensor, one fi_write per (tensor, target),
 * wait, deregister, then raise a flag word at every target. */
struct sync_times {
    double seconds, pack, post, wait, stall;
    double pack_main; /* of pack, done by the posting thread */
    /* fabxfer's alone (naive leaves them 0). Source: */
    double ready_wait; /* the report's: waiting for targets' release */
    double push_block; /* the push's blocking time: the whole push, or
                        * push_start + push_wait */
    double push_start, push_wait, train; /* --push start: its parts, and
                                          * the work between them */
    /* Shadow target: fx_session_apply (with GPU tensors, and a device
     * synchronisation), the report's apply_s and apply_bytes, and a
     * plain copy of as many bytes of the same kind. */
    double apply, apply_lib, apply_bytes, copy;
    double verify; /* the report's verify_s: what the checks added */
};

struct naive;
/* dev, device: with GPU tensors, the source copies each tensor from dev
 * to mem (synchronously) before registering it, every version. */
int naive_open(fx_ctx_t *ctx, const char *prov, const struct model *m,
               void *mem, size_t len, void *dev, int device,
               struct naive **out);
/* Source: send version and raise the flags. Target: wait for every
 * source's flag to reach version (FABXFER_TIMEOUT_MS). */
int naive_version(struct naive *n, uint64_t version, struct sync_times *t);
/* Writes kept in flight: the provider's tx_attr->size. */
int naive_depth(const struct naive *n);
void naive_close(struct naive *n);

#endif
