/*
 * The plan layer: the model's tensors, the pieces each rank holds as a
 * source or needs as a target, their validation, and the write segments
 * that bring every target its bytes. Pure C, no I/O but reading a manifest
 * file, no fabric: everything here is unit-testable on its own.
 *
 * Words. A tensor has a name, a dtype and a shape (row-major). A piece is
 * the part of one tensor that one rank holds (source) or needs (target):
 * the whole tensor, the range [start, end) along one dimension, a box
 * (a range on every dimension), or a flat range: elements [start, end) of
 * the tensor's row-major flattening (FSDP's and ZeRO's shards). A rank
 * stores its piece densely at the address the application binds: a box
 * row-major in its own shape, a flat range as those elements in order;
 * offsets below are bytes into that layout. A view is a tensor made of
 * ranges of other tensors along one dimension (a fused qkv_proj of q_proj,
 * k_proj and v_proj): its pieces are bound like any other, and the plan
 * maps them onto the tensors it is made of. Source pieces of one tensor
 * are either identical (replicas: any one of them may serve) or disjoint.
 */
#ifndef FX_PLAN_PLAN_H
#define FX_PLAN_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fabxfer.h"

#define PLAN_MAX_DIMS 8
#define PLAN_NAME_MAX 256

/* A piece's role is the public fx_role_t; its word in manifests and in
 * messages: "source" or "target". */
const char *plan_role_name(fx_role_t role);

/* A view: the tensor is, along dim, the concatenation of the ranges
 * [start, end) of other tensors (along the same dim; every other dim the
 * same), in order. Those are plain tensors, not views. A part may be
 * padding instead (tensor PLAN_VIEW_PAD, end - start indices of dim):
 * bytes of the view that no tensor fills, so that nothing writes them (an
 * engine's vocabulary padded to a multiple of 64). A stacked view (per >
 * 0) puts n / per slabs along a new leading dim, slab s being parts
 * [s per, (s + 1) per) joined along dim as above (dim counts the parts'
 * dims): vLLM's w13_weight [E, 2I, H], expert e's gate_proj then its
 * up_proj. */
#define PLAN_VIEW_PAD UINT32_MAX
struct plan_view_part {
    uint32_t tensor;         /* or PLAN_VIEW_PAD */
    int64_t start, end;
};

struct plan_view {
    int dim;
    uint32_t n;
    uint32_t per;            /* parts per slab of a stacked view; 0: none */
    struct plan_view_part *part;
};

struct plan_tensor {
    char *name;
    struct plan_view *view;  /* NULL for a tensor with its own elements */
    int dtype;               /* index into the dtype table (plan_dtype_*) */
    size_t elem_size;
    int tdtype;              /* what targets hold: dtype, or another that
                              * sources' elements are converted to */
    size_t tgt_elem_size;
    int conv;                /* enum conv_kind from dtype to tdtype */
    int used;                /* a piece names it */
    int in_view;             /* a view joins it (and took its dtypes) */
    /* FP8 with block scales: a weight names its scale tensor and the
     * block (rows, columns of its last two dims); the scale tensor names
     * its weight. Sources of the weight compute the scales; the scale
     * tensor's source pieces are theirs, added with each of its pieces. */
    int scale;               /* the weight's scale tensor, or -1 */
    int scale_of;            /* the scale tensor's weight, or -1 */
    int64_t block[2];
    int ndim;                /* 0 for a scalar */
    int64_t shape[PLAN_MAX_DIMS];
    uint64_t bytes;
};

/* What a piece's dim says it is. A box cut on one dimension only is kept
 * as that range, and a box or flat range that is the whole tensor as
 * PLAN_WHOLE, so that equal pieces compare equal however they were given. */
#define PLAN_WHOLE (-1)
#define PLAN_BOX (-2)  /* start: its bounds in m->bounds, lo[ndim] hi[ndim] */
#define PLAN_FLAT (-3) /* [start, end) of the row-major flattening */

