/*
 * Unit tests of the bootstrap: backend choice by name, the "local" backend's
 * put/fence/get and collectives across forked ranks, its timeouts naming the
 * missing rank (a busy rank waited for, a stopped one named by every rank
 * that waits on it, even through another), what it refuses in its folder (a folder others may write or
 * another user owns, FIFOs, symlinks, another job's files), and the local
 * launcher (which re-runs this binary as ranks: `test_boot --as-rank`).
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "boot/boot.h"
#include "local_env.h"
#include "unit.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/host.h"

#define NONCE "0123456789abcdef"
#define OTHER_NONCE "fedcba9876543210" /* an earlier job's */

static char test_dir[] = "/tmp/test_boot.XXXXXX";
static char dir_path[sizeof(test_dir)];

static void clear_env(void)
{
    unsetenv("FABXFER_LOCAL_DIR");
    unsetenv("FABXFER_LOCAL_RANK");
    unsetenv("FABXFER_LOCAL_SIZE");
    unsetenv("FABXFER_LOCAL_NONCE");
    unsetenv("FABXFER_BOOTSTRAP");
    unsetenv("FABXFER_TIMEOUT_MS");
}

static void set_env(const char *dir, int rank, int size)
{
    local_env_set(dir, rank, size, NONCE);
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;

    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    rmdir(dir);
}

static void setup(void)
{
    memcpy(dir_path, test_dir, sizeof(test_dir));
    ck_assert_ptr_nonnull(mkdtemp(dir_path));
    clear_env();
    err_clear();
}

static void teardown(void)
{
    remove_tree(dir_path);
    clear_env();
}

static long ms_since(double t0)
{
    return (long)((clock_now() - t0) * 1000.0);
}

/* Counts the steps of rank_work(), so that a failure says which one. */
#define TRY(cond)                \
    do {                         \
        step++;                  \
        if (!(cond))             \
            goto out;            \
    } while (0)

/* A rank's end: its failed step (0: none) said with the error that
 * stopped it, its bootstrap closed; returns the step. */
static int rank_end(int rank, int step, struct boot *b)
{
    if (step != 0)
        fprintf(stderr, "rank %d failed at step %d: %s\n", rank, step,
                err_last());
    boot_close(b);
    return step;
}

/* One rank's side of the collective tests; 0 or the step that failed. */
static int rank_work(int rank, int size, int timeout_ms)
{
    unsigned char mine[16], *all = NULL;
    struct boot *b = NULL;
    void *val = NULL;
    size_t len = 0;
    char word[16];
    int step = 0;

    TRY(boot_open("local", timeout_ms, &b) == FX_OK && b != NULL);
    TRY(b->rank == rank && b->size == size && b->single_host);
    TRY((all = malloc(sizeof(mine) * (size_t)size)) != NULL);
    for (size_t i = 0; i < sizeof(mine); i++)
        mine[i] = (unsigned char)(rank * 31 + i);
    TRY(boot_allgather(b, "test", mine, sizeof(mine), all) == FX_OK);
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < sizeof(mine); i++)
            TRY(all[(size_t)r * sizeof(mine) + i] ==
                (unsigned char)(r * 31 + i));
    /* A second collective, of another length, gets its own key. */
    TRY(boot_allgather(b, "test", &rank, sizeof(rank), all) == FX_OK);
    for (int r = 0; r < size; r++)
        TRY(((int *)(void *)all)[r] == r);
    snprintf(word, sizeof(word), "r%d", rank);
    TRY(b->ops->put(b, "word", word, strlen(word)) == FX_OK);
    for (int i = 0; i < 5; i++)
        TRY(boot_barrier(b, "test") == FX_OK);
    TRY(b->ops->get(b, (rank + 1) % size, "word", &val, &len) == FX_OK);
    snprintf(word, sizeof(word), "r%d", (rank + 1) % size);
    TRY(len == strlen(word) && memcmp(val, word, len) == 0);
    step = 0;
out:
    free(val);
    free(all);
    return rank_end(rank, step, b);
}

