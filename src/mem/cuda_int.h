/*
 * What the files of src/mem that call CUDA share (cuda.c: the driver's
 * table, loaded once; cuda_crc.c: the checksum kernels; cuda_gather.c:
 * the packer, which queues them): never included outside src/mem, and
 * hidden like every symbol of the library.
 */
#ifndef FX_MEM_CUDA_INT_H
#define FX_MEM_CUDA_INT_H

#include <cuda.h>
#include <stdint.h>

#include "fabxfer.h"

/* The fatbin of gather.cu (sm_80, sm_90 and PTX for later GPUs). */
extern const unsigned char mem_gather_fatbin[];

#define CU_FUNCS(X)                                                          \
    X(cuInit, "cuInit")                                                      \
    X(cuGetErrorString, "cuGetErrorString")                                  \
    X(cuDeviceGetCount, "cuDeviceGetCount")                                  \
    X(cuDeviceGet, "cuDeviceGet")                                            \
    X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId")                            \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute")                          \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")                  \
    X(cuCtxSetCurrent, "cuCtxSetCurrent")                                    \
    X(cuCtxGetCurrent, "cuCtxGetCurrent")                                    \
    X(cuPointerGetAttribute, "cuPointerGetAttribute")                        \
    X(cuMemGetAddressRange, "cuMemGetAddressRange_v2")                       \
    X(cuMemAlloc, "cuMemAlloc_v2")                                           \
    X(cuMemFree, "cuMemFree_v2")                                             \
    X(cuMemHostAlloc, "cuMemHostAlloc")                                      \
    X(cuMemFreeHost, "cuMemFreeHost")                                        \
    X(cuMemcpy, "cuMemcpy")                                                  \
    X(cuMemsetD8, "cuMemsetD8_v2")                                           \
    X(cuMemcpyHtoD, "cuMemcpyHtoD_v2")                                       \
    X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")                             \
    X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")                             \
    X(cuMemcpyAsync, "cuMemcpyAsync")                                        \
    X(cuStreamCreate, "cuStreamCreate")                                      \
    X(cuStreamDestroy, "cuStreamDestroy_v2")                                 \
    X(cuStreamWaitEvent, "cuStreamWaitEvent")                                \
    X(cuStreamSynchronize, "cuStreamSynchronize")                            \
    X(cuEventCreate, "cuEventCreate")                                        \
    X(cuEventDestroy, "cuEventDestroy_v2")                                   \
    X(cuEventRecord, "cuEventRecord")                                        \
    X(cuEventQuery, "cuEventQuery")                                          \
    X(cuEventSynchronize, "cuEventSynchronize")                              \
    X(cuModuleLoadData, "cuModuleLoadData")                                  \
    X(cuModuleUnload, "cuModuleUnload")                                      \
    X(cuModuleGetFunction, "cuModuleGetFunction")                            \
    X(cuLaunchKernel, "cuLaunchKernel")


#define CU_PTR(fn, sym) __typeof__(fn) *fn;
struct cu_table {
    CU_FUNCS(CU_PTR)
};
#undef CU_PTR
extern struct cu_table cu;

/* The driver's words for r. */
const char *cu_str(CUresult r);
/* Make device's primary context current on this thread (loads the
 * driver first). */
fx_status_t cu_use_device(int device);
/* Each exported call leaves the calling thread's current context as it
 * found it: cu_keep() before, cu_restore() after. */
CUcontext cu_keep(void);
void cu_restore(CUcontext c);
/* Polls ev until it has run, at most timeout_ms, the thread yielding
 * between looks: what cuEventQuery said last, CUDA_ERROR_NOT_READY past
 * the timeout. */
CUresult cu_event_poll(CUevent ev, int timeout_ms);

/* cuda_crc.c: group's checksum kernel on stream, the context current. */
struct mem_crc;
fx_status_t cu_crc_queue(struct mem_crc *c, uint32_t group, CUstream stream);

#define CU_TRY(call, what)                                                   \
    do {                                                                     \
        CUresult r_ = (call);                                                \
        if (r_ != CUDA_SUCCESS)                                              \
            return err_set(FX_ERR_DEVICE, "%s: %s", what, cu_str(r_));      \
    } while (0)

#endif
