/*
 * The weight-sync engine: turns a source rank's plan into a program of
 * writes once per session (program.c), runs it every version through a
 * pool of pre-registered buckets with a packer thread that fills bucket
 * k+1 while bucket k is on the wire (pipeline.c), and, on targets, waits
 * for the versioned notifications of every expected source (target.c),
 * copying staged GPU targets up as their bytes land (slab.c). A source
 * with FP8 targets fills their block scales before each push (scales.c).
 */
#ifndef FX_ENGINE_ENGINE_H
#define FX_ENGINE_ENGINE_H

#include <pthread.h>
#include <stdint.h>

#include "fabric/fabric.h"
#include "plan/plan.h"
#include "util/crc32c_chunk.h"

/* Where a source piece lives on this rank. */
struct eng_src_bind {
    const struct fab_mr *mr; /* NULL: this rank holds no such piece */
    uint64_t off;            /* byte offset of the piece in mr */
    int device;              /* CUDA device holding it, or -1 */
    int direct;              /* device memory the provider registered */
};

/* Where a target piece lives on its rank, as learned at set-up. */
struct eng_dst_bind {
    const struct fab_rkey *rk; /* NULL: unknown */
    uint64_t off;              /* byte offset of the piece in the region */
    uint32_t region;           /* the target's id of the region */
    int staged;                /* a staged CUDA slab: mark what lands */
};

/* One write of the program: from a source region (direct) or from a
 * bucket (mr NULL: src_off is an offset into the bucket). A write may
 * carry several runs (nspans > 0), gathered from the source or scattered
 * over the target: they are the program's spans [span0, span0 + nspans),
 * in destination order (a bucket write's with mr NULL and offsets into
 * the bucket); mr, src_off and dst_off are then the first one's, len the
 * sum. A write has at most ENG_SPANS_MAX spans. */
#define ENG_SPANS_MAX (2 * FAB_IOV_MAX - 1)
struct eng_write {
    int target;
    const struct fab_mr *mr;
    uint64_t src_off;
    const struct fab_rkey *rk;
    uint64_t dst_off;
    uint64_t len;
    uint32_t region;
    int staged;
    uint32_t nspans;
    size_t span0;
};

/* After step `after` is posted: tell target that [lo, hi) of its region
 * is written (fab_mark), so that a staged GPU target copies it to the GPU
 * while later buckets are still on their way. */
struct eng_mark {
    size_t after;
    int target;
    uint32_t region;
    uint64_t lo, hi;
};
/* Each mark takes a writedata epoch, and a target tells epochs apart only
 * modulo 256 (WD_EPOCHS): marks per target and version stay at most
 * ENG_MARK_REGIONS x (ENG_MARKS + 1). A target with more staged regions
 * from one source gets a single mark of region ENG_MARK_ALL at the end:
 * "copy everything I wrote". */
#define ENG_MARKS 16
#define ENG_MARK_REGIONS 4
#define ENG_MARK_ALL UINT32_MAX

/* One copy into a bucket: len bytes of it, from conv_src_len(conv, len)
 * bytes at src converted (util/convert.h), or copied as they are; a
 * conversion to FP8 divides element k by scale[(phase + k) / block]. */
struct eng_copy {
    const char *src;
    uint64_t bucket_off;
    uint64_t len;
    int conv;
    const float *scale;
    uint32_t phase, block;
};

enum eng_step_kind { STEP_DIRECT, STEP_BUCKET };

struct eng_step {
    enum eng_step_kind kind;
    uint32_t bucket;           /* STEP_BUCKET: its number in the version */
    int device;                /* STEP_BUCKET: copies read CUDA device
                                * memory (gathered on the GPU), or -1 */
    size_t write0, nwrites;    /* range of program writes */
    size_t copy0, ncopies;     /* STEP_BUCKET: range of program copies */
};

