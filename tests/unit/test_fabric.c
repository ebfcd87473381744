/*
 * The fabric layer on a real provider (tcp;ofi_rxm), for failures that the
 * public API cannot provoke on providers that pin nothing: a registration
 * the provider refuses (a key already in use, the provider's real
 * -FI_ENOKEY), keys of the wrong size, and writes outside either region;
 * and marks, written to this endpoint itself: a mark reaches the target
 * only once the writes before it landed, with its words, and never counts
 * as a version's notification; and writes that gather and scatter
 * ranges, byte for byte. Also, with no provider, fab_status's table of
 * libfabric codes.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "fabric/fabric.h"
#include "fabric/fabric_int.h"
#include "unit.h"
#include "util/error.h"

static struct fab *open_prov(const char *prov, const char *notify)
{
    struct fab_open_args a = {
        .provider = prov, .single_host = 1, .rank = 0, .size = 1,
        .timeout_ms = 1000, .tuning = {.notify = notify},
    };
    struct fab *f = NULL;

    ck_assert_msg(fab_open(&a, &f) == FX_OK, "%s", err_last());
    return f;
}

static struct fab *open_tcp_notify(const char *notify)
{
    return open_prov("tcp;ofi_rxm", notify);
}

/* Writedata, as auto picks on libfabric 1.17 (from 1.18 auto is message
 * on tcp;ofi_rxm; an explicit writedata is still honoured there), so that
 * the tests of counted writes and marks run on every libfabric. */
static struct fab *open_tcp(void)
{
    return open_tcp_notify("writedata");
}

START_TEST(registration_failure_names_address_and_reason)
{
    static char buf[8192];
    struct fab *f = open_tcp();
    struct fab_mr a, b;
    char want[64];

    ck_assert_int_eq(fab_mr_reg(f, buf, 4096, 1, &a), FX_OK);
    /* Make our key counter hand out a key already in use. */
    f->next_key--;
    ck_assert_int_eq(fab_mr_reg(f, buf + 4096, 4096, 1, &b), FX_ERR_REGISTER);
    snprintf(want, sizeof(want), "fi_mr_reg(addr=%p, len=4096)",
             (void *)(buf + 4096));
    ck_assert_msg(strstr(err_last(), want) != NULL, "%s", err_last());
    ck_assert_msg(strstr(err_last(), fi_strerror(FI_ENOKEY)) != NULL, "%s",
                  err_last());
    ck_assert_msg(strstr(err_last(), "tcp;ofi_rxm") != NULL, "%s",
                  err_last());
    fab_mr_dereg(f, &a);
    fab_close(f);
}
END_TEST

START_TEST(key_import_checks_size)
{
    struct fab *f = open_tcp();
    struct fab_rkey rk;
    uint8_t key[16] = {0};

    ck_assert_int_eq(fab_rkey_import(f, 0, key, 4, 0, 100, &rk), FX_ERR_BLOB);
    ck_assert_ptr_nonnull(strstr(err_last(), "4-byte key"));
    ck_assert_int_eq(fab_rkey_import(f, 0, key, 8, 0x1000, 100, &rk), FX_OK);
    /* tcp addresses by offset: the base is not used */
    ck_assert_uint_eq(rk.base, 0);
    fab_close(f);
}
END_TEST

START_TEST(write_ranges_checked_before_posting)
{
    static char buf[4096];
    struct fab *f = open_tcp();
    struct fab_rkey rk = {.base = 0, .len = 100, .key = {1}};
    const void *addr;
    size_t len;
    struct fab_mr src;

    ck_assert_int_eq(fab_mr_reg(f, buf, sizeof(buf), 0, &src), FX_OK);
    ck_assert_int_eq(fab_write(f, 0, &src, 0, &rk, 0, 8, NULL), FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err_last(), "no known address"));
    fab_local_addr(f, 0, &addr, &len);
    ck_assert_int_eq(fab_peer_insert(f, 0, 0, addr, len), FX_OK);
    ck_assert_int_eq(fab_write(f, 0, &src, 0, &rk, 96, 8, NULL), FX_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err_last(), "rank 0"));
    ck_assert_int_eq(fab_write(f, 0, &src, 4090, &rk, 0, 8, NULL), FX_ERR_RANGE);
    ck_assert_int_eq(f->outstanding, 0);
    fab_mr_dereg(f, &src);
    fab_close(f);
}
END_TEST

