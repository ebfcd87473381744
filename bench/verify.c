/*
 * The pattern fabxfer-bench sync's sources write and its targets check:
 * byte g of tensor t at a version's seed, so that any rank can tell what
 * any byte must be without holding the source. Views are checked against
 * the tensors they join, FP8 weights and their block scales against this
 * file's own conversion of the pattern (the element functions of
 * src/util/convert.h, as the packer's).
 */
#define _GNU_SOURCE
#include <endian.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "util/convert.h"

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t pattern_base(uint64_t seed, uint32_t tensor)
{
    return mix64(seed * 0x9E3779B97F4A7C15ULL + tensor + 1);
}

static inline uint64_t pattern_word(uint64_t base, uint64_t w)
{
    return mix64(base + w * 0x9E3779B97F4A7C15ULL);
}

/* Bytes [g, g + len) of the tensor's pattern. */
static void pattern_gen(uint64_t base, uint64_t g, unsigned char *out,
                        uint64_t len)
{
    for (; len > 0 && (g & 7); g++, len--)
        *out++ = (unsigned char)(pattern_word(base, g >> 3) >> (8 * (g & 7)));
    for (; len >= 8; g += 8, len -= 8, out += 8) {
        uint64_t x = htole64(pattern_word(base, g >> 3));

        memcpy(out, &x, 8);
    }
    for (; len > 0; g++, len--)
        *out++ = (unsigned char)(pattern_word(base, g >> 3) >> (8 * (g & 7)));
}

/* FP8 weights' sources hold tamer numbers than raw bytes, whose
 * exponents span every power of two (infinities and NaNs too): one huge
 * element would make its block's scale flush the others to zero, and the
 * check would see little but zeros. Kept: the sign, the mantissa and
 * four bits of the exponent, for magnitudes in [2^-8, 2^8): over a
 * block's scale they cover e4m3's normals and subnormals, and some
 * round to zero. */
static void pattern_tame(unsigned char *p, uint64_t n, size_t esize)
{
    for (uint64_t i = 0; i < n; i++, p += esize) {
        if (esize == 2) { /* bf16: exponent in bits 7..14 */
            uint16_t h = (uint16_t)(p[0] | p[1] << 8);

            h = (uint16_t)((h & 0x807fu) | (119u + (h >> 7 & 15u)) << 7);
            p[0] = (unsigned char)h;
            p[1] = (unsigned char)(h >> 8);
        } else { /* f32: bits 23..30 */
            uint32_t u;

            memcpy(&u, p, 4);
            u = le32toh(u);
            u = (u & 0x807fffffu) | (119u + (u >> 23 & 15u)) << 23;
            u = htole32(u);
            memcpy(p, &u, 4);
        }
    }
}

