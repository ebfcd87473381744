/*
 * A source's program, built from a real plan with stand-in registrations
 * (nothing is posted): which runs are packed, written directly, or
 * gathered on the GPU, and the marks that let a staged GPU target copy
 * bucket by bucket. Every byte written to a staged region must be under
 * the first mark after its step.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "plan/plan.h"
#include "util/cfg.h"
#include "util/error.h"
#include "unit.h"

#define SMALL 200   /* tensors of 4 KiB */
#define LARGE 8     /* tensors of 256 KiB */

struct fixture {
    struct plan_manifest *m;
    struct plan *plan;
    struct eng_src_bind *src;
    struct eng_dst_bind *dst;
    struct fab_mr mr;
    struct fab_rkey rk[8];     /* one per target region */
    struct eng_program prog;
    int gather;                /* with tcp's limits: 4 ranges a side,
                                * 1 MiB a write */
    const uint8_t *direct_to;  /* per rank: its pair's path takes device
                                * memory; NULL: every rank's */
    uint64_t bucket_size;      /* 0: 64 KiB */
    uint64_t dev_bucket_size;  /* where buckets stay on the GPU; 0: none */
    uint64_t dst_gap;          /* bytes between the target's pieces */
};
/* tcp's and shm's limits: 4 ranges a side, 1 MiB a write. */


static uint64_t tensor_bytes(int i)
{
    return i % 25 == 24 && i / 25 < LARGE ? 256u << 10 : 4u << 10;
}

/* Rank 0 holds every tensor (a gap of 64 bytes after each, as an allocator
 * leaves), rank 1 needs every tensor, back to back in one region. */
static void setup_regions(struct fixture *f, int device, int direct,
                          int staged, uint32_t nregions)
{
    uint64_t soff = 0, doff = 0;
    char name[32];

    ck_assert_int_eq(manifest_new(&f->m), FX_OK);
    for (int i = 0; i < SMALL + LARGE; i++) {
        int64_t shape[1] = {(int64_t)tensor_bytes(i)};

        snprintf(name, sizeof(name), "t%d", i);
        ck_assert_int_eq(manifest_add_tensor(f->m, name, "u8", 1, shape),
                         FX_OK);
        ck_assert_int_eq(manifest_add_piece(f->m, 0, FX_SOURCE, name, -1,
                                            0, 0), FX_OK);
        ck_assert_int_eq(manifest_add_piece(f->m, 1, FX_TARGET, name, -1,
                                            0, 0), FX_OK);
    }
    ck_assert_int_eq(plan_build(f->m, 2, 0, &f->plan), FX_OK);
    f->src = calloc(f->m->npieces, sizeof(*f->src));
    f->dst = calloc(f->m->npieces, sizeof(*f->dst));
    ck_assert_ptr_nonnull(f->src);
    ck_assert_ptr_nonnull(f->dst);
    f->mr.base = (void *)(uintptr_t)0x100000; /* never dereferenced */
    f->mr.len = 64u << 20;
    for (int r = 0; r < 8; r++)
        f->rk[r].len = 64u << 20;
    for (uint32_t p = 0; p < f->m->npieces; p++) {
        const struct plan_piece *pc = &f->m->pieces[p];

        if (pc->role == FX_SOURCE) {
            f->src[p] = (struct eng_src_bind){&f->mr, soff, device, direct};
            soff += pc->bytes + 64;
        } else {
            uint32_t region = pc->tensor % nregions;

            f->dst[p] = (struct eng_dst_bind){&f->rk[region], doff, region,
                                              staged};
            doff += pc->bytes + f->dst_gap;
        }
    }
}

static void setup(struct fixture *f, int device, int direct, int staged)
{
    setup_regions(f, device, direct, staged, 1);
}

/* every pair counts writedata */
static const uint8_t every_pair[8] = {1, 1, 1, 1, 1, 1, 1, 1};

static fx_status_t build(struct fixture *f, int marks)
{
    struct eng_program_args a = {
        .m = f->m, .plan = f->plan, .source = 0, .src = f->src,
        .dst = f->dst, .pack_max = 64u << 10,
        .bucket_size = f->bucket_size ? f->bucket_size : 64u << 10,
        .dev_bucket_size = f->dev_bucket_size,
        .marks_to = marks ? every_pair : NULL, .direct_to = f->direct_to,
    };

    if (f->gather) {
        a.iov_max = a.rma_iov_max = 4;
        a.gather_max = 1u << 20;
    }
    return eng_program_build(&a, &f->prog);
}

static void teardown(struct fixture *f)
{
    eng_program_free(&f->prog);
    plan_free(f->plan);
    manifest_free(f->m);
    free(f->src);
    free(f->dst);
}

/* FABXFER_VERIFY maps the writes back onto the segments they fill: each
 * byte of a segment once. A write moved onto bytes of the write before
 * it in the same segment adds up as before; it is refused all the same. */
