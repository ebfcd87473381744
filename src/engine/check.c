/*
 * Versions that prove themselves: a CRC32C per unit, a unit being one plan
 * segment (a tensor's bytes from one source to one target), taken by the
 * source over the bytes as they leave (the packed bucket, after any
 * conversion; the tensor itself for a direct write) and by the target over
 * what landed, before the version is used.
 *
 * The source's program cuts and merges segments freely (runs of
 * neighbouring tensors become one write, replicas share buckets), so the
 * units are found again from the destination side: each write's target
 * range falls in one or more units, and each such piece of a unit is
 * checksummed on its own and shifted into place (crc32c.h: raw CRCs add).
 * Pieces of one unit may then be summed by the packer and the posting
 * thread at once, in any order.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "util/crc32c.h"
#include "util/error.h"
#include "util/fault.h"

#define CHECK_MAGIC 0x4b434846u /* "FHCK" */

struct piece {
    const char *src;     /* direct: the source's bytes; NULL: in a bucket */
    uint64_t off, len;   /* bucket: offset in it */
    uint64_t uend;       /* build only: where it ends in its unit */
    uint32_t word;       /* its unit's CRC: byte offset in buf */
    uint32_t pu;         /* its unit's number in the pair (sampling) */
    uint32_t factor;     /* x^(8 x the unit's bytes after it) */
};

struct eng_checks {
    struct piece *pieces;
    size_t npieces, cap;
    size_t *step0;       /* per step: its pieces, [step0[i], step0[i + 1]) */
    char *buf;           /* per target: a head, then its units' CRCs */
    size_t len;
    size_t *head;        /* per program target: its head's offset in buf */
    uint32_t *nunits;
    uint64_t *bytes;     /* per program target: of its units */
};

/* A unit as the source finds it from the target side. */
struct useg {
    const struct fab_rkey *rk;
    uint64_t lo, hi;     /* its runs span [lo, hi) of the region */
    uint64_t run_len, stride, len;
    uint32_t word, pu;
};

static int useg_cmp(const void *a, const void *b)
{
    const struct useg *x = a, *y = b;

    if (x->rk != y->rk)
        return (uintptr_t)x->rk < (uintptr_t)y->rk ? -1 : 1;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The unit holding byte d of region rk, and where in its stream: the
 * last unit starting at or before d, or, where units interleave (two
 * strided pieces of a tensor), one before it. */
static const struct useg *find_unit(const struct useg *u, size_t n,
                                    const struct fab_rkey *rk, uint64_t d,
                                    uint64_t *uoff)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (u[mid].rk < rk || (u[mid].rk == rk && u[mid].lo <= d))
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i-- > 0 && u[i].rk == rk;) {
        uint64_t k, r;

        if (d >= u[i].hi)
            continue;
        k = u[i].stride ? (d - u[i].lo) / u[i].stride : 0;
        r = d - u[i].lo - k * u[i].stride;
        if (r < u[i].run_len) {
            *uoff = k * u[i].run_len + r;
            return &u[i];
        }
    }
    return NULL;
}

static fx_status_t add_piece(struct eng_checks *c, const char *src,
                             uint64_t off, uint64_t len, const struct useg *u,
                             uint64_t uoff)
{
    struct piece *last = c->npieces ? &c->pieces[c->npieces - 1] : NULL;

    /* Strided runs packed side by side are one stream: one CRC, one
     * shift, however many runs. */
    if (last != NULL && last->word == u->word && last->uend == uoff &&
        (last->src == NULL) == (src == NULL) &&
        (src == NULL ? last->off + last->len == off
                     : last->src + last->len == src)) {
        last->len += len;
        last->uend += len;
        return FX_OK;
    }
    if (c->npieces == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        struct piece *p = realloc(c->pieces, cap * sizeof(*p));

        if (p == NULL)
            return err_set(FX_ERR_NOMEM, "no memory for the checksums' "
                           "pieces");
        c->pieces = p;
        c->cap = cap;
    }
    c->pieces[c->npieces++] = (struct piece){src, off, len, uoff + len,
                                             u->word, u->pu, 0};
    return FX_OK;
}