struct eng_program {
    struct eng_step *steps;
    size_t nsteps;
    struct eng_write *writes;
    size_t nwrites;
    struct eng_copy *copies;
    size_t ncopies;
    struct fab_span *spans;    /* of writes carrying several runs */
    size_t nspans;
    uint32_t nbuckets;         /* bucket steps per version */
    int device;                /* the CUDA device of GPU buckets, or -1 */
    int *targets;              /* ranks this source writes to */
    int ntargets;
    int ngroups;               /* of targets sharing buckets (replicas) */
    struct eng_mark *marks;    /* by step */
    size_t nmarks;
    /* Targets on several paths: each that may be (early_ok, no staged GPU
     * region) is told right after its last step (last_step[t], by
     * p->targets index; SIZE_MAX: at the end), so that the first paths'
     * targets need not wait for the others' writes; NULL: all at the end */
    size_t *last_step;
    /* GPU buckets stay on the device, written from there (no copy to
     * the host): every target's pair takes device memory, and no bucket
     * holds host memory */
    int device_buckets;
    uint64_t bucket_size;      /* what its buckets were cut to */
    uint64_t bucket_max;       /* the most bytes a bucket holds */
    uint64_t bytes, packed_bytes, direct_bytes; /* written, per version;
                                                 * a bucket shared by a
                                                 * group counts per member */
};

/* FABXFER_BUCKET_SIZE=0: buckets of host memory, and GPU buckets copied to
 * the host, are cut small enough to pipeline packing with the writes;
 * GPU buckets written from the GPU larger, each costing kernels and a
 * CUDA IPC copy per target (eng_program_build). */
#define ENG_BUCKET_HOST ((uint64_t)4 << 20)
#define ENG_BUCKET_GPU ((uint64_t)64 << 20)

struct eng_program_args {
    const struct plan_manifest *m;
    const struct plan *plan;
    int source;                       /* this rank */
    const struct eng_src_bind *src;   /* per manifest piece */
    const struct eng_dst_bind *dst;   /* per manifest piece */
    uint64_t pack_max;                /* runs below this are packed */
    uint64_t bucket_size;
    /* Where buckets would stay on the GPU (device_buckets), they are cut
     * to this size instead, if larger; 0: bucket_size for all. */
    uint64_t dev_bucket_size;
    /* A direct write gathers runs while it has at most iov_max source
     * ranges, rma_iov_max target ranges and gather_max bytes (the
     * provider's limits and chunk); iov_max and rma_iov_max 1: never. */
    size_t iov_max, rma_iov_max;
    uint64_t gather_max;
    /* per rank: 1 where the pair counts writedata, whose staged targets
     * get marks as the writes go; NULL: no pair does */
    const uint8_t *marks_to;
    /* per rank: 1 where the pair's path registers CUDA memory, so that a
     * direct source region is written from as it is; elsewhere its runs
     * go through the GPU packer (a path per pair). NULL: every rank. */
    const uint8_t *direct_to;
    /* per rank: its pair's path's place in the path order (shm first);
     * a source's turns go to the targets of the first paths first
     * (order.c). NULL: every pair alike. */
    const uint8_t *path_class;
    /* per rank: 1 where no end of the pair moves device memory, so that
     * the target may be told as soon as its last step is out (see
     * last_step). NULL: none. */
    const uint8_t *early_ok;
};

/* Build the program; every remote range is checked against the target's
 * advertised region (error names the tensor and the rank). */
fx_status_t eng_program_build(const struct eng_program_args *a,
                              struct eng_program *out);
void eng_program_free(struct eng_program *p);
/* The index of target (a rank) in p->targets, which is sorted. */
size_t eng_target_index(const struct eng_program *p, int target);
/* Reorder p's steps: group_of[t] is the group (0..ngroups) of p->targets[t];
 * one step per group in turn, from group start mod ngroups, the groups of
 * the lowest class (cls_of[g], NULL: one class) while they have steps,
 * each target's writes kept in program order (order.c). */
fx_status_t eng_order_steps(struct eng_program *p, const size_t *group_of,
                            size_t ngroups, size_t start,
                            const unsigned char *cls_of);

/* ---- checksums (check.c, checker.c) --------------------------------- */

/* FABXFER_VERIFY: off, sample (a pair's unit u is checked in the versions
 * v with ((u >> shift) + v) % every == 0: every byte within `every`
 * versions; the source's first version checks all), full. */
enum { ENG_VERIFY_OFF, ENG_VERIFY_SAMPLE, ENG_VERIFY_FULL };
struct eng_verify {
    int mode;
    uint32_t every;
};
/* The period as heads carry it and the GPU samples by (mem.h): sample's,
 * else 0 (every unit, or none). */
