/*
 * The memory layer: what a pointer is (host or which CUDA device, and the
 * allocation around it), pinned host memory for buckets and slabs, and the
 * GPU side of the staged path (gather of many device runs into host
 * buckets, host slabs copied back to the device). src/mem/cuda.c is the
 * only file that includes CUDA headers; it reaches the driver through
 * dlopen("libcuda.so.1") at first use, so a CUDA build still loads and runs
 * host-only where no driver is installed. src/mem/nocuda.c answers every
 * call of a build without CUDA.
 */
#ifndef FX_MEM_MEM_H
#define FX_MEM_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "fabxfer.h"

/* 1 if this build has CUDA support. */
int mem_cuda_built(void);

/* Load the driver and count devices (once); an error says why CUDA cannot
 * be used: built without it, no driver, no device. */
fx_status_t mem_cuda_init(void);
int mem_cuda_device_count(void);

/* The PCI address of a CUDA device, "dddd:bb:dd.f" (for NIC choice). */
fx_status_t mem_cuda_pci(int device, char *buf, size_t len);

struct mem_info {
    fx_mem_kind_t kind;
    int device;               /* FX_MEM_CUDA: device ordinal */
    uint64_t alloc_base;      /* FX_MEM_CUDA: the allocation around it */
    uint64_t alloc_len;
    int managed;              /* FX_MEM_CUDA: managed (host-accessible) */
};

/* What ptr points to. Host memory when CUDA is absent or the driver does
 * not know the pointer. */
fx_status_t mem_query(const void *ptr, struct mem_info *out);

/* The checks of a region before it is registered: kind and device as
 * declared, and [ptr, ptr+len) inside one allocation. what names the
 * caller in errors. */
fx_status_t mem_check(const char *what, const void *ptr, size_t len,
                      fx_mem_kind_t kind, int device);

/* Device memory (tests and benchmarks), pinned host memory (buckets,
 * slabs), and a synchronous copy in any direction. */
fx_status_t mem_dev_alloc(int device, size_t len, void **ptr);
void mem_dev_free(void *ptr);
fx_status_t mem_pinned_alloc(int device, size_t len, void **ptr);
void mem_pinned_free(void *ptr);
fx_status_t mem_copy(int device, void *dst, const void *src, size_t len);
fx_status_t mem_memset(int device, void *dst, int byte, size_t len);

/* The direct path. Registering device memory with a provider needs the
 * device's context current on the registering thread: mem_enter_device
 * makes it so, mem_leave_device puts back what the thread had. After the
 * NIC wrote into device memory, and before anyone reads it,
 * mem_rdma_flush makes the writes visible to the device (a no-op where
 * the device orders them itself; an error where it can do neither). */
fx_status_t mem_enter_device(int device, void **saved);
void mem_leave_device(void *saved);
fx_status_t mem_rdma_flush(int device);

/* One copy of a gather: len bytes to offset dst of the bucket from device
 * address src, converted by conv (util/convert.h: conv_src_len(conv, len)
 * bytes read) or copied; a conversion to FP8 divides element k by the f32
 * at device address scale + 4 ((phase + k) / block). The GPU reads this
 * struct as it is. */
struct mem_run {
    uint64_t src;
    uint64_t dst;
    uint64_t len;
    uint64_t conv;
    uint64_t scale;
    uint32_t phase, block;
};

/* FP8 block scales on the GPU: for a dense [outer, rows, cols] piece of a
 * weight (esize 2: bf16, 4: f32) at device address src, the scale of each
 * block of brows x bcols (conv_scale_of of its largest magnitude) to the
 * device floats at dst, dense [outer, ceil(rows/brows),
 * ceil(cols/bcols)]; queued on the legacy default stream (after the
 * application's work there, before the gathers), waited for. */
struct mem_scaler;
fx_status_t mem_scaler_open(int device, struct mem_scaler **out);
fx_status_t mem_scaler_run(struct mem_scaler *sc, const void *src,
                           unsigned esize, uint64_t outer, uint64_t rows,
                           uint64_t cols, uint32_t brows, uint32_t bcols,
                           float *dst);
void mem_scaler_close(struct mem_scaler *sc);

/*
 * The staged source's packer on one device. Runs of every bucket are
 * uploaded once (mem_gather_open); packing bucket k into host slot buffer
 * dst is one gather kernel into a device slot and one DMA to the host, on
 * the gather's streams, recorded by an event. Several buckets may be in
 * flight; mem_gather_done() says whether bucket k's bytes are in host
 * memory without blocking, mem_gather_wait() waits for it, at most
 * timeout_ms (a hung GPU is an error, not a hang), and never on the
 * device as a whole).
 * The device slots are one allocation of slots x bucket_size
 * (mem_gather_slots()), bucket k in slot k % slots. in_place: they are
 * the buckets, for a provider that writes device memory itself: no DMA,
 * and dst is not used.
 */
