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
 * thread at once, in any order. This file is the source's side; the
 * target's is checker.c.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "mem/mem.h"
#include "util/crc32c.h"
#include "util/error.h"

struct piece {
    const char *src;     /* direct: the source's bytes; NULL: in a bucket */
    uint64_t off, len;   /* bucket: offset in it */
    int dev;             /* in GPU memory: summed by the GPU (mem_crc) */
    uint64_t uend;       /* build only: where it ends in its unit */
    uint32_t word;       /* its unit's CRC: byte offset in buf */
    uint32_t pu;         /* its unit's number in the pair */
    uint32_t key;        /* its unit's sampling group (eng_verify_shift) */
    uint32_t factor;     /* x^(8 x the unit's bytes after it) */
};

/* A program target's part of buf. */
struct check_target {
    size_t head;         /* its head's offset in buf */
    uint32_t nunits;
    uint64_t bytes;      /* of its units */
};

struct eng_checks {
    struct piece *pieces;
    size_t npieces, cap;
    size_t *step0;       /* per step: its pieces, [step0[i], step0[i + 1]) */
    size_t step_now;  /* build only: the step being mapped */
    char *buf;           /* per target: a head, then its units' CRCs */
    size_t len;
    struct eng_check_point *points; /* by step */
    size_t npoints;
    size_t ndev;         /* pieces in GPU memory */
    struct check_target tg[]; /* by program target, sized with the rest */
};

/* A unit as the source finds it from the target side. */
struct useg {
    const struct fab_rkey *rk;
    uint64_t lo, hi;     /* its runs span [lo, hi) of the region */
    uint64_t run_len, stride, len;
    uint32_t word, pu, key;
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
                             int dev, uint64_t off, uint64_t len,
                             const struct useg *u, uint64_t uoff)
{
    /* the step's own last piece: one of an earlier step is summed before
     * this step's bytes are written, and a check point there would claim
     * them */
    struct piece *last = c->npieces > c->step0[c->step_now]
                             ? &c->pieces[c->npieces - 1] : NULL;

    /* Strided runs packed side by side are one stream: one CRC, one
     * shift, however many runs. */
    if (last != NULL && last->word == u->word && last->uend == uoff &&
        (last->src == NULL) == (src == NULL) && last->dev == dev &&
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
    c->pieces[c->npieces++] = (struct piece){src, off, len, dev, uoff + len,
                                             u->word, u->pu, u->key, 0};
    c->ndev += dev != 0;
    return FX_OK;
}

/* A write's target range [dst, dst + len) of rk, read from src (direct)
 * or the bucket at off, cut along the units it falls in. */
static fx_status_t map_range(struct eng_checks *c, const struct useg *u,
                             size_t n, int target, const struct fab_rkey *rk,
                             const char *src, int dev, uint64_t off,
                             uint64_t dst, uint64_t len)
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
        if ((st = add_piece(c, src, dev, off, take, g, uoff)) != FX_OK)
            return st;
        if (src != NULL)
            src += take;
        off += take;
        dst += take;
        len -= take;
    }
    return FX_OK;
}

/* dev: a bucket packed on the GPU; a direct write's own memory says. */
static fx_status_t map_write(struct eng_checks *c, const struct eng_program *p,
                             const struct eng_write *w, int dev,
                             const struct useg *u, size_t n)
{
    struct fab_span one = {w->mr, w->src_off, w->dst_off, w->len};
    const struct fab_span *sp = w->nspans ? &p->spans[w->span0] : &one;
    fx_status_t st;

    for (uint32_t k = 0; k < (w->nspans ? w->nspans : 1); k++) {
        const struct fab_mr *mr = w->nspans ? sp[k].mr : w->mr;

        st = map_range(c, u, n, w->target, w->rk,
                       mr ? (const char *)mr->base + sp[k].src_off : NULL,
                       mr ? mr->device : dev, sp[k].src_off, sp[k].dst_off,
                       sp[k].len);
        if (st != FX_OK)
            return st;
    }
    return FX_OK;
}

