/*
 * What two ranks' manifests differ in, when their hashes do. A manifest
 * is a list of items, each tensor (its declaration, its pieces, the rules
 * that take it) and then the rest (the order of the pieces, the grids,
 * rules that take no tensor), each with digests of its parts, and an item
 * can be put in words. Set-up (session.c) bisects the list between the
 * two ranks with the digests and names the first item that differs, from
 * records that every rank sees alike.
 */
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "util/error.h"

/* A compact manifest expanded for a rank is compared as its rules. */
static const struct plan_manifest *whole_of(const struct plan_manifest *m)
{
    return m->whole != NULL ? m->whole : m;
}

uint64_t manifest_items(const struct plan_manifest *m)
{
    return (uint64_t)whole_of(m)->ntensors + 1;
}

/* The rule of side s that takes t first, or -1. */
static int rule_of(const struct plan_side *s, const struct plan_tensor *t)
{
    for (uint32_t i = 0; s != NULL && i < s->nrules; i++)
        if ((s->rule[i].ndim < 0 || s->rule[i].ndim == t->ndim) &&
            fnmatch(s->rule[i].match, t->name, 0) == 0)
            return (int)i;
    return -1;
}

static uint64_t tensor_rules(const struct plan_manifest *m,
                             const struct plan_tensor *t)
{
    uint64_t h = PLAN_HASH_INIT;

    for (int role = 0; role < 2; role++) {
        const struct plan_side *s = m->side[role];
        int k = rule_of(s, t);

        h = plan_hash_grid(h, s);
        h = plan_hash_i64(h, k);
        if (k >= 0)
            h = plan_hash_rule(h, s, &s->rule[k]);
    }
    return h;
}

fx_status_t manifest_item_digests(const struct plan_manifest *m,
                                  struct plan_item **out)
{
    const struct plan_manifest *w = whole_of(m);
    struct plan_item *it = calloc((size_t)w->ntensors + 1, sizeof(*it));
    uint64_t *count;

    count = calloc((size_t)w->ntensors + 1, sizeof(*count));
    if (it == NULL || count == NULL) {
        free(it);
        free(count);
        return err_set(FX_ERR_NOMEM, "manifest: no memory for the digests "
                       "of %u tensors", w->ntensors);
    }
    for (uint32_t i = 0; i < w->ntensors; i++) {
        const struct plan_tensor *t = &w->tensors[i];
        struct plan_tensor bare = *t;

        it[i].name = plan_hash_str(PLAN_HASH_INIT, t->name);
        bare.name = NULL;
        bare.ndim = 0;
        it[i].type = plan_hash_tensor(PLAN_HASH_INIT, &bare);
        it[i].shape = plan_hash_i64(PLAN_HASH_INIT, t->ndim);
        for (int d = 0; d < t->ndim; d++)
            it[i].shape = plan_hash_i64(it[i].shape, t->shape[d]);
        it[i].pieces = PLAN_HASH_INIT;
        it[i].rules = tensor_rules(w, t);
    }
    for (uint32_t p = 0; p < w->npieces; p++) {
        uint32_t t = w->pieces[p].tensor;

        it[t].pieces = plan_hash_piece(it[t].pieces, w, &w->pieces[p]);
        count[t]++;
    }
    for (uint32_t i = 0; i < w->ntensors; i++)
        it[i].pieces = plan_hash_i64(it[i].pieces, (int64_t)count[i]);
    free(count);
    /* the rest: what the whole hash holds beyond the tensors' items */
    it[w->ntensors].name = 1;
    it[w->ntensors].pieces = manifest_hash(w);
    it[w->ntensors].rules = plan_hash_sides(PLAN_HASH_INIT, w);
    *out = it;
    return FX_OK;
}

uint64_t plan_item_hash(uint64_t h, const struct plan_item *it)
{
    h = plan_hash_i64(h, (int64_t)it->name);
    h = plan_hash_i64(h, (int64_t)it->type);
    h = plan_hash_i64(h, (int64_t)it->shape);
    h = plan_hash_i64(h, (int64_t)it->pieces);
    return plan_hash_i64(h, (int64_t)it->rules);
}

