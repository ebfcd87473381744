/*
 * Set-up's exchange with plan peers. After the plan, a rank sends its blob
 * (address, secret, target regions) to the ranks it has segments with, in
 * either direction, and a target adds, for each source that writes to it,
 * the bindings of the pieces that source writes. Nothing goes to the rest
 * of the job, so what a rank sends, gets and keeps grows with its peers:
 * a job of a thousand ranks, each writing to a few, no longer hands every
 * rank every blob (fx_ctx_exchange still does, for fx_write's users).
 */
#include <stdlib.h>
#include <string.h>

#include "core/session_int.h"

#define PEER_MAGIC 0x31525046u /* "FPR1" */

/* Each message: this head, the sender's blob, then its bindings. */
struct peer_head {
    uint32_t magic;
    uint32_t planned;  /* 0: the sender could not plan; no bindings follow */
    uint64_t blob_len;
};

enum {
    PEER_SEND = 1,   /* it gets our blob */
    PEER_FROM = 2,   /* we get its blob */
    PEER_PLAN = 4,   /* a plan peer: its bindings or its refusal matter */
};

/* The bindings this target gives source src (the pieces of the segments
 * [i, end), one entry a tensor), appended at out. */
static size_t put_bindings(const fx_session_t *s, const struct plan *plan,
                           size_t i, size_t end, const int32_t *of_tensor,
                           const struct bind_wire *wire, char *out)
{
    size_t n = 0;
    uint32_t last = UINT32_MAX;

    for (; i < end; i++) {
        uint32_t t = s->m->pieces[plan->segs[i].dst_piece].tensor;

        if (of_tensor[t] < 0 || t == last)
            continue;
        memcpy(out + n * sizeof(*wire), &wire[of_tensor[t]], sizeof(*wire));
        n++;
        last = t;
    }
    return n * sizeof(*wire);
}

/* A rank whose plan failed (plan NULL) tells every rank, so that its plan
 * peers, which it no longer knows, fail at once instead of waiting on it. */
fx_status_t peers_exchange(fx_session_t *s, const struct plan *plan,
                           const struct bind_wire *wire, size_t nwire,
                           unsigned char **marks, struct fx_gather **got)
{
    int me = s->ctx->rank, n = s->ctx->size, nto = 0, nfrom = 0;
    int *to = NULL, *from = NULL;
    size_t nsegs = plan ? plan->nsegs : 0, blen = 0, *len = NULL;
    size_t *run = NULL; /* per rank: where its run as our source starts */
    unsigned char *mark;
    int32_t *of_tensor = NULL;
    char **out = NULL;
    void *blob = NULL;
    struct bind_wire vw;
    fx_status_t st;

    *got = NULL;
    if ((*marks = mark = calloc((size_t)n, 1)) == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %d peers", n);
    if ((st = blob_encode(s->ctx, &blob, &blen)) != FX_OK)
        goto out;
    st = FX_ERR_NOMEM;
    to = malloc((size_t)n * sizeof(*to));
    from = malloc((size_t)n * sizeof(*from));
    out = calloc((size_t)n, sizeof(*out));
    len = calloc((size_t)n, sizeof(*len));
    run = calloc((size_t)n * 2, sizeof(*run));
    of_tensor = malloc(((size_t)s->m->ntensors + 1) * sizeof(*of_tensor));
    if (to == NULL || from == NULL || out == NULL || len == NULL ||
        run == NULL || of_tensor == NULL)
        goto nomem;
    memset(of_tensor, -1, ((size_t)s->m->ntensors + 1) * sizeof(*of_tensor));
    for (size_t k = 0; k < nwire; k++)
        of_tensor[wire[k].tensor] = (int32_t)k;
    mark[me] = PEER_SEND | PEER_FROM;
    for (int r = 0; plan == NULL && r < n; r++)
        mark[r] |= PEER_SEND;
    /* Segments come by (source, target): each peer's, either way, are one
     * run, and a source's run into us is the bindings it gets. */
    for (size_t i = 0, end; i < nsegs; i = end) {
        const struct plan_seg *g = &plan->segs[i];

        for (end = i + 1; end < nsegs && plan->segs[end].source == g->source &&
                          plan->segs[end].target == g->target;
             end++)
            ;
        mark[g->source == me ? g->target : g->source] |=
            PEER_SEND | PEER_FROM | PEER_PLAN;
        if (g->target == me) {
            run[2 * g->source] = i;
            run[2 * g->source + 1] = end;
        }
    }
    for (int r = 0; r < n; r++) {
        size_t nb = run[2 * r + 1] - run[2 * r];
        struct peer_head h = {PEER_MAGIC, plan != NULL, blen};

        if (mark[r] & PEER_FROM)
            from[nfrom++] = r;
        if (!(mark[r] & PEER_SEND))
            continue;
        if ((out[nto] = malloc(sizeof(h) + blen +
                               (nb + 1) * sizeof(*wire))) == NULL)
            goto nomem;
        memcpy(out[nto], &h, sizeof(h));
        memcpy(out[nto] + sizeof(h), blob, blen);
        len[nto] = sizeof(h) + blen +
                   put_bindings(s, plan, run[2 * r], run[2 * r + 1],
                                of_tensor, wire, out[nto] + sizeof(h) + blen);
        /* and, where versions are checked, where its CRCs go */
        if (nb > 0 && verify_wire(s, r, &vw)) {
            memcpy(out[nto] + len[nto], &vw, sizeof(vw));
            len[nto] += sizeof(vw);
        }
        to[nto++] = r;
    }
    st = boot_exchange(s->ctx->boot, "addresses and bindings", nto, to,
                       (const void *const *)out, len, nfrom, from, got);
    goto out;
nomem:
    st = err_set(FX_ERR_NOMEM, "no memory for the messages to %d peers", n);
out:
    for (int i = 0; out != NULL && i < nto; i++)
        free(out[i]);
    free(out);
    free(len);
    free(to);
    free(from);
    free(run);
    free(of_tensor);
    free(blob);
    return st;
}

/* Import the blobs that came and leave each sender's bindings alone in
 * got. A plan peer that could not plan fails this rank, naming it. */
fx_status_t peers_import(fx_session_t *s, const unsigned char *marks,
                         struct fx_gather *got)
{
    fx_status_t st = FX_OK;

    for (int r = 0; r < s->ctx->size && st == FX_OK; r++) {
        unsigned char *v = got->val[r];
        size_t l = got->len[r];
        struct peer_head h;

        if (!(marks[r] & PEER_FROM))
            continue;
        if (v == NULL || l < sizeof(h))
            return err_set(FX_ERR_BLOB, "rank %d sent no address (%zu "
                           "bytes)", r, v ? l : 0);
        memcpy(&h, v, sizeof(h));
        if (h.magic != PEER_MAGIC || h.blob_len > l - sizeof(h))
            return err_set(FX_ERR_BLOB, "rank %d's set-up message of %zu "
                           "bytes is not one (magic 0x%08x, a blob of %llu "
                           "bytes)", r, l, h.magic,
                           (unsigned long long)h.blob_len);
        if ((st = blob_decode_import(s->ctx, v + sizeof(h), h.blob_len, r)) !=
            FX_OK)
            return st;
        if (!h.planned && (marks[r] & PEER_PLAN))
            return err_set(FX_ERR_PEER, "rank %d, a plan peer, could not "
                           "build its plan (the readiness verdicts give its "
                           "reason)", r);
        got->len[r] = l - sizeof(h) - h.blob_len;
        memmove(v, v + sizeof(h) + h.blob_len, got->len[r]);
    }
    return st;
}