/* This endpoint as its own peer: src to write from, dst to write into. */
static void loopback(struct fab *f, void *src, size_t slen, void *dst,
                     size_t dlen, struct unit_link *l)
{
    const void *addr;
    size_t len;

    fab_local_addr(f, 0, &addr, &len);
    ck_assert_int_eq(fab_peer_insert(f, 0, 0, addr, len), FX_OK);
    /* Its own messages carry its own token. */
    ck_assert_int_eq(fab_peer_token(f, 0, fab_token(f)), FX_OK);
    unit_link_open(l, f, src, slen, f, dst, dlen);
}

/* The next note from this endpoint to itself, driving progress. */
static struct fab_note next_note(struct fab *f, uint64_t max_tag)
{
    struct fab_note note;
    int taken = 0;

    for (int i = 0; i < 1000000 && !taken; i++) {
        ck_assert_int_eq(fab_progress(f), FX_OK);
        ck_assert_int_eq(fab_try_notify(f, 0, max_tag, &note, &taken), FX_OK);
    }
    ck_assert_msg(taken, "no note within a million polls");
    return note;
}

START_TEST(marks_follow_their_writes)
{
    static char src[8192], dst[8192];
    struct fab *f = open_tcp();
    const uint64_t words[3] = {3, 0, 4096};
    struct unit_link l;
    struct fab_note note;
    uint64_t tag = 0;
    int taken;

    ck_assert_int_eq(fab_profile(f)->notify, FAB_NOTIFY_WRITEDATA);
    loopback(f, src, sizeof(src), dst, sizeof(dst), &l);
    memset(src, 0xA1, 4096);
    memset(src + 4096, 0xB2, 4096);
    ck_assert_int_eq(fab_write(f, 0, &l.smr, 0, &l.rk, 0, 4096, NULL), FX_OK);
    ck_assert_int_eq(fab_mark(f, 0, 7, words), FX_OK);
    ck_assert_int_eq(fab_write(f, 0, &l.smr, 4096, &l.rk, 4096, 4096, NULL),
                     FX_OK);
    ck_assert_int_eq(fab_notify(f, 0, 7), FX_OK);

    /* A wait for an older version leaves the mark of 7 in place, once it
     * is there to be seen. */
    note.tag = 0;
    for (int i = 0; i < 1000000 && note.tag != 7; i++) {
        ck_assert_int_eq(fab_progress(f), FX_OK);
        ck_assert_int_eq(fab_try_notify(f, 0, 6, &note, &taken), FX_OK);
        ck_assert_int_eq(taken, 0);
    }
    ck_assert_uint_eq(note.tag, 7);
    note = next_note(f, 7);
    ck_assert_int_eq(note.mark, 1);
    ck_assert_uint_eq(note.tag, 7);
    ck_assert_mem_eq(note.arg, words, sizeof(words));
    ck_assert_int_eq((unsigned char)dst[0], 0xA1);
    ck_assert_int_eq((unsigned char)dst[4095], 0xA1);
    note = next_note(f, 7);
    ck_assert_int_eq(note.mark, 0);
    ck_assert_uint_eq(note.tag, 7);
    ck_assert_int_eq((unsigned char)dst[8191], 0xB2);

    /* fab_wait_notify passes over marks to the notification. */
    ck_assert_int_eq(fab_mark(f, 0, 8, words), FX_OK);
    ck_assert_int_eq(fab_notify(f, 0, 8), FX_OK);
    ck_assert_int_eq(fab_wait_notify(f, 0, &tag), FX_OK);
    ck_assert_uint_eq(tag, 8);

    unit_link_close(&l);
}
END_TEST

/* fab_writev: spans within the provider's limits go as one operation
 * (one counted write), gathered from the source, scattered over the
 * target or both; beyond them, one write per span; a span outside either
 * region is refused before anything is posted. On tcp;ofi_rxm with both
 * notifications (fi_writemsg with remote CQ data, or delivery-complete)
 * and on shm. */