START_TEST(test_open_none)
{
    struct boot *b = (struct boot *)1;

    ck_assert_int_eq(boot_open("none", 1000, &b), FX_OK);
    ck_assert_ptr_null(b);
    boot_close(b);
    ck_assert_int_eq(boot_barrier(NULL, "test"), FX_ERR_STATE);
}
END_TEST

/* boot_open(name) is refused with want, gives no backend, and says frag. */
static void expect_refused(const char *name, fx_status_t want,
                           const char *frag)
{
    struct boot *b = NULL;
    fx_status_t st = boot_open(name, 1000, &b);

    ck_assert_msg(st == want, "boot_open(\"%s\"): %s, expected %s", name,
                  fx_strerror(st), fx_strerror(want));
    ck_assert_ptr_null(b);
    ck_assert_msg(strstr(err_last(), frag) != NULL, "boot_open(\"%s\"): "
                  "message \"%s\" lacks \"%s\"", name, err_last(), frag);
}

START_TEST(test_open_bogus)
{
    expect_refused("bogus", FX_ERR_INVALID, "\"bogus\"");
    ck_assert_ptr_nonnull(strstr(err_last(), "\"local\""));
}
END_TEST

START_TEST(test_open_pmix)
{
#if HAVE_PMIX
    /* No PMIx server here: PMIx_Init's own reason must come through. */
    unsetenv("PMIX_RANK");
    expect_refused("pmix", FX_ERR_BOOTSTRAP, "PMIx_Init failed: ");
#else
    expect_refused("pmix", FX_ERR_UNSUPPORTED, "without PMIx");
#endif
}
END_TEST

START_TEST(test_open_local_unset)
{
    expect_refused("local", FX_ERR_BOOTSTRAP, "not started by fabxfer-run");
    /* "auto" picks local from the folder alone, and then needs the rest. */
    setenv("FABXFER_LOCAL_DIR", dir_path, 1);
    expect_refused("auto", FX_ERR_BOOTSTRAP, "FABXFER_LOCAL_RANK");
}
END_TEST

START_TEST(test_open_local_bad_rank)
{
    set_env(dir_path, 2, 2);
    expect_refused("local", FX_ERR_BOOTSTRAP, "FABXFER_LOCAL_RANK");
    set_env("/nonexistent/fabxfer", 0, 2);
    expect_refused("local", FX_ERR_BOOTSTRAP, "/nonexistent/fabxfer");
}
END_TEST

START_TEST(test_open_auto)
{
    struct boot *b = NULL;

    ck_assert_int_eq(boot_open("auto", 1000, &b), FX_OK);
    ck_assert_ptr_null(b);
    set_env(dir_path, 0, 1);
    /* NULL: FABXFER_BOOTSTRAP, whose default is auto. */
    ck_assert_int_eq(boot_open(NULL, 0, &b), FX_OK);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_eq(b->ops, &boot_local_ops);
    ck_assert_int_eq(b->rank, 0);
    ck_assert_int_eq(b->size, 1);
    ck_assert_int_eq(b->single_host, 1);
    ck_assert_int_eq(b->timeout_ms, 30000);
    boot_close(b);
}
END_TEST

START_TEST(test_single_rank)
{
    set_env(dir_path, 0, 1);
    ck_assert_int_eq(rank_work(0, 1, 1000), 0);
}
END_TEST

#define RANKS_MAX 64

/* Runs fn as n forked ranks; rank stopped (if >= 0) is expected to stop
 * itself and is killed once the others are done. */
static void run_ranks(int n, int (*fn)(int), int stopped)
{
    pid_t pids[RANKS_MAX];
    int st;

    ck_assert_int_le(n, RANKS_MAX);
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        ck_assert_int_ge(pids[r], 0);
        if (pids[r] == 0) {
            set_env(dir_path, r, n);
            _exit(fn(r));
        }
    }
    for (int r = 0; r < n; r++) {
        if (r == stopped)
            continue;
        ck_assert_int_eq(waitpid(pids[r], &st, 0), pids[r]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                      "rank %d failed at step %d (wait status 0x%x)", r,
                      WIFEXITED(st) ? WEXITSTATUS(st) : -1, st);
    }
    if (stopped >= 0) {
        kill(pids[stopped], SIGKILL);
        waitpid(pids[stopped], &st, 0);
    }
}

