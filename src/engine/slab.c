/*
 * Staged CUDA targets: a CUDA target region is backed by a pinned host
 * slab that peers write into, copied to the GPU as it fills. With counted
 * writedata each source marks its writes as it goes (a few times a
 * version, eng_mark), and what a mark covers is queued for copy as soon
 * as the writes before it are counted in, while later buckets are still
 * on their way. With message notification, what each source wrote is
 * queued when its notification arrives. Either way the wait returns when
 * all copies are done.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "mem/mem.h"
#include "util/clock.h"
#include "util/error.h"

/* One staged region: what of its slab to copy to the GPU once each
 * source's bytes are in (spans[at[i] .. at[i + 1]) for the i-th source),
 * queued while the other sources are still arriving. */
struct slab {
    struct eng_slab_region r;
    struct mem_span *spans;
    size_t *at;
    struct mem_span *def;     /* the rank's pieces in it, merged, sorted */
    size_t ndef;
    struct mem_span *scratch; /* ndef: one mark's spans */
    struct mem_upload *up;
};

struct eng_slabs {
    struct slab *v;
    int n;
    int *sources;
    uint8_t *marks_from;
    uint8_t *hmem_from;
    int nsources;
};

/* Whether source i writes region r's slab. */
static int writes_slab(const uint8_t *hmem_from,
                       const struct eng_slab_region *r, int i)
{
    return r->all || hmem_from == NULL || !hmem_from[i];
}

static int span_cmp(const void *a, const void *b)
{
    const struct mem_span *x = a, *y = b;

    return x->off < y->off ? -1 : x->off > y->off;
}

/* A gap this small is copied rather than paid for with one more copy
 * call: a call costs a few microseconds, in which the copy engine moves
 * about this much (H200: ~55 GB/s). Without it, a source whose tensors
 * alternate with another source's made one call per tensor (100,000 x
 * 4 KiB from 2 sources: 0.46 s a version instead of 0.11). */
#define SPAN_GAP (128u << 10)

/* Sort and merge v[0..n) where they touch, or, when within defined (the
 * rank's own pieces, merged), where the gap is under SPAN_GAP: a gap
 * outside the pieces is the application's memory and is never copied
 * over. Returns the new count. */
static size_t merge_spans(struct mem_span *v, size_t n,
                          const struct mem_span *defined, size_t ndefined)
{
    size_t w = 0, d = 0;

    qsort(v, n, sizeof(*v), span_cmp);
    for (size_t i = 0; i < n; i++) {
        struct mem_span *last = w ? &v[w - 1] : NULL;
        uint64_t gap = last && defined != NULL ? SPAN_GAP : 0;

        /* the piece span holding last */
        while (last && d < ndefined &&
               defined[d].off + defined[d].len <= last->off)
            d++;
        if (last && d < ndefined &&
            v[i].off + v[i].len > defined[d].off + defined[d].len)
            gap = 0;
        if (last && last->off + last->len + gap >= v[i].off) {
            if (v[i].off + v[i].len > last->off + last->len)
                last->len = v[i].off + v[i].len - last->off;
        } else {
            v[w++] = v[i];
        }
    }
    return w;
}

/* Segment sg's bytes in the slab: one span from its first to its last
 * byte, or (exact) a span per run. Returns the count added at v. */
static size_t seg_spans(const struct plan_seg *sg, uint64_t off, int exact,
                        struct mem_span *v)
{
    if (!exact) {
        v[0] = (struct mem_span){off + sg->dst_off,
                                 (sg->count - 1) * sg->dst_stride +
                                     sg->run_len};
        return 1;
    }
    for (uint64_t j = 0; j < sg->count; j++)
        v[j] = (struct mem_span){off + sg->dst_off + j * sg->dst_stride,
                                 sg->run_len};
    return sg->count;
}

/* Where some sources write region k's device memory themselves (a path
 * per pair), the bytes of those that write the slab, run by run, merged:
 * a copy from the slab must never reach the others' bytes. */
