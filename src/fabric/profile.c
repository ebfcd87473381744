/*
 * Provider rules in one place: from the attributes fi_getinfo returned,
 * decide how fabxfer addresses remote memory, where keys come from, which
 * descriptors it passes, how large a write may be and how targets learn that
 * data arrived -- or refuse the provider with a reason. Pure: no fabric is
 * opened here, so unit tests feed it the attributes of efa, verbs and cxi.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include "fabric/fabric_int.h"
#include "util/error.h"

/* Largest single write per provider. tcp;ofi_rxm and shm were measured on
 * loopback (fabxfer-bench p2p --sizes 64M,1G --reps 5, FABXFER_CHUNK_SIZE
 * from 1M to 1G, 2-core Debian 12, libfabric 1.17): 1 MiB writes ran 1.26
 * to 1.48 times faster than whole-buffer writes on tcp (they stay in
 * cache), while shm did best with 8 MiB and up. The RDMA providers use a
 * size that reaches line rate in published measurements (EFA needs >= 1
 * MiB blocks); they are not measured here. */
/* pack_max: pieces shorter than this are cheaper to copy into a bucket
 * than to write on their own. One write costs about 6 us on tcp;ofi_rxm
 * and 2-2.5 us on shm here, in which memcpy moves about 50 KiB and 20 KiB;
 * packing also pays a bucket write, so the break-even is below that. */
static const struct prov_defaults {
    const char *prov;
    size_t chunk;
    size_t pack_max;
} prov_defaults[] = {
    {"efa", 8u << 20, 16u << 10},
    {"cxi", 8u << 20, 16u << 10},
    {"verbs;ofi_rxm", 8u << 20, 16u << 10},
    {"tcp;ofi_rxm", 1u << 20, 32u << 10},
    {"tcp", 1u << 20, 32u << 10},
    {"shm", 8u << 20, 16u << 10},
};
static const struct prov_defaults other_defaults = {"", 8u << 20, 16u << 10};

static const struct prov_defaults *defaults_of(const char *prov)
{
    for (size_t i = 0; i < sizeof(prov_defaults) / sizeof(prov_defaults[0]);
         i++)
        if (strcmp(prov, prov_defaults[i].prov) == 0)
            return &prov_defaults[i];
    return &other_defaults;
}

size_t fab_default_chunk(const char *prov)
{
    return defaults_of(prov)->chunk;
}

size_t fab_default_pack_max(const char *prov)
{
    return defaults_of(prov)->pack_max;
}

size_t fab_iov_cap(size_t limit, size_t user)
{
    if (user > 0 && user < limit)
        limit = user;
    return limit < 1 ? 1 : limit > FAB_IOV_MAX ? FAB_IOV_MAX : limit;
}

/* cxi's fi_writedata is a stub before libfabric 2.5 (it fails only at the
 * first transfer, libfabric#12754); from 2.5 it works only when
 * FI_CXI_ENABLE_WRITEDATA=1 and keys are provider keys. */
static int cxi_writedata_usable(uint32_t runtime_version, uint64_t mr_mode,
                                const char **why)
{
    const char *env = getenv("FI_CXI_ENABLE_WRITEDATA");

    if (runtime_version < FI_VERSION(2, 5)) {
        *why = "cxi before libfabric 2.5 has no working fi_writedata";
        return 0;
    }
    if (env == NULL || (strcmp(env, "1") != 0 && strcasecmp(env, "yes") != 0 &&
                        strcasecmp(env, "true") != 0 &&
                        strcasecmp(env, "on") != 0)) {
        *why = "cxi needs FI_CXI_ENABLE_WRITEDATA=1 for fi_writedata";
        return 0;
    }
    if (!(mr_mode & FI_MR_PROV_KEY)) {
        *why = "cxi fi_writedata needs provider keys (FI_MR_PROV_KEY)";
        return 0;
    }
    return 1;
}

/* shm without FI_HMEM, under FABXFER_NOTIFY=message: a write with remote
 * CQ data or delivery completion is a command the target copies in its
 * own progress and answers (a round trip per write), while a plain one is
 * copied by the sender itself (CMA: smr_rma_fast, v1.17.0 to v2.6.0) and
 * complete when posted. A plain write shm has completed is in the target's
 * memory, or (no CMA between the two, or one small enough to ride in the
 * command) in the target's command queue, which it takes in order, ahead
 * of any message the sender posts after it: the message that follows the
 * writes cannot overtake them. Asked for (FABXFER_NOTIFY=message), not the
 * default: one source to one target on this 2-core VM went from 0.57-0.97
 * to 0.99-1.18 of the raw fi_write loop, but where targets outnumber
 * sources, writedata spreads the copies over the targets' cores and marks
 * staged GPU targets, and 2 -> 3 on the H200's host ran 0.92x (host
 * memory) and 0.56-0.74x (staged CUDA) of writedata with plain writes
 * (bench/results/paths/shm-plain-*). Device memory (FI_HMEM) keeps
 * delivery completion: CMA cannot read it. Not tcp: with two rails a
 * peer's writes and its message take different connections, and plain
 * writes over tcp;ofi_rxm on 2.6 let a message overtake a write's bytes
 * (test_paths under mpirun, lo and eth0: a tensor still zero when its
 * checksum was taken). */
