/*
 * A source's program, built once per session: its plan segments become
 * runs at real addresses in destination order (taken from the plan as it
 * is walked when they come that way, sorted otherwise), runs contiguous on
 * both sides merge, long runs are written directly from the tensors (a
 * few to a write, as far as the provider gathers and scatters) and short
 * ones packed into buckets, where neighbours on the target side become one
 * write; then the marks for staged GPU targets. Targets that read the same
 * source bytes in the same order (replicas) form a group: their buckets
 * are packed once and written to each member. Every version replays the
 * program.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "util/cfg.h"
#include "util/convert.h"
#include "util/error.h"

/* len is the bytes written to the target; a run converted while packed
 * (conv) reads conv_src_len(conv, len) bytes of the source. */
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
    int conv;
    const float *scale;        /* conv_scaled: its first element's block's */
    uint32_t phase, block;     /* ... which it starts phase elements into */
};

static uint64_t src_len(const struct run *r)
{
    return r->conv ? conv_src_len(r->conv, r->len) : r->len;
}

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
    char ebuf[ERR_ESC_MAX];

    if (d->rk == NULL)
        return err_set(FX_ERR_STATE, "tensor \"%s\": target rank %d did not "
                       "publish where it holds it", err_esc(ebuf, name),
                       s->target);
    if (d->off > d->rk->len || pc->bytes > d->rk->len - d->off)
        return err_set(FX_ERR_RANGE, "tensor \"%s\": target rank %d binds "
                       "its %llu bytes at offset %llu of a %llu-byte region; "
                       "nothing was written", err_esc(ebuf, name), s->target,
                       (unsigned long long)pc->bytes,
                       (unsigned long long)d->off,
                       (unsigned long long)d->rk->len);
    return FX_OK;
}

/* The last byte a segment touches on one side lies within the piece
 * (bytes of it): so that no offset computed from it wraps or leaves the
 * piece, whatever plan or binding it came from. */
static int seg_fits(uint64_t off, uint64_t count, uint64_t stride,
                    uint64_t run, uint64_t bytes)
{
    uint64_t end;

    return count > 0 &&
           !__builtin_mul_overflow(count - 1, stride, &end) &&
           !__builtin_add_overflow(end, off, &end) &&
           !__builtin_add_overflow(end, run, &end) && end <= bytes;
}

/* Every segment inside its two pieces and the source piece inside the
 * region it is bound to; the runs counted without wrapping, so that the
 * arrays sized from them hold them. */
