/*
 * fabxfer-bench pack: the GPU packer alone, against the copy engine's own
 * speed. COUNT tensors of SIZE bytes live apart in one GPU allocation;
 * they are packed into pinned host buckets of FABXFER_BUCKET_SIZE by the
 * gather kernel and DMA that the staged source uses, and compared with one
 * device-to-pinned-host copy of a buffer of the same total size, measured
 * in the same run. No network, one process.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "mem/mem.h"
#include "util/cfg.h"

#define DEPTH 4

static void pack_usage(FILE *f)
{
    fprintf(f,
"usage: fabxfer-bench pack --model synthetic:COUNT:SIZE [--device cuda[:N]]\n"
"                          [--reps R] [--json FILE]\n"
"\n"
"pack: COUNT GPU tensors of SIZE bytes (apart from each other) packed into\n"
"pinned host buckets of FABXFER_BUCKET_SIZE by fabxfer's gather kernel and\n"
"DMA, against one device-to-pinned-host copy of the same number of bytes.\n"
"  engine     as the source's packer: bucket k starts before k-1 is taken\n"
"  pipelined  up to %d buckets in flight (kernel of k+1 during DMA of k)\n"
"  copy       cuMemcpy of one buffer of COUNT x SIZE bytes to pinned host\n"
"Each figure is the best of R rounds (default 5). Needs a GPU.\n",
            DEPTH);
}

struct pack_setup {
    int device;
    size_t count, size, stride, total, bucket;
    char *dev, *dev_flat, *pinned_all, *pool;
    struct mem_run *runs;
    size_t *first;
    uint32_t nbuckets;
    struct mem_gather *g;
};

/* Cut the tensors into bucket-sized groups, as the program does. */
static int plan_buckets(struct pack_setup *p)
{
    size_t cap = p->count + p->total / p->bucket + 2, n = 0;
    uint64_t used = 0;

    p->runs = malloc(cap * sizeof(*p->runs));
    p->first = malloc((p->total / p->bucket + 3) * sizeof(*p->first));
    if (p->runs == NULL || p->first == NULL)
        return -1;
    p->first[0] = 0;
    for (size_t i = 0; i < p->count; i++)
        for (uint64_t done = 0; done < p->size;) {
            uint64_t len = p->size - done;

            if (used == p->bucket) {
                p->first[++p->nbuckets] = n;
                used = 0;
            }
            if (len > p->bucket - used)
                len = p->bucket - used;
            p->runs[n++] = (struct mem_run){
                (uintptr_t)p->dev + i * p->stride + done, used, len};
            used += len;
            done += len;
        }
    p->first[++p->nbuckets] = n;
    return 0;
}

/* As the source's packer does it: bucket k is started before bucket k-1
 * is waited for and handed over. */
static double run_engine(struct pack_setup *p)
{
    double t0 = clock_now();

    for (uint32_t k = 0; k < p->nbuckets; k++) {
        int slot = (int)(k % DEPTH);

        if (mem_gather_start(p->g, k, slot, p->pool + slot * p->bucket) ||
            (k > 0 && mem_gather_wait(p->g, (int)((k - 1) % DEPTH))))
            return -1;
    }
    if (mem_gather_wait(p->g, (int)((p->nbuckets - 1) % DEPTH)))
        return -1;
    return clock_now() - t0;
}

static double run_pipelined(struct pack_setup *p)
{
    double t0 = clock_now();

    for (uint32_t k = 0; k < p->nbuckets; k++) {
        int slot = (int)(k % DEPTH);

        if (mem_gather_wait(p->g, slot) ||
            mem_gather_start(p->g, k, slot, p->pool + slot * p->bucket))
            return -1;
    }
    for (int s = 0; s < DEPTH; s++)
        if (mem_gather_wait(p->g, s))
            return -1;
    return clock_now() - t0;
}

static double run_copy(struct pack_setup *p)
{
    double t0 = clock_now();

    if (mem_copy(p->device, p->pinned_all, p->dev_flat, p->total))
        return -1;
    return clock_now() - t0;
}

