/*
 * The reference the plan's tests compare against: where each element of a
 * piece's memory comes from, worked out element by element from the
 * manifest's own definitions (a box is row-major in its own shape, a flat
 * range is the tensor's elements in order, a view is its ranges one after
 * the other along its dim), with none of the plan's code. Slow on purpose.
 */
#ifndef FX_TESTS_LAYOUT_REF_H
#define FX_TESTS_LAYOUT_REF_H

#include <stdint.h>

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
    if (t->view != NULL) {
        int d = t->view->dim;
        int64_t at = 0;

        for (uint32_t k = 0; k < t->view->n; k++) {
            const struct plan_view_part *vp = &t->view->part[k];

            if (coord[d] < at + (vp->end - vp->start)) {
                coord[d] = coord[d] - at + vp->start;
                *tensor = vp->tensor;
                break;
            }
            at += vp->end - vp->start;
        }
        t = &m->tensors[*tensor];
    }
    *index = 0;
    for (int i = 0; i < t->ndim; i++)
        *index = *index * (uint64_t)t->shape[i] + (uint64_t)coord[i];
}

/* A global id for byte off of piece pc: its plain tensor and its byte in
 * that tensor's layout, so that bytes of different tensors never match. */
static inline uint64_t ref_byte(const struct plan_manifest *m,
                                const struct plan_piece *pc, uint64_t off)
{
    size_t es = m->tensors[pc->tensor].elem_size;
    uint32_t tensor;
    uint64_t index;

    ref_element(m, pc, off / es, &tensor, &index);
    return ((uint64_t)tensor << 40) | (index * es + off % es);
}

#endif