START_TEST(checks_cover_each_byte_once)
{
    struct fixture f = {0};
    struct eng_checks *c = NULL;
    struct eng_check_args a;
    struct eng_write *tail = NULL;

    /* GPU pieces on the staged path are cut at bucket ends: a 4 KiB
     * tensor lands in two buckets, two writes (its target pieces apart) */
    f.bucket_size = 3000;
    f.dst_gap = 64;
    setup(&f, 0, 0, 0);
    ck_assert_int_eq(build(&f, 0), FX_OK);
    a = (struct eng_check_args){f.plan, 0, f.dst, &f.prog, NULL};
    ck_assert_int_eq(eng_checks_build(&a, &c), FX_OK);
    eng_checks_free(c);
    c = NULL;
    /* a write that starts inside its tensor's piece: a tensor's tail */
    for (size_t w = 0; w < f.prog.nwrites && tail == NULL; w++)
        for (uint32_t p = 0; p < f.m->npieces && tail == NULL; p++)
            if (f.m->pieces[p].role == FX_TARGET &&
                f.prog.writes[w].nspans == 0 &&
                f.prog.writes[w].dst_off > f.dst[p].off + 8 &&
                f.prog.writes[w].dst_off < f.dst[p].off + f.m->pieces[p].bytes)
                tail = &f.prog.writes[w];
    ck_assert_ptr_nonnull(tail);
    tail->dst_off -= 8;
    ck_assert_int_eq(eng_checks_build(&a, &c), FX_ERR_STATE);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(err_last(), "the writes to rank 1 cover bytes") &&
                  strstr(err_last(), "twice"), "%s", err_last());
    tail->dst_off += 8;
    teardown(&f);
}
END_TEST

START_TEST(host_runs_packed_or_direct)
{
    struct fixture f = {0};
    uint64_t direct = 0, packed = 0;

    setup(&f, -1, 0, 0);
    ck_assert_int_eq(build(&f, 1), FX_OK);
    ck_assert_uint_eq(f.prog.nmarks, 0); /* no staged target: no marks */
    for (size_t i = 0; i < f.prog.nsteps; i++) {
        const struct eng_step *st = &f.prog.steps[i];

        for (size_t w = st->write0; w < st->write0 + st->nwrites; w++) {
            if (st->kind == STEP_DIRECT) {
                ck_assert_ptr_eq(f.prog.writes[w].mr, &f.mr);
                ck_assert_uint_eq(f.prog.writes[w].len, 256u << 10);
                direct += f.prog.writes[w].len;
            } else {
                ck_assert_ptr_null(f.prog.writes[w].mr);
                packed += f.prog.writes[w].len;
            }
        }
    }
    ck_assert_uint_eq(direct, (uint64_t)LARGE * (256u << 10));
    ck_assert_uint_eq(packed, (uint64_t)SMALL * (4u << 10));
    ck_assert_int_eq(f.prog.device_buckets, 0);
    teardown(&f);
}
END_TEST

/* The direct GPU path writes long device runs from GPU memory and still
 * gathers short ones; the staged path gathers everything. */
START_TEST(device_runs_by_path)
{
    for (int direct = 0; direct <= 1; direct++) {
        struct fixture f = {0};
        uint64_t from_gpu = 0, gathered = 0;

        setup(&f, 0, direct, 0);
        ck_assert_int_eq(build(&f, 0), FX_OK);
        ck_assert_int_eq(f.prog.device, 0);
        for (size_t i = 0; i < f.prog.nsteps; i++) {
            const struct eng_step *st = &f.prog.steps[i];

            for (size_t w = st->write0; w < st->write0 + st->nwrites; w++)
                if (st->kind == STEP_DIRECT)
                    from_gpu += f.prog.writes[w].len;
                else
                    gathered += f.prog.writes[w].len;
            if (st->kind == STEP_BUCKET)
                ck_assert_int_eq(st->device, 0);
        }
        ck_assert_uint_eq(from_gpu,
                          direct ? (uint64_t)LARGE * (256u << 10) : 0);
        ck_assert_uint_eq(from_gpu + gathered, f.prog.bytes);
        teardown(&f);
    }
}
END_TEST

/* A path per pair: a direct source region is written from as it is only
 * to a target whose pair's path registers device memory; to the others
 * every run goes through the GPU packer into host buckets, as on the
 * staged path. */
START_TEST(device_runs_by_pair_path)
{
    static const uint8_t hmem[2][2] = {{1, 0}, {1, 1}};

    for (int path = 0; path <= 1; path++) {
        struct fixture f = {.direct_to = hmem[path]};
        uint64_t from_gpu = 0;

        setup(&f, 0, 1, 0);
        ck_assert_int_eq(build(&f, 0), FX_OK);
        for (size_t i = 0; i < f.prog.nsteps; i++) {
            const struct eng_step *st = &f.prog.steps[i];

            for (size_t w = st->write0; w < st->write0 + st->nwrites; w++)
                if (st->kind == STEP_DIRECT) {
                    ck_assert_ptr_eq(f.prog.writes[w].mr, &f.mr);
                    from_gpu += f.prog.writes[w].len;
                }
        }
        ck_assert_uint_eq(from_gpu, path ? (uint64_t)LARGE * (256u << 10)
                                         : 0);
        ck_assert_uint_eq(f.prog.direct_bytes, from_gpu);
        /* its buckets stay on the host: more of them than slots */
        ck_assert_uint_gt(f.prog.nbuckets, CFG_BUCKET_DEPTH_MAX);
        ck_assert_int_eq(f.prog.device_buckets, 0);
        teardown(&f);
        /* with a slot for each bucket, on the GPU where every pair takes
         * device memory */
        f = (struct fixture){.direct_to = hmem[path],
                             .bucket_size = 4u << 20};
        setup(&f, 0, 1, 0);
        ck_assert_int_eq(build(&f, 0), FX_OK);
        ck_assert_uint_le(f.prog.nbuckets, CFG_BUCKET_DEPTH_MAX);
        ck_assert_int_eq(f.prog.device_buckets, path);
        teardown(&f);
    }
}
END_TEST

