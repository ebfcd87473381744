/*
 * One rank of the fault matrix (test_faults.sh): rank 0 is the source,
 * ranks 1 and 2 are targets that each hold the whole model (replicas).
 * The script starts the three ranks in three network namespaces with the
 * "local" bootstrap and faults one of them at a phase; this program only
 * runs versions, verifies every byte a target receives and writes its
 * verdict where the script reads it.
 *
 * The model: FX_FAULT_BIG tensors of FX_FAULT_BIG_KB KiB (direct writes)
 * between FX_FAULT_SMALL tensors of 1 to 8 KiB (buckets), in manifest
 * order big, small, small, ..., big, small, ... The first and last byte of
 * tensor i at version v is a mark, (v * 37 + i) & 0xff, that differs from
 * version v - 1's, so that a target can see a version start and end
 * landing without comparing everything.
 *
 * The phases (FX_FAULT_PHASE), each announced by FX_FAULT_TRIGGER, the
 * rank that sees it, writing <dir>/trigger and holding (no progress, so
 * that what is in flight stays in flight) until the script writes
 * <dir>/go, at most FX_FAULT_HOLD_MS:
 *   setup   the trigger is about to call fx_session_setup
 *   mid     a target has seen the first mark of version FX_FAULT_VERSION
 *           land: bytes are in flight
 *   notify  a target has seen every mark of that version land: the source
 *           is completing its writes and notifying
 *   none    no fault (the baseline)
 * After each version the ranks meet at the application's step barrier
 * (step_barrier): a rank that failed says so, and the source says whether
 * they stop or go on.
 *
 * The verdict, <dir>/rank.<r>, one line:
 *   ok <versions>
 *   stopped <version> <unix time>   (fine, but a peer failed)
 *   error <version> <unix time> <unix time the version began> <message>
 *   wrong <version> <tensor> <byte offset>
 * A target whose wait succeeded and whose bytes differ writes "wrong" and
 * exits 3; nothing else may ever do that. A rank that got through its
 * teardown (fx_ctx_destroy) leaves <dir>/exit.<r> too.
 *
 * Run by hand (outside namespaces too): see test_faults.sh.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fabxfer.h>

#define NRANKS 3
#define MAX_TENSORS 256

struct tensor {
    char name[32];
    size_t bytes;
    size_t off; /* in the rank's region */
};

static struct tensor tens[MAX_TENSORS];
static int ntens;
static const char *dir;
static int rank = -1;
static double version_start; /* unix time the current version began */

static long env_long(const char *name, long def)
{
    const char *v = getenv(name);

    return v != NULL && *v != '\0' ? strtol(v, NULL, 10) : def;
}

static double unix_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Write one line to <dir>/name, whole or not at all (written aside, then
 * renamed): the script and the other ranks read these files while they
 * are written. */
static void vput_line(const char *name, const char *fmt, va_list ap)
{
    char path[4096], tmp[4200];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    if ((f = fopen(tmp, "w")) == NULL)
        return;
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    fclose(f);
    rename(tmp, path);
}

