/*
 * A source's push of a version: what it refuses (a session not set up or
 * broken, a rank without the role, an old version), the push itself with
 * the context locked, and fx_session_push. Apart from session.c because
 * serve.c's pusher thread pushes through it and session.c sets serve.c up.
 */
#include <stdatomic.h>
#include <string.h>

#include "core/session_int.h"
#include "mem/mem.h"

fx_status_t session_joined_late(const fx_session_t *s, const char *call,
                                uint64_t version)
{
    return err_set(FX_ERR_INVALID, "%s: version %llu: rank %d joined the "
                   "session at version %llu, its sources' last, and gets "
                   "that one (where they push it to it: fx_session_push_to) "
                   "or a later one", call, (unsigned long long)version,
                   s->ctx->rank, (unsigned long long)s->joined_at);
}

fx_status_t session_role_check(const fx_session_t *s, fx_role_t role,
                               const char *call)
{
    int other = role == FX_SOURCE ? s->has_target : s->has_source;

    if (s->left && role == FX_TARGET)
        return err_set(FX_ERR_STATE, "%s: rank %d left this session "
                       "(fx_session_leave)", call, s->ctx->rank);
    if (role == FX_SOURCE ? s->has_source : s->has_target)
        return FX_OK;
    return err_set(FX_ERR_STATE, "%s: rank %d holds no %s piece of this "
                   "session (%s)", call, s->ctx->rank, plan_role_name(role),
                   !other ? "it holds no piece at all"
                   : role == FX_SOURCE ? "it is a target only"
                                       : "it is a source only");
}

fx_status_t session_ready_check(const fx_session_t *s, const char *call)
{
    if (s == NULL)
        return err_set(FX_ERR_INVALID, "%s: NULL session", call);
    if (!s->ready)
        return ctx_fail(s->ctx, err_set(FX_ERR_STATE, "%s: the session is "
                        "not set up", call));
    return FX_OK;
}

fx_status_t session_source_check(const fx_session_t *s, const char *call)
{
    if (!s->ready || s->broken)
        return err_set(FX_ERR_STATE, "%s: the session is %s", call,
                       s->ready ? "broken by an earlier failure"
                                : "not set up");
    return session_role_check(s, FX_SOURCE, call);
}

fx_status_t session_push_check(const fx_session_t *s, uint64_t version,
                               const char *call)
{
    fx_status_t st;

    if ((st = session_source_check(s, call)) != FX_OK)
        return st;
    if (s->pushed && version <= s->last_pushed)
        return err_set(FX_ERR_INVALID, "version %llu is not newer than "
                       "%llu, the last pushed: versions must increase",
                       (unsigned long long)version,
                       (unsigned long long)s->last_pushed);
    return FX_OK;
}

fx_status_t session_push_some(fx_session_t *s, uint64_t version,
                              const uint8_t *out)
{
    struct rail_use sent;
    struct eng_times t;
    fx_status_t st = FX_OK;

    memset(&t, 0, sizeof(t));
    session_rails_now(s, &sent);
    if (s->source != NULL) { /* else this rank serves no target */
        /* Its notifications are this session's versions. */
        fab_stamp(s->ctx->fab, s->gen);
        if ((st = eng_scales_compute(&s->scales, s->m)) == FX_OK)
            st = eng_source_push(s->source, version, out, &t);
        fab_stamp(s->ctx->fab, 0);
    }
    session_fill_report(s, version, &t, t.bytes, &sent);
    verify_rejections(s);
    s->report.verify_failed = s->check_rejected;
    for (int i = 0; i < s->prog.ntargets; i++)
        s->report.targets_left +=
            fab_peer_left(s->ctx->fab, s->prog.targets[i]) ||
            (s->out != NULL && s->out[s->prog.targets[i]]);
    /* A failed peer leaves the session usable for the others; any other
     * failure may leave writes in flight from its buckets. */
    if (st != FX_OK && (s->broken = eng_source_broken(s->source)))
        return st;
    s->pushed = 1;
    s->last_pushed = version;
    return st;
}

fx_status_t session_push_locked(fx_session_t *s, uint64_t version)
{
    fx_status_t st;

    if ((st = session_push_check(s, version, "fx_session_push")) != FX_OK)
        return st;
    if ((st = session_push_some(s, version, members_out(s))) != FX_OK)
        return err_prefix(st, "push of version %llu",
                          (unsigned long long)version);
    return FX_OK;
}

fx_status_t session_direct_devices(fx_session_t *s, unsigned role,
                                   fx_status_t (*fn)(fx_session_t *s,
                                                     int device))
{
    uint64_t done = 0;
    fx_status_t st;

    for (fx_region_t *r = s->ctx->regions; r != NULL; r = r->next) {
        if (!r->direct || !(r->flags & role) ||
            (r->device < 64 && (done >> r->device & 1)))
            continue;
        if ((st = fn(s, r->device)) != FX_OK)
            return st;
        if (r->device < 64)
            done |= 1ull << r->device;
    }
    return FX_OK;
}

/* A direct GPU source's device: a peer's copy (shm's CUDA IPC) or the
 * NIC reads the tensors from the moment a write is posted, with no order
 * against this process's streams, so the work the application queued on
 * the legacy default stream, which fx_session_push reads after, must have
 * run. (A staged source's gather kernel waits for it on the device;
 * fx_session_push_start waits for its stream's event.) */
static fx_status_t source_ready(fx_session_t *s, int device)
{
    return mem_legacy_wait(device, s->ctx->timeout_ms,
                           "the work queued before the push");
}

fx_status_t session_sources_ready(fx_session_t *s)
{
    return session_direct_devices(s, FX_REGION_SOURCE, source_ready);
}

fx_status_t fx_session_push(fx_session_t *s, uint64_t version)
{
    fx_status_t st;

    if (s == NULL)
        return err_set(FX_ERR_INVALID, "fx_session_push: NULL session");
    if (atomic_load(&s->push_done) == 0 && s->push_job)
        return ctx_fail(s->ctx, err_set(FX_ERR_STATE, "fx_session_push: "
                        "version %llu started by fx_session_push_start is "
                        "not finished (fx_session_push_wait)",
                        (unsigned long long)s->push_version));
    ctx_lock(s->ctx);
    st = session_push_check(s, version, "fx_session_push");
    if (st == FX_OK && (st = session_sources_ready(s)) != FX_OK)
        st = err_prefix(st, "push of version %llu",
                        (unsigned long long)version);
    if (st == FX_OK)
        st = session_push_locked(s, version);
    ctx_unlock(s->ctx);
    return ctx_fail(s->ctx, st);
}
