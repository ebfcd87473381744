/*
 * Versions that prove themselves, the target's side: the checker. A
 * version's units are checked where they landed (or, for staged GPU
 * targets, in the tensors after the wait copied them up) against the CRCs
 * each source wrote into this rank's area before it notified (check.c):
 * on threads as the sources' check points announce runs of landed units,
 * the rest once every source has notified, units in GPU memory by a
 * kernel (mem_crc). A mismatch names the tensor, the bytes of this rank's
 * piece, the source and the version.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "mem/mem.h"
#include "util/crc32c.h"
#include "util/error.h"
#include "util/fault.h"
#include "util/log.h"

/* A run of a source's units, checked by one thread: [lo, hi) of them;
 * the first that differs, if any, in bad. */
struct share {
    const struct eng_check_target *a;
    int i;
    size_t lo, hi, bad;
    uint64_t version, bytes;
    uint32_t checked, got;
    pthread_t thread;
    const uint32_t *want;     /* source i's CRCs, as sent */
    struct eng_verify v;      /* which units source i summed */
    unsigned shift;           /* its pair's groups (eng_verify_shift) */
};

/* The rule a source's sums of a version took: its every (its head's, or
 * its check points'), under the target's mode. */
static struct eng_verify verify_with(const struct eng_check_target *a,
                                     uint32_t every)
{
    return (struct eng_verify){a->verify.mode, every};
}

/* A source sums the units due by the ranks' every, or, under sample,
 * all of them (its first version, and its first to a target's new
 * process: pipeline.c). */
static int every_ok(const struct eng_check_target *a, uint32_t every)
{
    return every == eng_verify_every(&a->verify) ||
           (a->verify.mode == ENG_VERIFY_SAMPLE && every == 0);
}

static const uint32_t *wanted(const struct eng_check_target *a, int i)
{
    return (const uint32_t *)(const void *)((const char *)a->area +
                                            a->area_off[a->sources[i]] +
                                            sizeof(struct eng_check_head));
}

static void *check_share(void *arg)
{
    struct share *w = arg;
    const struct eng_check_unit *units = &w->a->units[w->a->unit0[w->i]];
    const uint32_t *want = w->want;
    uint32_t phase = eng_verify_phase(&w->v, w->version);

    if (w->lo == 0 && w->hi > 0 && units[0].device < 0)
        fault_point(FAULT_LANDED, (void *)units[0].at, units[0].run_len);
    for (size_t k = eng_verify_first(&w->v, w->shift, phase, w->lo);
         k < w->hi; k = eng_verify_first(&w->v, w->shift, phase, k + 1)) {
        const struct eng_check_unit *u = &units[k];
        uint32_t crc = 0;

        if (u->device >= 0)
            continue;
        /* what landed is in memory by now, not in this core's cache */
        for (uint64_t r = 0; r < u->count; r++)
            crc = crc32c_cold(crc, u->at + r * u->stride, u->run_len);
        w->bytes += u->run_len * u->count;
        w->checked++;
        if (crc != want[k]) {
            w->bad = k;
            w->got = crc;
            break;
        }
    }
    return NULL;
}

/* Big ranges are checked by several threads, each a run of units of
 * about equal bytes: once the version is in, the cores that moved it
 * have nothing else to do, and one core reads at a third of what a
 * host's memory gives. sh[0..return) are the runs, checked. */
#define SHARE_MIN (16u << 20) /* bytes: a thread's least */

static int check_parallel(const struct eng_check_target *a, int i, size_t lo,
                          size_t hi, uint64_t version,
                          const struct eng_verify *v, unsigned shift,
                          struct share sh[ENG_CHECK_THREADS])
{
    const struct eng_check_unit *units = &a->units[a->unit0[i]];
    uint32_t phase = eng_verify_phase(v, version);
    uint64_t total = 0, done = 0;
    size_t k = lo;
    int nsh, started = 0;