static void put_line(const char *name, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void put_line(const char *name, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vput_line(name, fmt, ap);
    va_end(ap);
}

static void verdict(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Write this rank's verdict (once: the first one stands). */
static void verdict(const char *fmt, ...)
{
    static int written;
    char name[32];
    va_list ap;

    if (written++)
        return;
    snprintf(name, sizeof(name), "rank.%d", rank);
    va_start(ap, fmt);
    vput_line(name, fmt, ap);
    va_end(ap);
}

static void fail_with(fx_ctx_t *ctx, uint64_t v, fx_status_t st,
                      const char *what)
{
    char msg[1024];
    const char *m = fx_last_error(ctx);

    /* one line: the message may hold newlines */
    snprintf(msg, sizeof(msg), "%s: %s: %s", what, fx_strerror(st),
             m ? m : "");
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    verdict("error %llu %.3f %.3f %s", (unsigned long long)v, unix_now(),
            version_start, msg);
    fprintf(stderr, "rank %d: version %llu: %s\n", rank,
            (unsigned long long)v, msg);
}

static void define_model(void)
{
    long nbig = env_long("FX_FAULT_BIG", 4);
    long big_kb = env_long("FX_FAULT_BIG_KB", 2048);
    long nsmall = env_long("FX_FAULT_SMALL", 96);
    long per = nbig > 0 ? (nsmall + nbig - 1) / nbig : nsmall;

    ntens = 0;
    for (long b = 0, s = 0; (b < nbig || s < nsmall) && ntens < MAX_TENSORS;) {
        if (b < nbig) {
            snprintf(tens[ntens].name, sizeof(tens[0].name), "big.%ld", b);
            tens[ntens++].bytes = (size_t)big_kb * 1024;
            b++;
        }
        for (long k = 0; k < per && s < nsmall && ntens < MAX_TENSORS;
             k++, s++) {
            snprintf(tens[ntens].name, sizeof(tens[0].name), "small.%ld", s);
            tens[ntens++].bytes = 1024 * (size_t)(1 + s % 8) + 8 * (s % 5);
        }
    }
}

static inline unsigned char mark(int i, uint64_t v)
{
    return (unsigned char)((v * 37 + (uint64_t)i) & 0xff);
}

static inline unsigned char pat(int i, size_t k, uint64_t v, size_t len)
{
    uint64_t x;

    if (k == 0 || k == len - 1)
        return mark(i, v);
    x = (uint64_t)k * 0x9E3779B97F4A7C15ull + (uint64_t)i * 7919 +
        v * 104729;
    x ^= x >> 29;
    return (unsigned char)(x ^ (x >> 17));
}

static void fill(unsigned char *mem, uint64_t v)
{
    for (int i = 0; i < ntens; i++)
        for (size_t k = 0; k < tens[i].bytes; k++)
            mem[tens[i].off + k] = pat(i, k, v, tens[i].bytes);
}

/* Index of the first tensor with a wrong byte (its offset in *at), or -1. */
static int check(const unsigned char *mem, uint64_t v, size_t *at)
{
    for (int i = 0; i < ntens; i++)
        for (size_t k = 0; k < tens[i].bytes; k++)
            if (mem[tens[i].off + k] != pat(i, k, v, tens[i].bytes)) {
                *at = k;
                return i;
            }
    return -1;
}

/* How many of the 2 * ntens marks of version v have landed. */
static int marks_in(const volatile unsigned char *mem, uint64_t v)
{
    int n = 0;

    for (int i = 0; i < ntens; i++) {
        n += mem[tens[i].off] == mark(i, v);
        n += mem[tens[i].off + tens[i].bytes - 1] == mark(i, v);
    }
    return n;
}

/* Announce the phase and hold until the script says go. */
static void hold(const char *phase, uint64_t v)
{
    char path[4096];
    long hold_ms = env_long("FX_FAULT_HOLD_MS", 10000);

    put_line("trigger", "%s %d %llu %.3f", phase, rank, (unsigned long long)v,
             unix_now());
    /* At set-up the others already wait in its first collective, whose
     * timeout runs while this rank is held: on a loaded host the script's
     * go came after it (blip.setup.source, named 0.76 s before the fault),
     * so here the hold ends at a quarter of the timeout whatever. */
    if (strcmp(phase, "setup") == 0 &&
        hold_ms > env_long("FABXFER_TIMEOUT_MS", 3000) / 4)
        hold_ms = env_long("FABXFER_TIMEOUT_MS", 3000) / 4;
    snprintf(path, sizeof(path), "%s/go", dir);
    for (long t = 0; t < hold_ms && access(path, F_OK) != 0; t++)
        usleep(1000);
}

/* Drive progress until the marks of version v say the phase is reached
 * (mid: one mark; notify: all of them), or the timeout passes. */
static void watch(fx_ctx_t *ctx, const unsigned char *mem, uint64_t v,
                  int all)
{
    int want = all ? 2 * ntens : 1;
    double end = unix_now() + env_long("FABXFER_TIMEOUT_MS", 3000) / 1e3;

    while (marks_in(mem, v) < want && unix_now() < end)
        fx_progress(ctx);
}

/* Whether rank r's process is gone: its pid file (written at start) names
 * a process that no longer exists or is a zombie. A stopped process is
 * alive: the application waits for it, as a real one would for an
 * inference engine that is slow to come back. */
static int rank_gone(int r)
{
    char path[4096], line[512];
    FILE *f;
    int pid = 0;
    char *p;

    snprintf(path, sizeof(path), "%s/pid.%d", dir, r);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    if (fscanf(f, "%d", &pid) != 1)
        pid = 0;
    fclose(f);
    if (pid <= 0)
        return 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    if ((f = fopen(path, "r")) == NULL)
        return 1;
    p = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
    fclose(f);
    /* "pid (comm) S ...": the state follows the last ')' */
    return p != NULL && (p[2] == 'Z' || p[2] == 'X');
}

/* 1 and *val if the file is there. */
static int get_file(const char *name, int *val)
{
    char path[4096];
    FILE *f;
    int ok;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    ok = fscanf(f, "%d", val) == 1;
    fclose(f);
    return ok;
}

/* The application's step barrier, its own and not fabxfer's (files in
 * FX_FAULT_DIR), run by the source: every target says whether its version
 * failed, and the source answers go or stop. The source never pushes
 * version v + 1 to a target that is alive and has not read version v
 * (the rule fabxfer.h leaves to the application: the next version would
 * overwrite bytes the target is still checking); it waits for such a
 * target FX_FAULT_STEP_MS (4 x FABXFER_TIMEOUT_MS by default: a target
 * stopped for T + 1 s comes back within it), then stops everyone. A
 * target whose process is gone is left to fabxfer: the source pushes the
 * next version to it too, and must name it. Returns 1 when every rank
 * must stop. */
static int step_barrier(uint64_t v, int mine)
{
    long t_ms = env_long("FABXFER_TIMEOUT_MS", 3000);
    long wait_ms = env_long("FX_FAULT_STEP_MS", 4 * t_ms);
    double end = unix_now() + wait_ms / 1e3;
    char name[64];
    int stop = mine, flag;

    if (rank != 0) {
        snprintf(name, sizeof(name), "step.%llu.%d", (unsigned long long)v,
                 rank);
        put_line(name, "%d", mine);
        snprintf(name, sizeof(name), "step.%llu.decision",
                 (unsigned long long)v);
        /* The source may still be waiting out its own timeout toward the
         * other target: wait one T longer than it waits for us. */
        end += t_ms / 1e3;
        while (!get_file(name, &flag) && !rank_gone(0) && unix_now() < end)
            usleep(2000);
        if (!get_file(name, &flag)) {
            fprintf(stderr, "rank %d: step %llu: no word from the source\n",
                    rank, (unsigned long long)v);
            flag = 1;
        }
        stop |= flag;
    } else {
        for (int r = 1; r < NRANKS; r++) {
            snprintf(name, sizeof(name), "step.%llu.%d",
                     (unsigned long long)v, r);
            while (!get_file(name, &flag) && !rank_gone(r) &&
                   unix_now() < end)
                usleep(2000);
            if (get_file(name, &flag)) {
                stop |= flag;
            } else if (rank_gone(r)) {
                fprintf(stderr, "rank 0: step %llu: rank %d is gone: the "
                        "next push must name it\n", (unsigned long long)v, r);
            } else {
                fprintf(stderr, "rank 0: step %llu: rank %d is alive but "
                        "did not read its version within %ld ms: stop\n",
                        (unsigned long long)v, r, wait_ms);
                stop = 1;
            }
        }
        snprintf(name, sizeof(name), "step.%llu.decision",
                 (unsigned long long)v);
        put_line(name, "%d", stop);
    }
    if (stop && !mine)
        /* This rank was fine: a peer's verdict says why it stops. */
        verdict("stopped %llu %.3f peer failure", (unsigned long long)v,
                unix_now());
    return stop;
}

int main(void)
{
    const char *phase = getenv("FX_FAULT_PHASE");
    long trigger = env_long("FX_FAULT_TRIGGER", -1);
    uint64_t fault_v = (uint64_t)env_long("FX_FAULT_VERSION", 2);
    uint64_t nvers = (uint64_t)env_long("FX_FAULT_VERSIONS", 3);
    fx_ctx_t *ctx;
    fx_manifest_t *m;
    fx_session_t *sess;
    fx_region_t *region;
    fx_role_t role;
    unsigned char *mem;
    size_t total = 0;
    fx_status_t st;
    uint64_t v = 0;
    int failed = 0;

    dir = getenv("FX_FAULT_DIR");
    if (dir == NULL || phase == NULL) {
        /* make check runs every check program: this one is run by
         * test_faults.sh, which sets these */
        printf("SKIP: test_faults is a rank of test_faults.sh, which sets "
               "FX_FAULT_DIR and FX_FAULT_PHASE\n");
        return 77;
    }
    rank = (int)env_long("FABXFER_LOCAL_RANK", -1);
    define_model();
    if ((st = fx_ctx_create(NULL, &ctx)) != FX_OK) {
        fail_with(NULL, 0, st, "fx_ctx_create");
        return 1;
    }
    rank = fx_ctx_rank(ctx);
    {
        char name[32];

        snprintf(name, sizeof(name), "pid.%d", rank);
        put_line(name, "%d", (int)getpid());
    }
    if (fx_ctx_size(ctx) != NRANKS) {
        fprintf(stderr, "test_faults: %d ranks, expected %d\n",
                fx_ctx_size(ctx), NRANKS);
        return 2;
    }
    role = rank == 0 ? FX_SOURCE : FX_TARGET;
    if (fx_manifest_create(&m) != FX_OK)
        return 2;
    for (int i = 0; i < ntens; i++) {
        int64_t shape[1] = {(int64_t)tens[i].bytes};

        tens[i].off = total;
        total += tens[i].bytes + (role == FX_SOURCE ? 64 : 0);
        if (fx_manifest_add_tensor(m, tens[i].name, "u8", 1, shape) != FX_OK)
            return 2;
        for (int r = 0; r < NRANKS; r++)
            if (fx_manifest_add_piece(m, r, r == 0 ? FX_SOURCE : FX_TARGET,
                                      tens[i].name, -1, 0, 0) != FX_OK) {
                fprintf(stderr, "add_piece: %s\n", fx_last_error(NULL));
                return 2;
            }
    }
    mem = calloc(1, total);
    if (mem == NULL)
        return 2;
    st = fx_region_register(ctx, mem, total, role == FX_SOURCE
                                                 ? FX_REGION_SOURCE
                                                 : FX_REGION_TARGET, &region);
    if (st == FX_OK)
        st = fx_session_create(ctx, m, &sess);
    for (int i = 0; i < ntens && st == FX_OK; i++)
        st = fx_session_bind(sess, role, tens[i].name, region, tens[i].off);
    if (st != FX_OK) {
        fail_with(ctx, 0, st, "before set-up");
        return 1;
    }
    if (role == FX_SOURCE)
        fill(mem, 1);
    if (strcmp(phase, "setup") == 0 && trigger == rank)
        hold("setup", 0);
    version_start = unix_now();
    st = fx_session_setup(sess);
    if (st != FX_OK) {
        fail_with(ctx, 0, st, "fx_session_setup");
        failed = 1;
    }
    for (v = 1; !failed && v <= nvers; v++) {
        int mine = 0;

        version_start = unix_now();

        if (role == FX_SOURCE) {
            /* version v was filled before the targets started waiting
             * for it (set-up or the last step barrier), so that their
             * wait times the push alone */
            st = fx_session_push(sess, v);
            if (st != FX_OK) {
                fail_with(ctx, v, st, "fx_session_push");
                mine = 1;
            } else if (v < nvers) {
                fill(mem, v + 1);
            }
        } else {
            size_t at = 0;
            int bad;

            if (v == fault_v && trigger == rank &&
                (strcmp(phase, "mid") == 0 || strcmp(phase, "notify") == 0)) {
                /* A live target releases v - 1 at its next wait, which
                 * comes after the watch: release it first, or the source
                 * never writes v (it waits for the release, then fails
                 * this rank). */
                if (v > 1 && (st = fx_session_release(sess, v - 1)) != FX_OK)
                    fail_with(ctx, v, st, "fx_session_release");
                watch(ctx, mem, v, strcmp(phase, "notify") == 0);
                hold(phase, v);
            }
            st = fx_session_wait(sess, v);
            if (st != FX_OK) {
                fail_with(ctx, v, st, "fx_session_wait");
                mine = 1;
            } else if ((bad = check(mem, v, &at)) >= 0) {
                verdict("wrong %llu %s %zu", (unsigned long long)v,
                        tens[bad].name, at);
                fprintf(stderr, "rank %d: version %llu reported whole, but "
                        "byte %zu of %s differs\n", rank,
                        (unsigned long long)v, at, tens[bad].name);
                return 3;
            }
        }
        failed = step_barrier(v, mine);
    }
    if (!failed)
        verdict("ok %llu", (unsigned long long)nvers);
    fx_session_destroy(sess);
    fx_manifest_destroy(m);
    fx_region_deregister(region);
    fx_ctx_destroy(ctx);
    free(mem);
    /* the script counts a rank that dies in teardown as a crash */
    {
        char path[4096];
        FILE *f;

        snprintf(path, sizeof(path), "%s/exit.%d", dir, rank);
        if ((f = fopen(path, "w")) != NULL)
            fclose(f);
    }
    return failed ? 1 : 0;
}
