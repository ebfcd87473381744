/*
 * The plan layer: the model's tensors, the pieces each rank holds as a
 * source or needs as a target, their validation, and the write segments
 * that bring every target its bytes. Pure C, no I/O but reading a manifest
 * file, no fabric: everything here is unit-testable on its own.
 *
 * Words. A tensor has a name, a dtype and a shape (row-major). A piece is
 * the part of one tensor that one rank holds (source) or needs (target):
 * the whole tensor, or the range [start, end) along one dimension. A rank
 * stores its piece densely, row-major in the piece's own shape, at the
 * address the application binds; offsets below are bytes into that dense
 * layout. Source pieces of one tensor are either identical (replicas: any
 * one of them may serve) or disjoint.
 */
#ifndef FX_PLAN_PLAN_H
#define FX_PLAN_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "fabxfer.h"

#define PLAN_MAX_DIMS 8
#define PLAN_NAME_MAX 256

/* A piece's role is the public fx_role_t; its word in manifests and in
 * messages: "source" or "target". */
const char *plan_role_name(fx_role_t role);

struct plan_tensor {
    char *name;
    int dtype;               /* index into the dtype table (plan_dtype_*) */
    size_t elem_size;
    int ndim;                /* 0 for a scalar */
    int64_t shape[PLAN_MAX_DIMS];
    uint64_t bytes;
};

/* Every rank holds every rank's pieces (validation and replica choice need
 * them all), so a piece is kept small: its box is derived, not stored. */
struct plan_piece {
    int rank;
    fx_role_t role;
    uint32_t tensor;         /* index into manifest tensors */
    int dim;                 /* -1: the whole tensor */
    int64_t start, end;      /* along dim, when dim >= 0 */
    uint64_t bytes;
};

struct plan_manifest {
    struct plan_tensor *tensors;
    uint32_t ntensors, tensors_cap;
    struct plan_piece *pieces;
    uint32_t npieces, pieces_cap;
    int max_rank;            /* highest rank named by a piece, -1 if none */
    void *index;             /* name -> tensor lookup (private) */
};

/* The piece as a box of the tensor: [lo[i], hi[i]) along each dim i. */
static inline void plan_piece_box(const struct plan_tensor *t,
                                  const struct plan_piece *p, int64_t *lo,
                                  int64_t *hi)
{
    for (int i = 0; i < t->ndim; i++) {
        lo[i] = i == p->dim ? p->start : 0;
        hi[i] = i == p->dim ? p->end : t->shape[i];
    }
}

static inline int64_t plan_piece_lo(const struct plan_piece *p, int i)
{
    return i == p->dim ? p->start : 0;
}

static inline int64_t plan_piece_hi(const struct plan_tensor *t,
                                    const struct plan_piece *p, int i)
{
    return i == p->dim ? p->end : t->shape[i];
}

/* dtypes: "bf16", "f16"/"float16", "f32"/"float32", "f64", "fp8_e4m3",
 * "fp8_e5m2", "i8", "u8", "i16", "i32", "i64", "bool" (and the torch
 * spellings "bfloat16", "float16", "float32", "float64", "int8", "uint8",
 * "int16", "int32", "int64"). Returns the index, or -1. */
int plan_dtype_parse(const char *name);
const char *plan_dtype_name(int dtype);
size_t plan_dtype_size(int dtype);
/* The canonical names, "bf16, f16, ..., bool", for messages. */
void plan_dtype_list(char *buf, size_t len);

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
 * same manifest, however it was built (JSON or API). */
uint64_t manifest_hash(const struct plan_manifest *m);
/* The FNV-1a behind it, one integer at a time (as 8 little-endian bytes):
 * start from PLAN_HASH_INIT. */
#define PLAN_HASH_INIT 0xcbf29ce484222325ull
uint64_t plan_hash_i64(uint64_t h, int64_t v);

/* Validation for a job of nranks ranks, before any byte moves: every
 * rank named exists; every target piece is wholly covered by source
 * pieces; source pieces of a tensor are identical or disjoint; tensors
 * with no target are allowed; names unique (checked when added). The
 * message names the tensor and the ranks. */
fx_status_t manifest_validate(const struct plan_manifest *m, int nranks);

/* One strided run set: count runs of run_len bytes, the i-th copied from
 * src_off + i * src_stride of the source piece to dst_off + i * dst_stride
 * of the target piece. A whole contiguous overlap is count 1. */
struct plan_seg {
    int source, target;      /* ranks */
    uint32_t tensor;
    uint32_t src_piece, dst_piece; /* indices into manifest pieces */
    uint64_t src_off, dst_off;
    uint64_t run_len, count;
    uint64_t src_stride, dst_stride;
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
 * balancing bytes per source (largest overlaps first, each to the replica
 * with the fewest bytes so far; ties to the lower rank). Deterministic:
 * every rank computes the same choices. Only the segments that rank sends
 * or receives are kept (all of them for rank -1), so a rank's plan grows
 * with its own pieces, not with the job's. The manifest must have passed
 * manifest_validate. */
fx_status_t plan_build(const struct plan_manifest *m, int nranks, int rank,
                       struct plan **out);
void plan_free(struct plan *p);

/* Segments with the given source rank: [*first, *first + *n) of p->segs.
 * In a plan built for one rank, another source's are only those that
 * write to that rank. */
void plan_source_segs(const struct plan *p, int source, size_t *first,
                      size_t *n);

/* Inside src/plan only: the pieces grouped by tensor, identical source
 * pieces (replicas) gathered into one box and the distinct boxes sorted
 * along the one dimension they split. validate.c builds it and checks
 * coverage with it; plan.c finds the boxes each target overlaps with it,
 * so that neither does pairwise work over all pieces of a tensor. */
struct plan_box {
    uint32_t first, n;       /* its replicas: src[first .. first + n), by
                              * rank */
};

struct plan_index {
    uint32_t *src_at, *src;  /* tensor t's source pieces:
                              * src[src_at[t] .. src_at[t + 1]) */
    uint32_t *box_at;        /* its distinct boxes:
                              * box[box_at[t] .. box_at[t + 1]) */
    struct plan_box *box;
    uint32_t *tgt_at, *tgt;  /* its target pieces, by rank */
    int8_t *split;           /* the dim its boxes split; -1: one whole box,
                              * or none */
};

/* Groups the pieces, checks every rank against nranks and that the source
 * pieces of each tensor are identical or disjoint. */
fx_status_t plan_index_build(const struct plan_manifest *m, int nranks,
                             struct plan_index *ix);
/* Every target piece wholly covered by source boxes. */
fx_status_t plan_index_check_coverage(const struct plan_manifest *m,
                                      const struct plan_index *ix);
/* The boxes of the target piece's tensor that overlap it: [*b0, *b1). */
void plan_index_boxes(const struct plan_manifest *m,
                      const struct plan_index *ix,
                      const struct plan_piece *target, uint32_t *b0,
                      uint32_t *b1);
void plan_index_free(struct plan_index *ix);

#endif
