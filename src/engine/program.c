/*
 * A source's program, built once per session: expand its plan segments
 * into runs at real addresses, sort them by destination, merge runs that
 * are contiguous on both sides, write long runs directly from the tensors
 * and pack short ones into buckets, where neighbours on the target side
 * become one write. Every version then replays the program.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine.h"

struct run {
    int target;
    int device;
    const struct fab_mr *mr;
    uint64_t src_off;
    const struct fab_rkey *rk;
    uint64_t dst_off;
    uint64_t len;
};

static int run_cmp(const void *a, const void *b)
{
    const struct run *x = a, *y = b;

    if (x->target != y->target)
        return x->target < y->target ? -1 : 1;
    if (x->rk != y->rk)
        return (uintptr_t)x->rk < (uintptr_t)y->rk ? -1 : 1;
    if (x->dst_off != y->dst_off)
        return x->dst_off < y->dst_off ? -1 : 1;
    return 0;
}

/* Promise 2: the whole target piece must lie in the region its rank
 * advertised, checked before any byte moves. */
static fx_status_t check_dst(const struct eng_program_args *a,
                             const struct plan_seg *s)
{
    const struct plan_piece *pc = &a->m->pieces[s->dst_piece];
    const struct eng_dst_bind *d = &a->dst[s->dst_piece];
    const char *name = a->m->tensors[s->tensor].name;

    if (d->rk == NULL)
        return err_set(FX_ERR_STATE, "tensor \"%s\": target rank %d did not "
                       "publish where it holds it", name, s->target);
    if (d->off > d->rk->len || pc->bytes > d->rk->len - d->off)
        return err_set(FX_ERR_RANGE, "tensor \"%s\": target rank %d binds "
                       "its %llu bytes at offset %llu of a %llu-byte region; "
                       "nothing was written", name, s->target,
                       (unsigned long long)pc->bytes,
                       (unsigned long long)d->off,
                       (unsigned long long)d->rk->len);
    return FX_OK;
}

