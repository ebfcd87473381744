/*
 * Bootstrap: the out-of-band channel that carries endpoint addresses and
 * memory keys before the fabric can. Each backend is one table of functions
 * with PMIx-shaped semantics (put, fence, get), so that PMIx slots in as
 * another table:
 *
 *   put(key, value)   publish a value under (my rank, key)
 *   fence()           commit my puts and wait for every rank to reach the
 *                     fence; afterwards every put made before it is visible
 *   get(rank, key)    read a value another rank put before the last fence
 *
 * Every blocking call gives up after the timeout with an error that names
 * the ranks it was waiting for.
 */
#ifndef FX_BOOT_BOOT_H
#define FX_BOOT_BOOT_H

#include <stddef.h>

#include "config.h"
#include "fabxfer.h"

struct boot;

struct boot_ops {
    const char *name;
    /* Fill b->rank, b->size, b->single_host, b->priv. */
    fx_status_t (*init)(struct boot *b);
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
    void *priv;
};

/* The local launcher gives its ranks a nonce of the job
 * (FABXFER_LOCAL_NONCE), which the "local" backend writes at the head of
 * every file it makes, so that files an earlier job left in the folder
 * are told apart and never read. */
#define BOOT_LOCAL_NONCE_LEN 16 /* hex digits: 64 bits from getrandom */

extern const struct boot_ops boot_local_ops;
#if HAVE_PMIX
extern const struct boot_ops boot_pmix_ops;
#endif

/* Open the named backend ("local", "pmix", "auto"); *out stays NULL for
 * "none" (the application exchanges blobs itself). "auto" picks local
 * under fabxfer-run, pmix under a PMIx server (PMIX_RANK in the
 * environment), else none. */
fx_status_t boot_open(const char *name, int timeout_ms, struct boot **out);
void boot_close(struct boot *b);

/* Collectives built on put/fence/get, the same for every backend. */
fx_status_t boot_allgather(struct boot *b, const void *mine, size_t len,
                           void *all);
fx_status_t boot_barrier(struct boot *b);
/* The launcher's word on a peer (0 when the backend has none). */
int boot_peer_dead(struct boot *b, int rank);

#endif
