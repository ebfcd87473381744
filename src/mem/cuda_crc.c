/*
 * Checksums of GPU memory (mem.h's mem_crc): what a host thread cannot
 * read, the device sums itself, in one kernel per group of ranges
 * (gather.cu's mem_crc_kernel), into words that come back to the host in
 * one copy. The ranges never change for a session (the tensors, the
 * device buckets, the landed pieces stay where they are), so they and
 * their chunks' index go to the device once.
 */
#include <stdlib.h>
#include <string.h>

#include "mem/cuda_int.h"
#include "mem/mem.h"
#include "util/crc32c.h"
#include "util/crc32c_chunk.h"
#include "util/error.h"

#define CRC_BLOCKS 2048 /* a grid of these (grid-stride): the GPU's fill */

/* The kernel's argument, as gather.cu's struct crc_args. */
struct crc_args {
    CUdeviceptr r, chunk0;
    unsigned long long phase;
    CUdeviceptr words;
    unsigned n, every;
    unsigned chunk, pad;
    unsigned pw[CRC_POWERS];
};

struct mem_crc {
    int device;
    CUmodule mod;
    CUfunction fn;
    CUstream stream;
    CUevent done;
    CUdeviceptr ranges, chunk0, words;
    uint32_t *host;         /* pinned: the words, back */
    uint32_t nwords;
    size_t *group0;         /* [ngroups + 1] */
    uint64_t *nchunks;      /* per group */
    uint32_t *chunk;        /* per group: bytes a thread sums */
    uint32_t *pw;           /* per group: CRC_POWERS powers of its chunk */
    uint32_t ngroups;
    struct crc_args args;   /* phase and every; per launch the group's
                             * ranges, chunk and powers */
    int timeout_ms;
};

static void crc_close_in(struct mem_crc *c)
{
    if (c == NULL)
        return;
    if (cu_use_device(c->device) == FX_OK) {
        if (c->stream)
            cu.cuStreamSynchronize(c->stream);
        if (c->ranges)
            cu.cuMemFree(c->ranges);
        if (c->chunk0)
            cu.cuMemFree(c->chunk0);
        if (c->words)
            cu.cuMemFree(c->words);
        if (c->host)
            cu.cuMemFreeHost(c->host);
        if (c->done)
            cu.cuEventDestroy(c->done);
        if (c->stream)
            cu.cuStreamDestroy(c->stream);
        if (c->mod)
            cu.cuModuleUnload(c->mod);
    }
    free(c->group0);
    free(c->nchunks);
    free(c->chunk);
    free(c->pw);
    free(c);
}

static fx_status_t crc_open_in(int device, const struct mem_crc_range *ranges,
                               const size_t *group0, uint32_t ngroups,
                               uint32_t nwords, int timeout_ms,
                               struct mem_crc **out)
{
    size_t n = group0[ngroups];
    struct mem_crc *c;
    uint64_t *chunk0 = NULL;
    fx_status_t st;
    CUresult r;

