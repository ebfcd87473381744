/*
 * Unit tests of the provider profile (src/fabric/profile.c): fi_info
 * attributes shaped like those efa, efa-direct, verbs;ofi_rxm, cxi,
 * tcp;ofi_rxm and shm report (see PROVIDER-FACTS.md) go in, fabxfer's
 * decisions -- addressing, keys, descriptors, binding, chunk size and how
 * targets are notified -- come out; attributes fabxfer cannot work with are
 * refused with a sentence naming what is missing.
 */
#include <check.h>
#include <stdarg.h>
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

/* Infos built by a test; the teardown frees them even after a failure. */
static struct fi_info *built[8];
static int nbuilt;

static struct fi_info *make_info(const struct prov_row *row)
{
    struct fi_info *info = fi_allocinfo();

    ck_assert_ptr_nonnull(info);
    ck_assert_int_lt(nbuilt, (int)(sizeof(built) / sizeof(built[0])));
    built[nbuilt++] = info;
    info->caps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_MSG | FI_SEND |
                 FI_RECV;
    info->ep_attr->type = FI_EP_RDM;
    info->ep_attr->max_msg_size = row->max_msg_size;
    info->fabric_attr->prov_name = strdup(row->prov);
    ck_assert_ptr_nonnull(info->fabric_attr->prov_name);
    if (row->fabric != NULL) {
        info->fabric_attr->name = strdup(row->fabric);
        ck_assert_ptr_nonnull(info->fabric_attr->name);
    }
    info->domain_attr->mr_mode = (int)row->mr_mode;
    info->domain_attr->mr_key_size = row->key_size;
    info->domain_attr->cq_data_size = row->cq_data_size;
    info->domain_attr->data_progress = row->progress;
    info->tx_attr->iov_limit = row->iov_limit;
    info->tx_attr->rma_iov_limit = row->rma_iov_limit;
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

/* The profile of info, which must be accepted. */
static struct fab_profile profile_ok(const struct fi_info *info,
                                     uint32_t runtime,
                                     const struct fab_tuning *tuning)
{
    struct fab_profile p;
    fx_status_t st;

    memset(&p, 0xa5, sizeof(p));
    err_clear();
    st = fab_profile_make(info, runtime, tuning, &p);
    ck_assert_msg(st == FX_OK, "%s refused (%d): %s",
                  info->fabric_attr->prov_name, st, err_last());
    ck_assert_str_eq(p.prov, info->fabric_attr->prov_name);
    ck_assert_msg(p.notify_why[0] != '\0', "empty notify_why");
    ck_assert_int_eq(p.delivery_complete, p.notify == FAB_NOTIFY_MESSAGE);
    return p;
}

/* info must be refused with status want and a message containing each of
 * the words (NULL-terminated); the output must be left alone. */
static void refused(const struct fi_info *info, uint32_t runtime,
                    const struct fab_tuning *tuning, fx_status_t want, ...)
{
    struct fab_profile p, untouched;
    const char *word;
    fx_status_t st;
    va_list ap;

    memset(&p, 0x5a, sizeof(p));
    untouched = p;
    err_clear();
    st = fab_profile_make(info, runtime, tuning, &p);
    ck_assert_msg(st == want, "status %d, want %d (%s)", st, want,
                  err_last());
    ck_assert_msg(err_last()[0] != '\0', "refusal without a message");
    va_start(ap, want);
    while ((word = va_arg(ap, const char *)) != NULL)
        ck_assert_msg(strstr(err_last(), word) != NULL,
                      "\"%s\" not in \"%s\"", word, err_last());
    va_end(ap);
    ck_assert_msg(memcmp(&p, &untouched, sizeof(p)) == 0,
                  "output written on refusal");
}

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

static void assert_writedata(const struct fab_profile *p)
{
    ck_assert_int_eq(p->notify, FAB_NOTIFY_WRITEDATA);
    ck_assert_int_eq(p->delivery_complete, 0);
}

static void assert_message(const struct fab_profile *p)
{
    ck_assert_int_eq(p->notify, FAB_NOTIFY_MESSAGE);
    ck_assert_int_eq(p->delivery_complete, 1);
}

static void assert_why_has(const struct fab_profile *p, const char *word)
{
    ck_assert_msg(strstr(p->notify_why, word) != NULL,
                  "\"%s\" not in notify_why \"%s\"", word, p->notify_why);
}

/* ---- efa ---------------------------------------------------------------- */

START_TEST(efa_software)
{
    struct fab_profile p = profile_ok(make_info(&efa), RT_ANY, NULL);

    ck_assert_int_eq(p.virt_addr, 1);
    ck_assert_int_eq(p.prov_key, 1);
    ck_assert_int_eq(p.local_desc, 0);
    ck_assert_int_eq(p.ep_bind, 0);
    ck_assert_int_eq(p.raw_key, 0);
    ck_assert_int_eq(p.hmem_mr, 0);
    ck_assert_uint_eq(p.key_size, 4);
    ck_assert_uint_eq(p.chunk, fab_default_chunk("efa"));
    ck_assert_int_eq(p.manual_progress, 1);
    /* efa reports 4 source ranges, but a writedata gathering more than
     * one leaves the device's write with immediate: one range a write. */
    ck_assert_uint_eq(p.iov_limit, 1);
    ck_assert_uint_eq(p.rma_iov_limit, 1);
    assert_writedata(&p);
}
END_TEST

START_TEST(efa_direct_fabric)
{
    struct fab_profile p = profile_ok(make_info(&efa_direct), RT_ANY, NULL);

    ck_assert_int_eq(p.virt_addr, 1);
    ck_assert_int_eq(p.prov_key, 1);
    ck_assert_int_eq(p.local_desc, 1);
    ck_assert_int_eq(p.ep_bind, 0);
    ck_assert_int_eq(p.raw_key, 0);
    ck_assert_uint_eq(p.key_size, 4);
    ck_assert_uint_eq(p.chunk, min_size(fab_default_chunk("efa"), GIB));
    ck_assert_int_eq(p.manual_progress, 0);
    assert_writedata(&p);
}
END_TEST

START_TEST(efa_direct_chunk_capped)
{
    struct fab_tuning t = {"auto", 4 * GIB};
    struct fab_profile p = profile_ok(make_info(&efa_direct), RT_ANY, &t);

    ck_assert_uint_eq(p.chunk, GIB);
}
END_TEST

START_TEST(efa_hmem)
{
    struct fi_info *info = make_info(&efa);
    struct fab_profile p;

    info->domain_attr->mr_mode |= FI_MR_HMEM;
    p = profile_ok(info, RT_ANY, NULL);
    ck_assert_int_eq(p.hmem_mr, 1);
    ck_assert_int_eq(p.virt_addr, 1);
    ck_assert_int_eq(p.prov_key, 1);
}
END_TEST

/* efa orders nothing after a device RDMA write and ignores
 * FI_DELIVERY_COMPLETE there: a message could overtake the data. */
START_TEST(efa_refuses_message_mode)
{
    struct fab_tuning t = {"message", 0};

    refused(make_info(&efa), RT_ANY, &t, FX_ERR_UNSUPPORTED, "efa",
            "FI_DELIVERY_COMPLETE", NULL);
    refused(make_info(&efa_direct), RT_ANY, &t, FX_ERR_UNSUPPORTED, "efa",
            NULL);
}
END_TEST

START_TEST(efa_without_cq_data_is_refused)
{
    struct fi_info *info = make_info(&efa);

    info->domain_attr->cq_data_size = 0;
    refused(info, RT_ANY, NULL, FX_ERR_UNSUPPORTED, "efa", "writedata",
            NULL);
}
END_TEST

/* ---- verbs;ofi_rxm ------------------------------------------------------ */

START_TEST(verbs_rxm)
{
    struct fab_profile p = profile_ok(make_info(&verbs), RT_ANY, NULL);

    ck_assert_int_eq(p.virt_addr, 1);
    ck_assert_int_eq(p.prov_key, 1);
    ck_assert_int_eq(p.local_desc, 0);
    ck_assert_int_eq(p.ep_bind, 0);
    ck_assert_int_eq(p.raw_key, 0);
    ck_assert_uint_eq(p.key_size, 4);
    ck_assert_uint_eq(p.chunk, fab_default_chunk("verbs;ofi_rxm"));
    ck_assert_uint_eq(p.iov_limit, 4); /* scatter-gather entries */
    ck_assert_uint_eq(p.rma_iov_limit, 1);
    ck_assert_int_eq(p.manual_progress, 1);
    assert_writedata(&p);
}
END_TEST

START_TEST(verbs_rxm_local)
{
    struct fab_profile p = profile_ok(make_info(&verbs_local), RT_ANY, NULL);

    ck_assert_int_eq(p.virt_addr, 1);
    ck_assert_int_eq(p.prov_key, 1);
    ck_assert_int_eq(p.local_desc, 1);
    ck_assert_int_eq(p.ep_bind, 0);
    ck_assert_uint_eq(p.key_size, 4);
    assert_writedata(&p);
}
END_TEST

/* ---- cxi ---------------------------------------------------------------- */

START_TEST(cxi_layout)
{
    struct fab_profile p = profile_ok(make_info(&cxi), RT_ANY, NULL);

    ck_assert_int_eq(p.virt_addr, 0); /* offsets into the MR */
    ck_assert_int_eq(p.prov_key, 0);
    ck_assert_int_eq(p.local_desc, 0);
    ck_assert_int_eq(p.ep_bind, 1);
    ck_assert_int_eq(p.raw_key, 0);
    ck_assert_int_eq(p.hmem_mr, 0);
    ck_assert_uint_eq(p.key_size, 4);
    ck_assert_uint_eq(p.chunk,
                      min_size(fab_default_chunk("cxi"), UINT32_MAX));
    ck_assert_int_eq(p.manual_progress, 1);

    p = profile_ok(make_info(&cxi_prov_key), RT_ANY, NULL);
    ck_assert_int_eq(p.virt_addr, 0);
    ck_assert_int_eq(p.prov_key, 1);
    ck_assert_int_eq(p.ep_bind, 1);
    ck_assert_uint_eq(p.key_size, 8);
}
END_TEST

/* Before 2.5 fi_writedata is a stub, whatever the environment says. */
START_TEST(cxi_before_2_5)
{
    static const uint32_t runtimes[] = {FI_VERSION(1, 21), FI_VERSION(2, 3)};
    const struct prov_row *rows[] = {&cxi, &cxi_prov_key};

    for (size_t v = 0; v < 2; v++)
        for (int env = 0; env < 2; env++)
            for (size_t r = 0; r < 2; r++) {
                struct fab_profile p;

                if (env)
                    setenv("FI_CXI_ENABLE_WRITEDATA", "1", 1);
                else
                    unsetenv("FI_CXI_ENABLE_WRITEDATA");
                p = profile_ok(make_info(rows[r]), runtimes[v], NULL);
                assert_message(&p);
                assert_why_has(&p, "2.5");
                teardown();
            }
}
END_TEST

START_TEST(cxi_2_5_writedata)
{
    struct fab_profile p;

    setenv("FI_CXI_ENABLE_WRITEDATA", "1", 1);
    p = profile_ok(make_info(&cxi_prov_key), FI_VERSION(2, 5), NULL);
    assert_writedata(&p);
    p = profile_ok(make_info(&cxi_prov_key), FI_VERSION(2, 6), NULL);
    assert_writedata(&p);
}
END_TEST

START_TEST(cxi_2_5_without_env)
{
    struct fab_profile p;

    p = profile_ok(make_info(&cxi_prov_key), FI_VERSION(2, 5), NULL);
    assert_message(&p);
    assert_why_has(&p, "FI_CXI_ENABLE_WRITEDATA");

    setenv("FI_CXI_ENABLE_WRITEDATA", "0", 1);
    p = profile_ok(make_info(&cxi_prov_key), FI_VERSION(2, 5), NULL);
    assert_message(&p);
    assert_why_has(&p, "FI_CXI_ENABLE_WRITEDATA");
}
END_TEST

START_TEST(cxi_2_5_without_prov_key)
{
    struct fab_profile p;

    setenv("FI_CXI_ENABLE_WRITEDATA", "1", 1);
    p = profile_ok(make_info(&cxi), FI_VERSION(2, 5), NULL);
    assert_message(&p);
    assert_why_has(&p, "FI_MR_PROV_KEY");
}
END_TEST

START_TEST(cxi_force_writedata_refused)
{
    struct fab_tuning t = {"writedata", 0};

    setenv("FI_CXI_ENABLE_WRITEDATA", "1", 1);
    refused(make_info(&cxi_prov_key), FI_VERSION(1, 21), &t,
            FX_ERR_UNSUPPORTED, "cxi", "writedata", NULL);
}
END_TEST

START_TEST(cxi_force_message)
{
    struct fab_tuning t = {"message", 0};
    struct fab_profile p;

    setenv("FI_CXI_ENABLE_WRITEDATA", "1", 1);
    p = profile_ok(make_info(&cxi_prov_key), FI_VERSION(2, 5), &t);
    assert_message(&p);
}
END_TEST

START_TEST(cxi_chunk_tuning)
{
    struct fab_tuning big = {"auto", 8 * GIB}, small = {"auto", MIB};
    struct fab_profile p;

    p = profile_ok(make_info(&cxi), FI_VERSION(1, 21), &big);
    ck_assert_uint_eq(p.chunk, (size_t)UINT32_MAX);
    p = profile_ok(make_info(&cxi), FI_VERSION(1, 21), &small);
    ck_assert_uint_eq(p.chunk, MIB);
}
END_TEST

/* ---- tcp;ofi_rxm -------------------------------------------------------- */

START_TEST(tcp_rxm)
{
    const struct fab_tuning want_writedata = {"writedata", 0};
    struct fab_profile p = profile_ok(make_info(&tcp), RT_ANY, NULL);

    ck_assert_int_eq(p.virt_addr, 0);
    ck_assert_int_eq(p.prov_key, 0); /* keys of our own */
    ck_assert_int_eq(p.local_desc, 0);
    ck_assert_int_eq(p.ep_bind, 0);
    ck_assert_int_eq(p.raw_key, 0);
    ck_assert_int_eq(p.hmem_mr, 0);
    ck_assert_uint_eq(p.key_size, 8);
    ck_assert_uint_eq(p.chunk, fab_default_chunk("tcp;ofi_rxm"));
    ck_assert_uint_eq(p.iov_limit, 4);
    ck_assert_uint_eq(p.rma_iov_limit, 4);
    ck_assert_uint_eq(p.dev_iov_limit, 4);
    ck_assert_int_eq(p.manual_progress, 1);
    /* From libfabric 1.18 rxm crashes on a write with CQ data that its
     * connection cuts short (profile.c): messages there, writedata on
     * 1.17, and writedata still where FABXFER_NOTIFY=writedata asks. */
    assert_message(&p);
    p = profile_ok(make_info(&tcp), FI_VERSION(1, 18), NULL);
    assert_message(&p);
    p = profile_ok(make_info(&tcp), FI_VERSION(1, 18), &want_writedata);
    assert_writedata(&p);
    p = profile_ok(make_info(&tcp), FI_VERSION(1, 17), NULL);
    assert_writedata(&p);
}
END_TEST

/* providers.md: native tcp (libfabric >= 1.18) gets what tcp;ofi_rxm gets:
 * offsets, our own keys, counted writedata, 1 MiB writes. */
START_TEST(tcp_native)
{
    struct fab_profile p = profile_ok(make_info(&tcp_native_row), RT_ANY, NULL);

    ck_assert_int_eq(p.virt_addr, 0);
    ck_assert_int_eq(p.prov_key, 0);
    ck_assert_uint_eq(p.chunk, MIB);
    ck_assert_int_eq(p.manual_progress, 0);
    assert_writedata(&p);
}
END_TEST

/* providers.md, "Write size and packing": the measured defaults. */
START_TEST(defaults_per_provider)
{
    ck_assert_uint_eq(fab_default_chunk("tcp;ofi_rxm"), MIB);
    ck_assert_uint_eq(fab_default_chunk("tcp"), MIB);
    ck_assert_uint_eq(fab_default_chunk("shm"), 8 * MIB);
    ck_assert_uint_eq(fab_default_chunk("efa"), 8 * MIB);
    ck_assert_uint_eq(fab_default_chunk("verbs;ofi_rxm"), 8 * MIB);
    ck_assert_uint_eq(fab_default_chunk("cxi"), 8 * MIB);
    ck_assert_uint_eq(fab_default_pack_max("tcp;ofi_rxm"), 32 << 10);
    ck_assert_uint_eq(fab_default_pack_max("shm"), 16 << 10);
    ck_assert_uint_eq(fab_default_pack_max("efa"), 16 << 10);
    ck_assert_uint_eq(fab_default_pack_max("verbs;ofi_rxm"), 16 << 10);
    ck_assert_uint_eq(fab_default_pack_max("cxi"), 16 << 10);
}
END_TEST

START_TEST(tcp_force_message)
{
    struct fab_tuning t = {"message", 0};
    struct fab_profile p = profile_ok(make_info(&tcp), RT_ANY, &t);

    assert_message(&p);
}
END_TEST

START_TEST(tcp_force_writedata)
{
    struct fab_tuning t = {"writedata", 0};
    struct fab_profile p = profile_ok(make_info(&tcp), RT_ANY, &t);

    assert_writedata(&p);
}
END_TEST

START_TEST(tcp_chunk_tuning)
{
    struct fab_tuning small = {NULL, MIB}, huge = {NULL, 64 * GIB};
    struct fab_profile p;

    p = profile_ok(make_info(&tcp), RT_ANY, &small);
    ck_assert_uint_eq(p.chunk, MIB);
    p = profile_ok(make_info(&tcp), RT_ANY, &huge);
    ck_assert_uint_eq(p.chunk, 64 * GIB);
}
END_TEST

/* FABXFER_IOV_MAX caps the provider's limits; a limit of 0 means 1, and
 * none goes past FAB_IOV_MAX, the arrays a write is built in. */
START_TEST(iov_limits)
{
    struct fab_tuning one = {NULL, 0, 1}, two = {NULL, 0, 2};
    struct fi_info *info;
    struct fab_profile p;

    p = profile_ok(make_info(&tcp), RT_ANY, &one);
    ck_assert_uint_eq(p.iov_limit, 1);
    ck_assert_uint_eq(p.rma_iov_limit, 1);
    p = profile_ok(make_info(&verbs), RT_ANY, &two);
    ck_assert_uint_eq(p.iov_limit, 2);
    ck_assert_uint_eq(p.rma_iov_limit, 1);
    p = profile_ok(make_info(&cxi), RT_ANY, NULL);
    ck_assert_uint_eq(p.iov_limit, 1);
    ck_assert_uint_eq(p.rma_iov_limit, 1);
    info = make_info(&tcp);
    info->tx_attr->iov_limit = 0;
    info->tx_attr->rma_iov_limit = 1024;
    p = profile_ok(info, RT_ANY, NULL);
    ck_assert_uint_eq(p.iov_limit, 1);
    ck_assert_uint_eq(p.rma_iov_limit, FAB_IOV_MAX);
}
END_TEST

START_TEST(tcp_bogus_notify)
{
    struct fab_tuning t = {"bogus", 0};

    refused(make_info(&tcp), RT_ANY, &t, FX_ERR_INVALID, "bogus", NULL);
}
END_TEST

/* ---- shm ---------------------------------------------------------------- */

START_TEST(shm_local)
{
    struct fab_profile p = profile_ok(make_info(&shm), RT_ANY, NULL);

    ck_assert_int_eq(p.virt_addr, 1);
    ck_assert_int_eq(p.prov_key, 0);
    ck_assert_int_eq(p.local_desc, 0);
    ck_assert_int_eq(p.ep_bind, 0);
    ck_assert_int_eq(p.raw_key, 0);
    ck_assert_uint_eq(p.key_size, 8);
    ck_assert_uint_eq(p.chunk, fab_default_chunk("shm"));
    /* CUDA IPC takes one source range: device writes do not gather */
    ck_assert_uint_eq(p.dev_iov_limit, 1);
    ck_assert_uint_gt(p.iov_limit, 1);
    ck_assert_int_eq(p.manual_progress, 1);
    assert_writedata(&p);
}
END_TEST

START_TEST(shm_hmem)
{
    struct fi_info *info = make_info(&shm);
    struct fab_profile p;

    info->domain_attr->mr_mode |= FI_MR_HMEM;
    p = profile_ok(info, RT_ANY, NULL);
    ck_assert_int_eq(p.hmem_mr, 1);
    ck_assert_int_eq(p.virt_addr, 1);
}
END_TEST

/* shm before 2.5 completes an endpoint's writes in posting order across
 * peers: each peer gets its own endpoint for writes there, and nowhere
 * else (the others complete each peer's writes as they come). */
START_TEST(lanes_where_completions_queue)
{
    static const struct prov_row *const others[] = {&efa, &verbs, &cxi,
                                                    &tcp};

    ck_assert_int_eq(profile_ok(make_info(&shm), FI_VERSION(1, 17), NULL)
                         .lanes, 1);
    ck_assert_int_eq(profile_ok(make_info(&shm), FI_VERSION(2, 4), NULL)
                         .lanes, 1);
    ck_assert_int_eq(profile_ok(make_info(&shm), FI_VERSION(2, 5), NULL)
                         .lanes, 0);
    ck_assert_int_eq(profile_ok(make_info(&shm), FI_VERSION(2, 6), NULL)
                         .lanes, 0);
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
        ck_assert_int_eq(profile_ok(make_info(others[i]), FI_VERSION(1, 21),
                                    NULL).lanes, 0);
}
END_TEST

/* ---- refusals and edge cases -------------------------------------------- */

START_TEST(no_rma)
{
    struct fi_info *info = make_info(&verbs);

    info->caps &= ~(uint64_t)(FI_RMA | FI_WRITE | FI_REMOTE_WRITE);
    refused(info, RT_ANY, NULL, FX_ERR_UNSUPPORTED, "FI_RMA",
            "verbs;ofi_rxm", NULL);
}
END_TEST

START_TEST(rma_read_only)
{
    struct fi_info *info = make_info(&tcp);

    info->caps &= ~(uint64_t)(FI_WRITE | FI_REMOTE_WRITE);
    info->caps |= FI_READ | FI_REMOTE_READ;
    refused(info, RT_ANY, NULL, FX_ERR_UNSUPPORTED, "FI_REMOTE_WRITE",
            "tcp;ofi_rxm", NULL);
}
END_TEST

/* FI_RMA without direction bits means every direction. */
START_TEST(rma_without_directions)
{
    struct fi_info *info = make_info(&tcp);

    info->caps &= ~(uint64_t)(FI_WRITE | FI_REMOTE_WRITE);
    profile_ok(info, RT_ANY, NULL);
}
END_TEST

START_TEST(ep_msg)
{
    struct fi_info *info = make_info(&efa);

    info->ep_attr->type = FI_EP_MSG;
    refused(info, RT_ANY, NULL, FX_ERR_UNSUPPORTED, "FI_EP_RDM", "efa",
            NULL);
}
END_TEST

START_TEST(mr_unrequested_bits)
{
    static const uint64_t bits[] = {FI_MR_MMU_NOTIFY, FI_MR_RMA_EVENT};

    for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++) {
        struct fi_info *info = make_info(&verbs);

        info->domain_attr->mr_mode |= (int)bits[i];
        refused(info, RT_ANY, NULL, FX_ERR_UNSUPPORTED, "verbs;ofi_rxm",
                "mr_mode", NULL);
    }
}
END_TEST