    for (size_t u = eng_verify_first(v, shift, phase, lo); u < hi;
         u = eng_verify_first(v, shift, phase, u + 1))
        if (units[u].device < 0)
            total += units[u].run_len * units[u].count;
    nsh = (int)(total / SHARE_MIN) + 1;
    nsh = nsh < a->threads ? nsh : a->threads;
    nsh = nsh < ENG_CHECK_THREADS ? nsh : ENG_CHECK_THREADS;
    nsh = nsh > 0 ? nsh : 1;
    for (int t = 0; t < nsh; t++) {
        uint64_t goal = total * (uint64_t)(t + 1) / (uint64_t)nsh;

        sh[t] = (struct share){.a = a, .i = i, .lo = k, .hi = k,
                               .bad = SIZE_MAX, .version = version,
                               .want = wanted(a, i), .v = *v,
                               .shift = shift};
        while (k < hi && (done < goal || t == nsh - 1)) {
            if ((k = eng_verify_first(v, shift, phase, k)) >= hi)
                break;
            if (units[k].device < 0)
                done += units[k].run_len * units[k].count;
            k++;
        }
        sh[t].hi = k < hi ? k : hi;
    }
    /* the others in threads, the first here; a thread that cannot start
     * leaves its run to this one */
    for (int t = 1; t < nsh; t++, started++)
        if (pthread_create(&sh[t].thread, NULL, check_share, &sh[t]) != 0)
            break;
    check_share(&sh[0]);
    for (int t = started + 1; t < nsh; t++)
        check_share(&sh[t]);
    for (int t = 1; t <= started; t++)
        pthread_join(sh[t].thread, NULL);
    return nsh;
}

/* The target's checker: threads take the runs of units that check
 * points announce while the version is still arriving (the thread that
 * waits is busy landing it); the rest is checked at the end. One thread
 * per 4 CPUs, up to CHECKERS_MAX: a version lands over shm at 13 GB/s
 * on the H100 machine's host, about what one thread reads, and there one
 * left 10-12 ms of a Qwen3-0.6B version's checks to its end
 * (bench/results/verify/h100-d.txt). */
#define CHECKERS_MAX 3
struct job {
    int i;
    uint32_t every;
    size_t lo, hi;
};

/* A source's state in this version. */
struct check_source {
    size_t covered;           /* units [0, covered) queued */
    size_t bad;               /* the first that differs */
    uint32_t got;
    uint32_t every;           /* its sums': NO_EVERY until a point or head */
};
#define NO_EVERY UINT32_MAX

struct eng_checker {
    const struct eng_check_target *a;
    int nsources;
    pthread_t threads[CHECKERS_MAX];
    int started;              /* threads */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job *q;            /* this version's points, in order */
    size_t qcap, qhead, qtail; /* [qhead, qtail): runs not begun */
    int busy, quit;           /* busy: runs under way */
    uint64_t version;
    struct check_source *src; /* by source */
    unsigned *shift;          /* by source: its pair's (eng_verify_shift) */
    uint64_t bytes;
    uint32_t checked;
    struct mem_crc *crc;      /* the units in GPU memory, summed there */
    /* the CRCs a point announced, taken as it comes: the source's last
     * write of the area rewrites them while the thread reads */
    uint32_t *sent;
    const struct eng_check_unit *dev0; /* the first of them */
};

/* Under mu: what a run found. */
static void took(struct eng_checker *c, const struct share *w)
{
    c->bytes += w->bytes;
    c->checked += w->checked;
    if (w->bad != SIZE_MAX && w->bad < c->src[w->i].bad) {
        c->src[w->i].bad = w->bad;
        c->src[w->i].got = w->got;
    }
}

