/*
 * Sessions: bind a manifest's pieces to this rank's regions, set up once
 * (validate, agree, exchange, plan, build the program), then push
 * (push.c) or wait for versions. Everything that can be refused is
 * refused in setup, before any byte moves.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/session_int.h"
#include "mem/mem.h"
#include "util/cfg.h"
#include "util/host.h"
#include "util/log.h"

/* Register and bind this rank's pieces of scale tensors (set-up): the
 * engine makes and fills their memory (src/engine/scales.c), the session
 * keeps the regions that register it. */
static fx_status_t scales_open(fx_session_t *s)
{
    const struct plan_manifest *m = s->m;
    int rank = s->ctx->rank;
    fx_status_t st;
    char ebuf[ERR_ESC_MAX];

    for (uint32_t p = 0; p < m->npieces; p++) {
        const struct plan_piece *pc = &m->pieces[p];
        const struct plan_tensor *t = &m->tensors[pc->tensor];
        struct eng_scale *sb;
        fx_region_t *region = NULL;
        int w;

        if (pc->rank != rank || pc->role != FX_SOURCE || t->scale_of < 0)
            continue;
        w = manifest_find_piece(m, rank, FX_SOURCE, (uint32_t)t->scale_of);
        if (s->bind[w].region == NULL)
            continue; /* check_bindings says why */
        st = eng_scales_add(&s->scales, m, p, (uint32_t)w,
                            (const char *)s->bind[w].region->base +
                                s->bind[w].off,
                            s->bind[w].region->device, &sb);
        if (sb == NULL)
            return st;
        if (st == FX_OK)
            st = fx_region_register_mem(s->ctx, sb->buf, pc->bytes,
                                        FX_REGION_SOURCE,
                                        sb->device < 0 ? FX_MEM_HOST
                                                       : FX_MEM_CUDA,
                                        sb->device, &region);
        if (st != FX_OK)
            return err_prefix(st, "the scales of \"%s\"",
                              err_esc(ebuf, t->name));
        sb->handle = region;
        s->bind[p] = (struct bind){region, 0};
    }
    return FX_OK;
}

static void scales_close(fx_session_t *s)
{
    for (size_t i = 0; i < s->scales.n; i++)
        fx_region_deregister(s->scales.v[i].handle);
    eng_scales_free(&s->scales);
}

fx_status_t fx_session_create(fx_ctx_t *ctx, const fx_manifest_t *m,
                              fx_session_t **out)
{
    const struct plan_manifest *pm;
    fx_session_t *s;

    if (ctx == NULL || m == NULL || out == NULL)
        return ctx_fail(ctx, err_set(FX_ERR_INVALID, "fx_session_create: "
                        "NULL %s", ctx == NULL ? "context" : m == NULL
                        ? "manifest" : "out"));
    pm = manifest_of(m);
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return ctx_fail(ctx, err_set(FX_ERR_NOMEM, "no memory for a session"));
    s->ctx = ctx;
    s->m = pm;
    /* A compact manifest: this rank's part, its own pieces and its peers'
     * (a local refusal here leaves the others to time out in set-up, as
     * any failed create does). */
    if (manifest_compact(pm)) {
        fx_status_t st = manifest_expand(pm, ctx->size, ctx->rank, &s->own_m);

        if (st != FX_OK) {
            free(s);
            return ctx_fail(ctx, st);
        }
        s->m = pm = s->own_m;
    }
    for (uint32_t p = 0; p < pm->npieces; p++)
        if (pm->pieces[p].rank == ctx->rank) {
            s->has_source |= pm->pieces[p].role == FX_SOURCE;
            s->has_target |= pm->pieces[p].role == FX_TARGET;
        }
    s->shadow_device = -1;
    s->source_device = -1;
    s->check_skip = -1;
    pthread_mutex_init(&s->push_mu, NULL);
    pthread_cond_init(&s->push_cv, NULL);
    ctx_lock(ctx);
    ctx->nsessions++; /* a job grows under one (fx_session_grow) */
    ctx_unlock(ctx);
    s->bind = calloc(pm->npieces ? pm->npieces : 1, sizeof(*s->bind));
    s->src = calloc(pm->npieces ? pm->npieces : 1, sizeof(*s->src));
    s->dst = calloc(pm->npieces ? pm->npieces : 1, sizeof(*s->dst));
    if (s->bind == NULL || s->src == NULL || s->dst == NULL) {
        fx_session_destroy(s);
        return ctx_fail(ctx, err_set(FX_ERR_NOMEM, "no memory for the "
                        "bindings of %u pieces", pm->npieces));
    }
    *out = s;
    return FX_OK;
}

void fx_session_destroy(fx_session_t *s)
{
    if (s == NULL)
        return;
    serve_close(s); /* its threads use what follows */
    ctx_lock(s->ctx);
    eng_source_close(s->source);
    verify_close(s);
    eng_program_free(&s->prog);
    plan_free(s->plan);
    eng_slabs_close(s->slabs);
    free(s->sources);
    free(s->seen);
    free(s->out);
    free(s->bind);
    free(s->src);
    free(s->dst);
    scales_close(s);
    manifest_free(s->own_m);
    s->ctx->nsessions--;
    ctx_unlock(s->ctx);
    pthread_cond_destroy(&s->push_cv);
    pthread_mutex_destroy(&s->push_mu);
    free(s);
}