static int three_ranks(int rank)
{
    return rank_work(rank, 3, 5000);
}

START_TEST(test_allgather_three_ranks)
{
    run_ranks(3, three_ranks, -1);
}
END_TEST

/* Point to point at 64 ranks: 32 "targets" each send to the 4 "sources"
 * of their residue mod 8, which get from those 4 only, and every rank to
 * itself, which takes no get; one exchange costs a rank one fence and a
 * get per peer, never one per rank of the job. */
enum { XRANKS = 64, XHALF = 32 };

static int exchange_rank(int rank)
{
    int to[XHALF + 1], from[XHALF + 1], nto = 0, nfrom = 0, step = 0;
    char msg[XHALF + 1][32];
    const void *out[XHALF + 1];
    size_t len[XHALF + 1];
    struct fx_gather *got = NULL;
    struct boot *b = NULL;

    TRY(boot_open("local", 20000, &b) == FX_OK && b != NULL);
    for (int r = 0; r < XHALF; r++) {
        int peer = rank < XHALF ? XHALF + r : r;

        if (peer % 8 != rank % 8)
            continue;
        if (rank >= XHALF) {
            snprintf(msg[nto], sizeof(msg[nto]), "from %d to %d", rank, peer);
            out[nto] = msg[nto];
            len[nto] = strlen(msg[nto]);
            to[nto++] = peer;
        } else {
            from[nfrom++] = peer;
        }
    }
    /* and each rank to itself (a rank that writes to itself): no get */
    snprintf(msg[nto], sizeof(msg[nto]), "from %d to %d", rank, rank);
    out[nto] = msg[nto];
    len[nto] = strlen(msg[nto]);
    to[nto++] = rank;
    from[nfrom++] = rank;
    TRY(boot_exchange(b, "test", nto, to, out, len, nfrom, from, &got) ==
        FX_OK);
    TRY(b->gets == (unsigned long)nfrom - 1 &&
        nfrom == (rank < XHALF ? 5 : 1));
    for (int r = 0; r < XRANKS; r++) {
        char want[32];
        int peer = 0;

        for (int k = 0; k < nfrom; k++)
            peer |= from[k] == r;
        snprintf(want, sizeof(want), "from %d to %d", r, rank);
        TRY(peer ? got->len[r] == strlen(want) &&
                       memcmp(got->val[r], want, got->len[r]) == 0
                 : got->val[r] == NULL);
    }
    step = 0;
out:
    boot_gather_free(got);
    return rank_end(rank, step, b);
}

START_TEST(test_exchange_64_ranks)
{
    run_ranks(XRANKS, exchange_rank, -1);
}
END_TEST

START_TEST(test_fence_timeout)
{
    double t0;
    struct boot *b = NULL;
    long ms;

    set_env(dir_path, 0, 2);
    ck_assert_int_eq(boot_open("local", 200, &b), FX_OK);
    t0 = clock_now();
    ck_assert_int_eq(boot_barrier(b, "test"), FX_ERR_TIMEOUT);
    ms = ms_since(t0);
    ck_assert_int_ge(ms, 200);
    ck_assert_int_lt(ms, 2000);
    ck_assert_msg(strstr(err_last(), "bootstrap fence 0 timed out after") &&
                  strstr(err_last(), "waiting for rank(s) 1"),
                  "message: %s", err_last());
    boot_close(b);
}
END_TEST

START_TEST(test_get_timeout)
{
    struct boot *b = NULL;
    void *val = NULL;
    size_t len = 0;

    set_env(dir_path, 0, 2);
    ck_assert_int_eq(boot_open("local", 200, &b), FX_OK);
    ck_assert_int_eq(b->ops->get(b, 1, "blob", &val, &len), FX_ERR_TIMEOUT);
    ck_assert_ptr_null(val);
    ck_assert_msg(strstr(err_last(), "key \"blob\" from rank 1 timed out"),
                  "message: %s", err_last());
    ck_assert_int_eq(b->ops->get(b, 2, "blob", &val, &len), FX_ERR_INVALID);
    boot_close(b);
}
END_TEST

