/*
 * Unit tests of the provider profile (src/fabric/profile.c): fi_info
 * attributes shaped like those efa, efa-direct, verbs;ofi_rxm, cxi,
 * tcp;ofi_rxm and shm report (see PROVIDER-FACTS.md) go in, fabxfer's
 * decisions -- addressing, keys, descriptors, binding, chunk size and how
 * targets are notified -- come out; attributes fabxfer cannot work with are
 * refused with a sentence naming what is missing.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include "fabric/fabric_int.h"
#include "unit.h"
#include "util/error.h"

#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)
/* Any runtime will do where the provider does not depend on it. */
#define RT_ANY FI_VERSION(2, 6)

/* One provider's attributes, as fi_getinfo would return them. */
struct prov_row {
    const char *prov;   /* fabric_attr->prov_name */
    const char *fabric; /* fabric_attr->name; NULL: none */
    uint64_t mr_mode;
    size_t key_size;
    size_t cq_data_size;
    size_t max_msg_size;
    enum fi_progress progress;
    size_t iov_limit, rma_iov_limit; /* tx_attr */
};

#define MR_EFA (FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR)
#define MR_CXI (FI_MR_ENDPOINT | FI_MR_ALLOCATED)

static const struct prov_row efa = {
    "efa", "efa", MR_EFA, 4, 4, UINT64_MAX, FI_PROGRESS_MANUAL, 4, 1,
};
/* efa-direct is a fabric of the efa provider, not a provider of its own. */
static const struct prov_row efa_direct = {
    "efa", "efa-direct", MR_EFA | FI_MR_LOCAL, 4, 4, GIB, FI_PROGRESS_AUTO,
    1, 1,
};
static const struct prov_row verbs = {
    "verbs;ofi_rxm", NULL, MR_EFA, 4, 4, GIB, FI_PROGRESS_MANUAL, 4, 1,
};
static const struct prov_row verbs_local = {
    "verbs;ofi_rxm", NULL, MR_EFA | FI_MR_LOCAL, 4, 4, GIB,
    FI_PROGRESS_MANUAL, 4, 1,
};
/* cxi declares 4-byte client (own) keys and 8-byte provider keys
 * (cxip.h); with fabxfer's hints it lists its provider-key entries first. */
static const struct prov_row cxi = {
    "cxi", "cxi", MR_CXI, 4, 8, UINT32_MAX, FI_PROGRESS_MANUAL, 1, 1,
};
static const struct prov_row cxi_prov_key = {
    "cxi", "cxi", MR_CXI | FI_MR_PROV_KEY, 8, 8, UINT32_MAX,
    FI_PROGRESS_MANUAL, 1, 1,
};
/* rxm over tcp reports manual data progress unless auto is asked for
 * (seen with Debian's 1.17; rxm_init.c); native tcp (>= 1.18) reports
 * auto. fabxfer polls its queue either way. */
static const struct prov_row tcp = {
    "tcp;ofi_rxm", NULL, 0, 8, 8, SIZE_MAX, FI_PROGRESS_MANUAL, 4, 4,
};
static const struct prov_row tcp_native_row = {
    "tcp", NULL, 0, 8, 8, SIZE_MAX, FI_PROGRESS_AUTO, 4, 4,
};
static const struct prov_row shm = {
    "shm", "shm", FI_MR_VIRT_ADDR, 8, 8, SIZE_MAX, FI_PROGRESS_MANUAL, 4, 4,
};

/*
 * Each case is a row: a provider's attributes, what the test changes in
 * them, and either the decisions fab_profile_make must take or the status
 * and words of its refusal. One runner takes every row, so that a case
 * reads as data and a failure names its row.
 */

/* An attribute the row sets; those it leaves keep the provider's. */
struct attr {
    int set;
    uint64_t v;
};
#define TO(v) {1, (v)}

/* What a row expects of one decision; most rows leave most unchecked. */
enum want_kind { WANT_ANY, WANT_EQ, WANT_ABOVE, WANT_DEFAULT_CHUNK };
struct want {
    enum want_kind kind;
    uint64_t v;
};
#define IS(v) {WANT_EQ, (v)}
#define ABOVE(v) {WANT_ABOVE, (v)}
/* The provider's measured default, cut down to what a message may carry. */
#define DEFAULT_UNDER(max_msg) {WANT_DEFAULT_CHUNK, (max_msg)}
#define PROVIDER_DEFAULT DEFAULT_UNDER(SIZE_MAX)
#define WRITEDATA IS(FAB_NOTIFY_WRITEDATA)
#define MESSAGE IS(FAB_NOTIFY_MESSAGE)

