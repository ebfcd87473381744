/*
 * Fuzzes the manifest from JSON text to plans: parse, validate for the job
 * the manifest names (its highest rank + 1, and one rank fewer, which must
 * be refused), then plan for the whole job and for each rank. Beyond what
 * the sanitizers catch it checks what every rank relies on: each segment
 * lies inside its two pieces, every target piece gets exactly its bytes
 * once, the byte matrix agrees with the segments, and a rank's plan is
 * the whole job's segments that it sends or receives, in the same order.
 */
#include <string.h>

#include "fuzz.h"
#include "plan/plan.h"

/* The plan keeps a nranks x nranks matrix: keep the job small enough that
 * planning for each rank stays quick (validation takes any size). */
#define FUZZ_PLAN_RANKS 24

static uint64_t seg_bytes(const struct plan_seg *s)
{
    return s->run_len * s->count;
}

static int seg_same(const struct plan_seg *a, const struct plan_seg *b)
{
    return a->source == b->source && a->target == b->target &&
           a->tensor == b->tensor && a->src_piece == b->src_piece &&
           a->dst_piece == b->dst_piece && a->src_off == b->src_off &&
           a->dst_off == b->dst_off && a->run_len == b->run_len &&
           a->count == b->count && a->src_stride == b->src_stride &&
           a->dst_stride == b->dst_stride;
}

/* The last byte a strided run set touches, +1, must fit the piece. */
static void check_span(uint64_t off, uint64_t stride, const struct plan_seg *s,
                       const struct plan_piece *p, const char *side)
{
    uint64_t end = off + (s->count - 1) * stride + s->run_len;

    FUZZ_ASSERT(s->count > 0 && s->run_len > 0, "empty %s run set", side);
    FUZZ_ASSERT(end <= p->bytes && end > off,
                "%s runs end at %llu, piece of rank %d has %llu bytes", side,
                (unsigned long long)end, p->rank,
                (unsigned long long)p->bytes);
}

/* A segment names the plain tensor: its piece's, or one its view joins. */
static int of_plain(const struct plan_manifest *m, const struct plan_piece *p,
                    uint32_t tensor)
{
    const struct plan_view *v = m->tensors[p->tensor].view;

    if (v == NULL)
        return p->tensor == tensor;
    for (uint32_t i = 0; i < v->n; i++)
        if (v->part[i].tensor == tensor)
            return 1;
    return 0;
}

static void check_whole(const struct plan_manifest *m, const struct plan *all,
                        int nranks)
{
    uint64_t *got = calloc(m->npieces + 1, sizeof(*got));
    uint64_t sum = 0, want = 0, matrix = 0;

    FUZZ_ASSERT(got != NULL, "out of memory");
    for (size_t i = 0; i < all->nsegs; i++) {
        const struct plan_seg *s = &all->segs[i];
        const struct plan_piece *sp, *dp;

        FUZZ_ASSERT(s->src_piece < m->npieces && s->dst_piece < m->npieces,
                    "segment %zu names piece %u/%u of %u", i, s->src_piece,
                    s->dst_piece, m->npieces);
        sp = &m->pieces[s->src_piece];
        dp = &m->pieces[s->dst_piece];
        FUZZ_ASSERT(sp->role == FX_SOURCE && dp->role == FX_TARGET &&
                        sp->rank == s->source && dp->rank == s->target &&
                        m->tensors[s->tensor].view == NULL &&
                        of_plain(m, sp, s->tensor) &&
                        of_plain(m, dp, s->tensor),
                    "segment %zu does not match its pieces", i);
        check_span(s->src_off, s->src_stride, s, sp, "source");
        check_span(s->dst_off, s->dst_stride, s, dp, "target");
        got[s->dst_piece] += seg_bytes(s);
        sum += seg_bytes(s);
        if (i > 0) {
            const struct plan_seg *r = &all->segs[i - 1];

            FUZZ_ASSERT(r->source < s->source ||
                            (r->source == s->source && r->target <= s->target),
                        "segments %zu and %zu out of (source, target) order",
                        i - 1, i);
        }
    }
    for (uint32_t i = 0; i < m->npieces; i++)
        if (m->pieces[i].role == FX_TARGET) {
            uint64_t need = plan_piece_filled(m, i); /* but padding */

            FUZZ_ASSERT(got[i] == need,
                        "target piece %u (rank %d) gets %llu of %llu bytes", i,
                        m->pieces[i].rank, (unsigned long long)got[i],
                        (unsigned long long)need);
            want += need;
        }
    for (size_t i = 0; i < (size_t)nranks * (size_t)nranks; i++)
        matrix += all->bytes[i];
    FUZZ_ASSERT(sum == matrix && sum == want, "segments carry %llu bytes, "
                "the matrix %llu, the target pieces need %llu",
                (unsigned long long)sum, (unsigned long long)matrix,
                (unsigned long long)want);
    free(got);
}

