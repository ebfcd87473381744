/*
 * The "local" bootstrap: ranks started by fabxfer-run on one host share a
 * rendezvous folder (FABXFER_LOCAL_DIR) and exchange values as files in it.
 *
 *   kv.<rank>.<key>     a value, made visible whole by rename()
 *   fence.<n>.<rank>    this rank has reached its n-th fence
 *
 * Every file starts with the job's nonce and a newline (FABXFER_LOCAL_NONCE,
 * from the launcher): a file with another nonce was left by an earlier job
 * in a reused folder and is ignored, as if absent.
 *
 * The folder must be ours (our euid) and writable by nobody else, or
 * another user could plant values; files are opened relative to it, with
 * O_NOFOLLOW (no symlink is followed out of it) and O_NONBLOCK (a FIFO
 * cannot block the open), and only regular files are read.
 *
 * Every wait polls with a short backoff and gives up after b->timeout_ms
 * naming the ranks it waited for: a dead rank leaves no other trace here.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "boot/boot.h"
#include "util/cfg.h"
#include "util/clock.h"
#include "util/error.h"

#define KEY_MAX 200         /* keeps kv.<rank>.<key> under NAME_MAX */
#define NAME_ROOM 256       /* room left after the folder in a path */
#define BACKOFF_FIRST_NS 50000L   /* small jobs meet within a few polls */
#define BACKOFF_CAP_NS 2000000L   /* a slow peer costs at most 2 ms extra */
#define MISSING_LISTED 32   /* ranks named in a timeout message */
#define HEAD_LEN (BOOT_LOCAL_NONCE_LEN + 1) /* "<nonce>\n" */
#define TMP_TRIES 100       /* names tried for a temporary file */
#define WHAT_MAX (KEY_MAX + 64) /* "bootstrap get of key ... from rank" */
#define NOTE_MAX (ERR_ESC_MAX + NAME_ROOM + 96) /* stale_note() */
#define GROUP_TAG_MAX 32    /* a group's tag, in every name of its files */
#define GROUP_PRE_MAX (GROUP_TAG_MAX + 4)

struct local {
    int dirfd;                 /* every file is opened relative to it */
    char dir[ERR_ESC_MAX];     /* the folder, escaped, for messages */
    char head[HEAD_LEN + 1];   /* "<nonce>\n", at the head of every file */
    unsigned fences;           /* fences this rank has entered */
    unsigned tmps;             /* temporary files this rank has made */
    int gaveup;                /* this rank has left gaveup.<rank> */
    char pre[GROUP_PRE_MAX];   /* before every name: "" for the job's
                                * ranks, "g.<tag>." for a group's */
};

/* What starts every name of this boot's files. */
static const char *pre(const struct boot *b)
{
    return ((const struct local *)b->priv)->pre;
}

/* What a look at a file found. */
enum found {
    FOUND,   /* a value of this job */
    ABSENT,  /* no file yet */
    STALE,   /* another job's file (another nonce) */
};

/* The first stale file a wait met, for its timeout message. */
struct stale {
    int seen;
    char name[NAME_ROOM];
};

struct backoff {
    double start;
    long sleep_ns;
};

static void backoff_start(struct backoff *w)
{
    w->start = clock_now();
    w->sleep_ns = BACKOFF_FIRST_NS;
}

static long elapsed_ms(const struct backoff *w)
{
    return (long)((clock_now() - w->start) * 1000.0);
}

/* Sleep once more; 0 once the timeout has passed (<= 0: no limit). */
static int backoff_wait(struct backoff *w, int timeout_ms)
{
    struct timespec ts;

    if (timeout_ms > 0 && elapsed_ms(w) >= timeout_ms)
        return 0;
    ts.tv_sec = 0;
    ts.tv_nsec = w->sleep_ns;
    nanosleep(&ts, NULL);
    w->sleep_ns = w->sleep_ns * 2 > BACKOFF_CAP_NS ? BACKOFF_CAP_NS
                                                   : w->sleep_ns * 2;
    return 1;
}

