/*
 * fabxfer-bench: shared declarations of its subcommands and modes.
 */
#ifndef FX_BENCH_H
#define FX_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include <fabxfer.h>

#define BENCH_MAX_SIZES 32

struct p2p_args {
    const char *provider;
    size_t sizes[BENCH_MAX_SIZES];
    int nsizes;
    int raw, fabxfer; /* modes asked for */
    long iters;       /* 0: chosen per size */
    int reps;         /* timed rounds per (mode, size); best reported */
    const char *json;
};

struct bench_row {
    const char *mode;
    const char *provider;
    size_t bytes;
    long iters;
    double seconds;
};

double bench_now(void);
int bench_p2p(const struct p2p_args *a);

/* raw.c: the provider's ceiling, straight on libfabric. */
struct raw;
int raw_open(fx_ctx_t *ctx, const char *prov, void *buf, size_t len,
             struct raw **out);
/* Source: iters whole-buffer writes, up to depth in flight; returns the
 * seconds from the first post to the last completion. Target: progress
 * until the source says it is done. */
int raw_run(struct raw *r, int is_source, size_t len, long iters,
            double *seconds);
void raw_close(struct raw *r);

#endif