/* ---- slow is not dead, and blame goes to the rank that stopped ---- */
#define WATCH_MS 200

/* Rank 1 computes 3.5 timeouts between two barriers: rank 0, which waits
 * in the second, must see a live rank using CPU and wait for it (a fence
 * bounded by the clock alone fails it). */
static int busy_rank(int rank)
{
    struct boot *b = NULL;
    int step = 0;

    TRY(boot_open("local", WATCH_MS, &b) == FX_OK);
    TRY(boot_barrier(b, "test") == FX_OK);
    if (rank == 1)
        for (double t0 = clock_now(); clock_now() < t0 + 3.5 * WATCH_MS / 1e3;)
            ;
    TRY(boot_barrier(b, "test") == FX_OK);
    step = 0;
out:
    return rank_end(rank, step, b);
}

/* Rank 2 stops for good; rank 1 waits for its value, rank 0 for rank 1's,
 * which never comes since rank 1 waits. Rank 1 names rank 2, and so must
 * rank 0: rank 1 was alive and waiting, not at fault. */
static int chain_rank(int rank)
{
    struct boot *b = NULL;
    void *val = NULL;
    size_t len;
    int step = 0;

    TRY(boot_open("local", WATCH_MS, &b) == FX_OK);
    TRY(boot_barrier(b, "test") == FX_OK);
    if (rank == 2)
        raise(SIGSTOP);
    TRY(b->ops->get(b, rank + 1, "never", &val, &len) == FX_ERR_TIMEOUT);
    TRY(strstr(err_last(), "rank(s) 2") != NULL ||
        strstr(err_last(), "(rank 2 has not put it)") != NULL);
    step = 0;
out:
    free(val);
    return rank_end(rank, step, b);
}

START_TEST(test_busy_rank_waited_for)
{
    run_ranks(2, busy_rank, -1);
}
END_TEST

START_TEST(test_chain_names_the_stopped_rank)
{
    run_ranks(3, chain_rank, 2);
}
END_TEST

START_TEST(test_bad_keys)
{
    struct boot *b = NULL;
    void *val = NULL;
    size_t len = 0;
    char long_key[300];

    set_env(dir_path, 0, 1);
    ck_assert_int_eq(boot_open("local", 200, &b), FX_OK);
    ck_assert_int_eq(b->ops->put(b, "a/b", "x", 1), FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err_last(), "\"a/b\""));
    ck_assert_int_eq(b->ops->put(b, "", "x", 1), FX_ERR_INVALID);
    ck_assert_int_eq(b->ops->get(b, 0, "../x", &val, &len), FX_ERR_INVALID);
    memset(long_key, 'k', sizeof(long_key) - 1);
    long_key[sizeof(long_key) - 1] = '\0';
    ck_assert_int_eq(b->ops->put(b, long_key, "x", 1), FX_ERR_INVALID);
    ck_assert_int_eq(b->ops->put(b, "ok.Key_1-2", "x", 1), FX_OK);
    ck_assert_int_eq(b->ops->get(b, 0, "ok.Key_1-2", &val, &len), FX_OK);
    ck_assert_int_eq(len, 1);
    free(val);
    /* An empty value is a value. */
    ck_assert_int_eq(b->ops->put(b, "empty", NULL, 0), FX_OK);
    ck_assert_int_eq(b->ops->get(b, 0, "empty", &val, &len), FX_OK);
    ck_assert_int_eq(len, 0);
    free(val);
    boot_close(b);
}
END_TEST

