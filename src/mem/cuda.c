/*
 * CUDA through the driver API, loaded with dlopen("libcuda.so.1") at first
 * use: the library has no link-time CUDA dependency, a CUDA build runs
 * host-only where there is no driver (CI), and the driver we call is the
 * one installed, whatever toolkit built us. Every entry point we use is
 * one row of CU_FUNCS, resolved by its exact (versioned) symbol name.
 *
 * Threads: each call makes the device's primary context current on the
 * calling thread first (the packer thread and the application's threads
 * all get the same context, as the CUDA runtime would give them).
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem/cuda_int.h"
#include "mem/mem.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/log.h"

#define CU_PTR(fn, sym) __typeof__(fn) *fn;
struct cu_table cu;
#undef CU_PTR

/* CUDA >= 11.3 only, and only the direct path needs it: optional. */
static __typeof__(cuFlushGPUDirectRDMAWrites) *cu_flush;

#define DEV_MAX 64
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static fx_status_t cu_status;
static char cu_why[ERR_MSG_MAX];
static int cu_ndev;
static CUcontext cu_ctx[DEV_MAX];
static pthread_mutex_t cu_mu = PTHREAD_MUTEX_INITIALIZER;

int mem_cuda_built(void)
{
    return 1;
}

const char *cu_str(CUresult r)
{
    const char *s = NULL;

    if (cu.cuGetErrorString == NULL || cu.cuGetErrorString(r, &s) != 0 ||
        s == NULL)
        return "unknown CUDA error";
    return s;
}

static void cu_load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CUresult r;

    cu_status = FX_ERR_DEVICE;
    if (h == NULL) {
        snprintf(cu_why, sizeof(cu_why), "no CUDA driver on this machine "
                 "(dlopen libcuda.so.1: %s)", dlerror());
        return;
    }
#define CU_SYM(fn, sym)                                                      \
    if ((cu.fn = (__typeof__(fn) *)dlsym(h, sym)) == NULL) {                 \
        snprintf(cu_why, sizeof(cu_why), "the CUDA driver lacks %s: too "    \
                 "old for this fabxfer", sym);                              \
        return;                                                              \
    }
    CU_FUNCS(CU_SYM)
#undef CU_SYM
    cu_flush = (__typeof__(cu_flush))dlsym(h, "cuFlushGPUDirectRDMAWrites");
    /* The handle stays open for the life of the process, as the driver
     * keeps state behind it. */
    if ((r = cu.cuInit(0)) != CUDA_SUCCESS) {
        snprintf(cu_why, sizeof(cu_why), "cuInit failed: %s", cu_str(r));
        return;
    }
    if ((r = cu.cuDeviceGetCount(&cu_ndev)) != CUDA_SUCCESS || cu_ndev == 0) {
        snprintf(cu_why, sizeof(cu_why), "no CUDA device (%s)",
                 r ? cu_str(r) : "the driver counts 0");
        cu_ndev = 0;
        return;
    }
    if (cu_ndev > DEV_MAX)
        cu_ndev = DEV_MAX;
    cu_status = FX_OK;
}

fx_status_t mem_cuda_init(void)
{
    pthread_once(&cu_once, cu_load);
    if (cu_status != FX_OK)
        return err_set(cu_status, "%s", cu_why);
    return FX_OK;
}

int mem_cuda_device_count(void)
{
    return mem_cuda_init() == FX_OK ? cu_ndev : 0;
}

/* The driver is loaded and device is one of its devices. */
static fx_status_t known_device(int device)
{
    fx_status_t st;

    if ((st = mem_cuda_init()) != FX_OK)
        return st;
    if (device < 0 || device >= cu_ndev)
        return err_set(FX_ERR_INVALID, "CUDA device %d does not exist (this "
                       "machine has %d)", device, cu_ndev);
    return FX_OK;
}

