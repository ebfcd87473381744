/*
 * Naming the first difference of two manifests, where rank r's hashes
 * otherwise than rank 0's at set-up (session.c's verdicts): ranks 0 and r
 * bisect their lists of items (digest.c: each tensor with its pieces and
 * rules, then the rest) in rounds of DIFF_K digests, then describe the
 * first item that differs. Every rank takes part (all saw the same
 * verdicts) and words the sentence from the same two records, so all say
 * the same. Paid on a mismatch only: log_32 of the tensors rounds of 264
 * bytes a rank, and one of 1 KiB.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/session_int.h"

#define DIFF_K 32
struct diff_round {
    uint64_t d[DIFF_K];
    uint64_t pad;
};

struct diff_item {
    struct plan_item dg;
    int32_t kind;            /* 0: a tensor, 1: the rest, 2: none */
    uint32_t ntensors;
    struct plan_item_text text;
};

/* Item i as ranks 0 and r see it. */
static void diff_describe(const struct plan_manifest *m,
                          const struct plan_item *it, uint64_t i,
                          struct diff_item *out)
{
    uint64_t n = manifest_items(m);

    memset(out, 0, sizeof(*out));
    out->ntensors = (uint32_t)(n - 1);
    out->kind = i + 1 < n ? 0 : i + 1 == n ? 1 : 2;
    if (out->kind != 2) {
        out->dg = it[i];
        manifest_item_describe(m, i, &out->text);
    }
}