static const struct {
    const char *prov, *notify;
} writev_cases[] = {
    {"tcp;ofi_rxm", "writedata"}, {"tcp;ofi_rxm", "message"},
    {"shm", "writedata"},
};

static const struct fab_span *spans_for(int k, struct fab_mr *mr, size_t *n)
{
    static struct fab_span sp[6];
    static const uint64_t v[4][6][3] = { /* src_off, dst_off, len */
        /* gathered: three source ranges, one target range */
        {{0, 100, 1000}, {2000, 1100, 500}, {5000, 1600, 300}},
        /* scattered: one source range, three target ranges */
        {{10000, 3000, 700}, {10700, 5000, 700}, {11400, 7000, 100}},
        /* both, four spans: 3 source ranges, 3 target ranges */
        {{20000, 9000, 64}, {20064, 9100, 64}, {30000, 9164, 4000},
         {40000, 20000, 1}},
        /* six ranges each side: past the limit of 4, six writes */
        {{50000, 30000, 10}, {50100, 30100, 10}, {50200, 30200, 10},
         {50300, 30300, 10}, {50400, 30400, 10}, {50500, 30500, 10}},
    };
    static const size_t count[4] = {3, 3, 4, 6};

    for (size_t i = 0; i < count[k]; i++)
        sp[i] = (struct fab_span){mr, v[k][i][0], v[k][i][1], v[k][i][2]};
    *n = count[k];
    return sp;
}

START_TEST(writev_one_operation)
{
    static unsigned char src[65536], dst[65536], want[65536];
    struct fab *f = open_prov(writev_cases[_i].prov, writev_cases[_i].notify);
    static const uint64_t ops[4] = {1, 1, 1, 6};
    struct fab_span bad[2];
    struct unit_link l;
    uint64_t pending = 0, tag = 0;

    ck_assert_uint_eq(fab_profile(f)->iov_limit, 4);
    ck_assert_uint_eq(fab_profile(f)->rma_iov_limit, 4);
    loopback(f, src, sizeof(src), dst, sizeof(dst), &l);
    for (size_t b = 0; b < sizeof(src); b++)
        src[b] = (unsigned char)(b * 7 + b / 251 + 1);
    memset(dst, 0, sizeof(dst));
    memset(want, 0, sizeof(want));
    for (int k = 0; k < 4; k++) {
        uint64_t before = f->peers[0].writes_posted;
        size_t n;
        const struct fab_span *sp = spans_for(k, &l.smr, &n);

        ck_assert_msg(fab_writev(f, 0, sp, n, &l.rk, &pending) == FX_OK, "%s",
                      err_last());
        ck_assert_uint_eq(f->peers[0].writes_posted - before, ops[k]);
        for (size_t i = 0; i < n; i++)
            memcpy(want + sp[i].dst_off, src + sp[i].src_off, sp[i].len);
    }
    ck_assert_int_eq(fab_quiet(f, 0), FX_OK);
    ck_assert_uint_eq(pending, 0);
    /* The notification completes only if the target counted exactly the
     * writes the source posted: one remote CQ entry per operation. */
    ck_assert_int_eq(fab_notify(f, 0, 5), FX_OK);
    ck_assert_msg(fab_wait_notify(f, 0, &tag) == FX_OK, "%s", err_last());
    ck_assert_uint_eq(tag, 5);
    ck_assert_msg(memcmp(dst, want, sizeof(dst)) == 0,
                  "%s (%s): the target's bytes differ",
                  writev_cases[_i].prov, writev_cases[_i].notify);

    /* The second span ends past the target's region: nothing moves. */
    bad[0] = (struct fab_span){&l.smr, 0, 60000, 100};
    bad[1] = (struct fab_span){&l.smr, 200, 65500, 100};
    ck_assert_int_eq(fab_writev(f, 0, bad, 2, &l.rk, &pending), FX_ERR_RANGE);
    ck_assert_msg(strstr(err_last(), "range 2 of 2") != NULL &&
                  strstr(err_last(), "rank 0") != NULL, "%s", err_last());
    ck_assert_uint_eq(f->outstanding, 0);
    ck_assert_int_eq(fab_quiet(f, 0), FX_OK);
    ck_assert_msg(memcmp(dst, want, sizeof(dst)) == 0,
                  "a refused write moved bytes");
    unit_link_close(&l);
}
END_TEST

