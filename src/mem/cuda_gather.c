/*
 * The staged source's GPU packer (mem.h's mem_gather): every bucket's runs
 * go to the device once; each version a kernel gathers a bucket's runs
 * into a device slot (converting as it goes), queues the bucket's
 * checksums (cuda_crc.c) and copies the slot to the pinned host bucket on
 * a stream of its own, so that the next bucket's kernel overlaps this
 * one's copy. Apart from cuda.c (the driver) because it calls the
 * checksum kernels, which call the driver.
 */
#include <stdint.h>
#include <stdlib.h>

#include "mem/cuda_int.h"
#include "mem/mem.h"
#include "util/convert.h"
#include "util/error.h"

/* Runs longer than this are cut, so that one thread block never copies
 * much more than another (a multiple of every converted element's size). */
#define RUN_CUT (64u << 10)
#define SLOTS_MAX 16

struct mem_gather {
    int device;
    CUmodule mod;
    CUfunction fn;
    CUstream kstream, cstream;   /* gather kernels, DMA to the host */
    CUdeviceptr runs;            /* every bucket's runs, uploaded once */
    size_t *first;               /* bucket -> first run; [nbuckets] = end */
    uint64_t *used;              /* bucket -> bytes it fills */
    uint32_t nbuckets;
    CUdeviceptr dslot[SLOTS_MAX]; /* device buckets */
    CUdeviceptr dpool;           /* every slot, one allocation */
    int in_place;                /* the slots are the buckets: no DMA */
    CUevent packed[SLOTS_MAX];    /* kernel done: device bucket filled */
    CUevent copied[SLOTS_MAX];    /* DMA done: host bucket filled */
    int busy[SLOTS_MAX];
    int slots;
    size_t bucket_size;
    int timeout_ms;
    struct mem_crc *crc;         /* bucket k's checksums: group k + 1 */
};

static void mem_gather_close_in(struct mem_gather *g);

/* Cut runs at RUN_CUT, keeping the per-bucket index. */
static fx_status_t cut_runs(const struct mem_run *runs, const size_t *first,
                            uint32_t nb, struct mem_run **out, size_t **ofirst,
                            size_t *nout)
{
    size_t n = 0, k = 0;
    struct mem_run *v;
    size_t *f;

    for (size_t i = 0; i < first[nb]; i++)
        n += (runs[i].len + RUN_CUT - 1) / RUN_CUT;
    v = malloc((n ? n : 1) * sizeof(*v));
    f = malloc((nb + 1) * sizeof(*f));
    if (v == NULL || f == NULL) {
        free(v);
        free(f);
        return err_set(FX_ERR_NOMEM, "no memory for %zu gather runs", n);
    }
    for (uint32_t b = 0; b < nb; b++) {
        f[b] = k;
        for (size_t i = first[b]; i < first[b + 1]; i++)
            for (uint64_t o = 0; o < runs[i].len; o += RUN_CUT) {
                uint64_t l = runs[i].len - o < RUN_CUT ? runs[i].len - o
                                                        : RUN_CUT;

                v[k] = runs[i];
                v[k].src += runs[i].conv ? conv_src_len((int)runs[i].conv, o)
                                         : o;
                v[k].dst += o;
                v[k].len = l;
                if (runs[i].block > 0) { /* FP8: one byte an element */
                    v[k].scale += 4 * ((runs[i].phase + o) / runs[i].block);
                    v[k].phase = (uint32_t)((runs[i].phase + o) %
                                            runs[i].block);
                }
                k++;
            }
    }
    f[nb] = k;
    *out = v;
    *ofirst = f;
    *nout = n;
    return FX_OK;
}

static fx_status_t mem_gather_open_in(int device, int slots,
                                      size_t bucket_size,
                                      const struct mem_run *runs,
                                      const size_t *first, uint32_t nbuckets,
                                      int in_place, int timeout_ms,
                                      struct mem_gather **out)
{
    struct mem_gather *g;
    struct mem_run *cut = NULL;
    size_t ncut = 0;
    fx_status_t st;
    CUresult r;

