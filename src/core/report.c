/*
 * A session's report (fx_session_report): filled after each push, wait or
 * apply from the engine's times and the fabric's counters, copied out at
 * the size the caller's release knows, and written as JSON. Below push.c,
 * session.c and serve.c, which all fill it.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/session_int.h"

void session_rails_now(const fx_session_t *s, struct rail_use *u)
{
    for (int r = 0; r < fab_rails(s->ctx->fab); r++) {
        u->bytes[r] = fab_rail_bytes(s->ctx->fab, r);
        u->writes[r] = fab_rail_writes(s->ctx->fab, r);
        u->source_bytes[r] = fab_rail_source_bytes(s->ctx->fab, r);
    }
}

/* The rails' counters are the context's: a push's share is what they
 * gained while it ran (pushes of a context take its lock in turn). */
static void report_paths(fx_session_t *s, const struct rail_use *sent)
{
    const struct fab *f = s->ctx->fab;
    struct rail_use now;
    int n = fab_npaths(f);

    if (n > FX_REPORT_PATHS)
        n = FX_REPORT_PATHS;
    s->report.npaths = (uint32_t)n;
    for (int p = 0; p < n; p++) {
        fx_report_path_t *rp = &s->report.paths[p];

        snprintf(rp->provider, sizeof(rp->provider), "%.*s",
                 (int)sizeof(rp->provider) - 1, fab_path_profile(f, p)->prov);
        rp->peers = s->path_peers[p];
        rp->bytes = sent == NULL ? s->path_expect[p] : 0;
    }
    if (sent == NULL)
        return;
    session_rails_now(s, &now);
    for (int r = 0; r < fab_rails(f); r++) {
        int p = fab_rail_path(f, r);

        s->report.source_copied += now.source_bytes[r] - sent->source_bytes[r];
        if (p >= 0 && p < n) {
            s->report.paths[p].bytes += now.bytes[r] - sent->bytes[r];
            s->report.paths[p].writes += now.writes[r] - sent->writes[r];
        }
    }
}

void session_fill_report(fx_session_t *s, uint64_t version,
                         const struct eng_times *t, uint64_t bytes,
                         const struct rail_use *sent)
{
    s->report = (fx_report_t){
        .struct_size = sizeof(fx_report_t), .version = version, .bytes = bytes, .writes = t->writes,
        .packed_bytes = s->source ? s->prog.packed_bytes : 0,
        .seconds = t->total, .pack_s = t->pack, .post_s = t->post,
        .wait_s = t->wait, .stall_s = t->stall,
        .packer_thread = s->source != NULL ? eng_source_threaded(s->source)
                                           : -1,
        .pool_bytes = s->source != NULL ? eng_source_pool_bytes(s->source) : 0,
        .pack_main_s = t->main_pack,
        .verify_s = sent != NULL ? t->verify : 0,
        .ready_wait_s = t->ready_wait,
        .apply_s = s->report.apply_s,
        .apply_bytes = s->report.apply_bytes,
    };
    const struct fab_ctrl_stats *d = fab_ctrl_stats(s->ctx->fab);

    s->report.ctrl_forged = d->forged;
    s->report.ctrl_malformed = d->malformed;
    s->report.ctrl_stale = d->stale;
    s->report.writedata_surplus = d->surplus;
    s->report.registrations = fab_mr_count(s->ctx->fab);
    s->report.targets_joined = s->targets_joined;
    s->report.join_s = s->join_s;
    if (sent != NULL) {
        s->report.verify_bytes =
            s->source != NULL ? eng_source_checked(s->source,
                                                   &s->report.verify_sent)
                              : 0;
    } else {
        s->report.verify_bytes = s->check_bytes;
        s->report.verify_units = s->check_count;
        s->report.verify_failed = s->check_failed;
        s->report.verify_s = s->check_s;
    }
    report_paths(s, sent);
}

const fx_report_t *fx_session_report(const fx_session_t *s)
{
    return s != NULL ? &s->report : NULL;
}

/* The report's fields in order, for JSON and for telling a struct_size
 * that ends between two fields (no release had it) from a real one. */
enum rep_kind { REP_U64, REP_DOUBLE, REP_BOOL3, REP_PATHS };
#define REP(field, kind) \
    {#field, offsetof(fx_report_t, field), \
     sizeof(((fx_report_t *)0)->field), kind}