static int key_valid(const char *key)
{
    size_t n = 0;

    if (key == NULL || key[0] == '\0')
        return 0;
    for (const char *p = key; *p != '\0'; p++, n++) {
        char c = *p;

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return n <= KEY_MAX;
}

static fx_status_t check_key(const char *key)
{
    if (!key_valid(key))
        return err_set(FX_ERR_INVALID,
                       "bootstrap key \"%s\" is invalid: use 1 to %d of "
                       "A-Z a-z 0-9 . _ -", key ? key : "(null)", KEY_MAX);
    return FX_OK;
}

static fx_status_t check_nonce(const char *nonce)
{
    char esc[ERR_ESC_MAX];
    size_t n = strlen(nonce);
    int hex = n == BOOT_LOCAL_NONCE_LEN;

    for (size_t i = 0; hex && i < n; i++)
        hex = (nonce[i] >= '0' && nonce[i] <= '9') ||
              (nonce[i] >= 'a' && nonce[i] <= 'f');
    if (!hex)
        return err_set(FX_ERR_BOOTSTRAP, "bootstrap \"local\": %s=\"%s\" is "
                       "not %d hex digits, as fabxfer-run sets it",
                       cfg_name(CFG_LOCAL_NONCE), err_escape(esc, sizeof(esc),
                       nonce, n), BOOT_LOCAL_NONCE_LEN);
    return FX_OK;
}

/* The folder is opened once and checked: ours, and writable by nobody
 * else, since whoever may write in it may plant another rank's values. */
static fx_status_t open_folder(const char *dir, const char *edir, int *out)
{
    struct stat sb;
    uid_t me = geteuid();
    int fd, err;

    fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        err = errno;
        return err_set(FX_ERR_BOOTSTRAP, "bootstrap \"local\": rendezvous "
                       "folder %s (%s): %s", edir, cfg_name(CFG_LOCAL_DIR),
                       err == ENOTDIR || err == ELOOP ? "is not a folder "
                       "(or is a symbolic link)" : strerror(err));
    }
    if (fstat(fd, &sb) != 0) {
        err = errno;
        close(fd);
        return err_set(FX_ERR_BOOTSTRAP, "bootstrap \"local\": rendezvous "
                       "folder %s: fstat: %s", edir, strerror(err));
    }
    if (sb.st_uid != me) {
        close(fd);
        return err_set(FX_ERR_BOOTSTRAP, "bootstrap \"local\": rendezvous "
                       "folder %s (%s) belongs to uid %lu, not to this "
                       "process (euid %lu); refused, since its owner could "
                       "plant values in it", edir, cfg_name(CFG_LOCAL_DIR),
                       (unsigned long)sb.st_uid, (unsigned long)me);
    }
    if ((sb.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        close(fd);
        return err_set(FX_ERR_BOOTSTRAP, "bootstrap \"local\": rendezvous "
                       "folder %s (%s) has mode %04o: its group or others "
                       "may write in it and plant values; refused "
                       "(fabxfer-run makes it 0700)", edir,
                       cfg_name(CFG_LOCAL_DIR),
                       (unsigned)(sb.st_mode & 07777));
    }
    *out = fd;
    return FX_OK;
}

static fx_status_t put_file(struct boot *b, const char *name, const void *val,
                            size_t len, const char *what);
static fx_status_t look_up(const struct local *l, const char *name,
                           const char *what, enum found *found, int *fd,
                           size_t *size, struct stale *stale);
static fx_status_t read_value(const struct local *l, const char *name,
                              int fd, size_t size, const char *what,
                              void **val, size_t *len);

/* ---- slow is not dead ----------------------------------------------- *
 * A wait bounded by the wall clock alone fails a healthy rank that a
 * crowded host kept off the CPU, or that set-up work held, for a timeout.
 * Ranks share one host here, so each leaves its process's identity
 * (pid.<rank>: pid and start time, so that a reused pid is not taken for
 * it), and a wait that times out looks at the ranks it misses: while each
 * lives, is not stopped and has used CPU since the last look, it waits one
 * timeout more, at most WATCH_ROUNDS_MAX times.
 *
 * A rank that does give up leaves gaveup.<rank>, naming the ranks it
 * waited for. Whoever waits for that rank then fails at once and names
 * them too: in a chain (C waits for B, which waits for a stopped A) every
 * rank names A, and nobody names B, which was only waiting. */
#define WATCH_ROUNDS_MAX 8
#define GAVEUP_EVERY 32      /* polls between looks for a peer's give-up */
#define CULPRITS_MAX 256     /* "1, 2, ..." as a give-up names them */

struct watch {
    long long *cpu;          /* per rank, at the last look; -2: none yet */
    int rounds;              /* timeouts extended so far */
    unsigned polls;
    double start;            /* when the wait began */
    int gaveup_rank;         /* a missing rank that gave up, or -1 */
    char culprits[CULPRITS_MAX]; /* whom it named */
};

static void watch_start(struct watch *w)
{
    memset(w, 0, sizeof(*w));
    w->gaveup_rank = -1;
    w->start = clock_now();
}

static void watch_end(struct watch *w)
{
    free(w->cpu);
    w->cpu = NULL;
}

/* The process's start time (clock ticks since boot), or -1; its CPU time
 * (ns: all threads' ticks plus the main thread's exact time, which a
 * waiting rank's polls advance where ticks may not) in *cpu, or -1 if it is
 * gone, a zombie or stopped (SIGSTOP, a debugger). */
static long long proc_look(long pid, long long *cpu)
{
    char path[64], buf[1024], state;
    unsigned long long ut, st, start, ns = 0;
    const char *p;
    long tick_ns;
    ssize_t n;
    int fd;

    *cpu = -1;
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -1;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* the command may hold anything, ')' included: after the last one */
    if ((p = strrchr(buf, ')')) == NULL ||
        sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu "
               "%*d %*d %*d %*d %*d %*d %llu", &state, &ut, &st, &start) != 4)
        return -1;
    if (strchr("TtZXx", state) != NULL)
        return (long long)start;
    snprintf(path, sizeof(path), "/proc/%ld/schedstat", pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n > 0) {
            buf[n] = '\0';
            ns = strtoull(buf, NULL, 10);
        }
    }
    tick_ns = sysconf(_SC_CLK_TCK);
    tick_ns = tick_ns > 0 ? 1000000000L / tick_ns : 10000000L;
    *cpu = (long long)((ut + st) * (unsigned long long)tick_ns + ns);
    return (long long)start;
}

