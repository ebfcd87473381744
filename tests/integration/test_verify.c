/*
 * FABXFER_VERIFY end to end, over tcp;ofi_rxm and shm, with faults put in
 * where the checksums must catch them (fx_test_fault below; util/fault.h).
 * One source, one target; the model has a tensor written directly (4 MiB),
 * small ones packed into buckets and one converted from f32 to bf16 in
 * the bucket.
 *
 * catch (full, live target): version 1 clean; 2 a byte of a packed bucket
 *   flipped after its CRC; 3 a byte of the conversion's output; 4 a byte
 *   of what landed at the target, before its check; 5 clean. Each fault
 *   fails the target's wait with FX_ERR_VERIFY naming the tensor, the
 *   source and the version; the clean ones pass with every byte compared;
 *   the source's report counts the three versions its target rejected.
 * shadow (full, shadow target): version 2's landed bytes flipped: the wait
 *   and the apply fail, the tensors still hold version 1 exactly, and
 *   version 3 applies.
 * sample (every 4 versions): the same segment damaged on landing in every
 *   version is caught in the source's first version, which checks every
 *   unit, and then in exactly the versions where it is due; each version
 *   checks the units due in it.
 * differ: ranks with different FABXFER_VERIFY fail set-up, naming both.
 * Bad values of FABXFER_VERIFY and fx_ctx_opts_t.verify are refused.
 *
 * Built a second time with FX_TEST_CUDA as test_verify_cuda: every tensor
 * in GPU memory, on the staged path (the GPU gather kernel packs and
 * converts into pinned buckets, targets land in pinned slabs), the same
 * scenarios and faults; it skips where no GPU is seen. First, the GPU's
 * CRCs (mem_crc) against the host's, range by range. Where shm takes CUDA
 * memory (FX_TEST_DIRECT=1), the direct path too: the GPU sums what is
 * written from device memory (tensors, buckets kept on the GPU) and what
 * lands in it; the faults flip device bytes. And landed (checks off): a
 * stream of the application's own reads each version once the wait
 * returns, live, or once an apply queued on that stream ran, shadow.
 */
#define _GNU_SOURCE
#include <stdatomic.h>

#include "itest.h"
#ifdef FX_TEST_CUDA
#include "mem/mem.h"
#endif

#define W_ROWS 1024
#define W_COLS 1024
#define NSMALL 8
#define SMALL 64
#define CONV 256
#define NTENSORS (NSMALL + 2)

/* The faults: fx_test_fault flips one byte of the next call of the kind
 * armed, then disarms. */
enum { PACKED = 1, CONVERTED = 2, LANDED = 3 };
static _Atomic int armed;

__attribute__((visibility("default"))) void
fx_test_fault(int where, void *bytes, size_t len);
void fx_test_fault(int where, void *bytes, size_t len)
{
    unsigned char *at = (unsigned char *)bytes + len / 2;
    int want = where;

    if (len == 0 || !atomic_compare_exchange_strong(&armed, &want, 0))
        return;
#ifdef FX_TEST_CUDA
    /* a device bucket, or a direct target's landed bytes */
    struct mem_info mi;
    unsigned char b;

    if (mem_query(at, &mi) == FX_OK && mi.kind == FX_MEM_CUDA) {
        unsigned char back;

        ITEST_OK(NULL, mem_copy(mi.device, &b, at, 1));
        b ^= 0x40;
        ITEST_OK(NULL, mem_copy(mi.device, at, &b, 1));
        /* A copy from pageable memory may return before its DMA lands
         * (cuMemcpy), and a peer's copy out of this memory is not ordered
         * after it: read it back, which waits for it. */
        ITEST_OK(NULL, mem_copy(mi.device, &back, at, 1));
        if (back != b)
            ITEST_FAIL("the flipped byte reads back 0x%02x, not 0x%02x",
                       back, b);
        return;
    }
#endif
    *at ^= 0x40;
}

struct job {
    fx_ctx_t *ctx;
    fx_manifest_t *m;
    fx_session_t *s;
    fx_region_t *region;
    char *mem;           /* the tensors (host), or their host image */
    void *dev;           /* FX_TEST_CUDA: the tensors, in GPU memory */
    size_t size;
    size_t off[NTENSORS], len[NTENSORS];
    int source;
};