static int shm_plain_writes(const char *prov, const struct fi_info *info,
                            int can_message)
{
    return can_message && strcmp(prov, "shm") == 0 &&
           !(info->caps & FI_HMEM);
}

/* shm under counted writedata, host memory: each write with CQ data is
 * copied by the target's progress, one copier per pair. A plain write is
 * copied by its source (the same fast path as above), so giving the source
 * a share of the large writes puts a second core on the pair: on
 * libfabric 2.6, one source to one target of Qwen3-0.6B went from 0.22 to
 * 0.12 s a version on the 2-core VM, 0.8 of a memcpy
 * (bench/results/paths/shm-copy-2core.txt). Not before 1.18: there the
 * plain write holds the target region's lock for its whole copy, which the
 * target's progress takes too, so the two copies take turns (1.17: no
 * gain). By default only for a source with one target (1, "auto"): the
 * copy holds up the posting thread, which feeds the other targets, and
 * 1 -> 3 went from 0.13 to 0.16 s there; FABXFER_SHM_COPY=both asks for
 * it whatever the targets (2). The plain writes are not counted, and are
 * ordered before the notification as in message mode; a mark waits for
 * them (rma.c). */
static int shm_source_copies(const struct fab_profile *p,
                             const struct fi_info *info,
                             uint32_t runtime_version, int want)
{
    if (strcmp(p->prov, "shm") != 0 || (info->caps & FI_HMEM) ||
        p->notify != FAB_NOTIFY_WRITEDATA || want == FAB_SHM_COPY_TARGET)
        return 0;
    if (want == FAB_SHM_COPY_BOTH)
        return 2;
    return runtime_version >= FI_VERSION(1, 18);
}

static fx_status_t choose_notify(const struct fi_info *info,
                                 uint32_t runtime_version, const char *want,
                                 struct fab_profile *p)
{
    const char *prov = p->prov;
    const char *why = NULL;
    int can_writedata = info->domain_attr->cq_data_size >= 4;
    /* efa ignores FI_DELIVERY_COMPLETE on device RDMA writes and orders
     * nothing after them, so a message could overtake the data there. */
    int can_message = (info->caps & FI_MSG) != 0 && strcmp(prov, "efa") != 0;
    const char *no_message = strcmp(prov, "efa") == 0
        ? "efa does not honour FI_DELIVERY_COMPLETE on RDMA writes"
        : "no FI_MSG";

    /* Four bytes of remote CQ data carry (epoch, source); less cannot. */
    if (!can_writedata)
        why = "provider offers fewer than 4 bytes of remote CQ data";
    else if (strcmp(prov, "cxi") == 0 &&
             !cxi_writedata_usable(runtime_version,
                                   info->domain_attr->mr_mode, &why))
        can_writedata = 0;
    /* tcp;ofi_rxm from libfabric 1.18 (tcp rewritten as xnet): a write
     * with remote CQ data that its connection cuts short (source killed,
     * stopped or partitioned mid-write, or any close) is reported to rxm
     * as an error with no context, whether tcp's read fails
     * (xnet_complete_rx) or the endpoint is flushed (ECANCELED,
     * xnet_ep_flush_all_queues), and rxm dereferences that context:
     * SIGSEGV in rxm_handle_comp_error (prov/rxm/src/rxm_cq.c:1644 in
     * 2.6.0; still so upstream). A write without CQ data is tcp's own
     * (XNET_INTERNAL_XFER) and dropped quietly, so there targets learn
     * of the data by message, unless writedata is asked for. (1.17
     * drops the cut-short write on the read path; teardown.c.) */
    else if (strcmp(prov, "tcp;ofi_rxm") == 0 &&
             runtime_version >= FI_VERSION(1, 18) && can_message &&
             strcmp(want, "auto") == 0) {
        can_writedata = 0;
        why = "tcp;ofi_rxm from libfabric 1.18 crashes (rxm) on a write "
              "with CQ data cut short";
    }