/* Evidence only: without it a wait is bounded by the clock, as before. */
static void put_pid(struct boot *b)
{
    char name[NAME_ROOM], val[64];
    long long cpu, start = proc_look((long)getpid(), &cpu);

    snprintf(name, sizeof(name), "%spid.%d", pre(b), b->rank);
    snprintf(val, sizeof(val), "%ld %lld", (long)getpid(), start);
    if (start < 0 || put_file(b, name, val, strlen(val), "bootstrap pid") !=
            FX_OK)
        err_clear();
}

/* Rank r's small file name, as text (NUL-terminated) in buf; 0 if absent
 * or unreadable. */
static int read_note(const struct local *l, const char *name, char *buf,
                     size_t size)
{
    struct stale stale = {0};
    enum found found;
    size_t fsize, len = 0;
    void *val = NULL;
    int fd, ok = 0;

    if (look_up(l, name, "bootstrap note", &found, &fd, &fsize, &stale) !=
            FX_OK || found != FOUND) {
        err_clear();
        return 0;
    }
    if (fsize < size &&
        read_value(l, name, fd, fsize, "bootstrap note", &val, &len) ==
            FX_OK) {
        memcpy(buf, val, len);
        buf[len] = '\0';
        ok = 1;
    }
    close(fd);
    err_clear();
    free(val);
    return ok;
}

/* Whether rank r's process runs, and has used CPU since the last look. */
static int rank_runs(const struct boot *b, struct watch *w, int r)
{
    char name[NAME_ROOM], text[64];
    long long start, t;
    long pid;
    int run;

    snprintf(name, sizeof(name), "%spid.%d", pre(b), r);
    if (!read_note(b->priv, name, text, sizeof(text)) ||
        sscanf(text, "%ld %lld", &pid, &start) != 2 || pid <= 0 ||
        proc_look(pid, &t) != start || t < 0)
        return 0;
    run = w->cpu[r] == -2 || t > w->cpu[r];
    w->cpu[r] = t;
    return run;
}

/* A wait misses the ranks r with seen[r] == 0, or (seen NULL) rank only. */
static int missing(const unsigned char *seen, int only, int r)
{
    return seen != NULL ? !seen[r] : r == only;
}