/* The units of target t (p->targets[t]), sorted by where they land. */
static fx_status_t units_of(struct eng_checks *c,
                            const struct eng_check_args *a, size_t t,
                            size_t first, size_t end, struct useg **out,
                            size_t *n)
{
    struct useg *u = malloc((end - first ? end - first : 1) * sizeof(*u));
    unsigned shift;

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
            (uint32_t)(c->tg[t].head + sizeof(struct eng_check_head) +
                       (i - first) * sizeof(uint32_t)),
            (uint32_t)(i - first), 0};
        c->tg[t].bytes += s->run_len * s->count;
    }
    shift = eng_verify_shift(end - first, c->tg[t].bytes);
    for (size_t i = 0; i < end - first; i++)
        u[i].key = u[i].pu >> shift;
    qsort(u, end - first, sizeof(*u), useg_cmp);
    *out = u;
    *n = end - first;
    return FX_OK;
}

static int point_cmp(const void *a, const void *b)
{
    const struct eng_check_point *x = a, *y = b;

    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return x->t - y->t;
}

/* Target t's units [0, P) are all posted after the latest step of any of
 * their pieces: a point where that prefix has grown by an
 * ENG_CHECK_POINTS-th of t's bytes since the last (the rest is checked
 * when the version's notification comes). */
static fx_status_t add_points(struct eng_checks *c,
                              const struct eng_check_args *a)
{
    const struct eng_program *p = a->prog;
    size_t cap = (size_t)p->ntargets * ENG_CHECK_POINTS + 1, first, n;
    size_t *done; /* by CRC word: the step after which its unit is posted */

    c->points = malloc(cap * sizeof(*c->points));
    done = calloc(c->len / sizeof(uint32_t) + 1, sizeof(*done));
    if (c->points == NULL || done == NULL) {
        free(done);
        return err_set(FX_ERR_NOMEM, "no memory for the check points");
    }
    for (size_t i = 0; i < p->nsteps; i++)
        for (size_t k = c->step0[i]; k < c->step0[i + 1]; k++)
            done[c->pieces[k].word / sizeof(uint32_t)] = i;
    plan_source_segs(a->plan, a->source, &first, &n);
    for (int t = 0; t < p->ntargets; t++) {
        const struct check_target *tg = &c->tg[t];
        const size_t *d = done + (tg->head + sizeof(struct eng_check_head)) /
                                     sizeof(uint32_t);
        uint64_t every = tg->bytes / ENG_CHECK_POINTS + 1, since = 0;
        size_t seg0 = first, last_step = 0, lo = 0, made = 0;

        if (!a->marks_to[p->targets[t]] || tg->nunits < 2)
            continue;
        while (a->plan->segs[seg0].target != p->targets[t])
            seg0++;
        for (size_t u = 0; u + 1 < tg->nunits; u++) {
            const struct plan_seg *g = &a->plan->segs[seg0 + u];

            last_step = d[u] > last_step ? d[u] : last_step;
            since += g->run_len * g->count;
            /* not the last unit: the notification covers that one; nor
             * before a next unit done by the same step */
            if (since < every || made + 1 >= ENG_CHECK_POINTS ||
                d[u + 1] <= last_step)
                continue;
            c->points[c->npoints++] = (struct eng_check_point){
                last_step, t, (uint32_t)lo, (uint32_t)(u + 1)};
            lo = u + 1;
            since = 0;
            made++;
        }
    }
    free(done);
    qsort(c->points, c->npoints, sizeof(*c->points), point_cmp);
    return FX_OK;
}

size_t eng_checks_points(const struct eng_checks *c,
                         const struct eng_check_point **out)
{
    *out = c->points;
    return c->npoints;
}

/* A piece by where it lies: its unit, then its first byte. */
struct span_of {
    uint32_t word, pu;
    uint64_t lo, hi;
};