    if (strcmp(want, "writedata") == 0) {
        if (!can_writedata)
            return err_set(FX_ERR_UNSUPPORTED,
                           "FABXFER_NOTIFY=writedata but provider %s cannot: "
                           "%s", prov, why);
        p->notify = FAB_NOTIFY_WRITEDATA;
        snprintf(p->notify_why, sizeof(p->notify_why),
                 "FABXFER_NOTIFY=writedata");
    } else if (strcmp(want, "message") == 0) {
        if (!can_message)
            return err_set(FX_ERR_UNSUPPORTED,
                           "FABXFER_NOTIFY=message but provider %s cannot: "
                           "%s", prov, no_message);
        p->notify = FAB_NOTIFY_MESSAGE;
        p->plain_writes = shm_plain_writes(prov, info, can_message);
        snprintf(p->notify_why, sizeof(p->notify_why), "%s",
                 p->plain_writes ? "FABXFER_NOTIFY=message; shm, host "
                                   "memory: plain writes, which the sender "
                                   "copies"
                                 : "FABXFER_NOTIFY=message");
    } else if (strcmp(want, "auto") == 0) {
        if (can_writedata) {
            p->notify = FAB_NOTIFY_WRITEDATA;
            snprintf(p->notify_why, sizeof(p->notify_why),
                     "%zu bytes of remote CQ data: counted writedata",
                     info->domain_attr->cq_data_size);
        } else if (can_message) {
            p->notify = FAB_NOTIFY_MESSAGE;
            snprintf(p->notify_why, sizeof(p->notify_why),
                     "%s: delivery-complete writes, then a message", why);
        } else {
            return err_set(FX_ERR_UNSUPPORTED,
                           "provider %s can notify targets neither by "
                           "writedata (%s) nor by message (%s)",
                           prov, why, no_message);
        }
    } else {
        return err_set(FX_ERR_INVALID,
                       "FABXFER_NOTIFY=\"%s\": expected auto, writedata or "
                       "message", want);
    }
    /* The message must not overtake the data: in message mode every write
     * asks for delivery completion before the message is sent. verbs;ofi_rxm
     * advertises it but completes RMA at transmit (libfabric#5601); there
     * the one RC queue pair per peer keeps the message behind the writes,
     * which no longer holds with FI_OFI_RXM_NUM_MSG_EPS > 1 (libfabric
     * after 2.6): verbs uses counted writedata by default for that reason
     * too. */
    p->delivery_complete = p->notify == FAB_NOTIFY_MESSAGE && !p->plain_writes;
    return FX_OK;
}

fx_status_t fab_profile_make(const struct fi_info *info,
                             uint32_t runtime_version,
                             const struct fab_tuning *tuning,
                             struct fab_profile *out)
{
    struct fab_profile p;
    uint64_t mr_mode;
    const char *prov;
    size_t chunk;
    fx_status_t st;

    memset(&p, 0, sizeof(p));
    prov = info->fabric_attr && info->fabric_attr->prov_name
               ? info->fabric_attr->prov_name : "(unnamed)";
    snprintf(p.prov, sizeof(p.prov), "%s", prov);

    if (info->ep_attr == NULL || info->ep_attr->type != FI_EP_RDM)
        return err_set(FX_ERR_UNSUPPORTED,
                       "provider %s: no reliable datagram endpoint "
                       "(FI_EP_RDM)", prov);
    if (!(info->caps & FI_RMA))
        return err_set(FX_ERR_UNSUPPORTED,
                       "provider %s does not support FI_RMA (one-sided "
                       "writes)", prov);
    if ((info->caps & (FI_READ | FI_WRITE | FI_REMOTE_READ |
                       FI_REMOTE_WRITE)) &&
        (info->caps & (FI_WRITE | FI_REMOTE_WRITE)) !=
            (FI_WRITE | FI_REMOTE_WRITE))
        return err_set(FX_ERR_UNSUPPORTED,
                       "provider %s offers FI_RMA without FI_WRITE and "
                       "FI_REMOTE_WRITE", prov);

    mr_mode = info->domain_attr->mr_mode;
    /* FI_MR_LOCAL: the provider needs a descriptor for every local buffer
     * (source regions, message buffers): we register those and pass
     * fi_mr_desc(). Without it we still pass them; it is harmless. */
    p.local_desc = (mr_mode & FI_MR_LOCAL) != 0;
    /* FI_MR_VIRT_ADDR: remote addresses are virtual addresses in the
     * target's space; without it, offsets from the region's start (cxi,
     * tcp). Blobs carry the base so that both work. */
    p.virt_addr = (mr_mode & FI_MR_VIRT_ADDR) != 0;
    /* FI_MR_PROV_KEY: the provider picks keys (fi_mr_key); without it we
     * request keys of our own, unique within the domain (a counter). */
    p.prov_key = (mr_mode & FI_MR_PROV_KEY) != 0;
    /* FI_MR_ALLOCATED: only allocated memory can be registered. Regions are
     * always user memory that exists, so nothing to do. */
    /* FI_MR_ENDPOINT: MRs are bound to the endpoint and enabled before use
     * (cxi); they must also be closed before the endpoint. */
    p.ep_bind = (mr_mode & FI_MR_ENDPOINT) != 0;
    /* FI_MR_HMEM: device memory must be registered with fi_mr_regattr
     * naming the interface and device, never as host memory. */
    p.hmem_mr = (mr_mode & FI_MR_HMEM) != 0;
    /* FI_MR_RAW: keys are longer than 64 bits; the blob carries the raw
     * bytes from fi_mr_raw_attr and the importer maps them with
     * fi_mr_map_raw. */
    p.raw_key = (mr_mode & FI_MR_RAW) != 0;
    /* FI_MR_MMU_NOTIFY, FI_MR_RMA_EVENT and FI_MR_COLLECTIVE are never
     * requested in the hints, so a conforming provider does not set them. */
    if (mr_mode & (FI_MR_MMU_NOTIFY | FI_MR_RMA_EVENT | FI_MR_COLLECTIVE))
        return err_set(FX_ERR_UNSUPPORTED,
                       "provider %s requires mr_mode bits fabxfer does not "
                       "request (0x%llx)", prov, (unsigned long long)mr_mode);