/* Whether a missing rank has given up; its culprits are kept in w.
 * Looked at every GAVEUP_EVERY polls, or when forced. */
static int missing_gave_up(const struct boot *b, struct watch *w,
                           const unsigned char *seen, int only, int force)
{
    char name[NAME_ROOM];

    if (!force && ++w->polls % GAVEUP_EVERY != 0)
        return 0;
    for (int r = 0; r < b->size; r++) {
        if (!missing(seen, only, r))
            continue;
        snprintf(name, sizeof(name), "%sgaveup.%d", pre(b), r);
        if (read_note(b->priv, name, w->culprits, sizeof(w->culprits))) {
            w->gaveup_rank = r;
            return 1;
        }
    }
    return 0;
}

/* At a timeout: 1 to wait one more round, since every missing rank still
 * runs; 0 to fail. */
static int watch_more(const struct boot *b, struct watch *w,
                      const unsigned char *seen, int only)
{
    int run = 1;

    if (w->rounds >= WATCH_ROUNDS_MAX)
        return 0;
    if (w->cpu == NULL) {
        if ((w->cpu = malloc((size_t)b->size * sizeof(*w->cpu))) == NULL)
            return 0;
        for (int r = 0; r < b->size; r++)
            w->cpu[r] = -2;
    }
    for (int r = 0; r < b->size; r++)
        if (missing(seen, only, r) && !rank_runs(b, w, r))
            run = 0; /* look at every one: each keeps its own count */
    w->rounds += run;
    return run;
}

/* At a timeout: 1 to wait one more round, 0 to fail. The give-ups are
 * looked at again after the processes: a missing rank that gave up and
 * exited between the two looks (it waited as long, for a stopped rank)
 * left its note before it went, and is not to be blamed for leaving. */
static int keep_waiting(const struct boot *b, struct watch *w,
                        const unsigned char *seen, int only)
{
    if (missing_gave_up(b, w, seen, only, 1))
        return 0;
    if (watch_more(b, w, seen, only))
        return 1;
    missing_gave_up(b, w, seen, only, 1);
    return 0;
}

/* This rank gives up waiting for the ranks in culprits (text, "1, 2"):
 * its waiters learn whom to blame. */
static void give_up(struct boot *b, const char *culprits)
{
    char name[NAME_ROOM];

    snprintf(name, sizeof(name), "%sgaveup.%d", pre(b), b->rank);
    if (put_file(b, name, culprits, strlen(culprits), "bootstrap give-up") ==
            FX_OK)
        ((struct local *)b->priv)->gaveup = 1;
    err_clear();
}

/* A rank that waits again has not given up (after a failed set-up that the
 * application tried again, say). */
static void take_back(struct boot *b)
{
    struct local *l = b->priv;
    char name[NAME_ROOM];

    if (l->gaveup) {
        snprintf(name, sizeof(name), "%sgaveup.%d", pre(b), b->rank);
        unlinkat(l->dirfd, name, 0);
        l->gaveup = 0;
    }
}

/* The job's folder, opened for b (rank and size set), its files' names
 * after pre. */
static fx_status_t local_open(struct boot *b, const char *pre)
{
    const char *dir = cfg_str(CFG_LOCAL_DIR);
    const char *nonce = cfg_str(CFG_LOCAL_NONCE);
    struct local *l;
    fx_status_t st;

    if ((st = check_nonce(nonce)) != FX_OK)
        return st;
    if (strlen(dir) + NAME_ROOM >= PATH_MAX)
        return err_set(FX_ERR_BOOTSTRAP, "bootstrap \"local\": %s is too "
                       "long (%zu bytes)", cfg_name(CFG_LOCAL_DIR),
                       strlen(dir));
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return err_set(FX_ERR_NOMEM, "out of memory in bootstrap \"local\"");
    err_escape(l->dir, sizeof(l->dir), dir, strlen(dir));
    snprintf(l->head, sizeof(l->head), "%s\n", nonce);
    snprintf(l->pre, sizeof(l->pre), "%s", pre);
    st = open_folder(dir, l->dir, &l->dirfd);
    if (st != FX_OK) {
        free(l);
        return st;
    }
    b->single_host = 1;
    b->priv = l;
    put_pid(b);
    return FX_OK;
}

