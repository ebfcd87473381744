/*
 * fabxfer-bench pack: the GPU packer alone, against the copy engine's own
 * speed. COUNT tensors of SIZE bytes live apart in one GPU allocation;
 * they are packed into pinned host buckets of FABXFER_BUCKET_SIZE by the
 * gather kernel and DMA that the staged source uses, and compared with one
 * device-to-pinned-host copy of a buffer of the same total size, measured
 * in the same run. With --convert, the same tensors are also packed with
 * the conversion (f32 read, bf16 written), timed against the plain pack of
 * the same source bytes; --device host does both with the host packer's
 * own loops (memcpy, conv_run). No network, one process.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "engine/engine.h"
#include "mem/mem.h"
#include "util/cfg.h"
#include "util/convert.h"
#include "util/crc32c.h"

#define DEPTH 4

static void pack_usage(FILE *f)
{
    fprintf(f,
"usage: fabxfer-bench pack --model synthetic:COUNT:SIZE\n"
"                          [--device cuda[:N]|host]\n"
"                          [--convert f32-bf16|bf16-fp8]\n"
"                          [--reps R] [--json FILE]\n"
"\n"
"pack: COUNT GPU tensors of SIZE bytes (apart from each other) packed into\n"
"pinned host buckets of FABXFER_BUCKET_SIZE (0: 4M) by fabxfer's gather\n"
"kernel and DMA, against one device-to-pinned-host copy of the same number\n"
"of bytes.\n"
"  engine     as the source's packer: bucket k starts before k-1 is taken\n"
"  pipelined  up to %d buckets in flight (kernel of k+1 during DMA of k)\n"
"  copy       cuMemcpy of one buffer of COUNT x SIZE bytes to pinned host\n"
"  convert    (--convert) as engine, each f32 written as bf16 (SIZE / 2\n"
"             bytes a tensor), or each bf16 divided by its 128-element\n"
"             block's scale and written as FP8 e4m3 (SIZE / 2 bytes);\n"
"             conv_vs_pack: engine's time / convert's\n"
"--device host: the host packer, memcpy (pack) against conv_run (convert)\n"
"of the same tensors into buckets, no GPU needed; and FABXFER_VERIFY's\n"
"CRC32C: checksum (one pass over the copy's buffer, against copy) and\n"
"pack+crc (engine, each bucket summed 64 KiB at a time as it is packed,\n"
"as the source does, against engine). On a GPU, checksum is the GPU's\n"
"kernel over the tensors where they lie (one launch), against copy.\n"
"Each figure is the best of R rounds (default 5). Needs a GPU but for\n"
"--device host.\n",
            DEPTH);
}

/* The tensors cut into bucket-sized runs, as the program does: the plain
 * pack's and, with a conversion, the converting pack's. */
struct pack_runs {
    struct mem_run *runs;
    size_t *first;
    uint32_t nbuckets;
    struct mem_gather *g;
};

struct pack_setup {
    int device; /* -1: the host packer */
    int conv;
    size_t count, size, stride, total, bucket;
    char *dev, *dev_flat, *pinned_all, *pool;
    float *scales;  /* FP8: one per 128 elements of each tensor */
    struct pack_runs plain, conv_runs;
    struct mem_crc *crc; /* GPU: every tensor's CRC32C, one kernel */
};

#define FP8_BLOCK 128

/* Cut the tensors into bucket-sized groups, as the program does; conv
 * writes conv_dst_size bytes for every conv_src_size read. */
static int plan_buckets(struct pack_setup *p, int conv, struct pack_runs *o)
{
    size_t cap = p->count + p->total / p->bucket + 2, n = 0;
    uint64_t used = 0, out = conv ? p->size / conv_src_size(conv) *
                                         conv_dst_size(conv)
                                  : p->size;

    o->runs = malloc(cap * sizeof(*o->runs));
    o->first = malloc((p->total / p->bucket + 3) * sizeof(*o->first));
    if (o->runs == NULL || o->first == NULL)
        return -1;
    o->first[0] = 0;
    for (size_t i = 0; i < p->count; i++)
        for (uint64_t done = 0; done < out;) {
            uint64_t len = out - done;

            if (used == p->bucket) {
                o->first[++o->nbuckets] = n;
                used = 0;
            }
            if (len > p->bucket - used)
                len = p->bucket - used;
            o->runs[n++] = (struct mem_run){
                (uintptr_t)p->dev + i * p->stride +
                    (conv ? conv_src_len(conv, done) : done),
                used, len, (uint64_t)conv,
                conv_scaled(conv)
                    ? (uintptr_t)(p->scales +
                                  (i * out + done) / FP8_BLOCK)
                    : 0,
                0, conv_scaled(conv) ? FP8_BLOCK : 0};
            used += len;
            done += len;
        }
    o->first[++o->nbuckets] = n;
    return 0;
}

