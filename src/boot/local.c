/*
 * The "local" bootstrap: ranks started by fabxfer-run on one host share a
 * rendezvous folder (FABXFER_LOCAL_DIR) and exchange values as files in it.
 *
 *   kv.<rank>.<key>     a value, made visible whole by rename()
 *   fence.<n>.<rank>    this rank has reached its n-th fence
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
#include "core/config.h"
#include "core/error.h"

#define KEY_MAX 200         /* keeps kv.<rank>.<key> under NAME_MAX */
#define NAME_ROOM 256       /* room left after the folder in a path */
#define BACKOFF_FIRST_NS 50000L   /* small jobs meet within a few polls */
#define BACKOFF_CAP_NS 2000000L   /* a slow peer costs at most 2 ms extra */
#define MISSING_LISTED 32   /* ranks named in a timeout message */

struct local {
    char *dir;
    unsigned fences; /* fences this rank has entered */
};

struct backoff {
    struct timespec start;
    long sleep_ns;
};

static void backoff_start(struct backoff *w)
{
    clock_gettime(CLOCK_MONOTONIC, &w->start);
    w->sleep_ns = BACKOFF_FIRST_NS;
}

static long elapsed_ms(const struct backoff *w)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - w->start.tv_sec) * 1000L +
           (now.tv_nsec - w->start.tv_nsec) / 1000000L;
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