START_TEST(long_key_without_raw)
{
    struct fi_info *info = make_info(&tcp);

    info->domain_attr->mr_key_size = 16;
    refused(info, RT_ANY, NULL, FX_ERR_UNSUPPORTED, "16", "FI_MR_RAW",
            NULL);
}
END_TEST

START_TEST(long_key_raw)
{
    struct fi_info *info = make_info(&tcp);
    struct fab_profile p;

    info->domain_attr->mr_mode |= FI_MR_RAW;
    info->domain_attr->mr_key_size = 16;
    p = profile_ok(info, RT_ANY, NULL);
    ck_assert_int_eq(p.raw_key, 1);
    ck_assert_uint_eq(p.key_size, 16);

    info = make_info(&tcp);
    info->domain_attr->mr_mode |= FI_MR_RAW;
    info->domain_attr->mr_key_size = FAB_KEY_MAX;
    p = profile_ok(info, RT_ANY, NULL);
    ck_assert_uint_eq(p.key_size, FAB_KEY_MAX);
}
END_TEST

START_TEST(key_too_long_raw)
{
    struct fi_info *info = make_info(&tcp);

    info->domain_attr->mr_mode |= FI_MR_RAW;
    info->domain_attr->mr_key_size = 128;
    refused(info, RT_ANY, NULL, FX_ERR_UNSUPPORTED, "128", NULL);
}
END_TEST