static fx_status_t check_segs(const struct eng_program_args *a, size_t first,
                              size_t n)
{
    uint64_t runs = 0;
    char ebuf[ERR_ESC_MAX];

    for (size_t i = first; i < first + n; i++) {
        const struct plan_seg *s = &a->plan->segs[i];
        const struct eng_src_bind *sb = &a->src[s->src_piece];
        uint64_t sbytes = a->m->pieces[s->src_piece].bytes;
        const char *name = a->m->tensors[s->tensor].name;

        if (!seg_fits(s->src_off, s->count, s->src_stride, s->src_run_len,
                      sbytes) ||
            !seg_fits(s->dst_off, s->count, s->dst_stride, s->run_len,
                      a->m->pieces[s->dst_piece].bytes))
            return err_set(FX_ERR_INVALID, "tensor \"%s\": a segment of "
                           "%llu runs of %llu bytes to rank %d falls outside "
                           "its pieces", err_esc(ebuf, name),
                           (unsigned long long)s->count,
                           (unsigned long long)s->run_len, s->target);
        if (__builtin_add_overflow(runs, s->count, &runs) ||
            runs > SIZE_MAX / sizeof(struct run))
            return err_set(FX_ERR_INVALID, "tensor \"%s\": source rank %d "
                           "would write more runs than memory can index",
                           err_esc(ebuf, name), a->source);
        if (sb->mr != NULL &&
            (sb->off > sb->mr->len || sbytes > sb->mr->len - sb->off))
            return err_set(FX_ERR_RANGE, "tensor \"%s\": source rank %d "
                           "binds its %llu bytes at offset %llu of a "
                           "%zu-byte region", err_esc(ebuf, name), a->source,
                           (unsigned long long)sbytes,
                           (unsigned long long)sb->off, sb->mr->len);
    }
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
    char ebuf[ERR_ESC_MAX];

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
                           err_esc(ebuf, a->m->tensors[s->tensor].name),
                           a->source);
    }
    *r = (struct run){
        s->target, sb->device,
        sb->direct && (a->direct_to == NULL || a->direct_to[s->target]),
        sb->mr,
        sb->off + s->src_off + it->k * s->src_stride,
        db->rk, db->off + s->dst_off + it->k * s->dst_stride, s->run_len,
        db->region, db->staged, s->conv, NULL, 0, 0,
    };
    if (conv_scaled(s->conv)) {
        const struct plan_tensor *t = &a->m->tensors[s->tensor];
        const struct eng_src_bind *scb = &a->src[s->scale_piece];

        if (scb->mr == NULL || (scb->device >= 0) != (sb->device >= 0))
            return err_set(FX_ERR_STATE, "tensor \"%s\": source rank %d "
                           "holds no scales beside it where the packer "
                           "reads it", err_esc(ebuf, t->name), a->source);
        r->scale = (const float *)(const void *)
                       ((const char *)scb->mr->base + scb->off) +
                   s->blk + (s->row_phase + it->k) /
                                (uint64_t)t->block[0] * s->blk_stride;
        r->phase = s->col_phase;
        r->block = (uint32_t)t->block[1];
    }
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
        last->conv != r->conv || conv_scaled(r->conv) ||
        last->dst_off + last->len != r->dst_off ||
        last->src_off + src_len(last) != r->src_off)
        return 0;
    last->len += r->len;
    return 1;
}

/* One target's runs, merged, one at a time: from the plan as it is walked
 * (runs already in destination order), or from the sorted array. */
struct cursor {
    struct run_iter it;
    const struct run *arr;     /* NULL: read the plan through it */
    size_t left;               /* raw runs of this target not read yet */
    struct run ahead;
    int has_ahead;
};

static void raw_next(struct cursor *c, struct run *r)
{
    int more;

    if (c->arr != NULL)
        *r = *c->arr++;
    else
        next_run(&c->it, r, &more); /* checked by count_runs */
    c->left--;
}

static int cursor_next(struct cursor *c, struct run *out)
{
    if (!c->has_ahead) {
        if (c->left == 0)
            return 0;
        raw_next(c, &c->ahead);
    }
    *out = c->ahead;
    c->has_ahead = 0;
    while (c->left > 0) {
        raw_next(c, &c->ahead);
        if (!merge(out, &c->ahead)) {
            c->has_ahead = 1;
            break;
        }
    }
    return 1;
}

/* What a target's bucket contents depend on: the source bytes of its runs,
 * in order, and how each is sent. */
static int same_source(const struct run *x, const struct run *y)
{
    return x->mr == y->mr && x->src_off == y->src_off && x->len == y->len &&
           x->device == y->device && x->direct == y->direct &&
           x->conv == y->conv && x->scale == y->scale &&
           x->phase == y->phase;
}

/* A target this source writes to. Targets whose runs read the same source
 * bytes in the same order (replicas holding the same pieces the same way)
 * form a group: each bucket is packed once and written to every member. */
struct tgt {
    struct cursor first;       /* at its first run */
    uint64_t sig;              /* hash of its runs' source side */
    size_t nruns;              /* merged */
    size_t group;              /* index of the group's first target */
};

struct builder {
    struct eng_program *p;
    size_t cap_writes, cap_copies, cap_steps;
    uint64_t bucket_used, bucket_size;
    int bucket_open, bucket_device;
    size_t bucket_write0, bucket_copy0;
    size_t *last;              /* per member of the group being added: its
                                * last write in the open bucket, or NONE */
    struct run *part;          /* per member: a piece of a long device run */
    /* The direct step that later runs of the group may join, or NONE. */
    size_t gather;
    int g_device;              /* where its runs are */
    int g_packed;              /* runs were packed since it was opened */
    int host_packed;           /* some bucket holds host memory */
    size_t iov_max, rma_iov_max, span_cap, cap_spans;
    uint64_t gather_max;
};

