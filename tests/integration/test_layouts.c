/*
 * Weight sync between the layouts of real trainers and engines, over real
 * providers (tcp;ofi_rxm and shm): the manifests of tests/data/manifests
 * (layouts.py) hold a DeepSeek-V3-shaped layer as FSDP flat shards of f32
 * masters synced into vLLM's fused tensors in bf16 (converted while
 * packed), as Megatron tensor x expert parallel boxes into boxes and flat
 * ranges, and from bf16 trainers holding rows into FP8 e4m3 with block
 * scales, DeepSeek-V3's way (the sources compute the scales), fused as
 * vLLM holds them (fused_qkv_a_proj, w13 and their fused scales), and
 * by rules (the compact form: tensor x data x pipeline trainers to tensor
 * parallel servers, each rank expanding its own part). Every rank binds
 * the memory its pieces take;
 * sources fill each element from where it lies in its plain tensor (the
 * reference of layout_ref.h, read from the same file through the plan
 * layer), five versions are pushed, and every byte every target holds is
 * checked against that reference after each.
 *
 * Started by hand or by make check it launches itself as the ranks; the
 * manifest is the argument (default: both).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/layout_ref.h"
#include "boot/boot.h"
#include "core/ctx_int.h"
#include "itest.h"
#include "util/convert.h"
#include "util/error.h"

#define VERSIONS 5

struct mine {
    uint32_t piece;
    uint64_t at; /* offset in the rank's one region */
};

/* A block-scaled weight's element in version v: a value that bf16 holds
 * exactly, of either sign (random bits would be mostly NaNs and
 * infinities to FP8). */
static float value_of(uint32_t tensor, uint64_t index, uint64_t v)
{
    uint64_t at = (uint64_t)tensor << 40 | index * 2;
    unsigned h = itest_byte((size_t)at, (unsigned)v) |
                 (unsigned)itest_byte((size_t)at + 1, (unsigned)v) << 8;

    return (float)((int)(h % 511) - 255) / 64.0f;
}

/* The scale of the block of rows x cols at (outer index, block row,
 * block column) of weight w, worked out from every element of it: the
 * largest magnitude over 448 (1 for zeros), as DeepSeek-V3 defines it. */
static float block_scale(const struct plan_manifest *pm, uint32_t w,
                         uint64_t outer, int64_t br, int64_t bc, uint64_t v)
{
    const struct plan_tensor *t = &pm->tensors[w];
    int64_t R = t->shape[t->ndim - 2], C = t->shape[t->ndim - 1];
    float amax = 0.0f;

    for (int64_t r = br * t->block[0]; r < (br + 1) * t->block[0] && r < R;
         r++)
        for (int64_t c = bc * t->block[1];
             c < (bc + 1) * t->block[1] && c < C; c++) {
            float x = fabsf(value_of(w, (outer * (uint64_t)R +
                                         (uint64_t)r) * (uint64_t)C +
                                            (uint64_t)c, v));

            if (x > amax)
                amax = x;
        }
    return amax > 0.0f ? amax / 448.0f : 1.0f;
}

/* FP8: a source's bf16 value, a target's e4m3 of it over its block's
 * scale, a scale tensor's f32 scale. */
static unsigned char expected_fp8(const struct plan_manifest *pm,
                                  const struct plan_piece *pc, uint32_t tensor,
                                  uint64_t index, uint64_t off, uint64_t v)
{
    const struct plan_tensor *t = &pm->tensors[tensor];
    uint32_t w = t->scale_of >= 0 ? (uint32_t)t->scale_of : tensor;
    const struct plan_tensor *wt = &pm->tensors[w];
    int nd = wt->ndim;
    uint64_t cols = (uint64_t)t->shape[nd - 1], rows = (uint64_t)t->shape[nd - 2];
    uint64_t c = index % cols, r = index / cols % rows, outer = index / cols / rows;
    float x, y, s;
    uint32_t u;
    uint16_t h;
    unsigned char out[4];

    if (t->scale_of >= 0) { /* index is a block's */
        s = block_scale(pm, w, outer, (int64_t)r, (int64_t)c, v);
        memcpy(out, &s, 4);
        return out[off % 4];
    }
    x = value_of(tensor, index, v);
    if (pc->role == FX_SOURCE) {
        memcpy(&u, &x, 4);
        h = (uint16_t)(u >> 16); /* exact: the value has 8 bits */
        memcpy(out, &h, 2);
        return out[off % 2];
    }
    s = block_scale(pm, w, outer, (int64_t)r / wt->block[0],
                    (int64_t)c / wt->block[1], v);
    y = x / s;
    memcpy(&u, &y, 4);
    return ref_f32_to_e4m3(u);
}

/* The value byte off of piece pc takes in version v: sources hold a
 * pattern of where each byte lies in its plain tensor; a target holds the
 * same, or, where its tensor is converted, the reference conversion of
 * the source's element (layout_ref.h). */