/* Buckets that stay on the GPU take the larger size; where they cannot
 * (a pair whose path takes no device memory, a bucket holding host
 * memory), the program is the one the host's size gives. */
START_TEST(gpu_buckets_take_their_size)
{
    static const uint8_t hmem[2][2] = {{1, 0}, {1, 1}};

    for (int c = 0; c < 3; c++) {
        struct fixture f = {.direct_to = hmem[c != 0]};
        struct eng_program host;
        int stays = c == 1;

        setup(&f, 0, 1, 0);
        if (c == 2) /* one small tensor in host memory */
            for (uint32_t p = 0; p < f.m->npieces; p++)
                if (f.m->pieces[p].role == FX_SOURCE) {
                    f.src[p].device = -1;
                    break;
                }
        ck_assert_int_eq(build(&f, 0), FX_OK);
        host = f.prog;
        f.dev_bucket_size = 1u << 20;
        ck_assert_int_eq(build(&f, 0), FX_OK);
        ck_assert_int_eq(f.prog.device_buckets, stays);
        ck_assert_uint_eq(f.prog.packed_bytes, host.packed_bytes);
        if (stays) {
            /* a bucket per row of small tensors between two large ones,
             * 24 of 4 KiB (LARGE + 1 of them), where 64 KiB cut 17: more
             * than the slots, so that they would not have stayed */
            ck_assert_uint_gt(host.nbuckets, CFG_BUCKET_DEPTH_MAX);
            ck_assert_int_eq(host.device_buckets, 0);
            ck_assert_uint_eq(f.prog.bucket_size, 1u << 20);
            ck_assert_uint_eq(f.prog.nbuckets, LARGE + 1);
            ck_assert_uint_eq(f.prog.bucket_max, 24 * (4u << 10));
        } else { /* as built at the host's size */
            ck_assert_uint_eq(f.prog.bucket_size, 64u << 10);
            ck_assert_uint_eq(f.prog.nbuckets, host.nbuckets);
            ck_assert_uint_eq(f.prog.bucket_max, host.bucket_max);
            ck_assert_uint_eq(f.prog.nsteps, host.nsteps);
        }
        eng_program_free(&host);
        teardown(&f);
    }
}
END_TEST

/* Every write to the staged region is under the first mark of its region
 * that comes at or after its step; marks come in step order, at most
 * ENG_MARKS + 1 of them, the last after the last step. With and without
 * the provider gathering runs (_i). */
START_TEST(marks_cover_every_write)
{
    struct fixture f = {.gather = _i};

    setup(&f, -1, 0, 1);
    ck_assert_int_eq(build(&f, 1), FX_OK);
    ck_assert_uint_gt(f.prog.nmarks, 1);
    ck_assert_uint_le(f.prog.nmarks, ENG_MARKS + 1);
    ck_assert_uint_eq(f.prog.marks[f.prog.nmarks - 1].after,
                      f.prog.nsteps - 1);
    for (size_t k = 1; k < f.prog.nmarks; k++)
        ck_assert_uint_ge(f.prog.marks[k].after, f.prog.marks[k - 1].after);
    for (size_t i = 0; i < f.prog.nsteps; i++) {
        const struct eng_step *st = &f.prog.steps[i];

        for (size_t w = st->write0; w < st->write0 + st->nwrites; w++) {
            const struct eng_write *wr = &f.prog.writes[w];
            size_t k = 0;

            /* A staged target's direct runs never join a write posted
             * before the packed runs between them. */
            ck_assert_uint_eq(wr->nspans, 0);
            while (k < f.prog.nmarks && f.prog.marks[k].after < i)
                k++;
            ck_assert_msg(k < f.prog.nmarks, "write %zu (step %zu) has no "
                          "mark after it", w, i);
            ck_assert_int_eq(f.prog.marks[k].target, 1);
            ck_assert_uint_eq(f.prog.marks[k].region, 0);
            ck_assert_msg(f.prog.marks[k].lo <= wr->dst_off &&
                          wr->dst_off + wr->len <= f.prog.marks[k].hi,
                          "write [%llu, %llu) at step %zu is outside mark "
                          "%zu [%llu, %llu)",
                          (unsigned long long)wr->dst_off,
                          (unsigned long long)(wr->dst_off + wr->len), i, k,
                          (unsigned long long)f.prog.marks[k].lo,
                          (unsigned long long)f.prog.marks[k].hi);
        }
    }
    eng_program_free(&f.prog);
    /* Message notification: no marks. */
    ck_assert_int_eq(build(&f, 0), FX_OK);
    ck_assert_uint_eq(f.prog.nmarks, 0);
    teardown(&f);
}
END_TEST