/* The fields of struct fab_profile a row may expect, in the order they
 * are checked. */
#define DECISIONS(X)                                                       \
    X(virt_addr) X(prov_key) X(local_desc) X(ep_bind) X(raw_key)           \
    X(hmem_mr) X(key_size) X(chunk) X(manual_progress) X(iov_limit)        \
    X(rma_iov_limit) X(dev_iov_limit) X(notify) X(lanes) X(plain_writes)   \
    X(source_copies) X(polled_rx)

struct decisions {
#define WANT_FIELD(f) struct want f;
    DECISIONS(WANT_FIELD)
#undef WANT_FIELD
};

#define TUNE(...) (&(const struct fab_tuning){__VA_ARGS__})
#define CAPS_MSG (FI_MSG | FI_SEND | FI_RECV)

struct row {
    const char *name;
    const struct prov_row *prov;
    uint32_t runtime;
    const struct fab_tuning *tuning; /* NULL: none */
    const char *cxi_writedata;       /* FI_CXI_ENABLE_WRITEDATA; NULL: unset */
    uint64_t caps_drop, caps_add, mr_add;
    struct attr ep_type, mr_key_size, cq_data_size, tx_iov_limit,
        tx_rma_iov_limit;
    fx_status_t refused;  /* FX_OK: the profile must be accepted */
    const char *words[3]; /* ... else its message holds each of them */
    struct decisions want;
    const char *why; /* a word notify_why must hold; NULL: any */
};

/* ---- efa ---------------------------------------------------------------- */

static const struct row efa_rows[] = {
    /* efa reports 4 source ranges, but a writedata gathering more than
     * one leaves the device's write with immediate: one range a write. */
    {"efa", &efa, RT_ANY,
     .want = {.virt_addr = IS(1), .prov_key = IS(1), .local_desc = IS(0),
              .ep_bind = IS(0), .raw_key = IS(0), .hmem_mr = IS(0),
              .key_size = IS(4), .chunk = PROVIDER_DEFAULT,
              .manual_progress = IS(1), .iov_limit = IS(1),
              .rma_iov_limit = IS(1), .notify = WRITEDATA}},
    {"efa-direct", &efa_direct, RT_ANY,
     .want = {.virt_addr = IS(1), .prov_key = IS(1), .local_desc = IS(1),
              .ep_bind = IS(0), .raw_key = IS(0), .key_size = IS(4),
              .chunk = DEFAULT_UNDER(GIB), .manual_progress = IS(0),
              .notify = WRITEDATA}},
    {"efa-direct asked for chunks past its max_msg_size", &efa_direct,
     RT_ANY, TUNE("auto", 4 * GIB), .want = {.chunk = IS(GIB)}},
    {"efa with FI_MR_HMEM", &efa, RT_ANY, .mr_add = FI_MR_HMEM,
     .want = {.hmem_mr = IS(1), .virt_addr = IS(1), .prov_key = IS(1)}},
    /* efa orders nothing after a device RDMA write and ignores
     * FI_DELIVERY_COMPLETE there: a message could overtake the data. */
    {"efa asked for messages", &efa, RT_ANY, TUNE("message", 0),
     .refused = FX_ERR_UNSUPPORTED, .words = {"efa", "FI_DELIVERY_COMPLETE"}},
    {"efa-direct asked for messages", &efa_direct, RT_ANY,
     TUNE("message", 0), .refused = FX_ERR_UNSUPPORTED, .words = {"efa"}},
    {"efa without CQ data", &efa, RT_ANY, .cq_data_size = TO(0),
     .refused = FX_ERR_UNSUPPORTED, .words = {"efa", "writedata"}},
};

/* ---- verbs;ofi_rxm ------------------------------------------------------ */

static const struct row verbs_rows[] = {
    /* iov_limit: its scatter-gather entries */
    {"verbs;ofi_rxm", &verbs, RT_ANY,
     .want = {.virt_addr = IS(1), .prov_key = IS(1), .local_desc = IS(0),
              .ep_bind = IS(0), .raw_key = IS(0), .key_size = IS(4),
              .chunk = PROVIDER_DEFAULT, .iov_limit = IS(4),
              .rma_iov_limit = IS(1), .manual_progress = IS(1),
              .notify = WRITEDATA}},
    {"verbs;ofi_rxm with FI_MR_LOCAL", &verbs_local, RT_ANY,
     .want = {.virt_addr = IS(1), .prov_key = IS(1), .local_desc = IS(1),
              .ep_bind = IS(0), .key_size = IS(4), .notify = WRITEDATA}},
};