#define NONE SIZE_MAX

/* Doubling never wraps into a smaller array. */
#define GROW(arr, n, cap)                                                    \
    do {                                                                     \
        if ((n) == (cap)) {                                                  \
            size_t c_ = (cap) ? 2 * (cap) : 64;                              \
            void *a_ = c_ > (cap) && c_ <= SIZE_MAX / sizeof(*(arr))         \
                           ? realloc((arr), c_ * sizeof(*(arr))) : NULL;     \
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
    if (b->bucket_used > p->bucket_max)
        p->bucket_max = b->bucket_used;
    b->bucket_open = 0;
    return FX_OK;
}

/* A write's last range, gathered or not. */
static struct fab_span last_span(const struct eng_program *p,
                                 const struct eng_write *w)
{
    if (w->nspans > 0)
        return p->spans[w->span0 + w->nspans - 1];
    return (struct fab_span){w->mr, w->src_off, w->dst_off, w->len};
}

/* A write's room for cap spans, its own range the first. */
static fx_status_t open_spans(struct builder *b, struct eng_write *w,
                              size_t cap)
{
    struct eng_program *p = b->p;

    if (p->nspans + cap > b->cap_spans) {
        size_t c = b->cap_spans ? 2 * b->cap_spans : 64 * b->span_cap;
        struct fab_span *g = NULL;

        while (c < p->nspans + cap && c <= SIZE_MAX / 2)
            c *= 2;
        /* cap is at most ENG_SPANS_MAX, nspans bounded by the runs */
        if (c >= p->nspans + cap && c <= SIZE_MAX / sizeof(*g))
            g = realloc(p->spans, c * sizeof(*g));
        if (g == NULL)
            return err_set(FX_ERR_NOMEM, "no memory for the program");
        p->spans = g;
        b->cap_spans = c;
    }
    w->span0 = p->nspans;
    p->spans[p->nspans] = last_span(p, w);
    p->nspans += cap;
    w->nspans = 1;
    return FX_OK;
}

/* The source and target ranges of a write, as fab_writev will post it. */
static void ranges_of(const struct eng_program *p, const struct eng_write *w,
                      size_t *nsrc, size_t *ndst)
{
    if (w->nspans == 0)
        *nsrc = *ndst = 1;
    else
        fab_span_ranges(&p->spans[w->span0], w->nspans, nsrc, ndst);
}

/* A member's last write in the open bucket ends where this copy starts in
 * the bucket: it takes the copy's len bytes too, as its last target range
 * grown where they land right after it, else as one more target range
 * while the provider scatters that far. */
static fx_status_t extend_packed(struct builder *b, struct eng_write *w,
                                 const struct run *r, uint64_t len, int *done)
{
    struct eng_program *p = b->p;
    struct fab_span end;
    size_t nsrc, ndst;
    fx_status_t st;

    *done = 0;
    if (w->mr != NULL || w->target != r->target || w->rk != r->rk)
        return FX_OK;
    end = last_span(p, w);
    if (end.dst_off + end.len == r->dst_off) {
        if (w->nspans > 0) {
            if (w->len + len > b->gather_max)
                return FX_OK;
            p->spans[w->span0 + w->nspans - 1].len += len;
        }
        w->len += len;
        *done = 1;
        return FX_OK;
    }
    ranges_of(p, w, &nsrc, &ndst);
    if (ndst >= b->rma_iov_max || w->len + len > b->gather_max)
        return FX_OK;
    /* One source range: the bucket's bytes follow each other. */
    if (w->nspans == 0 && (st = open_spans(b, w, b->rma_iov_max)) != FX_OK)
        return st;
    p->spans[w->span0 + w->nspans++] =
        (struct fab_span){NULL, b->bucket_used, r->dst_off, len};
    w->len += len;
    *done = 1;
    return FX_OK;
}

/* r[0..n): the same source bytes, for each member of a group. */
static fx_status_t add_packed(struct builder *b, const struct run *r, size_t n)
{
    struct eng_program *p = b->p;
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
        for (size_t j = 0; j < n; j++)
            b->last[j] = NONE;
    }
    GROW(p->copies, p->ncopies, b->cap_copies);
    p->copies[p->ncopies++] = (struct eng_copy){
        (const char *)r->mr->base + r->src_off, b->bucket_used, r->len,
        r->conv, r->scale, r->phase, r->block,
    };
    for (size_t j = 0; j < n; j++) {
        int done = 0;

        if (b->last[j] != NONE &&
            (st = extend_packed(b, &p->writes[b->last[j]], &r[j], r->len,
                                &done)) != FX_OK)
            return st;
        if (done)
            continue;
        GROW(p->writes, p->nwrites, b->cap_writes);
        p->writes[p->nwrites] = (struct eng_write){
            r[j].target, NULL, b->bucket_used, r[j].rk, r[j].dst_off, r->len,
            r[j].region, r[j].staged,
        };
        b->last[j] = p->nwrites++;
    }
    b->bucket_used += r->len;
    p->packed_bytes += r->len * n;
    b->g_packed = 1;
    return FX_OK;
}

