/*
 * A source's program, built once per session: its plan segments become
 * runs at real addresses in destination order (taken from the plan as it
 * is walked when they come that way, sorted otherwise), runs contiguous on
 * both sides merge, long runs are written directly from the tensors and
 * short ones packed into buckets, where neighbours on the target side
 * become one write; then the marks for staged GPU targets. Every version
 * replays the program.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine.h"

struct run {
    int target;
    int device;
    int direct;
    const struct fab_mr *mr;
    uint64_t src_off;
    const struct fab_rkey *rk;
    uint64_t dst_off;
    uint64_t len;
    uint32_t region;
    int staged;
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

/* The runs of the source's segments, one at a time, in plan order. */
struct run_iter {
    const struct eng_program_args *a;
    size_t seg, end;
    uint64_t k;
};

static fx_status_t next_run(struct run_iter *it, struct run *r, int *more)
{
    const struct eng_program_args *a = it->a;
    const struct plan_seg *s;
    const struct eng_src_bind *sb;
    const struct eng_dst_bind *db;
    fx_status_t st;

    *more = it->seg < it->end;
    if (!*more)
        return FX_OK;
    s = &a->plan->segs[it->seg];
    sb = &a->src[s->src_piece];
    db = &a->dst[s->dst_piece];
    if (it->k == 0) {
        if ((st = check_dst(a, s)) != FX_OK)
            return st;
        if (sb->mr == NULL)
            return err_set(FX_ERR_STATE, "tensor \"%s\": source rank %d "
                           "holds it but never bound it",
                           a->m->tensors[s->tensor].name, a->source);
    }
    *r = (struct run){
        s->target, sb->device, sb->direct, sb->mr,
        sb->off + s->src_off + it->k * s->src_stride,
        db->rk, db->off + s->dst_off + it->k * s->dst_stride, s->run_len,
        db->region, db->staged,
    };
    if (++it->k == s->count) {
        it->k = 0;
        it->seg++;
    }
    return FX_OK;
}

/* Walks the runs once: are they in destination order already (pieces laid
 * out in tensor order, the usual case)? Then the program is built from
 * the plan as it goes, with no array of every run and no sort. */
static fx_status_t count_runs(struct run_iter it, size_t *n, int *sorted)
{
    struct run prev, r;
    int more;
    fx_status_t st;

    *n = 0;
    *sorted = 1;
    for (;;) {
        if ((st = next_run(&it, &r, &more)) != FX_OK || !more)
            return st;
        if (*n > 0 && run_cmp(&prev, &r) > 0)
            *sorted = 0;
        prev = r;
        (*n)++;
    }
}

static fx_status_t expand(struct run_iter it, size_t nruns, struct run **out)
{
    struct run *runs = malloc((nruns ? nruns : 1) * sizeof(*runs));
    int more;

    if (runs == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %zu write runs", nruns);
    for (size_t k = 0; k < nruns; k++)
        next_run(&it, &runs[k], &more); /* checked by count_runs */
    *out = runs;
    return FX_OK;
}

/* Runs contiguous on both sides (in destination order) become one. */
static int merge(struct run *last, const struct run *r)
{
    if (last->target != r->target || last->rk != r->rk ||
        last->mr != r->mr || last->direct != r->direct ||
        last->dst_off + last->len != r->dst_off ||
        last->src_off + last->len != r->src_off)
        return 0;
    last->len += r->len;
    return 1;
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
            r->region, r->staged,
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
        r->region, r->staged,
    };
    GROW(p->steps, p->nsteps, b->cap_steps);
    p->steps[p->nsteps++] = (struct eng_step){
        STEP_DIRECT, 0, -1, p->nwrites, 1, 0, 0,
    };
    p->nwrites++;
    p->direct_bytes += r->len;
    return FX_OK;
}

/* A run of device memory gathered on the GPU into buckets: every run on
 * the staged path (the provider never sees GPU memory), the short ones on
 * the direct path; long ones are cut to fill buckets. */
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