    if (slots > SLOTS_MAX)
        return err_set(FX_ERR_INVALID, "at most %d GPU buckets", SLOTS_MAX);
    if ((st = cu_use_device(device)) != FX_OK)
        return st;
    if ((g = calloc(1, sizeof(*g))) == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the GPU packer");
    g->device = device;
    g->slots = slots;
    g->timeout_ms = timeout_ms;
    g->bucket_size = bucket_size;
    g->nbuckets = nbuckets;
    g->in_place = in_place;
    if ((st = cut_runs(runs, first, nbuckets, &cut, &g->first, &ncut)) !=
        FX_OK)
        goto fail;
    if ((g->used = calloc(nbuckets + 1, sizeof(*g->used))) == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory for the GPU packer");
        goto fail;
    }
    for (uint32_t b = 0; b < nbuckets; b++)
        for (size_t i = g->first[b]; i < g->first[b + 1]; i++)
            if (cut[i].dst + cut[i].len > g->used[b])
                g->used[b] = cut[i].dst + cut[i].len;
#define G_TRY(call, what)                                                    \
    if ((r = (call)) != CUDA_SUCCESS) {                                      \
        st = err_set(FX_ERR_DEVICE, "GPU packer: %s: %s", what, cu_str(r));  \
        goto fail;                                                           \
    }
    G_TRY(cu.cuModuleLoadData(&g->mod, mem_gather_fatbin),
          "loading the gather kernel (cuModuleLoadData)");
    G_TRY(cu.cuModuleGetFunction(&g->fn, g->mod, "mem_gather_kernel"),
          "cuModuleGetFunction(mem_gather_kernel)");
    /* Blocking with respect to the legacy default stream: a gather starts
     * after the application's work queued there (PyTorch's default), so
     * it reads the weights that work wrote. Work on other streams the
     * application must finish before fx_session_push(). */
    G_TRY(cu.cuStreamCreate(&g->kstream, CU_STREAM_DEFAULT),
          "cuStreamCreate");
    G_TRY(cu.cuStreamCreate(&g->cstream, CU_STREAM_NON_BLOCKING),
          "cuStreamCreate");
    if (ncut > 0) {
        G_TRY(cu.cuMemAlloc(&g->runs, ncut * sizeof(*cut)),
              "cuMemAlloc (gather runs)");
        G_TRY(cu.cuMemcpyHtoD(g->runs, cut, ncut * sizeof(*cut)),
              "uploading the gather runs");
    }
    /* One allocation: in place the provider registers it; staged, the
     * checksums find bucket k in slot k % slots (mem_gather_slots). */
    G_TRY(cu.cuMemAlloc(&g->dpool, (size_t)slots * bucket_size),
          "cuMemAlloc (device buckets)");
    for (int i = 0; i < slots; i++) {
        g->dslot[i] = g->dpool + (size_t)i * bucket_size;
        G_TRY(cu.cuEventCreate(&g->packed[i], CU_EVENT_DISABLE_TIMING),
              "cuEventCreate");
        G_TRY(cu.cuEventCreate(&g->copied[i], CU_EVENT_DISABLE_TIMING),
              "cuEventCreate");
    }
#undef G_TRY
    free(cut);
    *out = g;
    return FX_OK;
fail:
    free(cut);
    mem_gather_close_in(g);
    return st;
}

static fx_status_t mem_gather_start_in(struct mem_gather *g, uint32_t bucket,
                                       int slot, void *dst)
{
    size_t f0 = g->first[bucket], n = g->first[bucket + 1] - f0;
    CUdeviceptr runs = g->runs + f0 * sizeof(struct mem_run);
    CUdeviceptr dbuf = g->dslot[slot];
    unsigned long long nruns = n;
    void *args[] = {&runs, &nruns, &dbuf};
    unsigned grid = n < 4096 ? (unsigned)n : 4096;
    fx_status_t st;

    if ((st = cu_use_device(g->device)) != FX_OK)
        return st;
    if (n == 0)
        return err_set(FX_ERR_STATE, "GPU bucket %u is empty", bucket);
    /* The device slot is free once its last DMA has left it. */
    if (g->busy[slot])
        CU_TRY(cu.cuStreamWaitEvent(g->kstream, g->copied[slot], 0),
               "cuStreamWaitEvent");
    CU_TRY(cu.cuLaunchKernel(g->fn, grid, 1, 1, 256, 1, 1, 0, g->kstream,
                             args, NULL), "launching the gather kernel");
    /* before the event: what waits for the bucket waits for its CRCs */
    if (g->crc != NULL && (st = cu_crc_queue(g->crc, bucket + 1,
                                             g->kstream)) != FX_OK)
        return st;
    CU_TRY(cu.cuEventRecord(g->packed[slot], g->kstream), "cuEventRecord");
    if (g->in_place) { /* the provider reads the device slot itself */
        CU_TRY(cu.cuEventRecord(g->copied[slot], g->kstream),
               "cuEventRecord");
        g->busy[slot] = 1;
        return FX_OK;
    }
    /* The DMA runs on its own stream, so that the next bucket's kernel
     * overlaps this bucket's copy to the host. */
    CU_TRY(cu.cuStreamWaitEvent(g->cstream, g->packed[slot], 0),
           "cuStreamWaitEvent");
    CU_TRY(cu.cuMemcpyDtoHAsync(dst, dbuf, g->used[bucket], g->cstream),
           "cuMemcpyDtoHAsync (GPU bucket to pinned host)");
    CU_TRY(cu.cuEventRecord(g->copied[slot], g->cstream), "cuEventRecord");
    g->busy[slot] = 1;
    return FX_OK;
}

int mem_gather_done(struct mem_gather *g, int slot)
{
    if (!g->busy[slot])
        return 1;
    return cu.cuEventQuery(g->copied[slot]) != CUDA_ERROR_NOT_READY;
}

static fx_status_t mem_gather_wait_in(struct mem_gather *g, int slot)
{
    fx_status_t st;
    CUresult r;

    if (!g->busy[slot])
        return FX_OK;
    if ((st = cu_use_device(g->device)) != FX_OK)
        return st;
    if ((r = cu_event_poll(g->copied[slot], g->timeout_ms)) ==
        CUDA_ERROR_NOT_READY)
        return err_set(FX_ERR_TIMEOUT, "a GPU bucket of CUDA device %d "
                       "was not packed within %d ms (FABXFER_TIMEOUT_MS)",
                       g->device, g->timeout_ms);
    if (r != CUDA_SUCCESS)
        return err_set(FX_ERR_DEVICE, "packing a GPU bucket on CUDA device "
                       "%d failed: %s", g->device, cu_str(r));
    return FX_OK;
}

static void mem_gather_close_in(struct mem_gather *g)
{
    if (g == NULL)
        return;
    if (cu_use_device(g->device) == FX_OK) {
        if (g->kstream)
            cu.cuStreamSynchronize(g->kstream);
        if (g->cstream)
            cu.cuStreamSynchronize(g->cstream);
        if (g->dpool)
            cu.cuMemFree(g->dpool);
        for (int i = 0; i < g->slots; i++) {
            if (g->packed[i])
                cu.cuEventDestroy(g->packed[i]);
            if (g->copied[i])
                cu.cuEventDestroy(g->copied[i]);
        }
        if (g->runs)
            cu.cuMemFree(g->runs);
        if (g->kstream)
            cu.cuStreamDestroy(g->kstream);
        if (g->cstream)
            cu.cuStreamDestroy(g->cstream);
        if (g->mod)
            cu.cuModuleUnload(g->mod);
    }
    free(g->first);
    free(g->used);
    free(g);
}

/* ---- the exported calls ------------------------------------------------- */

fx_status_t mem_gather_open(int device, int slots, size_t bucket_size,
                            const struct mem_run *runs, const size_t *first,
                            uint32_t nbuckets, int in_place, int timeout_ms,
                            struct mem_gather **out)
{
    CUcontext c = cu_keep();
    fx_status_t st = mem_gather_open_in(device, slots, bucket_size, runs,
                                        first, nbuckets, in_place, timeout_ms,
                                        out);

    cu_restore(c);
    return st;
}

void mem_gather_checksum(struct mem_gather *g, struct mem_crc *c)
{
    g->crc = c;
}

void *mem_gather_slots(const struct mem_gather *g)
{
    return g != NULL ? (void *)(uintptr_t)g->dpool : NULL;
}

fx_status_t mem_gather_start(struct mem_gather *g, uint32_t bucket, int slot,
                             void *dst)
{
    CUcontext c = cu_keep();
    fx_status_t st = mem_gather_start_in(g, bucket, slot, dst);

    cu_restore(c);
    return st;
}

fx_status_t mem_gather_wait(struct mem_gather *g, int slot)
{
    CUcontext c = cu_keep();
    fx_status_t st = mem_gather_wait_in(g, slot);

    cu_restore(c);
    return st;
}

void mem_gather_close(struct mem_gather *g)
{
    CUcontext c = cu_keep();

    mem_gather_close_in(g);
    cu_restore(c);
}