/* Direct runs go a few to a write, within the provider's limits: the
 * 256 KiB tensors, 64 bytes apart on the source and 24 packed tensors
 * apart on the target, go four to a 1 MiB write, each span where its
 * tensor is on both sides. */
START_TEST(direct_runs_gathered)
{
    struct fixture f = {.gather = 1};
    size_t ndirect = 0, t = 0;

    setup(&f, -1, 0, 0);
    ck_assert_int_eq(build(&f, 0), FX_OK);
    for (size_t i = 0; i < f.prog.nsteps; i++) {
        const struct eng_step *st = &f.prog.steps[i];
        const struct eng_write *wr = &f.prog.writes[st->write0];

        if (st->kind != STEP_DIRECT)
            continue;
        ck_assert_uint_eq(st->nwrites, 1);
        ck_assert_uint_eq(wr->nspans, 4);
        ck_assert_uint_eq(wr->len, 1u << 20);
        for (uint32_t k = 0; k < wr->nspans; k++, t++) {
            const struct fab_span *sp = &f.prog.spans[wr->span0 + k];
            int big = 24 + 25 * (int)t; /* the tensor's number */
            uint64_t before = 0;

            for (int b = 0; b < big; b++)
                before += tensor_bytes(b);
            ck_assert_ptr_eq(sp->mr, &f.mr);
            ck_assert_uint_eq(sp->len, 256u << 10);
            ck_assert_uint_eq(sp->src_off, before + (uint64_t)big * 64);
            ck_assert_uint_eq(sp->dst_off, before);
        }
        ndirect++;
    }
    ck_assert_uint_eq(ndirect, LARGE / 4);
    ck_assert_uint_eq(t, LARGE);
    ck_assert_uint_eq(f.prog.direct_bytes, (uint64_t)LARGE * (256u << 10));
    teardown(&f);
}
END_TEST

/* Ten 100 KiB tensors, each written directly, with gaps of 64 bytes on
 * the source, the target or neither: how many writes the limits make. */
static size_t writes_of(int src_gap, int dst_gap, size_t iov, size_t rma,
                        uint64_t gather_max)
{
    struct plan_manifest *m;
    struct plan *plan;
    struct eng_src_bind src[20];
    struct eng_dst_bind dst[20];
    struct fab_mr mr = {.base = (void *)(uintptr_t)0x100000, .len = 4u << 20};
    struct fab_rkey rk = {.len = 4u << 20};
    struct eng_program prog;
    uint64_t soff = 0, doff = 0, bytes = 0;
    size_t n;
    char name[32];

    ck_assert_int_eq(manifest_new(&m), FX_OK);
    for (int i = 0; i < 10; i++) {
        int64_t shape[1] = {100 << 10};

        snprintf(name, sizeof(name), "t%d", i);
        ck_assert_int_eq(manifest_add_tensor(m, name, "u8", 1, shape), FX_OK);
        ck_assert_int_eq(manifest_add_piece(m, 0, FX_SOURCE, name, -1, 0,
                                            0), FX_OK);
        ck_assert_int_eq(manifest_add_piece(m, 1, FX_TARGET, name, -1, 0,
                                            0), FX_OK);
    }
    ck_assert_int_eq(plan_build(m, 2, 0, &plan), FX_OK);
    ck_assert_uint_le(m->npieces, 20);
    for (uint32_t p = 0; p < m->npieces; p++) {
        if (m->pieces[p].role == FX_SOURCE) {
            src[p] = (struct eng_src_bind){&mr, soff, -1, 0};
            soff += (100 << 10) + (src_gap ? 64 : 0);
        } else {
            dst[p] = (struct eng_dst_bind){&rk, doff, 0, 0};
            doff += (100 << 10) + (dst_gap ? 64 : 0);
        }
    }
    {
        struct eng_program_args a = {
            .m = m, .plan = plan, .source = 0, .src = src, .dst = dst,
            .pack_max = 64u << 10, .bucket_size = 64u << 10,
            .iov_max = iov, .rma_iov_max = rma, .gather_max = gather_max,
        };

        ck_assert_int_eq(eng_program_build(&a, &prog), FX_OK);
    }
    for (size_t w = 0; w < prog.nwrites; w++) {
        const struct eng_write *wr = &prog.writes[w];
        uint64_t sum = 0;

        ck_assert_ptr_eq(wr->mr, &mr);
        ck_assert_uint_le(wr->len, gather_max > 0 ? gather_max : 1u << 20);
        for (uint32_t k = 0; k < wr->nspans; k++)
            sum += prog.spans[wr->span0 + k].len;
        ck_assert_uint_eq(wr->nspans ? sum : wr->len, wr->len);
        bytes += wr->len;
    }
    ck_assert_uint_eq(bytes, 10u * (100 << 10));
    n = prog.nwrites;
    eng_program_free(&prog);
    plan_free(plan);
    manifest_free(m);
    return n;
}

