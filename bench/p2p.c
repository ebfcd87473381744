/*
 * fabxfer-bench p2p, as run by each of the two ranks: rank 0 writes, rank 1
 * receives. Both modes move the same buffer the same number of times, so
 * that the ratio fabxfer / raw in one run is the number that matters.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static long iters_for(const struct p2p_args *a, size_t size)
{
    long n;

    if (a->iters > 0)
        return a->iters;
    n = (long)(((size_t)4 << 30) / size);
    return n < 8 ? 8 : n > 20000 ? 20000 : n;
}

static void size_text(size_t n, char *buf, size_t len)
{
    if (n >= (1u << 30) && n % (1u << 30) == 0)
        snprintf(buf, len, "%zuG", n >> 30);
    else if (n >= (1u << 20) && n % (1u << 20) == 0)
        snprintf(buf, len, "%zuM", n >> 20);
    else if (n >= 1024 && n % 1024 == 0)
        snprintf(buf, len, "%zuK", n >> 10);
    else
        snprintf(buf, len, "%zu", n);
}

/* fabxfer mode: iters fx_write of the whole buffer, then one fx_notify;
 * the target's fx_wait_notify returns once every byte is in. */
static int run_fabxfer(fx_ctx_t *ctx, fx_region_t *region, size_t size,
                       long iters, double *seconds)
{
    uint64_t tag;
    double t0;

    if (fx_ctx_rank(ctx) == 1)
        return fx_wait_notify(ctx, 0, &tag) == FX_OK ? 0 : -1;
    t0 = clock_now();
    for (long i = 0; i < iters; i++)
        if (fx_write(ctx, region, 0, 1, 0, 0, size) != FX_OK)
            return -1;
    if (fx_notify(ctx, 1, (uint64_t)iters) != FX_OK)
        return -1;
    *seconds = clock_now() - t0;
    return 0;
}

static void print_row(FILE *json, const struct bench_row *row, double ratio,
                      int *first)
{
    double gbps = (double)row->bytes * (double)row->iters / row->seconds /
                  1e9;
    char sz[32];

    size_text(row->bytes, sz, sizeof(sz));
    printf("%-8s %-12s %8s %8ld %10.4f %9.3f", row->mode, row->provider, sz,
           row->iters, row->seconds, gbps);
    if (ratio > 0)
        printf(" %9.3f", ratio);
    printf("\n");
    fflush(stdout);
    if (json == NULL)
        return;
    fprintf(json, "%s\n  {\"mode\": \"%s\", \"provider\": \"%s\", "
            "\"bytes\": %zu, \"iters\": %ld, \"seconds\": %.6f, "
            "\"gb_per_s\": %.4f", *first ? "" : ",", row->mode, row->provider,
            row->bytes, row->iters, row->seconds, gbps);
    if (ratio > 0)
        fprintf(json, ", \"ratio_to_raw\": %.4f", ratio);
    fprintf(json, "}");
    *first = 0;
}

int bench_p2p(const struct p2p_args *a)
{
    size_t max = 0;
    fx_ctx_opts_t opts;
    fx_region_t *region = NULL;
    struct raw *raw = NULL;
    FILE *json = NULL;
    fx_ctx_t *ctx = NULL;
    char *buf = NULL;
    int rank, first = 1, rc = -1;

    for (int i = 0; i < a->nsizes; i++)
        max = a->sizes[i] > max ? a->sizes[i] : max;
    fx_ctx_opts_init(&opts);
    opts.provider = a->provider;
    if (fx_ctx_create(&opts, &ctx) != FX_OK) {
        fprintf(stderr, "fabxfer-bench: %s\n", fx_last_error(NULL));
        return -1;
    }
    rank = fx_ctx_rank(ctx);
    buf = malloc(max);
    if (buf == NULL) {
        fprintf(stderr, "fabxfer-bench: no memory for %zu bytes\n", max);
        goto out;
    }
    memset(buf, rank == 0 ? 0x5A : 0, max);
    if (fx_region_register(ctx, buf, max,
                           rank == 0 ? FX_REGION_SOURCE : FX_REGION_TARGET,
                           &region) != FX_OK ||
        fx_ctx_exchange(ctx) != FX_OK)
        goto fail;
    if (a->raw && raw_open(ctx, fx_ctx_provider(ctx), buf, max, &raw))
        goto out;
    if (rank == 0) {
        if (a->json && (json = fopen(a->json, "w")) == NULL) {
            perror(a->json);
            goto out;
        }
        if (json)
            fprintf(json, "[");
        printf("# fabxfer %s p2p over %s (%s), notify %s\n",
               fx_version_string(), fx_ctx_provider(ctx),
               bench_provider_origin(a->provider), fx_ctx_notify_mode(ctx));
        printf("%-8s %-12s %8s %8s %10s %9s %9s\n", "mode", "provider",
               "size", "iters", "seconds", "GB/s", "vs raw");
    }
    for (int i = 0; i < a->nsizes; i++) {
        size_t size = a->sizes[i];
        long iters = iters_for(a, size);
        struct bench_row row = {NULL, fx_ctx_provider(ctx), size, iters, 0};
        double raw_gbps = 0, s = 0;

        double best_raw = 0, best_fx = 0;

        /* One untimed round each first: connections form on first use.
         * Then reps rounds, alternating modes so that both see the same
         * machine; the fastest round of each is reported. */
        if ((a->raw && raw_run(raw, rank == 0, size, 1, &s)) ||
            (a->fabxfer && run_fabxfer(ctx, region, size, 1, &s)))
            goto fail;
        for (int rep = 0; rep < a->reps; rep++) {
            if (a->raw) {
                if (raw_run(raw, rank == 0, size, iters, &s))
                    goto out;
                best_raw = rep == 0 || s < best_raw ? s : best_raw;
            }
            if (a->fabxfer) {
                if (run_fabxfer(ctx, region, size, iters, &s))
                    goto fail;
                best_fx = rep == 0 || s < best_fx ? s : best_fx;
            }
        }
        if (rank == 0 && a->raw) {
            row.mode = "raw";
            row.seconds = best_raw;
            raw_gbps = (double)size * iters / best_raw / 1e9;
            print_row(json, &row, 0, &first);
        }
        if (rank == 0 && a->fabxfer) {
            row.mode = "fabxfer";
            row.seconds = best_fx;
            print_row(json, &row,
                      raw_gbps > 0 ? (double)size * iters / best_fx / 1e9 /
                                         raw_gbps
                                   : 0,
                      &first);
        }
        if (fx_barrier(ctx) != FX_OK)
            goto fail;
    }
    if (json)
        fprintf(json, "\n]\n");
    /* FABXFER_RAILS: what each rail carried of the fabxfer mode's bytes
     * (raw always uses one endpoint of its own). */
    for (int r = 0; rank == 0 && fx_ctx_rails(ctx) > 1 &&
                    r < fx_ctx_rails(ctx); r++) {
        const char *dom;
        uint64_t bytes;

        if (fx_ctx_rail(ctx, r, &dom, &bytes) == FX_OK)
            printf("# rail %d (%s): %llu bytes written by fabxfer\n", r, dom,
                   (unsigned long long)bytes);
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "fabxfer-bench rank %d: %s\n", rank, fx_last_error(ctx));
out:
    if (json)
        fclose(json);
    raw_close(raw);
    fx_ctx_destroy(ctx);
    free(buf);
    return rc;
}
