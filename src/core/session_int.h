/*
 * The session structure behind the public handle (session.c: set-up,
 * push, wait).
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
    struct eng_slabs *slabs;      /* staged CUDA target regions */
    fx_report_t report;
};

#endif