/* r joins the open direct step if every member's write stays within the
 * provider's limits: one operation then carries several runs, whose
 * fixed cost (a few microseconds on tcp and shm) is paid once. Each run
 * not merged adds a range on at least one side, so a write holds at most
 * iov_max + rma_iov_max - 1 spans. */
static fx_status_t join_direct(struct builder *b, const struct run *r,
                               size_t n, int *joined)
{
    struct eng_program *p = b->p;
    struct eng_write *w0;
    struct fab_span last, next;
    size_t nsrc, ndst;
    fx_status_t rc;

    *joined = 0;
    if (b->gather == NONE || r->device != b->g_device)
        return FX_OK;
    /* Members read the same source runs: the first one's write tells the
     * bytes and the source ranges of all. */
    w0 = &p->writes[p->steps[b->gather].write0];
    last = last_span(p, w0);
    next = (struct fab_span){r->mr, r->src_off, r->dst_off, r->len};
    ranges_of(p, w0, &nsrc, &ndst);
    if (w0->len + r->len > b->gather_max ||
        nsrc + !fab_span_src_touch(&last, &next) > b->iov_max)
        return FX_OK;
    for (size_t j = 0; j < n; j++) {
        const struct eng_write *w = &w0[j];

        last = last_span(p, w);
        next.dst_off = r[j].dst_off;
        ranges_of(p, w, &nsrc, &ndst);
        /* A staged target's mark after the open step would claim what
         * the packed runs since then write, before they are posted. */
        if (w->target != r[j].target || w->rk != r[j].rk ||
            w->staged != r[j].staged || (w->staged && b->g_packed) ||
            w->nspans >= b->span_cap ||
            ndst + !fab_span_dst_touch(&last, &next) > b->rma_iov_max)
            return FX_OK;
    }
    for (size_t j = 0; j < n; j++) {
        struct eng_write *w = &w0[j];

        if (w->nspans == 0 && (rc = open_spans(b, w, b->span_cap)) != FX_OK)
            return rc;
        next.dst_off = r[j].dst_off;
        p->spans[w->span0 + w->nspans++] = next;
        w->len += r->len;
    }
    p->direct_bytes += r->len * n;
    *joined = 1;
    return FX_OK;
}