/* Make device's primary context current on this thread. */
fx_status_t cu_use_device(int device)
{
    CUresult r = CUDA_SUCCESS;
    fx_status_t st;

    if ((st = known_device(device)) != FX_OK)
        return st;
    pthread_mutex_lock(&cu_mu);
    if (cu_ctx[device] == NULL) {
        CUdevice d;

        if ((r = cu.cuDeviceGet(&d, device)) == CUDA_SUCCESS)
            r = cu.cuDevicePrimaryCtxRetain(&cu_ctx[device], d);
    }
    pthread_mutex_unlock(&cu_mu);
    if (r == CUDA_SUCCESS)
        r = cu.cuCtxSetCurrent(cu_ctx[device]);
    if (r != CUDA_SUCCESS)
        return err_set(FX_ERR_DEVICE, "cannot use CUDA device %d: %s", device,
                       cu_str(r));
    return FX_OK;
}

fx_status_t mem_cuda_pci(int device, char *buf, size_t len)
{
    CUdevice d;
    fx_status_t st;

    /* No context: the PCI address is the device's, not a context's. */
    if ((st = known_device(device)) != FX_OK)
        return st;
    CU_TRY(cu.cuDeviceGet(&d, device), "cuDeviceGet");
    CU_TRY(cu.cuDeviceGetPCIBusId(buf, (int)len, d), "cuDeviceGetPCIBusId");
    return FX_OK;
}

fx_status_t mem_query(const void *ptr, struct mem_info *out)
{
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr, base = 0;
    unsigned int type = 0;
    size_t size = 0;
    int ord = -1;

    memset(out, 0, sizeof(*out));
    out->kind = FX_MEM_HOST;
    out->device = -1;
    pthread_once(&cu_once, cu_load);
    if (cu_status != FX_OK)
        return FX_OK; /* no driver: nothing is device memory */
    /* Pointer attributes need no current context (unified addressing):
     * asking leaves the caller's context alone. Memory the driver never
     * saw (malloc, mmap) is refused with CUDA_ERROR_INVALID_VALUE: host
     * memory. */
    if (cu.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 p) != CUDA_SUCCESS ||
        type != CU_MEMORYTYPE_DEVICE)
        return FX_OK;
    CU_TRY(cu.cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                    p),
           "cuPointerGetAttribute(DEVICE_ORDINAL)");
    CU_TRY(cu.cuPointerGetAttribute(&base,
                                    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p),
           "cuPointerGetAttribute(RANGE_START_ADDR)");
    CU_TRY(cu.cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                    p), "cuPointerGetAttribute(RANGE_SIZE)");
    /* Managed memory is no device-only allocation (FI_HMEM_DEVICE_ONLY);
     * a driver that cannot say is taken to mean a plain one. */
    if (cu.cuPointerGetAttribute(&out->managed,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED, p) !=
        CUDA_SUCCESS)
        out->managed = 0;
    out->kind = FX_MEM_CUDA;
    out->device = ord;
    out->alloc_base = base;
    out->alloc_len = size;
    return FX_OK;
}

fx_status_t mem_check(const char *what, const void *ptr, size_t len,
                      fx_mem_kind_t kind, int device)
{
    struct mem_info mi;
    fx_status_t st;
    uint64_t p = (uintptr_t)ptr;

    if (kind == FX_MEM_CUDA) {
        if ((st = mem_cuda_init()) != FX_OK)
            return err_prefix(st, "%s: CUDA memory requested", what);
        if ((st = known_device(device)) != FX_OK)
            return err_prefix(st, "%s", what);
    }
    if ((st = mem_query(ptr, &mi)) != FX_OK)
        return err_prefix(st, "%s", what);
    if (kind == FX_MEM_HOST && mi.kind == FX_MEM_CUDA)
        return err_set(FX_ERR_INVALID, "%s: %p is memory of CUDA device %d, "
                       "declared as host memory (use FX_MEM_CUDA)", what, ptr,
                       mi.device);
    if (kind == FX_MEM_HOST)
        return FX_OK;
    if (mi.kind != FX_MEM_CUDA)
        return err_set(FX_ERR_INVALID, "%s: %p is host memory, declared as "
                       "memory of CUDA device %d", what, ptr, device);
    if (mi.device != device)
        return err_set(FX_ERR_INVALID, "%s: %p is memory of CUDA device %d, "
                       "not of device %d as declared", what, ptr, mi.device,
                       device);
    if (p + len > mi.alloc_base + mi.alloc_len)
        return err_set(FX_ERR_RANGE, "%s: %zu bytes at %p cross the end of "
                       "their CUDA allocation (%llu bytes at 0x%llx) by %llu "
                       "bytes", what, len, ptr,
                       (unsigned long long)mi.alloc_len,
                       (unsigned long long)mi.alloc_base,
                       (unsigned long long)(p + len - mi.alloc_base -
                                            mi.alloc_len));
    return FX_OK;
}

