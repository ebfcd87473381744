/*
 * The session structure behind the public handle, shared by session.c
 * (set-up, wait), push.c (blocking push), report.c and serve.c (updates
 * while serving: shadow receive and apply, the pusher and progress
 * threads), and the files they build on.
 */
#ifndef FX_CORE_SESSION_INT_H
#define FX_CORE_SESSION_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/ctx_int.h"
#include "engine/engine.h"

/* How many times a session's job may grow (fx_session_grow). */
#define FX_GROW_MAX 16

struct bind {
    fx_region_t *region; /* NULL: not bound */
    uint64_t off;
};

/* What a target publishes about its piece of a tensor: by tensor, which
 * every rank names alike however much of the manifest it expanded. */
struct bind_wire {
    uint32_t tensor;
    uint32_t region_id;
    uint64_t off;
    uint32_t staged;   /* BIND_*: where the region is a staged CUDA slab,
                        * whose writes the source marks */
    uint32_t pad;
};

/* A CUDA target region's slab takes the writes of no pair, of the pairs
 * over the paths whose target end lacks FI_HMEM (the blob's rail flag
 * says which), or of every pair. */
enum { BIND_DEVICE, BIND_SLAB_STAGED_PATHS, BIND_SLAB_ALL };
/* Whether a source's writes of a piece so bound land in the target's
 * slab (and are marked), given the target's blob (its FI_HMEM flag). */
static inline int bind_lands_staged(const struct bind_wire *w,
                                    const struct remote_peer *rp)
{
    return w->staged == BIND_SLAB_ALL ||
           (w->staged == BIND_SLAB_STAGED_PATHS && !rp->hmem);
}
/* A bind_wire whose tensor is this gives the source the area of the
 * target's region where its CRCs go (FABXFER_VERIFY; verify.c), its
 * staged field whether the target takes check points. */
#define BIND_CHECKS UINT32_MAX

/* One copy of an apply: [off, off + len) of a shadow region's receive
 * area into the same bytes of its tensors (neighbouring pieces merged). */
struct shadow_run {
    fx_region_t *region;
    uint64_t off, len;
};

struct mem_event;

/* A source's view of one rank of the job (fx_session's seen, by rank). */
struct peer_seen {
    uint32_t incarn;     /* the process of it this source writes to
                          * (fab_peer_incarnation), at set-up or join */
    uint64_t join_v;     /* the version its last new process came in at
                          * (0: none) */
    double join_t;       /* that join's seconds */
    uint8_t gone;        /* left, removed, failed or out, as last seen */
};

struct fx_session {
    fx_ctx_t *ctx;
    const struct plan_manifest *m;
    struct plan_manifest *own_m; /* m, expanded for this rank from a
                                  * compact manifest (freed with the
                                  * session), or NULL */
    struct bind *bind;            /* per manifest piece, this rank's */
    struct eng_src_bind *src;     /* per manifest piece */
    struct eng_dst_bind *dst;     /* per manifest piece */
    struct plan *plan;            /* set-up only: freed once built on */
    struct eng_program prog;
    struct eng_source *source;
    int *sources;                 /* ranks this target expects */
    int nsources;
    uint64_t expect_bytes;
    /* per path: this session's peers over it, and what its sources
     * write to this rank each version (the report's paths) */
    uint32_t path_peers[FAB_PATHS_MAX];
    uint64_t path_expect[FAB_PATHS_MAX];
    int ready, broken;
    int left;                     /* fx_session_leave: this rank is gone */
    uint64_t joined_at;           /* fx_session_join: the sources' last
                                   * version then, its first (if they push
                                   * it: fx_session_push_to) or older */
    uint64_t targets_joined;      /* ... a source's: the ranks taken in */
    double join_s;                /* ... the last one's seconds */
    uint8_t *out;                 /* source, per rank: 1 once another
                                   * process of it came under another
                                   * session (a mask for the push) */
    /* members.c: what this rank has seen of the membership. Source: each
     * rank's (NULL: set-up found no targets); and the changes seen so far
     * (joins, goings). */
    struct peer_seen *seen;
    uint64_t epoch;
    int pushed, waited;
    uint64_t last_pushed, last_waited;
    int held;                     /* live: last_waited not released yet */
    int has_source, has_target;   /* this rank holds such pieces */
    uint16_t gen;                 /* its number among set-ups (ctrl.c) */
    /* the job grew at these ranks (fx_session_grow): each range's
     * targets keep the replicas chosen when they joined (plan_build_
     * split) */
    int splits[FX_GROW_MAX];
    int nsplits;
    struct eng_slabs *slabs;      /* staged CUDA target regions */
    fx_report_t report;
    /* fx_session_refuse or a failed fx_session_bind: this rank's set-up
     * fails with it, on every rank (FX_OK: none) */
    fx_status_t refused;
    char refused_why[ERR_MSG_MAX];