static void tensor_name(int t, char *buf, size_t len)
{
    if (t == 0)
        snprintf(buf, len, "w");
    else if (t <= NSMALL)
        snprintf(buf, len, "s%d", t - 1);
    else
        snprintf(buf, len, "c");
}

static int64_t elems(int t)
{
    return t == 0 ? (int64_t)W_ROWS * W_COLS : t <= NSMALL ? SMALL : CONV;
}

/* Element i of tensor t at version v: integers below 256 where bf16 must
 * hold them exactly. */
static float value(uint64_t v, int t, int64_t i)
{
    if (t == NSMALL + 1)
        return (float)((v * 7 + (uint64_t)i) % 200);
    return (float)(v * 1000003u + (uint64_t)t * 7919u + (uint64_t)i);
}

static void job_open(struct job *j, int shadow)
{
    char name[8];
    size_t at = 0;

    memset(j, 0, sizeof(*j));
    ITEST_OK(NULL, fx_ctx_create(NULL, &j->ctx));
    j->source = fx_ctx_rank(j->ctx) == 0;
    ITEST_OK(NULL, fx_manifest_create(&j->m));
    for (int t = 0; t < NTENSORS; t++) {
        int64_t shape[2] = {t == 0 ? W_ROWS : elems(t), W_COLS};
        size_t esize = t == NSMALL + 1 && !j->source ? 2 : 4;

        tensor_name(t, name, sizeof(name));
        ITEST_OK(NULL, fx_manifest_add_tensor(j->m, name, "f32",
                                              t == 0 ? 2 : 1, shape));
        if (t == NSMALL + 1)
            ITEST_OK(NULL, fx_manifest_set_target_dtype(j->m, name, "bf16"));
        ITEST_OK(NULL, fx_manifest_add_piece(j->m, 0, FX_SOURCE, name, -1,
                                             0, 0));
        ITEST_OK(NULL, fx_manifest_add_piece(j->m, 1, FX_TARGET, name, -1,
                                             0, 0));
        j->off[t] = at;
        j->len[t] = (size_t)elems(t) * esize;
        /* apart, so that no two tensors' runs merge into one write */
        at += ((j->len[t] + 63) & ~(size_t)63) + 64;
    }
    j->mem = calloc(1, at);
    j->size = at;
#ifdef FX_TEST_CUDA
    ITEST_OK(NULL, mem_dev_alloc(0, at, &j->dev));
    ITEST_OK(NULL, mem_copy(0, j->dev, j->mem, at));
#endif
    ITEST_OK(j->ctx, fx_region_register_mem(
                         j->ctx, j->dev ? j->dev : j->mem, at,
                         j->source ? FX_REGION_SOURCE
                                   : FX_REGION_TARGET |
                                         (shadow ? FX_REGION_SHADOW : 0),
                         j->dev ? FX_MEM_CUDA : FX_MEM_HOST,
                         j->dev ? 0 : -1, &j->region));
    ITEST_OK(j->ctx, fx_session_create(j->ctx, j->m, &j->s));
    for (int t = 0; t < NTENSORS; t++) {
        tensor_name(t, name, sizeof(name));
        ITEST_OK(j->ctx, fx_session_bind(j->s, j->source ? FX_SOURCE
                                                         : FX_TARGET,
                                         name, j->region, j->off[t]));
    }
}

static void job_close(struct job *j)
{
    itest_close_mem(j->s, j->m, j->ctx, j->mem, j->dev);
}

static void fill(struct job *j, uint64_t v)
{
    for (int t = 0; t < NTENSORS; t++) {
        float *f = (float *)(void *)(j->mem + j->off[t]);

        for (int64_t i = 0; i < elems(t); i++)
            f[i] = value(v, t, i);
    }
#ifdef FX_TEST_CUDA
    ITEST_OK(NULL, mem_copy(0, j->dev, j->mem, j->size));
#endif
}

/* The target's tensors hold exactly version v, or fail naming the first
 * element that does not. */