/* Every rank holds every rank's pieces (validation and replica choice need
 * them all), so a piece is kept small: a box of several cuts keeps its
 * bounds aside, and the box of a one-dim cut is derived. */
struct plan_piece {
    int rank;
    fx_role_t role;
    uint32_t tensor;         /* index into manifest tensors */
    int dim;                 /* >= 0: [start, end) along it; or PLAN_* */
    int64_t start, end;
    uint64_t bytes;
};

struct plan_manifest {
    struct plan_tensor *tensors;
    uint32_t ntensors, tensors_cap;
    struct plan_piece *pieces;
    uint32_t npieces, pieces_cap;
    int64_t *bounds;         /* the bounds of PLAN_BOX pieces */
    size_t nbounds, bounds_cap;
    uint32_t nviews;         /* tensors that are views */
    int max_rank;            /* highest rank named by a piece, -1 if none */
    void *index;             /* name -> tensor lookup (private) */
    /* The compact form (rules.c): each side's layout by rules instead of
     * pieces, NULL where the pieces are given. */
    struct plan_side *side[2];   /* [FX_SOURCE], [FX_TARGET] */
    /* A manifest expanded for one rank (manifest_expand): its own pieces
     * and its peers', local_rank then that rank (else -1), whole_hash the
     * hash of the manifest of rules every rank agrees on. */
    int local_rank;
    uint64_t whole_hash;
    int hash_kept;           /* a grown session's (manifest_grown): its
                              * hash is whole_hash, the grown manifest's */
    uint64_t expand_cells;   /* grid cells its expansion visited (tests) */
    const struct plan_manifest *whole; /* expanded: the manifest of rules */
};

/* Bytes of one element of the piece: targets may hold another dtype. */
static inline size_t plan_piece_elem(const struct plan_manifest *m,
                                     const struct plan_piece *p)
{
    const struct plan_tensor *t = &m->tensors[p->tensor];

    return p->role == FX_TARGET ? t->tgt_elem_size : t->elem_size;
}

/* The piece as a box of its tensor: [lo[i], hi[i]) along each dim i.
 * Returns 0, or -1 for a flat piece, which is no box (plan_flat_boxes).
 * Inline: the plan asks for it for every overlap. */
static inline int plan_piece_box(const struct plan_manifest *m,
                                 const struct plan_piece *p, int64_t *lo,
                                 int64_t *hi)
{
    const struct plan_tensor *t = &m->tensors[p->tensor];

    if (p->dim == PLAN_FLAT)
        return -1;
    if (p->dim == PLAN_BOX) {
        for (int i = 0; i < t->ndim; i++) {
            lo[i] = m->bounds[p->start + i];
            hi[i] = m->bounds[p->start + t->ndim + i];
        }
        return 0;
    }
    for (int i = 0; i < t->ndim; i++) {
        lo[i] = i == p->dim ? p->start : 0;
        hi[i] = i == p->dim ? p->end : t->shape[i];
    }
    return 0;
}

/* The boxes a flat range [start, end) of a tensor of this shape is made
 * of, in order (at most 2 * ndim - 1): fn gets each box and the index of
 * its first element in the flattening. */
typedef void (*plan_box_fn)(void *arg, const int64_t *lo, const int64_t *hi,
                            int64_t first);
int plan_flat_boxes(int ndim, const int64_t *shape, int64_t start,
                    int64_t end, plan_box_fn fn, void *arg);
/* 1 if the flat range [start, end) is one box, that box in lo and hi
 * (ndim entries); 0 if it is several. */
int plan_flat_box(int ndim, const int64_t *shape, int64_t start,
                  int64_t end, int64_t *lo, int64_t *hi);

/* "the whole tensor", "[0, 2048) along dim 0", "[0, 64) x [128, 256)",
 * "elements [10, 20)": a piece in words, for messages. */
const char *plan_piece_text(const struct plan_manifest *m,
                            const struct plan_piece *p, char *buf,
                            size_t len);