static fx_status_t add_direct(struct builder *b, const struct run *r, size_t n)
{
    struct eng_program *p = b->p;
    size_t write0 = p->nwrites;
    int joined;
    fx_status_t st;

    if ((st = join_direct(b, r, n, &joined)) != FX_OK || joined)
        return st;
    /* A bucket's writes must be contiguous in the program: close it. */
    if ((st = close_bucket(b)) != FX_OK)
        return st;
    for (size_t j = 0; j < n; j++) {
        GROW(p->writes, p->nwrites, b->cap_writes);
        p->writes[p->nwrites++] = (struct eng_write){
            r[j].target, r->mr, r->src_off, r[j].rk, r[j].dst_off, r->len,
            r[j].region, r[j].staged,
        };
    }
    GROW(p->steps, p->nsteps, b->cap_steps);
    p->steps[p->nsteps++] = (struct eng_step){
        STEP_DIRECT, 0, -1, write0, n, 0, 0,
    };
    p->direct_bytes += r->len * n;
    b->gather = b->span_cap > 1 ? p->nsteps - 1 : NONE;
    b->g_device = r->device;
    b->g_packed = 0;
    return FX_OK;
}

/* A run packed in bucket-sized pieces: device memory gathered on the GPU
 * (every run on the staged path, since the provider never sees GPU
 * memory; the short ones on the direct path), and runs converted while
 * packed, which are never written directly. Pieces end on whole target
 * elements, and a converted piece's source moves by its own elements. */
static fx_status_t add_cut_run(struct builder *b, const struct run *r,
                               size_t n)
{
    uint64_t elem = r->conv ? conv_dst_size(r->conv) : 1, done = 0;
    fx_status_t st;

    while (done < r->len) {
        uint64_t room = b->bucket_open && b->bucket_device == r->device
                            ? b->bucket_size - b->bucket_used
                            : b->bucket_size;
        uint64_t len = r->len - done < room ? r->len - done : room;

        len -= len % elem;
        if (len == 0) {
            if (!b->bucket_open || b->bucket_used == 0)
                return err_set(FX_ERR_INVALID, "FABXFER_BUCKET_SIZE=%llu "
                               "holds no element of %llu bytes",
                               (unsigned long long)b->bucket_size,
                               (unsigned long long)elem);
            if ((st = close_bucket(b)) != FX_OK)
                return st;
            continue;
        }
        for (size_t j = 0; j < n; j++) {
            b->part[j] = r[j];
            b->part[j].src_off += r->conv ? conv_src_len(r->conv, done)
                                          : done;
            b->part[j].dst_off += done;
            b->part[j].len = len;
            if (r->scale != NULL) { /* FP8: one element a byte */
                b->part[j].scale += (r->phase + done) / r->block;
                b->part[j].phase = (uint32_t)((r->phase + done) %
                                              r->block);
            }
        }
        if ((st = add_packed(b, b->part, n)) != FX_OK)
            return st;
        done += len;
    }
    return FX_OK;
}

/* One run of a group's first member (r[0]) and the same bytes for the
 * others, into the program: packed, direct or through the GPU. */
static fx_status_t add_run(struct builder *b, const struct eng_program_args *a,
                           const struct run *r, size_t n)
{
    struct eng_program *p = b->p;

    p->bytes += r->len * n;
    if (r->device >= 0 && p->device >= 0 && r->device != p->device)
        return err_set(FX_ERR_UNSUPPORTED, "source rank %d holds pieces on "
                       "CUDA devices %d and %d: one device per rank",
                       a->source, p->device, r->device);
    /* Short runs of device memory are gathered on the GPU into a host
     * bucket, on either GPU path: one write per run would cost more. */
    if (r->device >= 0 && (!r->direct || r->conv || r->len < a->pack_max)) {
        p->device = r->device;
        return add_cut_run(b, r, n);
    }
    if (r->conv) {
        b->host_packed = 1;
        return add_cut_run(b, r, n);
    }
    if (r->device < 0 && r->len < a->pack_max && r->len <= a->bucket_size) {
        b->host_packed = 1;
        return add_packed(b, r, n);
    }
    return add_direct(b, r, n);
}

/* Split the runs (in destination order, so target by target) per target,
 * and sign each target's source side. */
static void find_targets(struct cursor all, size_t nruns,
                         struct eng_program *p, struct tgt *tg)
{
    struct run r;