static void expect_version(const struct job *j, uint64_t v)
{
#ifdef FX_TEST_CUDA
    ITEST_OK(NULL, mem_copy(0, j->mem, j->dev, j->size));
#endif
    for (int t = 0; t < NTENSORS; t++)
        for (int64_t i = 0; i < elems(t); i++) {
            float want = value(v, t, i), got;

            if (t == NSMALL + 1) {
                uint16_t b;
                uint32_t bits;

                memcpy(&b, j->mem + j->off[t] + (size_t)i * 2, 2);
                bits = (uint32_t)b << 16;
                memcpy(&got, &bits, 4);
            } else {
                memcpy(&got, j->mem + j->off[t] + (size_t)i * 4, 4);
            }
            if (got != want)
                ITEST_FAIL("version %llu: tensor %d element %lld is %g, "
                           "not %g", (unsigned long long)v, t, (long long)i,
                           got, want);
        }
}

static void push(struct job *j, uint64_t v, int fault)
{
    fill(j, v);
    atomic_store(&armed, fault);
    ITEST_OK(j->ctx, fx_session_push(j->s, v));
    atomic_store(&armed, 0);
}

/* The report of the version the target just checked (units ANY: a
 * failed check stops at the first unit that differs). */
#define ANY UINT64_MAX
static void expect_checked(const struct job *j, uint64_t units,
                           uint64_t failed)
{
    const fx_report_t *r = fx_session_report(j->s);

    if ((units != ANY && r->verify_units != units) ||
        r->verify_failed != failed)
        ITEST_FAIL("version %llu: the report says %llu units checked, %llu "
                   "sources failed; want %llu and %llu",
                   (unsigned long long)r->version,
                   (unsigned long long)r->verify_units,
                   (unsigned long long)r->verify_failed,
                   (unsigned long long)units, (unsigned long long)failed);
    /* what the checks took, counted where they ran after the version */
    if (r->verify_units > 0 && !(r->verify_s > 0))
        ITEST_FAIL("version %llu: %llu units checked in %g s (verify_s)",
                   (unsigned long long)r->version,
                   (unsigned long long)r->verify_units, r->verify_s);
}

static int rank_catch(void)
{
    static const int fault[6] = {0, 0, PACKED, CONVERTED, 0, 0};
    const char *tensor[6] = {"", "", "tensor \"s", "tensor \"c\"",
                             "tensor \"w\"", ""};
    struct job j;
    char want[64];

#ifdef FX_TEST_CUDA
    /* staged, "w" goes in buckets too, and first */
    if (strcmp(getenv("FABXFER_GPU_PATH"), "staged") == 0)
        tensor[2] = "tensor \"w\"";
#endif
    /* the period means nothing to full: ranks may differ in it */
    if (itest_rank() == 1)
        setenv("FABXFER_VERIFY_EVERY", "8", 1);
    job_open(&j, 0);
    ITEST_OK(j.ctx, fx_session_setup(j.s));
    for (uint64_t v = 1; v <= 5; v++) {
        fx_status_t st;

        if (j.source) {
            push(&j, v, fault[v]);
            continue;
        }
        atomic_store(&armed, v == 4 ? LANDED : 0);
        st = fx_session_wait(j.s, v);
        if (v == 1 || v == 5) {
            ITEST_OK(j.ctx, st);
            expect_version(&j, v);
            expect_checked(&j, NTENSORS, 0);
            continue;
        }
        snprintf(want, sizeof(want), "version %llu from rank 0",
                 (unsigned long long)v);
        ITEST_EXPECT(j.ctx, st, FX_ERR_VERIFY, want, tensor[v],
                     "do not match the source's checksum");
        expect_checked(&j, ANY, 1);
    }
    if (j.source && fx_session_report(j.s)->verify_failed != 3)
        ITEST_FAIL("the source heard of %llu rejected versions, not 3",
                   (unsigned long long)fx_session_report(j.s)->verify_failed);
    job_close(&j);
    return 0;
}

static int rank_shadow(void)
{
    struct job j;

    job_open(&j, 1);
    ITEST_OK(j.ctx, fx_session_setup(j.s));
    for (uint64_t v = 1; v <= 3; v++) {
        if (j.source) {
            push(&j, v, 0);
            continue;
        }
        atomic_store(&armed, v == 2 ? LANDED : 0);
        if (v != 2) {
            ITEST_OK(j.ctx, fx_session_wait(j.s, v));
            ITEST_OK(j.ctx, fx_session_apply(j.s, v, NULL));
            expect_version(&j, v);
            continue;
        }
        ITEST_EXPECT(j.ctx, fx_session_wait(j.s, v), FX_ERR_VERIFY,
                     "version 2 from rank 0", "tensor \"w\"",
                     "not applied: the tensors still hold version 1");
        ITEST_EXPECT(j.ctx, fx_session_apply(j.s, v, NULL), FX_ERR_VERIFY,
                     "version 2 failed its checksums",
                     "still hold version 1");
        expect_version(&j, 1);
    }
    job_close(&j);
    return 0;
}