/* dtypes: "bf16", "f16"/"float16", "f32"/"float32", "f64", "fp8_e4m3",
 * "fp8_e5m2", "i8", "u8", "i16", "i32", "i64", "bool" (and the torch
 * spellings "bfloat16", "float16", "float32", "float64", "int8", "uint8",
 * "int16", "int32", "int64"). Returns the index, or -1. */
int plan_dtype_parse(const char *name);
const char *plan_dtype_name(int dtype);
size_t plan_dtype_size(int dtype);
/* The canonical names, "bf16, f16, ..., bool", for messages. */
void plan_dtype_list(char *buf, size_t len);
/* The conversion (enum conv_kind) that packing does from dtype from to
 * dtype to: CONV_NONE for the same dtype, -1 where fabxfer has none. */
int plan_dtype_conv(int from, int to);

/* Building. Every error names the tensor, the rank and the field. */
fx_status_t manifest_new(struct plan_manifest **out);
void manifest_free(struct plan_manifest *m);
fx_status_t manifest_add_tensor(struct plan_manifest *m, const char *name,
                                const char *dtype, int ndim,
                                const int64_t *shape);
/* dim -1 for the whole tensor (start and end ignored). At most one piece
 * per (rank, role, tensor). */
fx_status_t manifest_add_piece(struct plan_manifest *m, int rank,
                               fx_role_t role, const char *tensor,
                               int dim, int64_t start, int64_t end);
/* A box: [start[i], end[i]) along every one of the tensor's ndim dims. */
fx_status_t manifest_add_box(struct plan_manifest *m, int rank,
                             fx_role_t role, const char *tensor, int ndim,
                             const int64_t *start, const int64_t *end);
/* Targets hold tensor in dtype: sources' elements are converted while
 * packed (f32 to bf16, bf16 to f32). Before any piece or view names it. */
fx_status_t manifest_set_target_dtype(struct plan_manifest *m,
                                      const char *tensor, const char *dtype);
/* Targets hold tensor (f32 or bf16, target dtype fp8_e4m3) as FP8 with
 * one f32 scale per block of rows x cols of its last two dims, written to
 * target pieces of the tensor scale (f32, the weight's shape with its last
 * two dims divided by the block, rounded up), as DeepSeek-V3's checkpoints
 * hold weight_scale_inv. Before any piece names either. Each source piece
 * of tensor then holds whole blocks, and brings a source piece of scale
 * on the same rank: the scales that rank computes every version. */
fx_status_t manifest_set_block_scale(struct plan_manifest *m,
                                     const char *tensor, const char *scale,
                                     int64_t rows, int64_t cols);
/* Elements [start, end) of the tensor's row-major flattening. */
fx_status_t manifest_add_flat(struct plan_manifest *m, int rank,
                              fx_role_t role, const char *tensor,
                              int64_t start, int64_t end);
/* A view named name: along dim, the ranges [start[i], end[i]) of the
 * tensors parts[i] (declared before it, plain tensors of one dtype, equal
 * on every other dim), one after the other. Its shape and dtype follow. */
fx_status_t manifest_add_view(struct plan_manifest *m, const char *name,
                              int dim, uint32_t n, const char *const *parts,
                              const int64_t *start, const int64_t *end);
/* A stacked view: n / per slabs along a new dim 0, slab s the ranges
 * parts[s per .. (s + 1) per) joined along dim (of the parts) as above,
 * every slab as long. In either form a NULL part is padding, end[i] -
 * start[i] indices long; start and end NULL: every part is all of dim,
 * then none is padding. */
fx_status_t manifest_add_stack(struct plan_manifest *m, const char *name,
                               int dim, uint32_t n, uint32_t per,
                               const char *const *parts,
                               const int64_t *start, const int64_t *end);
/* The JSON form (docs/manifest.md); errors name the JSON path, e.g.
 * "manifest: ranks[2].target[5].end: 4097 is past dim 0 of \"w\" (4096)". */
fx_status_t manifest_parse_json(const char *text, size_t len,
                                struct plan_manifest **out);
fx_status_t manifest_load_file(const char *path, struct plan_manifest **out);

