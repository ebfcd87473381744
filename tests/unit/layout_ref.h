/*
 * The reference the plan's tests compare against: where each element of a
 * piece's memory comes from, worked out element by element from the
 * manifest's own definitions (a box is row-major in its own shape, a flat
 * range is the tensor's elements in order, a view is its ranges one after
 * the other along its dim, a stacked view such joins slab after slab, and
 * padding is no tensor's), with none of the plan's code. Slow on purpose.
 */
#ifndef FX_TESTS_LAYOUT_REF_H
#define FX_TESTS_LAYOUT_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "plan/plan.h"

/* The plain tensor and its row-major element index that element e of
 * piece pc holds. */
static inline void ref_element(const struct plan_manifest *m,
                               const struct plan_piece *pc, uint64_t e,
                               uint32_t *tensor, uint64_t *index)
{
    const struct plan_tensor *t = &m->tensors[pc->tensor];
    int64_t coord[PLAN_MAX_DIMS], lo, hi;
    uint64_t flat;

    if (pc->dim == PLAN_FLAT) {
        flat = (uint64_t)pc->start + e;
        for (int i = t->ndim - 1; i >= 0; i--) {
            coord[i] = (int64_t)(flat % (uint64_t)t->shape[i]);
            flat /= (uint64_t)t->shape[i];
        }
    } else {
        for (int i = t->ndim - 1; i >= 0; i--) {
            if (pc->dim == PLAN_BOX) {
                lo = m->bounds[pc->start + i];
                hi = m->bounds[pc->start + t->ndim + i];
            } else {
                lo = i == pc->dim ? pc->start : 0;
                hi = i == pc->dim ? pc->end : t->shape[i];
            }
            coord[i] = lo + (int64_t)(e % (uint64_t)(hi - lo));
            e /= (uint64_t)(hi - lo);
        }
    }
    *tensor = pc->tensor;
    *index = 0;
    if (t->view != NULL) {
        const struct plan_view *v = t->view;
        const struct plan_view_part *vp = v->part;
        uint32_t n = v->n;
        int d = v->dim;
        int64_t at = 0;
        int64_t *c = coord;

        if (v->per > 0) { /* slab coord[0], then the parts' own dims */
            vp += (size_t)coord[0] * v->per;
            n = v->per;
            c = coord + 1;
        }
        *tensor = PLAN_VIEW_PAD;
        for (uint32_t k = 0; k < n; k++) {
            if (c[d] < at + (vp[k].end - vp[k].start)) {
                c[d] = c[d] - at + vp[k].start;
                *tensor = vp[k].tensor;
                break;
            }
            at += vp[k].end - vp[k].start;
        }
        if (*tensor == PLAN_VIEW_PAD)
            return; /* padding: no tensor's element */
        t = &m->tensors[*tensor];
        for (int i = 0; i < t->ndim; i++)
            *index = *index * (uint64_t)t->shape[i] + (uint64_t)c[i];
        return;
    }
    for (int i = 0; i < t->ndim; i++)
        *index = *index * (uint64_t)t->shape[i] + (uint64_t)coord[i];
}

/* A global id for byte off of piece pc: its plain tensor and its byte in
 * that tensor's layout (in the dtype the piece holds), so that bytes of
 * different tensors never match. */
static inline uint64_t ref_byte(const struct plan_manifest *m,
                                const struct plan_piece *pc, uint64_t off)
{
    size_t es = plan_piece_elem(m, pc);
    uint32_t tensor;
    uint64_t index;

    ref_element(m, pc, off / es, &tensor, &index);
    if (tensor == PLAN_VIEW_PAD)
        return UINT64_MAX; /* padding, which nothing writes */
    return ((uint64_t)tensor << 40) | (index * es + off % es);
}

/* bf16 of an f32, worked out apart from the library's rounding trick: the
 * two bf16 values around it, the nearer one, on a tie the even one; past
 * the largest finite bf16 the next one up is 2^128 (infinity). NaN stays
 * NaN, quiet, its sign and top bits kept. */
static inline double ref_bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;

    if ((h & 0x7f80) == 0x7f80) /* the step past the largest finite */
        return (h & 0x8000) ? -0x1p128 : 0x1p128;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t ref_f32_to_bf16(uint32_t u)
{
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double x, a, b;
    float f;

    memcpy(&f, &u, 4);
    if (f != f)
        return (uint16_t)(lo | 0x40);
    if ((u & 0x7fffffffu) == 0x7f800000u || (u & 0xffffu) == 0)
        return lo; /* infinity, or exact */
    x = f;
    a = ref_bf16_value(lo);
    b = ref_bf16_value(hi);
    if (fabs(x - a) != fabs(x - b))
        return fabs(x - a) < fabs(x - b) ? lo : hi;
    return (lo & 1) ? hi : lo;
}

/* The value of an FP8 e4m3fn code (its NaNs are not asked for), from a
 * table of the 128 magnitudes built on first use. */
static inline double ref_e4m3_value(uint8_t code)
{
    static double table[128];
    static int built;
    double v;

    if (!built) {
        for (int c = 0; c < 128; c++) {
            int e = (c >> 3) & 15, mnt = c & 7;

            table[c] = e == 0 ? mnt / 8.0 * ldexp(1.0, -6)
                              : (1.0 + mnt / 8.0) * ldexp(1.0, e - 7);
        }
        built = 1;
    }
    v = table[code & 0x7f];
    return (code & 0x80) ? -v : v;
}

/* e4m3fn of an f32 by search: the nearest of the 127 finite magnitudes,
 * on a tie the even code; from 448 up (infinity too) 448, NaN 0x7f; the
 * sign kept, zero included. */
static inline uint8_t ref_f32_to_e4m3(uint32_t u)
{
    uint8_t sign = (uint8_t)((u >> 24) & 0x80), best = 0;
    double a, d, bestd = 1e300;
    float f;

    memcpy(&f, &u, 4);
    if (f != f)
        return (uint8_t)(sign | 0x7f);
    a = fabs((double)f);
    if (a >= 448.0)
        return (uint8_t)(sign | 0x7e);
    for (int c = 0; c <= 0x7e; c++) {
        d = fabs(ref_e4m3_value((uint8_t)c) - a);
        if (d < bestd || (d == bestd && (c & 1) == 0)) {
            bestd = d;
            best = (uint8_t)c;
        }
    }
    return (uint8_t)(sign | best);
}

#endif