static const struct rep_field {
    const char *name;
    size_t off, size;
    enum rep_kind kind;
} rep_fields[] = {
    REP(version, REP_U64), REP(bytes, REP_U64), REP(writes, REP_U64),
    REP(packed_bytes, REP_U64), REP(seconds, REP_DOUBLE),
    REP(pack_s, REP_DOUBLE), REP(post_s, REP_DOUBLE),
    REP(wait_s, REP_DOUBLE), REP(stall_s, REP_DOUBLE),
    REP(packer_thread, REP_BOOL3), REP(pool_bytes, REP_U64),
    REP(pack_main_s, REP_DOUBLE), REP(ctrl_forged, REP_U64),
    REP(ctrl_malformed, REP_U64), REP(ctrl_stale, REP_U64),
    REP(writedata_surplus, REP_U64), REP(registrations, REP_U64),
    REP(ready_wait_s, REP_DOUBLE), REP(apply_s, REP_DOUBLE),
    REP(apply_bytes, REP_U64),
    /* npaths and its array, as one */
    {"paths", offsetof(fx_report_t, npaths),
     offsetof(fx_report_t, verify_bytes) - offsetof(fx_report_t, npaths),
     REP_PATHS},
    REP(verify_bytes, REP_U64), REP(verify_sent, REP_U64),
    REP(verify_units, REP_U64),
    REP(verify_failed, REP_U64), REP(targets_left, REP_U64),
    REP(targets_joined, REP_U64), REP(join_s, REP_DOUBLE),
    REP(source_copied, REP_U64), REP(verify_s, REP_DOUBLE),
};
#define REP_COUNT (sizeof(rep_fields) / sizeof(rep_fields[0]))

/* Whether size is where some field ends (or the whole struct). */
static int report_size_known(uint32_t size)
{
    if (size == sizeof(fx_report_t))
        return 1;
    for (size_t i = 0; i < REP_COUNT; i++)
        if (rep_fields[i].off + rep_fields[i].size == size)
            return 1;
    return 0;
}

fx_status_t fx_session_report_copy(const fx_session_t *s, fx_report_t *out)
{
    uint32_t size;

    if (s == NULL || out == NULL)
        return err_set(FX_ERR_INVALID, "fx_session_report_copy: NULL "
                       "argument");
    size = out->struct_size;
    if (!report_size_known(size))
        return ctx_fail(s->ctx, err_set(FX_ERR_INVALID,
                        "fx_session_report_copy: struct_size %u is not a "
                        "size fx_report_t has had (this fabxfer's is %zu)",
                        size, sizeof(fx_report_t)));
    memcpy(out, &s->report, size);
    out->struct_size = size;
    return FX_OK;
}

int fx_report_json(const fx_report_t *r, char *buf, size_t len)
{
    size_t used = 0;
    int total = 0, n;

    if (r == NULL || !report_size_known(r->struct_size))
        return -1;
    if (len > 0)
        buf[0] = '\0';
#define EMIT(...)                                                          \
    do {                                                                   \
        n = snprintf(buf ? buf + used : NULL, used < len ? len - used : 0, \
                     __VA_ARGS__);                                         \
        if (n < 0)                                                         \
            return -1;                                                     \
        total += n;                                                        \
        used = (size_t)total < len ? (size_t)total : len;                  \
    } while (0)
    EMIT("{");
    for (size_t i = 0; i < REP_COUNT; i++) {
        const struct rep_field *f = &rep_fields[i];
        const char *p = (const char *)r + f->off;
        uint64_t u;
        double d;
        int b;

        if (f->off + f->size > r->struct_size)
            break;
        EMIT("%s\"%s\": ", i ? ", " : "", f->name);
        switch (f->kind) {
        case REP_U64:
            memcpy(&u, p, sizeof(u));
            EMIT("%llu", (unsigned long long)u);
            break;
        case REP_DOUBLE:
            /* nine digits, not six decimals: a time under a microsecond
             * (a source's verify_s) is not 0 */
            memcpy(&d, p, sizeof(d));
            EMIT("%.9g", d);
            break;
        case REP_BOOL3:
            memcpy(&b, p, sizeof(b));
            EMIT("%s", b < 0 ? "null" : b ? "true" : "false");
            break;
        case REP_PATHS:
            EMIT("[");
            for (uint32_t k = 0; k < r->npaths && k < FX_REPORT_PATHS; k++)
                EMIT("%s{\"provider\": \"%.*s\", \"peers\": %u, "
                     "\"bytes\": %llu, \"writes\": %llu}", k ? ", " : "",
                     (int)sizeof(r->paths[k].provider),
                     r->paths[k].provider, r->paths[k].peers,
                     (unsigned long long)r->paths[k].bytes,
                     (unsigned long long)r->paths[k].writes);
            EMIT("]");
            break;
        }
        /* derived, beside what it is made of */
        if (f->off == offsetof(fx_report_t, seconds))
            EMIT(", \"gb_per_s\": %.4f", r->seconds > 0
                 ? (double)r->bytes / r->seconds / 1e9 : 0);
    }
    EMIT("}");
#undef EMIT
    return total;
}
