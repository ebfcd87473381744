/*
 * The application's exchange as a bootstrap backend: its two callbacks
 * are the collectives, so nothing here stores keys. What the callbacks
 * return is checked as hostile input would be: every rank given once,
 * lengths as they were sent. The handle an allgather callback fills is
 * good only while that callback runs: fx_gather_set finds it among the
 * open ones before touching it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot/boot.h"
#include "util/error.h"
#include "util/host.h"

struct app {
    fx_allgather_fn allgather;
    fx_barrier_fn barrier;
    void *arg;
};

/* A callback's non-zero return as a status: fabxfer's own codes pass. */
static fx_status_t app_status(int rc)
{
    if (rc < 0 && rc >= FX_ERR_DEVICE)
        return (fx_status_t)rc;
    return FX_ERR_BOOTSTRAP;
}

/* The handles whose callback has not returned, of every context of the
 * process; open_mu also serialises fx_gather_set. */
static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fx_gather *open_list;

static void gather_open(struct fx_gather *g)
{
    pthread_mutex_lock(&open_mu);
    g->open_next = open_list;
    open_list = g;
    pthread_mutex_unlock(&open_mu);
}

static void gather_close(struct fx_gather *g)
{
    pthread_mutex_lock(&open_mu);
    for (struct fx_gather **pp = &open_list; *pp != NULL;
         pp = &(*pp)->open_next)
        if (*pp == g) {
            *pp = g->open_next;
            break;
        }
    pthread_mutex_unlock(&open_mu);
}

fx_status_t boot_app_gather_set(struct fx_gather *g, int rank,
                                const void *data, size_t len)
{
    struct fx_gather *o;
    fx_status_t st;

    if (g == NULL)
        return err_set(FX_ERR_INVALID, "fx_gather_set: NULL gather");
    pthread_mutex_lock(&open_mu);
    /* Compared, never read: a late handle may point to freed memory. */
    for (o = open_list; o != NULL && o != g; o = o->open_next)
        ;
    st = o != NULL ? boot_gather_set(g, rank, data, len)
                   : err_set(FX_ERR_STATE, "fx_gather_set: called after the "
                             "allgather callback returned (rank %d): a "
                             "handle is good only until its callback "
                             "returns", rank);
    pthread_mutex_unlock(&open_mu);
    return st;
}

static fx_status_t app_allgather(struct boot *b, const void *mine, size_t len,
                                 struct fx_gather *all)
{
    struct app *a = b->priv;
    int rc;

    gather_open(all);
    rc = a->allgather(a->arg, mine, len, all);
    gather_close(all);

    if (rc != 0)
        return err_set(app_status(rc), "the application's allgather "
                       "returned %d", rc);
    if (all->filled != all->size) {
        for (int r = 0; r < all->size; r++)
            if (all->val[r] == NULL)
                return err_set(FX_ERR_BOOTSTRAP, "the application's "
                               "allgather returned 0 without giving rank "
                               "%d's bytes (fx_gather_set, %d of %d ranks "
                               "given)", r, all->filled, all->size);
    }
    if (all->len[b->rank] != len ||
        (len > 0 && memcmp(all->val[b->rank], mine, len) != 0))
        return err_set(FX_ERR_BOOTSTRAP, "the application's allgather "
                       "gave rank %d (this one) other bytes than it sent "
                       "(%zu bytes, not %zu): it mixes ranks up", b->rank,
                       all->len[b->rank], len);
    return FX_OK;
}

static fx_status_t app_barrier(struct boot *b)
{
    struct app *a = b->priv;
    int rc = a->barrier(a->arg);

    if (rc != 0)
        return err_set(app_status(rc), "the application's barrier returned "
                       "%d", rc);
    return FX_OK;
}

static fx_status_t find_single_host(struct boot *b)
{
    struct fx_gather *all = NULL;
    char me[320];
    size_t n = host_identity(me, sizeof(me));
    fx_status_t st;

    st = boot_allgatherv(b, "host names", me, n, &all);
    if (st != FX_OK)
        return st;
    b->single_host = 1;
    for (int r = 0; r < all->size; r++)
        if (all->len[r] != n || memcmp(all->val[r], me, n) != 0)
            b->single_host = 0;
    boot_gather_free(all);
    return FX_OK;
}

static fx_status_t app_init(struct boot *b)
{
    (void)b;
    return FX_OK; /* boot_open_app fills it */
}

static void app_fini(struct boot *b)
{
    free(b->priv);
}

const struct boot_ops boot_app_ops = {
    .name = "exchange",
    .init = app_init,
    .allgather = app_allgather,
    .barrier = app_barrier,
    .fini = app_fini,
};

fx_status_t boot_open_app(const struct boot_app_args *a, struct boot **out)
{
    struct boot *b;
    struct app *priv;
    fx_status_t st;

    *out = NULL;
    if ((a->allgather == NULL) != (a->barrier == NULL))
        return err_set(FX_ERR_INVALID, "fx_ctx_opts_t: exchange_allgather "
                       "and exchange_barrier go together (one is NULL)");
    if (a->size < 1 || a->rank < 0 || a->rank >= a->size)
        return err_set(FX_ERR_INVALID, "fx_ctx_opts_t: with an exchange, "
                       "rank and size must give this process's place in "
                       "the job; got rank %d, size %d", a->rank, a->size);
    b = calloc(1, sizeof(*b));
    priv = calloc(1, sizeof(*priv));
    if (b == NULL || priv == NULL) {
        free(b);
        free(priv);
        return err_set(FX_ERR_NOMEM, "out of memory opening the "
                       "application's exchange");
    }
    *priv = (struct app){a->allgather, a->barrier, a->arg};
    *b = (struct boot){.ops = &boot_app_ops, .rank = a->rank,
                       .size = a->size, .single_host = a->single_host,
                       .timeout_ms = a->timeout_ms, .priv = priv};
    if (a->single_host < 0 && (st = find_single_host(b)) != FX_OK) {
        boot_close(b);
        return st;
    }
    *out = b;
    return FX_OK;
}