START_TEST(gather_within_limits)
{
    const uint64_t mib = 1u << 20;

    /* no gaps: the runs merge into one before any gathering */
    ck_assert_uint_eq(writes_of(0, 0, 1, 1, mib), 1);
    /* gaps on the source: gathered from up to iov_max ranges */
    ck_assert_uint_eq(writes_of(1, 0, 4, 4, mib), 3);
    ck_assert_uint_eq(writes_of(1, 0, 4, 1, mib), 3); /* verbs: 4 and 1 */
    ck_assert_uint_eq(writes_of(1, 0, 2, 4, mib), 5);
    ck_assert_uint_eq(writes_of(1, 0, 1, 4, mib), 10);
    /* gaps on the target: scattered to up to rma_iov_max ranges */
    ck_assert_uint_eq(writes_of(0, 1, 1, 4, mib), 3);
    ck_assert_uint_eq(writes_of(0, 1, 4, 1, mib), 10);
    /* both: each run is a range on each side */
    ck_assert_uint_eq(writes_of(1, 1, 4, 4, mib), 3);
    ck_assert_uint_eq(writes_of(1, 1, 4, 2, mib), 5);
    /* never past the largest write: two 100 KiB runs in 250 KiB */
    ck_assert_uint_eq(writes_of(1, 0, 4, 4, 250u << 10), 5);
    /* 1 and 1 (efa, cxi, FABXFER_IOV_MAX=1): one write per run */
    ck_assert_uint_eq(writes_of(1, 1, 1, 1, mib), 10);
}
END_TEST

/* Marks per target stay few whatever the regions: up to ENG_MARK_REGIONS
 * regions are marked one by one, beyond that one mark says "all". */
START_TEST(marks_stay_few)
{
    struct fixture f = {0};

    setup_regions(&f, -1, 0, 1, ENG_MARK_REGIONS);
    ck_assert_int_eq(build(&f, 1), FX_OK);
    ck_assert_uint_gt(f.prog.nmarks, ENG_MARK_REGIONS);
    ck_assert_uint_le(f.prog.nmarks, ENG_MARK_REGIONS * (ENG_MARKS + 1));
    for (size_t k = 0; k < f.prog.nmarks; k++)
        ck_assert_uint_lt(f.prog.marks[k].region, ENG_MARK_REGIONS);
    teardown(&f);

    memset(&f, 0, sizeof(f));
    setup_regions(&f, -1, 0, 1, ENG_MARK_REGIONS + 1);
    ck_assert_int_eq(build(&f, 1), FX_OK);
    ck_assert_uint_eq(f.prog.nmarks, 1);
    ck_assert_uint_eq(f.prog.marks[0].region, ENG_MARK_ALL);
    ck_assert_uint_eq(f.prog.marks[0].after, f.prog.nsteps - 1);
    teardown(&f);
}
END_TEST

/* Three targets hold every tensor; target 2 from 4 KiB further into its
 * region. The one in reverse order (none, the first or the last) gets
 * buckets of its own; the others share each bucket (packed once, written
 * to each). A reversed target sends the build down the sorted path, none
 * down the plan-walking one. The program is then run on real memory, as
 * the pipeline would (copies into a bucket, then its writes; direct
 * writes from the source), and every target byte is compared. */
#define NTGT 3
#define SHIFT 4096

static uint64_t dst_off_of(int target, int reversed, int gap, int i)
{
    uint64_t off = target == 2 ? SHIFT : 0;

    for (int k = 0; k < SMALL + LARGE; k++)
        if (target == reversed ? k > i : k < i)
            off += tensor_bytes(k) + (uint64_t)gap;
    return off;
}

/* gap: bytes the targets leave after each tensor, so that a bucket's
 * writes scatter (gathered) or go one per tensor. Returns the number of
 * bucket writes. */