/* FABXFER_VERIFY_EVERY=4: the source's first version checks every unit,
 * then unit u is due in the versions v with (u + v) % 4 == 0; unit 0
 * ("w") is damaged on landing every time. */
static int rank_sample(void)
{
    struct job j;
    char want[64];

    job_open(&j, 0);
    ITEST_OK(j.ctx, fx_session_setup(j.s));
    for (uint64_t v = 1; v <= 6; v++) {
        uint64_t due = 0;
        fx_status_t st;

        if (j.source) {
            push(&j, v, 0);
            continue;
        }
        for (uint64_t u = 0; u < NTENSORS; u++)
            due += (u + v) % 4 == 0;
        atomic_store(&armed, LANDED);
        st = fx_session_wait(j.s, v);
        if (v != 1 && v % 4 != 0) {
            ITEST_OK(j.ctx, st);
            expect_checked(&j, due, 0);
            continue;
        }
        snprintf(want, sizeof(want), "version %llu from rank 0",
                 (unsigned long long)v);
        ITEST_EXPECT(j.ctx, st, FX_ERR_VERIFY, want, "tensor \"w\"");
        expect_checked(&j, ANY, 1);
    }
    job_close(&j);
    return 0;
}

static int rank_differ(void)
{
    struct job j;

    if (itest_rank() == 1)
        setenv("FABXFER_VERIFY", "off", 1);
    job_open(&j, 0);
    ITEST_EXPECT(j.ctx, fx_session_setup(j.s), FX_ERR_INVALID,
                 "checks versions with FABXFER_VERIFY=",
                 "every rank must agree");
    job_close(&j);
    return 0;
}

/* FX_TEST_CUDA over a libfabric whose shm takes GPU memory (the direct
 * path): under auto the GPU checks a sample, every 4 versions here: every
 * unit in the source's first version, units 2 and 6 in version 2. */
static int rank_direct_auto(void)
{
    struct job j;

    job_open(&j, 0);
    ITEST_OK(j.ctx, fx_session_setup(j.s));
    for (uint64_t v = 1; v <= 2; v++) {
        if (j.source) {
            push(&j, v, 0);
            continue;
        }
        ITEST_OK(j.ctx, fx_session_wait(j.s, v));
        expect_version(&j, v);
        expect_checked(&j, v == 1 ? NTENSORS : 2, 0);
    }
    job_close(&j);
    return 0;
}

#ifdef FX_TEST_CUDA
/* landed (direct path, checks off): what a stream of the application's
 * own sees once the wait returns, or after an apply queued on it. shm's
 * CUDA IPC lands each write with a copy between devices that returns
 * before it is done, on the target's legacy default stream; a stream
 * that does not wait for that one read the end of the 256 MiB tensor (one
 * write, FABXFER_CHUNK_SIZE=1G) before it was there. Versions fill every
 * byte with their number. The source fills the next only after the
 * barrier that follows the target's read: the same copy reads the
 * source's tensor until it is done, after the push returned
 * (providers.md, GPU path per provider). */