    p.key_size = info->domain_attr->mr_key_size;
    if (p.key_size == 0)
        p.key_size = sizeof(uint64_t);
    if (p.raw_key ? p.key_size > FAB_KEY_MAX : p.key_size > sizeof(uint64_t))
        return err_set(FX_ERR_UNSUPPORTED,
                       "provider %s: %zu-byte memory keys%s are not "
                       "supported", prov, p.key_size,
                       p.raw_key ? "" : " without FI_MR_RAW");

    chunk = tuning && tuning->chunk ? tuning->chunk : fab_default_chunk(prov);
    if (info->ep_attr->max_msg_size && chunk > info->ep_attr->max_msg_size)
        chunk = info->ep_attr->max_msg_size;
    p.chunk = chunk;
    /* Ranges per write, each side: a write costs microseconds of its own
     * on tcp and shm, so four 100 KiB tensors that land back to back go
     * as one. A limit of 0 means 1. efa turns a writedata of more than
     * one range into its emulated protocol instead of the device's write
     * with immediate (PROVIDER-FACTS.md), so it gets one range a write. */
    p.iov_limit = fab_iov_cap(info->tx_attr ? info->tx_attr->iov_limit : 1,
                              tuning ? tuning->iov_max : 0);
    p.rma_iov_limit =
        fab_iov_cap(info->tx_attr ? info->tx_attr->rma_iov_limit : 1,
                    tuning ? tuning->iov_max : 0);
    if (strcmp(prov, "efa") == 0)
        p.iov_limit = p.rma_iov_limit = 1;
    /* shm moves device memory by CUDA IPC only for a write of one source
     * range; one of several goes through host bounce buffers (libfabric
     * 2.6, smr_select_proto; 0.70x the naive way for Qwen3-0.6B on the
     * H200, GPU to GPU). */
    p.dev_iov_limit = strcmp(prov, "shm") == 0 ? 1 : p.iov_limit;

    p.manual_progress =
        info->domain_attr->data_progress != FI_PROGRESS_AUTO;
    /* shm reports an endpoint's completions in posting order, whatever
     * the peer: its queue of answers is read from the head and stops at
     * the first write the target has not copied yet (smr_progress_resp,
     * v1.17.0 to v2.4.0; 2.5 completes them as targets answer). A target
     * that hangs would hold back every later write to the others for good,
     * so there writes to each peer get an endpoint of their own. */
    p.lanes = strcmp(prov, "shm") == 0 &&
              runtime_version < FI_VERSION(2, 5);

    st = choose_notify(info, runtime_version,
                       tuning && tuning->notify ? tuning->notify : "auto", &p);
    if (st != FX_OK)
        return st;
    p.polled_rx = strcmp(prov, "tcp;ofi_rxm") == 0 || strcmp(prov, "tcp") == 0;
    p.source_copies = shm_source_copies(&p, info, runtime_version,
                                        tuning ? tuning->shm_copy
                                               : FAB_SHM_COPY_AUTO);
    *out = p;
    return FX_OK;
}

void fab_profile_take_notify(struct fab_profile *dst,
                             const struct fab_profile *src)
{
    dst->notify = src->notify;
    dst->delivery_complete = src->delivery_complete;
    dst->plain_writes = src->plain_writes;
    dst->source_copies = src->source_copies;
    memcpy(dst->notify_why, src->notify_why, sizeof(dst->notify_why));
}

int fab_profile_same(const struct fab_profile *a, const struct fab_profile *b,
                     int any_notify)
{
    return a->key_size == b->key_size && a->virt_addr == b->virt_addr &&
           a->prov_key == b->prov_key && a->ep_bind == b->ep_bind &&
           a->local_desc == b->local_desc && a->raw_key == b->raw_key &&
           (any_notify || (a->notify == b->notify &&
                           a->delivery_complete == b->delivery_complete));
}