/* As the source's packer does it: bucket k is started before bucket k-1
 * is waited for and handed over. On the host, the packer's loops. */
static double run_engine(struct pack_setup *p, struct pack_runs *o)
{
    double t0 = clock_now();

    if (p->device < 0) {
        for (uint32_t k = 0; k < o->nbuckets; k++) {
            char *slot = p->pool + (k % DEPTH) * p->bucket;

            for (size_t i = o->first[k]; i < o->first[k + 1]; i++) {
                const struct mem_run *r = &o->runs[i];

                if (r->block > 0)
                    conv_run_scaled((int)r->conv, slot + r->dst,
                                    (const void *)(uintptr_t)r->src, r->len,
                                    (const float *)(uintptr_t)r->scale,
                                    r->phase, r->block);
                else if (r->conv)
                    conv_run((int)r->conv, slot + r->dst,
                             (const void *)(uintptr_t)r->src,
                             r->len / conv_dst_size((int)r->conv));
                else
                    memcpy(slot + r->dst, (const void *)(uintptr_t)r->src,
                           r->len);
            }
        }
        return clock_now() - t0;
    }
    for (uint32_t k = 0; k < o->nbuckets; k++) {
        int slot = (int)(k % DEPTH);

        if (mem_gather_start(o->g, k, slot, p->pool + slot * p->bucket) ||
            (k > 0 && mem_gather_wait(o->g, (int)((k - 1) % DEPTH))))
            return -1;
    }
    if (mem_gather_wait(o->g, (int)((o->nbuckets - 1) % DEPTH)))
        return -1;
    return clock_now() - t0;
}

/* FABXFER_VERIFY on the host: one pass of CRC32C over the copy's source,
 * and the engine's pack with each bucket summed as it is packed. */
static volatile uint32_t crc_sink;

static double run_checksum(struct pack_setup *p)
{
    const uint32_t *w;
    double t0 = clock_now();

    if (p->device < 0) {
        crc_sink = crc32c(0, p->dev_flat, p->total);
        return clock_now() - t0;
    }
    if (mem_crc_begin(p->crc, 1, 0) || mem_crc_run(p->crc, 0) ||
        mem_crc_wait(p->crc, &w))
        return -1;
    crc_sink = w[0];
    return clock_now() - t0;
}

/* The GPU's checksums of the tensors where they are, as a source on the
 * direct path sums them. */
static int open_crc(struct pack_setup *p)
{
    struct mem_crc_range *r = calloc(p->count, sizeof(*r));
    size_t g0[2] = {0, p->count};
    int rc;

    if (r == NULL)
        return -1;
    for (size_t i = 0; i < p->count; i++)
        r[i] = (struct mem_crc_range){(uint64_t)(uintptr_t)(p->dev +
                                                            i * p->stride),
                                      p->size, (uint32_t)i,
                                      crc32c_shift_factor(0), 0, 0};
    rc = mem_crc_open(p->device, r, g0, 1, (uint32_t)p->count, 30000,
                      &p->crc) != FX_OK;
    free(r);
    return rc;
}

/* As the engine's source packs a checked bucket (engine/check.c): the
 * bucket summed ENG_FILL_CHUNK bytes at a time, right after they are
 * copied. */
static double run_pack_crc(struct pack_setup *p)
{
    struct pack_runs *o = &p->plain;
    double t0 = clock_now();

    for (uint32_t k = 0; k < o->nbuckets; k++) {
        char *slot = p->pool + (k % DEPTH) * p->bucket;
        const struct mem_run *last = &o->runs[o->first[k + 1] - 1];
        uint64_t summed = 0;
        uint32_t crc = 0;

        for (size_t i = o->first[k]; i < o->first[k + 1]; i++) {
            const struct mem_run *r = &o->runs[i];

            for (uint64_t at = 0, n; at < r->len; at += n) {
                n = r->len - at;
                n = n < ENG_FILL_CHUNK ? n : ENG_FILL_CHUNK;
                memcpy(slot + r->dst + at,
                       (const char *)(uintptr_t)r->src + at, n);
                if (r->dst + at + n - summed >= ENG_FILL_CHUNK) {
                    crc = crc32c(crc, slot + summed, r->dst + at + n - summed);
                    summed = r->dst + at + n;
                }
            }
        }
        crc_sink ^= crc32c(crc, slot + summed,
                           last->dst + last->len - summed);
    }
    return clock_now() - t0;
}