/* Lookups: index or -1. */
int manifest_find_tensor(const struct plan_manifest *m, const char *name);
int manifest_find_piece(const struct plan_manifest *m, int rank,
                        fx_role_t role, uint32_t tensor);

/* A 64-bit hash of the manifest's content in a canonical order (tensors
 * and pieces in the order given), identical on every rank that built the
 * same manifest, however it was built (JSON or API): hash.c. */
uint64_t manifest_hash(const struct plan_manifest *m);
/* The FNV-1a behind it, over bytes, or one integer at a time (as 8
 * little-endian bytes): start from PLAN_HASH_INIT. */
#define PLAN_HASH_INIT 0xcbf29ce484222325ull
uint64_t plan_hash_bytes(uint64_t h, const void *data, size_t len);
uint64_t plan_hash_i64(uint64_t h, int64_t v);
/* A string as its length, then its bytes (NULL as length -1). */
uint64_t plan_hash_str(uint64_t h, const char *str);
/* The parts of the hash, each a canonical encoding: one tensor's
 * declaration, one piece, a side's grid (NULL: none) and one rule. */
uint64_t plan_hash_tensor(uint64_t h, const struct plan_tensor *t);
uint64_t plan_hash_piece(uint64_t h, const struct plan_manifest *m,
                         const struct plan_piece *p);
struct plan_side;
struct plan_rule;
uint64_t plan_hash_grid(uint64_t h, const struct plan_side *s);
uint64_t plan_hash_rule(uint64_t h, const struct plan_side *s,
                        const struct plan_rule *r);

/* When two ranks' hashes differ (digest.c): the manifest as items, each
 * tensor (declaration, pieces, rules) then the rest, manifest_items() of
 * them; an expanded manifest is compared as the manifest of rules. */
struct plan_item {
    uint64_t name, type, shape, pieces, rules; /* digests of its parts */
};
#define PLAN_ITEM_PIECES 8
struct plan_item_text {
    char decl[96];           /* "\"w\" bf16 [8, 8]" (the rest: counts) */
    char rules[160];         /* the rules that take it, on either side */
    uint32_t npieces;        /* its pieces, the first few in words */
    uint64_t piece_dg[PLAN_ITEM_PIECES];
    char piece[PLAN_ITEM_PIECES][56];
};
uint64_t manifest_items(const struct plan_manifest *m);
/* Every item's digests (manifest_items() of them, to free). */
fx_status_t manifest_item_digests(const struct plan_manifest *m,
                                  struct plan_item **out);
uint64_t plan_item_hash(uint64_t h, const struct plan_item *it);
/* Item i in words (zeroed past the last). */
void manifest_item_describe(const struct plan_manifest *m, uint64_t i,
                            struct plan_item_text *out);

/* Validation for a job of nranks ranks, before any byte moves: every
 * rank named exists; every target piece is wholly covered by source
 * pieces; source pieces of a tensor are identical or disjoint; tensors
 * with no target are allowed; names unique (checked when added). The
 * message names the tensor and the ranks. */
fx_status_t manifest_validate(const struct plan_manifest *m, int nranks);

/* One strided run set: count runs of run_len bytes, the i-th copied from
 * src_off + i * src_stride of the source piece to dst_off + i * dst_stride
 * of the target piece. A whole contiguous overlap is count 1. Where the
 * tensor's targets hold another dtype, conv says how each run's
 * src_run_len source bytes become its run_len target bytes. */
struct plan_seg {
    int source, target;      /* ranks */
    uint32_t tensor;
    uint32_t src_piece, dst_piece; /* indices into manifest pieces */
    uint64_t src_off, dst_off;
    uint64_t run_len, count;
    uint64_t src_stride, dst_stride;
    uint64_t src_run_len;    /* run_len where nothing is converted */
    int conv;                /* enum conv_kind */
    /* Conversions to FP8 (conv_scaled): each run is part of one row, run
     * i of row (row_phase + i) of its block row; the scales of its
     * elements are, in the source's piece scale_piece of the scale
     * tensor, element blk + ((row_phase + i) / block rows) x blk_stride,
     * then one further per block of columns, the run starting col_phase
     * elements into its first. */
    uint32_t scale_piece;
    uint32_t row_phase, col_phase;
    uint64_t blk, blk_stride;
};