static fx_status_t local_init(struct boot *b)
{
    const char *dir = cfg_str(CFG_LOCAL_DIR);
    const char *nonce = cfg_str(CFG_LOCAL_NONCE);
    long size, rank;
    fx_status_t st;

    if (dir == NULL || cfg_str(CFG_LOCAL_RANK) == NULL ||
        cfg_str(CFG_LOCAL_SIZE) == NULL || nonce == NULL)
        return err_set(FX_ERR_BOOTSTRAP,
                       "bootstrap \"local\" needs %s, %s, %s and %s, which "
                       "are not all set: this process was not started by "
                       "fabxfer-run (start it with fabxfer-run -n N, or use "
                       "bootstrap \"none\")", cfg_name(CFG_LOCAL_DIR),
                       cfg_name(CFG_LOCAL_RANK), cfg_name(CFG_LOCAL_SIZE),
                       cfg_name(CFG_LOCAL_NONCE));
    st = cfg_long(CFG_LOCAL_SIZE, 1, INT_MAX, &size);
    if (st == FX_OK)
        st = cfg_long(CFG_LOCAL_RANK, 0, size - 1, &rank);
    if (st != FX_OK)
        return err_prefix(FX_ERR_BOOTSTRAP, "bootstrap \"local\"");
    b->rank = (int)rank;
    b->size = (int)size;
    return local_open(b, "");
}

fx_status_t boot_open_local_group(const char *tag, int size, int index,
                                  int timeout_ms, struct boot **out)
{
    char pre[GROUP_PRE_MAX];
    struct boot *b;
    fx_status_t st;

    *out = NULL;
    if (cfg_str(CFG_LOCAL_DIR) == NULL || cfg_str(CFG_LOCAL_NONCE) == NULL)
        return err_set(FX_ERR_BOOTSTRAP, "a group through fabxfer-run's "
                       "folder needs %s and %s: this process was not "
                       "started by fabxfer-run (give an allgather instead)",
                       cfg_name(CFG_LOCAL_DIR), cfg_name(CFG_LOCAL_NONCE));
    if (tag == NULL || !key_valid(tag) || strlen(tag) > GROUP_TAG_MAX)
        return err_set(FX_ERR_INVALID, "a group's tag must be 1 to %d "
                       "letters, digits, '-', '_' or '.' (the same on every "
                       "member, new for each group)", GROUP_TAG_MAX);
    if (size < 1 || index < 0 || index >= size)
        return err_set(FX_ERR_INVALID, "a group of %d with this process at "
                       "%d", size, index);
    if ((b = calloc(1, sizeof(*b))) == NULL)
        return err_set(FX_ERR_NOMEM, "out of memory in bootstrap \"local\"");
    *b = (struct boot){.ops = &boot_local_ops, .rank = index, .size = size,
                       .timeout_ms = timeout_ms};
    snprintf(pre, sizeof(pre), "g.%s.", tag);
    if ((st = local_open(b, pre)) != FX_OK) {
        free(b);
        return st;
    }
    *out = b;
    return FX_OK;
}

static void local_fini(struct boot *b)
{
    struct local *l = b->priv;

    /* The folder and its files belong to the launcher, which removes them
     * once every rank is gone: a peer may still be reading our values. */
    if (l != NULL) {
        close(l->dirfd);
        free(l);
    }
    b->priv = NULL;
}

static fx_status_t write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = write(fd, p, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return FX_ERR_SYSTEM;
        p += n;
        len -= (size_t)n;
    }
    return FX_OK;
}

/* Make name hold the nonce and then val. A peer polling for name must
 * never see half a value: write elsewhere, then rename() into place in one
 * step (which also replaces a stale file of an earlier job). what starts
 * the error message. */