static size_t check_replicas(int reversed, int gather, int gap)
{
    struct plan_manifest *m;
    struct plan *plan;
    struct eng_src_bind *src;
    struct eng_dst_bind *dst;
    struct fab_mr mr = {0};
    struct fab_rkey rk[NTGT + 1] = {{0}};
    struct eng_program prog;
    uint64_t total = 0, soff[SMALL + LARGE], off = 0;
    size_t direct = 0, packed = 0;
    unsigned char *smem, *tmem[NTGT + 1], *bucket;
    char name[32];

    ck_assert_int_eq(manifest_new(&m), FX_OK);
    for (int i = 0; i < SMALL + LARGE; i++) {
        int64_t shape[1] = {(int64_t)tensor_bytes(i)};

        snprintf(name, sizeof(name), "t%d", i);
        ck_assert_int_eq(manifest_add_tensor(m, name, "u8", 1, shape), FX_OK);
        ck_assert_int_eq(manifest_add_piece(m, 0, FX_SOURCE, name, -1, 0,
                                            0), FX_OK);
        for (int t = 1; t <= NTGT; t++)
            ck_assert_int_eq(manifest_add_piece(m, t, FX_TARGET, name, -1,
                                                0, 0), FX_OK);
        soff[i] = off;
        off += tensor_bytes(i) + 64;
        total += tensor_bytes(i);
    }
    ck_assert_int_eq(plan_build(m, NTGT + 1, 0, &plan), FX_OK);
    smem = malloc(off);
    bucket = malloc(64u << 10);
    ck_assert_ptr_nonnull(smem);
    ck_assert_ptr_nonnull(bucket);
    for (uint64_t b = 0; b < off; b++)
        smem[b] = (unsigned char)(b * 131 + b / 4093);
    mr.base = smem;
    mr.len = off;
    src = calloc(m->npieces, sizeof(*src));
    dst = calloc(m->npieces, sizeof(*dst));
    for (int t = 1; t <= NTGT; t++) {
        rk[t].len = total + SHIFT + (uint64_t)gap * (SMALL + LARGE);
        tmem[t] = calloc(1, rk[t].len);
        ck_assert_ptr_nonnull(tmem[t]);
    }
    for (uint32_t p = 0; p < m->npieces; p++) {
        const struct plan_piece *pc = &m->pieces[p];

        if (pc->role == FX_SOURCE)
            src[p] = (struct eng_src_bind){&mr, soff[pc->tensor], -1, 0};
        else
            dst[p] = (struct eng_dst_bind){
                &rk[pc->rank],
                dst_off_of(pc->rank, reversed, gap, (int)pc->tensor), 0, 0};
    }
    {
        struct eng_program_args a = {
            .m = m, .plan = plan, .source = 0, .src = src, .dst = dst,
            .pack_max = 64u << 10, .bucket_size = 64u << 10,
            .iov_max = gather ? 4 : 0, .rma_iov_max = gather ? 4 : 0,
            .gather_max = 1u << 20,
        };

        ck_assert_int_eq(eng_program_build(&a, &prog), FX_OK);
    }
    /* One copy per small tensor and group; gathered, each target gets its
     * large tensors in two writes. */
    ck_assert_int_eq(prog.ngroups, reversed ? 2 : 1);
    ck_assert_uint_eq(prog.ncopies, (reversed ? 2 : 1) * SMALL);
    ck_assert_int_eq(prog.ntargets, NTGT);
    ck_assert_uint_eq(prog.bytes, NTGT * total);
    ck_assert_uint_eq(prog.direct_bytes, NTGT * LARGE * (256u << 10));
    for (size_t i = 0; i < prog.nsteps; i++) {
        if (prog.steps[i].kind == STEP_DIRECT)
            direct += prog.steps[i].nwrites;
        else
            packed += prog.steps[i].nwrites;
    }
    ck_assert_uint_eq(direct, NTGT * (gather ? LARGE / 4 : LARGE));
    for (size_t i = 0; i < prog.nsteps; i++) {
        const struct eng_step *st = &prog.steps[i];

        for (size_t c = st->copy0; st->kind == STEP_BUCKET &&
                                   c < st->copy0 + st->ncopies; c++)
            memcpy(bucket + prog.copies[c].bucket_off, prog.copies[c].src,
                   prog.copies[c].len);
        for (size_t w = st->write0; w < st->write0 + st->nwrites; w++) {
            const struct eng_write *wr = &prog.writes[w];
            int t = (int)(wr->rk - rk);

            ck_assert_int_eq(t, wr->target);
            ck_assert_uint_le(wr->nspans, 4 + 4 - 1);
            for (uint32_t k = 0; k < wr->nspans; k++) {
                const struct fab_span *sp = &prog.spans[wr->span0 + k];

                ck_assert_ptr_eq(sp->mr, wr->mr);
                ck_assert_uint_le(sp->dst_off + sp->len, rk[t].len);
                memcpy(tmem[t] + sp->dst_off,
                       (sp->mr ? smem : bucket) + sp->src_off, sp->len);
            }
            if (wr->nspans > 0)
                continue;
            ck_assert_uint_le(wr->dst_off + wr->len, rk[t].len);
            memcpy(tmem[t] + wr->dst_off,
                   (wr->mr ? smem : bucket) + wr->src_off, wr->len);
        }
    }
    for (int t = 1; t <= NTGT; t++)
        for (int i = 0; i < SMALL + LARGE; i++)
            ck_assert_msg(memcmp(tmem[t] + dst_off_of(t, reversed, gap, i),
                                 smem + soff[i], tensor_bytes(i)) == 0,
                          "target %d reversed, %s, gap %d, target %d, "
                          "tensor t%d: wrong bytes", reversed,
                          gather ? "gathered" : "one run a write", gap, t,
                          i);
    eng_program_free(&prog);
    for (int t = 1; t <= NTGT; t++)
        free(tmem[t]);
    free(src);
    free(dst);
    free(smem);
    free(bucket);
    plan_free(plan);
    manifest_free(m);
    return packed;
}

START_TEST(replicas_share_buckets)
{
    for (int gather = 0; gather <= 1; gather++)
        for (int gap = 0; gap <= 64; gap += 64) {
            check_replicas(0, gather, gap);
            check_replicas(1, gather, gap);
            check_replicas(NTGT, gather, gap);
        }
}
END_TEST

/* Targets that leave a gap after each tensor get a bucket write per
 * tensor, or, scattered four ranges to a write, a quarter as many. */
START_TEST(bucket_writes_scatter)
{
    for (int reversed = 0; reversed <= NTGT; reversed += NTGT) {
        size_t one = check_replicas(reversed, 0, 64);
        size_t four = check_replicas(reversed, 1, 64);

        ck_assert_uint_ge(one, NTGT * SMALL);
        ck_assert_msg(four * 4 <= one + NTGT * (SMALL / 16 + 1) * 4,
                      "%zu scattered bucket writes for %zu one per tensor",
                      four, one);
    }
}
END_TEST