/* ---- cxi ---------------------------------------------------------------- */

/* Before 2.5 fi_writedata is a stub, whatever the environment says; from
 * 2.5 it needs FI_CXI_ENABLE_WRITEDATA=1 and provider keys. */
#define CXI_STUB(name, row, runtime, env)                                  \
    {name, &(row), runtime, NULL, env, .want = {.notify = MESSAGE},        \
     .why = "2.5"}

static const struct row cxi_rows[] = {
    /* virt_addr 0: offsets into the MR */
    {"cxi", &cxi, RT_ANY,
     .want = {.virt_addr = IS(0), .prov_key = IS(0), .local_desc = IS(0),
              .ep_bind = IS(1), .raw_key = IS(0), .hmem_mr = IS(0),
              .key_size = IS(4), .chunk = DEFAULT_UNDER(UINT32_MAX),
              .manual_progress = IS(1)}},
    {"cxi with provider keys", &cxi_prov_key, RT_ANY,
     .want = {.virt_addr = IS(0), .prov_key = IS(1), .ep_bind = IS(1),
              .key_size = IS(8)}},
    CXI_STUB("cxi on 1.21", cxi, FI_VERSION(1, 21), NULL),
    CXI_STUB("cxi with provider keys on 1.21", cxi_prov_key,
             FI_VERSION(1, 21), NULL),
    CXI_STUB("cxi on 1.21, writedata enabled", cxi, FI_VERSION(1, 21), "1"),
    CXI_STUB("cxi with provider keys on 1.21, writedata enabled",
             cxi_prov_key, FI_VERSION(1, 21), "1"),
    CXI_STUB("cxi on 2.3", cxi, FI_VERSION(2, 3), NULL),
    CXI_STUB("cxi with provider keys on 2.3", cxi_prov_key,
             FI_VERSION(2, 3), NULL),
    CXI_STUB("cxi on 2.3, writedata enabled", cxi, FI_VERSION(2, 3), "1"),
    CXI_STUB("cxi with provider keys on 2.3, writedata enabled",
             cxi_prov_key, FI_VERSION(2, 3), "1"),
    {"cxi with provider keys on 2.5, writedata enabled", &cxi_prov_key,
     FI_VERSION(2, 5), NULL, "1", .want = {.notify = WRITEDATA}},
    {"cxi with provider keys on 2.6, writedata enabled", &cxi_prov_key,
     FI_VERSION(2, 6), NULL, "1", .want = {.notify = WRITEDATA}},
    {"cxi with provider keys on 2.5, FI_CXI_ENABLE_WRITEDATA unset",
     &cxi_prov_key, FI_VERSION(2, 5), NULL, NULL,
     .want = {.notify = MESSAGE}, .why = "FI_CXI_ENABLE_WRITEDATA"},
    {"cxi with provider keys on 2.5, FI_CXI_ENABLE_WRITEDATA=0",
     &cxi_prov_key, FI_VERSION(2, 5), NULL, "0",
     .want = {.notify = MESSAGE}, .why = "FI_CXI_ENABLE_WRITEDATA"},
    {"cxi without provider keys on 2.5, writedata enabled", &cxi,
     FI_VERSION(2, 5), NULL, "1", .want = {.notify = MESSAGE},
     .why = "FI_MR_PROV_KEY"},
    {"cxi on 1.21 asked for writedata", &cxi_prov_key, FI_VERSION(1, 21),
     TUNE("writedata", 0), "1", .refused = FX_ERR_UNSUPPORTED,
     .words = {"cxi", "writedata"}},
    {"cxi on 2.5 asked for messages", &cxi_prov_key, FI_VERSION(2, 5),
     TUNE("message", 0), "1", .want = {.notify = MESSAGE}},
    {"cxi asked for 8 GiB chunks", &cxi, FI_VERSION(1, 21),
     TUNE("auto", 8 * GIB), .want = {.chunk = IS(UINT32_MAX)}},
    {"cxi asked for 1 MiB chunks", &cxi, FI_VERSION(1, 21),
     TUNE("auto", MIB), .want = {.chunk = IS(MIB)}},
};
#undef CXI_STUB

/* ---- tcp;ofi_rxm -------------------------------------------------------- */