static double run_pipelined(struct pack_setup *p)
{
    struct pack_runs *o = &p->plain;
    double t0 = clock_now();

    if (p->device < 0)
        return run_engine(p, o); /* the host packer has no pipeline */
    for (uint32_t k = 0; k < o->nbuckets; k++) {
        int slot = (int)(k % DEPTH);

        if (mem_gather_wait(o->g, slot) ||
            mem_gather_start(o->g, k, slot, p->pool + slot * p->bucket))
            return -1;
    }
    for (int s = 0; s < DEPTH; s++)
        if (mem_gather_wait(o->g, s))
            return -1;
    return clock_now() - t0;
}

static double run_copy(struct pack_setup *p)
{
    double t0 = clock_now();

    if (p->device < 0)
        memcpy(p->pinned_all, p->dev_flat, p->total);
    else if (mem_copy(p->device, p->pinned_all, p->dev_flat, p->total))
        return -1;
    return clock_now() - t0;
}

/* Host memory for --device host, device memory else, of n bytes set to
 * 0x5A (f32s of about 3.8e15: every conversion rounds). */
static int alloc_set(struct pack_setup *p, size_t n, char **out, int pinned)
{
    if (p->device < 0) {
        *out = malloc(n ? n : 1);
        if (*out == NULL)
            return -1;
        memset(*out, 0x5A, n);
        return 0;
    }
    if (pinned)
        return mem_pinned_alloc(p->device, n, (void **)out) != FX_OK;
    return mem_dev_alloc(p->device, n, (void **)out) != FX_OK ||
           mem_memset(p->device, *out, 0x5A, n) != FX_OK;
}

/* FP8: scales of 1/64 (0x3c800000), the bytes 0x5A read as bf16 being
 * about 1.5e16: everything saturates, which costs the packer what any
 * other value does. */