static fx_status_t put_file(struct boot *b, const char *name, const void *val,
                            size_t len, const char *what)
{
    struct local *l = b->priv;
    char tmp[64];
    fx_status_t st;
    int fd = -1, err;

    /* O_EXCL: a name an earlier job left is skipped, never reused. */
    for (int tries = 0; fd < 0; tries++) {
        snprintf(tmp, sizeof(tmp), "%stmp.%d.%ld.%u", pre(b), b->rank,
                 (long)getpid(), l->tmps++);
        fd = openat(l->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
                    O_CLOEXEC, 0600);
        if (fd < 0 && (errno != EEXIST || tries + 1 >= TMP_TRIES))
            return err_set(FX_ERR_BOOTSTRAP, "%s: cannot create a file in "
                           "%s: %s", what, l->dir, strerror(errno));
    }
    if (write_all(fd, l->head, HEAD_LEN) != FX_OK ||
        write_all(fd, val, len) != FX_OK) {
        err = errno;
        st = err_set(FX_ERR_BOOTSTRAP, "%s: writing %s/%s failed: %s", what,
                     l->dir, tmp, strerror(err));
        goto close_tmp;
    }
    if (close(fd) != 0) {
        err = errno;
        st = err_set(FX_ERR_BOOTSTRAP, "%s: closing %s/%s failed: %s", what,
                     l->dir, tmp, strerror(err));
        goto unlink_tmp;
    }
    if (renameat(l->dirfd, tmp, l->dirfd, name) != 0) {
        err = errno;
        st = err_set(FX_ERR_BOOTSTRAP, "%s: renaming %s/%s to %s failed: %s",
                     what, l->dir, tmp, name, strerror(err));
        goto unlink_tmp;
    }
    return FX_OK;
close_tmp:
    close(fd);
unlink_tmp:
    unlinkat(l->dirfd, tmp, 0);
    return st;
}

static const char *file_kind(mode_t mode)
{
    return S_ISDIR(mode) ? "a folder" : S_ISFIFO(mode) ? "a FIFO" :
           S_ISCHR(mode) ? "a character device" :
           S_ISBLK(mode) ? "a block device" :
           S_ISSOCK(mode) ? "a socket" : "not a regular file";
}

/* Look for name: FOUND (with *fd open and *size the value's bytes), ABSENT
 * or STALE (recorded in *stale). A symlink or anything but a regular file
 * is an error at once: neither is ever made here, and reading a FIFO
 * would block past every timeout. */