struct plan {
    struct plan_seg *segs;   /* this rank's segments (every segment when
                              * built for rank -1), ordered by (source,
                              * target, tensor order, dst_off) */
    size_t nsegs;
    int nranks;
    int rank;                /* whose segments; -1: all */
    uint64_t *bytes;         /* nranks x nranks, always the whole job:
                              * bytes[src * nranks + dst] */
};

/* Intersect sources with targets and assign each overlap to one replica,
 * balancing bytes per source (a target's overlaps with the same replicas
 * in chunks of neighbours, largest chunks first, each to the replica with
 * the fewest bytes so far; ties to the lower rank). Deterministic:
 * every rank computes the same choices. Only the segments that rank sends
 * or receives are kept (all of them for rank -1), so a rank's plan grows
 * with its own pieces, not with the job's. The manifest must have passed
 * manifest_validate. */
fx_status_t plan_build(const struct plan_manifest *m, int nranks, int rank,
                       struct plan **out);
/* The same for the target pieces of ranks [tlo, thi) alone: the choices
 * of replica then weigh only their overlaps. */
fx_status_t plan_build_targets(const struct plan_manifest *m, int nranks,
                               int rank, int tlo, int thi, struct plan **out);
void plan_free(struct plan *p);

/* Tensor i of m declared again in out (plain, with its target dtype, or
 * the view it is; its parts before it), so that it keeps index i when
 * out has the tensors before it. Block scales are not copied. */
fx_status_t manifest_copy_tensor(const struct plan_manifest *m, uint32_t i,
                                 struct plan_manifest *out);
/* A running session's manifest old, grown by ranks [n0, ...) that
 * join as targets (src/plan/grown.c): grown must hold old's tensors and
 * every piece of ranks below n0 as old does; *out is old's pieces at
 * their indices, then the new ranks' from grown, and hashes as grown. */
fx_status_t manifest_grown(const struct plan_manifest *old,
                           const struct plan_manifest *grown, int n0,
                           struct plan_manifest **out);
/* The plan of a job that grew at ranks splits[0] < splits[1] < ...:
 * the targets of each range [0, splits[0]), [splits[0], splits[1]), ...,
 * [splits[nsplits - 1], nranks) as plan_build chose for them when they
 * joined (plan_build_targets), in plan_build's order. nsplits 0:
 * plan_build. */
fx_status_t plan_build_split(const struct plan_manifest *m, int nranks,
                             int rank, const int *splits, int nsplits,
                             struct plan **out);

/* Segments with the given source rank: [*first, *first + *n) of p->segs.
 * In a plan built for one rank, another source's are only those that
 * write to that rank. */
void plan_source_segs(const struct plan *p, int source, size_t *first,
                      size_t *n);

/* ---- the compact form (rules.c) -------------------------------------- */

/* A side's ranks form a grid of named parallel dims (tp, dp, pp...), the
 * first fastest in rank order. Each tensor takes the first rule whose
 * pattern matches its name: the rule's cut dims split tensor dims in equal
 * contiguous parts (floor(ext x k / n)), its places keep the tensor to the
 * grid cells whose coordinate over some dims is a fixed value or a number
 * in the tensor's name (a pipeline stage by layer, an expert-parallel rank
 * by expert), and the other dims hold replicas. */
#define PLAN_GRID_MAX 8
#define PLAN_CUT_FLAT PLAN_MAX_DIMS /* a cut of the row-major flattening */
#define PLAN_PLACE_MAX 4

struct plan_place {
    int ndims;
    uint8_t dims[PLAN_GRID_MAX]; /* the grid dims, first fastest */
    int64_t at;              /* the coordinate (< 0: from the end) ... */
    char *by;                /* ... or, if set, the number after "<by>." in
                              * the name, of `of`, in contiguous blocks */
    int64_t of;
    int round_robin;         /* by's numbers dealt in turn, not in blocks */
};