/* Sizes the build trusts from the plan and the bindings are checked
 * before any array is sized from them: a source piece bound past its
 * region, a segment (from a damaged plan) past its pieces, and run counts
 * whose sum wraps. Each names the tensor. */
START_TEST(refuses_unrepresentable)
{
    struct fixture f = {0};
    struct plan_seg *s0, saved;

    setup(&f, -1, 0, 0);
    s0 = &f.plan->segs[0];
    saved = *s0;
    /* the piece's bytes run past the end of the source region */
    f.src[s0->src_piece].off = f.mr.len - 16;
    ck_assert_int_eq(build(&f, 0), FX_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err_last(), "tensor \"t0\""));
    ck_assert_ptr_nonnull(strstr(err_last(), "source rank 0"));
    f.src[s0->src_piece].off = UINT64_MAX - 8;
    ck_assert_int_eq(build(&f, 0), FX_ERR_RANGE);
    f.src[s0->src_piece].off = 0;
    /* a stride whose last run ends past the piece, and one that wraps */
    s0->count = 2;
    s0->src_stride = saved.run_len;
    ck_assert_int_eq(build(&f, 0), FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err_last(), "tensor \"t0\""));
    s0->count = UINT64_MAX;
    s0->src_stride = UINT64_MAX / 2;
    ck_assert_int_eq(build(&f, 0), FX_ERR_INVALID);
    s0->src_stride = 0;
    s0->dst_stride = UINT64_MAX / 4;
    ck_assert_int_eq(build(&f, 0), FX_ERR_INVALID);
    /* runs of no stride, 2^63 each: their sum wraps a size_t */
    s0->dst_stride = 0;
    s0->count = UINT64_C(1) << 63;
    f.plan->segs[1].count = UINT64_C(1) << 63;
    f.plan->segs[1].src_stride = f.plan->segs[1].dst_stride = 0;
    ck_assert_int_eq(build(&f, 0), FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err_last(), "more runs than memory"));
    f.plan->segs[0].count = 1;
    ck_assert_int_eq(build(&f, 0), FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err_last(), "tensor \"t1\""));
    teardown(&f);
}
END_TEST

/* Sources 0 and 1 each hold every tensor's half (dim 0); targets 2, 3
 * and 4 each hold their own tensors, small[t] of 4 KiB and large[t] of
 * 256 KiB (small[t] x 2 KiB from each source: below 64 KiB a target
 * shares its bucket with the next). The steps of each source take turns
 * between the targets, from target (source mod 3) on, and every target
 * still gets its writes in destination order, each exactly once.
 * marks: 0 none, 1 every target's pair counts writedata, 2 only rank 3's
 * (paths per pair): marks go to it alone. */