struct mem_gather;
fx_status_t mem_gather_open(int device, int slots, size_t bucket_size,
                            const struct mem_run *runs, const size_t *first,
                            uint32_t nbuckets, int in_place, int timeout_ms,
                            struct mem_gather **out);
void *mem_gather_slots(const struct mem_gather *g);
fx_status_t mem_gather_start(struct mem_gather *g, uint32_t bucket, int slot,
                             void *dst);
int mem_gather_done(struct mem_gather *g, int slot);
fx_status_t mem_gather_wait(struct mem_gather *g, int slot);
void mem_gather_close(struct mem_gather *g);

/*
 * Checksums of GPU memory (FABXFER_VERIFY): the raw CRC32C (util/crc32c.h)
 * of many device ranges, each multiplied by its factor (crc32c_shift_factor
 * of the bytes after it in its unit) and added (xor) into its word, so that
 * pieces of one unit, taken anywhere, sum to the unit's CRC. Ranges come in
 * groups, launched apart: group g is [group0[g], group0[g + 1]) of the
 * ranges. A range is due in a version where every is 0 or
 * (pu + version) % every == 0 (util/crc32c_chunk.h's crc_sample_due; pu
 * is its unit's sampling group, engine.h's eng_verify_shift).
 * begin zeroes the words; run queues group g's kernel on the checksum's
 * own stream (blocking with respect to the legacy default stream, so that
 * it reads what work queued there wrote, the provider's copies into this
 * rank included);
 * mem_gather_start queues bucket k's group (k + 1) right after its gather
 * kernel where mem_gather_checksum gave one; wait waits for the stream, at
 * most timeout_ms, and gives the words in host memory (nwords of them),
 * good until the next begin.
 */
struct mem_crc_range {
    uint64_t src;    /* device address */
    uint64_t len;
    uint32_t word;   /* the word it adds into */
    uint32_t factor; /* x^(8 x its unit's bytes after it) */
    uint32_t pu;     /* the unit's sampling group */
    uint32_t pad;
};
struct mem_crc;
fx_status_t mem_crc_open(int device, const struct mem_crc_range *ranges,
                         const size_t *group0, uint32_t ngroups,
                         uint32_t nwords, int timeout_ms,
                         struct mem_crc **out);
fx_status_t mem_crc_begin(struct mem_crc *c, uint64_t version,
                          uint32_t every);
fx_status_t mem_crc_run(struct mem_crc *c, uint32_t group);
fx_status_t mem_crc_wait(struct mem_crc *c, const uint32_t **words);
void mem_crc_close(struct mem_crc *c);
void mem_gather_checksum(struct mem_gather *g, struct mem_crc *c);

/* The staged target: queue copies of spans of a pinned host slab to the
 * device on the upload's own stream (mem_upload_queue, returns at once),
 * then wait for all of them (mem_upload_finish). */
struct mem_span {
    uint64_t off;
    uint64_t len;
};
struct mem_upload;
fx_status_t mem_upload_open(int device, struct mem_upload **out);
fx_status_t mem_upload_queue(struct mem_upload *u, void *dev_base,
                             const void *host_base,
                             const struct mem_span *spans, size_t nspans);
fx_status_t mem_upload_finish(struct mem_upload *u);
void mem_upload_close(struct mem_upload *u);

/* The application's streams (a CUstream or cudaStream_t; NULL: the
 * legacy default stream). An event marks the work queued on a stream so
 * far (mem_event_record); done says whether it has run (1 also when it
 * failed: wait tells which); wait polls for it, at most timeout_ms, so
 * that a GPU that stops is an error, not a hang. mem_copy_async queues a
 * copy in any direction on the stream and returns. */
struct mem_event;
fx_status_t mem_event_open(int device, struct mem_event **out);
void mem_event_close(struct mem_event *e);
fx_status_t mem_event_record(struct mem_event *e, void *stream);
int mem_event_done(struct mem_event *e);
fx_status_t mem_event_wait(struct mem_event *e, int timeout_ms);
fx_status_t mem_copy_async(int device, void *dst, const void *src,
                           size_t len, void *stream);

/* The work queued so far on device's legacy default stream: a source's
 * tensors are read by others (a peer's copy, the NIC) only after it, and
 * what a provider copied into this rank's device memory itself (shm's
 * CUDA IPC) is still on its way there when the version's notifications
 * come (cuda.c says why). mem_legacy_wait waits for it, at most
 * timeout_ms, an error naming what (what that work was) if it does not
 * end; mem_legacy_order has stream wait for it instead (NULL, the legacy
 * stream itself: nothing to do). */
fx_status_t mem_legacy_wait(int device, int timeout_ms, const char *what);
fx_status_t mem_legacy_order(int device, void *stream);

/* A stream that waits for no other (CU_STREAM_NON_BLOCKING), as an
 * application's own often does (torch.cuda.Stream): what tests read
 * through. Close waits for its work. */
fx_status_t mem_stream_open(int device, void **stream);
void mem_stream_close(int device, void *stream);

#endif
