/*
 * FABXFER_VERIFY in a session: each target gives each of its sources an
 * area, registered once, for the CRCs of the source's units (one per plan
 * segment from it); the source fills and writes them every version
 * (engine/check.c, pipeline.c) and the target checks what landed before
 * the version is the application's (engine/checker.c). A version that
 * fails goes back to its sources at once, the one whose bytes differ
 * told so in the release.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/session_int.h"
#include "util/clock.h"
#include "util/host.h"
#include "util/log.h"

/* Target, after the plan and before the blobs go out (the area is a
 * target region, which the blob lists): an area sized for each source's
 * units. */
fx_status_t verify_area(fx_session_t *s)
{
    const struct plan *p = s->plan;
    int me = s->ctx->rank;
    size_t at = 0, n = 0;
    fx_status_t st;

    if (s->ctx->tune.verify.mode == ENG_VERIFY_OFF || !s->has_target)
        return FX_OK;
    s->check_off = calloc((size_t)s->ctx->size, sizeof(*s->check_off));
    s->check_nunits = calloc((size_t)s->ctx->size, sizeof(uint32_t));
    if (s->check_off == NULL || s->check_nunits == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the checksums' areas");
    for (size_t i = 0; i < p->nsegs; i++)
        if (p->segs[i].target == me)
            s->check_nunits[p->segs[i].source]++, n++;
    if (n == 0)
        return FX_OK;
    for (int r = 0; r < s->ctx->size; r++) {
        if (s->check_nunits[r] == 0)
            continue;
        s->check_off[r] = at;
        at += sizeof(struct eng_check_head) +
              s->check_nunits[r] * sizeof(uint32_t);
        at = (at + 7) & ~(size_t)7;
    }
    if (posix_memalign(&s->check_area, 64, at) != 0)
        return err_set(FX_ERR_NOMEM, "no memory for %zu bytes of "
                       "checksums", at);
    memset(s->check_area, 0, at);
    st = fx_region_register(s->ctx, s->check_area, at, FX_REGION_TARGET,
                            &s->check_region);
    return st == FX_OK ? FX_OK
                       : err_prefix(st, "registering the checksums' area");
}

/* The threads this target checks with; from ENG_CHECKER_CPUS up, one of
 * them takes check points, which its sources then send. */
static int check_threads(const fx_session_t *s)
{
    return s->ctx->tune.verify_threads ? s->ctx->tune.verify_threads
                                       : (int)host_cpus();
}

/* Whether this target takes check points: a checker thread, and live
 * regions (a shadow checks at its apply, and its receiver drops marks). */
static int takes_points(const fx_session_t *s)
{
    for (uint32_t p = 0; p < s->m->npieces; p++)
        if (s->bind[p].region != NULL &&
            (s->bind[p].region->flags & FX_REGION_SHADOW))
            return 0;
    return check_threads(s) >= ENG_CHECKER_CPUS;
}

int verify_wire(const fx_session_t *s, int source, struct bind_wire *w)
{
    if (s->check_region == NULL || s->check_nunits[source] == 0)
        return 0;
    /* staged: whether it takes check points */
    *w = (struct bind_wire){BIND_CHECKS, s->check_region->id,
                            s->check_off[source], (uint32_t)takes_points(s),
                            0};
    return 1;
}

/* Where source's bytes of piece p are checked on this rank: in host
 * memory (*device -1), or in device memory (its device). A staged CUDA
 * target's pairs land in its pinned slab; where the wait copies the slab
 * up before the check (not a shadow's, copied by fx_session_apply), and
 * up_ok, they are checked on the GPU, after that copy: a kernel reads a
 * Llama-3-8B layer in about a millisecond, the host's cores took 82-100
 * ms (bench/results/verify/h100-f.txt), and the copy is covered too. */
static const char *landing(const fx_session_t *s, uint32_t piece, int source,
                           int up_ok, int *device)
{
    const fx_region_t *r = s->bind[piece].region;

    if (r->slab != NULL && (r->slab_all || !s->ctx->remote[source].hmem) &&
        (!up_ok || (r->flags & FX_REGION_SHADOW))) {
        *device = -1;
        return (const char *)r->slab + s->bind[piece].off;
    }
    *device = r->kind == FX_MEM_HOST ? -1 : r->device;
    return (const char *)(r->shadow ? r->shadow : r->base) +
           s->bind[piece].off;
}

/* What this rank cannot check (st, its detail in err_last()): an error
 * of its set-up, but under auto a word in the readiness verdicts, after
 * which no rank checks this session (verify_settle). */
static fx_status_t cannot(fx_session_t *s, fx_status_t st)
{
    if (!s->ctx->tune.verify_auto)
        return st;
    s->check_cannot = 1;
    snprintf(s->check_why, sizeof(s->check_why), "%s", err_last());
    return FX_OK;
}

void verify_settle(fx_session_t *s)
{
    if (s->check_skip < 0)
        return;
    if (s->check_cannot)
        LOG_INFO("rank %d: FABXFER_VERIFY=auto: no checksums in this "
                 "session: %s", s->ctx->rank, s->check_why);
    else
        LOG_INFO("rank %d: FABXFER_VERIFY=auto: no checksums in this "
                 "session, since rank %d cannot read all it moves (its log "
                 "says why)", s->ctx->rank, s->check_skip);
    eng_checker_close(s->checker);
    s->checker = NULL;
    eng_source_unverify(s->source);
}

/* Every unit of this target, by source in plan order, as the sources
 * number them; 0 where up_ok put GPU units on two devices (a rank's GPU
 * checks run on one). */
static int fill_units(fx_session_t *s, int up_ok)
{
    const struct plan *p = s->plan;
    int me = s->ctx->rank, k = 0, device, dev0 = -1;
    size_t n = 0;

    for (int i = 0; i < s->nsources; i++) {
        int src = s->sources[i];

        s->check_unit0[i] = n;
        for (; k < (int)p->nsegs && p->segs[k].source <= src; k++) {
            const struct plan_seg *g = &p->segs[k];
            const char *at;

            if (g->target != me || g->source != src)
                continue;
            at = landing(s, g->dst_piece, src, up_ok, &device);
            s->check_units[n++] = (struct eng_check_unit){
                at + g->dst_off, g->run_len, g->count, g->dst_stride,
                g->tensor, g->dst_off, device};
            if (up_ok && device >= 0 && dev0 >= 0 && device != dev0)
                return 0;
            dev0 = device >= 0 ? device : dev0;
        }
    }
    s->check_unit0[s->nsources] = n;
    return 1;
}

/* Target, once the blobs are in (a pair's path decides where its bytes
 * land): its units, and its checker. */
fx_status_t verify_units(fx_session_t *s)
{
    fx_status_t st;
    size_t n = 0;

    if (s->check_region == NULL)
        return FX_OK;
    for (int r = 0; r < s->ctx->size; r++)
        n += s->check_nunits[r];
    s->check_units = calloc(n, sizeof(*s->check_units));
    s->check_unit0 = calloc((size_t)s->nsources + 1, sizeof(size_t));
    if (s->check_units == NULL || s->check_unit0 == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %zu checksum units", n);
    /* staged pairs in their slabs where on their GPUs they would take two */
    if (!fill_units(s, 1))
        fill_units(s, 0);
    s->check_target = (struct eng_check_target){
        s->m, s->ctx->rank, s->sources, s->check_unit0, s->check_units,
        s->check_area, s->check_off, s->ctx->tune.verify,
        check_threads(s), s->ctx->timeout_ms};
    st = eng_checker_open(&s->check_target, s->nsources, &s->checker);
    return st == FX_ERR_UNSUPPORTED ? cannot(s, st) : st;
}

/* Program target i's CRCs (c's) fit its area d, which lies in its region. */
static fx_status_t area_fits(const fx_session_t *s,
                             const struct eng_checks *c, int i,
                             const struct eng_dst_bind *d)
{
    size_t off, len;

    eng_checks_target(c, i, &off, &len);
    if (d->off <= d->rk->len && len <= d->rk->len - d->off)
        return FX_OK;
    return err_set(FX_ERR_BLOB, "rank %d's area for the checksums from rank "
                   "%d, %zu bytes at offset %llu, is outside its %llu-byte "
                   "region %u", s->prog.targets[i], s->ctx->rank, len,
                   (unsigned long long)d->off,
                   (unsigned long long)d->rk->len, d->region);
}

/* Source, once its program is built and its source open: the pieces of
 * each unit its steps write, and where each target wants the CRCs. */
fx_status_t verify_source(fx_session_t *s)
{
    struct eng_check_args a = {s->plan, s->ctx->rank, s->dst, &s->prog,
                               NULL};
    struct eng_checks *c;
    uint8_t *marks_to;
    fx_status_t st;

    if (s->ctx->tune.verify.mode == ENG_VERIFY_OFF || s->source == NULL)
        return FX_OK;
    s->check_areas = calloc((size_t)s->prog.ntargets, sizeof(*s->check_areas));
    if (s->check_areas == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the checksums' areas");
    for (int i = 0; i < s->prog.ntargets; i++) {
        int t = s->prog.targets[i];

        if (s->check_dst == NULL || s->check_dst[t].rk == NULL)
            return err_set(FX_ERR_BLOB, "rank %d gave no area for the "
                           "checksums of the versions it gets from rank %d",
                           t, s->ctx->rank);
        s->check_areas[i] = s->check_dst[t];
    }
    /* Check points where the pair counts writedata (its marks arrive
     * after the writes before them) and the target takes them. */
    if ((marks_to = calloc((size_t)s->ctx->size, 1)) == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %d ranks' marks",
                       s->ctx->size);
    for (int r = 0; r < s->ctx->size; r++)
        if ((marks_to[r] = (uint8_t)(fab_peer_writedata(s->ctx->fab, r) &&
                                     s->check_dst[r].staged)))
            a.marks_to = marks_to;
    st = eng_checks_build(&a, &c);
    free(marks_to);
    if (st == FX_ERR_UNSUPPORTED)
        return cannot(s, st);
    if (st != FX_OK)
        return st;
    /* Promise 2 for the CRCs too: each target's area lies in its region,
     * checked before anything is written. */
    for (int i = 0; i < s->prog.ntargets; i++)
        if ((st = area_fits(s, c, i, &s->check_areas[i])) != FX_OK) {
            eng_checks_free(c);
            return st;
        }
    return eng_source_verify(s->source, c, s->check_areas,
                             s->ctx->tune.verify);
}

/* Target: before the wait for version, and as its check points come
 * (with the staged GPU regions' marks, which share the hook). */
void verify_begin(fx_session_t *s, uint64_t version)
{
    if (s->checker != NULL)
        eng_checker_begin(s->checker, version);
}

fx_status_t verify_marked(int i, const uint64_t words[3], void *arg)
{
    fx_session_t *s = arg;

    if ((uint32_t)words[0] == ENG_MARK_CHECK) {
        if (s->checker != NULL)
            eng_checker_point(s->checker, i, (uint32_t)(words[0] >> 32),
                              words[1], words[2]);
        return FX_OK;
    }
    return s->slabs != NULL ? eng_slabs_marked(i, words, s->slabs) : FX_OK;
}

/* Target: check version as it landed, every source's units that are due;
 * a source whose bytes differ is told so by the next release. */
fx_status_t verify_version(fx_session_t *s, uint64_t version)
{
    double t0 = clock_now();
    uint8_t *bad;
    fx_status_t st;

    s->check_bytes = 0;
    s->check_count = 0;
    s->check_failed = 0;
    s->check_s = 0;
    if (s->checker == NULL)
        return FX_OK;
    if ((bad = calloc((size_t)s->nsources + 1, 1)) == NULL)
        return err_set(FX_ERR_NOMEM, "no memory to check %d sources",
                       s->nsources);
    st = eng_checker_finish(s->checker, version, &s->check_bytes,
                            &s->check_count, bad);
    for (int i = 0; i < s->nsources; i++)
        if (bad[i]) {
            fab_reject_next(s->ctx->fab, s->sources[i]);
            s->check_failed++;
        }
    free(bad);
    s->check_s = clock_now() - t0;
    if (st != FX_OK) {
        s->rejected = version;
        LOG_WARN("rank %d: %s", s->ctx->rank, err_last());
        if (s->check_failed > 1)
            return err_prefix(st, "%u sources' bytes differ",
                              s->check_failed);
    }
    return st;
}

/* Source, after a push: what its targets said of the versions before
 * (the release of each came with this push's flow control). */
void verify_rejections(fx_session_t *s)
{
    uint64_t n = 0, tag = 0, k, last = 0;
    int who = -1;

    for (int i = 0; s->check_areas != NULL && i < s->prog.ntargets; i++) {
        k = fab_peer_rejected(s->ctx->fab, s->prog.targets[i], &tag);
        n += k;
        if (k > 0 && tag >= last) {
            last = tag;
            who = s->prog.targets[i];
        }
    }
    if (n > s->check_rejected)
        LOG_WARN("rank %d: %llu more version(s) it pushed failed their "
                 "checksums at a target, the last version %llu at rank %d "
                 "(whose error names the tensor)", s->ctx->rank,
                 (unsigned long long)(n - s->check_rejected),
                 (unsigned long long)last, who);
    s->check_rejected = n;
}

fx_status_t verify_retarget(fx_session_t *s, int t,
                            const struct bind_wire *w)
{
    const struct remote_peer *rp = &s->ctx->remote[t];
    size_t i = eng_target_index(&s->prog, t);
    struct eng_dst_bind d;
    fx_status_t st;

    if (w->tensor != BIND_CHECKS || w->region_id >= rp->nregions)
        return err_set(FX_ERR_BLOB, "rank %d's new process names region %u "
                       "for the checksums from rank %d, which its blob does "
                       "not list", t, w->region_id, s->ctx->rank);
    d = (struct eng_dst_bind){&rp->regions[w->region_id], w->off,
                              w->region_id, w->staged != 0};
    /* The source planned its check points for the old process. */
    if (d.staged != s->check_dst[t].staged)
        return err_set(FX_ERR_INVALID, "rank %d's new process %s check "
                       "points and the old one %s: FABXFER_VERIFY_THREADS "
                       "decides it, and the new process keeps it", t,
                       d.staged ? "takes" : "takes no",
                       d.staged ? "did not" : "did");
    if ((st = area_fits(s, eng_source_checks(s->source), (int)i, &d)) !=
        FX_OK)
        return st;
    s->check_dst[t] = d;
    s->check_areas[i] = d;
    eng_source_reprove(s->source);
    return FX_OK;
}

void verify_close(fx_session_t *s)
{
    eng_checker_close(s->checker);
    fx_region_deregister(s->check_region);
    free(s->check_area);
    free(s->check_off);
    free(s->check_nunits);
    free(s->check_units);
    free(s->check_unit0);
    free(s->check_dst);
    free(s->check_areas);
}