static fx_status_t exact_def(const struct eng_slabs_args *a, int k,
                             struct mem_span **def, size_t *ndef)
{
    size_t n = 0, cap = 0, first, cnt;

    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < a->nsources; i++) {
            if (!writes_slab(a->hmem_from, &a->regions[k], i))
                continue;
            plan_source_segs(a->plan, a->sources[i], &first, &cnt);
            for (size_t j = first; j < first + cnt; j++) {
                const struct plan_seg *sg = &a->plan->segs[j];
                const struct eng_slab_piece *b = &a->pieces[sg->dst_piece];

                if (sg->target != a->me || b->region != k)
                    continue;
                if (pass == 0)
                    cap += sg->count;
                else
                    n += seg_spans(sg, b->off, 1, *def + n);
            }
        }
        if (pass == 0 &&
            (*def = malloc((cap ? cap : 1) * sizeof(**def))) == NULL)
            return err_set(FX_ERR_NOMEM, "no memory for GPU slab spans");
    }
    *ndef = merge_spans(*def, n, NULL, 0);
    return FX_OK;
}

/*
 * For one staged CUDA target region, what each source writes into it: per
 * plan segment, the range from its first to its last byte. A strided
 * segment's range also holds other sources' bytes, and so may a merged
 * gap; copying them early is harmless, because every byte is copied again
 * by its own source's span, queued later on the same stream, after that
 * source's bytes are in. Nothing outside the rank's pieces is copied, nor
 * (where some sources write the device memory: exact) outside the bytes
 * of the sources that write the slab.
 */
static fx_status_t slab_spans(const struct eng_slabs_args *a, int k,
                              struct slab *g)
{
    size_t cap = 0, n = 0, ndef = 0, first, cnt;
    struct mem_span *def = NULL;
    int exact = 0;
    fx_status_t st;