START_TEST(no_cq_data_no_msg)
{
    struct fi_info *info = make_info(&tcp);

    info->domain_attr->cq_data_size = 0;
    info->caps &= ~(uint64_t)(FI_MSG | FI_SEND | FI_RECV);
    refused(info, RT_ANY, NULL, FX_ERR_UNSUPPORTED, "tcp;ofi_rxm", "FI_MSG",
            NULL);
}
END_TEST

START_TEST(no_cq_data_message)
{
    struct fi_info *info = make_info(&tcp);
    struct fab_profile p;

    info->domain_attr->cq_data_size = 0;
    p = profile_ok(info, RT_ANY, NULL);
    assert_message(&p);

    /* Fewer than 4 bytes cannot carry (epoch, source) either. */
    info = make_info(&tcp);
    info->domain_attr->cq_data_size = 2;
    p = profile_ok(info, RT_ANY, NULL);
    assert_message(&p);
}
END_TEST

START_TEST(force_message_without_msg)
{
    struct fab_tuning t = {"message", 0};
    struct fi_info *info = make_info(&tcp);

    info->caps &= ~(uint64_t)(FI_MSG | FI_SEND | FI_RECV);
    refused(info, RT_ANY, &t, FX_ERR_UNSUPPORTED, "FI_MSG", NULL);
}
END_TEST

