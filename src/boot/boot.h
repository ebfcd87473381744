/*
 * Bootstrap: the out-of-band channel that carries endpoint addresses and
 * memory keys before the fabric can. The library above asks for two
 * collectives only, an allgather of byte strings whose lengths differ by
 * rank and a barrier, because that is what every launcher and application
 * framework offers (PMIx, a folder, torch.distributed, Ray, MPI). A backend
 * gives them directly (the application's exchange, app.c) or as a
 * key-value store with PMIx-shaped semantics, from which boot.c builds
 * them:
 *
 *   put(key, value)   publish a value under (my rank, key)
 *   fence()           commit my puts and wait for every rank to reach the
 *                     fence; afterwards every put made before it is visible
 *   get(rank, key)    read a value another rank put before the last fence
 *
 * Every blocking call of fabxfer's own backends gives up after the
 * timeout with an error that names the ranks it was waiting for; the
 * application's callbacks are the application's to bound.
 */
#ifndef FX_BOOT_BOOT_H
#define FX_BOOT_BOOT_H

#include <stddef.h>

#include "config.h"
#include "fabxfer.h"

struct boot;

/* One allgather's result: every rank's bytes, in rank order. It is the
 * public fx_gather_t, which the application's allgather fills. */
struct fx_gather {
    int size;
    int filled;             /* ranks given so far */
    unsigned char **val;    /* val[r]: malloc'd, NULL until given */
    size_t *len;
    struct fx_gather *open_next; /* app.c: the handles whose callback runs */
};

struct boot_ops {
    const char *name;
    /* Fill b->rank, b->size, b->single_host, b->priv. */
    fx_status_t (*init)(struct boot *b);
    /* The collectives; NULL in a key-value backend, which gets boot.c's
     * from its put, fence and get. */
    fx_status_t (*allgather)(struct boot *b, const void *mine, size_t len,
                             struct fx_gather *all);
    fx_status_t (*barrier)(struct boot *b);
    /* Key-value backends only (NULL otherwise). */
    fx_status_t (*put)(struct boot *b, const char *key, const void *val,
                       size_t len);
    fx_status_t (*fence)(struct boot *b);
    /* *val is malloc'd; the caller frees it. */
    fx_status_t (*get)(struct boot *b, int rank, const char *key, void **val,
                       size_t *len);
    void (*fini)(struct boot *b);
    /* Optional: non-zero once the launcher has reported rank dead (or
     * itself lost); waits on that rank then fail at once. */
    int (*peer_dead)(struct boot *b, int rank);
};

struct boot {
    const struct boot_ops *ops;
    int rank;
    int size;
    int single_host; /* every rank runs on this host */
    int timeout_ms;
    unsigned seq;    /* numbers the collectives, for unique keys */
    unsigned long gets; /* key-value gets this rank made (tests count) */
    void *priv;
};

/* The local launcher gives its ranks a nonce of the job
 * (FABXFER_LOCAL_NONCE), which the "local" backend writes at the head of
 * every file it makes, so that files an earlier job left in the folder
 * are told apart and never read. */
#define BOOT_LOCAL_NONCE_LEN 16 /* hex digits: 64 bits from getrandom */

extern const struct boot_ops boot_local_ops;
extern const struct boot_ops boot_app_ops;
#if HAVE_PMIX
extern const struct boot_ops boot_pmix_ops;
#endif

/* Open the named backend ("local", "pmix", "auto"); *out stays NULL for
 * "none" (the application exchanges blobs itself). "auto" picks local
 * under fabxfer-run, pmix under a PMIx server (PMIX_RANK in the
 * environment), else none. */
fx_status_t boot_open(const char *name, int timeout_ms, struct boot **out);
/* The application's exchange (fx_ctx_opts_t's exchange_* fields): rank and
 * size as the application gives them; single_host < 0 is found out by
 * comparing every rank's host (one allgather). */
struct boot_app_args {
    fx_allgather_fn allgather;
    fx_barrier_fn barrier;
    void *arg;
    int rank, size, single_host, timeout_ms;
};
fx_status_t boot_open_app(const struct boot_app_args *a, struct boot **out);
/* A group of this fabxfer-run job's processes, size of them, this one at
 * index (a join's: the sources and the new processes, started later),
 * through the job's folder under names of its own ("g.<tag>."): tag the
 * same on every member and new for each group. Its waits are watched as
 * the job's are. */
fx_status_t boot_open_local_group(const char *tag, int size, int index,
                                  int timeout_ms, struct boot **out);
void boot_close(struct boot *b);

/* The collectives, over whichever backend. what names the collective in
 * errors ("addresses and memory keys"). boot_allgatherv fills *all, which
 * boot_gather_free releases; boot_allgather wants len bytes from every
 * rank, in size * len bytes of all. */
fx_status_t boot_allgatherv(struct boot *b, const char *what,
                            const void *mine, size_t len,
                            struct fx_gather **all);
void boot_gather_free(struct fx_gather *g);
/* Copies data as rank's contribution. */
fx_status_t boot_gather_set(struct fx_gather *g, int rank, const void *data,
                            size_t len);
/* fx_gather_set: the same, for a handle that the application's allgather
 * callback was given and has not returned from (FX_ERR_STATE otherwise:
 * a late handle is never read); calls from several threads take turns. */
fx_status_t boot_app_gather_set(struct fx_gather *g, int rank,
                                const void *data, size_t len);
fx_status_t boot_allgather(struct boot *b, const char *what,
                           const void *mine, size_t len, void *all);
fx_status_t boot_barrier(struct boot *b, const char *what);
/* Point to point through the channel, as one collective that every rank
 * enters: this rank sends out[i] (len[i] bytes) to rank to[i], and gets in
 * (*got)->val[r] what each rank r of from[] sent it (each of them lists
 * this rank in its to[]; other ranks' entries stay NULL). A key-value
 * backend (PMIx, local) puts one value per receiver and gets one per
 * sender, so a rank's gets grow with its peers, not with the job; the
 * application's allgather carries every rank's messages to every rank. */
fx_status_t boot_exchange(struct boot *b, const char *what, int nto,
                          const int *to, const void *const *out,
                          const size_t *len, int nfrom, const int *from,
                          struct fx_gather **got);
/* The launcher's word on a peer (0 when the backend has none). */
int boot_peer_dead(struct boot *b, int rank);

#endif