static const struct row tcp_rows[] = {
    /* From libfabric 1.18 rxm crashes on a write with CQ data that its
     * connection cuts short (profile.c): messages there, writedata on
     * 1.17, and writedata still where FABXFER_NOTIFY=writedata asks.
     * prov_key 0: keys of our own. */
    {"tcp;ofi_rxm", &tcp, RT_ANY,
     .want = {.virt_addr = IS(0), .prov_key = IS(0), .local_desc = IS(0),
              .ep_bind = IS(0), .raw_key = IS(0), .hmem_mr = IS(0),
              .key_size = IS(8), .chunk = PROVIDER_DEFAULT,
              .iov_limit = IS(4), .rma_iov_limit = IS(4),
              .dev_iov_limit = IS(4), .manual_progress = IS(1),
              .notify = MESSAGE}},
    /* a target's polls read tcp's bytes off its connections (progress.c
     * does not nap while they wait there), on either version */
    {"tcp;ofi_rxm on 1.18", &tcp, FI_VERSION(1, 18),
     .want = {.notify = MESSAGE, .polled_rx = IS(1)}},
    {"tcp;ofi_rxm on 1.18 asked for writedata", &tcp, FI_VERSION(1, 18),
     TUNE("writedata", 0), .want = {.notify = WRITEDATA}},
    {"tcp;ofi_rxm on 1.17", &tcp, FI_VERSION(1, 17),
     .want = {.notify = WRITEDATA}},
    /* providers.md: native tcp (libfabric >= 1.18) gets what tcp;ofi_rxm
     * gets: offsets, our own keys, counted writedata, 1 MiB writes. */
    {"tcp", &tcp_native_row, RT_ANY,
     .want = {.virt_addr = IS(0), .prov_key = IS(0), .chunk = IS(MIB),
              .manual_progress = IS(0), .notify = WRITEDATA,
              .polled_rx = IS(1)}},
    {"tcp;ofi_rxm asked for messages", &tcp, RT_ANY, TUNE("message", 0),
     .want = {.notify = MESSAGE}},
    {"tcp;ofi_rxm asked for writedata", &tcp, RT_ANY, TUNE("writedata", 0),
     .want = {.notify = WRITEDATA}},
    {"tcp;ofi_rxm asked for 1 MiB chunks", &tcp, RT_ANY, TUNE(NULL, MIB),
     .want = {.chunk = IS(MIB)}},
    {"tcp;ofi_rxm asked for 64 GiB chunks", &tcp, RT_ANY,
     TUNE(NULL, 64 * GIB), .want = {.chunk = IS(64 * GIB)}},
    /* FABXFER_IOV_MAX caps the provider's limits; a limit of 0 means 1,
     * and none goes past FAB_IOV_MAX, the arrays a write is built in. */
    {"tcp;ofi_rxm with FABXFER_IOV_MAX=1", &tcp, RT_ANY, TUNE(NULL, 0, 1),
     .want = {.iov_limit = IS(1), .rma_iov_limit = IS(1)}},
    {"verbs;ofi_rxm with FABXFER_IOV_MAX=2", &verbs, RT_ANY,
     TUNE(NULL, 0, 2), .want = {.iov_limit = IS(2), .rma_iov_limit = IS(1)}},
    {"cxi's own iov limits", &cxi, RT_ANY,
     .want = {.iov_limit = IS(1), .rma_iov_limit = IS(1)}},
    {"tcp;ofi_rxm with iov limits of 0 and 1024", &tcp, RT_ANY,
     .tx_iov_limit = TO(0), .tx_rma_iov_limit = TO(1024),
     .want = {.iov_limit = IS(1), .rma_iov_limit = IS(FAB_IOV_MAX)}},
    {"tcp;ofi_rxm asked for a bogus notification", &tcp, RT_ANY,
     TUNE("bogus", 0), .refused = FX_ERR_INVALID, .words = {"bogus"}},
};

/* ---- shm ---------------------------------------------------------------- */

/* shm before 2.5 completes an endpoint's writes in posting order across
 * peers: each peer gets its own endpoint for writes there, and nowhere
 * else (the others complete each peer's writes as they come). */
#define LANES(name, row, runtime, n)                                       \
    {name, &(row), runtime, .want = {.lanes = IS(n)}}