static inline uint32_t eng_verify_every(const struct eng_verify *v)
{
    return v->mode == ENG_VERIFY_SAMPLE ? v->every : 0;
}

/* A version's phase, taken once per loop over units, and whether the
 * unit of group key (its number >> shift) is due at it
 * (util/crc32c_chunk.h's sampling rule, the GPU's too). */
static inline uint32_t eng_verify_phase(const struct eng_verify *v,
                                        uint64_t version)
{
    return crc_sample_phase(version, eng_verify_every(v));
}

static inline int eng_verify_due_at(const struct eng_verify *v, uint32_t key,
                                    uint32_t phase)
{
    return v->mode != ENG_VERIFY_OFF &&
           crc_sample_due(key, phase, eng_verify_every(v));
}

/* Sample mode takes a pair's units in groups of 2^shift neighbours, about
 * ENG_SAMPLE_RUN bytes at the pair's mean unit: where units are small, a
 * version's due bytes then lie side by side in the target's memory. A
 * target read every 64th unit of 100,000 x 4 KiB at 4 GB/s, all of them
 * at 14 GB/s (2 cores). Both ends take it from the pair's units and
 * bytes, which they share. */
#define ENG_SAMPLE_RUN (256u << 10)
static inline unsigned eng_verify_shift(uint64_t nunits, uint64_t bytes)
{
    unsigned s = 0;

    while (s < 16 && ((uint64_t)2 << s) * bytes <=
                         (uint64_t)ENG_SAMPLE_RUN * nunits)
        s++;
    return s;
}

/* The first unit at or after k that is due at phase (mode not off): a
 * loop over a pair's units visits the due ones only (walking all 100,000
 * of a pair's unit records three times cost a target 2 ms a version of
 * 4 KiB units, on 2 cores). */
static inline size_t eng_verify_first(const struct eng_verify *v,
                                      unsigned shift, uint32_t phase,
                                      size_t k)
{
    uint32_t every = eng_verify_every(v), r;
    size_t g = k >> shift;

    if (every == 0)
        return k;
    r = crc_sample_rem((uint32_t)g, phase, every);
    return r == 0 ? k : (g + (every - r)) << shift;
}

/* What a source writes into its target's area before it notifies: this
 * head (magic ENG_CHECK_MAGIC), then a raw CRC32C per unit (the pair's
 * segments, in plan order; 0 for those not due this version). */
#define ENG_CHECK_MAGIC 0x4b434846u /* "FHCK" */
struct eng_check_head {
    uint64_t version;
    uint32_t nunits, magic, mode, every;
};

/* The source's side: which pieces of which units each step writes. */
struct eng_checks;
struct eng_check_args {
    const struct plan *plan;
    int source;
    const struct eng_dst_bind *dst;   /* per manifest piece */
    const struct eng_program *prog;   /* built */
    /* per rank: 1 where the pair counts writedata, so that the target may
     * check what came while the rest is on its way (check points);
     * NULL: no pair does */
    const uint8_t *marks_to;
};
/* After step `step` is posted, units [lo, hi) of program target t are all
 * written: their CRCs go out, then a mark of words {eng_mark_check(every),
 * lo, hi}, and the target checks them as the rest of the version comes
 * (at most ENG_CHECK_POINTS a target and version, by bytes); every is
 * the one the source's sums of this version took (its head's). */
struct eng_check_point {
    size_t step;
    int t;
    uint32_t lo, hi;
};
#define ENG_MARK_CHECK (UINT32_MAX - 1)
static inline uint64_t eng_mark_check(uint32_t every)
{
    return ENG_MARK_CHECK | (uint64_t)every << 32;
}
#define ENG_CHECK_POINTS 8
size_t eng_checks_points(const struct eng_checks *c,
                         const struct eng_check_point **out);
fx_status_t eng_checks_build(const struct eng_check_args *a,
                             struct eng_checks **out);
void eng_checks_free(struct eng_checks *c);
/* pipeline.c's: the CRCs' buffer (heads and CRCs of every target), target
 * t's part of it, a version's start (heads written, CRCs zeroed), and the
 * CRCs of a step's pieces, summed in (bucket: where the step's bucket is
 * packed); returns the bytes checksummed. With fill, the bucket is packed
 * as it is summed: fill->to(fill, upto) returns once bytes [0, upto) are
 * in place (an upto already reached does nothing), last with UINT64_MAX. */