static fx_status_t look_up(const struct local *l, const char *name,
                           const char *what, enum found *found, int *fd,
                           size_t *size, struct stale *stale)
{
    char head[HEAD_LEN];
    struct stat sb;
    ssize_t n;
    int err;

    *found = ABSENT;
    *fd = openat(l->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
                 O_CLOEXEC);
    if (*fd < 0 && errno == ENOENT)
        return FX_OK;
    if (*fd < 0 && errno == ELOOP)
        return err_set(FX_ERR_BOOTSTRAP, "%s: %s/%s is a symbolic link; "
                       "refused (the rendezvous folder holds regular files "
                       "only)", what, l->dir, name);
    if (*fd < 0)
        return err_set(FX_ERR_BOOTSTRAP, "%s: cannot open %s/%s: %s", what,
                       l->dir, name, strerror(errno));
    if (fstat(*fd, &sb) != 0) {
        err = errno;
        close(*fd);
        *fd = -1;
        return err_set(FX_ERR_BOOTSTRAP, "%s: fstat %s/%s: %s", what, l->dir,
                       name, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(*fd);
        *fd = -1;
        return err_set(FX_ERR_BOOTSTRAP, "%s: %s/%s is %s; refused (the "
                       "rendezvous folder holds regular files only)", what,
                       l->dir, name, file_kind(sb.st_mode));
    }
    do
        n = pread(*fd, head, HEAD_LEN, 0);
    while (n < 0 && errno == EINTR);
    if (n != HEAD_LEN || memcmp(head, l->head, HEAD_LEN) != 0) {
        close(*fd);
        *fd = -1;
        *found = STALE;
        if (!stale->seen++)
            snprintf(stale->name, sizeof(stale->name), "%s", name);
        return FX_OK;
    }
    *found = FOUND;
    *size = (size_t)sb.st_size - HEAD_LEN;
    return FX_OK;
}

static fx_status_t local_put(struct boot *b, const char *key, const void *val,
                             size_t len)
{
    char name[NAME_ROOM], what[WHAT_MAX];
    fx_status_t st;

    st = check_key(key);
    if (st != FX_OK)
        return st;
    if (val == NULL && len > 0)
        return err_set(FX_ERR_INVALID, "bootstrap put of key \"%s\": NULL "
                       "value of %zu bytes", key, len);
    snprintf(name, sizeof(name), "%skv.%d.%s", pre(b), b->rank, key);
    snprintf(what, sizeof(what), "bootstrap put of key \"%s\"", key);
    return put_file(b, name, val, len, what);
}

/* ", and <folder>/<name> is another job's: ..." where a wait met one. */
static void stale_note(const struct local *l, const struct stale *stale,
                       char *buf, size_t size)
{
    buf[0] = '\0';
    if (stale->seen)
        snprintf(buf, size, "; %s/%s is a stale file from another job "
                 "(another %s), ignored", l->dir, stale->name,
                 cfg_name(CFG_LOCAL_NONCE));
}

/* "1, 2" of the ranks not seen (at most MISSING_LISTED), into list;
 * returns how many are missing, negated where not all are listed. */
static int missing_list(const struct boot *b, const unsigned char *seen,
                        char *list, size_t size)
{
    size_t used = 0;
    int missing = 0, listed = 0;

    list[0] = '\0';
    for (int r = 0; r < b->size; r++) {
        if (seen[r])
            continue;
        missing++;
        if (listed < MISSING_LISTED && used < size) {
            int w = snprintf(list + used, size - used, "%s%d",
                             listed ? ", " : "", r);

            if (w > 0)
                used += (size_t)w;
            listed++;
        }
    }
    return missing > listed ? -missing : missing;
}

/* A wait that ends without the ranks it waited for: say whom it missed
 * (or whom the rank that gave up before us missed), and leave our own
 * give-up for those who wait for us. */
static fx_status_t wait_failed(struct boot *b, const char *what,
                               const unsigned char *seen,
                               const struct watch *w,
                               const struct stale *stale)
{
    char list[CULPRITS_MAX], note[NOTE_MAX];
    long ms = (long)((clock_now() - w->start) * 1000.0);
    int missing;

    stale_note(b->priv, stale, note, sizeof(note));
    if (w->gaveup_rank >= 0) {
        give_up(b, w->culprits);
        return err_set(FX_ERR_TIMEOUT, "%s failed: rank %d gave up waiting "
                       "for rank(s) %s, which never came%s", what,
                       w->gaveup_rank, w->culprits, note);
    }
    missing = missing_list(b, seen, list, sizeof(list));
    give_up(b, list);
    if (missing < 0)
        return err_set(FX_ERR_TIMEOUT, "%s timed out after %ld ms waiting "
                       "for rank(s) %s, ... (%d of %d missing)%s", what,
                       ms, list, -missing, b->size, note);
    return err_set(FX_ERR_TIMEOUT, "%s timed out after %ld ms waiting for "
                   "rank(s) %s%s", what, ms, list, note);
}

static fx_status_t local_fence(struct boot *b)
{
    struct local *l = b->priv;
    char name[NAME_ROOM], what[64];
    struct stale stale = {0};
    unsigned char *seen;
    struct watch watch;
    struct backoff w;
    enum found found;
    size_t size;
    fx_status_t st;
    unsigned n = l->fences++;
    int fd, left;

    snprintf(what, sizeof(what), "bootstrap fence %u", n);
    seen = calloc((size_t)b->size, 1);
    if (seen == NULL)
        return err_set(FX_ERR_NOMEM, "out of memory in bootstrap fence %u", n);
    take_back(b);
    watch_start(&watch);
    /* Our puts were renamed into place before this file exists, so a peer
     * that sees it sees them too. */
    snprintf(name, sizeof(name), "%sfence.%u.%d", pre(b), n, b->rank);
    st = put_file(b, name, NULL, 0, what);
    if (st != FX_OK)
        goto free_seen;
    seen[b->rank] = 1;
    left = b->size - 1;

    backoff_start(&w);
    for (;;) {
        for (int r = 0; r < b->size && left > 0; r++) {
            if (seen[r])
                continue;
            snprintf(name, sizeof(name), "%sfence.%u.%d", pre(b), n, r);
            st = look_up(l, name, what, &found, &fd, &size, &stale);
            if (st != FX_OK)
                goto free_seen;
            if (found == FOUND) {
                close(fd);
                seen[r] = 1;
                left--;
            }
        }
        if (left == 0)
            break;
        if (missing_gave_up(b, &watch, seen, -1, 0))
            goto failed;
        if (backoff_wait(&w, b->timeout_ms))
            continue;
        if (!keep_waiting(b, &watch, seen, -1))
            goto failed;
        backoff_start(&w); /* one round more */
    }
    /* Every rank has entered fence n, so every rank has left fence n - 1:
     * nobody will look for our old marker again. */
    if (n > 0) {
        snprintf(name, sizeof(name), "%sfence.%u.%d", pre(b), n - 1, b->rank);
        unlinkat(l->dirfd, name, 0);
    }
    st = FX_OK;
    goto free_seen;
failed:
    st = wait_failed(b, what, seen, &watch, &stale);
free_seen:
    watch_end(&watch);
    free(seen);
    return st;
}

/* The value after the head; size bytes, as fstat counted them. */
static fx_status_t read_value(const struct local *l, const char *name,
                              int fd, size_t size, const char *what,
                              void **val, size_t *len)
{
    size_t got = 0;
    char *buf;

    buf = malloc(size > 0 ? size : 1);
    if (buf == NULL)
        return err_set(FX_ERR_NOMEM, "%s: out of memory for %zu bytes", what,
                       size);
    while (got < size) {
        ssize_t n = pread(fd, buf + got, size - got,
                          (off_t)(HEAD_LEN + got));

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            free(buf);
            return err_set(FX_ERR_BOOTSTRAP, "%s: reading %s/%s: %s", what,
                           l->dir, name,
                           n < 0 ? strerror(errno) : "file shrank");
        }
        got += (size_t)n;
    }
    *val = buf;
    *len = got;
    return FX_OK;
}