fx_status_t fx_session_bind(fx_session_t *s, fx_role_t role,
                            const char *tensor, fx_region_t *region,
                            size_t offset)
{
    fx_status_t st = FX_OK;
    fx_ctx_t *ctx;
    int p;
    char ebuf[ERR_ESC_MAX];

    if (s == NULL)
        return err_set(FX_ERR_INVALID, "fx_session_bind: NULL session");
    ctx = s->ctx;
    if (s->ready || s->broken)
        return ctx_fail(ctx, err_set(FX_ERR_STATE, "fx_session_bind(\"%s\") "
                        "after fx_session_setup", tensor == NULL ? "(null)"
                        : err_esc(ebuf, tensor)));
    /* From here a failure refuses this rank's set-up (fx_session_refuse):
     * the other ranks learn it in fx_session_setup. */
    if (tensor == NULL || region == NULL)
        st = err_set(FX_ERR_INVALID, "fx_session_bind: NULL argument "
                     "(%s)", tensor == NULL ? "tensor" : "region");
    else
        st = manifest_piece_named(s->m, ctx->rank, role, tensor, &p);
    if (st == FX_OK && (region->ctx != ctx ||
                        !(region->flags & (role == FX_SOURCE
                                           ? FX_REGION_SOURCE
                                           : FX_REGION_TARGET))))
        st = err_set(FX_ERR_INVALID, "tensor \"%s\": the region is not a "
                     "%s region of this context", err_esc(ebuf, tensor),
                     plan_role_name(role));
    else if (st == FX_OK && (offset > region->mr.len ||
                             s->m->pieces[p].bytes > region->mr.len - offset))
        st = err_set(FX_ERR_RANGE, "tensor \"%s\": %llu bytes at offset "
                     "%zu do not fit in the %zu-byte region",
                     err_esc(ebuf, tensor),
                     (unsigned long long)s->m->pieces[p].bytes, offset,
                     region->mr.len);
    if (st != FX_OK) {
        fx_session_refuse(s, st, err_last()); /* err_last() stays */
        return ctx_fail(ctx, st);
    }
    s->bind[p] = (struct bind){region, offset};
    return FX_OK;
}

fx_status_t fx_session_refuse(fx_session_t *s, fx_status_t status,
                              const char *why)
{
    char text[ERR_MSG_MAX];

    if (s == NULL || status >= FX_OK)
        return err_set(FX_ERR_INVALID, "fx_session_refuse: %s",
                       s == NULL ? "NULL session"
                                 : "status is not an error (< 0)");
    if (s->ready || s->broken)
        return ctx_fail(s->ctx, err_set(FX_ERR_STATE, "fx_session_refuse "
                        "after fx_session_setup: set-up is over"));
    if (s->refused == FX_OK) { /* the first refusal stands */
        snprintf(text, sizeof(text), "%s", why != NULL && why[0] != '\0'
                 ? why : fx_strerror(status));
        memcpy(s->refused_why, text, sizeof(text));
        s->refused = status;
    }
    return FX_OK;
}

