/*
 * A grown job (fx_session_grow): ranks new to it join a running session
 * as targets, under a manifest that gives them pieces. A source keeps what
 * it already writes exactly as it is, since the old targets take no part:
 * the manifest it goes on with is its old one, the same pieces at the same
 * indices (its bindings and program point at them), with the new ranks'
 * pieces after them; and its plan chooses replicas for the old targets as
 * set-up did, then for the new ones alone. A plan of the whole grown
 * manifest could move an old target's piece to another replica, which has
 * no binding for it.
 */
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "util/error.h"

static fx_status_t copy_piece(const struct plan_manifest *m,
                              const struct plan_piece *p,
                              struct plan_manifest *out)
{
    const struct plan_tensor *t = &m->tensors[p->tensor];
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];

    if (p->dim == PLAN_FLAT)
        return manifest_add_flat(out, p->rank, p->role, t->name, p->start,
                                 p->end);
    if (p->dim == PLAN_BOX) {
        plan_piece_box(m, p, lo, hi);
        return manifest_add_box(out, p->rank, p->role, t->name, t->ndim, lo,
                                hi);
    }
    return manifest_add_piece(out, p->rank, p->role, t->name, p->dim,
                              p->start, p->end);
}

/* What the grown manifest must keep of the old one: its tensors, and
 * every piece of the old ranks; the new ranks only take pieces. */
static fx_status_t check_kept(const struct plan_manifest *old,
                              const struct plan_manifest *grown, int n0)
{
    char a[160], b[160];
    uint32_t kept = 0, had = 0;

    if (old->ntensors != grown->ntensors)
        return err_set(FX_ERR_INVALID, "the grown manifest has %u tensors, "
                       "the session's %u: a grown job keeps the tensors",
                       grown->ntensors, old->ntensors);
    for (uint32_t i = 0; i < old->ntensors; i++)
        if (plan_hash_tensor(PLAN_HASH_INIT, &old->tensors[i]) !=
            plan_hash_tensor(PLAN_HASH_INIT, &grown->tensors[i]))
            return err_set(FX_ERR_INVALID, "tensor %u of the grown manifest "
                           "(\"%s\") is not the session's (\"%s\"), or not "
                           "as it was: a grown job keeps the tensors", i,
                           grown->tensors[i].name, old->tensors[i].name);
    for (uint32_t i = 0; i < old->ntensors; i++)
        if (old->tensors[i].scale >= 0)
            return err_set(FX_ERR_UNSUPPORTED, "the session's manifest has "
                           "FP8 block scales (tensor \"%s\"): a job that "
                           "carries them cannot grow yet (set up a new "
                           "session)", old->tensors[i].name);
    for (uint32_t i = 0; i < old->npieces; i++)
        had += old->pieces[i].rank < n0;
    for (uint32_t i = 0; i < grown->npieces; i++) {
        const struct plan_piece *p = &grown->pieces[i];
        int k;

        if (p->rank >= n0) {
            if (p->role == FX_SOURCE)
                return err_set(FX_ERR_UNSUPPORTED, "the grown manifest "
                               "gives rank %d, new to the job, source "
                               "pieces (%s): ranks join as targets; new "
                               "sources set up a new session", p->rank,
                               plan_piece_text(grown, p, a, sizeof(a)));
            continue;
        }
        k = manifest_find_piece(old, p->rank, p->role, p->tensor);
        if (k < 0 || plan_hash_piece(PLAN_HASH_INIT, old, &old->pieces[k]) !=
                         plan_hash_piece(PLAN_HASH_INIT, grown, p))
            return err_set(FX_ERR_INVALID, "the grown manifest gives %s, "
                           "the session %s: a grown job keeps every piece "
                           "of the ranks it had", plan_piece_text(grown, p, a,
                                                                  sizeof(a)),
                           k < 0 ? "none of it"
                                 : plan_piece_text(old, &old->pieces[k], b,
                                                   sizeof(b)));
        kept++;
    }
    if (kept != had)
        return err_set(FX_ERR_INVALID, "the grown manifest leaves out %u "
                       "piece(s) of the ranks the job had: a grown job keeps "
                       "every one", had - kept);
    return FX_OK;
}

