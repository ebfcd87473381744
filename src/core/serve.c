/*
 * Updates while serving: a target that receives into shadow regions and
 * applies a version when it chooses, the thread that lands writes while
 * the engine is busy elsewhere, and the thread that pushes while the
 * trainer goes on (fx_session_push_start).
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/session_int.h"
#include "mem/mem.h"
#include "util/cfg.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/thread.h"

static int run_cmp(const void *a, const void *b)
{
    const struct shadow_run *x = a, *y = b;

    if (x->region != y->region)
        return x->region->id < y->region->id ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The apply's copies, as they are found: a piece's filled runs. */
struct run_list {
    struct shadow_run *v;
    size_t n, cap;
    fx_region_t *region;
    uint64_t base;            /* the piece's offset in its region */
    int failed;
};

static void add_run(void *arg, uint64_t off, uint64_t len)
{
    struct run_list *l = arg;

    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        struct shadow_run *v = realloc(l->v, cap * sizeof(*v));

        if (v == NULL) {
            l->failed = 1;
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (struct shadow_run){l->region, l->base + off, len};
}

/* The apply's copies: this rank's target pieces, by region, neighbours
 * merged, so that a model bound into one region is one copy. A view's
 * padding is left out, so that an apply writes no more of the weights
 * than the sources do (the engine's padding stays the engine's). */
static fx_status_t build_runs(fx_session_t *s)
{
    const struct plan_manifest *m = s->m;
    struct run_list l = {0};

    for (uint32_t p = 0; p < m->npieces && !l.failed; p++)
        if (m->pieces[p].rank == s->ctx->rank &&
            m->pieces[p].role == FX_TARGET && m->pieces[p].bytes > 0) {
            l.region = s->bind[p].region;
            l.base = s->bind[p].off;
            plan_piece_runs(m, p, add_run, &l);
        }
    if (l.failed) {
        free(l.v);
        return err_set(FX_ERR_NOMEM, "no memory for the apply's copies");
    }
    s->runs = l.v;
    qsort(s->runs, l.n, sizeof(*s->runs), run_cmp);
    s->nruns = 0;
    for (size_t i = 0; i < l.n; i++) {
        struct shadow_run *last = s->nruns ? &s->runs[s->nruns - 1] : NULL;

        if (last != NULL && last->region == s->runs[i].region &&
            last->off + last->len == s->runs[i].off)
            last->len += s->runs[i].len;
        else
            s->runs[s->nruns++] = s->runs[i];
    }
    return FX_OK;
}

/* Every target piece of this rank in a shadow region, or none. */
static fx_status_t receive_mode(fx_session_t *s)
{
    const struct plan_manifest *m = s->m;
    int live = -1, shadow = -1;
    char ebuf[ERR_ESC_MAX], ebuf2[ERR_ESC_MAX];

    for (uint32_t p = 0; p < m->npieces; p++) {
        const fx_region_t *r = s->bind[p].region;

        if (m->pieces[p].rank != s->ctx->rank ||
            m->pieces[p].role != FX_TARGET || r == NULL)
            continue;
        if (r->flags & FX_REGION_SHADOW) {
            shadow = (int)p;
            if (r->kind == FX_MEM_CUDA && s->shadow_device >= 0 &&
                r->device != s->shadow_device)
                return err_set(FX_ERR_UNSUPPORTED, "rank %d has shadow "
                               "regions on CUDA devices %d and %d: an "
                               "apply runs on one stream, of one device",
                               s->ctx->rank, s->shadow_device, r->device);
            if (r->kind == FX_MEM_CUDA)
                s->shadow_device = r->device;
        } else {
            live = (int)p;
        }
    }
    if (live >= 0 && shadow >= 0)
        return err_set(FX_ERR_INVALID, "rank %d binds target tensor \"%s\" "
                       "in a shadow region and \"%s\" in a live one: a "
                       "session receives one way (register every target "
                       "region with FX_REGION_SHADOW, or none)",
                       s->ctx->rank,
                       err_esc(ebuf, m->tensors[m->pieces[shadow].tensor].name),
                       err_esc(ebuf2, m->tensors[m->pieces[live].tensor].name));
    s->shadow = shadow >= 0;
    return FX_OK;
}

/* The longest nap of an idle progress thread. */
#define PROGRESS_NAP_MAX_US 1000

static void *progress_main(void *arg)
{
    fx_session_t *s = arg;
    long nap = s->ctx->tune.progress_us;

    /* It stands for the application's waits: over tcp in message mode a
     * poll finds bytes waiting on a connection (fab_receiving), and those
     * count as found, or it would nap while a version streams in. */
    ctx_lock(s->ctx);
    fab_receiving(s->ctx->fab, 1);
    ctx_unlock(s->ctx);
    while (!atomic_load(&s->progress_quit)) {
        int found;

        ctx_lock(s->ctx);
        /* A failure stays where it is for the application's next call
         * to report; this thread only keeps things moving. */
        if (s->recv != NULL)
            (void)eng_recv_poll(s->recv);
        else
            (void)fab_progress(s->ctx->fab);
        found = fab_progress_found(s->ctx->fab);
        err_clear();
        ctx_unlock(s->ctx);
        /* While a version lands, poll on (the unlock lets the
         * application in between two polls), so that sleeping never
         * paces the bytes (test_serve: 16 MiB x 5 versions to 2 targets
         * took 420 ms over tcp, 520 ms when the thread slept after every
         * poll). Once quiet, nap, longer each time up to 1 ms: napping
         * 50 us took 6-9 % of a core from an idle engine, 1-2 % now. */
        if (found) {
            nap = s->ctx->tune.progress_us;
            sched_yield();
        } else {
            usleep((useconds_t)nap);
            if (nap < PROGRESS_NAP_MAX_US)
                nap = nap * 2 < PROGRESS_NAP_MAX_US ? nap * 2
                                                   : PROGRESS_NAP_MAX_US;
        }
    }
    ctx_lock(s->ctx);
    fab_receiving(s->ctx->fab, 0);
    ctx_unlock(s->ctx);
    return NULL;
}

fx_status_t serve_setup(fx_session_t *s)
{
    int thread = 0;
    fx_status_t st;

    if ((st = receive_mode(s)) != FX_OK)
        return st;
    /* auto: where shadows wait on a provider that lands writes only
     * while the target polls */
    thread = s->ctx->tune.progress > 0 ||
             (s->ctx->tune.progress < 0 && s->shadow &&
              fab_profile(s->ctx->fab)->manual_progress);
    if (s->nsources == 0)
        return FX_OK; /* nothing to receive */
    if (s->shadow) {
        if ((st = build_runs(s)) != FX_OK ||
            (st = eng_recv_open(s->ctx->fab, s->sources, s->nsources,
                                s->ctx->timeout_ms, &s->recv)) != FX_OK)
            return st;
        if (s->shadow_device >= 0 &&
            (st = mem_event_open(s->shadow_device, &s->apply_ev)) != FX_OK)
            return st;
    }
    if (thread) {
        if (pthread_create(&s->progress, NULL, progress_main, s) != 0)
            return err_set(FX_ERR_SYSTEM, "cannot start the progress "
                           "thread");
        s->progress_started = 1;
        LOG_INFO("rank %d: a progress thread lands writes between calls "
                 "(%s, every %ld us)", s->ctx->rank, cfg_name(CFG_PROGRESS),
                 s->ctx->tune.progress_us);
    }
    return FX_OK;
}

void serve_close(fx_session_t *s)
{
    if (s->progress_started) {
        atomic_store(&s->progress_quit, 1);
        pthread_join(s->progress, NULL);
        s->progress_started = 0;
    }
    if (s->pusher_started) {
        /* A push under way or queued ends within its own timeouts. */
        thread_stop(s->pusher, &s->push_mu, &s->push_cv, &s->push_quit);
        s->pusher_started = 0;
    }
    eng_recv_close(s->recv);
    s->recv = NULL;
    mem_event_close(s->apply_ev);
    mem_event_close(s->push_ev);
    free(s->runs);
}

static fx_status_t shadow_check(const fx_session_t *s, const char *call,
                                uint64_t version)
{
    fx_status_t st;

    if (!s->ready || s->broken)
        return err_set(FX_ERR_STATE, "%s: the session is %s", call,
                       s->ready ? "broken" : "not set up");
    if ((st = session_role_check(s, FX_TARGET, call)) != FX_OK)
        return st;
    if (!s->shadow)
        return err_set(FX_ERR_STATE, "%s: rank %d receives no shadow region "
                       "in this session (register its target regions with "
                       "FX_REGION_SHADOW)", call, s->ctx->rank);
    if (version != 0 && version < s->joined_at)
        return session_joined_late(s, call, version);
    if (s->applied && version != 0 && version <= s->last_applied)
        return err_set(FX_ERR_INVALID, "%s: version %llu is not newer than "
                       "%llu, the last applied", call,
                       (unsigned long long)version,
                       (unsigned long long)s->last_applied);
    return FX_OK;
}

fx_status_t serve_wait(fx_session_t *s, uint64_t version,
                       struct eng_times *t)
{
    fx_status_t st = shadow_check(s, "fx_session_wait", version);

    if (st != FX_OK) {
        memset(t, 0, sizeof(*t));
        return st;
    }
    if (s->recv == NULL) { /* no source writes to this rank */
        memset(t, 0, sizeof(*t));
        return FX_OK;
    }
    if (version != 0 && version == s->rejected) {
        memset(t, 0, sizeof(*t));
        return err_set(FX_ERR_VERIFY, "version %llu failed its checksums "
                       "when it arrived (fx_session_wait said which bytes) "
                       "and was given back unapplied; the tensors still "
                       "hold version %llu", (unsigned long long)version,
                       (unsigned long long)s->last_applied);
    }
    if ((st = eng_recv_wait(s->recv, version, t)) != FX_OK ||
        version == s->checked)
        return st;
    verify_begin(s, version); /* no check points: all checked here */
    /* Checked once, in the receive area, before anything is applied: a
     * version that fails goes back to its sources unapplied, and the
     * engine keeps serving the one it has. */
    if ((st = verify_version(s, version)) == FX_ERR_VERIFY) {
        char why[ERR_MSG_MAX];

        snprintf(why, sizeof(why), "%s", err_last());
        eng_recv_release(s->recv, version, NULL, NULL);
        return err_set(st, "%s; not applied: the tensors still hold "
                       "version %llu", why,
                       (unsigned long long)s->last_applied);
    }
    if (st == FX_OK)
        s->checked = version;
    return st;
}

static int copies_ran(void *ev)
{
    return mem_event_done(ev);
}

/* Copy the receive area into the tensors: memcpy for host regions, for
 * CUDA ones copies queued on stream and an event after them. */
static fx_status_t apply_copies(fx_session_t *s, void *stream, int *queued)
{
    fx_status_t st = FX_OK;

    *queued = 0;
    /* The NIC wrote device memory of a direct shadow: make it visible
     * before the copy engine reads it; shm's CUDA IPC copies into it may
     * still run on the legacy default stream, which the application's
     * stream may not wait for (mem_legacy_order). */
    for (size_t i = 0; i < s->nruns && st == FX_OK; i++)
        if (s->runs[i].region->direct &&
            (i == 0 || !s->runs[i - 1].region->direct) &&
            (st = mem_rdma_flush(s->runs[i].region->device)) == FX_OK)
            st = mem_legacy_order(s->runs[i].region->device, stream);
    for (size_t i = 0; i < s->nruns && st == FX_OK; i++) {
        const struct shadow_run *r = &s->runs[i];
        char *dst = (char *)r->region->base + r->off;
        const char *src = (const char *)r->region->shadow + r->off;

        if (r->region->kind == FX_MEM_HOST) {
            memcpy(dst, src, r->len);
        } else {
            st = mem_copy_async(r->region->device, dst, src, r->len, stream);
            *queued = 1;
        }
    }
    if (st == FX_OK && *queued)
        st = mem_event_record(s->apply_ev, stream);
    return st;
}

fx_status_t fx_session_apply(fx_session_t *s, uint64_t version, void *stream)
{
    struct eng_times t;
    double t0;
    int queued = 0;
    fx_status_t st;

    if (s == NULL)
        return err_set(FX_ERR_INVALID, "fx_session_apply: NULL session");
    if (version == 0)
        return ctx_fail(s->ctx, err_set(FX_ERR_INVALID, "fx_session_apply: "
                        "version 0 (versions start at 1)"));
    if (s->ready &&
        (st = session_role_check(s, FX_TARGET, "fx_session_apply")) != FX_OK)
        return ctx_fail(s->ctx, st);
    ctx_lock(s->ctx);
    if ((st = serve_wait(s, version, &t)) != FX_OK)
        goto out;
    t0 = clock_now();
    if ((st = apply_copies(s, stream, &queued)) != FX_OK)
        goto out;
    if (s->recv != NULL)
        st = eng_recv_release(s->recv, version, queued ? copies_ran : NULL,
                              s->apply_ev);
    s->report.apply_s = clock_now() - t0;
    s->report.apply_bytes = s->expect_bytes;
    t.total += s->report.apply_s;
    if (st == FX_OK) {
        s->applied = 1;
        s->last_applied = version;
        s->waited = 1;
        s->last_waited = version;
    }
out:
    session_fill_report(s, version, &t, s->expect_bytes, NULL);
    ctx_unlock(s->ctx);
    if (st != FX_OK)
        st = err_prefix(st, "apply of version %llu",
                        (unsigned long long)version);
    return ctx_fail(s->ctx, st);
}

fx_status_t fx_session_received(fx_session_t *s, uint64_t *version)
{
    fx_status_t st;
    uint64_t v = 0;

    if (s == NULL || version == NULL)
        return err_set(FX_ERR_INVALID, "fx_session_received: NULL argument");
    *version = 0;
    ctx_lock(s->ctx);
    if ((st = shadow_check(s, "fx_session_received", 0)) == FX_OK &&
        s->recv != NULL && (st = eng_recv_poll(s->recv)) == FX_OK)
        v = eng_recv_ready(s->recv);
    ctx_unlock(s->ctx);
    if (st == FX_OK && (!s->applied || v > s->last_applied))
        *version = v;
    return ctx_fail(s->ctx, st);
}

fx_status_t fx_session_progress(fx_session_t *s)
{
    fx_status_t st;

    if ((st = session_ready_check(s, "fx_session_progress")) != FX_OK)
        return st;
    ctx_lock(s->ctx);
    st = s->recv != NULL ? eng_recv_poll(s->recv) : fab_progress(s->ctx->fab);
    ctx_unlock(s->ctx);
    return ctx_fail(s->ctx, st);
}

/* ---- the pusher --------------------------------------------------------- */

static void *pusher_main(void *arg)
{
    fx_session_t *s = arg;

    pthread_mutex_lock(&s->push_mu);
    for (;;) {
        uint64_t v;
        fx_status_t st = FX_OK;

        while (!s->push_quit && atomic_load(&s->push_done))
            pthread_cond_wait(&s->push_cv, &s->push_mu);
        /* A push queued before fx_session_destroy is still done: its
         * targets wait for it. */
        if (atomic_load(&s->push_done))
            break;
        v = s->push_version;
        pthread_mutex_unlock(&s->push_mu);
        /* The tensors are read only after what the caller queued on its
         * stream before push_start. */
        if (s->push_ev != NULL)
            st = mem_event_wait(s->push_ev, s->ctx->timeout_ms);
        if (st == FX_OK) {
            ctx_lock(s->ctx);
            st = session_push_locked(s, v);
            ctx_unlock(s->ctx);
        }
        pthread_mutex_lock(&s->push_mu);
        s->push_status = st;
        snprintf(s->push_msg, sizeof(s->push_msg), "%s",
                 st != FX_OK ? err_last() : "");
        /* Nobody is left to ask for its status: say it. */
        if (st != FX_OK && s->push_quit)
            LOG_WARN("rank %d: the push of version %llu that "
                     "fx_session_destroy finished failed: %s", s->ctx->rank,
                     (unsigned long long)v, s->push_msg);
        atomic_store(&s->push_done, 1);
        pthread_cond_broadcast(&s->push_cv);
    }
    pthread_mutex_unlock(&s->push_mu);
    return NULL;
}

fx_status_t fx_session_push_start(fx_session_t *s, uint64_t version,
                                  void *stream)
{
    fx_status_t st;

    if (s == NULL)
        return err_set(FX_ERR_INVALID, "fx_session_push_start: NULL "
                       "session");
    if (s->push_job)
        return ctx_fail(s->ctx, err_set(FX_ERR_STATE, "fx_session_push_start"
                        "(%llu): version %llu is still being pushed (finish "
                        "it with fx_session_push_test or _wait)",
                        (unsigned long long)version,
                        (unsigned long long)s->push_version));
    /* What a push would refuse is refused here, in the caller's thread. */
    if ((st = session_push_check(s, version, "fx_session_push_start")) !=
        FX_OK)
        return ctx_fail(s->ctx, st);
    if (s->source_device >= 0) {
        if (s->push_ev == NULL &&
            (st = mem_event_open(s->source_device, &s->push_ev)) != FX_OK)
            return ctx_fail(s->ctx, st);
        if ((st = mem_event_record(s->push_ev, stream)) != FX_OK)
            return ctx_fail(s->ctx, st);
    }
    if (!s->pusher_started) {
        atomic_store(&s->push_done, 1);
        if (pthread_create(&s->pusher, NULL, pusher_main, s) != 0)
            return ctx_fail(s->ctx, err_set(FX_ERR_SYSTEM, "cannot start "
                            "the pusher thread"));
        s->pusher_started = 1;
    }
    pthread_mutex_lock(&s->push_mu);
    s->push_version = version;
    s->push_job = 1;
    atomic_store(&s->push_done, 0);
    pthread_cond_broadcast(&s->push_cv);
    pthread_mutex_unlock(&s->push_mu);
    return FX_OK;
}

/* The finished push's status, in the caller's thread and context. */
static fx_status_t push_finish(fx_session_t *s)
{
    fx_status_t st;

    pthread_mutex_lock(&s->push_mu);
    s->push_job = 0;
    st = s->push_status;
    if (st != FX_OK)
        err_set(st, "%s", s->push_msg);
    pthread_mutex_unlock(&s->push_mu);
    return ctx_fail(s->ctx, st);
}

/* No push under way: the last one's status again, once finished (a wait
 * after a test that said done is no error), or none ever started. */
static fx_status_t push_idle(fx_session_t *s, const char *call)
{
    if (!s->pusher_started)
        return ctx_fail(s->ctx, err_set(FX_ERR_STATE, "%s: no push started "
                        "(fx_session_push_start)", call));
    if (s->push_status != FX_OK)
        return ctx_fail(s->ctx, err_set(s->push_status, "%s", s->push_msg));
    return FX_OK;
}

fx_status_t fx_session_push_test(fx_session_t *s, int *done)
{
    if (s == NULL || done == NULL)
        return err_set(FX_ERR_INVALID, "fx_session_push_test: NULL argument");
    *done = 0;
    if (!s->push_job) {
        *done = s->pusher_started;
        return push_idle(s, "fx_session_push_test");
    }
    if (!atomic_load(&s->push_done))
        return FX_OK;
    *done = 1;
    return push_finish(s);
}

fx_status_t fx_session_push_wait(fx_session_t *s)
{
    if (s == NULL)
        return err_set(FX_ERR_INVALID, "fx_session_push_wait: NULL session");
    if (!s->push_job)
        return push_idle(s, "fx_session_push_wait");
    pthread_mutex_lock(&s->push_mu);
    while (!atomic_load(&s->push_done))
        pthread_cond_wait(&s->push_cv, &s->push_mu);
    pthread_mutex_unlock(&s->push_mu);
    return push_finish(s);
}