static fx_status_t mem_dev_alloc_in(int device, size_t len, void **ptr)
{
    CUdeviceptr d = 0;
    fx_status_t st;

    if ((st = cu_use_device(device)) != FX_OK)
        return st;
    CU_TRY(cu.cuMemAlloc(&d, len), "cuMemAlloc");
    *ptr = (void *)(uintptr_t)d;
    return FX_OK;
}

static void mem_dev_free_in(void *ptr)
{
    if (ptr != NULL && mem_cuda_init() == FX_OK) {
        struct mem_info mi;

        /* freed under its own device's context */
        if (mem_query(ptr, &mi) == FX_OK && mi.device >= 0)
            cu_use_device(mi.device);
        cu.cuMemFree((CUdeviceptr)(uintptr_t)ptr);
    }
}

static fx_status_t mem_pinned_alloc_in(int device, size_t len, void **ptr)
{
    fx_status_t st;

    if ((st = cu_use_device(device)) != FX_OK)
        return st;
    /* Portable: any context may DMA from or to it. */
    CU_TRY(cu.cuMemHostAlloc(ptr, len, CU_MEMHOSTALLOC_PORTABLE),
           "cuMemHostAlloc (pinned host memory)");
    return FX_OK;
}

static void mem_pinned_free_in(void *ptr)
{
    CUcontext c = NULL;

    if (ptr == NULL || mem_cuda_init() != FX_OK)
        return;
    /* any context will do for portable pinned memory, but one it needs */
    if (cu.cuCtxGetCurrent(&c) != CUDA_SUCCESS || c == NULL)
        cu_use_device(0);
    cu.cuMemFreeHost(ptr);
}

static fx_status_t mem_copy_in(int device, void *dst, const void *src,
                               size_t len)
{
    fx_status_t st;

    if ((st = cu_use_device(device)) != FX_OK)
        return st;
    CU_TRY(cu.cuMemcpy((CUdeviceptr)(uintptr_t)dst,
                       (CUdeviceptr)(uintptr_t)src, len), "cuMemcpy");
    return FX_OK;
}

static fx_status_t mem_memset_in(int device, void *dst, int byte, size_t len)
{
    fx_status_t st;

    if ((st = cu_use_device(device)) != FX_OK)
        return st;
    CU_TRY(cu.cuMemsetD8((CUdeviceptr)(uintptr_t)dst, (unsigned char)byte,
                         len), "cuMemsetD8");
    return FX_OK;
}

/* ---- FP8 block scales ---------------------------------------------------- */

struct mem_scaler {
    int device;
    CUmodule mod;
    CUfunction fn;
};

static void mem_scaler_close_in(struct mem_scaler *sc)
{
    if (sc == NULL)
        return;
    if (sc->mod != NULL)
        cu.cuModuleUnload(sc->mod);
    free(sc);
}