/* Appends to buf (len bytes, a C string) what fmt gives, cut to fit. */
static void cat(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void cat(char *buf, size_t len, const char *fmt, ...)
{
    size_t n = strlen(buf);
    va_list ap;

    va_start(ap, fmt);
    if (n + 1 < len)
        vsnprintf(buf + n, len - n, fmt, ap);
    va_end(ap);
}

static void rule_text(const struct plan_side *s, fx_role_t role, int k,
                      char *buf, size_t len)
{
    const struct plan_rule *r;
    char ebuf[ERR_ESC_MAX];

    cat(buf, len, "%s%s ", role == FX_TARGET ? "; " : "",
        role == FX_SOURCE ? "sources" : "targets");
    if (s == NULL || k < 0) {
        cat(buf, len, "%s", s == NULL ? "listed" : "no rule");
        return;
    }
    r = &s->rule[k];
    cat(buf, len, "rule %d \"%s\"", k, err_esc(ebuf, r->match));
    if (r->ndim >= 0)
        cat(buf, len, " ndim %d", r->ndim);
    for (int d = 0; d < s->ndims; d++)
        if (r->cut[d] >= 0)
            cat(buf, len, r->cut[d] == PLAN_CUT_FLAT ? " cut %s:flat"
                                                     : " cut %s:%d",
                s->dim[d], r->cut[d]);
    for (int j = 0; j < r->nplace; j++) {
        const struct plan_place *p = &r->place[j];

        cat(buf, len, " place %s", s->dim[p->dims[0]]);
        for (int e = 1; e < p->ndims; e++)
            cat(buf, len, "+%s", s->dim[p->dims[e]]);
        if (p->by != NULL)
            cat(buf, len, " by \"%s\" of %lld%s", err_esc(ebuf, p->by),
                (long long)p->of, p->round_robin ? " round robin" : "");
        else
            cat(buf, len, " at %lld", (long long)p->at);
    }
}

void manifest_item_describe(const struct plan_manifest *m, uint64_t i,
                            struct plan_item_text *out)
{
    const struct plan_manifest *w = whole_of(m);
    const struct plan_tensor *t;
    char ebuf[ERR_ESC_MAX], box[64];

    memset(out, 0, sizeof(*out));
    if (i > w->ntensors)
        return;
    if (i == w->ntensors) {
        cat(out->decl, sizeof(out->decl), "%u tensors, %u pieces",
            w->ntensors, w->npieces);
        for (int role = 0; role < 2; role++) {
            const struct plan_side *s = w->side[role];

            cat(out->rules, sizeof(out->rules), "%s%s ",
                role ? "; " : "", role ? "targets" : "sources");
            if (s == NULL) {
                cat(out->rules, sizeof(out->rules), "listed");
                continue;
            }
            cat(out->rules, sizeof(out->rules), "from rank %d, grid",
                s->first);
            for (int d = 0; d < s->ndims; d++)
                cat(out->rules, sizeof(out->rules), " %s %lld", s->dim[d],
                    (long long)s->size[d]);
            cat(out->rules, sizeof(out->rules), ", %u rules", s->nrules);
        }
        return;
    }
    t = &w->tensors[i];
    cat(out->decl, sizeof(out->decl), "\"%s\" %s", err_esc(ebuf, t->name),
        plan_dtype_name(t->dtype));
    if (t->tdtype != t->dtype)
        cat(out->decl, sizeof(out->decl), " to %s",
            plan_dtype_name(t->tdtype));
    cat(out->decl, sizeof(out->decl), " [");
    for (int d = 0; d < t->ndim; d++)
        cat(out->decl, sizeof(out->decl), "%s%lld", d ? ", " : "",
            (long long)t->shape[d]);
    cat(out->decl, sizeof(out->decl), "]%s%s", t->view ? " (a view)" : "",
        t->scale >= 0 ? " (block-scaled)" : "");
    for (int role = 0; role < 2; role++)
        rule_text(w->side[role], (fx_role_t)role,
                  rule_of(w->side[role], t), out->rules,
                  sizeof(out->rules));
    for (uint32_t p = 0; p < w->npieces; p++) {
        const struct plan_piece *pc = &w->pieces[p];
        uint32_t k = out->npieces++;

        if (pc->tensor != i || k >= PLAN_ITEM_PIECES) {
            out->npieces -= pc->tensor != i;
            continue;
        }
        out->piece_dg[k] = plan_hash_piece(PLAN_HASH_INIT, w, pc);
        snprintf(out->piece[k], sizeof(out->piece[k]), "rank %d %s, %s",
                 pc->rank, plan_role_name(pc->role),
                 plan_piece_text(w, pc, box, sizeof(box)));
    }
}