struct hook_log {
    int marked, arrived;
    uint64_t words[3];
};

static fx_status_t on_marked(int i, const uint64_t words[3], void *arg)
{
    struct hook_log *h = arg;

    ck_assert_int_eq(i, 0);
    ck_assert_int_eq(h->arrived, 0); /* marks come before the end */
    memcpy(h->words, words, sizeof(h->words));
    h->marked++;
    return FX_OK;
}

static fx_status_t on_arrived(int i, void *arg)
{
    struct hook_log *h = arg;

    ck_assert_int_eq(i, 0);
    h->arrived++;
    return FX_OK;
}

/* The engine's wait: an older version's mark and notification are passed
 * over, this version's mark reaches the hook, and only the notification
 * completes the source. */
START_TEST(target_wait_takes_marks)
{
    static char src[4096], dst[4096];
    struct fab *f = open_tcp();
    const uint64_t old_words[3] = {9, 9, 9}, words[3] = {0, 0, 4096};
    struct hook_log log = {0};
    struct eng_target_hooks hooks = {on_arrived, on_marked, &log};
    const int sources[1] = {0};
    struct unit_link l;
    struct eng_times t;

    loopback(f, src, sizeof(src), dst, sizeof(dst), &l);
    ck_assert_int_eq(fab_mark(f, 0, 4, old_words), FX_OK);
    ck_assert_int_eq(fab_notify(f, 0, 4), FX_OK);
    memset(src, 0x5C, sizeof(src));
    ck_assert_int_eq(fab_write(f, 0, &l.smr, 0, &l.rk, 0, 4096, NULL), FX_OK);
    ck_assert_int_eq(fab_mark(f, 0, 5, words), FX_OK);
    ck_assert_int_eq(fab_notify(f, 0, 5), FX_OK);
    ck_assert_int_eq(eng_target_wait(f, sources, 1, 5, 5000, &hooks, &t),
                     FX_OK);
    ck_assert_int_eq(log.marked, 1);
    ck_assert_mem_eq(log.words, words, sizeof(words));
    ck_assert_int_eq(log.arrived, 1);
    ck_assert_int_eq((unsigned char)dst[4095], 0x5C);
    unit_link_close(&l);
}
END_TEST

START_TEST(marks_need_writedata)
{
    struct fab *f = open_tcp_notify("message");
    const uint64_t words[3] = {0, 0, 1};
    const void *addr;
    size_t len;

    fab_local_addr(f, 0, &addr, &len);
    ck_assert_int_eq(fab_peer_insert(f, 0, 0, addr, len), FX_OK);
    ck_assert_int_eq(fab_mark(f, 0, 1, words), FX_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err_last(), "marks need counted writedata"));
    fab_close(f);
}
END_TEST

/* fab_status's table (fabric_int.h), row by row; OTHERWISE: the caller's
 * own status comes back. */