    if ((st = cu_use_device(device)) != FX_OK)
        return st;
    if ((c = calloc(1, sizeof(*c))) == NULL ||
        (c->group0 = calloc(ngroups + 1, sizeof(*c->group0))) == NULL ||
        (c->nchunks = calloc(ngroups + 1, sizeof(*c->nchunks))) == NULL ||
        (c->chunk = calloc(ngroups + 1, sizeof(*c->chunk))) == NULL ||
        (c->pw = calloc((size_t)(ngroups + 1) * CRC_POWERS,
                        sizeof(*c->pw))) == NULL ||
        (chunk0 = calloc(n + 1, sizeof(*chunk0))) == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory for %zu GPU checksum ranges",
                     n);
        goto fail;
    }
    c->device = device;
    c->ngroups = ngroups;
    c->nwords = nwords;
    c->timeout_ms = timeout_ms;
    for (uint32_t g = 0; g <= ngroups; g++)
        c->group0[g] = group0[g];
    /* each group's chunk by its bytes: a bucket's kernel is small, the
     * tensors' at the push's start or a target's may be large */
    for (uint32_t g = 0; g < ngroups; g++) {
        uint64_t bytes = 0;

        for (size_t i = group0[g]; i < group0[g + 1]; i++)
            bytes += ranges[i].len;
        c->chunk[g] = crc_chunk_size(bytes);
        for (size_t i = group0[g]; i < group0[g + 1]; i++)
            chunk0[i + 1] = chunk0[i] + (ranges[i].len + c->chunk[g] - 1) /
                                            c->chunk[g];
        c->nchunks[g] = chunk0[group0[g + 1]] - chunk0[group0[g]];
        for (int b = 0; b < CRC_POWERS; b++)
            c->pw[(size_t)g * CRC_POWERS + (size_t)b] =
                crc32c_shift_factor((uint64_t)c->chunk[g] << b);
    }
#define C_TRY(call, what)                                                    \
    if ((r = (call)) != CUDA_SUCCESS) {                                      \
        st = err_set(FX_ERR_DEVICE, "GPU checksums: %s: %s", what,          \
                     cu_str(r));                                             \
        goto fail;                                                           \
    }
    C_TRY(cu.cuModuleLoadData(&c->mod, mem_gather_fatbin),
          "loading the kernels (cuModuleLoadData)");
    C_TRY(cu.cuModuleGetFunction(&c->fn, c->mod, "mem_crc_kernel"),
          "cuModuleGetFunction(mem_crc_kernel)");
    /* Blocking: after the work on the legacy default stream (the
     * application's, and the provider's copies into this rank). */
    C_TRY(cu.cuStreamCreate(&c->stream, CU_STREAM_DEFAULT),
          "cuStreamCreate");
    C_TRY(cu.cuEventCreate(&c->done, CU_EVENT_DISABLE_TIMING),
          "cuEventCreate");
    C_TRY(cu.cuMemAlloc(&c->ranges, (n ? n : 1) * sizeof(*ranges)),
          "cuMemAlloc");
    C_TRY(cu.cuMemAlloc(&c->chunk0, (n + 1) * sizeof(*chunk0)), "cuMemAlloc");
    C_TRY(cu.cuMemAlloc(&c->words, (nwords ? nwords : 1) * sizeof(uint32_t)),
          "cuMemAlloc");
    C_TRY(cu.cuMemHostAlloc((void **)&c->host,
                            (nwords ? nwords : 1) * sizeof(uint32_t), 0),
          "cuMemHostAlloc");
    if (n > 0)
        C_TRY(cu.cuMemcpyHtoD(c->ranges, ranges, n * sizeof(*ranges)),
              "uploading the ranges");
    C_TRY(cu.cuMemcpyHtoD(c->chunk0, chunk0, (n + 1) * sizeof(*chunk0)),
          "uploading the ranges");
#undef C_TRY
    free(chunk0);
    *out = c;
    return FX_OK;
fail:
    free(chunk0);
    crc_close_in(c);
    return st;
}

/* Group g's kernel on stream. */
static fx_status_t crc_queue(struct mem_crc *c, uint32_t g, CUstream stream)
{
    struct crc_args a = c->args;
    void *args[] = {&a};
    uint64_t blocks = (c->nchunks[g] + 255) / 256;

    if (g >= c->ngroups)
        return err_set(FX_ERR_STATE, "GPU checksums: no group %u (of %u)", g,
                       c->ngroups);
    if (c->nchunks[g] == 0)
        return FX_OK;
    a.r = c->ranges + c->group0[g] * sizeof(struct mem_crc_range);
    a.chunk0 = c->chunk0 + c->group0[g] * sizeof(uint64_t);
    a.n = (unsigned)(c->group0[g + 1] - c->group0[g]);
    a.words = c->words;
    a.chunk = c->chunk[g];
    memcpy(a.pw, c->pw + (size_t)g * CRC_POWERS, sizeof(a.pw));
    CU_TRY(cu.cuLaunchKernel(c->fn, blocks < CRC_BLOCKS ? (unsigned)blocks
                                                        : CRC_BLOCKS,
                             1, 1, 256, 1, 1, 0, stream, args, NULL),
           "GPU checksums: launching mem_crc_kernel");
    return FX_OK;
}