static const struct row shm_rows[] = {
    /* dev_iov_limit 1: CUDA IPC takes one source range, device writes do
     * not gather */
    {"shm", &shm, RT_ANY,
     .want = {.polled_rx = IS(0), .virt_addr = IS(1), .prov_key = IS(0),
              .local_desc = IS(0), .ep_bind = IS(0), .raw_key = IS(0), .key_size = IS(8),
              .chunk = PROVIDER_DEFAULT, .dev_iov_limit = IS(1),
              .iov_limit = ABOVE(1), .manual_progress = IS(1),
              .notify = WRITEDATA}},
    /* messages: plain writes the sender copies, but of device memory */
    {"shm asked for messages", &shm, RT_ANY, TUNE("message", 0),
     .want = {.notify = MESSAGE, .plain_writes = IS(1)},
     .why = "plain writes, which the sender copies"},
    {"shm with FI_HMEM asked for messages", &shm, RT_ANY, TUNE("message", 0),
     .caps_add = FI_HMEM, .want = {.notify = MESSAGE, .plain_writes = IS(0)}},
    {"tcp;ofi_rxm asked for messages", &tcp, FI_VERSION(1, 17),
     TUNE("message", 0), .want = {.notify = MESSAGE, .plain_writes = IS(0)}},
    {"shm with FI_MR_HMEM", &shm, RT_ANY, .mr_add = FI_MR_HMEM,
     .want = {.hmem_mr = IS(1), .virt_addr = IS(1)}},
    LANES("shm on 1.17", shm, FI_VERSION(1, 17), 1),
    LANES("shm on 2.4", shm, FI_VERSION(2, 4), 1),
    LANES("shm on 2.5", shm, FI_VERSION(2, 5), 0),
    LANES("shm on 2.6", shm, FI_VERSION(2, 6), 0),
    LANES("efa's lanes on 1.21", efa, FI_VERSION(1, 21), 0),
    LANES("verbs;ofi_rxm's lanes on 1.21", verbs, FI_VERSION(1, 21), 0),
    LANES("cxi's lanes on 1.21", cxi, FI_VERSION(1, 21), 0),
    LANES("tcp;ofi_rxm's lanes on 1.21", tcp, FI_VERSION(1, 21), 0),
};
#undef LANES

/* Who copies shm's writes under counted writedata (FABXFER_SHM_COPY):
 * the source too from 1.18, where its plain write no longer holds the
 * target's lock while it copies (1: where it has one target; 2: asked
 * for, whatever the targets); only the target before, unless asked;
 * never with device memory (FI_HMEM: CUDA IPC, not the fast path), nor
 * in message mode (every write plain already), nor off shm. */
#define COPIES(name, row, runtime, copy, n)                                \
    {name, &(row), runtime, TUNE(.shm_copy = (copy)),                      \
     .want = {.source_copies = IS(n)}}

static const struct row copy_rows[] = {
    COPIES("shm on 1.17", shm, FI_VERSION(1, 17), FAB_SHM_COPY_AUTO, 0),
    COPIES("shm on 1.18", shm, FI_VERSION(1, 18), FAB_SHM_COPY_AUTO, 1),
    COPIES("shm on 2.6", shm, FI_VERSION(2, 6), FAB_SHM_COPY_AUTO, 1),
    COPIES("shm on 2.6, FABXFER_SHM_COPY=target", shm, FI_VERSION(2, 6),
           FAB_SHM_COPY_TARGET, 0),
    COPIES("shm on 1.17, FABXFER_SHM_COPY=both", shm, FI_VERSION(1, 17),
           FAB_SHM_COPY_BOTH, 2),
    COPIES("tcp;ofi_rxm, FABXFER_SHM_COPY=both", tcp, FI_VERSION(1, 17),
           FAB_SHM_COPY_BOTH, 0),
    COPIES("verbs;ofi_rxm on 2.6", verbs, FI_VERSION(2, 6),
           FAB_SHM_COPY_AUTO, 0),
    {"shm with FI_HMEM on 2.6", &shm, FI_VERSION(2, 6), .caps_add = FI_HMEM,
     .want = {.notify = WRITEDATA, .source_copies = IS(0)}},
    {"shm on 2.6 asked for messages", &shm, FI_VERSION(2, 6),
     TUNE("message", 0), .want = {.notify = MESSAGE, .source_copies = IS(0)}},
};
#undef COPIES

/* ---- refusals and edge cases -------------------------------------------- */