/* An element of a source pattern as f32 (bf16 and f32 only). */
static float pattern_value(const unsigned char *p, size_t esize)
{
    uint32_t u = esize == 2 ? (uint32_t)(p[0] | p[1] << 8) << 16
                            : (uint32_t)p[0] | (uint32_t)p[1] << 8 |
                                  (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    float x;

    memcpy(&x, &u, 4);
    return x;
}

/* A target's expected block scales of one FP8 weight at one seed, block
 * row by block row as pieces ask for them (a TP rank needs its own rows'
 * only). */
struct pattern_scales {
    uint64_t seed;
    float *s;                    /* the scale tensor, row-major */
    unsigned char *done;         /* per block row */
};

struct visit {
    const struct model *m;
    struct pattern_scales *scales;  /* per tensor, or NULL: not yet made */
    unsigned char *mem;          /* the piece */
    uint64_t seed;
    size_t pesize;               /* bytes of an element in the piece */
    uint32_t u;                  /* the plain tensor being visited */
    uint64_t base;               /* its pattern */
    /* the first mismatch: of tensor bad_u, element bad_elem */
    uint32_t bad_u;
    uint64_t bad_off, bad_elem;
    unsigned char got, want;
};

static int fill_run(void *arg, uint64_t piece_elem, uint64_t elem,
                    uint64_t n)
{
    struct visit *v = arg;
    size_t es = v->m->t[v->u].esize;
    unsigned char *out = v->mem + piece_elem * es;

    pattern_gen(v->base, elem * es, out, n * es);
    if (v->m->t[v->u].scale >= 0)
        pattern_tame(out, n, es);
    return 0;
}

/* The scales of block row br of FP8 weight w, as the library computes
 * them from the pattern: each block's largest magnitude over 448
 * (conv_scale_of). NULL: no memory. */
static const float *block_scales(struct visit *v, uint32_t w, int64_t br)
{
    const struct model_tensor *t = &v->m->t[w], *s = &v->m->t[t->scale];
    int64_t cols = t->shape[1], nbc = s->shape[1];
    int64_t r1 = (br + 1) * MODEL_FP8_BLOCK;
    struct pattern_scales *c = &v->scales[w];
    unsigned char *row;
    float *amax;

    if (c->s == NULL || c->done == NULL) {
        free(c->s);
        free(c->done);
        c->s = malloc((size_t)(s->shape[0] * nbc) * sizeof(float));
        c->done = calloc((size_t)s->shape[0], 1);
        if (c->s == NULL || c->done == NULL)
            return NULL;
        c->seed = v->seed;
    }
    if (c->seed != v->seed) {
        memset(c->done, 0, (size_t)s->shape[0]);
        c->seed = v->seed;
    }
    amax = c->s + br * nbc;
    if (c->done[br])
        return amax;
    if ((row = malloc((size_t)cols * t->esize)) == NULL)
        return NULL;
    memset(amax, 0, (size_t)nbc * sizeof(float));
    for (int64_t r = br * MODEL_FP8_BLOCK; r < r1 && r < t->shape[0]; r++) {
        pattern_gen(pattern_base(v->seed, w), (uint64_t)(r * cols) *
                    t->esize, row, (uint64_t)cols * t->esize);
        pattern_tame(row, (uint64_t)cols, t->esize);
        for (int64_t k = 0; k < cols; k++) {
            float x = fabsf(pattern_value(row + k * t->esize, t->esize));

            if (x > amax[k / MODEL_FP8_BLOCK]) /* false for a NaN */
                amax[k / MODEL_FP8_BLOCK] = x;
        }
    }
    for (int64_t k = 0; k < nbc; k++)
        amax[k] = conv_scale_of(amax[k]);
    free(row);
    c->done[br] = 1;
    return amax;
}

/* Element k of a run that differs: got, want (n bytes each). */
static int mismatch(struct visit *v, uint64_t piece_elem, uint64_t elem,
                    const unsigned char *got, const unsigned char *want,
                    size_t n)
{
    size_t i = 0;

    while (i + 1 < n && got[i] == want[i])
        i++;
    v->bad_u = v->u;
    v->bad_off = piece_elem * v->pesize + i;
    v->bad_elem = elem;
    v->got = got[i];
    v->want = want[i];
    return 1;
}

/* Targets' bytes of FP8 weight u: each element divided by its block's
 * scale in f32, then to e4m3 (src/util/convert.h, as the packer). */
static int check_fp8(struct visit *v, uint64_t piece_elem, uint64_t elem,
                     uint64_t n)
{
    static unsigned char src[1 << 16];
    const struct model_tensor *t = &v->m->t[v->u];
    uint64_t chunk = sizeof(src) / t->esize, cols = (uint64_t)t->shape[1];

    for (uint64_t done = 0; done < n; done += chunk) {
        uint64_t len = n - done < chunk ? n - done : chunk;

        pattern_gen(v->base, (elem + done) * t->esize, src, len * t->esize);
        pattern_tame(src, len, t->esize);
        for (uint64_t k = 0; k < len; k++) {
            uint64_t e = elem + done + k;
            const float *sc = block_scales(v, v->u,
                                           (int64_t)(e / cols /
                                                     MODEL_FP8_BLOCK));
            float y;
            uint32_t bits;
            unsigned char want, got = v->mem[piece_elem + done + k];

            if (sc == NULL)
                return -1;
            y = pattern_value(src + k * t->esize, t->esize) /
                sc[e % cols / MODEL_FP8_BLOCK];
            memcpy(&bits, &y, 4);
            want = conv_f32_to_e4m3(bits);
            if (got != want)
                return mismatch(v, piece_elem + done + k, e, &got, &want, 1);
        }
    }
    return 0;
}

/* Targets' bytes of scale tensor u (f32, little-endian like the host). */
static int check_scales(struct visit *v, uint64_t piece_elem, uint64_t elem,
                        uint64_t n)
{
    const struct model_tensor *s = &v->m->t[v->u];
    uint64_t nbc = (uint64_t)s->shape[1];

    for (uint64_t k = 0; k < n; k++) {
        uint64_t e = elem + k;
        const float *sc = block_scales(v, (uint32_t)s->scale_of,
                                       (int64_t)(e / nbc));
        const unsigned char *got = v->mem + (piece_elem + k) * 4;

        if (sc == NULL)
            return -1;
        if (memcmp(got, &sc[e % nbc], 4) != 0)
            return mismatch(v, piece_elem + k, e, got,
                            (const unsigned char *)&sc[e % nbc], 4);
    }
    return 0;
}

static int check_run(void *arg, uint64_t piece_elem, uint64_t elem,
                     uint64_t n)
{
    static unsigned char want[1 << 16];
    struct visit *v = arg;
    const struct model_tensor *t = &v->m->t[v->u];
    uint64_t off = piece_elem * t->esize, g = elem * t->esize;
    uint64_t len = n * t->esize;

    if (t->scale >= 0)
        return check_fp8(v, piece_elem, elem, n);
    if (t->scale_of >= 0)
        return check_scales(v, piece_elem, elem, n);
    for (uint64_t done = 0; done < len;) {
        uint64_t k = len - done < sizeof(want) ? len - done : sizeof(want);
        const unsigned char *got = v->mem + off + done;

        pattern_gen(v->base, g + done, want, k);
        if (memcmp(got, want, k) != 0) {
            uint64_t i = 0;

            while (got[i] == want[i])
                i++;
            v->bad_u = v->u;
            v->bad_off = off + done + i;
            v->bad_elem = (g + done + i) / t->esize;
            v->got = got[i];
            v->want = want[i];
            return 1;
        }
        done += k;
    }
    return 0;
}

/* Runs of (piece, plain tensor) in elements: fn sees each run's first
 * element in the piece, in v->u's row-major order, and its length. A
 * view's piece is visited range by range of the tensors it joins, its box
 * moved into each one's coordinates and cut to that range. */
static int visit_piece(const struct model *m, const struct model_piece *p,
                       model_run_fn fn, struct visit *v)
{
    const struct model_tensor *t = &m->t[p->tensor];
    struct model_tensor e; /* in elements: model_runs counts esize */
    int64_t plo[MODEL_MAX_DIMS], phi[MODEL_MAX_DIMS];
    int64_t lo[MODEL_MAX_DIMS] = {0}, clo[MODEL_MAX_DIMS];
    int64_t chi[MODEL_MAX_DIMS], at = 0;
    int d = t->view_dim, rc;

    if (t->view_dim < 0) {
        v->u = p->tensor;
        v->base = pattern_base(v->seed, v->u);
        if (p->dim == MODEL_FLAT) /* one run, where it lies in the tensor */
            return fn(v, 0, (uint64_t)p->start,
                      (uint64_t)(p->end - p->start));
        e = *t;
        e.esize = 1;
        model_piece_box(m, p, plo, phi);
        return model_runs(&e, plo, phi, lo, t->shape, fn, v);
    }
    /* The vllm layout cuts views by rows or holds them whole, never in
     * flat ranges. */
    model_piece_box(m, p, plo, phi);
    for (uint32_t i = 0; i < t->nparts; i++) {
        const struct model_view_part *vp = &t->part[i];
        int64_t alo[MODEL_MAX_DIMS], ahi[MODEL_MAX_DIMS];

        e = m->t[vp->tensor];
        e.esize = 1;
        memcpy(alo, plo, sizeof(alo));
        memcpy(ahi, phi, sizeof(ahi));
        alo[d] += vp->start - at;
        ahi[d] += vp->start - at;
        memcpy(clo, lo, sizeof(clo));
        memcpy(chi, e.shape, sizeof(chi));
        clo[d] = vp->start;
        chi[d] = vp->end;
        at += vp->end - vp->start;
        v->u = vp->tensor;
        v->base = pattern_base(v->seed, v->u);
        if ((rc = model_runs_clip(&e, alo, ahi, lo, e.shape, clo, chi, fn,
                                  v)) != 0)
            return rc;
    }
    return 0;
}

void pattern_fill(const struct model *m, const struct model_piece *p,
                  unsigned char *mem, uint64_t seed)
{
    struct visit v = {.m = m, .mem = mem, .seed = seed,
                      .pesize = m->t[p->tensor].esize};

    visit_piece(m, p, fill_run, &v);
}

int pattern_check(const struct model *m, const struct model_piece *p,
                  const unsigned char *mem, uint64_t seed,
                  struct pattern_scales **scales, struct pattern_miss *miss)
{
    struct visit v = {.m = m, .mem = (unsigned char *)(uintptr_t)mem,
                      .seed = seed, .pesize = m->t[p->tensor].tesize};
    int rc;

    if (*scales == NULL && (*scales = calloc(m->nt, sizeof(**scales))) == NULL)
        return -1;
    v.scales = *scales;
    if ((rc = visit_piece(m, p, check_run, &v)) == 1)
        *miss = (struct pattern_miss){v.bad_u, v.bad_off, v.bad_elem, v.got,
                                      v.want};
    return rc;
}

void pattern_scales_free(struct pattern_scales *scales, uint32_t nt)
{
    for (uint32_t t = 0; scales != NULL && t < nt; t++) {
        free(scales[t].s);
        free(scales[t].done);
    }
    free(scales);
}