#define OTHERWISE 1
static const struct {
    int fi_errno;
    int expect;
} status_rows[] = {
    {FI_ENOMEM, FX_ERR_NOMEM},
    {FI_ENOSYS, FX_ERR_UNSUPPORTED},
    {FI_EOPNOTSUPP, FX_ERR_UNSUPPORTED},
    {FI_ENOPROTOOPT, FX_ERR_UNSUPPORTED},
    {FI_EBADFLAGS, FX_ERR_UNSUPPORTED},
    {FI_ETIMEDOUT, FX_ERR_TIMEOUT},
    {FI_ECONNREFUSED, FX_ERR_PEER},
    {FI_ECONNRESET, FX_ERR_PEER},
    {FI_ECONNABORTED, FX_ERR_PEER},
    {FI_ENOTCONN, FX_ERR_PEER},
    {FI_ESHUTDOWN, FX_ERR_PEER},
    {FI_EHOSTUNREACH, FX_ERR_PEER},
    {FI_EHOSTDOWN, FX_ERR_PEER},
    {FI_ENETUNREACH, FX_ERR_PEER},
    {FI_EREMOTEIO, FX_ERR_PEER},
    {FI_EMFILE, FX_ERR_SYSTEM},
    {FI_EAGAIN, OTHERWISE},
    {FI_EINVAL, OTHERWISE},
    {FI_EACCES, OTHERWISE},
    {FI_EPERM, OTHERWISE},
    {FI_EKEYREJECTED, OTHERWISE},
    {FI_ENOKEY, OTHERWISE},
    {FI_EADDRNOTAVAIL, OTHERWISE},
    {FI_ENETDOWN, OTHERWISE},
    {FI_ENODATA, OTHERWISE},
    {FI_EBUSY, OTHERWISE},
    {FI_EMSGSIZE, OTHERWISE},
    {FI_ECANCELED, OTHERWISE},
    {FI_EOTHER, OTHERWISE},
    {FI_EAVAIL, OTHERWISE},
    {0, OTHERWISE},
};
#define NROWS ((int)(sizeof(status_rows) / sizeof(status_rows[0])))

/* Each mapped code gives its status whatever the caller's default, as a
 * call's negative return and as an error entry's positive errno. */
START_TEST(fab_status_maps_each_errno)
{
    int e = status_rows[_i].fi_errno;
    fx_status_t want = (fx_status_t)status_rows[_i].expect;

    if (status_rows[_i].expect == OTHERWISE)
        return;
    ck_assert_msg(fab_status(-e, FX_ERR_FABRIC) == want,
                  "-%s (%d): %s, want %s", fi_strerror(e), e,
                  fx_strerror(fab_status(-e, FX_ERR_FABRIC)),
                  fx_strerror(want));
    ck_assert_int_eq(fab_status(-e, FX_ERR_REGISTER), want);
    ck_assert_int_eq(fab_status(e, FX_ERR_BLOB), want);
}
END_TEST

/* Every other code, and 0 (a failure that came without one), gives the
 * caller's own status back, whichever it is. */
START_TEST(fab_status_falls_back_to_otherwise)
{
    static const fx_status_t defaults[] = {
        FX_ERR_FABRIC, FX_ERR_REGISTER, FX_ERR_BLOB, FX_ERR_NO_PROVIDER,
    };
    int rows = 0;

    for (int i = 0; i < NROWS; i++) {
        int e = status_rows[i].fi_errno;

        if (status_rows[i].expect != OTHERWISE)
            continue;
        rows++;
        for (size_t k = 0; k < sizeof(defaults) / sizeof(defaults[0]); k++) {
            ck_assert_msg(fab_status(-e, defaults[k]) == defaults[k],
                          "-%s (%d) with %s: %s", fi_strerror(e), e,
                          fx_strerror(defaults[k]),
                          fx_strerror(fab_status(-e, defaults[k])));
            ck_assert_int_eq(fab_status(e, defaults[k]), defaults[k]);
        }
    }
    ck_assert_int_gt(rows, 10);
    /* Unknown to libfabric altogether. */
    ck_assert_int_eq(fab_status(-100000, FX_ERR_FABRIC), FX_ERR_FABRIC);
}
END_TEST

int main(void)
{
    const struct unit_test tcp[] = {
        {registration_failure_names_address_and_reason},
        {key_import_checks_size}, {write_ranges_checked_before_posting},
        {marks_follow_their_writes}, {marks_need_writedata},
        {target_wait_takes_marks},
        {writev_one_operation, UNIT_ROWS(writev_cases)},
    };
    const struct unit_test codes[] = {
        {fab_status_maps_each_errno, NROWS},
        {fab_status_falls_back_to_otherwise},
    };
    Suite *s = suite_create("fabric");

    unit_tcase(s, "tcp", 30, tcp, UNIT_ROWS(tcp));
    unit_tcase(s, "codes", 0, codes, UNIT_ROWS(codes));
    return unit_run(s);
}