struct plan_rule {
    char *match;             /* fnmatch(3) pattern of tensor names */
    int ndim;                /* only tensors of this many dims; -1: any */
    int8_t cut[PLAN_GRID_MAX]; /* per grid dim: the tensor dim it cuts, -1,
                                * or PLAN_CUT_FLAT; dims cutting one cut it
                                * together */
    int flat;                /* its cuts cut the row-major flattening */
    int nplace;
    struct plan_place place[PLAN_PLACE_MAX];
};

struct plan_side {
    int first;               /* the side's first rank */
    int ndims;
    char *dim[PLAN_GRID_MAX];
    int64_t size[PLAN_GRID_MAX];
    int64_t nranks;          /* the product of the sizes */
    struct plan_rule *rule;
    uint32_t nrules;
};

void plan_side_free(struct plan_side *s);
/* Takes s (freed on refusal too). The manifest has no pieces, nor will
 * have: a manifest is explicit or compact. */
fx_status_t manifest_set_side(struct plan_manifest *m, fx_role_t role,
                              struct plan_side *s);
static inline int manifest_compact(const struct plan_manifest *m)
{
    return m->side[FX_SOURCE] != NULL || m->side[FX_TARGET] != NULL;
}
/* What rank needs of a compact manifest, as an explicit one: every tensor,
 * rank's pieces, and those of its peers, one source replica picked for
 * each target piece and source box, replicas sorted by rank, number
 * (target rank + b) mod replicas, b the block of the weight's tensor
 * index among as many contiguous blocks of the tensor list as replicas
 * (rules.c): every rank computes the same pick alone. manifest_validate then checks rank's own targets'
 * coverage only. */
fx_status_t manifest_expand(const struct plan_manifest *m, int nranks,
                            int rank, struct plan_manifest **out);
uint64_t plan_hash_sides(uint64_t h, const struct plan_manifest *m);
/* Rank's own piece of a tensor by the rules: *held 0 where it has none, 1
 * for the box [lo, hi), 2 for elements [lo[0], hi[0]) of the row-major
 * flattening that are no box (a flat cut's range that is one box is
 * given as that box, as manifest_add_flat keeps it). */
fx_status_t manifest_rules_box(const struct plan_manifest *m, int rank,
                               fx_role_t role, uint32_t tensor, int64_t *lo,
                               int64_t *hi, int *held);

/* Bytes of the piece that some tensor fills: its bytes but a view's
 * padding, which nothing writes (what its sources send it). */
uint64_t plan_piece_filled(const struct plan_manifest *m, uint32_t piece);
/* ... and where: fn(arg, off, len) for each run of them in the piece's
 * memory, neighbours joined (one run for a piece without padding);
 * returns how many. */
typedef void (*plan_run_fn)(void *arg, uint64_t off, uint64_t len);
size_t plan_piece_runs(const struct plan_manifest *m, uint32_t piece,
                       plan_run_fn fn, void *arg);

/* Inside src/plan only. A part is where a piece meets one plain tensor as
 * one box: a piece of a plain tensor is one part (a flat piece one per box
 * of its range); a piece of a view is cut where the view's ranges meet. The
 * part's box is in the plain tensor's coordinates, and its elements lie in
 * the piece's memory from byte off with the piece's strides
 * (plan_part_strides). Validation and the plan work on parts, so boxes,
 * flat ranges and views all meet the same way. */
struct plan_part {
    uint32_t piece;          /* whose memory */
    uint32_t tensor;         /* the plain tensor the box lies in */
    uint64_t off;            /* byte offset of the box's first element */
    size_t at;               /* its bounds: lo = ix->bounds + at, hi = lo +
                              * ndim */
};

/* The parts grouped by plain tensor, identical source boxes (replicas)
 * gathered into one box and the distinct boxes sorted by their bounds.
 * validate.c builds it and checks coverage with it; plan.c finds the
 * boxes each target part overlaps with it, so that neither does pairwise
 * work over all pieces of a tensor where the cuts are along one dim. */