START_TEST(test_allgather_len_mismatch)
{
    uint64_t mine = 7, all[2];
    struct boot *b = NULL;
    pid_t pid;
    int st;

    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        uint32_t short_val = 1;

        /* Rank 1 takes part in allgather 0 with 4 bytes instead of 8. */
        set_env(dir_path, 1, 2);
        if (boot_open("local", 2000, &b) != FX_OK)
            _exit(1);
        if (b->ops->put(b, "ag.0", &short_val, sizeof(short_val)) != FX_OK ||
            b->ops->fence(b) != FX_OK)
            _exit(2);
        boot_close(b);
        _exit(0);
    }
    set_env(dir_path, 0, 2);
    ck_assert_int_eq(boot_open("local", 2000, &b), FX_OK);
    ck_assert_int_eq(boot_allgather(b, "test", &mine, sizeof(mine), all),
                     FX_ERR_INVALID);
    ck_assert_msg(strstr(err_last(), "rank 1 contributed 4 bytes"),
                  "message: %s", err_last());
    boot_close(b);
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
END_TEST

#define expect_msg(sub)                                                \
    ck_assert_msg(strstr(err_last(), (sub)) != NULL, "message \"%s\" "  \
                  "lacks \"%s\"", err_last(), (sub))

/* A file of the folder as a rank of the job with nonce writes it. */
static void plant(const char *name, const char *nonce, const char *val)
{
    char path[sizeof(dir_path) + 64];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir_path, name);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%s\n%s", nonce, val);
    fclose(f);
}

START_TEST(test_nonce_needed)
{
    struct boot *b = NULL;

    set_env(dir_path, 0, 1);
    unsetenv("FABXFER_LOCAL_NONCE");
    ck_assert_int_eq(boot_open("local", 200, &b), FX_ERR_BOOTSTRAP);
    expect_msg("FABXFER_LOCAL_NONCE, which are not all set");
    setenv("FABXFER_LOCAL_NONCE", "0123\n", 1);
    ck_assert_int_eq(boot_open("local", 200, &b), FX_ERR_BOOTSTRAP);
    expect_msg("FABXFER_LOCAL_NONCE=\"0123\\n\" is not 16 hex digits");
    ck_assert_ptr_null(b);
}
END_TEST

/* Whoever may write in the folder may plant another rank's values. */
START_TEST(test_folder_mode)
{
    static const mode_t bad[] = {0777, 0770, 0702, 01777};
    struct boot *b = NULL;
    char want[sizeof(dir_path) + 64];

    set_env(dir_path, 0, 1);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(chmod(dir_path, bad[i]), 0);
        ck_assert_int_eq(boot_open("local", 200, &b), FX_ERR_BOOTSTRAP);
        snprintf(want, sizeof(want), "folder %s (FABXFER_LOCAL_DIR) has "
                 "mode %04o", dir_path, (unsigned)bad[i]);
        expect_msg(want);
        ck_assert_ptr_null(b);
    }
    /* Others may read: nothing to plant that way. */
    ck_assert_int_eq(chmod(dir_path, 0755), 0);
    ck_assert_int_eq(boot_open("local", 200, &b), FX_OK);
    boot_close(b);
}
END_TEST

START_TEST(test_folder_owner)
{
    struct boot *b = NULL;
    char link[sizeof(dir_path) + 8];

    set_env(dir_path, 0, 1);
    if (geteuid() == 0) {
        /* nobody's: even root refuses a folder it does not own. */
        ck_assert_int_eq(chown(dir_path, 65534, (gid_t)-1), 0);
        ck_assert_int_eq(boot_open("local", 200, &b), FX_ERR_BOOTSTRAP);
        expect_msg("belongs to uid 65534, not to this process (euid 0)");
        expect_msg(dir_path);
        ck_assert_int_eq(chown(dir_path, 0, (gid_t)-1), 0);
    } else {
        fprintf(stderr, "test_folder_owner: not root, owner not checked\n");
    }
    /* A symlink to a good folder is no folder of the launcher's. */
    snprintf(link, sizeof(link), "%s.lnk", dir_path);
    ck_assert_int_eq(symlink(dir_path, link), 0);
    set_env(link, 0, 1);
    ck_assert_int_eq(boot_open("local", 200, &b), FX_ERR_BOOTSTRAP);
    unlink(link);
    expect_msg("is not a folder (or is a symbolic link)");
    ck_assert_ptr_null(b);
}
END_TEST

/* A FIFO where a value should be: an error at once, not a read that
 * blocks past every timeout. */