static const struct row edge_rows[] = {
    {"verbs;ofi_rxm without FI_RMA", &verbs, RT_ANY,
     .caps_drop = FI_RMA | FI_WRITE | FI_REMOTE_WRITE,
     .refused = FX_ERR_UNSUPPORTED, .words = {"FI_RMA", "verbs;ofi_rxm"}},
    {"tcp;ofi_rxm reading only", &tcp, RT_ANY,
     .caps_drop = FI_WRITE | FI_REMOTE_WRITE,
     .caps_add = FI_READ | FI_REMOTE_READ, .refused = FX_ERR_UNSUPPORTED,
     .words = {"FI_REMOTE_WRITE", "tcp;ofi_rxm"}},
    /* FI_RMA without direction bits means every direction. */
    {"tcp;ofi_rxm with FI_RMA and no directions", &tcp, RT_ANY,
     .caps_drop = FI_WRITE | FI_REMOTE_WRITE},
    {"efa with FI_EP_MSG", &efa, RT_ANY, .ep_type = TO(FI_EP_MSG),
     .refused = FX_ERR_UNSUPPORTED, .words = {"FI_EP_RDM", "efa"}},
    {"verbs;ofi_rxm with FI_MR_MMU_NOTIFY", &verbs, RT_ANY,
     .mr_add = FI_MR_MMU_NOTIFY, .refused = FX_ERR_UNSUPPORTED,
     .words = {"verbs;ofi_rxm", "mr_mode"}},
    {"verbs;ofi_rxm with FI_MR_RMA_EVENT", &verbs, RT_ANY,
     .mr_add = FI_MR_RMA_EVENT, .refused = FX_ERR_UNSUPPORTED,
     .words = {"verbs;ofi_rxm", "mr_mode"}},
    {"16-byte keys without FI_MR_RAW", &tcp, RT_ANY, .mr_key_size = TO(16),
     .refused = FX_ERR_UNSUPPORTED, .words = {"16", "FI_MR_RAW"}},
    {"16-byte raw keys", &tcp, RT_ANY, .mr_add = FI_MR_RAW,
     .mr_key_size = TO(16), .want = {.raw_key = IS(1), .key_size = IS(16)}},
    {"raw keys of FAB_KEY_MAX bytes", &tcp, RT_ANY, .mr_add = FI_MR_RAW,
     .mr_key_size = TO(FAB_KEY_MAX), .want = {.key_size = IS(FAB_KEY_MAX)}},
    {"128-byte raw keys", &tcp, RT_ANY, .mr_add = FI_MR_RAW,
     .mr_key_size = TO(128), .refused = FX_ERR_UNSUPPORTED,
     .words = {"128"}},
    {"neither CQ data nor FI_MSG", &tcp, RT_ANY, .caps_drop = CAPS_MSG,
     .cq_data_size = TO(0), .refused = FX_ERR_UNSUPPORTED,
     .words = {"tcp;ofi_rxm", "FI_MSG"}},
    {"no CQ data", &tcp, RT_ANY, .cq_data_size = TO(0),
     .want = {.notify = MESSAGE}},
    /* Fewer than 4 bytes cannot carry (epoch, source) either. */
    {"2 bytes of CQ data", &tcp, RT_ANY, .cq_data_size = TO(2),
     .want = {.notify = MESSAGE}},
    {"asked for messages without FI_MSG", &tcp, RT_ANY, TUNE("message", 0),
     .caps_drop = CAPS_MSG, .refused = FX_ERR_UNSUPPORTED,
     .words = {"FI_MSG"}},
    {"asked for writedata without CQ data", &tcp, RT_ANY,
     TUNE("writedata", 0), .cq_data_size = TO(0),
     .refused = FX_ERR_UNSUPPORTED, .words = {"tcp;ofi_rxm"}},
};

/* Infos built by a test; the teardown frees them even after a failure. */
static struct fi_info *built[8];
static int nbuilt;

/* The row's provider as fi_getinfo would report it, with the row's
 * changes. */
static struct fi_info *make_info(const struct row *r)
{
    const struct prov_row *pr = r->prov;
    struct fi_info *info = fi_allocinfo();

    ck_assert_ptr_nonnull(info);
    ck_assert_int_lt(nbuilt, (int)(sizeof(built) / sizeof(built[0])));
    built[nbuilt++] = info;
    info->caps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_MSG | FI_SEND |
                 FI_RECV;
    info->caps = (info->caps & ~r->caps_drop) | r->caps_add;
    info->ep_attr->type = r->ep_type.set ? (enum fi_ep_type)r->ep_type.v
                                         : FI_EP_RDM;
    info->ep_attr->max_msg_size = pr->max_msg_size;
    info->fabric_attr->prov_name = strdup(pr->prov);
    ck_assert_ptr_nonnull(info->fabric_attr->prov_name);
    if (pr->fabric != NULL) {
        info->fabric_attr->name = strdup(pr->fabric);
        ck_assert_ptr_nonnull(info->fabric_attr->name);
    }
    info->domain_attr->mr_mode = (int)(pr->mr_mode | r->mr_add);
    info->domain_attr->mr_key_size =
        r->mr_key_size.set ? r->mr_key_size.v : pr->key_size;
    info->domain_attr->cq_data_size =
        r->cq_data_size.set ? r->cq_data_size.v : pr->cq_data_size;
    info->domain_attr->data_progress = pr->progress;
    info->tx_attr->iov_limit =
        r->tx_iov_limit.set ? r->tx_iov_limit.v : pr->iov_limit;
    info->tx_attr->rma_iov_limit =
        r->tx_rma_iov_limit.set ? r->tx_rma_iov_limit.v : pr->rma_iov_limit;
    return info;
}