START_TEST(force_writedata_without_cq_data)
{
    struct fab_tuning t = {"writedata", 0};
    struct fi_info *info = make_info(&tcp);

    info->domain_attr->cq_data_size = 0;
    refused(info, RT_ANY, &t, FX_ERR_UNSUPPORTED, "tcp;ofi_rxm", NULL);
}
END_TEST

static TCase *tcase(const char *name)
{
    TCase *tc = tcase_create(name);

    tcase_add_checked_fixture(tc, setup, teardown);
    return tc;
}

static Suite *profile_suite(void)
{
    Suite *s = suite_create("profile");
    TCase *tc;

    tc = tcase(efa.prov);
    tcase_add_test(tc, efa_software);
    tcase_add_test(tc, efa_direct_fabric);
    tcase_add_test(tc, efa_direct_chunk_capped);
    tcase_add_test(tc, efa_hmem);
    tcase_add_test(tc, efa_refuses_message_mode);
    tcase_add_test(tc, efa_without_cq_data_is_refused);
    suite_add_tcase(s, tc);

    tc = tcase(verbs.prov);
    tcase_add_test(tc, verbs_rxm);
    tcase_add_test(tc, verbs_rxm_local);
    suite_add_tcase(s, tc);

    tc = tcase(cxi.prov);
    tcase_add_test(tc, cxi_layout);
    tcase_add_test(tc, cxi_before_2_5);
    tcase_add_test(tc, cxi_2_5_writedata);
    tcase_add_test(tc, cxi_2_5_without_env);
    tcase_add_test(tc, cxi_2_5_without_prov_key);
    tcase_add_test(tc, cxi_force_writedata_refused);
    tcase_add_test(tc, cxi_force_message);
    tcase_add_test(tc, cxi_chunk_tuning);
    suite_add_tcase(s, tc);

    tc = tcase(tcp.prov);
    tcase_add_test(tc, tcp_rxm);
    tcase_add_test(tc, tcp_native);
    tcase_add_test(tc, defaults_per_provider);
    tcase_add_test(tc, tcp_force_message);
    tcase_add_test(tc, tcp_force_writedata);
    tcase_add_test(tc, tcp_chunk_tuning);
    tcase_add_test(tc, iov_limits);
    tcase_add_test(tc, tcp_bogus_notify);
    suite_add_tcase(s, tc);

    tc = tcase(shm.prov);
    tcase_add_test(tc, shm_local);
    tcase_add_test(tc, shm_hmem);
    tcase_add_test(tc, lanes_where_completions_queue);
    suite_add_tcase(s, tc);

    tc = tcase("refusals");
    tcase_add_test(tc, no_rma);
    tcase_add_test(tc, rma_read_only);
    tcase_add_test(tc, rma_without_directions);
    tcase_add_test(tc, ep_msg);
    tcase_add_test(tc, mr_unrequested_bits);
    tcase_add_test(tc, long_key_without_raw);
    tcase_add_test(tc, long_key_raw);
    tcase_add_test(tc, key_too_long_raw);
    tcase_add_test(tc, no_cq_data_no_msg);
    tcase_add_test(tc, no_cq_data_message);
    tcase_add_test(tc, force_message_without_msg);
    tcase_add_test(tc, force_writedata_without_cq_data);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(profile_suite());
}
