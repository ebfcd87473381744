/*
 * A source takes ranks new to the job in (fx_session_grow, the join's
 * rounds in join.c): a grown data-parallel grid, a third inference group.
 * The old targets take no part and see nothing change: this source's
 * manifest keeps their pieces at the same indices (manifest_grown), its
 * plan keeps their replicas (plan_build_split), and their bindings, flow
 * control and checksums' areas stay where set-up put them. Only a source
 * that writes to a new rank rebuilds its program, from the grown plan;
 * the others extend their manifest and arrays, and are done.
 */
#include <stdlib.h>
#include <string.h>

#include "core/session_int.h"
#include "util/log.h"

/* *p (elem bytes each) from n0 to n entries, the new ones zero (all of
 * them where *p is NULL); a NULL array stays NULL where keep_null (it
 * means "none"). */
static fx_status_t extend(void **p, size_t elem, size_t n0, size_t n,
                          int keep_null)
{
    unsigned char *q;

    if (*p == NULL && keep_null)
        return FX_OK;
    if (*p == NULL)
        n0 = 0;
    if ((q = realloc(*p, n * elem)) == NULL)
        return err_set(FX_ERR_NOMEM, "no memory to grow an array to %zu "
                       "entries", n);
    memset(q + n0 * elem, 0, (n - n0) * elem);
    *p = q;
    return FX_OK;
}

/* The session's arrays, per piece of m (its pieces then the new ranks')
 * and per rank of the grown job. */
static fx_status_t extend_arrays(fx_session_t *s, uint32_t npieces0,
                                 uint32_t npieces, int n0, int n)
{
    fx_status_t st;

    if ((st = extend((void **)&s->bind, sizeof(*s->bind), npieces0, npieces,
                     0)) != FX_OK ||
        (st = extend((void **)&s->src, sizeof(*s->src), npieces0, npieces,
                     0)) != FX_OK ||
        (st = extend((void **)&s->dst, sizeof(*s->dst), npieces0, npieces,
                     0)) != FX_OK ||
        (st = extend((void **)&s->check_dst, sizeof(*s->check_dst),
                     (size_t)n0, (size_t)n, 1)) != FX_OK)
        return st;
    /* members.c's per rank, which set-up left NULL without targets */
    if ((st = extend((void **)&s->out, 1, (size_t)n0, (size_t)n, 0)) !=
        FX_OK)
        return st;
    return extend((void **)&s->seen, sizeof(*s->seen), (size_t)n0,
                  (size_t)n, 0);
}

/* What refuses a grown job on this source before anything changes. */
static fx_status_t grow_check(fx_session_t *s, int size, int n)
{
    int busy;

    if (size <= s->ctx->size)
        return err_set(FX_ERR_INVALID, "fx_session_grow: the new ranks see "
                       "a job of %d ranks, and it has %d already", size,
                       s->ctx->size);
    if (n != size - s->ctx->size)
        return err_set(FX_ERR_INVALID, "fx_session_grow: %d new rank(s) "
                       "joined a job growing from %d to %d ranks: every new "
                       "rank joins at once", n, s->ctx->size, size);
    if (s->nsplits == FX_GROW_MAX)
        return err_set(FX_ERR_UNSUPPORTED, "fx_session_grow: this session's "
                       "job grew %d times, the most a session takes",
                       FX_GROW_MAX);
    if (s->ctx->nsessions != 1)
        return err_set(FX_ERR_STATE, "fx_session_grow: this context holds "
                       "%d sessions: a job grows under one (destroy the "
                       "others first)", s->ctx->nsessions);
    pthread_mutex_lock(&s->push_mu);
    busy = s->push_job && atomic_load(&s->push_done) == 0;
    pthread_mutex_unlock(&s->push_mu);
    if (busy)
        return err_set(FX_ERR_STATE, "fx_session_grow: a push is under way "
                       "(fx_session_push_start): finish it "
                       "(fx_session_push_finish) first");
    return FX_OK;
}

/* Whether this source writes to a rank of [n0, ...). */
static int writes_new(const struct plan *p, int me, int n0)
{
    size_t first, n;

    plan_source_segs(p, me, &first, &n);
    for (size_t i = first; i < first + n; i++)
        if (p->segs[i].target >= n0)
            return 1;
    return 0;
}

