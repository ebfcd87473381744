/*
 * The session structure behind the public handle, shared by session.c
 * (set-up, push, wait) and slab.c (staged GPU targets).
 */
#ifndef FX_CORE_SESSION_INT_H
#define FX_CORE_SESSION_INT_H

#include "core/ctx_int.h"
#include "engine/engine.h"
#include "mem/mem.h"

struct bind {
    fx_region_t *region; /* NULL: not bound */
    uint64_t off;
};

/* What a target publishes about one of its pieces. */
struct bind_wire {
    uint32_t piece;
    uint32_t region_id;
    uint64_t off;
    uint32_t staged;   /* the region is a staged CUDA slab: mark writes */
    uint32_t pad;
};

/* A staged CUDA target region: what of its slab to copy to the GPU once
 * each source's bytes are in (spans[at[i] .. at[i + 1]) for the session's
 * i-th source), queued while the other sources are still arriving. */
struct gpu_slab {
    fx_region_t *region;
    struct mem_span *spans;
    size_t *at;
    struct mem_span *def;    /* the rank's pieces in it, merged, sorted */
    size_t ndef;
    struct mem_span *scratch; /* ndef: one mark's spans */
    struct mem_upload *up;
};

struct fx_session {
    fx_ctx_t *ctx;
    const struct plan_manifest *m;
    struct bind *bind;            /* per manifest piece, this rank's */
    struct eng_src_bind *src;     /* per manifest piece */
    struct eng_dst_bind *dst;     /* per manifest piece */
    struct plan *plan;            /* set-up only: freed once built on */
    struct eng_program prog;
    struct eng_source *source;
    int *sources;                 /* ranks this target expects */
    int nsources;
    uint64_t expect_bytes;
    int ready, broken;
    int pushed, waited;
    uint64_t last_pushed, last_waited;
    struct gpu_slab *slabs;       /* staged CUDA target regions */
    int nslabs;
    fx_report_t report;
};

/* slab.c: the staged CUDA target regions of this rank (after the plan and
 * the session's sources are known), the copy of what source i wrote (the
 * arrival hook of eng_target_wait, message notification) or of what one
 * of its marks covers (the mark hook, counted writedata), the wait for
 * all copies, and the release. */
fx_status_t slab_setup(fx_session_t *s);
fx_status_t slab_upload_source(int i, void *session);
fx_status_t slab_upload_mark(int i, const uint64_t words[3], void *session);
fx_status_t slab_finish(fx_session_t *s, double *seconds);
void slab_free(fx_session_t *s);

#endif