static int bind_cmp(const void *a, const void *b)
{
    const struct bind_wire *x = a, *y = b;

    if (x->region_id != y->region_id)
        return x->region_id < y->region_id ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

static uint32_t bind_staged(const fx_region_t *r)
{
    if (r->slab == NULL)
        return BIND_DEVICE;
    return r->slab_all ? BIND_SLAB_ALL : BIND_SLAB_STAGED_PATHS;
}

/* Every piece of this rank bound; target pieces never share a byte. */
fx_status_t session_check_bindings(fx_session_t *s,
                                   struct bind_wire **wire, size_t *nwire)
{
    const struct plan_manifest *m = s->m;
    int rank = s->ctx->rank;
    struct bind_wire *w;
    size_t n = 0;
    char ebuf[ERR_ESC_MAX], ebuf2[ERR_ESC_MAX];

    w = malloc((m->npieces ? m->npieces : 1) * sizeof(*w));
    if (w == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for bindings");
    for (uint32_t p = 0; p < m->npieces; p++) {
        const struct plan_piece *pc = &m->pieces[p];

        if (pc->rank != rank)
            continue;
        if (s->bind[p].region == NULL) {
            free(w);
            return err_set(FX_ERR_STATE, "rank %d never bound its %s piece "
                           "of tensor \"%s\" (fx_session_bind)", rank,
                           plan_role_name(pc->role),
                           err_esc(ebuf, m->tensors[pc->tensor].name));
        }
        if (pc->role == FX_TARGET)
            w[n++] = (struct bind_wire){pc->tensor, s->bind[p].region->id,
                                        s->bind[p].off,
                                        bind_staged(s->bind[p].region), 0};
    }
    qsort(w, n, sizeof(*w), bind_cmp);
    for (size_t i = 1; i < n; i++)
        if (w[i].region_id == w[i - 1].region_id &&
            w[i - 1].off + m->pieces[manifest_find_piece(
                               m, rank, FX_TARGET, w[i - 1].tensor)].bytes >
                w[i].off) {
            const struct plan_tensor *a, *b;
            fx_status_t st;

            a = &m->tensors[w[i - 1].tensor];
            b = &m->tensors[w[i].tensor];
            st = err_set(FX_ERR_INVALID, "rank %d binds target tensors "
                         "\"%s\" and \"%s\" to overlapping bytes of region "
                         "%u", rank, err_esc(ebuf, a->name),
                         err_esc(ebuf2, b->name), w[i].region_id);
            free(w);
            return st;
        }
    *wire = w;
    *nwire = n;
    return FX_OK;
}

/* What a rank says of its set-up at a collective step: its manifest's
 * hash, its fabxfer version, and whether it refuses, with its reason (cut
 * to fit). Every rank gathers every rank's, so that one refusal fails all
 * of them at once instead of leaving the others to wait out
 * FABXFER_TIMEOUT_MS in the next collective. */
#define VERDICT_WHY 240
struct verdict {
    uint64_t hash, version;
    int32_t status;
    uint32_t items;          /* manifest_items(), for naming a difference */
    uint32_t verify_mode, verify_every; /* FABXFER_VERIFY, every rank alike */
    uint32_t cannot_check;   /* step 1: FABXFER_VERIFY=auto, and this rank
                              * cannot read all it moves (verify.c) */
    char why[VERDICT_WHY];
};

void session_verify_said(const fx_session_t *s, uint32_t *mode,
                         uint32_t *every)
{
    const struct ctx_tuning *tn = &s->ctx->tune;

    *mode = (uint32_t)tn->verify.mode | (uint32_t)tn->verify_auto << 8;
    /* the period matters to sample only: full jobs may differ in it */
    *every = tn->verify.mode == ENG_VERIFY_SAMPLE ? tn->verify.every : 0;
}

static const char *verify_name(uint32_t mode)
{
    return mode >> 8 ? "auto, every "
           : mode == ENG_VERIFY_FULL ? "full"
           : mode == ENG_VERIFY_SAMPLE ? "sample, every " : "off";
}

/* A peer's reason goes into our message: only printable bytes of it. */
static void verdict_text(const struct verdict *v, char *out, size_t len)
{
    size_t i;

    for (i = 0; i + 1 < len && i < VERDICT_WHY && v->why[i] != '\0'; i++)
        out[i] = (unsigned char)v->why[i] < 0x20 || v->why[i] == 0x7f
                     ? '?' : v->why[i];
    out[i] = '\0';
}

/* Collective on every rank whatever mine (this rank's status so far, its
 * detail in err_last()): gathers the verdicts, then fails if a rank runs
 * another fabxfer or holds another manifest (step 0 only) or refused,
 * naming it. Where this rank refused, its own error stands. */
static fx_status_t gather_verdicts(fx_session_t *s, fx_status_t mine,
                                   int step)
{
    fx_ctx_t *ctx = s->ctx;
    struct verdict me, *all;
    char why[ERR_MSG_MAX], text[VERDICT_WHY], diff[ERR_MSG_MAX];
    int refused = -1, nrefused = 0, differs = -1;
    fx_status_t st;

    memset(&me, 0, sizeof(me));
    me.hash = manifest_hash(s->m);
    me.items = s->m != NULL ? (uint32_t)manifest_items(s->m) : 0;
    me.version = fx_version();
    session_verify_said(s, &me.verify_mode, &me.verify_every);
    me.cannot_check = s->check_cannot;
    me.status = mine;
    snprintf(why, sizeof(why), "%s", mine != FX_OK ? err_last() : "");
    /* cut to fit, the rest of me.why left zero */
    memcpy(me.why, why, strnlen(why, sizeof(me.why) - 1));
    all = calloc((size_t)ctx->size, sizeof(*all));
    if (all == NULL)
        st = err_set(FX_ERR_NOMEM, "no memory for %d verdicts", ctx->size);
    else
        st = boot_allgather(ctx->boot, step == 0 ? "set-up verdicts"
                                                 : "readiness verdicts",
                            &me, sizeof(me), all);
    /* Another manifest, every rank of one fabxfer and none refusing: the
     * same on every rank, which then all name the difference together. */
    diff[0] = '\0';
    for (int r = 0; step == 0 && st == FX_OK && r < ctx->size; r++) {
        if (all[r].version != all[0].version || all[r].status != FX_OK)
            break;
        if (all[r].hash != all[0].hash && differs < 0)
            differs = r;
        if (r == ctx->size - 1 && differs > 0)
            session_diff_find(s, all[0].items, all[differs].items, differs,
                              diff, sizeof(diff));
    }
    if (mine != FX_OK) {
        free(all);
        return err_set(mine, "%s", why); /* the collective's fate aside */
    }
    for (int r = 0; st == FX_OK && r < ctx->size; r++) {
        if (step == 0 && all[r].version != me.version)
            st = err_set(FX_ERR_STATE, "rank %d runs fabxfer version 0x%llx, "
                         "rank %d 0x%llx", r,
                         (unsigned long long)all[r].version, ctx->rank,
                         (unsigned long long)me.version);
        else if (step == 0 && all[r].hash != all[0].hash)
            st = err_set(FX_ERR_INVALID, "rank %d holds a different "
                         "manifest than rank 0 (hash %016llx, not %016llx)"
                         "%s%s", r, (unsigned long long)all[r].hash,
                         (unsigned long long)all[0].hash,
                         diff[0] != '\0' ? ": " : "", diff);
        else if (step == 0 && (all[r].verify_mode != me.verify_mode ||
                               all[r].verify_every != me.verify_every))
            st = err_set(FX_ERR_INVALID, "rank %d checks versions with "
                         "FABXFER_VERIFY=%s%.0u, rank %d with %s%.0u: every "
                         "rank must agree (FABXFER_VERIFY_EVERY too)", r,
                         verify_name(all[r].verify_mode),
                         all[r].verify_every, ctx->rank,
                         verify_name(me.verify_mode), me.verify_every);
        else if (all[r].status != FX_OK && nrefused++ == 0)
            refused = r;
    }
    for (int r = 0; step == 1 && st == FX_OK && r < ctx->size; r++)
        if (all[r].cannot_check && s->check_skip < 0)
            s->check_skip = r;
    if (st == FX_OK && refused >= 0) {
        verdict_text(&all[refused], text, sizeof(text));
        st = err_set(all[refused].status < 0 ? all[refused].status
                                              : FX_ERR_PEER,
                     "rank %d refused the session set-up%s: %s", refused,
                     nrefused > 1 ? " (and other ranks too)" : "", text);
    }
    free(all);
    return st;
}

fx_status_t session_take_bindings(fx_session_t *s, int t,
                                  const unsigned char *val, size_t len)
{
    fx_ctx_t *ctx = s->ctx;
    struct remote_peer *rp = &ctx->remote[t];
    struct bind_wire w;

    if (len % sizeof(w) != 0)
        return err_set(FX_ERR_BLOB, "rank %d sent %zu bytes of bindings, "
                       "not a whole number of %zu-byte entries", t, len,
                       sizeof(w));
    for (size_t i = 0; i < len / sizeof(w); i++) {
        int p;

        memcpy(&w, val + i * sizeof(w), sizeof(w));
        if (w.tensor == BIND_CHECKS && w.region_id < rp->nregions) {
            if (s->check_dst == NULL &&
                (s->check_dst = calloc((size_t)ctx->size,
                                       sizeof(*s->check_dst))) == NULL)
                return err_set(FX_ERR_NOMEM, "no memory for the checksums' "
                               "areas");
            /* staged: the target takes check points */
            s->check_dst[t] = (struct eng_dst_bind){
                &rp->regions[w.region_id], w.off, w.region_id,
                w.staged != 0};
            continue;
        }
        p = w.tensor < s->m->ntensors
                ? manifest_find_piece(s->m, t, FX_TARGET, w.tensor) : -1;
        /* An expanded manifest holds the targets this rank writes to. */
        if (p < 0 && s->m->local_rank >= 0 && w.tensor < s->m->ntensors &&
            w.region_id < rp->nregions)
            continue;
        if (p < 0 || w.region_id >= rp->nregions)
            return err_set(FX_ERR_BLOB, "rank %d published a binding for "
                           "tensor %u in region %u that its manifest or "
                           "regions do not have", t, w.tensor, w.region_id);
        s->dst[p] = (struct eng_dst_bind){&rp->regions[w.region_id], w.off,
                                          w.region_id,
                                          bind_lands_staged(&w, rp)};
    }
    return FX_OK;
}

/* Pieces below this go into buckets. One program serves every pair of a
 * rank, whatever its path: with several paths, the largest of their
 * break-evens (a write saved costs more than the copy on the slowest). */
static uint64_t default_pack_max(const struct fab *fab)
{
    uint64_t most = 0;

    for (int p = 0; p < fab_npaths(fab); p++) {
        uint64_t v = fab_default_pack_max(fab_path_profile(fab, p)->prov);

        most = v > most ? v : most;
    }
    return most;
}

static fx_status_t setup_source(fx_session_t *s, const struct fx_gather *binds)
{
    size_t first, n;
    fx_status_t st;
    int t;

    plan_source_segs(s->plan, s->ctx->rank, &first, &n);
    for (size_t i = first; i < first + n; i++) {
        t = s->plan->segs[i].target;
        if (i > first && t == s->plan->segs[i - 1].target)
            continue;
        st = session_take_bindings(s, t, binds->val[t], binds->len[t]);
        if (st != FX_OK)
            return st;
    }
    return session_source_build(s);
}

fx_status_t session_source_build(fx_session_t *s)
{
    fx_ctx_t *ctx = s->ctx;
    size_t first, n, bucket, pack_max;
    uint8_t *marks_to, *direct_to, *path_class = NULL, *early_ok = NULL;
    int pack_thread;
    fx_status_t st;
    struct eng_program_args a = {
        .m = s->m, .plan = s->plan, .source = ctx->rank, .src = s->src,
        .dst = s->dst,
    };

    plan_source_segs(s->plan, ctx->rank, &first, &n);
    for (uint32_t p = 0; p < s->m->npieces; p++)
        if (s->bind[p].region != NULL && s->m->pieces[p].role == FX_SOURCE) {
            s->src[p] = (struct eng_src_bind){&s->bind[p].region->mr,
                                              s->bind[p].off,
                                              s->bind[p].region->device,
                                              s->bind[p].region->direct};
            if (s->bind[p].region->device >= 0 && s->source_device < 0)
                s->source_device = s->bind[p].region->device;
        }
    /* Checked against the table's bounds at fx_ctx_create. */
    bucket = ctx->tune.bucket_size;
    pack_max = ctx->tune.pack_max;
    pack_thread = ctx->tune.pack_thread;
    /* auto: a thread wherever this process may run on a second CPU. Where
     * ranks share cores the packer may find none free; the posting thread
     * then packs the buckets it needs itself (pipeline.c), which ran faster
     * on 2 shared cores than either a thread alone or no thread
     * (docs/decisions.md, "The data path"). */
    if (pack_thread < 0)
        pack_thread = host_cpus() >= 2;
    if (n == 0)
        return FX_OK; /* nothing to send: no pool, no packer */
    a.pack_max = pack_max ? pack_max : default_pack_max(ctx->fab);
    a.bucket_size = bucket ? bucket : ENG_BUCKET_HOST;
    a.dev_bucket_size = bucket == 0 && s->source_device >= 0
                            ? ENG_BUCKET_GPU : 0;
    a.iov_max = fab_profile(ctx->fab)->iov_limit;
    a.rma_iov_max = fab_profile(ctx->fab)->rma_iov_limit;
    a.gather_max = fab_profile(ctx->fab)->chunk;
    /* Marks where the pair counts writedata (paths per pair: a target
     * over shm may count while one over tcp;ofi_rxm 2.x hears messages). */
    if ((marks_to = calloc((size_t)ctx->size, 1)) == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %d ranks' marks",
                       ctx->size);
    for (int r = 0; r < ctx->size; r++)
        if ((marks_to[r] = (uint8_t)fab_peer_writedata(ctx->fab, r)))
            a.marks_to = marks_to;
    /* A path per pair: device memory goes out as it is only over the
     * paths that registered it. With several paths, a source serves the
     * first paths' targets first (their place in the path order), and
     * tells early only where no end moves device memory (not verified on
     * a GPU beyond that). */
    if ((direct_to = calloc((size_t)ctx->size, 1)) == NULL) {
        free(marks_to);
        return err_set(FX_ERR_NOMEM, "no memory for %d ranks' paths",
                       ctx->size);
    }
    if (fab_npaths(ctx->fab) > 1 &&
        (path_class = calloc((size_t)ctx->size, 1)) != NULL &&
        (early_ok = calloc((size_t)ctx->size, 1)) != NULL) {
        a.path_class = path_class;
        a.early_ok = early_ok;
    }
    for (int r = 0; r < ctx->size; r++) {
        int path = fab_peer_path_of(ctx->fab, r);

        direct_to[r] = (uint8_t)fab_peer_hmem(ctx->fab, r);
        if (a.early_ok == NULL)
            continue;
        path_class[r] = (uint8_t)(path < 0 ? 0 : fab_path_order(
            fab_path_profile(ctx->fab, path)->prov));
        early_ok[r] = !direct_to[r] && !ctx->remote[r].hmem;
    }
    a.direct_to = direct_to;
    st = eng_program_build(&a, &s->prog);
    free(marks_to);
    free(direct_to);
    free(path_class);
    free(early_ok);
    if (st != FX_OK)
        return st;
    LOG_INFO("rank %d: %zu writes to %d target(s) in %d group(s) per "
             "version, %llu bytes (%llu of them from %u buckets of %zu, "
             "packed %s%s)", ctx->rank, s->prog.nwrites, s->prog.ntargets,
             s->prog.ngroups, (unsigned long long)s->prog.bytes,
             (unsigned long long)s->prog.packed_bytes, s->prog.nbuckets,
             (size_t)s->prog.bucket_size,
             pack_thread ? "by a packer thread" : "inline",
             s->prog.device_buckets ? ", kept on the GPU" : "");
    if ((st = eng_source_open(ctx->fab, &s->prog, s->prog.bucket_size,
                              ctx->tune.bucket_depth, pack_thread,
                              ctx->timeout_ms, &s->source)) != FX_OK)
        return st;
    return verify_source(s);
}

/* This rank's staged CUDA target regions, for the engine to copy up. */
static fx_status_t setup_slabs(fx_session_t *s)
{
    struct eng_slabs_args a = {
        .m = s->m, .plan = s->plan, .me = s->ctx->rank,
        .sources = s->sources, .nsources = s->nsources,
    };
    struct eng_slab_region *regions = NULL, *grown;
    struct eng_slab_piece *pieces = NULL;
    uint8_t *marks_from = NULL, *hmem_from = NULL;
    fx_status_t st = FX_ERR_NOMEM;

    /* A shadow's slab is copied only by fx_session_apply. */
    for (fx_region_t *r = s->ctx->regions; r != NULL; r = r->next) {
        if (r->slab == NULL || (r->flags & FX_REGION_SHADOW))
            continue;
        grown = realloc(regions, (size_t)(a.nregions + 1) * sizeof(*grown));
        if (grown == NULL)
            goto nomem;
        regions = grown;
        regions[a.nregions++] = (struct eng_slab_region){
            r->id, r->base, r->slab, r->device, r->slab_all};
    }
    if (a.nregions == 0)
        return FX_OK;
    pieces = malloc((s->m->npieces ? s->m->npieces : 1) * sizeof(*pieces));
    if (pieces == NULL)
        goto nomem;
    for (uint32_t p = 0; p < s->m->npieces; p++) {
        const fx_region_t *r = s->bind[p].region;

        pieces[p] = (struct eng_slab_piece){-1, s->bind[p].off};
        if (r == NULL || r->slab == NULL || (r->flags & FX_REGION_SHADOW) ||
            s->m->pieces[p].role != FX_TARGET)
            continue;
        for (int k = 0; k < a.nregions; k++)
            if (regions[k].id == r->id)
                pieces[p].region = k;
    }
    a.regions = regions;
    a.pieces = pieces;
    marks_from = calloc((size_t)(s->nsources ? s->nsources : 1), 1);
    hmem_from = calloc((size_t)(s->nsources ? s->nsources : 1), 1);
    if (marks_from == NULL || hmem_from == NULL)
        goto nomem;
    for (int i = 0; i < s->nsources; i++) {
        marks_from[i] = (uint8_t)fab_peer_writedata(s->ctx->fab,
                                                    s->sources[i]);
        hmem_from[i] = (uint8_t)fab_peer_hmem(s->ctx->fab, s->sources[i]);
    }
    a.marks_from = marks_from;
    a.hmem_from = hmem_from;
    st = eng_slabs_open(&a, &s->slabs);
    goto out;
nomem:
    st = err_set(FX_ERR_NOMEM, "no memory for GPU slabs");
out:
    free(regions);
    free(pieces);
    free(marks_from);
    free(hmem_from);
    return st;
}

fx_status_t session_setup_target(fx_session_t *s)
{
    int me = s->ctx->rank, n = s->ctx->size;
    fx_status_t st;

    s->sources = malloc((size_t)n * sizeof(*s->sources));
    if (s->sources == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %d sources", n);
    for (int r = 0; r < n; r++) {
        uint64_t b = s->plan->bytes[(size_t)r * (size_t)n + (size_t)me];
        int path = fab_peer_path_of(s->ctx->fab, r);

        if (b > 0)
            s->sources[s->nsources++] = r;
        s->expect_bytes += b;
        if (path >= 0)
            s->path_expect[path] += b;
    }
    if ((st = verify_units(s)) != FX_OK)
        return st;
    return setup_slabs(s);
}

/* The report's peers per path: the ranks this one writes to or hears
 * from, each once (one pass over each list, not one per rank). */
fx_status_t session_count_peers(fx_session_t *s)
{
    const struct fab *f = s->ctx->fab;
    uint8_t *peer = calloc((size_t)s->ctx->size, 1);

    if (peer == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %d ranks",
                       s->ctx->size);
    for (int i = 0; i < s->prog.ntargets; i++)
        peer[s->prog.targets[i]] = 1;
    for (int i = 0; i < s->nsources; i++)
        peer[s->sources[i]] = 1;
    peer[s->ctx->rank] = 0;
    for (int r = 0; r < s->ctx->size; r++) {
        int path = fab_peer_path_of(f, r);

        if (peer[r] && path >= 0)
            s->path_peers[path]++;
    }
    free(peer);
    return FX_OK;
}

/* A rank may have waited out a whole timeout on a silent peer in the
 * notification probe: the others wait that long and one more, so that the
 * silent rank is named by the probe, not a blocked one by the others'
 * fence (the fault matrix's partition.setup.source). */
static fx_status_t probe_allgather(void *arg, const void *mine, size_t len,
                                   void *all)
{
    fx_ctx_t *ctx = arg;
    fx_status_t st;

    ctx->boot->timeout_ms = 2 * ctx->timeout_ms;
    st = boot_allgather(ctx->boot, "notification probe", mine, len, all);
    ctx->boot->timeout_ms = ctx->timeout_ms;
    return st;
}

/* The notification probe over each pair of the plan (fabric/probe.c):
 * this rank's targets are those its plan gives bytes, its sources those
 * that give it some. take_part: 0 after a failure here, when it only
 * enters the verdicts' exchange. */
static fx_status_t probe_pairs(fx_session_t *s, int take_part)
{
    int n = s->ctx->size, me = s->ctx->rank, nt = 0, ns = 0;
    int *targets = NULL, *sources = NULL;
    fx_status_t st = FX_OK, xs;

    take_part = take_part && s->plan != NULL;
    if (take_part) {
        targets = malloc((size_t)n * sizeof(*targets));
        sources = malloc((size_t)n * sizeof(*sources));
        if (targets == NULL || sources == NULL) {
            st = err_set(FX_ERR_NOMEM, "no memory for %d probe peers", n);
            take_part = 0; /* in the verdicts only */
        }
    }
    for (int r = 0; take_part && r < n; r++) {
        if (r == me)
            continue;
        if (s->plan->bytes[(size_t)me * n + r] > 0)
            targets[nt++] = r;
        if (s->plan->bytes[(size_t)r * n + me] > 0)
            sources[ns++] = r;
    }
    xs = fab_probe_notification(s->ctx->fab, take_part, targets, nt,
                                sources, ns, probe_allgather, s->ctx);
    free(targets);
    free(sources);
    return st != FX_OK ? st : xs;
}

/* Set-up goes on through its collectives after a failure, so that the
 * others are not left waiting; the first failure's detail (in why) is the
 * one this rank's verdict gives. */
static fx_status_t first_failure(fx_status_t st, fx_status_t xs, char *why)
{
    if (st == FX_OK && xs != FX_OK)
        snprintf(why, ERR_MSG_MAX, "%s", err_last());
    return st != FX_OK ? st : xs;
}

fx_status_t fx_session_setup(fx_session_t *s)
{
    struct fx_gather *binds = NULL;
    struct bind_wire *wire = NULL;
    unsigned char *marks = NULL;
    size_t nwire = 0;
    fx_ctx_t *ctx;
    fx_status_t st, xs;
    char why[ERR_MSG_MAX];

    if (s == NULL)
        return err_set(FX_ERR_INVALID, "fx_session_setup: NULL session");
    ctx = s->ctx;
    if (s->ready || s->broken)
        return ctx_fail(ctx, err_set(FX_ERR_STATE, "fx_session_setup "
                        "called twice%s", s->broken ? " (the first failed: "
                        "destroy this session and create a new one)" : ""));
    if (ctx->boot == NULL)
        return ctx_fail(ctx, err_set(FX_ERR_STATE, "fx_session_setup needs "
                        "a collective channel to compare the manifest and "
                        "exchange addresses and bindings, and this context "
                        "has none (bootstrap \"none\"): give fx_ctx_opts_t "
                        "an exchange (exchange_allgather, exchange_barrier), "
                        "or start the ranks under fabxfer-run, mpirun or "
                        "srun --mpi=pmix"));
    if (ctx->grown)
        return ctx_fail(ctx, err_set(FX_ERR_STATE, "fx_session_setup: this "
                        "context's job grew to %d ranks (fx_session_grow), "
                        "past its channel's: new sessions need a context of "
                        "the whole job", ctx->size));
    ctx_lock(ctx);
    /* Every rank numbers every set-up alike: this session's messages
     * carry the number, so that an earlier session's are told apart. */
    s->gen = fab_session_next(ctx->fab);
    /* A local refusal still takes part in the verdicts: every rank enters
     * the same collectives, and learns of it there. */
    if (s->refused != FX_OK) /* fx_session_refuse, a failed bind */
        st = err_set(s->refused, "%s", s->refused_why);
    else if ((st = manifest_validate(s->m, ctx->size)) == FX_OK &&
             (st = scales_open(s)) == FX_OK)
        st = session_check_bindings(s, &wire, &nwire);
    if ((st = gather_verdicts(s, st, 0)) != FX_OK)
        goto out;
    st = first_failure(FX_OK, plan_build(s->m, ctx->size, ctx->rank,
                                         &s->plan), why);
    if (st == FX_OK)
        st = first_failure(st, verify_area(s), why);
    /* Addresses and bindings go to plan peers only (peers.c). Every rank
     * enters, one whose plan failed to tell its peers so; a failed channel
     * ends set-up here, as no later collective would fare better. */
    if ((xs = peers_exchange(s, st == FX_OK ? s->plan : NULL, wire, nwire,
                             &marks, &binds)) != FX_OK) {
        st = xs;
        goto out;
    }
    st = first_failure(st, peers_import(s, marks, binds), why);
    st = first_failure(st, probe_pairs(s, st == FX_OK), why);
    if (st != FX_OK)
        err_set(st, "%s", why); /* the first failure is the verdict's */
    else if ((st = setup_source(s, binds)) == FX_OK &&
             (st = members_track(s)) == FX_OK &&
             (st = session_setup_target(s)) == FX_OK &&
             (st = session_count_peers(s)) == FX_OK) {
        /* Flow control starts afresh on this session's pairs, before its
         * threads start and the barrier below lets any rank push. */
        fab_session_begin(ctx->fab, s->gen, s->prog.targets,
                          s->prog.ntargets, s->sources, s->nsources);
        fab_copy_targets(ctx->fab, s->prog.ntargets);
        st = serve_setup(s);
    }
    /* Spent: the program and the slab spans hold what versions need. */
    plan_free(s->plan);
    s->plan = NULL;
    boot_gather_free(binds);
    binds = NULL;
    /* No rank pushes before every rank is ready to count; a rank that
     * could not plan or build says so to all (a barrier that tells). */
    if ((st = gather_verdicts(s, st, 1)) != FX_OK)
        goto out;
    verify_settle(s);
    s->ready = 1;
out:
    /* Half a set-up (a plan, a program, a pool) is not retried: the other
     * ranks have moved on from the collectives it took part in. */
    if (st != FX_OK)
        s->broken = 1;
    boot_gather_free(binds);
    free(marks);
    free(wire);
    ctx_unlock(ctx);
    return ctx_fail(ctx, st);
}

/* A direct GPU target's device: the NIC wrote into its memory, which it
 * may not see yet (libfabric never flushes); shm's CUDA IPC copies may
 * still run on the legacy default stream (mem.h). Either way the version
 * is not in the tensors yet for a stream of the application's own, or
 * for the host, and a wait promises that it is. */
static fx_status_t flush_direct(fx_session_t *s, int device)
{
    fx_status_t st = mem_rdma_flush(device);

    return st != FX_OK ? st
                       : mem_legacy_wait(device, s->ctx->timeout_ms,
                                         "the copies that landed the version");
}

/* The staged slabs' hook where the session is the hooks' argument. */
static fx_status_t slabs_arrived(int i, void *arg)
{
    return eng_slabs_arrived(i, ((fx_session_t *)arg)->slabs);
}

fx_status_t fx_session_wait(fx_session_t *s, uint64_t version)
{
    struct eng_target_hooks hooks = {NULL, NULL, NULL};
    struct eng_times t;
    fx_status_t st;

    if ((st = session_ready_check(s, "fx_session_wait")) != FX_OK)
        return st;
    if ((st = session_role_check(s, FX_TARGET, "fx_session_wait")) != FX_OK)
        return ctx_fail(s->ctx, st);
    if (version < s->joined_at)
        return ctx_fail(s->ctx, session_joined_late(s, "fx_session_wait",
                                                     version));
    if (s->waited && version <= s->last_waited)
        return ctx_fail(s->ctx, err_set(FX_ERR_INVALID, "version %llu is "
                        "not newer than %llu, the last waited for",
                        (unsigned long long)version,
                        (unsigned long long)s->last_waited));
    ctx_lock(s->ctx);
    if (s->shadow) {
        st = serve_wait(s, version, &t);
        goto done;
    }
    /* Live: the version waited for last was the application's until now,
     * when it asks for a newer one; its sources may write again. */
    if (s->held) {
        memset(&t, 0, sizeof(t));
        if ((st = eng_release_all(s->ctx->fab, s->sources, s->nsources,
                                  s->last_waited)) != FX_OK)
            goto done;
        s->held = 0;
    }
    /* Staged GPU targets copy as marks come in where the sources mark
     * (counted writedata), else per source as its notification comes. */
    hooks.arg = s->slabs;
    if (s->slabs != NULL) {
        hooks.marked = eng_slabs_marked;
        hooks.arrived = eng_slabs_arrived;
    }
    /* Check points share the marks' hook (verify.c passes the others on). */
    if (s->checker != NULL) {
        hooks.arg = s;
        hooks.marked = verify_marked;
        hooks.arrived = s->slabs != NULL ? slabs_arrived : NULL;
        verify_begin(s, version);
    }
    st = eng_target_wait(s->ctx->fab, s->sources, s->nsources, version,
                         s->ctx->timeout_ms, &hooks, &t);
    /* Staged GPU targets: the version is complete once it is on the GPU.
     * On a target, pack_s is this copy. */
    if (s->slabs != NULL) {
        double secs = 0;
        fx_status_t fst = eng_slabs_finish(s->slabs, &secs);

        if (st == FX_OK)
            st = fst;
        t.pack += secs;
        t.total += secs;
    }
    if (st == FX_OK)
        st = session_direct_devices(s, FX_REGION_TARGET, flush_direct);
    /* A version that fails its checks is nobody's: it goes back to its
     * sources at once (the one whose bytes differ told so), and the next
     * wait is for a newer one. */
    if (st == FX_OK && (st = verify_version(s, version)) == FX_ERR_VERIFY) {
        char why[ERR_MSG_MAX];

        snprintf(why, sizeof(why), "%s", err_last());
        eng_release_all(s->ctx->fab, s->sources, s->nsources, version);
        s->waited = 1;
        s->last_waited = version;
        err_set(st, "%s", why);
    }
    /* Live: the tensors hold the version, and nothing writes them until
     * the application releases it (here at its next wait, or
     * fx_session_release). */
done:
    session_fill_report(s, version, &t, s->expect_bytes, NULL);
    ctx_unlock(s->ctx);
    if (st != FX_OK)
        return ctx_fail(s->ctx, st);
    s->waited = 1;
    s->last_waited = version;
    s->held = !s->shadow;
    return FX_OK;
}

fx_status_t fx_session_release(fx_session_t *s, uint64_t version)
{
    fx_status_t st;

    if ((st = session_ready_check(s, "fx_session_release")) != FX_OK)
        return st;
    if ((st = session_role_check(s, FX_TARGET, "fx_session_release")) !=
        FX_OK)
        return ctx_fail(s->ctx, st);
    if (s->shadow)
        return ctx_fail(s->ctx, err_set(FX_ERR_STATE, "fx_session_release: "
                        "rank %d receives into shadow regions, whose "
                        "versions fx_session_apply releases once it has "
                        "copied them", s->ctx->rank));
    if (!s->waited)
        return ctx_fail(s->ctx, err_set(FX_ERR_INVALID, "fx_session_release"
                        "(%llu): no version waited for yet "
                        "(fx_session_wait)", (unsigned long long)version));
    if (version > s->last_waited)
        return ctx_fail(s->ctx, err_set(FX_ERR_INVALID, "fx_session_release"
                        "(%llu): not waited for yet; the last version "
                        "fx_session_wait returned is %llu",
                        (unsigned long long)version,
                        (unsigned long long)s->last_waited));
    if (version < s->last_waited)
        return ctx_fail(s->ctx, err_set(FX_ERR_INVALID, "fx_session_release"
                        "(%llu): not the version waited for last (%llu); "
                        "older ones were released when a newer one was "
                        "waited for", (unsigned long long)version,
                        (unsigned long long)s->last_waited));
    if (!s->held)
        return ctx_fail(s->ctx, err_set(FX_ERR_STATE, "fx_session_release"
                        "(%llu): released already",
                        (unsigned long long)version));
    ctx_lock(s->ctx);
    st = eng_release_all(s->ctx->fab, s->sources, s->nsources, version);
    if (st == FX_OK)
        s->held = 0;
    ctx_unlock(s->ctx);
    return ctx_fail(s->ctx, st);
}

fx_status_t fx_session_leave(fx_session_t *s)
{
    fx_status_t st = FX_OK, one;

    if (s == NULL)
        return err_set(FX_ERR_INVALID, "fx_session_leave: NULL session");
    if (!s->ready || s->broken || s->left)
        return ctx_fail(s->ctx, err_set(FX_ERR_STATE, "fx_session_leave: "
                        "the session is %s", s->left ? "left already"
                        : s->ready ? "broken" : "not set up"));
    if ((st = session_role_check(s, FX_TARGET, "fx_session_leave")) != FX_OK)
        return ctx_fail(s->ctx, st);
    /* Its targets would count it gone as a source too (a peer leaves the
     * whole context), while it still pushes to them. */
    if (s->has_source)
        return ctx_fail(s->ctx, err_set(FX_ERR_STATE, "fx_session_leave: "
                        "rank %d is a source of this session too; only a "
                        "target leaves", s->ctx->rank));
    ctx_lock(s->ctx);
    /* every source told, whatever one of them does */
    for (int i = 0; i < s->nsources; i++)
        if ((one = fab_leave(s->ctx->fab, s->sources[i])) != FX_OK &&
            st == FX_OK)
            st = one;
    s->left = 1;
    s->held = 0;
    ctx_unlock(s->ctx);
    return ctx_fail(s->ctx, st);
}

fx_status_t fx_session_remove_target(fx_session_t *s, int rank)
{
    fx_status_t st;
    size_t t;

    if ((st = session_ready_check(s, "fx_session_remove_target")) != FX_OK)
        return st;
    if ((st = session_role_check(s, FX_SOURCE, "fx_session_remove_target"))
        != FX_OK)
        return ctx_fail(s->ctx, st);
    ctx_lock(s->ctx);
    t = eng_target_index(&s->prog, rank);
    if (t >= (size_t)s->prog.ntargets || s->prog.targets[t] != rank) {
        ctx_unlock(s->ctx);
        return ctx_fail(s->ctx, err_set(FX_ERR_INVALID, "fx_session_remove_"
                        "target(%d): rank %d writes to no such target",
                        rank, s->ctx->rank));
    }
    fab_peer_leave(s->ctx->fab, rank, "the application removed it "
                   "(fx_session_remove_target)");
    ctx_unlock(s->ctx);
    return FX_OK;
}