struct eng_fill {
    void (*to)(struct eng_fill *f, uint64_t upto);
};
/* Bytes a fused pack copies before it sums them: small enough to be
 * summed from L1/L2 right after the copy wrote them, large enough that
 * the calls cost nothing. A bucket (4 MiB) summed once packed is read
 * back from L3 or memory: a third of the packer's speed (bench pack,
 * which packs this way too). */
#define ENG_FILL_CHUNK (64u << 10)
void *eng_checks_buf(const struct eng_checks *c, size_t *len);
void eng_checks_target(const struct eng_checks *c, int t, size_t *off,
                       size_t *len);
void eng_checks_begin(struct eng_checks *c, int ntargets, uint64_t version,
                      const struct eng_verify *v);
uint64_t eng_checks_step(struct eng_checks *c, size_t step, const char *bucket,
                         struct eng_fill *fill, uint64_t version,
                         const struct eng_verify *v);
/* What the GPU sums (pieces in device memory: direct writes from device
 * tensors, buckets kept on the GPU), as mem_crc ranges in 1 + nbuckets
 * groups (mem.h): group 0 the direct writes', group k + 1 bucket k's,
 * read from base[k]; eng_checks_step leaves them out. ndev: how many
 * (0: none, and no GPU summing). fold adds the GPU's words (one per 4
 * bytes of the buffer) into the buffer; returns the bytes they cover. */
struct mem_crc_range;
size_t eng_checks_ndev(const struct eng_checks *c);
fx_status_t eng_checks_device(const struct eng_checks *c,
                              const struct eng_program *p,
                              const uint64_t *base,
                              struct mem_crc_range **out, size_t **group0);
uint64_t eng_checks_fold(struct eng_checks *c, const uint32_t *words,
                         uint64_t version, const struct eng_verify *v);

/* The target's side: its units, each where its bytes land in this
 * rank's memory: host memory, checked by the CPU, or a CUDA device's,
 * checked by that device (mem_crc; one device per rank). */
struct eng_check_unit {
    const char *at;                   /* the first run */
    uint64_t run_len, count, stride;
    uint32_t tensor;
    uint64_t piece_off;               /* where the unit starts in its piece */
    int device;                       /* CUDA device, or -1: host */
};
struct eng_check_target {
    const struct plan_manifest *m;
    int me;
    const int *sources;
    const size_t *unit0;              /* source i's: [unit0[i], unit0[i+1]) */
    const struct eng_check_unit *units;
    const void *area;                 /* where the sources write their CRCs */
    const size_t *area_off;           /* per rank: its head in area */
    struct eng_verify verify;
    int threads;                      /* at most, to check a version */
    int timeout_ms;                   /* longest wait for the GPU's sums */
};
#define ENG_CHECK_THREADS 8
#define ENG_CHECKER_CPUS 4 /* fewer: no checker thread */
/* The target's checker: begin before a version's wait; point(i, every,
 * lo, hi) as a check point of source i comes (its units [lo, hi) have
 * landed: a thread checks those due by every while the rest arrives);
 * finish once every source notified: checks the rest by the every of
 * each source's head (verify's, or 0 where sample's source checks all),
 * on up to `threads` threads, waits for the threads, and fails with
 * FX_ERR_VERIFY naming the first unit that differs (tensor, range,
 * source, version), bad[i] set for each source whose bytes differ. */
struct eng_checker;
fx_status_t eng_checker_open(const struct eng_check_target *a, int nsources,
                             struct eng_checker **out);
void eng_checker_begin(struct eng_checker *c, uint64_t version);
void eng_checker_point(struct eng_checker *c, int i, uint32_t every,
                       uint64_t lo, uint64_t hi);
fx_status_t eng_checker_finish(struct eng_checker *c, uint64_t version,
                               uint64_t *bytes, uint32_t *nchecked,
                               uint8_t *bad);
void eng_checker_close(struct eng_checker *c);

/* ---- FP8 block scales (scales.c) --------------------------------------- */