/* A write's target range [dst, dst + len) of rk, read from src (direct)
 * or the bucket at off, cut along the units it falls in. */
static fx_status_t map_range(struct eng_checks *c, const struct useg *u,
                             size_t n, int target, const struct fab_rkey *rk,
                             const char *src, uint64_t off, uint64_t dst,
                             uint64_t len)
{
    while (len > 0) {
        uint64_t uoff, take;
        const struct useg *g = find_unit(u, n, rk, dst, &uoff);
        fx_status_t st;

        if (g == NULL)
            return err_set(FX_ERR_STATE, "checksums: byte %llu of a region "
                           "of rank %d is written by no segment of the plan",
                           (unsigned long long)dst, target);
        take = g->run_len - uoff % g->run_len;
        take = take < len ? take : len;
        if ((st = add_piece(c, src, off, take, g, uoff)) != FX_OK)
            return st;
        if (src != NULL)
            src += take;
        off += take;
        dst += take;
        len -= take;
    }
    return FX_OK;
}

static fx_status_t map_write(struct eng_checks *c, const struct eng_program *p,
                             const struct eng_write *w, const struct useg *u,
                             size_t n)
{
    struct fab_span one = {w->mr, w->src_off, w->dst_off, w->len};
    const struct fab_span *sp = w->nspans ? &p->spans[w->span0] : &one;
    fx_status_t st;

    for (uint32_t k = 0; k < (w->nspans ? w->nspans : 1); k++) {
        const struct fab_mr *mr = w->nspans ? sp[k].mr : w->mr;

        if (mr != NULL && mr->device)
            return err_set(FX_ERR_UNSUPPORTED, "FABXFER_VERIFY: rank %d's "
                           "writes of GPU memory as it is (the direct path) "
                           "are not checksummed yet; use "
                           "FABXFER_GPU_PATH=staged or FABXFER_VERIFY=off",
                           w->target);
        st = map_range(c, u, n, w->target, w->rk,
                       mr ? (const char *)mr->base + sp[k].src_off : NULL,
                       sp[k].src_off, sp[k].dst_off, sp[k].len);
        if (st != FX_OK)
            return st;
    }
    return FX_OK;
}

/* The units of target t (p->targets[t]), sorted by where they land. */
static fx_status_t units_of(struct eng_checks *c, const struct eng_check_args *a,
                            size_t t, size_t first, size_t end,
                            struct useg **out, size_t *n)
{
    struct useg *u = malloc((end - first ? end - first : 1) * sizeof(*u));

    if (u == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the checksums' units");
    for (size_t i = first; i < end; i++) {
        const struct plan_seg *s = &a->plan->segs[i];
        const struct eng_dst_bind *db = &a->dst[s->dst_piece];
        uint64_t lo = db->off + s->dst_off;

        u[i - first] = (struct useg){
            db->rk, lo, lo + (s->count - 1) * s->dst_stride + s->run_len,
            s->run_len, s->count > 1 ? s->dst_stride : 0,
            s->run_len * s->count,
            (uint32_t)(c->head[t] + sizeof(struct eng_check_head) +
                       (i - first) * sizeof(uint32_t)),
            (uint32_t)(i - first)};
        c->bytes[t] += s->run_len * s->count;
    }
    qsort(u, end - first, sizeof(*u), useg_cmp);
    *out = u;
    *n = end - first;
    return FX_OK;
}

fx_status_t eng_checks_build(const struct eng_check_args *a,
                             struct eng_checks **out)
{
    const struct eng_program *p = a->prog;
    struct eng_checks *c = calloc(1, sizeof(*c));
    struct useg **units = NULL;
    size_t *nu = NULL, first, n, at = 0;
    uint64_t *covered = NULL;
    fx_status_t st = FX_ERR_NOMEM;