static int span_cmp(const void *a, const void *b)
{
    const struct span_of *x = a, *y = b;

    if (x->word != y->word)
        return x->word < y->word ? -1 : 1;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* With each unit's bytes added up, no two of its pieces may overlap: a
 * write that landed on bytes of another and one that never came would
 * add up all the same, and the checksum would then pass a version whose
 * bytes it never read. */
static fx_status_t check_once(const struct eng_checks *c,
                              const struct eng_program *p)
{
    struct span_of *sp = malloc((c->npieces ? c->npieces : 1) * sizeof(*sp));
    fx_status_t st = FX_OK;

    if (sp == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the checksums");
    for (size_t i = 0; i < c->npieces; i++) {
        const struct piece *pc = &c->pieces[i];

        sp[i] = (struct span_of){pc->word, pc->pu, pc->uend - pc->len,
                                 pc->uend};
    }
    qsort(sp, c->npieces, sizeof(*sp), span_cmp);
    for (size_t i = 1; i < c->npieces && st == FX_OK; i++) {
        int t = 0;

        if (sp[i].word != sp[i - 1].word || sp[i].lo >= sp[i - 1].hi)
            continue;
        while (t + 1 < p->ntargets && c->tg[t + 1].head <= sp[i].word)
            t++;
        st = err_set(FX_ERR_STATE, "checksums: the writes to rank %d cover "
                     "bytes [%llu, %llu) of its segment %u twice (and so "
                     "others of it never)", p->targets[t],
                     (unsigned long long)sp[i].lo,
                     (unsigned long long)(sp[i].hi < sp[i - 1].hi
                                              ? sp[i].hi : sp[i - 1].hi),
                     sp[i].pu);
    }
    free(sp);
    return st;
}

fx_status_t eng_checks_build(const struct eng_check_args *a,
                             struct eng_checks **out)
{
    const struct eng_program *p = a->prog;
    struct eng_checks *c = calloc(1, sizeof(*c) + ((size_t)p->ntargets + 1) *
                                                   sizeof(c->tg[0]));
    struct useg **units = NULL;
    size_t *nu = NULL, first, n, at = 0;
    uint64_t *covered = NULL;
    fx_status_t st = FX_ERR_NOMEM;

    *out = NULL;
    if (c == NULL)
        return err_set(st, "no memory for the checksums");
    c->step0 = calloc(p->nsteps + 1, sizeof(*c->step0));
    units = calloc((size_t)p->ntargets + 1, sizeof(*units));
    nu = calloc((size_t)p->ntargets + 1, sizeof(*nu));
    if (c->step0 == NULL || units == NULL || nu == NULL) {
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
        c->tg[t].head = at;
        c->tg[t].nunits = (uint32_t)(end - i);
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
        c->step_now = i;
        for (size_t w = s->write0; w < s->write0 + s->nwrites; w++) {
            size_t t = eng_target_index(p, p->writes[w].target);

            /* a GPU bucket, staged or not, is summed in its device
             * slot (pipeline.c's open_gpu_checks) */
            st = map_write(c, p, &p->writes[w],
                           s->kind == STEP_BUCKET &&
                               (p->device_buckets || s->device >= 0),
                           units[t], nu[t]);
            if (st != FX_OK)
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
    if ((st = check_once(c, p)) != FX_OK)
        goto out;
    for (size_t i = 0; i < c->npieces; i++) {
        struct piece *pc = &c->pieces[i];

        pc->factor = crc32c_shift_factor(covered[pc->word / 4] - pc->uend);
    }
    /* No check points where the GPU sums: its CRCs are in at the end. */
    if (a->marks_to != NULL && c->ndev == 0 &&
        (st = add_points(c, a)) != FX_OK)
        goto out;
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
    free(c->points);
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
    *off = c->tg[t].head;
    *len = sizeof(struct eng_check_head) +
           c->tg[t].nunits * sizeof(uint32_t);
}

void eng_checks_begin(struct eng_checks *c, int ntargets, uint64_t version,
                      const struct eng_verify *v)
{
    for (int t = 0; t < ntargets; t++) {
        struct eng_check_head h = {version, c->tg[t].nunits, ENG_CHECK_MAGIC,
                                   (uint32_t)v->mode, eng_verify_every(v)};

        memcpy(c->buf + c->tg[t].head, &h, sizeof(h));
        memset(c->buf + c->tg[t].head + sizeof(h), 0,
               c->tg[t].nunits * sizeof(uint32_t));
    }
}

uint64_t eng_checks_step(struct eng_checks *c, size_t step, const char *bucket,
                         struct eng_fill *fill, uint64_t version,
                         const struct eng_verify *v)
{
    uint64_t bytes = 0;
    uint32_t phase = eng_verify_phase(v, version);

    for (size_t i = c->step0[step]; i < c->step0[step + 1]; i++) {
        const struct piece *pc = &c->pieces[i];
        const char *p = pc->src ? pc->src : bucket + pc->off;
        uint32_t crc = 0;

        if (pc->dev || !eng_verify_due_at(v, pc->key, phase))
            continue;
        for (uint64_t at = 0, n; at < pc->len; at += n) {
            n = pc->len - at;
            if (fill != NULL && pc->src == NULL) {
                n = n < ENG_FILL_CHUNK ? n : ENG_FILL_CHUNK;
                fill->to(fill, pc->off + at + n);
            }
            /* a bucket's bytes were just packed; a tensor's come from
             * memory */
            crc = pc->src != NULL ? crc32c_cold(crc, p + at, n)
                                  : crc32c(crc, p + at, n);
        }
        crc = crc32c_mul(pc->factor, crc);
        atomic_fetch_xor_explicit((_Atomic uint32_t *)(void *)(c->buf +
                                                               pc->word),
                                  crc, memory_order_relaxed);
        bytes += pc->len;
    }
    if (fill != NULL)
        fill->to(fill, UINT64_MAX);
    return bytes;
}

/* What the GPU sums, as mem's ranges: group 0 the direct writes' pieces
 * (read from the tensors), group k + 1 bucket k's (from base[k], its
 * device slot). */
fx_status_t eng_checks_device(const struct eng_checks *c,
                              const struct eng_program *p,
                              const uint64_t *base,
                              struct mem_crc_range **out, size_t **group0)
{
    uint32_t ng = p->nbuckets + 1;
    struct mem_crc_range *r = calloc(c->ndev + 1, sizeof(*r));
    size_t *g0 = calloc((size_t)ng + 1, sizeof(*g0)), *at = NULL;

    *out = NULL;
    *group0 = NULL;
    if (r == NULL || g0 == NULL ||
        (at = calloc((size_t)ng + 1, sizeof(*at))) == NULL) {
        free(r);
        free(g0);
        return err_set(FX_ERR_NOMEM, "no memory for %zu GPU checksums",
                       c->ndev);
    }
    /* counted by group, then placed */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < p->nsteps; i++) {
            const struct eng_step *st = &p->steps[i];
            uint32_t g = st->kind == STEP_BUCKET ? st->bucket + 1 : 0;

            for (size_t k = c->step0[i]; k < c->step0[i + 1]; k++) {
                const struct piece *pc = &c->pieces[k];

                if (!pc->dev)
                    continue;
                if (pass == 0) {
                    g0[g + 1]++;
                    continue;
                }
                r[at[g]++] = (struct mem_crc_range){
                    pc->src ? (uint64_t)(uintptr_t)pc->src
                            : base[st->bucket] + pc->off,
                    pc->len, pc->word / (uint32_t)sizeof(uint32_t),
                    pc->factor, pc->key, 0};
            }
            if (pass == 0 && i + 1 == p->nsteps)
                for (uint32_t k = 0; k < ng; k++) {
                    g0[k + 1] += g0[k];
                    at[k] = g0[k];
                }
        }
    free(at);
    *out = r;
    *group0 = g0;
    return FX_OK;
}

size_t eng_checks_ndev(const struct eng_checks *c)
{
    return c->ndev;
}

uint64_t eng_checks_fold(struct eng_checks *c, const uint32_t *words,
                         uint64_t version, const struct eng_verify *v)
{
    uint32_t *w = (uint32_t *)(void *)c->buf;
    uint32_t phase = eng_verify_phase(v, version);
    uint64_t bytes = 0;

    for (size_t i = 0; i < c->len / sizeof(uint32_t); i++)
        w[i] ^= words[i];
    for (size_t i = 0; i < c->npieces; i++)
        if (c->pieces[i].dev && eng_verify_due_at(v, c->pieces[i].key, phase))
            bytes += c->pieces[i].len;
    return bytes;
}