static unsigned char expected(const struct plan_manifest *pm,
                              const struct plan_piece *pc, uint64_t off,
                              uint64_t v)
{
    size_t es = plan_piece_elem(pm, pc);
    const struct plan_tensor *t;
    unsigned char in[8], out[8];
    uint32_t tensor, u;
    uint64_t index;
    uint16_t h;

    ref_element(pm, pc, off / es, &tensor, &index);
    t = &pm->tensors[tensor];
    if (conv_scaled(t->conv) || t->scale_of >= 0)
        return expected_fp8(pm, pc, tensor, index, off, v);
    if (pc->role == FX_SOURCE || t->conv == 0)
        return itest_byte((size_t)((uint64_t)tensor << 40 |
                                   (index * es + off % es)), (unsigned)v);
    for (size_t k = 0; k < t->elem_size; k++)
        in[k] = itest_byte((size_t)((uint64_t)tensor << 40 |
                                    (index * t->elem_size + k)), (unsigned)v);
    if (t->elem_size == 4) { /* f32 -> bf16 */
        memcpy(&u, in, 4);
        h = ref_f32_to_bf16(u);
        memcpy(out, &h, 2);
    } else { /* bf16 -> f32 */
        memcpy(&h, in, 2);
        u = (uint32_t)h << 16;
        memcpy(out, &u, 4);
    }
    return out[off % es];
}

/* Set-up hands addresses to plan peers only: after it, this rank knows
 * exactly itself and the ranks it has segments with (its own plan, as the
 * library builds it; the notification probe runs on those pairs). Its gets over the local backend: its peers' messages, and
 * size - 1 for each of the three allgathers of fixed-size verdicts
 * (set-up, probe, readiness). */
static void check_peers(fx_ctx_t *ctx, const struct plan_manifest *pm,
                        int rank, unsigned long gets)
{
    struct plan *plan;
    int n = ctx->size, npeers = 0;
    unsigned long want;

    if (plan_build(pm, n, rank, &plan) != FX_OK)
        ITEST_FAIL("rank %d: reference plan: %s", rank, err_last());
    for (int r = 0; r < n; r++) {
        int peer = r == rank || plan->bytes[(size_t)r * n + rank] > 0 ||
                   plan->bytes[(size_t)rank * n + r] > 0;
        if (ctx->remote[r].known != peer)
            ITEST_FAIL("rank %d %s rank %d's address after set-up, which "
                       "is %sa peer", rank,
                       ctx->remote[r].known ? "holds" : "lacks", r,
                       peer ? "" : "not ");
        npeers += peer && r != rank;
    }
    want = 3 * (unsigned long)(n - 1) + (unsigned long)npeers;
    if (gets != want)
        ITEST_FAIL("rank %d made %lu gets in set-up, not %lu (%d peers of "
                   "%d ranks)", rank, gets, want, npeers, n);
    printf("rank %d: %d of %d ranks' addresses, %lu gets in set-up\n",
           rank, npeers, n - 1, gets);
    plan_free(plan);
}

