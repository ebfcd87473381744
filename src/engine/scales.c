/*
 * The block scales a source computes for its FP8 targets: for each of its
 * pieces of a block-scaled weight, the manifest gave it a piece of the
 * weight's scale tensor (manifest_set_block_scale). The source holds
 * that piece in memory of its own beside the weight (host memory, or the
 * weight's GPU), which the session registers and binds like any source
 * piece (core keeps the handles), and fills it before every push with
 * each block's largest magnitude over 448 (conv_scale_of), on the host or
 * by a kernel: the packer divides by it, and the plan writes it to the
 * targets' pieces of the scale tensor. One read of the weight a version,
 * before the packing pass. Packing work, so the engine's.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "mem/mem.h"
#include "util/convert.h"
#include "util/error.h"

/* amax[] of the blocks of the weight's piece, over its dense box: row by
 * row, a run of each block's columns at a time. */
static void block_amax(const struct plan_manifest *m, uint32_t wpiece,
                       const unsigned char *mem, uint32_t spiece,
                       float *amax)
{
    const struct plan_piece *wp = &m->pieces[wpiece];
    const struct plan_tensor *t = &m->tensors[wp->tensor];
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS], idx[PLAN_MAX_DIMS];
    int64_t blo[PLAN_MAX_DIMS], bhi[PLAN_MAX_DIMS];
    int nd = t->ndim, r = nd - 2, c = nd - 1, q;
    uint64_t bstr[PLAN_MAX_DIMS], cols, e = 0;
    int kind = t->elem_size == 2 ? CONV_BF16_E4M3 : CONV_F32_E4M3;
    size_t esize = (size_t)t->elem_size;

    plan_piece_box(m, wp, lo, hi);
    plan_piece_box(m, &m->pieces[spiece], blo, bhi);
    for (int i = nd - 1; i >= 0; i--)
        bstr[i] = i == nd - 1 ? 1 : bstr[i + 1] * (uint64_t)(bhi[i + 1] -
                                                             blo[i + 1]);
    cols = (uint64_t)(hi[c] - lo[c]);
    memcpy(idx, lo, sizeof(idx));
    for (;;) { /* one row of the piece: idx[0..c) */
        uint64_t b = (uint64_t)(idx[r] / t->block[0] - blo[r]) * bstr[r];

        for (int i = 0; i < r; i++)
            b += (uint64_t)(idx[i] - blo[i]) * bstr[i];
        for (uint64_t k = 0, part; k < cols; k += part, e += part) {
            int64_t col = lo[c] + (int64_t)k;
            uint64_t at = b + (uint64_t)(col / t->block[1] - blo[c]);
            float x;

            part = (uint64_t)(t->block[1] - col % t->block[1]);
            if (part > cols - k)
                part = cols - k;
            x = conv_amax(kind, mem + esize * e, part);
            if (x > amax[at])
                amax[at] = x;
        }
        for (q = r; q >= 0; q--) {
            if (++idx[q] < hi[q])
                break;
            idx[q] = lo[q];
        }
        if (q < 0)
            return;
    }
}

fx_status_t eng_scales_add(struct eng_scales *sc,
                           const struct plan_manifest *m, uint32_t piece,
                           uint32_t wpiece, const void *weight, int device,
                           struct eng_scale **out)
{
    const struct plan_piece *pc = &m->pieces[piece];
    const struct plan_tensor *t = &m->tensors[pc->tensor];
    struct eng_scale *e;
    fx_status_t st;
    char ebuf[ERR_ESC_MAX];

    *out = NULL;
    e = realloc(sc->v, (sc->n + 1) * sizeof(*e));
    if (e == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the scales of "
                       "\"%s\"", err_esc(ebuf, t->name));
    sc->v = e;
    e = &sc->v[sc->n];
    memset(e, 0, sizeof(*e));
    e->piece = piece;
    e->wpiece = wpiece;
    e->weight = weight;
    e->device = device;
    sc->n++;
    if (e->device < 0) {
        e->buf = calloc(1, pc->bytes);
        st = e->buf != NULL ? FX_OK
                            : err_set(FX_ERR_NOMEM, "no memory for the "
                                      "%llu bytes of scales",
                                      (unsigned long long)pc->bytes);
    } else if ((st = mem_dev_alloc(e->device, pc->bytes,
                                   (void **)&e->buf)) == FX_OK) {
        st = mem_scaler_open(e->device, &e->scaler);
    }
    *out = e;
    return st;
}

/* The weight piece as [outer, rows, cols] for the GPU's kernel. */
static fx_status_t scale_on_gpu(const struct plan_manifest *m,
                                const struct eng_scale *sb, const void *w)
{
    const struct plan_piece *wp = &m->pieces[sb->wpiece];
    const struct plan_tensor *t = &m->tensors[wp->tensor];
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];
    uint64_t outer = 1;
    int nd = t->ndim;

    plan_piece_box(m, wp, lo, hi);
    for (int i = 0; i < nd - 2; i++)
        outer *= (uint64_t)(hi[i] - lo[i]);
    return mem_scaler_run(sb->scaler, w, (unsigned)t->elem_size, outer,
                          (uint64_t)(hi[nd - 2] - lo[nd - 2]),
                          (uint64_t)(hi[nd - 1] - lo[nd - 1]),
                          (uint32_t)t->block[0], (uint32_t)t->block[1],
                          sb->buf);
}

fx_status_t eng_scales_compute(const struct eng_scales *sc,
                               const struct plan_manifest *m)
{
    fx_status_t st;

    for (size_t i = 0; i < sc->n; i++) {
        const struct eng_scale *sb = &sc->v[i];
        uint64_t n = m->pieces[sb->piece].bytes / sizeof(float);

        if (sb->device >= 0) {
            st = scale_on_gpu(m, sb, sb->weight);
            if (st != FX_OK)
                return st;
            continue;
        }
        memset(sb->buf, 0, n * sizeof(float));
        block_amax(m, sb->wpiece, (const unsigned char *)sb->weight,
                   sb->piece, sb->buf);
        for (uint64_t k = 0; k < n; k++)
            sb->buf[k] = conv_scale_of(sb->buf[k]);
    }
    return FX_OK;
}

void eng_scales_free(struct eng_scales *sc)
{
    for (size_t i = 0; i < sc->n; i++) {
        if (sc->v[i].device >= 0) {
            mem_scaler_close(sc->v[i].scaler);
            mem_dev_free(sc->v[i].buf);
        } else {
            free(sc->v[i].buf);
        }
    }
    free(sc->v);
    sc->v = NULL;
    sc->n = 0;
}