static fx_status_t local_init(struct boot *b)
{
    const char *dir = cfg_str(CFG_LOCAL_DIR);
    struct local *l;
    struct stat sb;
    long size, rank;
    fx_status_t st;

    if (dir == NULL || cfg_str(CFG_LOCAL_RANK) == NULL ||
        cfg_str(CFG_LOCAL_SIZE) == NULL)
        return err_set(FX_ERR_BOOTSTRAP,
                       "bootstrap \"local\" needs %s, %s and %s, which are "
                       "not all set: this process was not started by "
                       "fabxfer-run (start it with fabxfer-run -n N, or use "
                       "bootstrap \"none\")", cfg_name(CFG_LOCAL_DIR),
                       cfg_name(CFG_LOCAL_RANK), cfg_name(CFG_LOCAL_SIZE));
    st = cfg_long(CFG_LOCAL_SIZE, 1, INT_MAX, &size);
    if (st == FX_OK)
        st = cfg_long(CFG_LOCAL_RANK, 0, size - 1, &rank);
    if (st != FX_OK)
        return err_prefix(FX_ERR_BOOTSTRAP, "bootstrap \"local\"");
    if (strlen(dir) + NAME_ROOM >= PATH_MAX)
        return err_set(FX_ERR_BOOTSTRAP, "bootstrap \"local\": %s is too "
                       "long (%zu bytes)", cfg_name(CFG_LOCAL_DIR),
                       strlen(dir));
    if (stat(dir, &sb) != 0)
        return err_set(FX_ERR_BOOTSTRAP, "bootstrap \"local\": rendezvous "
                       "folder %s (%s): %s", dir, cfg_name(CFG_LOCAL_DIR),
                       strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return err_set(FX_ERR_BOOTSTRAP, "bootstrap \"local\": rendezvous "
                       "folder %s (%s) is not a folder", dir,
                       cfg_name(CFG_LOCAL_DIR));

    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return err_set(FX_ERR_NOMEM, "out of memory in bootstrap \"local\"");
    l->dir = strdup(dir);
    if (l->dir == NULL) {
        st = err_set(FX_ERR_NOMEM, "out of memory in bootstrap \"local\"");
        goto free_local;
    }
    b->rank = (int)rank;
    b->size = (int)size;
    b->single_host = 1;
    b->priv = l;
    return FX_OK;
free_local:
    free(l);
    return st;
}

static void local_fini(struct boot *b)
{
    struct local *l = b->priv;

    /* The folder and its files belong to the launcher, which removes them
     * once every rank is gone: a peer may still be reading our values. */
    if (l != NULL) {
        free(l->dir);
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

static fx_status_t local_put(struct boot *b, const char *key, const void *val,
                             size_t len)
{
    struct local *l = b->priv;
    char tmp[PATH_MAX], path[PATH_MAX];
    fx_status_t st;
    int fd, err;

    st = check_key(key);
    if (st != FX_OK)
        return st;
    if (val == NULL && len > 0)
        return err_set(FX_ERR_INVALID, "bootstrap put of key \"%s\": NULL "
                       "value of %zu bytes", key, len);
    snprintf(path, sizeof(path), "%s/kv.%d.%s", l->dir, b->rank, key);
    /* A peer polling for the key must never see half a value: write
     * elsewhere, then rename() into place in one step. */
    snprintf(tmp, sizeof(tmp), "%s/tmp.%d.XXXXXX", l->dir, b->rank);
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return err_set(FX_ERR_BOOTSTRAP, "bootstrap put of key \"%s\": "
                       "cannot create a file in %s: %s", key, l->dir,
                       strerror(errno));
    if (write_all(fd, val, len) != FX_OK) {
        err = errno;
        st = err_set(FX_ERR_BOOTSTRAP, "bootstrap put of key \"%s\": "
                     "writing %s failed: %s", key, tmp, strerror(err));
        goto close_tmp;
    }
    if (close(fd) != 0) {
        err = errno;
        st = err_set(FX_ERR_BOOTSTRAP, "bootstrap put of key \"%s\": "
                     "closing %s failed: %s", key, tmp, strerror(err));
        goto unlink_tmp;
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        st = err_set(FX_ERR_BOOTSTRAP, "bootstrap put of key \"%s\": "
                     "renaming %s to %s failed: %s", key, tmp, path,
                     strerror(err));
        goto unlink_tmp;
    }
    return FX_OK;
close_tmp:
    close(fd);
unlink_tmp:
    unlink(tmp);
    return st;
}

static fx_status_t fence_timeout(struct boot *b, unsigned n,
                                 const unsigned char *seen, long waited_ms)
{
    char list[ERR_MSG_MAX / 2];
    size_t used = 0;
    int missing = 0, listed = 0;

    list[0] = '\0';
    for (int r = 0; r < b->size; r++) {
        if (seen[r])
            continue;
        missing++;
        if (listed < MISSING_LISTED && used < sizeof(list)) {
            int w = snprintf(list + used, sizeof(list) - used, "%s%d",
                             listed ? ", " : "", r);

            if (w > 0)
                used += (size_t)w;
            listed++;
        }
    }
    if (missing > listed)
        return err_set(FX_ERR_TIMEOUT, "bootstrap fence %u timed out after "
                       "%ld ms waiting for rank(s) %s, ... (%d of %d missing)",
                       n, waited_ms, list, missing, b->size);
    return err_set(FX_ERR_TIMEOUT, "bootstrap fence %u timed out after %ld ms "
                   "waiting for rank(s) %s", n, waited_ms, list);
}

static fx_status_t local_fence(struct boot *b)
{
    struct local *l = b->priv;
    char path[PATH_MAX];
    unsigned char *seen;
    struct backoff w;
    fx_status_t st;
    unsigned n = l->fences++;
    int fd, left;

    seen = calloc((size_t)b->size, 1);
    if (seen == NULL)
        return err_set(FX_ERR_NOMEM, "out of memory in bootstrap fence %u", n);
    /* Our puts were renamed into place before this file exists, so a peer
     * that sees it sees them too. */
    snprintf(path, sizeof(path), "%s/fence.%u.%d", l->dir, n, b->rank);
    fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        st = err_set(FX_ERR_BOOTSTRAP, "bootstrap fence %u: cannot create "
                     "%s: %s", n, path, strerror(errno));
        goto free_seen;
    }
    close(fd);
    seen[b->rank] = 1;
    left = b->size - 1;

    backoff_start(&w);
    for (;;) {
        for (int r = 0; r < b->size && left > 0; r++) {
            if (seen[r])
                continue;
            snprintf(path, sizeof(path), "%s/fence.%u.%d", l->dir, n, r);
            if (access(path, F_OK) == 0) {
                seen[r] = 1;
                left--;
            }
        }
        if (left == 0)
            break;
        if (!backoff_wait(&w, b->timeout_ms)) {
            st = fence_timeout(b, n, seen, elapsed_ms(&w));
            goto free_seen;
        }
    }
    /* Every rank has entered fence n, so every rank has left fence n - 1:
     * nobody will look for our old marker again. */
    if (n > 0) {
        snprintf(path, sizeof(path), "%s/fence.%u.%d", l->dir, n - 1, b->rank);
        unlink(path);
    }
    st = FX_OK;
free_seen:
    free(seen);
    return st;
}

static fx_status_t read_value(const char *path, int fd, const char *key,
                              int rank, void **val, size_t *len)
{
    struct stat sb;
    size_t got = 0;
    char *buf;

    if (fstat(fd, &sb) != 0)
        return err_set(FX_ERR_BOOTSTRAP, "bootstrap get of key \"%s\" from "
                       "rank %d: fstat %s: %s", key, rank, path,
                       strerror(errno));
    buf = malloc(sb.st_size > 0 ? (size_t)sb.st_size : 1);
    if (buf == NULL)
        return err_set(FX_ERR_NOMEM, "bootstrap get of key \"%s\" from rank "
                       "%d: out of memory for %lld bytes", key, rank,
                       (long long)sb.st_size);
    while (got < (size_t)sb.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)sb.st_size - got);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            free(buf);
            return err_set(FX_ERR_BOOTSTRAP, "bootstrap get of key \"%s\" "
                           "from rank %d: reading %s: %s", key, rank, path,
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
    char path[PATH_MAX];
    struct backoff w;
    fx_status_t st;
    int fd;

    st = check_key(key);
    if (st != FX_OK)
        return st;
    if (rank < 0 || rank >= b->size)
        return err_set(FX_ERR_INVALID, "bootstrap get of key \"%s\": rank %d "
                       "is outside the job's %d ranks", key, rank, b->size);
    snprintf(path, sizeof(path), "%s/kv.%d.%s", l->dir, rank, key);

    /* Normally present after the fence; a peer that is slow (or out of
     * step) gets until the timeout. */
    backoff_start(&w);
    for (;;) {
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0)
            break;
        if (errno != ENOENT)
            return err_set(FX_ERR_BOOTSTRAP, "bootstrap get of key \"%s\" "
                           "from rank %d: cannot open %s: %s", key, rank,
                           path, strerror(errno));
        if (!backoff_wait(&w, b->timeout_ms))
            return err_set(FX_ERR_TIMEOUT, "bootstrap get of key \"%s\" from "
                           "rank %d timed out after %ld ms (rank %d has not "
                           "put it)", key, rank, elapsed_ms(&w), rank);
    }
    st = read_value(path, fd, key, rank, val, len);
    close(fd);
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