#define LANDED_ROWS 8192
static int rank_landed(void)
{
    const int64_t shape[2] = {LANDED_ROWS, 8192};
    const size_t size = (size_t)LANDED_ROWS * 8192 * 4, tail = 64 << 10;
    int source, shadow = getenv("FX_TEST_RECEIVE") != NULL;
    unsigned char *back = malloc(tail);
    fx_region_t *region;
    fx_manifest_t *m;
    fx_session_t *s;
    void *dev, *side;
    fx_ctx_t *ctx;

    ITEST_OK(NULL, fx_ctx_create(NULL, &ctx));
    source = fx_ctx_rank(ctx) == 0;
    ITEST_OK(NULL, fx_manifest_create(&m));
    ITEST_OK(NULL, fx_manifest_add_tensor(m, "big", "f32", 2, shape));
    ITEST_OK(NULL, fx_manifest_add_piece(m, 0, FX_SOURCE, "big", -1, 0, 0));
    ITEST_OK(NULL, fx_manifest_add_piece(m, 1, FX_TARGET, "big", -1, 0, 0));
    ITEST_OK(NULL, mem_dev_alloc(0, size, &dev));
    ITEST_OK(NULL, mem_memset(0, dev, 0, size));
    ITEST_OK(NULL, mem_stream_open(0, &side));
    ITEST_OK(ctx, fx_region_register_mem(
                      ctx, dev, size,
                      source ? FX_REGION_SOURCE
                             : FX_REGION_TARGET |
                                   (shadow ? FX_REGION_SHADOW : 0),
                      FX_MEM_CUDA, 0, &region));
    ITEST_OK(ctx, fx_session_create(ctx, m, &s));
    ITEST_OK(ctx, fx_session_bind(s, source ? FX_SOURCE : FX_TARGET, "big",
                                  region, 0));
    ITEST_OK(ctx, fx_session_setup(s));
    for (uint64_t v = 1; v <= 8; v++) {
        if (source) {
            /* on the legacy stream, which the push reads after */
            ITEST_OK(NULL, mem_memset(0, dev, (int)v, size));
            ITEST_OK(ctx, fx_session_push(s, v));
            ITEST_OK(ctx, fx_barrier(ctx));
            continue;
        }
        ITEST_OK(ctx, fx_session_wait(s, v));
        if (shadow)
            ITEST_OK(ctx, fx_session_apply(s, v, side));
        /* into pageable memory: returns once the copy is done */
        ITEST_OK(NULL, mem_copy_async(0, back, (char *)dev + size - tail,
                                      tail, side));
        for (size_t i = 0; i < tail; i++)
            if (back[i] != (unsigned char)v)
                ITEST_FAIL("version %llu%s: byte %zu of the last %zu of "
                           "the tensor is %u to a stream of the "
                           "application's own, not %u",
                           (unsigned long long)v, shadow ? ", applied" : "",
                           size - tail + i, tail, back[i], (unsigned)v);
        ITEST_OK(ctx, fx_barrier(ctx));
    }
    mem_stream_close(0, side);
    itest_close_mem(s, m, ctx, back, dev);
    return 0;
}
#endif

static void refusals(void)
{
    fx_ctx_opts_t o;
    fx_ctx_t *ctx = NULL;

    setenv("FABXFER_VERIFY", "always", 1);
    itest_solo_opts(&o, "tcp;ofi_rxm", 0, 1);
    ITEST_EXPECT(NULL, fx_ctx_create(&o, &ctx), FX_ERR_INVALID,
                 "FABXFER_VERIFY=\"always\"", "full, sample or off");
    unsetenv("FABXFER_VERIFY");
    o.verify = "most";
    ITEST_EXPECT(NULL, fx_ctx_create(&o, &ctx), FX_ERR_INVALID,
                 "fx_ctx_opts_t.verify=\"most\"");
}

#ifdef FX_TEST_CUDA
#include "util/crc32c.h"

/* mem_crc against crc32c: ranges of every shape (short, a chunk and a
 * byte either side, long, unaligned), in two groups, some sharing a word
 * (pieces of one unit, each shifted by its factor), sampled and not. */
static void gpu_crc(void)
{
    static const uint64_t off[] = {0, 1, 7, 4096, 5000, 12345, 70001,
                                   300000, 1 << 20, 3 << 20};
    static const uint64_t len[] = {1, 8, 4095, 4096, 4097, 100, 65536, 99999,
                                   1 << 20, 777777};
    enum { N = 10, SIZE = 4 << 20, WORDS = 6 };
    struct mem_crc_range r[N];
    size_t g0[3] = {0, 4, N};
    unsigned char *h = malloc(SIZE);
    uint32_t want[WORDS];
    const uint32_t *got;
    struct mem_crc *c;
    void *d;

    for (size_t i = 0; i < SIZE; i++)
        h[i] = (unsigned char)(i * 2654435761u >> 13);
    ITEST_OK(NULL, mem_dev_alloc(0, SIZE, &d));
    ITEST_OK(NULL, mem_copy(0, d, h, SIZE));
    for (int i = 0; i < N; i++)
        r[i] = (struct mem_crc_range){(uint64_t)(uintptr_t)d + off[i],
                                      len[i], (uint32_t)(i % WORDS),
                                      crc32c_shift_factor(i * 1000u),
                                      (uint32_t)i, 0};
    ITEST_OK(NULL, mem_crc_open(0, r, g0, 2, WORDS, 10000, &c));
    for (uint32_t every = 0; every <= 3; every += 3) {
        memset(want, 0, sizeof(want));
        for (int i = 0; i < N; i++)
            if (every == 0 || (i + 5) % every == 0)
                want[i % WORDS] ^= crc32c_mul(r[i].factor,
                                              crc32c(0, h + off[i], len[i]));
        ITEST_OK(NULL, mem_crc_begin(c, 5, every));
        ITEST_OK(NULL, mem_crc_run(c, 1));
        ITEST_OK(NULL, mem_crc_run(c, 0));
        ITEST_OK(NULL, mem_crc_wait(c, &got));
        for (int w = 0; w < WORDS; w++)
            if (got[w] != want[w])
                ITEST_FAIL("GPU CRC word %d (every %u): 0x%08x, the host "
                           "says 0x%08x", w, every, got[w], want[w]);
    }
    mem_crc_close(c);
    mem_dev_free(d);
    free(h);
    printf("PASS GPU checksums match the host's\n");
}
#endif

