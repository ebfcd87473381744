/*
 * The block scales a source computes for its FP8 targets: for each of its
 * pieces of a block-scaled weight, the manifest gave it a piece of the
 * weight's scale tensor (manifest_set_block_scale). The session holds
 * that piece in memory of its own beside the weight (host memory, or the
 * weight's GPU), registered and bound like any source piece, and fills it
 * before every push with each block's largest magnitude over 448
 * (conv_scale_of), on the host or by a kernel: the packer divides by it,
 * and the plan writes it to the targets' pieces of the scale tensor. One
 * read of the weight a version, before the packing pass.
 */
#include <stdlib.h>
#include <string.h>

#include "core/session_int.h"
#include "mem/mem.h"
#include "util/convert.h"

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

fx_status_t scales_open(fx_session_t *s)
{
    const struct plan_manifest *m = s->m;
    int rank = s->ctx->rank;
    fx_status_t st;
    char ebuf[ERR_ESC_MAX];

    for (uint32_t p = 0; p < m->npieces; p++) {
        const struct plan_piece *pc = &m->pieces[p];
        const struct plan_tensor *t = &m->tensors[pc->tensor];
        struct scale_buf *sb;
        int w;

        if (pc->rank != rank || pc->role != FX_SOURCE || t->scale_of < 0)
            continue;
        w = manifest_find_piece(m, rank, FX_SOURCE, (uint32_t)t->scale_of);
        if (s->bind[w].region == NULL)
            continue; /* check_bindings says why */
        sb = realloc(s->scales, (s->nscales + 1) * sizeof(*sb));
        if (sb == NULL)
            return err_set(FX_ERR_NOMEM, "no memory for the scales of "
                           "\"%s\"", err_esc(ebuf, t->name));
        s->scales = sb;
        sb = &s->scales[s->nscales];
        memset(sb, 0, sizeof(*sb));
        sb->piece = p;
        sb->wpiece = (uint32_t)w;
        sb->device = s->bind[w].region->device;
        s->nscales++;
        if (sb->device < 0) {
            sb->buf = calloc(1, pc->bytes);
            st = sb->buf != NULL ? FX_OK
                                 : err_set(FX_ERR_NOMEM, "no memory for the "
                                           "%llu bytes of scales",
                                           (unsigned long long)pc->bytes);
        } else if ((st = mem_dev_alloc(sb->device, pc->bytes,
                                       (void **)&sb->buf)) == FX_OK) {
            st = mem_scaler_open(sb->device, &sb->scaler);
        }
        if (st == FX_OK)
            st = fx_region_register_mem(s->ctx, sb->buf, pc->bytes,
                                        FX_REGION_SOURCE,
                                        sb->device < 0 ? FX_MEM_HOST
                                                       : FX_MEM_CUDA,
                                        sb->device, &sb->region);
        if (st != FX_OK)
            return err_prefix(st, "the scales of \"%s\"",
                              err_esc(ebuf, t->name));
        s->bind[p] = (struct bind){sb->region, 0};
    }
    return FX_OK;
}

/* The weight piece as [outer, rows, cols] for the GPU's kernel. */
static fx_status_t scale_on_gpu(fx_session_t *s, const struct scale_buf *sb,
                                const void *w)
{
    const struct plan_piece *wp = &s->m->pieces[sb->wpiece];
    const struct plan_tensor *t = &s->m->tensors[wp->tensor];
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];
    uint64_t outer = 1;
    int nd = t->ndim;

    plan_piece_box(s->m, wp, lo, hi);
    for (int i = 0; i < nd - 2; i++)
        outer *= (uint64_t)(hi[i] - lo[i]);
    return mem_scaler_run(sb->scaler, w, (unsigned)t->elem_size, outer,
                          (uint64_t)(hi[nd - 2] - lo[nd - 2]),
                          (uint64_t)(hi[nd - 1] - lo[nd - 1]),
                          (uint32_t)t->block[0], (uint32_t)t->block[1],
                          sb->buf);
}

fx_status_t scales_compute(fx_session_t *s)
{
    fx_status_t st;

    for (size_t i = 0; i < s->nscales; i++) {
        const struct scale_buf *sb = &s->scales[i];
        const struct bind *w = &s->bind[sb->wpiece];
        uint64_t n = s->m->pieces[sb->piece].bytes / sizeof(float);

        if (sb->device >= 0) {
            st = scale_on_gpu(s, sb, (const char *)w->region->base + w->off);
            if (st != FX_OK)
                return st;
            continue;
        }
        memset(sb->buf, 0, n * sizeof(float));
        block_amax(s->m, sb->wpiece,
                   (const unsigned char *)w->region->base + w->off,
                   sb->piece, sb->buf);
        for (uint64_t k = 0; k < n; k++)
            sb->buf[k] = conv_scale_of(sb->buf[k]);
    }
    return FX_OK;
}

void scales_close(fx_session_t *s)
{
    for (size_t i = 0; i < s->nscales; i++) {
        fx_region_deregister(s->scales[i].region);
        if (s->scales[i].device >= 0) {
            mem_scaler_close(s->scales[i].scaler);
            mem_dev_free(s->scales[i].buf);
        } else {
            free(s->scales[i].buf);
        }
    }
    free(s->scales);
    s->scales = NULL;
    s->nscales = 0;
}
