/*
 * The canonical hash of a manifest, which every rank compares to agree
 * that it was given the same one (session set-up), and its parts, which
 * digest.c compares item by item when two ranks' hashes differ: FNV-1a
 * over a canonical encoding, every string with its length, every list
 * with its count. It reads the structures and calls neither manifest.c
 * (whose name table hashes with it) nor rules.c (which builds on
 * manifest.c), though it hashes both pieces and rules.
 */
#include <string.h>

#include "plan/plan.h"

uint64_t plan_hash_bytes(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;

    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Integers go in as 8 little-endian bytes, so that the hash is the same on
 * hosts of either byte order. */
uint64_t plan_hash_i64(uint64_t h, int64_t v)
{
    unsigned char b[8];

    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)v >> (8 * i));
    return plan_hash_bytes(h, b, sizeof(b));
}

uint64_t plan_hash_str(uint64_t h, const char *str)
{
    size_t n = str != NULL ? strlen(str) : 0;

    h = plan_hash_i64(h, str != NULL ? (int64_t)n : -1);
    return plan_hash_bytes(h, str != NULL ? str : "", n);
}

/* One tensor's declaration, every field always (absent ones as -1). */
uint64_t plan_hash_tensor(uint64_t h, const struct plan_tensor *t)
{
    h = plan_hash_str(h, t->name);
    h = plan_hash_str(h, plan_dtype_name(t->dtype));
    h = plan_hash_str(h, plan_dtype_name(t->tdtype));
    h = plan_hash_i64(h, t->ndim);
    for (int d = 0; d < t->ndim; d++)
        h = plan_hash_i64(h, t->shape[d]);
    h = plan_hash_i64(h, t->scale);
    h = plan_hash_i64(h, t->scale >= 0 ? t->block[0] : 0);
    h = plan_hash_i64(h, t->scale >= 0 ? t->block[1] : 0);
    h = plan_hash_i64(h, t->view != NULL ? t->view->dim : -1);
    h = plan_hash_i64(h, t->view != NULL ? (int64_t)t->view->n : -1);
    if (t->view != NULL && t->view->per > 0) /* older hashes unchanged */
        h = plan_hash_i64(h, t->view->per);
    for (uint32_t k = 0; t->view != NULL && k < t->view->n; k++) {
        h = plan_hash_i64(h, t->view->part[k].tensor);
        h = plan_hash_i64(h, t->view->part[k].start);
        h = plan_hash_i64(h, t->view->part[k].end);
    }
    return h;
}

/* One piece: a fixed number of integers for its tensor and form. */
uint64_t plan_hash_piece(uint64_t h, const struct plan_manifest *m,
                         const struct plan_piece *p)
{
    h = plan_hash_i64(h, p->rank);
    h = plan_hash_i64(h, p->role);
    h = plan_hash_i64(h, p->tensor);
    h = plan_hash_i64(h, p->dim);
    if (p->dim == PLAN_BOX) {
        int nd = m->tensors[p->tensor].ndim;

        for (int d = 0; d < 2 * nd; d++)
            h = plan_hash_i64(h, m->bounds[p->start + d]);
        return h;
    }
    h = plan_hash_i64(h, p->dim >= 0 || p->dim == PLAN_FLAT ? p->start : 0);
    return plan_hash_i64(h, p->dim >= 0 || p->dim == PLAN_FLAT ? p->end : 0);
}

/* A canonical encoding: every string with its length, every list with
 * its count, every optional field always (review 5.7: concatenated rule
 * strings let two different layouts hash alike). */
uint64_t manifest_hash(const struct plan_manifest *m)
{
    uint64_t h = PLAN_HASH_INIT;

    if (m == NULL)
        return 0;
    /* expanded: the ranks agree on the rules; grown: on the manifest
     * the job grew by */
    if (m->local_rank >= 0 || m->hash_kept)
        return m->whole_hash;
    h = plan_hash_str(h, "fabxfer-manifest-2");
    h = plan_hash_i64(h, m->ntensors);
    for (uint32_t i = 0; i < m->ntensors; i++)
        h = plan_hash_tensor(h, &m->tensors[i]);
    h = plan_hash_sides(h, m);
    h = plan_hash_i64(h, m->npieces);
    for (uint32_t i = 0; i < m->npieces; i++)
        h = plan_hash_piece(h, m, &m->pieces[i]);
    return h;
}

/* One rule, with its count of everything and its strings' lengths. */
uint64_t plan_hash_rule(uint64_t h, const struct plan_side *s,
                        const struct plan_rule *r)
{
    h = plan_hash_str(h, r->match);
    h = plan_hash_i64(h, r->ndim);
    h = plan_hash_i64(h, r->flat);
    for (int d = 0; d < s->ndims; d++)
        h = plan_hash_i64(h, r->cut[d]);
    h = plan_hash_i64(h, r->nplace);
    for (int k = 0; k < r->nplace; k++) {
        const struct plan_place *p = &r->place[k];

        h = plan_hash_i64(h, p->ndims);
        for (int j = 0; j < p->ndims; j++)
            h = plan_hash_i64(h, p->dims[j]);
        h = plan_hash_i64(h, p->at);
        h = plan_hash_i64(h, p->of);
        h = plan_hash_i64(h, p->round_robin);
        h = plan_hash_str(h, p->by);
    }
    return h;
}

/* A side's grid, without its rules. */
uint64_t plan_hash_grid(uint64_t h, const struct plan_side *s)
{
    h = plan_hash_i64(h, s != NULL);
    if (s == NULL)
        return h;
    h = plan_hash_i64(h, s->first);
    h = plan_hash_i64(h, s->ndims);
    for (int d = 0; d < s->ndims; d++) {
        h = plan_hash_str(h, s->dim[d]);
        h = plan_hash_i64(h, s->size[d]);
    }
    return plan_hash_i64(h, s->nrules);
}

uint64_t plan_hash_sides(uint64_t h, const struct plan_manifest *m)
{
    for (int role = 0; role < 2; role++) {
        const struct plan_side *s = m->side[role];

        h = plan_hash_grid(h, s);
        for (uint32_t i = 0; s != NULL && i < s->nrules; i++)
            h = plan_hash_rule(h, s, &s->rule[i]);
    }
    return h;
}