START_TEST(test_fifo_refused)
{
    char path[sizeof(dir_path) + 32];
    double t0;
    struct boot *b = NULL;
    void *val = NULL;
    size_t len = 0;

    set_env(dir_path, 0, 2);
    ck_assert_int_eq(boot_open("local", 2000, &b), FX_OK);
    snprintf(path, sizeof(path), "%s/kv.1.blob", dir_path);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    t0 = clock_now();
    ck_assert_int_eq(b->ops->get(b, 1, "blob", &val, &len),
                     FX_ERR_BOOTSTRAP);
    ck_assert_int_lt(ms_since(t0), 1000);
    expect_msg("bootstrap get of key \"blob\" from rank 1: ");
    expect_msg("/kv.1.blob is a FIFO; refused");
    ck_assert_ptr_null(val);
    /* And in place of a peer's fence marker. */
    snprintf(path, sizeof(path), "%s/fence.0.1", dir_path);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    t0 = clock_now();
    ck_assert_int_eq(boot_barrier(b, "test"), FX_ERR_BOOTSTRAP);
    ck_assert_int_lt(ms_since(t0), 1000);
    expect_msg("bootstrap fence 0: ");
    expect_msg("/fence.0.1 is a FIFO; refused");
    boot_close(b);
}
END_TEST

/* A symlink is refused even to a file that holds a good value. */
START_TEST(test_symlink_refused)
{
    char path[sizeof(dir_path) + 32];
    struct boot *b = NULL;
    void *val = NULL;
    size_t len = 0;

    set_env(dir_path, 0, 2);
    ck_assert_int_eq(boot_open("local", 2000, &b), FX_OK);
    plant("elsewhere", NONCE, "planted");
    snprintf(path, sizeof(path), "%s/kv.1.blob", dir_path);
    ck_assert_int_eq(symlink("elsewhere", path), 0);
    ck_assert_int_eq(b->ops->get(b, 1, "blob", &val, &len),
                     FX_ERR_BOOTSTRAP);
    expect_msg("/kv.1.blob is a symbolic link; refused");
    ck_assert_ptr_null(val);
    boot_close(b);
}
END_TEST

/* Files an earlier job left in the folder are never read: a wait goes on
 * past them, and says so if it times out; a put of this job replaces them. */
START_TEST(test_stale_files)
{
    struct boot *b0 = NULL, *b1 = NULL;
    void *val = NULL;
    size_t len = 0;

    set_env(dir_path, 1, 2);
    ck_assert_int_eq(boot_open("local", 200, &b1), FX_OK);
    set_env(dir_path, 0, 2);
    ck_assert_int_eq(boot_open("local", 200, &b0), FX_OK);

    plant("kv.1.blob", OTHER_NONCE, "old");
    plant("fence.0.1", OTHER_NONCE, "");
    ck_assert_int_eq(b0->ops->get(b0, 1, "blob", &val, &len),
                     FX_ERR_TIMEOUT);
    expect_msg("from rank 1 timed out after");
    expect_msg("/kv.1.blob is a stale file from another job (another "
               "FABXFER_LOCAL_NONCE), ignored");
    ck_assert_ptr_null(val);
    ck_assert_int_eq(boot_barrier(b0, "test"), FX_ERR_TIMEOUT);
    expect_msg("waiting for rank(s) 1; ");
    expect_msg("/fence.0.1 is a stale file from another job");
    /* Without a newline after the nonce, or shorter than one: stale too. */
    plant("kv.1.short", "0123", "");
    ck_assert_int_eq(b0->ops->get(b0, 1, "short", &val, &len),
                     FX_ERR_TIMEOUT);
    expect_msg("/kv.1.short is a stale file");

    ck_assert_int_eq(b1->ops->put(b1, "blob", "new", 3), FX_OK);
    ck_assert_int_eq(b0->ops->get(b0, 1, "blob", &val, &len), FX_OK);
    ck_assert_int_eq(len, 3);
    ck_assert_int_eq(memcmp(val, "new", 3), 0);
    free(val);
    boot_close(b0);
    boot_close(b1);
}
END_TEST