static fx_status_t expand(const struct eng_program_args *a, size_t first,
                          size_t nsegs, struct run **out, size_t *nout)
{
    size_t nruns = 0, k = 0;
    struct run *runs;
    fx_status_t st;

    for (size_t i = first; i < first + nsegs; i++)
        nruns += a->plan->segs[i].count;
    runs = malloc((nruns ? nruns : 1) * sizeof(*runs));
    if (runs == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %zu write runs", nruns);
    for (size_t i = first; i < first + nsegs; i++) {
        const struct plan_seg *s = &a->plan->segs[i];
        const struct eng_src_bind *sb = &a->src[s->src_piece];
        const struct eng_dst_bind *db = &a->dst[s->dst_piece];

        if ((st = check_dst(a, s)) != FX_OK)
            goto undo;
        if (sb->mr == NULL) {
            st = err_set(FX_ERR_STATE, "tensor \"%s\": source rank %d "
                         "holds it but never bound it",
                         a->m->tensors[s->tensor].name, a->source);
            goto undo;
        }
        for (uint64_t r = 0; r < s->count; r++)
            runs[k++] = (struct run){
                s->target, sb->device, sb->mr,
                sb->off + s->src_off + r * s->src_stride,
                db->rk, db->off + s->dst_off + r * s->dst_stride, s->run_len,
            };
    }
    *out = runs;
    *nout = nruns;
    return FX_OK;
undo:
    free(runs);
    return st;
}

/* Merge runs contiguous on both sides (sorted by destination). */
static size_t coalesce(struct run *runs, size_t n)
{
    size_t w = 0;

    for (size_t i = 0; i < n; i++) {
        struct run *last = w ? &runs[w - 1] : NULL;

        if (last && last->target == runs[i].target &&
            last->rk == runs[i].rk && last->mr == runs[i].mr &&
            last->dst_off + last->len == runs[i].dst_off &&
            last->src_off + last->len == runs[i].src_off)
            last->len += runs[i].len;
        else
            runs[w++] = runs[i];
    }
    return w;
}

struct builder {
    struct eng_program *p;
    size_t cap_writes, cap_copies, cap_steps;
    uint64_t bucket_used, bucket_size;
    int bucket_open, bucket_device;
    size_t bucket_write0, bucket_copy0;
};

#define GROW(arr, n, cap)                                                    \
    do {                                                                     \
        if ((n) == (cap)) {                                                  \
            size_t c_ = (cap) ? 2 * (cap) : 64;                              \
            void *a_ = realloc((arr), c_ * sizeof(*(arr)));                  \
            if (a_ == NULL)                                                  \
                return err_set(FX_ERR_NOMEM, "no memory for the program");   \
            (arr) = a_;                                                      \
            (cap) = c_;                                                      \
        }                                                                    \
    } while (0)

static fx_status_t close_bucket(struct builder *b)
{
    struct eng_program *p = b->p;

    if (!b->bucket_open)
        return FX_OK;
    GROW(p->steps, p->nsteps, b->cap_steps);
    p->steps[p->nsteps++] = (struct eng_step){
        STEP_BUCKET, p->nbuckets++, b->bucket_device, b->bucket_write0,
        p->nwrites - b->bucket_write0, b->bucket_copy0,
        p->ncopies - b->bucket_copy0,
    };
    b->bucket_open = 0;
    return FX_OK;
}

static fx_status_t add_packed(struct builder *b, const struct run *r)
{
    struct eng_program *p = b->p;
    struct eng_write *last;
    fx_status_t st;

    /* A bucket is packed by the CPU or by one GPU, never both. */
    if (b->bucket_open && (b->bucket_used + r->len > b->bucket_size ||
                           b->bucket_device != r->device) &&
        (st = close_bucket(b)) != FX_OK)
        return st;
    if (!b->bucket_open) {
        b->bucket_open = 1;
        b->bucket_device = r->device;
        b->bucket_used = 0;
        b->bucket_write0 = p->nwrites;
        b->bucket_copy0 = p->ncopies;
    }
    GROW(p->copies, p->ncopies, b->cap_copies);
    p->copies[p->ncopies++] = (struct eng_copy){
        (const char *)r->mr->base + r->src_off, b->bucket_used, r->len,
    };
    /* Neighbours on the target side leave as one write. */
    last = p->nwrites > b->bucket_write0 ? &p->writes[p->nwrites - 1] : NULL;
    if (last && last->mr == NULL && last->target == r->target &&
        last->rk == r->rk && last->dst_off + last->len == r->dst_off) {
        last->len += r->len;
    } else {
        GROW(p->writes, p->nwrites, b->cap_writes);
        p->writes[p->nwrites++] = (struct eng_write){
            r->target, NULL, b->bucket_used, r->rk, r->dst_off, r->len,
        };
    }
    b->bucket_used += r->len;
    p->packed_bytes += r->len;
    return FX_OK;
}

static fx_status_t add_direct(struct builder *b, const struct run *r)
{
    struct eng_program *p = b->p;
    fx_status_t st;

    /* A bucket's writes must be contiguous in the program: close it. */
    if ((st = close_bucket(b)) != FX_OK)
        return st;

    GROW(p->writes, p->nwrites, b->cap_writes);
    p->writes[p->nwrites] = (struct eng_write){
        r->target, r->mr, r->src_off, r->rk, r->dst_off, r->len,
    };
    GROW(p->steps, p->nsteps, b->cap_steps);
    p->steps[p->nsteps++] = (struct eng_step){
        STEP_DIRECT, 0, -1, p->nwrites, 1, 0, 0,
    };
    p->nwrites++;
    p->direct_bytes += r->len;
    return FX_OK;
}

/* Staged GPU memory never goes to the provider: every run is packed, the
 * long ones cut to fill buckets. */
static fx_status_t add_device_run(struct builder *b, const struct run *r,
                                  int *device)
{
    uint64_t done = 0;
    fx_status_t st;

    *device = r->device;
    while (done < r->len) {
        uint64_t room = b->bucket_open && b->bucket_device == r->device
                            ? b->bucket_size - b->bucket_used
                            : b->bucket_size;
        struct run part = *r;

        if (room == 0) {
            if ((st = close_bucket(b)) != FX_OK)
                return st;
            continue;
        }
        part.src_off += done;
        part.dst_off += done;
        part.len = r->len - done < room ? r->len - done : room;
        if ((st = add_packed(b, &part)) != FX_OK)
            return st;
        done += part.len;
    }
    return FX_OK;
}

static fx_status_t list_targets(struct eng_program *p, const struct run *runs,
                                size_t n)
{
    p->targets = malloc((n ? n : 1) * sizeof(*p->targets));
    if (p->targets == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the target list");
    for (size_t i = 0; i < n; i++)
        if (p->ntargets == 0 || p->targets[p->ntargets - 1] != runs[i].target)
            p->targets[p->ntargets++] = runs[i].target;
    return FX_OK;
}

fx_status_t eng_program_build(const struct eng_program_args *a,
                              struct eng_program *out)
{
    struct eng_program p;
    struct builder b;
    struct run *runs = NULL;
    size_t first, nsegs, nruns = 0;
    fx_status_t st = FX_OK;

    memset(&p, 0, sizeof(p));
    memset(&b, 0, sizeof(b));
    b.p = &p;
    b.bucket_size = a->bucket_size;
    plan_source_segs(a->plan, a->source, &first, &nsegs);
    if ((st = expand(a, first, nsegs, &runs, &nruns)) != FX_OK)
        return st;
    qsort(runs, nruns, sizeof(*runs), run_cmp);
    nruns = coalesce(runs, nruns);
    if ((st = list_targets(&p, runs, nruns)) != FX_OK)
        goto fail;
    p.device = -1;
    for (size_t i = 0; i < nruns && st == FX_OK; i++) {
        p.bytes += runs[i].len;
        if (runs[i].device >= 0 && p.device >= 0 &&
            runs[i].device != p.device)
            st = err_set(FX_ERR_UNSUPPORTED, "source rank %d holds pieces "
                         "on CUDA devices %d and %d: one device per rank",
                         a->source, p.device, runs[i].device);
        else if (runs[i].device >= 0)
            st = add_device_run(&b, &runs[i], &p.device);
        else if (runs[i].len < a->pack_max && runs[i].len <= a->bucket_size)
            st = add_packed(&b, &runs[i]);
        else
            st = add_direct(&b, &runs[i]);
    }
    if (st != FX_OK)
        goto fail;
    if ((st = close_bucket(&b)) != FX_OK)
        goto fail;
    free(runs);
    *out = p;
    return FX_OK;
fail:
    free(runs);
    eng_program_free(&p);
    return st;
}

void eng_program_free(struct eng_program *p)
{
    free(p->steps);
    free(p->writes);
    free(p->copies);
    free(p->targets);
    memset(p, 0, sizeof(*p));
}