    /* serve.c: a target whose regions are shadows */
    int shadow;                   /* 1: this rank receives into shadows */
    struct eng_recv *recv;
    struct shadow_run *runs;
    size_t nruns;
    int applied;
    uint64_t last_applied;
    int shadow_device;            /* of the CUDA shadows, or -1 */
    struct mem_event *apply_ev;   /* recorded after an apply's copies */
    /* the progress thread */
    pthread_t progress;
    int progress_started;
    _Atomic int progress_quit;
    /* the pusher thread (fx_session_push_start) */
    pthread_t pusher;
    int pusher_started;
    pthread_mutex_t push_mu;
    pthread_cond_t push_cv;
    int push_job;                 /* under push_mu: 1 queued or running */
    int push_quit;
    _Atomic int push_done;        /* the job has finished */
    uint64_t push_version;
    fx_status_t push_status;
    char push_msg[ERR_MSG_MAX];
    int source_device;            /* of CUDA source tensors, or -1 */
    struct mem_event *push_ev;    /* recorded on the caller's stream */
    /* the block scales this source computes for FP8 targets (engine's
     * scales.c; handle: the region that registers each) */
    struct eng_scales scales;

    /* verify.c (FABXFER_VERIFY). Target: the area its sources write their
     * CRCs into, and its units. */
    fx_region_t *check_region;
    void *check_area;
    size_t *check_off;            /* per rank: its head in the area */
    uint32_t *check_nunits;       /* per rank: its units (segments) */
    struct eng_check_unit *check_units;
    size_t *check_unit0;          /* per sources[i]: its units */
    uint64_t rejected;            /* the last version that failed (0: none) */
    uint64_t checked;             /* shadow: the last that passed */
    uint64_t check_bytes;         /* of the last version checked: bytes, */
    uint32_t check_count;         /* units, */
    uint32_t check_failed;        /* sources whose bytes differed */
    double check_s;               /* and its checks' seconds after the
                                   * version was in */
    struct eng_check_target check_target;
    struct eng_checker *checker;
    /* FABXFER_VERIFY=auto: this rank cannot read all it moves (why), and
     * the first rank that could not (-1: none; then nobody checks) */
    int check_cannot;
    char check_why[ERR_MSG_MAX];
    int check_skip;
    /* Source: each target's area (per rank, from its bindings; per
     * program target), and the rejections heard so far. */
    struct eng_dst_bind *check_dst;
    struct eng_dst_bind *check_areas;
    uint64_t check_rejected;
};

/* push.c: what a push refuses before it starts (call names it); a
 * push with the context locked; the error in err_last(). */
fx_status_t session_push_check(const fx_session_t *s, uint64_t version,
                               const char *call);
/* FX_ERR_STATE naming the rank and what it holds, where it holds no piece
 * of role (call: the public call refused). */
fx_status_t session_role_check(const fx_session_t *s, fx_role_t role,
                               const char *call);
/* FX_ERR_INVALID for a version older than the one a joined rank came in
 * at (call: the public call refused). */
fx_status_t session_joined_late(const fx_session_t *s, const char *call,
                                uint64_t version);
fx_status_t session_push_locked(fx_session_t *s, uint64_t version);
/* FX_ERR_INVALID for a NULL session; FX_ERR_STATE, kept as its
 * context's error, where it is not set up (call names the refused
 * call). */
fx_status_t session_ready_check(const fx_session_t *s, const char *call);
/* FX_ERR_STATE where the session is not set up, is broken, or this rank
 * holds no source piece of it (call names the refused call). */
fx_status_t session_source_check(const fx_session_t *s, const char *call);
/* fn on each CUDA device of this context's direct regions with role
 * (FX_REGION_SOURCE or FX_REGION_TARGET), once (ordinals from 64 on at
 * each such region); its first error (push.c, below session.c). */
fx_status_t session_direct_devices(fx_session_t *s, unsigned role,
                                   fx_status_t (*fn)(fx_session_t *s,
                                                     int device));
/* push.c: the work queued on the legacy default stream before a push of
 * direct GPU sources (fx_session_push, fx_session_push_to), done. */
fx_status_t session_sources_ready(fx_session_t *s);
/* The push itself, its checks made, with the context locked: version to
 * the session's targets but those out leaves out (per rank; NULL: none),
 * the report filled. Where only targets failed the session stays usable
 * and version counts as pushed. */
fx_status_t session_push_some(fx_session_t *s, uint64_t version,
                              const uint8_t *out);
/* members.c, a source: note which process of each target it writes to
 * (after set-up), and before each push the targets to leave out: those
 * whose new process joined another session of the context, since this
 * session's program was made for the old one (NULL: none). */
fx_status_t members_track(fx_session_t *s);
const uint8_t *members_out(fx_session_t *s);
/* members.c: count the goings seen since the last look into the epoch
 * (before each push, and before the membership is told); a join's
 * admitted rank t, which came in at version v in t_s seconds. */
void members_note(fx_session_t *s);
void members_joined(fx_session_t *s, int t, uint64_t v, double t_s);
/* report.c: what the rails had carried when a push began
 * (session_rails_now). */