START_TEST(test_launch_invalid)
{
    char *argv[] = {"true", NULL};
    char *empty[] = {NULL};

    ck_assert_int_eq(fx_launch_local(0, argv, 0), FX_ERR_INVALID);
    ck_assert_int_eq(fx_launch_local(1, NULL, 0), FX_ERR_INVALID);
    ck_assert_int_eq(fx_launch_local(1, empty, 0), FX_ERR_INVALID);
    ck_assert_int_eq(fx_launch_local(1, argv, -1), FX_ERR_INVALID);
}
END_TEST

/* torch.distributed's env:// variables: ours replace inherited RANK and
 * sizes, an inherited MASTER_PORT is kept. */
START_TEST(test_launch_torch_env)
{
    char script[] = "echo \"$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE "
                    "$MASTER_ADDR $MASTER_PORT\" > \"$0/torch.$RANK\"";
    char *argv[] = {"sh", "-c", script, dir_path, NULL};
    char path[sizeof(dir_path) + 16], addr[64];
    int rank, local, world, lworld, port[3];
    FILE *f;

    setenv("RANK", "7", 1);
    setenv("WORLD_SIZE", "99", 1);
    unsetenv("MASTER_ADDR");
    for (int round = 0; round < 2; round++) {
        if (round == 0)
            unsetenv("MASTER_PORT");
        else
            setenv("MASTER_PORT", "12345", 1);
        ck_assert_int_eq(fx_launch_local(3, argv, 10000), FX_OK);
        for (int r = 0; r < 3; r++) {
            snprintf(path, sizeof(path), "%s/torch.%d", dir_path, r);
            f = fopen(path, "r");
            ck_assert_msg(f != NULL, "rank %d wrote no %s (its RANK?)", r,
                          path);
            ck_assert_int_eq(fscanf(f, "%d %d %d %d %63s %d", &rank, &local,
                                    &world, &lworld, addr, &port[r]), 6);
            fclose(f);
            unlink(path);
            ck_assert_int_eq(rank, r);
            ck_assert_int_eq(local, r);
            ck_assert_int_eq(world, 3);
            ck_assert_int_eq(lworld, 3);
            ck_assert_str_eq(addr, "127.0.0.1");
            ck_assert_int_eq(port[r], round == 0 ? port[0] : 12345);
        }
        /* ours below the kernel's own range, where a tcp;ofi_rxm endpoint
         * binding to port 0 cannot be given it too */
        ck_assert_int_ge(port[0], 10000);
        if (round == 0)
            ck_assert_int_lt(port[0], host_ephemeral_low());
    }
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("MASTER_PORT");
}
END_TEST

START_TEST(test_launch_ok_and_cleanup)
{
    char script[] = "echo \"$FABXFER_LOCAL_DIR $FABXFER_LOCAL_SIZE "
                    "$FABXFER_LOCAL_NONCE $(stat -c %a $FABXFER_LOCAL_DIR)\" "
                    "> \"$0/dir.$FABXFER_LOCAL_RANK\"";
    char *argv[] = {"sh", "-c", script, dir_path, NULL};
    char path[sizeof(dir_path) + 16], rdv[256], nonce[2][64], mode[16];
    struct stat sb;
    int size = 0;
    FILE *f;

    /* An inherited nonce (a launcher inside a rank) is replaced. */
    setenv("FABXFER_LOCAL_NONCE", NONCE, 1);
    ck_assert_int_eq(fx_launch_local(2, argv, 10000), FX_OK);
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof(path), "%s/dir.%d", dir_path, r);
        f = fopen(path, "r");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(fscanf(f, "%255s %d %63s %15s", rdv, &size,
                                nonce[r], mode), 4);
        fclose(f);
        ck_assert_int_eq(size, 2);
        ck_assert_ptr_nonnull(strstr(rdv, "/fabxfer."));
        ck_assert_str_eq(mode, "700");
        ck_assert_uint_eq(strspn(nonce[r], "0123456789abcdef"), 16);
        ck_assert_uint_eq(strlen(nonce[r]), 16);
        ck_assert_str_ne(nonce[r], NONCE);
        ck_assert_str_eq(nonce[r], nonce[0]);
        /* The rendezvous folder is gone once the job is. */
        ck_assert_int_ne(stat(rdv, &sb), 0);
    }
}
END_TEST