/* Rank r's plan: the whole plan's segments with r on either side. */
static void check_rank(const struct plan *all, const struct plan *mine,
                       int nranks, int r)
{
    size_t k = 0;

    for (size_t i = 0; i < all->nsegs; i++) {
        const struct plan_seg *s = &all->segs[i];

        if (s->source != r && s->target != r)
            continue;
        FUZZ_ASSERT(k < mine->nsegs && seg_same(s, &mine->segs[k]),
                    "rank %d's segment %zu differs from the job's", r, k);
        k++;
    }
    FUZZ_ASSERT(k == mine->nsegs, "rank %d has %zu segments, the job %zu", r,
                mine->nsegs, k);
    FUZZ_ASSERT(memcmp(all->bytes, mine->bytes, (size_t)nranks *
                       (size_t)nranks * sizeof(*all->bytes)) == 0,
                "rank %d's byte matrix differs from the job's", r);
    for (int s = 0; s < nranks; s++) {
        size_t first, n;

        plan_source_segs(mine, s, &first, &n);
        FUZZ_ASSERT(first + n <= mine->nsegs, "source %d's segments past the "
                    "end", s);
        for (size_t i = first; i < first + n; i++)
            FUZZ_ASSERT(mine->segs[i].source == s, "segment %zu is not "
                        "source %d's", i, s);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct plan_manifest *m = NULL;
    struct plan *all = NULL;
    int nranks;

    if (manifest_parse_json((const char *)data, size, &m) != FX_OK)
        return 0;
    FUZZ_ASSERT(m != NULL, "parse succeeded without a manifest");
    (void)manifest_hash(m);
    nranks = m->max_rank + 1 > 0 ? m->max_rank + 1 : 1;
    if (m->max_rank >= 0)
        FUZZ_ASSERT(manifest_validate(m, m->max_rank) != FX_OK,
                    "a job of %d ranks accepts rank %d", m->max_rank,
                    m->max_rank);
    if (manifest_validate(m, nranks) != FX_OK || nranks > FUZZ_PLAN_RANKS)
        goto out;
    /* Rules: each rank's expansion must validate or refuse, and plan. */
    for (int r = 0; manifest_compact(m) && r < nranks; r++) {
        struct plan_manifest *loc = NULL;
        struct plan *mine = NULL;

        if (manifest_expand(m, nranks, r, &loc) == FX_OK &&
            manifest_validate(loc, nranks) == FX_OK)
            FUZZ_ASSERT(plan_build(loc, nranks, r, &mine) == FX_OK,
                        "rank %d's expansion validates, and does not plan",
                        r);
        plan_free(mine);
        manifest_free(loc);
    }
    if (manifest_compact(m))
        goto out;
    if (plan_build(m, nranks, -1, &all) != FX_OK)
        goto out;
    check_whole(m, all, nranks);
    for (int r = 0; r < nranks; r++) {
        struct plan *mine = NULL;

        FUZZ_ASSERT(plan_build(m, nranks, r, &mine) == FX_OK,
                    "the job plans, rank %d does not", r);
        check_rank(all, mine, nranks, r);
        plan_free(mine);
    }
out:
    plan_free(all);
    manifest_free(m);
    return 0;
}