static fx_status_t crc_begin_in(struct mem_crc *c, uint64_t version,
                                uint32_t every)
{
    fx_status_t st;

    if ((st = cu_use_device(c->device)) != FX_OK)
        return st;
    c->args.phase = crc_sample_phase(version, every);
    c->args.every = every;
    /* on the legacy default stream: before every stream that sums */
    CU_TRY(cu.cuMemsetD8(c->words, 0, (size_t)c->nwords * sizeof(uint32_t)),
           "GPU checksums: cuMemsetD8");
    return FX_OK;
}

static fx_status_t crc_wait_in(struct mem_crc *c, const uint32_t **words)
{
    fx_status_t st;
    CUresult r;

    if ((st = cu_use_device(c->device)) != FX_OK)
        return st;
    CU_TRY(cu.cuMemcpyDtoHAsync(c->host, c->words,
                                (size_t)c->nwords * sizeof(uint32_t),
                                c->stream),
           "GPU checksums: cuMemcpyDtoHAsync");
    CU_TRY(cu.cuEventRecord(c->done, c->stream), "cuEventRecord");
    if ((r = cu_event_poll(c->done, c->timeout_ms)) == CUDA_ERROR_NOT_READY)
        return err_set(FX_ERR_TIMEOUT, "the checksums of CUDA device %d's "
                       "memory took longer than %d ms (FABXFER_TIMEOUT_MS)",
                       c->device, c->timeout_ms);
    if (r != CUDA_SUCCESS)
        return err_set(FX_ERR_DEVICE, "the checksums of CUDA device %d's "
                       "memory failed: %s", c->device, cu_str(r));
    *words = c->host;
    return FX_OK;
}

/* ---- the exported calls (the caller's context kept) -------------------- */

fx_status_t mem_crc_open(int device, const struct mem_crc_range *ranges,
                         const size_t *group0, uint32_t ngroups,
                         uint32_t nwords, int timeout_ms,
                         struct mem_crc **out)
{
    CUcontext k = cu_keep();
    fx_status_t st = crc_open_in(device, ranges, group0, ngroups, nwords,
                                 timeout_ms, out);

    cu_restore(k);
    return st;
}

fx_status_t mem_crc_begin(struct mem_crc *c, uint64_t version, uint32_t every)
{
    CUcontext k = cu_keep();
    fx_status_t st = crc_begin_in(c, version, every);

    cu_restore(k);
    return st;
}

fx_status_t mem_crc_run(struct mem_crc *c, uint32_t group)
{
    CUcontext k = cu_keep();
    fx_status_t st = cu_use_device(c->device);

    if (st == FX_OK)
        st = crc_queue(c, group, c->stream);
    cu_restore(k);
    return st;
}

/* For mem_gather_start (cuda_gather.c), its context current: bucket k's group
 * on the gather's stream, right after its kernel. */
fx_status_t cu_crc_queue(struct mem_crc *c, uint32_t group, CUstream stream)
{
    return crc_queue(c, group, stream);
}

fx_status_t mem_crc_wait(struct mem_crc *c, const uint32_t **words)
{
    CUcontext k = cu_keep();
    fx_status_t st = crc_wait_in(c, words);

    cu_restore(k);
    return st;
}

void mem_crc_close(struct mem_crc *c)
{
    CUcontext k = cu_keep();

    crc_close_in(c);
    cu_restore(k);
}