static fx_status_t local_get(struct boot *b, int rank, const char *key,
                             void **val, size_t *len)
{
    struct local *l = b->priv;
    char name[NAME_ROOM], what[WHAT_MAX], note[NOTE_MAX], culprit[16];
    struct stale stale = {0};
    struct watch watch;
    struct backoff w;
    enum found found;
    size_t size = 0;
    fx_status_t st;
    int fd;

    st = check_key(key);
    if (st != FX_OK)
        return st;
    if (rank < 0 || rank >= b->size)
        return err_set(FX_ERR_INVALID, "bootstrap get of key \"%s\": rank %d "
                       "is outside the job's %d ranks", key, rank, b->size);
    snprintf(name, sizeof(name), "%skv.%d.%s", pre(b), rank, key);
    snprintf(what, sizeof(what), "bootstrap get of key \"%s\" from rank %d",
             key, rank);

    /* Normally present after the fence; a peer that is slow (or out of
     * step) is watched as a fence watches it, and a stale file waits as
     * long, since the peer's put will replace it. */
    take_back(b);
    watch_start(&watch);
    backoff_start(&w);
    for (;;) {
        st = look_up(l, name, what, &found, &fd, &size, &stale);
        if (st != FX_OK)
            goto end_watch;
        if (found == FOUND)
            break;
        if (missing_gave_up(b, &watch, NULL, rank, 0))
            goto failed;
        if (backoff_wait(&w, b->timeout_ms))
            continue;
        if (!keep_waiting(b, &watch, NULL, rank))
            goto failed;
        backoff_start(&w); /* one round more */
    }
    st = read_value(l, name, fd, size, what, val, len);
    close(fd);
    goto end_watch;
failed:
    stale_note(l, &stale, note, sizeof(note));
    if (watch.gaveup_rank >= 0) {
        give_up(b, watch.culprits);
        st = err_set(FX_ERR_TIMEOUT, "%s failed: it gave up waiting for "
                     "rank(s) %s, which never came%s", what, watch.culprits,
                     note);
    } else {
        snprintf(culprit, sizeof(culprit), "%d", rank);
        give_up(b, culprit);
        st = err_set(FX_ERR_TIMEOUT, "%s timed out after %ld ms (rank %d "
                     "has not put it)%s", what, (long)((clock_now() -
                     watch.start) * 1000.0), rank, note);
    }
end_watch:
    watch_end(&watch);
    return st;
}

const struct boot_ops boot_local_ops = {
    .name = "local",
    .init = local_init,
    .put = local_put,
    .fence = local_fence,
    .get = local_get,
    .fini = local_fini,
};