fx_status_t manifest_grown(const struct plan_manifest *old,
                           const struct plan_manifest *grown, int n0,
                           struct plan_manifest **out)
{
    struct plan_manifest *m = NULL;
    fx_status_t st;

    if ((st = check_kept(old, grown, n0)) != FX_OK ||
        (st = manifest_new(&m)) != FX_OK)
        return st;
    for (uint32_t i = 0; st == FX_OK && i < old->ntensors; i++)
        st = manifest_copy_tensor(old, i, m);
    for (uint32_t i = 0; st == FX_OK && i < old->npieces; i++)
        st = copy_piece(old, &old->pieces[i], m);
    for (uint32_t i = 0; st == FX_OK && i < grown->npieces; i++)
        if (grown->pieces[i].rank >= n0)
            st = copy_piece(grown, &grown->pieces[i], m);
    if (st != FX_OK) {
        manifest_free(m);
        return err_prefix(st, "the grown manifest");
    }
    /* The grown manifest's hash, which the new ranks hold and a later
     * join compares; the ranks it was expanded for, as the old one's. */
    m->local_rank = old->local_rank;
    m->whole_hash = manifest_hash(grown);
    m->hash_kept = 1; /* m stands alone: grown may go */
    *out = m;
    return FX_OK;
}

/* Ordered as plan_build orders segments: by source, then target. */
static int seg_before(const struct plan_seg *a, const struct plan_seg *b)
{
    return a->source != b->source ? a->source < b->source
                                  : a->target < b->target;
}

/* *acc and b merged into *acc (b freed). One pair's segments come from
 * one of the two (its target is in one range), so a merge by pair keeps
 * each pair's own order. */
static fx_status_t merge(struct plan *acc, struct plan *b)
{
    size_t i = 0, k = 0, n = 0,
           cells = (size_t)acc->nranks * (size_t)acc->nranks;
    struct plan_seg *segs = malloc((acc->nsegs + b->nsegs + 1) *
                                   sizeof(*segs));

    if (segs == NULL) {
        plan_free(b);
        return err_set(FX_ERR_NOMEM, "plan: no memory for %zu segments",
                       acc->nsegs + b->nsegs);
    }
    while (i < acc->nsegs || k < b->nsegs)
        segs[n++] = k >= b->nsegs ||
                            (i < acc->nsegs &&
                             !seg_before(&b->segs[k], &acc->segs[i]))
                        ? acc->segs[i++] : b->segs[k++];
    for (size_t c = 0; c < cells; c++)
        acc->bytes[c] += b->bytes[c];
    free(acc->segs);
    acc->segs = segs;
    acc->nsegs = n;
    plan_free(b);
    return FX_OK;
}

fx_status_t plan_build_split(const struct plan_manifest *m, int nranks,
                             int rank, const int *splits, int nsplits,
                             struct plan **out)
{
    struct plan *acc = NULL, *b;
    fx_status_t st = FX_OK;
    int lo = 0;

    for (int i = 0; i <= nsplits && st == FX_OK; i++) {
        int hi = i < nsplits ? splits[i] : nranks;

        if (hi <= lo || hi > nranks)
            st = err_set(FX_ERR_INVALID, "plan: the job grew at rank %d "
                         "after %d, in a job of %d", hi, lo, nranks);
        else if ((st = plan_build_targets(m, nranks, rank, lo, hi, &b)) ==
                 FX_OK && acc == NULL)
            acc = b;
        else if (st == FX_OK)
            st = merge(acc, b);
        lo = hi;
    }
    if (st != FX_OK) {
        plan_free(acc);
        return st;
    }
    *out = acc;
    return FX_OK;
}