/* The program again, from the grown plan; the old one stays if not. */
static fx_status_t rebuild(fx_session_t *s, struct plan *plan)
{
    struct eng_program prog = s->prog;
    struct eng_source *source = s->source;
    struct eng_dst_bind *areas = s->check_areas;
    fx_status_t st;

    memset(&s->prog, 0, sizeof(s->prog));
    s->source = NULL;
    s->check_areas = NULL;
    s->plan = plan;
    st = session_source_build(s);
    s->plan = NULL;
    if (st != FX_OK) {
        eng_source_close(s->source);
        eng_program_free(&s->prog);
        free(s->check_areas);
        s->prog = prog;
        s->source = source;
        s->check_areas = areas;
        return st;
    }
    eng_source_close(source);
    eng_program_free(&prog);
    free(areas);
    return FX_OK;
}

fx_status_t session_grow(fx_session_t *s, const struct plan_manifest *grown,
                         int size, const struct grow_rank *g, int n,
                         unsigned char *admitted)
{
    fx_ctx_t *ctx = s->ctx;
    const struct plan_manifest *old = s->m;
    struct plan_manifest *exp = NULL, *m = NULL;
    struct plan *plan = NULL;
    int n0 = ctx->size, me = ctx->rank, ntold = s->prog.ntargets;
    int *fresh = NULL, nfresh = 0;
    fx_status_t st;

    if ((st = grow_check(s, size, n)) != FX_OK)
        return st;
    s->splits[s->nsplits] = n0; /* kept once the job grew */
    /* a compact manifest: this rank's part of it, as set-up expanded */
    if (manifest_compact(grown) &&
        (st = manifest_expand(grown, size, me, &exp)) != FX_OK)
        return st;
    if ((st = manifest_grown(old, exp ? exp : grown, n0, &m)) != FX_OK ||
        (st = manifest_validate(m, size)) != FX_OK ||
        (st = plan_build_split(m, size, me, s->splits, s->nsplits + 1,
                               &plan)) != FX_OK ||
        (st = ctx_grow(ctx, size)) != FX_OK)
        goto out;
    for (int i = 0; i < n && st == FX_OK; i++)
        if ((st = blob_decode_import(ctx, g[i].blob, g[i].blob_len,
                                     g[i].rank)) != FX_OK)
            err_prefix(st, "the blob of rank %d", g[i].rank);
    if (st == FX_OK)
        st = extend_arrays(s, old->npieces, m->npieces, n0, size);
    if (st == FX_OK && (fresh = malloc((size_t)n * sizeof(*fresh))) == NULL)
        st = err_set(FX_ERR_NOMEM, "no memory for %d new ranks", n);
    s->m = m; /* the bindings name m's pieces */
    for (int i = 0; i < n && st == FX_OK; i++)
        st = session_take_bindings(s, g[i].rank, g[i].binds, g[i].binds_len);
    if (st == FX_OK && writes_new(plan, me, n0))
        st = rebuild(s, plan);
    if (st != FX_OK) { /* as it was: its arrays only longer */
        s->m = old;
        ctx_grow(ctx, n0);
        goto out;
    }
    manifest_free(s->own_m);
    s->own_m = m;
    m = NULL;
    s->nsplits++;
    /* the new ranks in the program: their process, flow control afresh */
    for (int i = 0; i < s->prog.ntargets; i++) {
        int t = s->prog.targets[i];

        if (t < n0)
            continue;
        s->seen[t].incarn = fab_peer_incarnation(ctx->fab, t);
        admitted[t] = 1;
        fresh[nfresh++] = t;
        s->targets_joined++;
    }
    fab_session_begin(ctx->fab, s->gen, fresh, nfresh, NULL, 0);
    fab_copy_targets(ctx->fab, s->prog.ntargets);
    memset(s->path_peers, 0, sizeof(s->path_peers));
    st = session_count_peers(s);
    LOG_INFO("rank %d: the job grew from %d to %d ranks; %d of the new ones "
             "take this source's writes (%d targets before, %d now)",
             me, n0, size, nfresh, ntold, s->prog.ntargets);
out:
    free(fresh);
    plan_free(plan);
    manifest_free(m);
    manifest_free(exp);
    return st;
}