static void check_turns(const int small[3], const int large[3], int marks,
                        const uint8_t *cls)
{
    uint8_t marks_to[5] = {0};
    struct plan_manifest *m;
    struct plan *plan;
    struct eng_src_bind *src;
    struct eng_dst_bind *dst;
    struct fab_mr mr = {0};
    struct fab_rkey rk[5] = {{0}};
    uint64_t doff[5] = {0}, soff = 0;
    char name[32];
    int n = 0;

    ck_assert_int_eq(manifest_new(&m), FX_OK);
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < small[t] + large[t]; i++, n++) {
            int64_t shape[1] = {i < small[t] ? 4096 : 256 << 10};

            snprintf(name, sizeof(name), "t%d.%d", t, i);
            ck_assert_int_eq(manifest_add_tensor(m, name, "u8", 1, shape),
                             FX_OK);
            for (int r = 0; r < 2; r++)
                ck_assert_int_eq(manifest_add_piece(m, r, FX_SOURCE, name,
                                                    0, r * shape[0] / 2,
                                                    (r + 1) * shape[0] / 2),
                                 FX_OK);
            ck_assert_int_eq(manifest_add_piece(m, 2 + t, FX_TARGET, name,
                                                -1, 0, 0), FX_OK);
        }
    for (int r = 0; r < 5; r++)
        marks_to[r] = marks == 1 || (marks == 2 && r == 3);
    src = calloc(m->npieces, sizeof(*src));
    dst = calloc(m->npieces, sizeof(*dst));
    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(dst);
    mr.len = 64u << 20;
    for (uint32_t p = 0; p < m->npieces; p++) {
        const struct plan_piece *pc = &m->pieces[p];

        if (pc->role == FX_SOURCE) {
            src[p] = (struct eng_src_bind){&mr, soff, -1, 0};
            soff += pc->bytes + 64;
        } else {
            rk[pc->rank].len = 64u << 20;
            dst[p] = (struct eng_dst_bind){&rk[pc->rank], doff[pc->rank], 0,
                                           marks != 0};
            doff[pc->rank] += pc->bytes;
        }
    }
    for (int source = 0; source < 2; source++) {
        struct eng_program_args a = {
            .m = m, .source = source, .src = src, .dst = dst,
            .pack_max = 64u << 10, .bucket_size = 64u << 10,
            .marks_to = marks ? marks_to : NULL, .path_class = cls,
            .early_ok = (const uint8_t[]){1, 1, 1, 1, 1},
        };
        struct eng_program prog;
        uint64_t next[5] = {0}, got[5] = {0}, seen = 0;
        int last = -1, turns = 0, slow = 0;

        ck_assert_int_eq(plan_build(m, 5, source, &plan), FX_OK);
        a.plan = plan;
        ck_assert_int_eq(eng_program_build(&a, &prog), FX_OK);
        ck_assert_int_eq(prog.ntargets, 3);
        for (size_t i = 0; i < prog.nsteps; i++) {
            const struct eng_step *st = &prog.steps[i];
            int first = prog.writes[st->write0].target;

            if (i == 0 && small[source] * 2048 >= (64 << 10) && !cls)
                ck_assert_int_eq(first, 2 + source);
            /* the targets of the faster path first, then the others */
            if (cls != NULL && cls[first] > 0)
                slow = 1;
            else if (cls != NULL)
                ck_assert_msg(!slow, "source %d: step %zu to rank %d after "
                              "a step to a slower path", source, i, first);
            turns += first != last;
            last = first;
            seen |= 1u << first;
            for (size_t w = st->write0; w < st->write0 + st->nwrites; w++) {
                const struct eng_write *wr = &prog.writes[w];

                /* this source's half of each tensor, in destination
                 * order, each byte once */
                ck_assert_uint_ge(wr->dst_off, next[wr->target]);
                next[wr->target] = wr->dst_off + wr->len;
                got[wr->target] += wr->len;
            }
        }
        for (int t = 2; t < 5; t++)
            ck_assert_uint_eq(got[t], doff[t] / 2);
        /* Targets on several paths are each told after their last step,
         * but a staged GPU target (marks) only at the end: its last
         * marks follow the program's last step. One path: all at the
         * end. */
        if (cls != NULL) {
            size_t want[5] = {0};

            for (size_t i = 0; i < prog.nsteps; i++)
                for (size_t w = prog.steps[i].write0;
                     w < prog.steps[i].write0 + prog.steps[i].nwrites; w++)
                    want[prog.writes[w].target] =
                        prog.writes[w].staged ? SIZE_MAX : i;
            for (size_t w = 0; w < prog.nwrites; w++)
                if (prog.writes[w].staged)
                    want[prog.writes[w].target] = SIZE_MAX;
            ck_assert_ptr_nonnull(prog.last_step);
            for (int t = 0; t < prog.ntargets; t++)
                ck_assert_uint_eq(prog.last_step[t], want[prog.targets[t]]);
        } else {
            ck_assert_ptr_null(prog.last_step);
        }
        /* dealt out, not one target after the other */
        ck_assert_int_gt(turns, 3);
        ck_assert_uint_eq(seen, 0x1c); /* ranks 2, 3 and 4 */
        if (marks == 1)
            ck_assert_uint_eq(prog.marks[prog.nmarks - 1].after,
                              prog.nsteps - 1);
        if (marks == 2)
            ck_assert_uint_gt(prog.nmarks, 0);
        for (size_t k = 0; marks == 2 && k < prog.nmarks; k++)
            ck_assert_int_eq(prog.marks[k].target, 3);
        eng_program_free(&prog);
        plan_free(plan);
    }
    free(src);
    free(dst);
    manifest_free(m);
}

START_TEST(steps_take_turns)
{
    /* every target a bucket's worth or more: none shares a bucket */
    check_turns((const int[]){80, 70, 90}, (const int[]){4, 6, 2}, _i,
                NULL);
    /* target 3 small: it opens a bucket that target 4's first writes
     * share, and target 4 waits for it */
    check_turns((const int[]){80, 3, 90}, (const int[]){4, 0, 2}, _i, NULL);
    /* rank 3 over tcp, ranks 2 and 4 over shm: 2 and 4 take turns, then
     * 3 (a path per pair) */
    check_turns((const int[]){80, 70, 90}, (const int[]){4, 6, 2}, _i,
                (const uint8_t[]){0, 0, 0, 5, 0});
    /* rank 3 over shm, 2 and 4 over tcp: 3 first */
    check_turns((const int[]){80, 71, 90}, (const int[]){4, 5, 2}, _i,
                (const uint8_t[]){0, 0, 5, 0, 5});
}
END_TEST

int main(void)
{
    const struct unit_test tests[] = {
        {host_runs_packed_or_direct}, {device_runs_by_path},
        {device_runs_by_pair_path}, {gpu_buckets_take_their_size},
        {marks_cover_every_write, 2},
        {direct_runs_gathered}, {gather_within_limits}, {marks_stay_few},
        {replicas_share_buckets}, {bucket_writes_scatter},
        {refuses_unrepresentable}, {checks_cover_each_byte_once},
        {steps_take_turns, 3},
    };
    Suite *s = suite_create("program");

    /* Check's limit is wall-clock time: replicas_share_buckets ran past
     * the default 4 s on a host at load 10-15 (2 cores, make check). */
    unit_tcase(s, "build", 60, tests, UNIT_ROWS(tests));
    return unit_run(s);
}