    for (size_t k = 0; k < nruns; k++) {
        struct cursor here = all;

        raw_next(&all, &r);
        if (p->ntargets == 0 || p->targets[p->ntargets - 1] != r.target) {
            here.left = 0;
            tg[p->ntargets].first = here;
            p->targets[p->ntargets++] = r.target;
        }
        tg[p->ntargets - 1].first.left++;
    }
    for (int t = 0; t < p->ntargets; t++) {
        struct cursor c = tg[t].first;

        tg[t].sig = PLAN_HASH_INIT;
        while (cursor_next(&c, &r)) {
            uint64_t h = tg[t].sig;

            h = plan_hash_i64(h, (int64_t)(uintptr_t)r.mr);
            h = plan_hash_i64(h, (int64_t)r.src_off);
            h = plan_hash_i64(h, (int64_t)r.len);
            h = plan_hash_i64(h, r.conv);
            tg[t].sig = plan_hash_i64(h, (r.device + 1) * 2 + r.direct);
            tg[t].nruns++;
        }
    }
}

static int same_runs(struct cursor x, struct cursor y)
{
    struct run a, b;

    while (cursor_next(&x, &a))
        if (!cursor_next(&y, &b) || !same_source(&a, &b))
            return 0;
    return !cursor_next(&y, &b);
}

/* Each target joins the first earlier group that reads the same bytes. */
static void group_targets(const struct eng_program *p, struct tgt *tg)
{
    for (int t = 0; t < p->ntargets; t++) {
        tg[t].group = (size_t)t;
        for (int u = 0; u < t; u++)
            if (tg[u].group == (size_t)u && tg[u].sig == tg[t].sig &&
                tg[u].nruns == tg[t].nruns &&
                same_runs(tg[u].first, tg[t].first)) {
                tg[t].group = (size_t)u;
                break;
            }
    }
}

/* Walk each group's members in step: one copy, a write per member. */
static fx_status_t add_groups(struct builder *b,
                              const struct eng_program_args *a,
                              const struct tgt *tg, struct cursor *cur,
                              struct run *r)
{
    const struct eng_program *p = b->p;
    uint64_t packed0 = 0;
    fx_status_t st;

    for (int g = 0; g < p->ntargets; g++) {
        size_t n = 0;

        if (tg[g].group != (size_t)g)
            continue;
        /* A group that packed a bucket's worth or more does not share its
         * last bucket with the next: a shared bucket would hold the next
         * group back until it went out (eng_order_steps). Small groups
         * still share, so that many targets of a few bytes each do not
         * cost a bucket apiece. */
        if (p->packed_bytes - packed0 >= b->bucket_size &&
            (st = close_bucket(b)) != FX_OK)
            return st;
        packed0 = p->packed_bytes;
        for (int t = g; t < p->ntargets; t++)
            if (tg[t].group == (size_t)g)
                cur[n++] = tg[t].first;
        /* The open bucket may hold the previous group's writes: none of
         * them is this group's to extend. */
        for (size_t j = 0; j < n; j++)
            b->last[j] = NONE;
        b->gather = NONE;
        b->p->ngroups++;
        for (;;) {
            size_t j = 0;

            while (j < n && cursor_next(&cur[j], &r[j]))
                j++;
            if (j < n)
                break; /* members end together (same_runs) */
            if ((st = add_run(b, a, r, n)) != FX_OK)
                return st;
        }
    }
    return FX_OK;
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
    return &tg[eng_target_index(p, target)];
}