/* One run, merged, into the program: packed, direct or through the GPU. */
static fx_status_t add_run(struct builder *b, const struct eng_program_args *a,
                           const struct run *r)
{
    struct eng_program *p = b->p;

    if (p->ntargets == 0 || p->targets[p->ntargets - 1] != r->target)
        p->targets[p->ntargets++] = r->target;
    p->bytes += r->len;
    if (r->device >= 0 && p->device >= 0 && r->device != p->device)
        return err_set(FX_ERR_UNSUPPORTED, "source rank %d holds pieces on "
                       "CUDA devices %d and %d: one device per rank",
                       a->source, p->device, r->device);
    /* Short runs of device memory are gathered on the GPU into a host
     * bucket, on either GPU path: one write per run would cost more. */
    if (r->device >= 0 && (!r->direct || r->len < a->pack_max))
        return add_device_run(b, r, &p->device);
    if (r->device < 0 && r->len < a->pack_max && r->len <= a->bucket_size)
        return add_packed(b, r);
    return add_direct(b, r);
}

/* Feeds the runs in destination order through merge to add_run. */
static fx_status_t add_runs(struct builder *b, const struct eng_program_args *a,
                            struct run_iter it, const struct run *sorted,
                            size_t nruns)
{
    struct run cur, r;
    int more;
    fx_status_t st;

    for (size_t k = 0; k < nruns; k++) {
        if (sorted != NULL)
            r = sorted[k];
        else
            next_run(&it, &r, &more);
        if (k > 0 && merge(&cur, &r))
            continue;
        if (k > 0 && (st = add_run(b, a, &cur)) != FX_OK)
            return st;
        cur = r;
    }
    return nruns > 0 ? add_run(b, a, &cur) : FX_OK;
}

/* A staged target's marks in the making: what each of its regions got
 * since the last mark (up to ENG_MARK_REGIONS regions; more, and it gets
 * one mark of everything at the end). */
struct mark_tgt {
    uint64_t total, since, every;
    int nreg, many;
    uint32_t reg[ENG_MARK_REGIONS];
    uint64_t lo[ENG_MARK_REGIONS], hi[ENG_MARK_REGIONS];
};

static struct mark_tgt *tgt_of(const struct eng_program *p,
                               struct mark_tgt *tg, int target)
{
    int lo = 0, hi = p->ntargets;

    while (lo < hi) { /* p->targets is sorted */
        int mid = lo + (hi - lo) / 2;

        if (p->targets[mid] < target)
            lo = mid + 1;
        else
            hi = mid;
    }
    return &tg[lo];
}

static fx_status_t push_mark(struct eng_program *p, size_t *cap, size_t after,
                             int target, uint32_t region, uint64_t lo,
                             uint64_t hi)
{
    if (p->nmarks == *cap) {
        size_t c = *cap ? 2 * *cap : 16;
        struct eng_mark *g = realloc(p->marks, c * sizeof(*g));

        if (g == NULL)
            return err_set(FX_ERR_NOMEM, "no memory for the program's marks");
        p->marks = g;
        *cap = c;
    }
    p->marks[p->nmarks++] = (struct eng_mark){after, target, region, lo, hi};
    return FX_OK;
}

/* Mark each region of t written since the last mark. */
static fx_status_t flush_tgt(struct eng_program *p, size_t *cap, size_t after,
                             int target, struct mark_tgt *t)
{
    fx_status_t st;

    for (int k = 0; k < t->nreg; k++) {
        if (t->hi[k] <= t->lo[k])
            continue;
        if ((st = push_mark(p, cap, after, target, t->reg[k], t->lo[k],
                            t->hi[k])) != FX_OK)
            return st;
        t->lo[k] = UINT64_MAX;
        t->hi[k] = 0;
    }
    t->since = 0;
    return FX_OK;
}