static void *checker_main(void *arg)
{
    struct eng_checker *c = arg;

    pthread_mutex_lock(&c->mu);
    for (;;) {
        struct share w;

        while (!c->quit && c->qhead == c->qtail)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->quit)
            break;
        w = (struct share){.a = c->a, .i = c->q[c->qhead].i,
                           .lo = c->q[c->qhead].lo, .hi = c->q[c->qhead].hi,
                           .bad = SIZE_MAX, .version = c->version,
                           .want = c->sent + c->a->unit0[c->q[c->qhead].i],
                           .v = verify_with(c->a, c->q[c->qhead].every),
                           .shift = c->shift[c->q[c->qhead].i]};
        c->qhead++;
        c->busy++;
        pthread_mutex_unlock(&c->mu);
        check_share(&w);
        pthread_mutex_lock(&c->mu);
        took(c, &w);
        c->busy--;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* The units in GPU memory: a range per run, each shifted by the runs
 * after it in its unit, all summed into the unit's word (its number among
 * every source's units). */
static fx_status_t open_gpu(struct eng_checker *c)
{
    const struct eng_check_target *a = c->a;
    size_t nu = a->unit0[c->nsources], n = 0, g0[2];
    struct mem_crc_range *r;
    int device = -1;
    fx_status_t st;

    for (size_t k = 0; k < nu; k++) {
        const struct eng_check_unit *x = &a->units[k];

        if (x->device < 0)
            continue;
        if (device >= 0 && x->device != device)
            return err_set(FX_ERR_UNSUPPORTED, "FABXFER_VERIFY: rank %d "
                           "receives into CUDA devices %d and %d, and checks "
                           "on one device per rank", a->me, device,
                           x->device);
        if (c->dev0 == NULL)
            c->dev0 = x;
        device = x->device;
        n += x->count;
    }
    if (n == 0)
        return FX_OK;
    if ((r = calloc(n, sizeof(*r))) == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %zu GPU checksums", n);
    n = 0;
    for (int i = 0; i < c->nsources; i++)
        for (size_t k = a->unit0[i]; k < a->unit0[i + 1]; k++) {
            const struct eng_check_unit *x = &a->units[k];
            uint32_t f = crc32c_shift_factor(0), run = 0;

            if (x->device < 0)
                continue;
            run = crc32c_shift_factor(x->run_len);
            for (uint64_t j = x->count; j-- > 0; f = crc32c_mul(f, run))
                r[n + j] = (struct mem_crc_range){
                    (uint64_t)(uintptr_t)(x->at + j * x->stride), x->run_len,
                    (uint32_t)k, f,
                    (uint32_t)(k - a->unit0[i]) >> c->shift[i], 0};
            n += x->count;
        }
    g0[0] = 0;
    g0[1] = n;
    st = mem_crc_open(device, r, g0, 1, (uint32_t)nu, a->timeout_ms, &c->crc);
    free(r);
    return st;
}

/* The GPU's sums of the units in its memory against the sources'. */
static fx_status_t gpu_compare(struct eng_checker *c, uint64_t version,
                               const uint8_t *bad)
{
    const struct eng_check_target *a = c->a;
    const uint32_t *words;
    fx_status_t st = mem_crc_wait(c->crc, &words);

    for (int i = 0; st == FX_OK && i < c->nsources; i++) {
        const uint32_t *want = wanted(a, i);
        size_t n = a->unit0[i + 1] - a->unit0[i];
        struct eng_verify v = verify_with(a, c->src[i].every);
        uint32_t phase = eng_verify_phase(&v, version);

        for (size_t u = eng_verify_first(&v, c->shift[i], phase, 0);
             !bad[i] && u < n;
             u = eng_verify_first(&v, c->shift[i], phase, u + 1)) {
            size_t k = a->unit0[i] + u;
            const struct eng_check_unit *x = &a->units[k];

            if (x->device < 0)
                continue;
            c->bytes += x->run_len * x->count;
            c->checked++;
            if (words[k] != want[u]) {
                if (u < c->src[i].bad) {
                    c->src[i].bad = u;
                    c->src[i].got = words[k];
                }
                break;
            }
        }
    }
    return st;
}

fx_status_t eng_checker_open(const struct eng_check_target *a, int nsources,
                             struct eng_checker **out)
{
    fx_status_t st;

    struct eng_checker *c = calloc(1, sizeof(*c));

    *out = NULL;
    if (c == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the checker");
    c->a = a;
    c->nsources = nsources;
    c->qcap = (size_t)nsources * ENG_CHECK_POINTS + 1;
    c->q = calloc(c->qcap, sizeof(*c->q));
    c->src = calloc((size_t)nsources + 1, sizeof(*c->src));
    c->sent = calloc(a->unit0[nsources] + 1, sizeof(*c->sent));
    c->shift = calloc((size_t)nsources + 1, sizeof(*c->shift));
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (c->q == NULL || c->src == NULL || c->sent == NULL ||
        c->shift == NULL) {
        eng_checker_close(c);
        return err_set(FX_ERR_NOMEM, "no memory for the checker");
    }
    for (int i = 0; i < nsources; i++) {
        uint64_t bytes = 0;

        for (size_t k = a->unit0[i]; k < a->unit0[i + 1]; k++)
            bytes += a->units[k].run_len * a->units[k].count;
        c->shift[i] = eng_verify_shift(a->unit0[i + 1] - a->unit0[i], bytes);
    }
    if ((st = open_gpu(c)) != FX_OK) {
        eng_checker_close(c);
        return st;
    }
    /* Without a thread every unit is checked at the end: so too where
     * the process has few cores, which the waiting thread, the sources
     * and their CRCs keep busy (on 2 cores, a Qwen3-0.6B version over shm
     * took 0.37 s with the thread against 0.28-0.30 without). */
    for (int n = a->threads >= ENG_CHECKER_CPUS ? a->threads / 4 : 0;
         c->started < n && c->started < CHECKERS_MAX &&
         pthread_create(&c->threads[c->started], NULL, checker_main, c) == 0;
         c->started++)
        ;
    *out = c;
    return FX_OK;
}

void eng_checker_close(struct eng_checker *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    c->quit = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    for (int t = 0; t < c->started; t++)
        pthread_join(c->threads[t], NULL);
    mem_crc_close(c->crc);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c->q);
    free(c->src);
    free(c->sent);
    free(c->shift);
    free(c);
}

void eng_checker_begin(struct eng_checker *c, uint64_t version)
{
    pthread_mutex_lock(&c->mu);
    /* A wait that failed left the threads maybe on runs of its version,
     * and runs queued: those go, the ones under way are waited for. */
    while (c->busy)
        pthread_cond_wait(&c->cv, &c->mu);
    c->version = version;
    c->qhead = c->qtail = 0;
    c->bytes = 0;
    c->checked = 0;
    for (int i = 0; i < c->nsources; i++) {
        c->src[i].covered = 0;
        c->src[i].bad = SIZE_MAX;
        c->src[i].every = NO_EVERY;
    }
    pthread_mutex_unlock(&c->mu);
}

/* Only the next run of a source counts: a point out of order, or beyond
 * its units, leaves them to the end. */
void eng_checker_point(struct eng_checker *c, int i, uint32_t every,
                       uint64_t lo, uint64_t hi)
{
    size_t n = c->a->unit0[i + 1] - c->a->unit0[i];

    if (!c->started || lo != c->src[i].covered || hi <= lo || hi > n ||
        c->qtail == c->qcap || !every_ok(c->a, every) ||
        (c->src[i].every != NO_EVERY && c->src[i].every != every))
        return;
    c->src[i].every = every;
    memcpy(c->sent + c->a->unit0[i] + lo, wanted(c->a, i) + lo,
           (size_t)(hi - lo) * sizeof(uint32_t));
    pthread_mutex_lock(&c->mu);
    c->q[c->qtail++] = (struct job){i, every, (size_t)lo, (size_t)hi};
    c->src[i].covered = (size_t)hi;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

fx_status_t eng_checker_finish(struct eng_checker *c, uint64_t version,
                               uint64_t *bytes, uint32_t *nchecked,
                               uint8_t *bad)
{
    const struct eng_check_target *a = c->a;
    struct share sh[ENG_CHECK_THREADS];
    fx_status_t st = FX_OK, gst = FX_OK;
    uint32_t gpu_every = eng_verify_every(&a->verify);
    char ebuf[ERR_ESC_MAX];
    int first = -1;

    /* The runs points announced that no thread has begun are taken back
     * and checked below on every thread: where a version lands faster
     * than the checkers read, they would wait for them (on the H200's
     * host a Qwen3-0.6B version's target ended 0.1 s after its source).
     * A source's runs are queued and begun in order, so its first run
     * not begun starts where the ones begun end. */
    pthread_mutex_lock(&c->mu);
    for (size_t q = c->qhead; q < c->qtail; q++)
        if (c->q[q].lo < c->src[c->q[q].i].covered)
            c->src[c->q[q].i].covered = c->q[q].lo;
    c->qtail = c->qhead;
    pthread_mutex_unlock(&c->mu);

    for (int i = 0; i < c->nsources; i++) {
        const struct eng_check_head *h =
            (const void *)((const char *)a->area +
                           a->area_off[a->sources[i]]);
        size_t n = a->unit0[i + 1] - a->unit0[i];

        bad[i] = 0;
        /* The head comes with the notification: the source wrote it
         * last, and writes nothing more until this rank releases. */
        if (h->version != version || h->magic != ENG_CHECK_MAGIC ||
            h->nunits != n || h->mode != (uint32_t)a->verify.mode ||
            !every_ok(a, h->every)) {
            if (st == FX_OK)
                st = err_set(FX_ERR_VERIFY, "version %llu from rank %d "
                             "came without its checksums (the area holds "
                             "version %llu, %u of %zu units, mode %u every "
                             "%u): a write went astray, or the ranks' "
                             "FABXFER_VERIFY differ",
                             (unsigned long long)version, a->sources[i],
                             (unsigned long long)h->version, h->nunits, n,
                             h->mode, h->every);
            bad[i] = 1;
            continue;
        }
        /* points that said otherwise (none should): their runs again */
        if (c->src[i].every != NO_EVERY && c->src[i].every != h->every)
            c->src[i].covered = 0;
        c->src[i].every = h->every;
        gpu_every = h->every == 0 ? 0 : gpu_every;
    }
    /* The GPU sums its units while the CPUs check theirs. */
    if (c->crc != NULL) {
        fault_point(FAULT_LANDED, (void *)c->dev0->at, c->dev0->run_len);
        gst = mem_crc_begin(c->crc, version, gpu_every);
        if (gst == FX_OK)
            gst = mem_crc_run(c->crc, 0);
    }
    for (int i = 0; i < c->nsources; i++) {
        size_t n = a->unit0[i + 1] - a->unit0[i];
        struct eng_verify v = verify_with(a, c->src[i].every);

        if (bad[i])
            continue;
        /* How far check points took the checker before the end: where
         * few, the version's whole check comes after it landed. */
        if (c->started)
            LOG_DEBUG("rank %d: version %llu from rank %d: %d checker "
                      "threads took %zu of %zu units as they landed, the "
                      "rest are checked now", a->me,
                      (unsigned long long)version, a->sources[i],
                      c->started, c->src[i].covered, n);
        /* the units no point announced, here and on other threads */
        for (int t = 0, nsh = check_parallel(a, i, c->src[i].covered, n,
                                             version, &v, c->shift[i],
                                             sh);
             t < nsh; t++) {
            pthread_mutex_lock(&c->mu);
            took(c, &sh[t]);
            pthread_mutex_unlock(&c->mu);
        }
    }
    pthread_mutex_lock(&c->mu);
    while (c->busy)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    if (c->crc != NULL && gst == FX_OK)
        gst = gpu_compare(c, version, bad);
    if (gst != FX_OK)
        return gst;
    *bytes += c->bytes;
    *nchecked += c->checked;
    for (int i = 0; i < c->nsources; i++)
        if (c->src[i].bad != SIZE_MAX) {
            bad[i] = 1;
            first = first < 0 ? i : first;
        }
    if (st != FX_OK || first < 0)
        return st;
    {
        const struct eng_check_unit *u =
            &a->units[a->unit0[first] + c->src[first].bad];

        return err_set(FX_ERR_VERIFY, "version %llu from rank %d: "
                       "tensor \"%s\", bytes [%llu, %llu) of rank %d's "
                       "piece, do not match the source's checksum "
                       "(CRC32C 0x%08x, sent 0x%08x)",
                       (unsigned long long)version, a->sources[first],
                       err_esc(ebuf, a->m->tensors[u->tensor].name),
                       (unsigned long long)u->piece_off,
                       (unsigned long long)(u->piece_off +
                                            (u->count - 1) * u->stride +
                                            u->run_len),
                       a->me, c->src[first].got,
                       wanted(a, first)[c->src[first].bad]);
    }
}