static fx_status_t push_mark(struct eng_program *p, size_t *cap, size_t after,
                             int target, uint32_t region, uint64_t lo,
                             uint64_t hi)
{
    if (p->nmarks == *cap) {
        size_t c = *cap ? 2 * *cap : 16;
        struct eng_mark *g = c > *cap && c <= SIZE_MAX / sizeof(*g)
                                 ? realloc(p->marks, c * sizeof(*g)) : NULL;

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
static fx_status_t add_marks(struct eng_program *p, const uint8_t *marks_to)
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

        if (!wr->staged || !marks_to[wr->target])
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
            struct fab_span end;
            struct mark_tgt *t;
            int k;

            if (!wr->staged || !marks_to[wr->target] ||
                (t = tgt_of(p, tg, wr->target))->many)
                continue;
            for (k = 0; t->reg[k] != wr->region; k++)
                ;
            /* spans go in destination order: the first starts lowest */
            end = last_span(p, wr);
            if (wr->dst_off < t->lo[k])
                t->lo[k] = wr->dst_off;
            if (end.dst_off + end.len > t->hi[k])
                t->hi[k] = end.dst_off + end.len;
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

/* Each target's last step, for telling it as soon as that is out; only
 * where early_ok says no end of the pair moves device memory and no write
 * goes to a staged GPU target, whose last marks come after the program's
 * last step (told before them, a staged target returned from its wait
 * without the bytes they cover: the model's last tensors on the H200);
 * the others SIZE_MAX, told at the end. */
static fx_status_t find_last_steps(struct eng_program *p,
                                   const uint8_t *early_ok)
{
    p->last_step = calloc((size_t)p->ntargets + 1, sizeof(*p->last_step));
    if (p->last_step == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %d targets' last "
                       "steps", p->ntargets);
    for (size_t i = 0; i < p->nsteps; i++)
        for (size_t w = p->steps[i].write0;
             w < p->steps[i].write0 + p->steps[i].nwrites; w++)
            p->last_step[eng_target_index(p, p->writes[w].target)] = i;
    for (int t = 0; t < p->ntargets; t++)
        if (early_ok == NULL || !early_ok[p->targets[t]])
            p->last_step[t] = SIZE_MAX;
    for (size_t w = 0; w < p->nwrites; w++)
        if (p->writes[w].staged)
            p->last_step[eng_target_index(p, p->writes[w].target)] = SIZE_MAX;
    return FX_OK;
}

/* Deal the steps out group by group in turn (order.c), one turn per
 * group, this source beginning with group (source mod groups), the groups
 * over the first paths first. */
static fx_status_t order_steps(struct eng_program *p, const struct tgt *tg,
                               const struct eng_program_args *a,
                               int *several)
{
    size_t *group_of = malloc(((size_t)p->ntargets + 1) * sizeof(*group_of)),
           ngroups = 0;
    unsigned char *cls = NULL;
    fx_status_t st;

    if (group_of == NULL ||
        (a->path_class != NULL &&
         (cls = calloc((size_t)p->ntargets + 1, 1)) == NULL)) {
        free(group_of);
        return err_set(FX_ERR_NOMEM, "no memory to order the program");
    }
    for (int t = 0; t < p->ntargets; t++)
        group_of[t] = tg[t].group == (size_t)t ? ngroups++
                                               : group_of[tg[t].group];
    /* A group is as slow as its slowest member's path. */
    for (int t = 0; cls != NULL && t < p->ntargets; t++)
        if (a->path_class[p->targets[t]] > cls[group_of[t]])
            cls[group_of[t]] = a->path_class[p->targets[t]];
    st = eng_order_steps(p, group_of, ngroups, (size_t)a->source, cls);
    for (size_t g = 1; cls != NULL && g < ngroups; g++)
        *several |= cls[g] != cls[0];
    free(group_of);
    free(cls);
    return st;
}

static fx_status_t build_sized(const struct eng_program_args *a,
                               uint64_t bucket_size, struct eng_program *out)
{
    struct eng_program p;
    struct builder b;
    struct run_iter it = {.a = a};
    struct run *runs = NULL, *r = NULL;
    struct cursor all, *cur = NULL;
    struct tgt *tg = NULL;
    size_t first, nsegs, nruns, n = (size_t)a->plan->nranks;
    int sorted, several = 0; /* targets on paths of several classes */
    fx_status_t st;

    memset(&p, 0, sizeof(p));
    memset(&b, 0, sizeof(b));
    b.p = &p;
    b.bucket_size = bucket_size;
    b.gather = NONE;
    b.iov_max = fab_iov_cap(a->iov_max, 0);
    b.rma_iov_max = fab_iov_cap(a->rma_iov_max, 0);
    b.span_cap = b.iov_max + b.rma_iov_max - 1;
    b.gather_max = a->gather_max;
    p.device = -1;
    plan_source_segs(a->plan, a->source, &first, &nsegs);
    it.seg = first;
    it.end = first + nsegs;
    if ((st = check_segs(a, first, nsegs)) != FX_OK ||
        (st = count_runs(it, &nruns, &sorted)) != FX_OK)
        return st;
    p.targets = malloc(n * sizeof(*p.targets));
    tg = calloc(n, sizeof(*tg));
    cur = malloc(n * sizeof(*cur));
    r = malloc(n * sizeof(*r));
    b.part = malloc(n * sizeof(*b.part));
    b.last = malloc(n * sizeof(*b.last));
    if (p.targets == NULL || tg == NULL || cur == NULL || r == NULL ||
        b.part == NULL || b.last == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory for the target list");
        goto fail;
    }
    if (!sorted) {
        if ((st = expand(it, nruns, &runs)) != FX_OK)
            goto fail;
        qsort(runs, nruns, sizeof(*runs), run_cmp);
    }
    all = (struct cursor){.it = it, .arr = runs, .left = nruns};
    find_targets(all, nruns, &p, tg);
    group_targets(&p, tg);
    if ((st = add_groups(&b, a, tg, cur, r)) != FX_OK ||
        (st = close_bucket(&b)) != FX_OK ||
        (st = order_steps(&p, tg, a, &several)) != FX_OK ||
        (a->marks_to != NULL && (st = add_marks(&p, a->marks_to)) != FX_OK) ||
        (several && (st = find_last_steps(&p, a->early_ok)) != FX_OK))
        goto fail;
    /* Packed GPU runs to pairs that all take device memory need no trip
     * through the host: 10,000 x 4 KiB 1 -> 3 over shm took 20.5 ms a
     * version direct, written from host buckets into device memory,
     * against 12.1 staged. Only where every bucket has a slot of its own
     * for the version: a peer's copy out of device memory may still run
     * after its write completed (shm's CUDA IPC copies device to device
     * with cudaMemcpy, which returns before it is done), so a slot packed
     * again within the version overwrote what earlier readers had yet to
     * copy (1 -> 3 of 10,000 x 4 KiB with 2 slots on the H200). Across
     * versions, flow control orders them: a target releases a version
     * after its own work on those bytes. */
    p.device_buckets = p.device >= 0 && !b.host_packed && p.nbuckets > 0 &&
                       p.nbuckets <= CFG_BUCKET_DEPTH_MAX &&
                       a->direct_to != NULL;
    for (int t = 0; p.device_buckets && t < p.ntargets; t++)
        p.device_buckets = a->direct_to[p.targets[t]] != 0;
    p.bucket_size = bucket_size;
    goto out;
fail:
    eng_program_free(&p);
out:
    free(runs);
    free(tg);
    free(cur);
    free(r);
    free(b.part);
    free(b.last);
    if (st == FX_OK)
        *out = p;
    return st;
}

/* A bucket that stays on the GPU costs a gather kernel, a checksum
 * kernel where verified, and a write with its CUDA IPC copy per target,
 * whatever its size, while the GPU packs tens of megabytes in tens of
 * microseconds: 10,000 x 4 KiB 1 -> 3 direct over shm took 3.77 ms a
 * version in 4 MiB buckets and 2.11 in 64 MiB (paths/direct-h200.txt).
 * Whether they stay there is known only once the program is built (no
 * bucket may hold host memory), hence a second build at the host's size
 * where they do not. */
fx_status_t eng_program_build(const struct eng_program_args *a,
                              struct eng_program *out)
{
    fx_status_t st;

    if (a->dev_bucket_size <= a->bucket_size)
        return build_sized(a, a->bucket_size, out);
    st = build_sized(a, a->dev_bucket_size, out);
    if (st != FX_OK || out->device_buckets)
        return st;
    eng_program_free(out);
    return build_sized(a, a->bucket_size, out);
}

void eng_program_free(struct eng_program *p)
{
    free(p->steps);
    free(p->writes);
    free(p->copies);
    free(p->spans);
    free(p->targets);
    free(p->marks);
    free(p->last_step);
    memset(p, 0, sizeof(*p));
}
