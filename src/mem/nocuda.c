/*
 * The memory layer of a build without CUDA: host memory is all there is,
 * and every request for device memory says so.
 */
#include "mem/mem.h"
#include "util/error.h"

#define NO_CUDA                                                              \
    err_set(FX_ERR_UNSUPPORTED, "fabxfer was built without CUDA "            \
            "(configure --with-cuda)")

int mem_cuda_built(void)
{
    return 0;
}

fx_status_t mem_cuda_init(void)
{
    return NO_CUDA;
}

int mem_cuda_device_count(void)
{
    return 0;
}

fx_status_t mem_cuda_pci(int device, char *buf, size_t len)
{
    (void)device;
    if (len > 0)
        buf[0] = '\0';
    return NO_CUDA;
}

fx_status_t mem_query(const void *ptr, struct mem_info *out)
{
    (void)ptr;
    *out = (struct mem_info){FX_MEM_HOST, -1, 0, 0};
    return FX_OK;
}

fx_status_t mem_check(const char *what, const void *ptr, size_t len,
                      fx_mem_kind_t kind, int device)
{
    (void)ptr;
    (void)len;
    (void)device;
    if (kind != FX_MEM_HOST)
        return err_prefix(NO_CUDA, "%s: CUDA memory requested", what);
    return FX_OK;
}

fx_status_t mem_enter_device(int device, void **saved)
{
    (void)device;
    *saved = NULL;
    return NO_CUDA;
}

void mem_leave_device(void *saved)
{
    (void)saved;
}

fx_status_t mem_rdma_flush(int device)
{
    (void)device;
    return NO_CUDA;
}

fx_status_t mem_dev_alloc(int device, size_t len, void **ptr)
{
    (void)device;
    (void)len;
    *ptr = NULL;
    return NO_CUDA;
}

void mem_dev_free(void *ptr)
{
    (void)ptr;
}

fx_status_t mem_pinned_alloc(int device, size_t len, void **ptr)
{
    return mem_dev_alloc(device, len, ptr);
}

void mem_pinned_free(void *ptr)
{
    (void)ptr;
}

fx_status_t mem_copy(int device, void *dst, const void *src, size_t len)
{
    (void)device;
    (void)dst;
    (void)src;
    (void)len;
    return NO_CUDA;
}

fx_status_t mem_memset(int device, void *dst, int byte, size_t len)
{
    (void)device;
    (void)dst;
    (void)byte;
    (void)len;
    return NO_CUDA;
}

fx_status_t mem_gather_open(int device, int slots, size_t bucket_size,
                            const struct mem_run *runs, const size_t *first,
                            uint32_t nbuckets, int in_place, int timeout_ms,
                            struct mem_gather **out)
{
    (void)device;
    (void)slots;
    (void)bucket_size;
    (void)runs;
    (void)first;
    (void)nbuckets;
    (void)in_place;
    (void)timeout_ms;
    *out = NULL;
    return NO_CUDA;
}

void *mem_gather_slots(const struct mem_gather *g)
{
    (void)g;
    return NULL;
}

fx_status_t mem_gather_start(struct mem_gather *g, uint32_t bucket, int slot,
                             void *dst)
{
    (void)g;
    (void)bucket;
    (void)slot;
    (void)dst;
    return NO_CUDA;
}

int mem_gather_done(struct mem_gather *g, int slot)
{
    (void)g;
    (void)slot;
    return 1;
}

fx_status_t mem_gather_wait(struct mem_gather *g, int slot)
{
    (void)g;
    (void)slot;
    return NO_CUDA;
}

void mem_gather_close(struct mem_gather *g)
{
    (void)g;
}

fx_status_t mem_scaler_open(int device, struct mem_scaler **out)
{
    (void)device;
    *out = NULL;
    return NO_CUDA;
}

fx_status_t mem_scaler_run(struct mem_scaler *sc, const void *src,
                           unsigned esize, uint64_t outer, uint64_t rows,
                           uint64_t cols, uint32_t brows, uint32_t bcols,
                           float *dst)
{
    (void)sc;
    (void)src;
    (void)esize;
    (void)outer;
    (void)rows;
    (void)cols;
    (void)brows;
    (void)bcols;
    (void)dst;
    return NO_CUDA;
}

void mem_scaler_close(struct mem_scaler *sc)
{
    (void)sc;
}

fx_status_t mem_upload_open(int device, struct mem_upload **out)
{
    (void)device;
    *out = NULL;
    return NO_CUDA;
}

fx_status_t mem_upload_queue(struct mem_upload *u, void *dev_base,
                             const void *host_base,
                             const struct mem_span *spans, size_t nspans)
{
    (void)u;
    (void)dev_base;
    (void)host_base;
    (void)spans;
    (void)nspans;
    return NO_CUDA;
}

fx_status_t mem_upload_finish(struct mem_upload *u)
{
    (void)u;
    return NO_CUDA;
}

void mem_upload_close(struct mem_upload *u)
{
    (void)u;
}

fx_status_t mem_event_open(int device, struct mem_event **out)
{
    (void)device;
    *out = NULL;
    return NO_CUDA;
}

void mem_event_close(struct mem_event *e)
{
    (void)e;
}

fx_status_t mem_event_record(struct mem_event *e, void *stream)
{
    (void)e;
    (void)stream;
    return NO_CUDA;
}

int mem_event_done(struct mem_event *e)
{
    (void)e;
    return 1;
}

fx_status_t mem_event_wait(struct mem_event *e, int timeout_ms)
{
    (void)e;
    (void)timeout_ms;
    return NO_CUDA;
}

fx_status_t mem_copy_async(int device, void *dst, const void *src,
                           size_t len, void *stream)
{
    (void)device;
    (void)dst;
    (void)src;
    (void)len;
    (void)stream;
    return NO_CUDA;
}

fx_status_t mem_legacy_wait(int device, int timeout_ms, const char *what)
{
    (void)device;
    (void)timeout_ms;
    (void)what;
    return NO_CUDA;
}

fx_status_t mem_legacy_order(int device, void *stream)
{
    (void)device;
    (void)stream;
    return NO_CUDA;
}

fx_status_t mem_stream_open(int device, void **stream)
{
    (void)device;
    *stream = NULL;
    return NO_CUDA;
}

void mem_stream_close(int device, void *stream)
{
    (void)device;
    (void)stream;
}

fx_status_t mem_crc_open(int device, const struct mem_crc_range *ranges,
                         const size_t *group0, uint32_t ngroups,
                         uint32_t nwords, int timeout_ms,
                         struct mem_crc **out)
{
    (void)device;
    (void)ranges;
    (void)group0;
    (void)ngroups;
    (void)nwords;
    (void)timeout_ms;
    *out = NULL;
    return NO_CUDA;
}

fx_status_t mem_crc_begin(struct mem_crc *c, uint64_t version, uint32_t every)
{
    (void)c;
    (void)version;
    (void)every;
    return NO_CUDA;
}

fx_status_t mem_crc_run(struct mem_crc *c, uint32_t group)
{
    (void)c;
    (void)group;
    return NO_CUDA;
}

fx_status_t mem_crc_wait(struct mem_crc *c, const uint32_t **words)
{
    (void)c;
    *words = NULL;
    return NO_CUDA;
}

void mem_crc_close(struct mem_crc *c)
{
    (void)c;
}

void mem_gather_checksum(struct mem_gather *g, struct mem_crc *c)
{
    (void)g;
    (void)c;
}