/* One piece of a scale tensor this source fills, from its piece of the
 * weight: its memory and, on a GPU, its kernel. */
struct eng_scale {
    uint32_t piece, wpiece;       /* its piece and the weight's */
    const void *weight;           /* where the weight's piece is bound */
    float *buf;                   /* host memory, or the weight's device's */
    int device;                   /* -1: host */
    struct mem_scaler *scaler;    /* device: its kernel */
    void *handle;                 /* the caller's, for buf (core: the
                                   * region that registers it) */
};
struct eng_scales {
    struct eng_scale *v;
    size_t n;
};
/* One more (set-up): memory for piece's scales beside weight piece wpiece,
 * bound at weight on device (-1: host), and there its kernel. weight is
 * kept for every push: a session's bindings are fixed once it is set up
 * (fx_session_bind refuses after). *out: the entry, NULL where none was
 * made; one whose memory failed is kept, for eng_scales_free. */
fx_status_t eng_scales_add(struct eng_scales *sc,
                           const struct plan_manifest *m, uint32_t piece,
                           uint32_t wpiece, const void *weight, int device,
                           struct eng_scale **out);
/* Fill them from the weights as they are now (before each push). */
fx_status_t eng_scales_compute(const struct eng_scales *sc,
                               const struct plan_manifest *m);
void eng_scales_free(struct eng_scales *sc);

/* Timing of one version, in seconds. */
struct eng_times {
    double total, pack, post, wait, stall;
    double ready_wait; /* source: for targets to release (flow control) */
    double main_pack;  /* of pack, what the posting thread packed */
    double verify;     /* source: waiting for its checksums (host threads'
                        * direct writes, the GPU's words) before telling */
    uint64_t bytes, writes;
};

/* The source side: a program, its bucket pool and its packer thread. */
struct eng_source;
/* pack_thread: a packer thread fills buckets while the main thread posts,
 * and the main thread packs a host bucket itself when it is due and the
 * packer has not started it; without it the main thread packs each bucket
 * just before posting it. */
fx_status_t eng_source_open(struct fab *f, const struct eng_program *prog,
                            uint64_t bucket_size, int depth, int pack_thread,
                            int timeout_ms, struct eng_source **out);
/* out (per rank; NULL: none): the targets this push leaves out, which
 * see nothing of it, not even a wait for their release (the others of a
 * push to a new process alone, fx_session_push_to; a rank whose process
 * changed under another session). The report's bytes and writes count
 * the targets served. */
fx_status_t eng_source_push(struct eng_source *s, uint64_t version,
                            const uint8_t *out, struct eng_times *t);
/* After a failed push: 0 if only peers failed (the others got the version
 * and later versions skip the failed ones), 1 if this source is unusable. */
int eng_source_broken(const struct eng_source *s);
/* 1 if a packer thread fills the buckets, 0 if the posting thread does. */
int eng_source_threaded(const struct eng_source *s);
/* Checksum each version (check.c) and write target t's CRCs to areas[t]
 * (by p->targets index) before it is told; the source takes c. Under
 * sample the first push checks every unit, and the first after reprove
 * (a target's new process: new keys, new memory). */
fx_status_t eng_source_verify(struct eng_source *s, struct eng_checks *c,
                              const struct eng_dst_bind *areas,
                              struct eng_verify v);
/* No more checksums (before the first push). */
void eng_source_unverify(struct eng_source *s);
void eng_source_reprove(struct eng_source *s);
/* Its checksums (NULL: none), whose areas the caller may move between
 * pushes (a target's new process: fx_session_join). */
const struct eng_checks *eng_source_checks(const struct eng_source *s);
/* The bytes the last push checksummed, and (*sent) of CRCs it wrote. */
uint64_t eng_source_checked(const struct eng_source *s, uint64_t *sent);
/* The bucket pool's bytes (0 without buckets). */
uint64_t eng_source_pool_bytes(const struct eng_source *s);
void eng_source_close(struct eng_source *s);

/* The target side: wait for every source in sources[0..n) to notify
 * version; older notifications and marks are skipped. Hooks (any may be
 * NULL; an error from one ends the wait): arrived(i) as soon as
 * sources[i]'s bytes are all in, marked(i, words) as soon as the writes
 * before one of its marks of this version are in. */
