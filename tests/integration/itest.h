/*
 * Helpers for the multi-process tests. A test program is its own launcher:
 * started by hand (or by make check) it runs fx_launch_local() on itself,
 * and the copies it starts find FABXFER_LOCAL_RANK set and play a rank.
 */
#ifndef FX_ITEST_H
#define FX_ITEST_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fabxfer.h>

#include "util/clock.h" /* clock_now(): the library's one clock */
#ifdef FX_TEST_CUDA
#include "mem/mem.h" /* mem_dev_free() */
#endif

#define ITEST_FAIL(...)                                                       \
    do {                                                                      \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                  \
        fprintf(stderr, __VA_ARGS__);                                         \
        fputc('\n', stderr);                                                  \
        exit(1);                                                              \
    } while (0)

/* The call must succeed; else print the status and the context's detail. */
#define ITEST_OK(ctx, call)                                                   \
    do {                                                                      \
        fx_status_t st_ = (call);                                             \
        if (st_ != FX_OK)                                                     \
            ITEST_FAIL("%s -> %s: %s", #call, fx_strerror(st_),               \
                       fx_last_error(ctx));                                   \
    } while (0)

/* The call must fail with want, and its detail must contain every string
 * of the NULL-terminated list. */
static inline void itest_expect(fx_ctx_t *ctx, fx_status_t got,
                                fx_status_t want, const char *what,
                                const char *const *needles)
{
    const char *msg = fx_last_error(ctx);

    if (got != want)
        ITEST_FAIL("%s: expected %s, got %s (%s)", what, fx_strerror(want),
                   fx_strerror(got), msg);
    for (; needles && *needles; needles++)
        if (strstr(msg, *needles) == NULL)
            ITEST_FAIL("%s: message \"%s\" lacks \"%s\"", what, msg,
                       *needles);
    printf("ok   %s: %s\n", what, msg);
}
#define ITEST_EXPECT(ctx, call, want, ...)                                    \
    do {                                                                      \
        const char *const needles_[] = {__VA_ARGS__, NULL};                   \
        itest_expect(ctx, (call), want, #call, needles_);                     \
    } while (0)

/* This process's rank when it was started as one (by fabxfer-run, or by
 * a PMIx launcher: mpirun, srun --mpi=pmix), else -1. */
static inline int itest_rank(void)
{
    const char *r = getenv("FABXFER_LOCAL_RANK");

    if (r == NULL)
        r = getenv("PMIX_RANK");
    return r ? atoi(r) : -1;
}

/* Options for one rank without a bootstrap, on a given provider. */
static inline void itest_solo_opts(fx_ctx_opts_t *o, const char *prov,
                                   int rank, int size)
{
    fx_ctx_opts_init(o);
    o->bootstrap = "none";
    o->provider = prov;
    o->rank = rank;
    o->size = size;
    o->single_host = 1;
}

/* A context of one rank without a bootstrap, on a given provider. */
static inline fx_ctx_t *itest_solo_ctx(const char *prov, int rank, int size)
{
    fx_ctx_opts_t o;
    fx_ctx_t *ctx;

    itest_solo_opts(&o, prov, rank, size);
    ITEST_OK(NULL, fx_ctx_create(&o, &ctx));
    return ctx;
}

/* A rank's session, its manifest and its context destroyed in the order
 * the library asks (the session first, the context last); any may be
 * NULL. */
static inline void itest_close(fx_session_t *s, fx_manifest_t *m,
                               fx_ctx_t *ctx)
{
    fx_session_destroy(s);
    fx_manifest_destroy(m);
    fx_ctx_destroy(ctx);
}

/* itest_close, then the rank's tensors: their host memory and, built with
 * FX_TEST_CUDA, their GPU copy dev. */
static inline void itest_close_mem(fx_session_t *s, fx_manifest_t *m,
                                   fx_ctx_t *ctx, void *host, void *dev)
{
    itest_close(s, m, ctx);
#ifdef FX_TEST_CUDA
    mem_dev_free(dev);
#else
    (void)dev;
#endif
    free(host);
}

/* Run this program as n ranks of the local launcher, which hand each
 * copy this process's environment and its FABXFER_LOCAL_* variables. */
static inline fx_status_t itest_launch(int n, int timeout_ms)
{
    char *argv[] = {"/proc/self/exe", NULL};
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

    if (len <= 0)
        ITEST_FAIL("readlink /proc/self/exe");
    exe[len] = '\0';
    argv[0] = exe;
    return fx_launch_local(n, argv, timeout_ms);
}

/* Run scenario over prov as n ranks (FX_TEST_SCENARIO and
 * FABXFER_PROVIDER set for them) and say how it went: 1 if it failed. */
static inline int itest_scenario(int n, const char *scenario,
                                 const char *prov)
{
    fx_status_t st;

    setenv("FX_TEST_SCENARIO", scenario, 1);
    setenv("FABXFER_PROVIDER", prov, 1);
    st = itest_launch(n, 120000);
    printf("%s %s over %s\n", st == FX_OK ? "PASS" : "FAIL", scenario, prov);
    return st != FX_OK;
}

/* A rank's part in a scenario, by the scenario's name. */
struct itest_part {
    const char *scenario; /* NULL: any other scenario */
    int (*run)(void);
};

/* Play this rank's part in FX_TEST_SCENARIO: the row of its name, else
 * the last row (the default part). */
static inline int itest_play(const struct itest_part *parts, size_t n)
{
    const char *sc = getenv("FX_TEST_SCENARIO");
    size_t i = 0;

    while (i + 1 < n && strcmp(sc, parts[i].scenario) != 0)
        i++;
    return parts[i].run();
}

/* The run's folder (FX_TEST_DIR), where the ranks leave their words:
 * made from tmpl ("/tmp/...-XXXXXX"), which then holds its path. */
static inline void itest_dir_open(char *tmpl)
{
    if (mkdtemp(tmpl) == NULL)
        ITEST_FAIL("mkdtemp");
    setenv("FX_TEST_DIR", tmpl, 1);
}

/* Remove the files of the run's folder that globs names ("*", "dead
 * join*"), such as a scenario's words of the run before; globs NULL:
 * the folder itself, at the end. */
static inline void itest_dir_remove(const char *globs)
{
    const char *dir = getenv("FX_TEST_DIR");
    char cmd[4200];

    if (globs == NULL)
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    else
        snprintf(cmd, sizeof(cmd), "cd %s && rm -f %s", dir, globs);
    if (system(cmd) != 0)
        ITEST_FAIL("%s", cmd);
}

/* A word between ranks outside fabxfer: a file of the run's folder
 * (FX_TEST_DIR, which the test made for this run). */
static inline void itest_word_say(const char *word)
{
    char path[4096];

    snprintf(path, sizeof(path), "%s/%s", getenv("FX_TEST_DIR"), word);
    close(open(path, O_CREAT | O_WRONLY, 0600));
}

static inline int itest_word_heard(const char *word)
{
    char path[4096];

    snprintf(path, sizeof(path), "%s/%s", getenv("FX_TEST_DIR"), word);
    return access(path, F_OK) == 0;
}

/* A byte pattern that differs per offset and per seed. */
static inline unsigned char itest_byte(size_t i, unsigned seed)
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + seed;

    x ^= x >> 29;
    return (unsigned char)(x ^ (x >> 17));
}