static void setup(void)
{
    unsetenv("FI_CXI_ENABLE_WRITEDATA");
    err_clear();
}

static void teardown(void)
{
    while (nbuilt > 0)
        fi_freeinfo(built[--nbuilt]);
    unsetenv("FI_CXI_ENABLE_WRITEDATA");
}

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

static void check_decision(const struct row *r, const char *field,
                           const struct want *w, uint64_t got)
{
    uint64_t want = w->v;

    switch (w->kind) {
    case WANT_ANY:
        return;
    case WANT_ABOVE:
        ck_assert_msg(got > want, "%s: %s = %llu, want more than %llu",
                      r->name, field, (unsigned long long)got,
                      (unsigned long long)want);
        return;
    case WANT_DEFAULT_CHUNK:
        want = min_size(fab_default_chunk(r->prov->prov), want);
        /* fall through */
    case WANT_EQ:
        ck_assert_msg(got == want, "%s: %s = %llu, want %llu", r->name,
                      field, (unsigned long long)got,
                      (unsigned long long)want);
        return;
    }
}

/* The profile of the row's info must be accepted, hold what the row
 * wants, and be consistent in itself. */
static void accepted(const struct row *r, const struct fi_info *info)
{
    struct fab_profile p;
    fx_status_t st;

    memset(&p, 0xa5, sizeof(p));
    err_clear();
    st = fab_profile_make(info, r->runtime, r->tuning, &p);
    ck_assert_msg(st == FX_OK, "%s: refused (%d): %s", r->name, st,
                  err_last());
    ck_assert_str_eq(p.prov, info->fabric_attr->prov_name);
    ck_assert_msg(p.notify_why[0] != '\0', "%s: empty notify_why", r->name);
    /* Messages need FI_DELIVERY_COMPLETE to land after the data, but for
     * shm's plain writes of host memory, which its own queue orders. */
    ck_assert_int_eq(p.delivery_complete,
                     p.notify == FAB_NOTIFY_MESSAGE && !p.plain_writes);
    ck_assert(!p.plain_writes || strcmp(p.prov, "shm") == 0);
#define CHECK_DECISION(f) check_decision(r, #f, &r->want.f, (uint64_t)p.f);
    DECISIONS(CHECK_DECISION)
#undef CHECK_DECISION
    if (r->want.notify.kind != WANT_ANY)
        ck_assert_msg(p.delivery_complete ==
                          (r->want.notify.v == FAB_NOTIFY_MESSAGE &&
                           !p.plain_writes),
                      "%s: delivery_complete = %d with notify %d", r->name,
                      p.delivery_complete, p.notify);
    if (r->why != NULL)
        ck_assert_msg(strstr(p.notify_why, r->why) != NULL,
                      "%s: \"%s\" not in notify_why \"%s\"", r->name,
                      r->why, p.notify_why);
}

/* The row's info must be refused with its status and a message holding
 * each of its words; the output must be left alone. */
static void refused(const struct row *r, const struct fi_info *info)
{
    struct fab_profile p, untouched;
    fx_status_t st;

    memset(&p, 0x5a, sizeof(p));
    untouched = p;
    err_clear();
    st = fab_profile_make(info, r->runtime, r->tuning, &p);
    ck_assert_msg(st == r->refused, "%s: status %d, want %d (%s)", r->name,
                  st, r->refused, err_last());
    ck_assert_msg(err_last()[0] != '\0', "%s: refusal without a message",
                  r->name);
    for (size_t i = 0; i < sizeof(r->words) / sizeof(r->words[0]) &&
                       r->words[i] != NULL; i++)
        ck_assert_msg(strstr(err_last(), r->words[i]) != NULL,
                      "%s: \"%s\" not in \"%s\"", r->name, r->words[i],
                      err_last());
    ck_assert_msg(memcmp(&p, &untouched, sizeof(p)) == 0,
                  "%s: output written on refusal", r->name);
}