static fx_status_t mem_scaler_open_in(int device, struct mem_scaler **out)
{
    struct mem_scaler *sc;
    fx_status_t st;
    CUresult r;

    if ((st = cu_use_device(device)) != FX_OK)
        return st;
    if ((sc = calloc(1, sizeof(*sc))) == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the GPU scaler");
    sc->device = device;
    if ((r = cu.cuModuleLoadData(&sc->mod, mem_gather_fatbin)) !=
            CUDA_SUCCESS ||
        (r = cu.cuModuleGetFunction(&sc->fn, sc->mod, "mem_scale_kernel")) !=
            CUDA_SUCCESS) {
        mem_scaler_close_in(sc);
        return err_set(FX_ERR_DEVICE, "FP8 block scales: loading "
                       "mem_scale_kernel: %s", cu_str(r));
    }
    *out = sc;
    return FX_OK;
}

static fx_status_t mem_scaler_run_in(struct mem_scaler *sc, const void *src,
                                     unsigned esize, uint64_t outer,
                                     uint64_t rows, uint64_t cols,
                                     uint32_t brows, uint32_t bcols,
                                     float *dst)
{
    CUdeviceptr w = (CUdeviceptr)(uintptr_t)src;
    CUdeviceptr out = (CUdeviceptr)(uintptr_t)dst;
    unsigned long long nr = rows, nc = cols;
    unsigned long long nbr = (rows + brows - 1) / brows;
    unsigned long long nbc = (cols + bcols - 1) / bcols;
    unsigned long long nb = outer * nbr * nbc;
    void *args[] = {&w, &esize, &nr, &nc, &brows, &bcols, &nbr, &nbc, &nb,
                    &out};
    unsigned grid = nb < 65535 ? (unsigned)nb : 65535;
    fx_status_t st;

    if ((st = cu_use_device(sc->device)) != FX_OK)
        return st;
    if (nb == 0)
        return FX_OK;
    CU_TRY(cu.cuLaunchKernel(sc->fn, grid, 1, 1, 256, 1, 1, 0, NULL, args,
                             NULL), "FP8 block scales: cuLaunchKernel");
    CU_TRY(cu.cuStreamSynchronize(NULL), "FP8 block scales: "
           "cuStreamSynchronize");
    return FX_OK;
}

CUresult cu_event_poll(CUevent ev, int timeout_ms)
{
    double deadline = clock_now() + timeout_ms / 1000.0;
    CUresult r;

    /* Polled, not cuEventSynchronize: a GPU that stops must end in an
     * error within the timeout, not in a thread blocked for good. */
    while ((r = cu.cuEventQuery(ev)) == CUDA_ERROR_NOT_READY &&
           clock_now() <= deadline)
        sched_yield();
    return r;
}

/* ---- the staged target's upload ---------------------------------------- */

struct mem_upload {
    int device;
    CUstream stream;
};

static fx_status_t mem_upload_open_in(int device, struct mem_upload **out)
{
    struct mem_upload *u;
    fx_status_t st;
    CUresult r;

    if ((st = cu_use_device(device)) != FX_OK)
        return st;
    if ((u = calloc(1, sizeof(*u))) == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the GPU upload");
    u->device = device;
    /* Its own stream: a version's copies must not wait for the
     * application's work on the legacy default stream. */
    if ((r = cu.cuStreamCreate(&u->stream, CU_STREAM_NON_BLOCKING)) !=
        CUDA_SUCCESS) {
        free(u);
        return err_set(FX_ERR_DEVICE, "cuStreamCreate: %s", cu_str(r));
    }
    *out = u;
    return FX_OK;
}

static fx_status_t mem_upload_queue_in(struct mem_upload *u, void *dev_base,
                                       const void *host_base,
                                       const struct mem_span *spans,
                                       size_t nspans)
{
    fx_status_t st;

    if ((st = cu_use_device(u->device)) != FX_OK)
        return st;
    for (size_t i = 0; i < nspans; i++)
        CU_TRY(cu.cuMemcpyHtoDAsync(
                   (CUdeviceptr)(uintptr_t)dev_base + spans[i].off,
                   (const char *)host_base + spans[i].off, spans[i].len,
                   u->stream), "cuMemcpyHtoDAsync (pinned slab to GPU)");
    return FX_OK;
}

static fx_status_t mem_upload_finish_in(struct mem_upload *u)
{
    fx_status_t st;

    if ((st = cu_use_device(u->device)) != FX_OK)
        return st;
    CU_TRY(cu.cuStreamSynchronize(u->stream),
           "waiting for the slab's copy to the GPU");
    return FX_OK;
}

static void mem_upload_close_in(struct mem_upload *u)
{
    if (u == NULL)
        return;
    if (cu_use_device(u->device) == FX_OK) {
        cu.cuStreamSynchronize(u->stream);
        cu.cuStreamDestroy(u->stream);
    }
    free(u);
}

/* ---- the exported calls ------------------------------------------------- */

/*
 * Each call leaves the calling thread's current context as it found it:
 * an application's own CUDA work must not move to another device, or to a
 * context of ours, because it called fabxfer.
 */
CUcontext cu_keep(void)
{
    CUcontext c = NULL;

    /* Loads the driver first (before that the table is empty), without
     * touching the thread's last error. */
    pthread_once(&cu_once, cu_load);
    if (cu_status != FX_OK || cu.cuCtxGetCurrent(&c) != CUDA_SUCCESS)
        c = NULL;
    return c;
}

void cu_restore(CUcontext c)
{
    if (cu_status == FX_OK)
        cu.cuCtxSetCurrent(c);
}

fx_status_t mem_enter_device(int device, void **saved)
{
    CUcontext c = cu_keep();
    fx_status_t st = cu_use_device(device);

    if (st != FX_OK)
        cu_restore(c);
    *saved = c;
    return st;
}

void mem_leave_device(void *saved)
{
    cu_restore((CUcontext)saved);
}

/* What device needs after the NIC wrote into its memory: nothing where it
 * orders those writes for its own context, else a flush, else it cannot
 * be trusted (the answer is the same for the life of the process). */
static fx_status_t flush_in(int device)
{
    static int need[DEV_MAX]; /* 0: unknown, 1: nothing, 2: flush */
    int order = 0, opts = 0;
    CUdevice d;
    CUresult r;
    fx_status_t st;

    if ((st = cu_use_device(device)) != FX_OK)
        return st;
    if (need[device] == 0) {
        if ((r = cu.cuDeviceGet(&d, device)) != CUDA_SUCCESS ||
            (r = cu.cuDeviceGetAttribute(&order,
                     CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING,
                     d)) != CUDA_SUCCESS ||
            (r = cu.cuDeviceGetAttribute(&opts,
                     CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
                     d)) != CUDA_SUCCESS)
            return err_set(FX_ERR_DEVICE, "CUDA device %d: cannot read its "
                           "GPUDirect RDMA attributes: %s", device,
                           cu_str(r));
        if (order >= CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER)
            need[device] = 1;
        else if ((opts & CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST) &&
                 cu_flush != NULL)
            need[device] = 2;
        else
            return err_set(FX_ERR_DEVICE, "CUDA device %d neither orders "
                           "GPUDirect RDMA writes nor can flush them: "
                           "use FABXFER_GPU_PATH=staged", device);
    }
    if (need[device] == 2 &&
        (r = cu_flush(
             CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
             CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER)) != CUDA_SUCCESS)
        return err_set(FX_ERR_DEVICE, "cuFlushGPUDirectRDMAWrites on CUDA "
                       "device %d failed: %s", device, cu_str(r));
    return FX_OK;
}

fx_status_t mem_rdma_flush(int device)
{
    CUcontext c = cu_keep();
    fx_status_t st = flush_in(device);

    cu_restore(c);
    return st;
}

fx_status_t mem_dev_alloc(int device, size_t len, void **ptr)
{
    CUcontext c = cu_keep();
    fx_status_t st = mem_dev_alloc_in(device, len, ptr);

    cu_restore(c);
    return st;
}

fx_status_t mem_pinned_alloc(int device, size_t len, void **ptr)
{
    CUcontext c = cu_keep();
    fx_status_t st = mem_pinned_alloc_in(device, len, ptr);

    cu_restore(c);
    return st;
}

fx_status_t mem_copy(int device, void *dst, const void *src, size_t len)
{
    CUcontext c = cu_keep();
    fx_status_t st = mem_copy_in(device, dst, src, len);

    cu_restore(c);
    return st;
}

fx_status_t mem_memset(int device, void *dst, int byte, size_t len)
{
    CUcontext c = cu_keep();
    fx_status_t st = mem_memset_in(device, dst, byte, len);

    cu_restore(c);
    return st;
}

fx_status_t mem_upload_open(int device, struct mem_upload **out)
{
    CUcontext c = cu_keep();
    fx_status_t st = mem_upload_open_in(device, out);

    cu_restore(c);
    return st;
}

fx_status_t mem_upload_queue(struct mem_upload *u, void *dev_base,
                             const void *host_base,
                             const struct mem_span *spans, size_t nspans)
{
    CUcontext c = cu_keep();
    fx_status_t st = mem_upload_queue_in(u, dev_base, host_base, spans,
                                         nspans);

    cu_restore(c);
    return st;
}

fx_status_t mem_upload_finish(struct mem_upload *u)
{
    CUcontext c = cu_keep();
    fx_status_t st = mem_upload_finish_in(u);

    cu_restore(c);
    return st;
}

void mem_dev_free(void *ptr)
{
    CUcontext c = cu_keep();

    mem_dev_free_in(ptr);
    cu_restore(c);
}

void mem_pinned_free(void *ptr)
{
    CUcontext c = cu_keep();

    mem_pinned_free_in(ptr);
    cu_restore(c);
}

fx_status_t mem_scaler_open(int device, struct mem_scaler **out)
{
    CUcontext c = cu_keep();
    fx_status_t st = mem_scaler_open_in(device, out);

    cu_restore(c);
    return st;
}

fx_status_t mem_scaler_run(struct mem_scaler *sc, const void *src,
                           unsigned esize, uint64_t outer, uint64_t rows,
                           uint64_t cols, uint32_t brows, uint32_t bcols,
                           float *dst)
{
    CUcontext c = cu_keep();
    fx_status_t st = mem_scaler_run_in(sc, src, esize, outer, rows, cols,
                                       brows, bcols, dst);

    cu_restore(c);
    return st;
}

void mem_scaler_close(struct mem_scaler *sc)
{
    CUcontext c = cu_keep();

    mem_scaler_close_in(sc);
    cu_restore(c);
}

void mem_upload_close(struct mem_upload *u)
{
    CUcontext c = cu_keep();

    mem_upload_close_in(u);
    cu_restore(c);
}

/* ---- the application's streams --------------------------------------- */

struct mem_event {
    int device;
    CUevent ev;
    int recorded;
};

/* NULL is the legacy default stream, whatever the caller was built with. */
static CUstream app_stream(void *stream)
{
    return stream != NULL ? (CUstream)stream : CU_STREAM_LEGACY;
}

fx_status_t mem_event_open(int device, struct mem_event **out)
{
    CUcontext c = cu_keep();
    struct mem_event *e = calloc(1, sizeof(*e));
    fx_status_t st = FX_ERR_NOMEM;
    CUresult r;

    *out = NULL;
    if (e == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory for a CUDA event");
    } else if ((st = cu_use_device(device)) == FX_OK &&
               (r = cu.cuEventCreate(&e->ev, CU_EVENT_DISABLE_TIMING)) !=
                   CUDA_SUCCESS) {
        st = err_set(FX_ERR_DEVICE, "cuEventCreate on CUDA device %d: %s",
                     device, cu_str(r));
    }
    cu_restore(c);
    if (st != FX_OK) {
        free(e);
        return st;
    }
    e->device = device;
    *out = e;
    return FX_OK;
}

void mem_event_close(struct mem_event *e)
{
    CUcontext c;

    if (e == NULL)
        return;
    c = cu_keep();
    if (cu_use_device(e->device) == FX_OK)
        cu.cuEventDestroy(e->ev);
    cu_restore(c);
    free(e);
}

fx_status_t mem_event_record(struct mem_event *e, void *stream)
{
    CUcontext c = cu_keep();
    fx_status_t st = cu_use_device(e->device);
    CUresult r;

    if (st == FX_OK &&
        (r = cu.cuEventRecord(e->ev, app_stream(stream))) != CUDA_SUCCESS)
        st = err_set(FX_ERR_DEVICE, "cuEventRecord on a stream of CUDA "
                     "device %d (is the stream that device's?): %s",
                     e->device, cu_str(r));
    cu_restore(c);
    e->recorded = st == FX_OK;
    return st;
}

int mem_event_done(struct mem_event *e)
{
    return !e->recorded || cu.cuEventQuery(e->ev) != CUDA_ERROR_NOT_READY;
}

fx_status_t mem_event_wait(struct mem_event *e, int timeout_ms)
{
    CUresult r;

    if (!e->recorded)
        return FX_OK;
    if ((r = cu_event_poll(e->ev, timeout_ms)) == CUDA_ERROR_NOT_READY)
        return err_set(FX_ERR_TIMEOUT, "the work queued on the "
                       "application's stream of CUDA device %d did not "
                       "finish within %d ms (FABXFER_TIMEOUT_MS)",
                       e->device, timeout_ms);
    if (r != CUDA_SUCCESS)
        return err_set(FX_ERR_DEVICE, "the application's stream of CUDA "
                       "device %d failed: %s", e->device, cu_str(r));
    return FX_OK;
}

fx_status_t mem_copy_async(int device, void *dst, const void *src,
                           size_t len, void *stream)
{
    CUcontext c = cu_keep();
    fx_status_t st = cu_use_device(device);
    CUresult r;

    if (st == FX_OK &&
        (r = cu.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst,
                              (CUdeviceptr)(uintptr_t)src, len,
                              app_stream(stream))) != CUDA_SUCCESS)
        st = err_set(FX_ERR_DEVICE, "cuMemcpyAsync of %zu bytes on a stream "
                     "of CUDA device %d: %s", len, device, cu_str(r));
    cu_restore(c);
    return st;
}

/* ---- the legacy default stream ---------------------------------------- */

/* shm's CUDA IPC lands a write with a cudaMemcpy between devices made by
 * the target's own libfabric (libfabric 2.6), which returns before the
 * copy is done: the bytes are on their way on this process's legacy
 * default stream when the write, and the version's notification after
 * it, have completed. An event recorded there now comes after them all,
 * and after the work the application queued there before (on a source,
 * what its tensors must hold before a peer or the NIC reads them). */
static fx_status_t legacy_event(int device, CUevent *ev)
{
    fx_status_t st;
    CUresult r;

    *ev = NULL;
    if ((st = cu_use_device(device)) != FX_OK)
        return st;
    if ((r = cu.cuEventCreate(ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
        *ev = NULL;
        return err_set(FX_ERR_DEVICE, "cuEventCreate on CUDA device %d: %s",
                       device, cu_str(r));
    }
    if ((r = cu.cuEventRecord(*ev, CU_STREAM_LEGACY)) != CUDA_SUCCESS)
        return err_set(FX_ERR_DEVICE, "cuEventRecord on the legacy default "
                       "stream of CUDA device %d: %s", device, cu_str(r));
    return FX_OK;
}

fx_status_t mem_legacy_wait(int device, int timeout_ms, const char *what)
{
    CUcontext c = cu_keep();
    CUevent ev;
    fx_status_t st = legacy_event(device, &ev);
    CUresult r = CUDA_SUCCESS;

    if (st == FX_OK &&
        (r = cu_event_poll(ev, timeout_ms)) == CUDA_ERROR_NOT_READY)
        st = err_set(FX_ERR_TIMEOUT, "%s (the work queued on the legacy "
                     "default stream of CUDA device %d) did not finish "
                     "within %d ms (FABXFER_TIMEOUT_MS)", what, device,
                     timeout_ms);
    else if (st == FX_OK && r != CUDA_SUCCESS)
        st = err_set(FX_ERR_DEVICE, "%s (the work queued on the legacy "
                     "default stream of CUDA device %d) failed: %s", what,
                     device, cu_str(r));
    if (ev != NULL)
        cu.cuEventDestroy(ev);
    cu_restore(c);
    return st;
}

fx_status_t mem_legacy_order(int device, void *stream)
{
    CUcontext c;
    CUevent ev;
    fx_status_t st;
    CUresult r;

    if (stream == NULL) /* the legacy stream itself: in order already */
        return FX_OK;
    c = cu_keep();
    if ((st = legacy_event(device, &ev)) == FX_OK &&
        (r = cu.cuStreamWaitEvent((CUstream)stream, ev, 0)) != CUDA_SUCCESS)
        st = err_set(FX_ERR_DEVICE, "cuStreamWaitEvent on a stream of CUDA "
                     "device %d (is the stream that device's?): %s", device,
                     cu_str(r));
    /* destroyed once the wait queued on it is done */
    if (ev != NULL)
        cu.cuEventDestroy(ev);
    cu_restore(c);
    return st;
}

fx_status_t mem_stream_open(int device, void **stream)
{
    CUcontext c = cu_keep();
    fx_status_t st = cu_use_device(device);
    CUstream s = NULL;
    CUresult r;

    if (st == FX_OK &&
        (r = cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
        st = err_set(FX_ERR_DEVICE, "cuStreamCreate on CUDA device %d: %s",
                     device, cu_str(r));
    cu_restore(c);
    *stream = s;
    return st;
}

void mem_stream_close(int device, void *stream)
{
    CUcontext c;

    if (stream == NULL)
        return;
    c = cu_keep();
    if (cu_use_device(device) == FX_OK) {
        cu.cuStreamSynchronize((CUstream)stream);
        cu.cuStreamDestroy((CUstream)stream);
    }
    cu_restore(c);
}