static inline void itest_fill(unsigned char *buf, size_t len, size_t base,
                              unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = itest_byte(base + i, seed);
}

/* Index of the first byte that is not pattern(seed), or -1. */
static inline long long itest_check(const unsigned char *buf, size_t len,
                                    size_t base, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        if (buf[i] != itest_byte(base + i, seed))
            return (long long)i;
    return -1;
}

/* The application's allgather for a group (a join, a context of some of
 * the ranks): each member writes its bytes to a file of the run's folder
 * (tag.round.index, whole by a rename) and reads everyone's once they
 * are there. */
struct itest_group {
    const char *tag;
    int size, index;
    unsigned round;
};

static inline int itest_folder_allgather(void *arg, const void *mine, size_t n,
                            fx_gather_t *all)
{
    struct itest_group *g = arg;
    const char *dir = getenv("FX_TEST_DIR");
    char path[4096], tmp[4160];
    unsigned round = g->round++;
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s.%u.%d", dir, g->tag, round,
             g->index);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    if ((f = fopen(tmp, "wb")) == NULL || fwrite(mine, 1, n, f) != n ||
        fclose(f) != 0 || rename(tmp, path) != 0)
        ITEST_FAIL("writing %s", path);
    for (int i = 0; i < g->size; i++) {
        double until = clock_now() + 120;
        unsigned char *buf;
        long got;

        snprintf(path, sizeof(path), "%s/%s.%u.%d", dir, g->tag, round, i);
        while ((f = fopen(path, "rb")) == NULL)
            if (usleep(5000), clock_now() > until)
                return FX_ERR_TIMEOUT; /* the application's own bound */
        fseek(f, 0, SEEK_END);
        got = ftell(f);
        rewind(f);
        buf = malloc(got > 0 ? (size_t)got : 1);
        if (buf == NULL || fread(buf, 1, (size_t)got, f) != (size_t)got)
            ITEST_FAIL("reading %s", path);
        fclose(f);
        if (fx_gather_set(all, i, buf, (size_t)got) != FX_OK)
            ITEST_FAIL("fx_gather_set: %s", fx_last_error(NULL));
        free(buf);
    }
    return 0;
}

#endif
