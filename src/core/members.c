/*
 * What a session says of its membership (fx_session_members_json): each
 * peer it moves weights with, whether that peer is in, gone (left,
 * removed, failed, or its new process under another session) or came
 * back, which process of it (its incarnation), the version a new process
 * came in at and what its join took; and the changes this rank has seen,
 * its epoch. A source sees its targets; a target its sources.
 *
 * Goings are counted when a rank looks (before each push, and when the
 * membership is told), not when the fabric hears of them: a leave
 * arrives as a message the progress engine takes, which knows nothing of
 * sessions. A source notes at set-up which process of each target it
 * writes to (members_track), and before each push leaves out a target
 * whose new process joined another session (members_out).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/session_int.h"
#include "util/log.h"

static const char *target_state(fx_session_t *s, int t)
{
    if (s->out != NULL && s->out[t])
        return "out"; /* its new process joined another session */
    if (fab_peer_left(s->ctx->fab, t))
        return "left";
    if (fab_peer_status(s->ctx->fab, t) != FX_OK)
        return "failed";
    return "member";
}

void members_note(fx_session_t *s)
{
    for (int i = 0; s->seen != NULL && i < s->prog.ntargets; i++) {
        int t = s->prog.targets[i];
        int gone = strcmp(target_state(s, t), "member") != 0;

        if (gone && !s->seen[t].gone)
            s->epoch++;
        s->seen[t].gone = (uint8_t)gone;
    }
}

void members_joined(fx_session_t *s, int t, uint64_t v, double t_s)
{
    if (s->seen == NULL)
        return;
    s->seen[t].join_v = v;
    s->seen[t].join_t = t_s;
    s->seen[t].gone = 0;
    s->epoch++;
}

fx_status_t members_track(fx_session_t *s)
{
    int n = s->ctx->size;

    if (s->prog.ntargets == 0)
        return FX_OK;
    s->out = calloc((size_t)n, 1);
    s->seen = calloc((size_t)n, sizeof(*s->seen));
    if (s->out == NULL || s->seen == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %d ranks", n);
    for (int i = 0; i < s->prog.ntargets; i++)
        s->seen[s->prog.targets[i]].incarn =
            fab_peer_incarnation(s->ctx->fab, s->prog.targets[i]);
    return FX_OK;
}

const uint8_t *members_out(fx_session_t *s)
{
    int n = 0;

    for (int i = 0; s->seen != NULL && i < s->prog.ntargets; i++) {
        int t = s->prog.targets[i];

        if (!s->out[t] &&
            s->seen[t].incarn != fab_peer_incarnation(s->ctx->fab, t)) {
            s->out[t] = 1;
            LOG_INFO("rank %d: rank %d's new process joined another session "
                     "of this context: this one no longer writes to it",
                     s->ctx->rank, t);
        }
        n += s->out[t];
    }
    members_note(s);
    return n > 0 ? s->out : NULL;
}

/* snprintf that keeps counting past the end of buf, as snprintf does. */
struct out {
    char *buf;
    size_t len, n;
};

static void put(struct out *o, const char *fmt, ...)
{
    va_list ap;
    int w;

    va_start(ap, fmt);
    w = vsnprintf(o->n < o->len ? o->buf + o->n : NULL,
                  o->n < o->len ? o->len - o->n : 0, fmt, ap);
    va_end(ap);
    if (w > 0)
        o->n += (size_t)w;
}

int fx_session_members_json(fx_session_t *s, char *buf, size_t len)
{
    struct out o = {buf, buf != NULL ? len : 0, 0};
    const char *sep = "";

    if (s == NULL)
        return -1;
    ctx_lock(s->ctx);
    members_note(s);
    put(&o, "{\"rank\": %d, \"epoch\": %llu, \"joins\": %llu, "
        "\"join_s\": %.6f, \"joined_at\": %llu, \"targets\": [",
        s->ctx->rank, (unsigned long long)s->epoch,
        (unsigned long long)s->targets_joined, s->join_s,
        (unsigned long long)s->joined_at);
    for (int i = 0; s->ready && i < s->prog.ntargets; i++, sep = ", ") {
        int t = s->prog.targets[i];

        put(&o, "%s{\"rank\": %d, \"state\": \"%s\", \"incarnation\": %u, "
            "\"joined_at\": %llu, \"join_s\": %.6f}", sep, t,
            target_state(s, t), fab_peer_incarnation(s->ctx->fab, t),
            (unsigned long long)(s->seen != NULL ? s->seen[t].join_v : 0),
            s->seen != NULL ? s->seen[t].join_t : 0.0);
    }
    put(&o, "], \"sources\": [");
    sep = "";
    for (int i = 0; s->ready && i < s->nsources; i++, sep = ", ") {
        int r = s->sources[i];

        put(&o, "%s{\"rank\": %d, \"state\": \"%s\"}", sep, r,
            fab_peer_status(s->ctx->fab, r) == FX_OK ? "member" : "failed");
    }
    put(&o, "]}");
    ctx_unlock(s->ctx);
    return (int)o.n;
}