static void run_row(const struct row *r)
{
    if (r->cxi_writedata != NULL)
        setenv("FI_CXI_ENABLE_WRITEDATA", r->cxi_writedata, 1);
    if (r->refused == FX_OK)
        accepted(r, make_info(r));
    else
        refused(r, make_info(r));
}

#define NROWS(rows) ((int)(sizeof(rows) / sizeof((rows)[0])))

/* One looped test per table: Check runs each row as a test of its own. */
#define ROWS_TEST(group)                                                   \
    START_TEST(group##_cases)                                              \
    {                                                                      \
        run_row(&group##_rows[_i]);                                        \
    }                                                                      \
    END_TEST

ROWS_TEST(efa)
ROWS_TEST(verbs)
ROWS_TEST(cxi)
ROWS_TEST(tcp)
ROWS_TEST(shm)
ROWS_TEST(copy)
ROWS_TEST(edge)

/* providers.md, "Write size and packing": the measured defaults. */
static const struct default_row {
    const char *prov;
    size_t chunk;
    size_t pack_max; /* 0: none measured here */
} defaults[] = {
    {"tcp;ofi_rxm", MIB, 32 << 10},
    {"tcp", MIB, 0},
    {"shm", 8 * MIB, 16 << 10},
    {"efa", 8 * MIB, 16 << 10},
    {"verbs;ofi_rxm", 8 * MIB, 16 << 10},
    {"cxi", 8 * MIB, 16 << 10},
};

/* A path whose FI_HMEM entry replaces its plain one (provider.c) takes
 * that entry's notification and all that follows from it: shm's source
 * copies host memory only, so the path must stop asking for them. */
START_TEST(taken_notify_carries_the_copies)
{
    static const struct row plain = {"shm on 2.6", &shm, FI_VERSION(2, 6)};
    static const struct row hmem = {"shm with FI_HMEM on 2.6", &shm,
                                    FI_VERSION(2, 6), .caps_add = FI_HMEM};
    struct fab_profile p0, ph;

    ck_assert_int_eq(fab_profile_make(make_info(&plain), plain.runtime, NULL,
                                      &p0), FX_OK);
    ck_assert_int_eq(fab_profile_make(make_info(&hmem), hmem.runtime, NULL,
                                      &ph), FX_OK);
    ck_assert_int_eq(p0.source_copies, 1);
    ck_assert_int_eq(ph.source_copies, 0);
    fab_profile_take_notify(&p0, &ph);
    ck_assert_int_eq(p0.source_copies, 0);
    ck_assert_int_eq(p0.notify, ph.notify);
    ck_assert_int_eq(p0.delivery_complete, ph.delivery_complete);
    ck_assert_int_eq(p0.plain_writes, ph.plain_writes);
    ck_assert_str_eq(p0.notify_why, ph.notify_why);
}
END_TEST

START_TEST(defaults_per_provider)
{
    const struct default_row *d = &defaults[_i];

    ck_assert_msg(fab_default_chunk(d->prov) == d->chunk,
                  "%s: default chunk %zu, want %zu", d->prov,
                  fab_default_chunk(d->prov), d->chunk);
    if (d->pack_max != 0)
        ck_assert_msg(fab_default_pack_max(d->prov) == d->pack_max,
                      "%s: default pack_max %zu, want %zu", d->prov,
                      fab_default_pack_max(d->prov), d->pack_max);
}
END_TEST

static TCase *tcase(Suite *s, const char *name, const TTest *rows, int n)
{
    TCase *tc = tcase_create(name);

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, rows, 0, n);
    suite_add_tcase(s, tc);
    return tc;
}

static Suite *profile_suite(void)
{
    Suite *s = suite_create("profile");
    TCase *tc;

    tcase(s, efa.prov, efa_cases, NROWS(efa_rows));
    tcase(s, verbs.prov, verbs_cases, NROWS(verbs_rows));
    tcase(s, cxi.prov, cxi_cases, NROWS(cxi_rows));
    tc = tcase(s, tcp.prov, tcp_cases, NROWS(tcp_rows));
    tcase_add_loop_test(tc, defaults_per_provider, 0, NROWS(defaults));
    tc = tcase(s, shm.prov, shm_cases, NROWS(shm_rows));
    tcase_add_test(tc, taken_notify_carries_the_copies);
    tcase(s, "shm copies", copy_cases, NROWS(copy_rows));
    tcase(s, "refusals", edge_cases, NROWS(edge_rows));
    return s;
}

int main(void)
{
    return unit_run(profile_suite());
}