START_TEST(test_launch_failures)
{
    char *argv[] = {"sh", "-c", "exit $FABXFER_LOCAL_RANK", NULL};

    ck_assert_int_eq(fx_launch_local(3, argv, 10000), FX_ERR_PEER);
    ck_assert_msg(strstr(err_last(), "2 of 3 ranks failed") &&
                  strstr(err_last(), "rank 1 (exit status 1)") &&
                  strstr(err_last(), "rank 2 (exit status 2)"),
                  "message: %s", err_last());
}
END_TEST

START_TEST(test_launch_survivors_and_timeout)
{
    /* Rank 0 dies at once; rank 1 must not be killed for it, only by the
     * timeout. */
    char *argv[] = {"sh", "-c",
                    "[ $FABXFER_LOCAL_RANK = 0 ] && kill -KILL $$; sleep 5",
                    NULL};
    double t0;
    long ms;

    t0 = clock_now();
    ck_assert_int_eq(fx_launch_local(2, argv, 300), FX_ERR_TIMEOUT);
    ms = ms_since(t0);
    ck_assert_int_ge(ms, 300);
    ck_assert_int_lt(ms, 3000);
    ck_assert_msg(strstr(err_last(), "timed out after 300 ms") &&
                  strstr(err_last(), "rank(s) 1 still running") &&
                  strstr(err_last(), "rank 0 (SIGKILL)"),
                  "message: %s", err_last());
    /* Every rank was reaped: no zombie is left behind. */
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
    ck_assert_int_eq(errno, ECHILD);
}
END_TEST

START_TEST(test_launch_ranks_meet)
{
    char *argv[] = {"/proc/self/exe", "--as-rank", NULL};
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

    ck_assert_int_gt(n, 0);
    self[n] = '\0';
    argv[0] = self;
    ck_assert_msg(fx_launch_local(4, argv, 20000) == FX_OK, "%s", err_last());
}
END_TEST

static Suite *boot_suite(void)
{
    const struct unit_test open[] = {
        {test_open_none}, {test_open_bogus}, {test_open_pmix},
        {test_open_local_unset}, {test_open_local_bad_rank}, {test_open_auto},
    };
    const struct unit_test local[] = {
        {test_single_rank}, {test_allgather_three_ranks},
        {test_exchange_64_ranks}, {test_fence_timeout}, {test_get_timeout},
        {test_busy_rank_waited_for}, {test_chain_names_the_stopped_rank},
        {test_bad_keys}, {test_allgather_len_mismatch}, {test_nonce_needed},
        {test_folder_mode}, {test_folder_owner}, {test_fifo_refused},
        {test_symlink_refused}, {test_stale_files},
    };
    const struct unit_test launch[] = {
        {test_launch_invalid}, {test_launch_ok_and_cleanup},
        {test_launch_torch_env}, {test_launch_failures},
        {test_launch_survivors_and_timeout}, {test_launch_ranks_meet},
    };
    TCase *tc;
    Suite *s = suite_create("boot");

    tc = unit_tcase(s, "open", 0, open, UNIT_ROWS(open));
    tcase_add_checked_fixture(tc, setup, teardown);
    tc = unit_tcase(s, "local", 30, local, UNIT_ROWS(local));
    tcase_add_checked_fixture(tc, setup, teardown);
    tc = unit_tcase(s, "launch", 60, launch, UNIT_ROWS(launch));
    tcase_add_checked_fixture(tc, setup, teardown);
    return s;
}

int main(int argc, char *argv[])
{
    /* Started by test_launch_ranks_meet through fx_launch_local. */
    if (argc > 1 && strcmp(argv[1], "--as-rank") == 0) {
        const char *rank = getenv("FABXFER_LOCAL_RANK");
        const char *size = getenv("FABXFER_LOCAL_SIZE");

        if (rank == NULL || size == NULL)
            return 99;
        return rank_work(atoi(rank), atoi(size), 10000);
    }
    return unit_run(boot_suite());
}