static int rank_main(const char *path)
{
    int rank = itest_rank();
    fx_ctx_t *ctx;
    fx_manifest_t *m;
    struct plan_manifest *pm;
    struct mine *mine;
    size_t nmine = 0;
    uint64_t total = 0;
    unsigned char *mem;
    fx_region_t *region;
    fx_session_t *s;
    fx_role_t role = FX_TARGET;
    unsigned long gets;

    ITEST_OK(NULL, fx_ctx_create(NULL, &ctx));
    ITEST_OK(ctx, fx_manifest_load(path, &m));
    if (manifest_load_file(path, &pm) != FX_OK)
        ITEST_FAIL("reference load of %s: %s", path, err_last());
    if (manifest_compact(pm)) { /* by rules: what they give this rank */
        struct plan_manifest *whole = pm;

        if (manifest_expand(whole, whole->max_rank + 1, rank, &pm) != FX_OK)
            ITEST_FAIL("expanding %s for rank %d: %s", path, rank,
                       err_last());
        manifest_free(whole);
    }
    mine = calloc(pm->npieces, sizeof(*mine));
    for (uint32_t i = 0; i < pm->npieces; i++) {
        if (pm->pieces[i].rank != rank)
            continue;
        /* scales a source computes: the library holds them */
        if (pm->pieces[i].role == FX_SOURCE &&
            pm->tensors[pm->pieces[i].tensor].scale_of >= 0)
            continue;
        role = pm->pieces[i].role; /* a rank is one or the other here */
        mine[nmine].piece = i;
        mine[nmine++].at = total;
        total += (pm->pieces[i].bytes + 63) & ~(uint64_t)63;
    }
    mem = malloc(total ? total : 1);
    memset(mem, 0xee, total);
    ITEST_OK(ctx, fx_region_register(ctx, mem, total ? total : 1,
                                     role == FX_SOURCE ? FX_REGION_SOURCE
                                                       : FX_REGION_TARGET,
                                     &region));
    ITEST_OK(ctx, fx_session_create(ctx, m, &s));
    for (size_t k = 0; k < nmine; k++)
        ITEST_OK(ctx, fx_session_bind(s, role,
                                      pm->tensors[pm->pieces[mine[k].piece]
                                                      .tensor].name,
                                      region, mine[k].at));
    gets = ctx->boot->gets;
    ITEST_OK(ctx, fx_session_setup(s));
    check_peers(ctx, pm, rank, ctx->boot->gets - gets);
    for (uint64_t v = 1; v <= VERSIONS; v++) {
        for (size_t k = 0; k < nmine && role == FX_SOURCE; k++) {
            const struct plan_piece *pc = &pm->pieces[mine[k].piece];

            for (uint64_t b = 0; b < pc->bytes; b++)
                mem[mine[k].at + b] = expected(pm, pc, b, v);
        }
        if (role == FX_SOURCE) {
            ITEST_OK(ctx, fx_session_push(s, v));
        } else {
            ITEST_OK(ctx, fx_session_wait(s, v));
            for (size_t k = 0; k < nmine; k++) {
                const struct plan_piece *pc = &pm->pieces[mine[k].piece];

                for (uint64_t b = 0; b < pc->bytes; b++)
                    if (mem[mine[k].at + b] != expected(pm, pc, b, v))
                        ITEST_FAIL("rank %d, version %llu, tensor \"%s\": "
                                   "byte %llu of its piece is 0x%02x, not "
                                   "0x%02x", rank, (unsigned long long)v,
                                   pm->tensors[pc->tensor].name,
                                   (unsigned long long)b,
                                   mem[mine[k].at + b],
                                   expected(pm, pc, b, v));
            }
        }
        /* The next version's fill must not race this one's check. */
        ITEST_OK(ctx, fx_barrier(ctx));
    }
    printf("rank %d (%s): %zu pieces, %llu bytes, %d versions exact; "
           "%llu bytes %s in the last\n", rank,
           role == FX_SOURCE ? "source" : "target", nmine,
           (unsigned long long)total, VERSIONS,
           (unsigned long long)fx_session_report(s)->bytes,
           role == FX_SOURCE ? "sent" : "received");
    fx_session_destroy(s);
    fx_region_deregister(region);
    fx_manifest_destroy(m);
    manifest_free(pm);
    fx_ctx_destroy(ctx);
    free(mem);
    free(mine);
    return 0;
}

static int nranks_of(const char *path)
{
    struct plan_manifest *pm;
    int n;

    if (manifest_load_file(path, &pm) != FX_OK)
        ITEST_FAIL("%s: %s", path, err_last());
    n = pm->max_rank + 1;
    manifest_free(pm);
    return n;
}

int main(int argc, char **argv)
{
    static const char *const provs[] = {"tcp;ofi_rxm", "shm"};
    static const char *const files[] = {"layouts-fsdp-vllm.json",
                                        "layouts-megatron-2d.json",
                                        "layouts-fp8.json",
                                        "layouts-rules.json"};
    const char *srcdir = getenv("srcdir") ? getenv("srcdir") : ".";
    int failed = 0, total = 0;
    char path[4096];

    if (itest_rank() >= 0)
        return rank_main(getenv("FX_TEST_MANIFEST"));
    for (int f = 0; f < (int)(sizeof(files) / sizeof(files[0])); f++) {
        if (argc > 1)
            snprintf(path, sizeof(path), "%s", argv[1]);
        else
            snprintf(path, sizeof(path), "%s/tests/data/manifests/%s",
                     srcdir, files[f]);
        setenv("FX_TEST_MANIFEST", path, 1);
        /* Small buckets: most runs are packed, several buckets a target. */
        setenv("FABXFER_BUCKET_SIZE", "4K", 1);
        /* Every segment's checksum too: the pieces the program cuts and
         * merges (views, boxes, flat ranges, conversions, replicas) must
         * add up to the target's CRC of what landed, or the wait fails. */
        setenv("FABXFER_VERIFY", "full", 1);
        for (int p = 0; p < 2; p++, total++) {
            fx_status_t st;

            setenv("FABXFER_PROVIDER", provs[p], 1);
            /* over shm, the targets' checker thread takes check points
             * as runs of segments land; over tcp all is checked at the
             * end (what 2 cores get) */
            setenv("FABXFER_VERIFY_THREADS", p ? "4" : "2", 1);
            st = itest_launch(nranks_of(path), 120000);
            printf("%s %s over %s\n", st == FX_OK ? "PASS" : "FAIL", path,
                   provs[p]);
            failed += st != FX_OK;
        }
        if (argc > 1)
            break;
    }
    printf("%d passed, %d failed\n", total - failed, failed);
    return failed ? 1 : 0;
}