    for (int i = 0; i < a->nsources; i++)
        exact |= !writes_slab(a->hmem_from, &g->r, i);
    for (int i = 0; i < a->nsources; i++) {
        if (!writes_slab(a->hmem_from, &g->r, i))
            continue;
        plan_source_segs(a->plan, a->sources[i], &first, &cnt);
        for (size_t j = first; j < first + cnt; j++)
            cap += exact ? a->plan->segs[j].count : 1;
    }
    g->spans = malloc((cap ? cap : 1) * sizeof(*g->spans));
    g->at = malloc((size_t)(a->nsources + 1) * sizeof(*g->at));
    if (g->spans == NULL || g->at == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for GPU slab spans");
    if (exact) {
        if ((st = exact_def(a, k, &g->def, &g->ndef)) != FX_OK)
            return st;
        ndef = g->ndef;
    } else {
        def = malloc((a->m->npieces ? a->m->npieces : 1) * sizeof(*def));
        if (def == NULL)
            return err_set(FX_ERR_NOMEM, "no memory for GPU slab spans");
        for (uint32_t p = 0; p < a->m->npieces; p++)
            if (a->pieces[p].region == k)
                def[ndef++] = (struct mem_span){a->pieces[p].off,
                                                a->m->pieces[p].bytes};
        ndef = merge_spans(def, ndef, NULL, 0);
        /* sized for every piece of the job: keep only this rank's */
        g->def = ndef ? realloc(def, ndef * sizeof(*def)) : NULL;
        if (g->def == NULL)
            g->def = def;
        g->ndef = ndef;
    }
    g->scratch = malloc((ndef ? ndef : 1) * sizeof(*g->scratch));
    if (g->scratch == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for GPU slab spans");
    for (int i = 0; i < a->nsources; i++) {
        size_t start = n;

        g->at[i] = n;
        if (!writes_slab(a->hmem_from, &g->r, i))
            continue;
        plan_source_segs(a->plan, a->sources[i], &first, &cnt);
        for (size_t j = first; j < first + cnt; j++) {
            const struct plan_seg *sg = &a->plan->segs[j];
            const struct eng_slab_piece *b = &a->pieces[sg->dst_piece];

            if (sg->target == a->me && b->region == k)
                n += seg_spans(sg, b->off, exact, g->spans + n);
        }
        n = start + merge_spans(g->spans + start, n - start, g->def, ndef);
    }
    g->at[a->nsources] = n;
    return FX_OK;
}

fx_status_t eng_slabs_open(const struct eng_slabs_args *a,
                           struct eng_slabs **out)
{
    struct eng_slabs *ss;
    fx_status_t st;

    *out = NULL;
    if (a->nregions == 0)
        return FX_OK;
    ss = calloc(1, sizeof(*ss));
    if (ss == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for GPU slabs");
    ss->v = calloc((size_t)a->nregions, sizeof(*ss->v));
    ss->sources = malloc((size_t)(a->nsources ? a->nsources : 1) *
                         sizeof(*ss->sources));
    ss->marks_from = calloc((size_t)(a->nsources ? a->nsources : 1), 1);
    ss->hmem_from = calloc((size_t)(a->nsources ? a->nsources : 1), 1);
    if (ss->v == NULL || ss->sources == NULL || ss->marks_from == NULL ||
        ss->hmem_from == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory for GPU slabs");
        goto fail;
    }
    memcpy(ss->sources, a->sources, (size_t)a->nsources * sizeof(int));
    if (a->marks_from != NULL)
        memcpy(ss->marks_from, a->marks_from, (size_t)a->nsources);
    if (a->hmem_from != NULL)
        memcpy(ss->hmem_from, a->hmem_from, (size_t)a->nsources);
    ss->nsources = a->nsources;
    for (int k = 0; k < a->nregions; k++) {
        struct slab *g = &ss->v[ss->n++];

        g->r = a->regions[k];
        if ((st = slab_spans(a, k, g)) != FX_OK ||
            (st = mem_upload_open(g->r.device, &g->up)) != FX_OK)
            goto fail;
    }
    *out = ss;
    return FX_OK;
fail:
    eng_slabs_close(ss);
    return st;
}

static fx_status_t upload_all(struct eng_slabs *ss, int i)
{
    fx_status_t st;

    for (int k = 0; k < ss->n; k++) {
        struct slab *g = &ss->v[k];

        st = mem_upload_queue(g->up, g->r.gpu, g->r.host,
                              g->spans + g->at[i], g->at[i + 1] - g->at[i]);
        if (st != FX_OK)
            return st;
    }
    return FX_OK;
}

/* A source that marks has had every byte under a mark by now. */
fx_status_t eng_slabs_arrived(int i, void *arg)
{
    struct eng_slabs *ss = arg;

    return ss->marks_from[i] ? FX_OK : upload_all(ss, i);
}

/* Queue [lo, hi) of the marked region, as far as it holds this rank's
 * pieces (bytes between them are the application's). Another source's
 * bytes in the range may not be in yet: they are copied again by their
 * own source's mark, later, on the same stream. */
fx_status_t eng_slabs_marked(int i, const uint64_t words[3], void *arg)
{
    struct eng_slabs *ss = arg;
    uint64_t lo = words[1], hi = words[2];

    if (words[0] == ENG_MARK_ALL) /* too many regions to mark one by one */
        return upload_all(ss, i);
    for (int k = 0; k < ss->n; k++) {
        struct slab *g = &ss->v[k];
        size_t a = 0, b, n = 0;

        if (g->r.id != words[0])
            continue;
        /* its writes went to the device memory itself */
        if (!writes_slab(ss->hmem_from, &g->r, i))
            return FX_OK;
        b = g->ndef;
        while (a < b) { /* first piece span ending past lo */
            size_t mid = a + (b - a) / 2;

            if (g->def[mid].off + g->def[mid].len <= lo)
                a = mid + 1;
            else
                b = mid;
        }
        for (; a < g->ndef && g->def[a].off < hi; a++) {
            uint64_t x = g->def[a].off > lo ? g->def[a].off : lo;
            uint64_t y = g->def[a].off + g->def[a].len < hi
                             ? g->def[a].off + g->def[a].len
                             : hi;

            g->scratch[n++] = (struct mem_span){x, y - x};
        }
        return mem_upload_queue(g->up, g->r.gpu, g->r.host, g->scratch, n);
    }
    return err_set(FX_ERR_BLOB, "source rank %d marked region %llu, which "
                   "is no staged GPU region of this rank",
                   ss->sources[i], (unsigned long long)words[0]);
}

fx_status_t eng_slabs_finish(struct eng_slabs *ss, double *seconds)
{
    double t0 = clock_now();
    fx_status_t st = FX_OK, fst;

    for (int i = 0; ss != NULL && i < ss->n; i++)
        if ((fst = mem_upload_finish(ss->v[i].up)) != FX_OK && st == FX_OK)
            st = fst;
    *seconds = clock_now() - t0;
    return st;
}

void eng_slabs_close(struct eng_slabs *ss)
{
    if (ss == NULL)
        return;
    for (int i = 0; i < ss->n; i++) {
        mem_upload_close(ss->v[i].up);
        free(ss->v[i].spans);
        free(ss->v[i].at);
        free(ss->v[i].def);
        free(ss->v[i].scratch);
    }
    free(ss->v);
    free(ss->sources);
    free(ss->marks_from);
    free(ss->hmem_from);
    free(ss);
}