static int launch(const char *scenario, const char *prov, const char *mode)
{
    setenv("FABXFER_VERIFY", mode, 1);
    return itest_scenario(2, scenario, prov);
}

int main(void)
{
    static const char *const provs[] = {"tcp;ofi_rxm", "shm"};
    static const struct itest_part parts[] = {
        {"shadow", rank_shadow}, {"sample", rank_sample},
        {"differ", rank_differ}, {"direct-auto", rank_direct_auto},
#ifdef FX_TEST_CUDA
        {"landed", rank_landed},
#endif
        {NULL, rank_catch},
    };
    int failed = 0, total = 0;

    if (itest_rank() >= 0)
        return itest_play(parts, sizeof(parts) / sizeof(parts[0]));
#ifdef FX_TEST_CUDA
    if (mem_cuda_device_count() <= 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    setenv("FABXFER_GPU_PATH", "staged", 1);
    gpu_crc();
#endif
    refusals();
    /* small buckets: the small tensors and the conversion share some */
    setenv("FABXFER_BUCKET_SIZE", "4K", 1);
    setenv("FABXFER_VERIFY_EVERY", "4", 1);
    /* FX_TEST_QUICK (tests/tsan.sh): the runs with threads on both
     * sides only (the target's checker, the source's packer summing) */
    for (int p = 0; getenv("FX_TEST_QUICK") == NULL && p < 2;
         p++, total += 3) {
        failed += launch("catch", provs[p], "full");
        failed += launch("shadow", provs[p], "full");
        failed += launch("sample", provs[p], "sample");
    }
    /* The target's checker threads, which take the runs of segments that
     * check points announce while the version arrives (writedata pairs:
     * both providers here), one per 4 threads: 2 here, taking runs of one
     * source at once (test_bench.sh and test_layouts run one). */
    setenv("FABXFER_VERIFY_THREADS", "8", 1);
    for (int p = 0; p < 2; p++, total += 2) {
        failed += launch("catch", provs[p], "full");
        failed += launch("sample", provs[p], "sample");
    }
    unsetenv("FABXFER_VERIFY_THREADS");
    if (getenv("FX_TEST_QUICK") == NULL) {
        failed += launch("differ", "tcp;ofi_rxm", "full");
        total++;
    }
#ifdef FX_TEST_CUDA
    /* where shm takes CUDA memory (FX_TEST_DIRECT=1 says it does) */
    if (getenv("FX_TEST_DIRECT") != NULL) {
        setenv("FABXFER_GPU_PATH", "direct", 1);
        failed += launch("catch", "shm", "full");
        failed += launch("shadow", "shm", "full");
        failed += launch("sample", "shm", "sample");
        failed += launch("direct-auto", "shm", "auto");
        setenv("FABXFER_CHUNK_SIZE", "1G", 1);
        failed += launch("landed", "shm", "off");
        setenv("FX_TEST_RECEIVE", "shadow", 1);
        failed += launch("landed", "shm", "off");
        unsetenv("FX_TEST_RECEIVE");
        unsetenv("FABXFER_CHUNK_SIZE");
        total += 6;
    }
#endif
    printf("%d passed, %d failed\n", total - failed, failed);
    return failed ? 1 : 0;
}