struct eng_target_hooks {
    fx_status_t (*arrived)(int i, void *arg);
    fx_status_t (*marked)(int i, const uint64_t words[3], void *arg);
    void *arg;
};
/* Release version to a source (flow control): it may write the next
 * one. A source that failed is skipped. */
fx_status_t eng_release(struct fab *f, int source, uint64_t version);
fx_status_t eng_release_all(struct fab *f, const int *sources, int n,
                            uint64_t version);
fx_status_t eng_target_wait(struct fab *f, const int *sources, int n,
                            uint64_t version, int timeout_ms,
                            const struct eng_target_hooks *hooks,
                            struct eng_times *t);

/* Sources still missing (done[i] 0) and silent for the whole timeout,
 * named in an FX_ERR_TIMEOUT; FX_OK while every one is heard from. */
fx_status_t eng_name_silent(struct fab *f, const int *sources,
                            const char *done, int n, uint64_t version,
                            uint64_t t0_ms, int timeout_ms);

/* Shadow targets (recv.c): each source's notification is taken as soon
 * as it is complete and held, unreleased, until the version is applied.
 * poll: drive progress once, take what completed, and send a release
 * whose copies have run. ready: the version every source has delivered,
 * 0 while they differ or some have not. wait: until every source has
 * delivered version, releasing older ones unapplied; a newer one is an
 * error. release: forget what is held and release version to every
 * source, now or (copied not NULL) once copied(arg) says the apply's
 * copies have run, checked by later polls; busy while one waits. */
struct eng_recv;
fx_status_t eng_recv_open(struct fab *f, const int *sources, int n,
                          int timeout_ms, struct eng_recv **out);
void eng_recv_close(struct eng_recv *r);
fx_status_t eng_recv_poll(struct eng_recv *r);
uint64_t eng_recv_ready(const struct eng_recv *r);
fx_status_t eng_recv_wait(struct eng_recv *r, uint64_t version,
                          struct eng_times *t);
fx_status_t eng_recv_release(struct eng_recv *r, uint64_t version,
                             int (*copied)(void *arg), void *arg);
int eng_recv_busy(const struct eng_recv *r);

/* Staged CUDA targets (slab.c): a CUDA target region is backed by pinned
 * host memory that peers write into, and copied to the GPU while the
 * version arrives. eng_slabs_arrived and eng_slabs_marked are the
 * target wait's two hooks (arg: the eng_slabs), for message notification
 * and counted writedata; eng_slabs_finish waits for every copy. */
struct eng_slab_region {
    uint32_t id;        /* the target's id of the region */
    void *gpu;          /* the application's device memory */
    const void *host;   /* the pinned memory peers write into */
    int device;
    int all;            /* every source writes the slab; else only those
                         * whose pair's path lacks FI_HMEM (the others
                         * write gpu: a path per pair) */
};
/* Where this rank's target piece lives: regions[region] at off; region
 * -1 for every other piece (a source's, another rank's, not staged). */
struct eng_slab_piece {
    int region;
    uint64_t off;
};
struct eng_slabs_args {
    const struct plan_manifest *m;
    const struct plan *plan;
    int me;
    const int *sources;                  /* ranks this target expects */
    int nsources;
    /* per source: 1 where it marks its writes (the pair counts
     * writedata: eng_slabs_marked uploads as marks come), 0 where its
     * notification is the signal (eng_slabs_arrived uploads it all) */
    const uint8_t *marks_from;
    /* per source: 1 where the pair's path registers CUDA memory, so that
     * it writes the device memory of a region that is not all slab */
    const uint8_t *hmem_from;
    const struct eng_slab_region *regions;
    int nregions;
    const struct eng_slab_piece *pieces; /* per manifest piece */
};
struct eng_slabs;
/* *out stays NULL when there is no staged region. */
fx_status_t eng_slabs_open(const struct eng_slabs_args *a,
                           struct eng_slabs **out);
fx_status_t eng_slabs_arrived(int i, void *slabs);
fx_status_t eng_slabs_marked(int i, const uint64_t words[3], void *slabs);
fx_status_t eng_slabs_finish(struct eng_slabs *ss, double *seconds);
void eng_slabs_close(struct eng_slabs *ss);

#endif