struct plan_box {
    uint32_t first, n;       /* its replicas: src[first .. first + n), by
                              * rank */
};

struct plan_index {
    struct plan_part *part;
    uint32_t npart;
    int64_t *bounds;
    uint32_t *src_at, *src;  /* tensor t's source parts:
                              * src[src_at[t] .. src_at[t + 1]) */
    uint32_t *box_at;        /* its distinct boxes:
                              * box[box_at[t] .. box_at[t + 1]) */
    struct plan_box *box;
    uint32_t *tgt_at, *tgt;  /* its target parts, by rank */
    int8_t *split;           /* the dim its boxes split, all of them along
                              * that one; -1: one whole box, or none;
                              * PLAN_SPLIT_ANY: boxes cut otherwise */
};
#define PLAN_SPLIT_ANY (-2)

static inline const int64_t *plan_part_lo(const struct plan_index *ix,
                                          const struct plan_part *p)
{
    return ix->bounds + p->at;
}

static inline const int64_t *plan_part_hi(const struct plan_manifest *m,
                                          const struct plan_index *ix,
                                          const struct plan_part *p)
{
    return ix->bounds + p->at + m->tensors[p->tensor].ndim;
}

/* The strides, in bytes, of a piece along each dim of its tensor: its
 * box's dense strides, or the whole tensor's for a flat piece. */
static inline void plan_piece_strides(const struct plan_manifest *m,
                                      const struct plan_piece *p,
                                      uint64_t *str)
{
    const struct plan_tensor *t = &m->tensors[p->tensor];
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];
    uint64_t elem = plan_piece_elem(m, p);
    int flat = plan_piece_box(m, p, lo, hi) < 0;

    for (int i = t->ndim - 1; i >= 0; i--)
        str[i] = i == t->ndim - 1
            ? elem
            : str[i + 1] * (uint64_t)(flat ? t->shape[i + 1]
                                           : hi[i + 1] - lo[i + 1]);
}

/* The dims a part of a piece of t lacks in front: 1 for a stacked view
 * (a part is within one slab), else 0. */
static inline int plan_part_lead(const struct plan_tensor *t)
{
    return t->view != NULL && t->view->per > 0;
}

/* ... and along each dim of the part's plain tensor: the same, but for a
 * stacked view, whose leading dim the part does not have. */
static inline void plan_part_strides(const struct plan_manifest *m,
                                     const struct plan_part *part,
                                     uint64_t *str)
{
    const struct plan_piece *p = &m->pieces[part->piece];
    int lead = plan_part_lead(&m->tensors[p->tensor]);

    plan_piece_strides(m, p, str);
    memmove(str, str + lead, (size_t)(PLAN_MAX_DIMS - lead) * sizeof(*str));
}

/* Elements where two parts of one tensor meet, 0 where they do not. */
uint64_t plan_parts_meet(const struct plan_manifest *m,
                         const struct plan_index *ix,
                         const struct plan_part *a,
                         const struct plan_part *b);
/* Every piece's parts, in piece order, into ix->part and ix->bounds. */
fx_status_t plan_index_cut(const struct plan_manifest *m,
                           struct plan_index *ix);
/* Cuts every piece into parts, groups them, checks every rank against
 * nranks and that the source parts of each tensor are identical or
 * disjoint. */
fx_status_t plan_index_build(const struct plan_manifest *m, int nranks,
                             struct plan_index *ix);
/* Every target part wholly covered by source boxes. */
fx_status_t plan_index_check_coverage(const struct plan_manifest *m,
                                      const struct plan_index *ix);
/* The boxes of the target part's tensor that may overlap it: [*b0, *b1)
 * (exactly those where the boxes split one dim; a superset otherwise). */
void plan_index_boxes(const struct plan_manifest *m,
                      const struct plan_index *ix,
                      const struct plan_part *target, uint32_t *b0,
                      uint32_t *b1);
void plan_index_free(struct plan_index *ix);

#endif