int pack_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'M'},
        {"device", required_argument, NULL, 'd'},
        {"reps", required_argument, NULL, 'r'},
        {"json", required_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct pack_setup p = {0};
    const char *model = NULL, *json = NULL;
    double best[3] = {1e30, 1e30, 1e30};
    int reps = 5, c, rc = 1;
    char spec[128];
    char *colon;

    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'M': model = optarg; break;
        case 'd':
            if (bench_parse_device(optarg, &p.device))
                return 2;
            if (p.device < 0) {
                fprintf(stderr, "fabxfer-bench pack: --device \"%s\": use "
                        "cuda or cuda:N\n", optarg);
                return 2;
            }
            break;
        case 'r': reps = atoi(optarg) > 0 ? atoi(optarg) : 1; break;
        case 'j': json = optarg; break;
        case 'h': pack_usage(stdout); return 0;
        default:
            fprintf(stderr, "Try 'fabxfer-bench pack --help'.\n");
            return 2;
        }
    }
    if (model == NULL || strncmp(model, "synthetic:", 10) != 0 ||
        snprintf(spec, sizeof(spec), "%s", model + 10) >= (int)sizeof(spec) ||
        (colon = strchr(spec, ':')) == NULL) {
        fprintf(stderr, "fabxfer-bench pack: --model synthetic:COUNT:SIZE "
                "is required\n");
        return 2;
    }
    *colon = '\0';
    p.count = strtoull(spec, NULL, 10);
    if (p.count == 0 || bench_parse_size(colon + 1, &p.size) != 0 ||
        p.size == 0) {
        fprintf(stderr, "fabxfer-bench pack: --model %s: bad COUNT or "
                "SIZE\n", model);
        return 2;
    }
    if (cfg_size(CFG_BUCKET_SIZE, &p.bucket) != FX_OK ||
        mem_cuda_init() != FX_OK) {
        fprintf(stderr, "fabxfer-bench pack: %s\n", fx_last_error(NULL));
        return 1;
    }
    /* Tensors apart (a 256-byte gap), as separate allocations would be. */
    p.stride = (p.size + 255) / 256 * 256 + 256;
    p.total = p.count * p.size;
    if (mem_dev_alloc(p.device, p.count * p.stride, (void **)&p.dev) ||
        mem_dev_alloc(p.device, p.total, (void **)&p.dev_flat) ||
        mem_pinned_alloc(p.device, p.total, (void **)&p.pinned_all) ||
        mem_pinned_alloc(p.device, p.bucket * DEPTH, (void **)&p.pool) ||
        mem_memset(p.device, p.dev, 0x5A, p.count * p.stride) ||
        mem_memset(p.device, p.dev_flat, 0x5A, p.total) ||
        plan_buckets(&p) ||
        mem_gather_open(p.device, DEPTH, p.bucket, p.runs, p.first,
                        p.nbuckets, 30000, &p.g)) {
        fprintf(stderr, "fabxfer-bench pack: %s\n", fx_last_error(NULL));
        goto out;
    }
    for (int r = 0; r < reps + 1; r++) {
        double t[3] = {run_engine(&p), run_pipelined(&p), run_copy(&p)};

        for (int k = 0; k < 3; k++) {
            if (t[k] < 0) {
                fprintf(stderr, "fabxfer-bench pack: %s\n",
                        fx_last_error(NULL));
                goto out;
            }
            if (r > 0 && t[k] < best[k]) /* round 0 warms up */
                best[k] = t[k];
        }
    }
    printf("# fabxfer %s pack: %zu GPU tensors of %zu bytes into %u pinned "
           "buckets of %zu, CUDA device %d, best of %d\n",
           fx_version_string(), p.count, p.size, p.nbuckets, p.bucket,
           p.device, reps);
    printf("%-10s %12s %10s %8s %9s\n", "mode", "bytes", "seconds", "GB/s",
           "vs copy");
    for (int k = 0; k < 3; k++) {
        static const char *const names[] = {"engine", "pipelined", "copy"};

        printf("%-10s %12zu %10.6f %8.2f %9.3f\n", names[k], p.total,
               best[k], (double)p.total / best[k] / 1e9, best[2] / best[k]);
    }
    if (json != NULL) {
        FILE *f = fopen(json, "w");

        if (f == NULL) {
            perror(json);
            goto out;
        }
        fprintf(f, "{\"mode\": \"pack\", \"tensors\": %zu, \"tensor_bytes\": "
                "%zu, \"bytes\": %zu, \"bucket\": %zu, \"device\": %d, "
                "\"engine_s\": %.6f, \"pipelined_s\": %.6f, \"copy_s\": %.6f, "
                "\"engine_vs_copy\": %.4f, \"pipelined_vs_copy\": %.4f, "
                "\"statistic\": \"best of %d\"}\n", p.count, p.size, p.total,
                p.bucket, p.device, best[0], best[1], best[2],
                best[2] / best[0], best[2] / best[1], reps);
        fclose(f);
    }
    rc = 0;
out:
    mem_gather_close(p.g);
    mem_dev_free(p.dev);
    mem_dev_free(p.dev_flat);
    mem_pinned_free(p.pinned_all);
    mem_pinned_free(p.pool);
    free(p.runs);
    free(p.first);
    return rc;
}