/* Marks of the writes to staged GPU targets: after the step where a target
 * has had 1/ENG_MARKS of its bytes since the last mark, one per region it
 * got, and at the end for the rest, so that every byte is under a mark.
 * Each mark takes a writedata epoch, so they are few: at most
 * ENG_MARK_REGIONS x (ENG_MARKS + 1) per target and version. */
static fx_status_t add_marks(struct eng_program *p)
{
    struct mark_tgt *tg = calloc((size_t)p->ntargets + 1, sizeof(*tg));
    size_t cap = 0;
    fx_status_t st = FX_OK;

    if (tg == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the program's marks");
    for (size_t w = 0; w < p->nwrites; w++) {
        const struct eng_write *wr = &p->writes[w];
        struct mark_tgt *t;
        int k;

        if (!wr->staged)
            continue;
        t = tgt_of(p, tg, wr->target);
        t->total += wr->len;
        for (k = 0; k < t->nreg && t->reg[k] != wr->region; k++)
            ;
        if (k < t->nreg)
            continue;
        if (t->nreg == ENG_MARK_REGIONS) {
            t->many = 1;
            continue;
        }
        t->reg[t->nreg] = wr->region;
        t->lo[t->nreg] = UINT64_MAX;
        t->hi[t->nreg++] = 0;
    }
    for (int i = 0; i < p->ntargets; i++)
        tg[i].every = (tg[i].total + ENG_MARKS - 1) / ENG_MARKS;
    for (size_t i = 0; i < p->nsteps && st == FX_OK; i++) {
        const struct eng_step *step = &p->steps[i];

        for (size_t w = step->write0; w < step->write0 + step->nwrites; w++) {
            const struct eng_write *wr = &p->writes[w];
            struct mark_tgt *t;
            int k;

            if (!wr->staged || (t = tgt_of(p, tg, wr->target))->many)
                continue;
            for (k = 0; t->reg[k] != wr->region; k++)
                ;
            if (wr->dst_off < t->lo[k])
                t->lo[k] = wr->dst_off;
            if (wr->dst_off + wr->len > t->hi[k])
                t->hi[k] = wr->dst_off + wr->len;
            t->since += wr->len;
        }
        for (int j = 0; j < p->ntargets && st == FX_OK; j++)
            if (!tg[j].many && tg[j].since > 0 && tg[j].since >= tg[j].every)
                st = flush_tgt(p, &cap, i, p->targets[j], &tg[j]);
    }
    for (int j = 0; j < p->ntargets && st == FX_OK; j++) {
        if (tg[j].many)
            st = push_mark(p, &cap, p->nsteps - 1, p->targets[j],
                           ENG_MARK_ALL, 0, 0);
        else
            st = flush_tgt(p, &cap, p->nsteps - 1, p->targets[j], &tg[j]);
    }
    free(tg);
    return st;
}

fx_status_t eng_program_build(const struct eng_program_args *a,
                              struct eng_program *out)
{
    struct eng_program p;
    struct builder b;
    struct run_iter it = {.a = a};
    struct run *runs = NULL;
    size_t first, nsegs, nruns;
    int sorted;
    fx_status_t st;

    memset(&p, 0, sizeof(p));
    memset(&b, 0, sizeof(b));
    b.p = &p;
    b.bucket_size = a->bucket_size;
    p.device = -1;
    plan_source_segs(a->plan, a->source, &first, &nsegs);
    it.seg = first;
    it.end = first + nsegs;
    if ((st = count_runs(it, &nruns, &sorted)) != FX_OK)
        return st;
    p.targets = malloc((size_t)a->plan->nranks * sizeof(*p.targets));
    if (p.targets == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the target list");
    if (!sorted) {
        if ((st = expand(it, nruns, &runs)) != FX_OK)
            goto fail;
        qsort(runs, nruns, sizeof(*runs), run_cmp);
    }
    if ((st = add_runs(&b, a, it, runs, nruns)) != FX_OK ||
        (st = close_bucket(&b)) != FX_OK ||
        (a->marks && (st = add_marks(&p)) != FX_OK))
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
    free(p->marks);
    memset(p, 0, sizeof(*p));
}