    *out = NULL;
    if (c == NULL)
        return err_set(st, "no memory for the checksums");
    c->step0 = calloc(p->nsteps + 1, sizeof(*c->step0));
    c->head = calloc((size_t)p->ntargets + 1, sizeof(*c->head));
    c->nunits = calloc((size_t)p->ntargets + 1, sizeof(*c->nunits));
    c->bytes = calloc((size_t)p->ntargets + 1, sizeof(*c->bytes));
    units = calloc((size_t)p->ntargets + 1, sizeof(*units));
    nu = calloc((size_t)p->ntargets + 1, sizeof(*nu));
    if (c->step0 == NULL || c->head == NULL || c->nunits == NULL ||
        c->bytes == NULL || units == NULL || nu == NULL) {
        err_set(st, "no memory for the checksums");
        goto out;
    }
    /* A target's units are its segments from this source, in plan order:
     * the order the target finds them in too. */
    plan_source_segs(a->plan, a->source, &first, &n);
    for (size_t i = first, end; i < first + n; i = end) {
        size_t t = eng_target_index(p, a->plan->segs[i].target);

        for (end = i; end < first + n &&
                      a->plan->segs[end].target == a->plan->segs[i].target;
             end++)
            ;
        c->head[t] = at;
        c->nunits[t] = (uint32_t)(end - i);
        at += sizeof(struct eng_check_head) + (end - i) * sizeof(uint32_t);
        at = (at + 7) & ~(size_t)7;
        if (at > UINT32_MAX) {
            st = err_set(FX_ERR_INVALID, "checksums: more than 2^30 "
                         "segments to check");
            goto out;
        }
        if ((st = units_of(c, a, t, i, end, &units[t], &nu[t])) != FX_OK)
            goto out;
    }
    c->len = at;
    if (posix_memalign((void **)&c->buf, 64, at ? at : 64) != 0) {
        st = err_set(FX_ERR_NOMEM, "no memory for %zu bytes of checksums",
                     at);
        goto out;
    }
    memset(c->buf, 0, at ? at : 64);
    for (size_t i = 0; i < p->nsteps; i++) {
        const struct eng_step *s = &p->steps[i];

        c->step0[i] = c->npieces;
        for (size_t w = s->write0; w < s->write0 + s->nwrites; w++) {
            size_t t = eng_target_index(p, p->writes[w].target);

            if (s->kind == STEP_BUCKET && p->device_buckets) {
                st = err_set(FX_ERR_UNSUPPORTED, "FABXFER_VERIFY: buckets "
                             "kept on the GPU are not checksummed yet; use "
                             "FABXFER_GPU_PATH=staged or FABXFER_VERIFY=off");
                goto out;
            }
            if ((st = map_write(c, p, &p->writes[w], units[t], nu[t])) !=
                FX_OK)
                goto out;
        }
    }
    c->step0[p->nsteps] = c->npieces;
    /* Each unit's pieces must cover it exactly once: a checksum that
     * missed bytes would pass a version it never looked at. */
    if ((covered = calloc(at / sizeof(uint32_t) + 1, sizeof(*covered))) ==
        NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory for the checksums");
        goto out;
    }
    for (size_t i = 0; i < c->npieces; i++) {
        struct piece *pc = &c->pieces[i];

        covered[pc->word / sizeof(uint32_t)] += pc->len;
    }
    for (int t = 0; t < p->ntargets; t++)
        for (size_t k = 0; k < nu[t]; k++) {
            const struct useg *g = &units[t][k];

            if (covered[g->word / sizeof(uint32_t)] != g->len) {
                st = err_set(FX_ERR_STATE, "checksums: the writes to rank "
                             "%d cover %llu bytes of its segment %u, which "
                             "has %llu", p->targets[t],
                             (unsigned long long)covered[g->word / 4], g->pu,
                             (unsigned long long)g->len);
                goto out;
            }
            /* the unit's length, for the shifts below */
            covered[g->word / sizeof(uint32_t)] = g->len;
        }
    for (size_t i = 0; i < c->npieces; i++) {
        struct piece *pc = &c->pieces[i];

        pc->factor = crc32c_shift_factor(covered[pc->word / 4] - pc->uend);
    }
    st = FX_OK;
    *out = c;
    c = NULL;
out:
    for (int t = 0; units != NULL && t < p->ntargets; t++)
        free(units[t]);
    free(units);
    free(nu);
    free(covered);
    eng_checks_free(c);
    return st;
}

void eng_checks_free(struct eng_checks *c)
{
    if (c == NULL)
        return;
    free(c->pieces);
    free(c->step0);
    free(c->buf);
    free(c->head);
    free(c->nunits);
    free(c->bytes);
    free(c);
}

void *eng_checks_buf(const struct eng_checks *c, size_t *len)
{
    *len = c->len ? c->len : 64;
    return c->buf;
}

void eng_checks_target(const struct eng_checks *c, int t, size_t *off,
                       size_t *len)
{
    *off = c->head[t];
    *len = sizeof(struct eng_check_head) + c->nunits[t] * sizeof(uint32_t);
}

void eng_checks_begin(struct eng_checks *c, int ntargets, uint64_t version,
                      const struct eng_verify *v)
{
    for (int t = 0; t < ntargets; t++) {
        struct eng_check_head h = {version, c->nunits[t], CHECK_MAGIC,
                                   (uint32_t)v->mode, v->every};

        memcpy(c->buf + c->head[t], &h, sizeof(h));
        memset(c->buf + c->head[t] + sizeof(h), 0,
               c->nunits[t] * sizeof(uint32_t));
    }
}

uint64_t eng_checks_step(struct eng_checks *c, size_t step, const char *bucket,
                         uint64_t version, const struct eng_verify *v)
{
    uint64_t bytes = 0;

    for (size_t i = c->step0[step]; i < c->step0[step + 1]; i++) {
        const struct piece *pc = &c->pieces[i];
        uint32_t crc;

        if (!eng_verify_due(v, pc->pu, version))
            continue;
        crc = crc32c(0, pc->src ? pc->src : bucket + pc->off, pc->len);
        crc = crc32c_mul(pc->factor, crc);
        atomic_fetch_xor_explicit((_Atomic uint32_t *)(void *)(c->buf +
                                                               pc->word),
                                  crc, memory_order_relaxed);
        bytes += pc->len;
    }
    return bytes;
}

/* ---- the target ------------------------------------------------------ */

fx_status_t eng_check_units(const struct eng_check_target *a, int i,
                            uint64_t version, uint64_t *bytes,
                            uint32_t *nchecked)
{
    const struct eng_check_head *h =
        (const void *)((const char *)a->area + a->area_off[i]);
    const uint32_t *want = (const uint32_t *)(h + 1);
    size_t first = a->unit0[i], n = a->unit0[i + 1] - first;
    char ebuf[ERR_ESC_MAX];

    /* Read once the version is in: the source wrote the area before it
     * notified, and writes nothing more until this rank releases. */
    if (h->version != version || h->magic != CHECK_MAGIC || h->nunits != n ||
        h->mode != (uint32_t)a->verify.mode || h->every != a->verify.every)
        return err_set(FX_ERR_VERIFY, "version %llu from rank %d came "
                       "without its checksums (the area holds version "
                       "%llu, %u of %zu units, mode %u every %u): a write "
                       "went astray, or the ranks' FABXFER_VERIFY differ",
                       (unsigned long long)version, a->sources[i],
                       (unsigned long long)h->version, h->nunits, n,
                       h->mode, h->every);
    if (n > 0)
        fault_point(FAULT_LANDED, (void *)a->units[first].at,
                    a->units[first].run_len);
    for (size_t k = 0; k < n; k++) {
        const struct eng_check_unit *u = &a->units[first + k];
        uint32_t crc = 0;

        if (!eng_verify_due(&a->verify, (uint32_t)k, version))
            continue;
        for (uint64_t r = 0; r < u->count; r++)
            crc = crc32c(crc, u->at + r * u->stride, u->run_len);
        *bytes += u->run_len * u->count;
        ++*nchecked;
        if (crc != want[k])
            return err_set(FX_ERR_VERIFY, "version %llu from rank %d: "
                           "tensor \"%s\", bytes [%llu, %llu) of rank %d's "
                           "piece, do not match the source's checksum "
                           "(CRC32C 0x%08x, sent 0x%08x)",
                           (unsigned long long)version, a->sources[i],
                           err_esc(ebuf, a->m->tensors[u->tensor].name),
                           (unsigned long long)u->piece_off,
                           (unsigned long long)(u->piece_off +
                                                (u->count - 1) * u->stride +
                                                u->run_len),
                           a->me, crc, want[k]);
    }
    return FX_OK;
}
