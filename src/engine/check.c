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
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "mem/mem.h"
#include "util/crc32c.h"
#include "util/error.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/thread.h"

#define CHECK_MAGIC 0x4b434846u /* "FHCK" */

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
static fx_status_t units_of(struct eng_checks *c, const struct eng_check_args *a,
                            size_t t, size_t first, size_t end,
                            struct useg **out, size_t *n)
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
        struct eng_check_head h = {version, c->tg[t].nunits, CHECK_MAGIC,
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

/* ---- the target ------------------------------------------------------ */

/* A run of a source's units, checked by one thread: [lo, hi) of them;
 * the first that differs, if any, in bad. */
struct share {
    const struct eng_check_target *a;
    int i;
    size_t lo, hi, bad;
    uint64_t version, bytes;
    uint32_t checked, got;
    pthread_t thread;
    const uint32_t *want;     /* source i's CRCs, as sent */
    struct eng_verify v;      /* which units source i summed */
    unsigned shift;           /* its pair's groups (eng_verify_shift) */
};

/* The rule a source's sums of a version took: its every (its head's, or
 * its check points'), under the target's mode. */
static struct eng_verify verify_with(const struct eng_check_target *a,
                                     uint32_t every)
{
    return (struct eng_verify){a->verify.mode, every};
}

/* A source sums the units due by the ranks' every, or, under sample,
 * all of them (its first version: pipeline.c). */
static int every_ok(const struct eng_check_target *a, uint32_t every)
{
    return every == eng_verify_every(&a->verify) ||
           (a->verify.mode == ENG_VERIFY_SAMPLE && every == 0);
}

static const uint32_t *wanted(const struct eng_check_target *a, int i)
{
    return (const uint32_t *)(const void *)((const char *)a->area +
                                            a->area_off[a->sources[i]] +
                                            sizeof(struct eng_check_head));
}

static void *check_share(void *arg)
{
    struct share *w = arg;
    const struct eng_check_unit *units = &w->a->units[w->a->unit0[w->i]];
    const uint32_t *want = w->want;
    uint32_t phase = eng_verify_phase(&w->v, w->version);

    if (w->lo == 0 && w->hi > 0 && units[0].device < 0)
        fault_point(FAULT_LANDED, (void *)units[0].at, units[0].run_len);
    for (size_t k = eng_verify_first(&w->v, w->shift, phase, w->lo);
         k < w->hi; k = eng_verify_first(&w->v, w->shift, phase, k + 1)) {
        const struct eng_check_unit *u = &units[k];
        uint32_t crc = 0;

        if (u->device >= 0)
            continue;
        /* what landed is in memory by now, not in this core's cache */
        for (uint64_t r = 0; r < u->count; r++)
            crc = crc32c_cold(crc, u->at + r * u->stride, u->run_len);
        w->bytes += u->run_len * u->count;
        w->checked++;
        if (crc != want[k]) {
            w->bad = k;
            w->got = crc;
            break;
        }
    }
    return NULL;
}

/* Big ranges are checked by several threads, each a run of units of
 * about equal bytes: once the version is in, the cores that moved it
 * have nothing else to do, and one core reads at a third of what a
 * host's memory gives. sh[0..return) are the runs, checked. */
#define SHARE_MIN (16u << 20) /* bytes: a thread's least */

static int check_parallel(const struct eng_check_target *a, int i, size_t lo,
                          size_t hi, uint64_t version,
                          const struct eng_verify *v, unsigned shift,
                          struct share sh[ENG_CHECK_THREADS])
{
    const struct eng_check_unit *units = &a->units[a->unit0[i]];
    uint32_t phase = eng_verify_phase(v, version);
    uint64_t total = 0, done = 0;
    size_t k = lo;
    int nsh, started = 0;

    for (size_t u = eng_verify_first(v, shift, phase, lo); u < hi;
         u = eng_verify_first(v, shift, phase, u + 1))
        if (units[u].device < 0)
            total += units[u].run_len * units[u].count;
    nsh = (int)(total / SHARE_MIN) + 1;
    nsh = nsh < a->threads ? nsh : a->threads;
    nsh = nsh < ENG_CHECK_THREADS ? nsh : ENG_CHECK_THREADS;
    nsh = nsh > 0 ? nsh : 1;
    for (int t = 0; t < nsh; t++) {
        uint64_t goal = total * (uint64_t)(t + 1) / (uint64_t)nsh;

        sh[t] = (struct share){.a = a, .i = i, .lo = k, .hi = k,
                               .bad = SIZE_MAX, .version = version,
                               .want = wanted(a, i), .v = *v,
                               .shift = shift};
        while (k < hi && (done < goal || t == nsh - 1)) {
            if ((k = eng_verify_first(v, shift, phase, k)) >= hi)
                break;
            if (units[k].device < 0)
                done += units[k].run_len * units[k].count;
            k++;
        }
        sh[t].hi = k < hi ? k : hi;
    }
    /* the others in threads, the first here; a thread that cannot start
     * leaves its run to this one */
    for (int t = 1; t < nsh; t++, started++)
        if (pthread_create(&sh[t].thread, NULL, check_share, &sh[t]) != 0)
            break;
    check_share(&sh[0]);
    for (int t = started + 1; t < nsh; t++)
        check_share(&sh[t]);
    for (int t = 1; t <= started; t++)
        pthread_join(sh[t].thread, NULL);
    return nsh;
}

/* The target's checker: threads take the runs of units that check
 * points announce while the version is still arriving (the thread that
 * waits is busy landing it); the rest is checked at the end. One thread
 * per 4 CPUs, up to CHECKERS_MAX: a version lands over shm at 13 GB/s
 * on the H100 machine's host, about what one thread reads, and there one
 * left 10-12 ms of a Qwen3-0.6B version's checks to its end
 * (bench/results/verify/h100-d.txt). */
#define CHECKERS_MAX 3
struct job {
    int i;
    uint32_t every;
    size_t lo, hi;
};

/* A source's state in this version. */
struct check_source {
    size_t covered;           /* units [0, covered) queued */
    size_t bad;               /* the first that differs */
    uint32_t got;
    uint32_t every;           /* its sums': NO_EVERY until a point or head */
};
#define NO_EVERY UINT32_MAX

struct eng_checker {
    const struct eng_check_target *a;
    int nsources;
    pthread_t threads[CHECKERS_MAX];
    int started;              /* threads */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job *q;            /* this version's points, in order */
    size_t qcap, qhead, qtail; /* [qhead, qtail): runs not begun */
    int busy, quit;           /* busy: runs under way */
    uint64_t version;
    struct check_source *src; /* by source */
    unsigned *shift;          /* by source: its pair's (eng_verify_shift) */
    uint64_t bytes;
    uint32_t checked;
    struct mem_crc *crc;      /* the units in GPU memory, summed there */
    /* the CRCs a point announced, taken as it comes: the source's last
     * write of the area rewrites them while the thread reads */
    uint32_t *sent;
    const struct eng_check_unit *dev0; /* the first of them */
};

/* Under mu: what a run found. */
static void took(struct eng_checker *c, const struct share *w)
{
    c->bytes += w->bytes;
    c->checked += w->checked;
    if (w->bad != SIZE_MAX && w->bad < c->src[w->i].bad) {
        c->src[w->i].bad = w->bad;
        c->src[w->i].got = w->got;
    }
}

static void *checker_main(void *arg)
{
    struct eng_checker *c = arg;

    pthread_mutex_lock(&c->mu);
    for (;;) {
        struct share w;

        while (!c->quit && c->qhead == c->qtail)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->quit)
            break;
        w = (struct share){.a = c->a, .i = c->q[c->qhead].i,
                           .lo = c->q[c->qhead].lo, .hi = c->q[c->qhead].hi,
                           .bad = SIZE_MAX, .version = c->version,
                           .want = c->sent + c->a->unit0[c->q[c->qhead].i],
                           .v = verify_with(c->a, c->q[c->qhead].every),
                           .shift = c->shift[c->q[c->qhead].i]};
        c->qhead++;
        c->busy++;
        pthread_mutex_unlock(&c->mu);
        check_share(&w);
        pthread_mutex_lock(&c->mu);
        took(c, &w);
        c->busy--;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* The units in GPU memory: a range per run, each shifted by the runs
 * after it in its unit, all summed into the unit's word (its number among
 * every source's units). */
static fx_status_t open_gpu(struct eng_checker *c)
{
    const struct eng_check_target *a = c->a;
    size_t nu = a->unit0[c->nsources], n = 0, g0[2];
    struct mem_crc_range *r;
    int device = -1;
    fx_status_t st;

    for (size_t k = 0; k < nu; k++) {
        const struct eng_check_unit *x = &a->units[k];

        if (x->device < 0)
            continue;
        if (device >= 0 && x->device != device)
            return err_set(FX_ERR_UNSUPPORTED, "FABXFER_VERIFY: rank %d "
                           "receives into CUDA devices %d and %d, and checks "
                           "on one device per rank", a->me, device,
                           x->device);
        if (c->dev0 == NULL)
            c->dev0 = x;
        device = x->device;
        n += x->count;
    }
    if (n == 0)
        return FX_OK;
    if ((r = calloc(n, sizeof(*r))) == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %zu GPU checksums", n);
    n = 0;
    for (int i = 0; i < c->nsources; i++)
        for (size_t k = a->unit0[i]; k < a->unit0[i + 1]; k++) {
            const struct eng_check_unit *x = &a->units[k];
            uint32_t f = crc32c_shift_factor(0), run = 0;

            if (x->device < 0)
                continue;
            run = crc32c_shift_factor(x->run_len);
            for (uint64_t j = x->count; j-- > 0; f = crc32c_mul(f, run))
                r[n + j] = (struct mem_crc_range){
                    (uint64_t)(uintptr_t)(x->at + j * x->stride), x->run_len,
                    (uint32_t)k, f,
                    (uint32_t)(k - a->unit0[i]) >> c->shift[i], 0};
            n += x->count;
        }
    g0[0] = 0;
    g0[1] = n;
    st = mem_crc_open(device, r, g0, 1, (uint32_t)nu, a->timeout_ms, &c->crc);
    free(r);
    return st;
}

/* The GPU's sums of the units in its memory against the sources'. */
static fx_status_t gpu_compare(struct eng_checker *c, uint64_t version,
                               const uint8_t *bad)
{
    const struct eng_check_target *a = c->a;
    const uint32_t *words;
    fx_status_t st = mem_crc_wait(c->crc, &words);

    for (int i = 0; st == FX_OK && i < c->nsources; i++) {
        const uint32_t *want = wanted(a, i);
        size_t n = a->unit0[i + 1] - a->unit0[i];
        struct eng_verify v = verify_with(a, c->src[i].every);
        uint32_t phase = eng_verify_phase(&v, version);

        for (size_t u = eng_verify_first(&v, c->shift[i], phase, 0);
             !bad[i] && u < n;
             u = eng_verify_first(&v, c->shift[i], phase, u + 1)) {
            size_t k = a->unit0[i] + u;
            const struct eng_check_unit *x = &a->units[k];

            if (x->device < 0)
                continue;
            c->bytes += x->run_len * x->count;
            c->checked++;
            if (words[k] != want[u]) {
                if (u < c->src[i].bad) {
                    c->src[i].bad = u;
                    c->src[i].got = words[k];
                }
                break;
            }
        }
    }
    return st;
}

fx_status_t eng_checker_open(const struct eng_check_target *a, int nsources,
                             struct eng_checker **out)
{
    fx_status_t st;

    struct eng_checker *c = calloc(1, sizeof(*c));

    *out = NULL;
    if (c == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the checker");
    c->a = a;
    c->nsources = nsources;
    c->qcap = (size_t)nsources * ENG_CHECK_POINTS + 1;
    c->q = calloc(c->qcap, sizeof(*c->q));
    c->src = calloc((size_t)nsources + 1, sizeof(*c->src));
    c->sent = calloc(a->unit0[nsources] + 1, sizeof(*c->sent));
    c->shift = calloc((size_t)nsources + 1, sizeof(*c->shift));
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (c->q == NULL || c->src == NULL || c->sent == NULL ||
        c->shift == NULL) {
        eng_checker_close(c);
        return err_set(FX_ERR_NOMEM, "no memory for the checker");
    }
    for (int i = 0; i < nsources; i++) {
        uint64_t bytes = 0;

        for (size_t k = a->unit0[i]; k < a->unit0[i + 1]; k++)
            bytes += a->units[k].run_len * a->units[k].count;
        c->shift[i] = eng_verify_shift(a->unit0[i + 1] - a->unit0[i], bytes);
    }
    if ((st = open_gpu(c)) != FX_OK) {
        eng_checker_close(c);
        return st;
    }
    /* Without a thread every unit is checked at the end: so too where
     * the process has few cores, which the waiting thread, the sources
     * and their CRCs keep busy (on 2 cores, a Qwen3-0.6B version over shm
     * took 0.37 s with the thread against 0.28-0.30 without). */
    for (int n = a->threads >= ENG_CHECKER_CPUS ? a->threads / 4 : 0;
         c->started < n && c->started < CHECKERS_MAX &&
         pthread_create(&c->threads[c->started], NULL, checker_main, c) == 0;
         c->started++)
        ;
    *out = c;
    return FX_OK;
}

void eng_checker_close(struct eng_checker *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    c->quit = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    for (int t = 0; t < c->started; t++)
        pthread_join(c->threads[t], NULL);
    mem_crc_close(c->crc);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c->q);
    free(c->src);
    free(c->sent);
    free(c->shift);
    free(c);
}

void eng_checker_begin(struct eng_checker *c, uint64_t version)
{
    pthread_mutex_lock(&c->mu);
    /* A wait that failed left the threads maybe on runs of its version,
     * and runs queued: those go, the ones under way are waited for. */
    while (c->busy)
        pthread_cond_wait(&c->cv, &c->mu);
    c->version = version;
    c->qhead = c->qtail = 0;
    c->bytes = 0;
    c->checked = 0;
    for (int i = 0; i < c->nsources; i++) {
        c->src[i].covered = 0;
        c->src[i].bad = SIZE_MAX;
        c->src[i].every = NO_EVERY;
    }
    pthread_mutex_unlock(&c->mu);
}

/* Only the next run of a source counts: a point out of order, or beyond
 * its units, leaves them to the end. */
void eng_checker_point(struct eng_checker *c, int i, uint32_t every,
                       uint64_t lo, uint64_t hi)
{
    size_t n = c->a->unit0[i + 1] - c->a->unit0[i];

    if (!c->started || lo != c->src[i].covered || hi <= lo || hi > n ||
        c->qtail == c->qcap || !every_ok(c->a, every) ||
        (c->src[i].every != NO_EVERY && c->src[i].every != every))
        return;
    c->src[i].every = every;
    memcpy(c->sent + c->a->unit0[i] + lo, wanted(c->a, i) + lo,
           (size_t)(hi - lo) * sizeof(uint32_t));
    pthread_mutex_lock(&c->mu);
    c->q[c->qtail++] = (struct job){i, every, (size_t)lo, (size_t)hi};
    c->src[i].covered = (size_t)hi;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

fx_status_t eng_checker_finish(struct eng_checker *c, uint64_t version,
                               uint64_t *bytes, uint32_t *nchecked,
                               uint8_t *bad)
{
    const struct eng_check_target *a = c->a;
    struct share sh[ENG_CHECK_THREADS];
    fx_status_t st = FX_OK, gst = FX_OK;
    uint32_t gpu_every = eng_verify_every(&a->verify);
    char ebuf[ERR_ESC_MAX];
    int first = -1;

    /* The runs points announced that no thread has begun are taken back
     * and checked below on every thread: where a version lands faster
     * than the checkers read, they would wait for them (on the H200's
     * host a Qwen3-0.6B version's target ended 0.1 s after its source).
     * A source's runs are queued and begun in order, so its first run
     * not begun starts where the ones begun end. */
    pthread_mutex_lock(&c->mu);
    for (size_t q = c->qhead; q < c->qtail; q++)
        if (c->q[q].lo < c->src[c->q[q].i].covered)
            c->src[c->q[q].i].covered = c->q[q].lo;
    c->qtail = c->qhead;
    pthread_mutex_unlock(&c->mu);

    for (int i = 0; i < c->nsources; i++) {
        const struct eng_check_head *h =
            (const void *)((const char *)a->area +
                           a->area_off[a->sources[i]]);
        size_t n = a->unit0[i + 1] - a->unit0[i];

        bad[i] = 0;
        /* The head comes with the notification: the source wrote it
         * last, and writes nothing more until this rank releases. */
        if (h->version != version || h->magic != CHECK_MAGIC ||
            h->nunits != n || h->mode != (uint32_t)a->verify.mode ||
            !every_ok(a, h->every)) {
            if (st == FX_OK)
                st = err_set(FX_ERR_VERIFY, "version %llu from rank %d "
                             "came without its checksums (the area holds "
                             "version %llu, %u of %zu units, mode %u every "
                             "%u): a write went astray, or the ranks' "
                             "FABXFER_VERIFY differ",
                             (unsigned long long)version, a->sources[i],
                             (unsigned long long)h->version, h->nunits, n,
                             h->mode, h->every);
            bad[i] = 1;
            continue;
        }
        /* points that said otherwise (none should): their runs again */
        if (c->src[i].every != NO_EVERY && c->src[i].every != h->every)
            c->src[i].covered = 0;
        c->src[i].every = h->every;
        gpu_every = h->every == 0 ? 0 : gpu_every;
    }
    /* The GPU sums its units while the CPUs check theirs. */
    if (c->crc != NULL) {
        fault_point(FAULT_LANDED, (void *)c->dev0->at, c->dev0->run_len);
        gst = mem_crc_begin(c->crc, version, gpu_every);
        if (gst == FX_OK)
            gst = mem_crc_run(c->crc, 0);
    }
    for (int i = 0; i < c->nsources; i++) {
        size_t n = a->unit0[i + 1] - a->unit0[i];
        struct eng_verify v = verify_with(a, c->src[i].every);

        if (bad[i])
            continue;
        /* How far check points took the checker before the end: where
         * few, the version's whole check comes after it landed. */
        if (c->started)
            LOG_DEBUG("rank %d: version %llu from rank %d: %d checker "
                      "threads took %zu of %zu units as they landed, the "
                      "rest are checked now", a->me,
                      (unsigned long long)version, a->sources[i],
                      c->started, c->src[i].covered, n);
        /* the units no point announced, here and on other threads */
        for (int t = 0, nsh = check_parallel(a, i, c->src[i].covered, n,
                                             version, &v, c->shift[i],
                                             sh);
             t < nsh; t++) {
            pthread_mutex_lock(&c->mu);
            took(c, &sh[t]);
            pthread_mutex_unlock(&c->mu);
        }
    }
    pthread_mutex_lock(&c->mu);
    while (c->busy)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    if (c->crc != NULL && gst == FX_OK)
        gst = gpu_compare(c, version, bad);
    if (gst != FX_OK)
        return gst;
    *bytes += c->bytes;
    *nchecked += c->checked;
    for (int i = 0; i < c->nsources; i++)
        if (c->src[i].bad != SIZE_MAX) {
            bad[i] = 1;
            first = first < 0 ? i : first;
        }
    if (st != FX_OK || first < 0)
        return st;
    {
        const struct eng_check_unit *u =
            &a->units[a->unit0[first] + c->src[first].bad];

        return err_set(FX_ERR_VERIFY, "version %llu from rank %d: "
                       "tensor \"%s\", bytes [%llu, %llu) of rank %d's "
                       "piece, do not match the source's checksum "
                       "(CRC32C 0x%08x, sent 0x%08x)",
                       (unsigned long long)version, a->sources[first],
                       err_esc(ebuf, a->m->tensors[u->tensor].name),
                       (unsigned long long)u->piece_off,
                       (unsigned long long)(u->piece_off +
                                            (u->count - 1) * u->stride +
                                            u->run_len),
                       a->me, c->src[first].got,
                       wanted(a, first)[c->src[first].bad]);
    }
}