struct rail_use {
    uint64_t bytes[FAB_RAILS_MAX], writes[FAB_RAILS_MAX];
    uint64_t source_bytes[FAB_RAILS_MAX];
};
void session_rails_now(const fx_session_t *s, struct rail_use *u);
/* sent: the rails before a push (a source's report: what the push
 * posted on each path), or NULL (a target's: what it expects per path). */
void session_fill_report(fx_session_t *s, uint64_t version,
                         const struct eng_times *t, uint64_t bytes,
                         const struct rail_use *sent);
/* FABXFER_VERIFY as ranks compare it (set-up's verdicts, a join's heads):
 * the mode, auto in bit 8, and sample's period (0 for the others). */
void session_verify_said(const fx_session_t *s, uint32_t *mode,
                         uint32_t *every);
/* session.c: set-up's steps that a join takes too (join.c): every piece
 * of this rank bound, its target bindings in *wire (malloc'd); after the
 * blobs, this target's sources, units and slabs from the plan; the
 * report's peers per path. */
fx_status_t session_check_bindings(fx_session_t *s,
                                   struct bind_wire **wire, size_t *nwire);
fx_status_t session_setup_target(fx_session_t *s);
/* Source: where target t holds each of its pieces, from the bindings it
 * sent (len bytes of struct bind_wire); then, from s->plan, the program,
 * the pipeline and the checksums (what set-up builds; a grown job again). */
fx_status_t session_take_bindings(fx_session_t *s, int t,
                                  const unsigned char *val, size_t len);
fx_status_t session_source_build(fx_session_t *s);

/* grow.c: a source takes ranks new to the job in (fx_session_grow). */
struct grow_rank {
    int rank;
    const unsigned char *blob;
    size_t blob_len;
    const unsigned char *binds;  /* struct bind_wire, its CRCs' area too */
    size_t binds_len;
};
/* The job grows to size ranks by the n ranks of g, grown the manifest
 * of the job grown: each source takes their blobs and bindings, extends
 * its manifest and, where it writes to them, rebuilds its program (the
 * old targets' writes as they were). admitted[t]: 1 for each new rank it
 * writes to. Fails leaving the session as it was. */
fx_status_t session_grow(fx_session_t *s, const struct plan_manifest *grown,
                         int size, const struct grow_rank *g, int n,
                         unsigned char *admitted);
fx_status_t session_count_peers(fx_session_t *s);
/* peers.c: set-up's exchange of blobs and bindings with the plan's peers
 * (plan NULL where this rank's failed), collective on every rank. *marks
 * (malloc'd, per rank) says whom this rank heard from, for peers_import,
 * which imports their blobs and leaves their bindings in got. */
struct plan;
fx_status_t peers_exchange(fx_session_t *s, const struct plan *plan,
                           const struct bind_wire *wire, size_t nwire,
                           unsigned char **marks, struct fx_gather **got);
fx_status_t peers_import(fx_session_t *s, const unsigned char *marks,
                         struct fx_gather *got);

/* verify.c: the target's area (after the plan, before the blobs go), its
 * binding for source (0: none), its units (after the blobs came); the
 * source's checksums (after eng_source_open); a version's check at the
 * target (FX_ERR_VERIFY, sources told); a source's look at what its
 * targets rejected (after each push). */
fx_status_t verify_area(fx_session_t *s);
int verify_wire(const fx_session_t *s, int source, struct bind_wire *w);
fx_status_t verify_units(fx_session_t *s);
fx_status_t verify_source(fx_session_t *s);
void verify_begin(fx_session_t *s, uint64_t version);
fx_status_t verify_marked(int i, const uint64_t words[3], void *arg);
fx_status_t verify_version(fx_session_t *s, uint64_t version);
void verify_rejections(fx_session_t *s);
/* After the readiness verdicts: under auto, no checks in a session where
 * some rank could not read all it moves. */
void verify_settle(fx_session_t *s);
/* Source: target t's new process gave w for its CRCs' area
 * (fx_session_join); the area must fit its region, as at set-up. The
 * next push then checks every unit under sample too. */
fx_status_t verify_retarget(fx_session_t *s, int t,
                            const struct bind_wire *w);
void verify_close(fx_session_t *s);

/* mdiff.c: the first item where rank r's manifest differs from rank 0's
 * (items0 and items_r of them, as their verdicts said), in words into out;
 * collective on every rank; out empty where a collective failed. */
fx_status_t session_diff_find(fx_session_t *s, uint64_t items0,
                              uint64_t items_r, int r, char *out, size_t len);

/* serve.c: after the plan, on every rank: a target with shadow regions
 * gets its receiver, its apply's copies and, as FABXFER_PROGRESS says, a
 * progress thread. Refuses a mix of live and shadow target regions. */
fx_status_t serve_setup(fx_session_t *s);
/* Stop the session's threads (first in destroy) and free what serve.c
 * holds. */
void serve_close(fx_session_t *s);
/* fx_session_wait of a shadow target: the version in the receive area. */
fx_status_t serve_wait(fx_session_t *s, uint64_t version,
                       struct eng_times *t);

#endif