static int alloc_scales(struct pack_setup *p)
{
    size_t n = p->total / 2 / FP8_BLOCK + p->count + 1;
    float *host = malloc(n * sizeof(float));
    int rc;

    if (host == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        host[i] = 1.0f / 64.0f;
    if (p->device < 0) {
        p->scales = host;
        return 0;
    }
    rc = mem_dev_alloc(p->device, n * sizeof(float), (void **)&p->scales) !=
             FX_OK ||
         mem_copy(p->device, p->scales, host, n * sizeof(float)) != FX_OK;
    free(host);
    return rc;
}

static void free_runs(struct pack_runs *o)
{
    if (o->g != NULL) /* none on the host: no driver to load */
        mem_gather_close(o->g);
    free(o->runs);
    free(o->first);
}

int pack_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'M'},
        {"device", required_argument, NULL, 'd'},
        {"reps", required_argument, NULL, 'r'},
        {"convert", required_argument, NULL, 'c'},
        {"json", required_argument, NULL, 'j'},
        {NULL, 0, NULL, 0},
    };
    const struct cli cl = {opts, "", pack_usage, NULL};
    struct pack_setup p = {0};
    const char *model = NULL, *json = NULL;
    double best[6] = {1e30, 1e30, 1e30, 1e30, 1e30, 1e30};
    int reps = 5, c, rc = 1;
    char spec[128];
    char *colon;

    while ((c = cli_next(&cl, argc, argv)) != -1) {
        switch (c) {
        case 'M': model = optarg; break;
        case 'd':
            if (bench_parse_device(optarg, &p.device))
                return 2;
            break;
        case 'c':
            if (strcmp(optarg, "f32-bf16") == 0) {
                p.conv = CONV_F32_BF16;
            } else if (strcmp(optarg, "bf16-fp8") == 0) {
                p.conv = CONV_BF16_E4M3;
            } else {
                fprintf(stderr, "fabxfer-bench pack: --convert \"%s\": use "
                        "f32-bf16 or bf16-fp8\n", optarg);
                return 2;
            }
            break;
        case 'r': reps = atoi(optarg) > 0 ? atoi(optarg) : 1; break;
        case 'j': json = optarg; break;
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
    if (p.conv && p.size % 4 != 0) {
        fprintf(stderr, "fabxfer-bench pack: --convert needs a SIZE of "
                "whole elements (a multiple of 4)\n");
        return 2;
    }
    if (cfg_size(CFG_BUCKET_SIZE, &p.bucket) != FX_OK ||
        (p.device >= 0 && mem_cuda_init() != FX_OK)) {
        fprintf(stderr, "fabxfer-bench pack: %s\n", fx_last_error(NULL));
        return 1;
    }
    if (p.bucket == 0) /* the library's size for buckets copied out */
        p.bucket = ENG_BUCKET_HOST;
    /* Tensors apart (a 256-byte gap), as separate allocations would be. */
    p.stride = (p.size + 255) / 256 * 256 + 256;
    p.total = p.count * p.size;
    if (alloc_set(&p, p.count * p.stride, &p.dev, 0) ||
        alloc_set(&p, p.total, &p.dev_flat, 0) ||
        alloc_set(&p, p.total, &p.pinned_all, 1) ||
        alloc_set(&p, p.bucket * DEPTH, &p.pool, 1) ||
        (conv_scaled(p.conv) && alloc_scales(&p)) ||
        plan_buckets(&p, 0, &p.plain) ||
        (p.conv && plan_buckets(&p, p.conv, &p.conv_runs)) ||
        (p.device >= 0 &&
         (open_crc(&p) ||
          mem_gather_open(p.device, DEPTH, p.bucket, p.plain.runs,
                          p.plain.first, p.plain.nbuckets, 0, 30000,
                          &p.plain.g) ||
          (p.conv && mem_gather_open(p.device, DEPTH, p.bucket,
                                     p.conv_runs.runs, p.conv_runs.first,
                                     p.conv_runs.nbuckets, 0, 30000,
                                     &p.conv_runs.g))))) {
        fprintf(stderr, "fabxfer-bench pack: %s\n", fx_last_error(NULL));
        goto out;
    }
    for (int r = 0; r < reps + 1; r++) {
        double t[6] = {run_engine(&p, &p.plain), run_pipelined(&p),
                       run_copy(&p),
                       p.conv ? run_engine(&p, &p.conv_runs) : 0,
                       run_checksum(&p),
                       p.device < 0 ? run_pack_crc(&p) : 0};

        for (int k = 0; k < 6; k++) {
            if (t[k] < 0) {
                fprintf(stderr, "fabxfer-bench pack: %s\n",
                        fx_last_error(NULL));
                goto out;
            }
            if (r > 0 && t[k] < best[k]) /* round 0 warms up */
                best[k] = t[k];
        }
    }
    printf("# fabxfer %s pack: %zu %s tensors of %zu bytes into %u %s "
           "buckets of %zu, %s %d, best of %d\n", fx_version_string(),
           p.count, p.device < 0 ? "host" : "GPU", p.size, p.plain.nbuckets,
           p.device < 0 ? "host" : "pinned", p.bucket,
           p.device < 0 ? "host packer" : "CUDA device", p.device, reps);
    printf("%-10s %12s %10s %8s %9s\n", "mode", "bytes read", "seconds",
           "GB/s", "vs copy");
    for (int k = 0; k < 6; k++) {
        static const char *const names[] = {"engine", "pipelined", "copy",
                                            "convert", "checksum",
                                            "pack+crc"};

        if ((k == 3 && !p.conv) || (k == 5 && p.device >= 0))
            continue;
        printf("%-10s %12zu %10.6f %8.2f %9.3f\n", names[k], p.total,
               best[k], (double)p.total / best[k] / 1e9, best[2] / best[k]);
    }
    if (p.device < 0)
        printf("crc32c (%s): checksum_vs_copy %.3f, pack+crc_vs_engine "
               "%.3f\n", crc32c_impl(), best[2] / best[4],
               best[0] / best[5]);
    else
        printf("crc32c (GPU kernel over the tensors where they lie): "
               "checksum_vs_copy %.3f\n", best[2] / best[4]);
    if (p.conv)
        printf("conv_vs_pack %.3f (%s while packing, against the plain "
               "pack of the same source bytes)\n", best[0] / best[3],
               p.conv == CONV_F32_BF16 ? "f32 -> bf16" : "bf16 -> FP8");
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
                "\"convert\": \"%s\", \"convert_s\": %.6f, "
                "\"conv_vs_pack\": %.4f, \"checksum_s\": %.6f, "
                "\"pack_crc_s\": %.6f, "
                "\"statistic\": \"best of %d\"}\n", p.count, p.size, p.total,
                p.bucket, p.device, best[0], best[1], best[2],
                best[2] / best[0], best[2] / best[1],
                p.conv == CONV_F32_BF16 ? "f32-bf16"
                : p.conv ? "bf16-fp8" : "none", p.conv ? best[3] : 0.0,
                p.conv ? best[0] / best[3] : 0.0,
                best[4], p.device < 0 ? best[5] : 0.0,
                reps);
        fclose(f);
    }
    rc = 0;
out:
    free_runs(&p.plain);
    free_runs(&p.conv_runs);
    if (p.device < 0) {
        free(p.dev);
        free(p.dev_flat);
        free(p.pinned_all);
        free(p.pool);
        free(p.scales);
    } else {
        mem_crc_close(p.crc);
        mem_dev_free(p.scales);
        mem_dev_free(p.dev);
        mem_dev_free(p.dev_flat);
        mem_pinned_free(p.pinned_all);
        mem_pinned_free(p.pool);
    }
    return rc;
}