/* The records' texts come from another rank: printable bytes only, cut. */
static const char *diff_clean(char *buf, size_t len)
{
    buf[len - 1] = '\0';
    for (char *c = buf; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    return buf;
}

static void diff_sentence(const struct diff_item *a, const struct diff_item *b,
                          int r, uint64_t i, char *out, size_t len)
{
    struct diff_item x = *a, y = *b;
    char words[64] = "";
    uint32_t k;

    diff_clean(x.text.decl, sizeof(x.text.decl));
    diff_clean(y.text.decl, sizeof(y.text.decl));
    diff_clean(x.text.rules, sizeof(x.text.rules));
    diff_clean(y.text.rules, sizeof(y.text.rules));
    if (x.kind != 0 || y.kind != 0) {
        const struct diff_item *t = x.kind == 0 ? &x : &y;

        if (x.kind != 0 && y.kind != 0) /* the rest */
            snprintf(out, len, "every tensor, its pieces and its rules "
                     "agree; %s differ: rank 0 has %s (%s), rank %d %s "
                     "(%s)", x.dg.rules != y.dg.rules
                     ? "the layouts' grids or rules that take no tensor"
                     : "the order of the pieces", x.text.decl, x.text.rules,
                     r, y.text.decl, y.text.rules);
        else
            snprintf(out, len, "rank 0 has %u tensors, rank %d %u; the "
                     "first extra is tensors[%llu] %s on rank %d", x.ntensors,
                     r, y.ntensors, (unsigned long long)i, t->text.decl,
                     x.kind == 0 ? 0 : r);
        return;
    }
    if (x.dg.name != y.dg.name)
        strcat(words, ", name");
    if (x.dg.type != y.dg.type)
        strcat(words, ", dtype");
    if (x.dg.shape != y.dg.shape)
        strcat(words, ", shape");
    if (x.dg.pieces != y.dg.pieces)
        strcat(words, ", pieces");
    if (x.dg.rules != y.dg.rules)
        strcat(words, ", rules");
    if (x.dg.pieces != y.dg.pieces && x.dg.name == y.dg.name &&
        x.dg.type == y.dg.type && x.dg.shape == y.dg.shape) {
        for (k = 0; k < x.text.npieces && k < y.text.npieces &&
                    k < PLAN_ITEM_PIECES &&
                    x.text.piece_dg[k] == y.text.piece_dg[k];
             k++)
            ;
        if (k < PLAN_ITEM_PIECES && k < x.text.npieces &&
            k < y.text.npieces)
            snprintf(out, len, "tensors[%llu] %s differs in its pieces: "
                     "its piece %u is (%s) on rank 0, (%s) on rank %d",
                     (unsigned long long)i, x.text.decl, k,
                     diff_clean(x.text.piece[k], sizeof(x.text.piece[k])),
                     diff_clean(y.text.piece[k], sizeof(y.text.piece[k])), r);
        else
            snprintf(out, len, "tensors[%llu] %s differs in its pieces: "
                     "rank 0 lists %u of them, rank %d %u%s%s%s",
                     (unsigned long long)i, x.text.decl, x.text.npieces, r,
                     y.text.npieces, k < PLAN_ITEM_PIECES ? "; the first "
                     "extra: (" : "", k >= PLAN_ITEM_PIECES ? "" :
                     diff_clean(k < x.text.npieces ? x.text.piece[k]
                                                   : y.text.piece[k],
                                sizeof(x.text.piece[k])),
                     k < PLAN_ITEM_PIECES ? ")" : "");
        return;
    }
    snprintf(out, len, "tensors[%llu] differs in its %s: rank 0 has %s%s%s, "
             "rank %d %s%s%s", (unsigned long long)i, words + 2, x.text.decl,
             x.dg.rules != y.dg.rules ? ", " : "",
             x.dg.rules != y.dg.rules ? x.text.rules : "", r, y.text.decl,
             x.dg.rules != y.dg.rules ? ", " : "",
             x.dg.rules != y.dg.rules ? y.text.rules : "");
}

fx_status_t session_diff_find(fx_session_t *s, uint64_t items0,
                              uint64_t items_r, int r, char *out, size_t len)
{
    fx_ctx_t *ctx = s->ctx;
    int mine = ctx->rank == 0 || ctx->rank == r;
    uint64_t lo = 0, hi = items0 > items_r ? items0 : items_r;
    uint64_t n = manifest_items(s->m);
    struct plan_item *it = NULL;
    struct diff_round round, *rounds = NULL;
    struct diff_item item, *items = NULL;
    fx_status_t st = FX_OK;

    out[0] = '\0';
    /* A rank short of memory still takes part, with zeros. */
    if (mine && manifest_item_digests(s->m, &it) != FX_OK)
        mine = 0;
    rounds = calloc((size_t)ctx->size, sizeof(*rounds));
    items = calloc((size_t)ctx->size, sizeof(*items));
    while (st == FX_OK && hi - lo > 1) {
        uint64_t step = (hi - lo + DIFF_K - 1) / DIFF_K;
        int k;

        memset(&round, 0, sizeof(round));
        for (k = 0; mine && k < DIFF_K; k++) {
            uint64_t h = PLAN_HASH_INIT;

            for (uint64_t i = lo + k * step; i < lo + (k + 1) * step &&
                                             i < hi; i++)
                h = i < n ? plan_item_hash(h, &it[i])
                          : plan_hash_i64(h, -1);
            round.d[k] = h;
        }
        st = rounds == NULL ? FX_ERR_NOMEM
                            : boot_allgather(ctx->boot, "manifest "
                                             "differences", &round,
                                             sizeof(round), rounds);
        for (k = 0; st == FX_OK && k < DIFF_K &&
                    rounds[0].d[k] == rounds[r].d[k];
             k++)
            ;
        if (st == FX_OK && k == DIFF_K)
            st = FX_ERR_INVALID; /* alike after all: words fail us */
        if (st == FX_OK) {
            lo += (uint64_t)k * step;
            hi = lo + step < hi ? lo + step : hi;
        }
    }
    if (mine)
        diff_describe(s->m, it, lo, &item);
    else
        memset(&item, 0, sizeof(item));
    if (st == FX_OK)
        st = items == NULL ? FX_ERR_NOMEM
                           : boot_allgather(ctx->boot, "manifest "
                                            "differences", &item,
                                            sizeof(item), items);
    if (st == FX_OK)
        diff_sentence(&items[0], &items[r], r, lo, out, len);
    free(it);
    free(rounds);
    free(items);
    return FX_OK;
}
