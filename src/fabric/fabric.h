/*
 * The fabric layer: the only code that includes <rdma/...>. It chooses a
 * provider, turns the provider's attributes into decisions once (profile),
 * opens one endpoint per rail (NIC), registers memory on every rail, deals
 * one-sided writes over the rails and tells targets when they are
 * complete. Callers see one libfabric name only: struct fab_mr is held
 * by value in regions and bindings above, so its per-rail registration
 * handle appears here as an incomplete struct fid_mr pointer that only
 * src/fabric dereferences. Everything built from fi_info (the profile
 * rules) is in fabric_int.h.
 */
#ifndef FX_FABRIC_FABRIC_H
#define FX_FABRIC_FABRIC_H

#include <stddef.h>
#include <stdint.h>

#include "fabxfer.h"
#include "util/error.h"

struct fab;
struct fid_mr;

/* How a target learns that a source's writes have landed. */
enum fab_notify {
    FAB_NOTIFY_WRITEDATA, /* every write carries remote CQ data; the target
                           * counts them against the count in a message */
    FAB_NOTIFY_MESSAGE,   /* delivery-complete writes, all completed locally,
                           * then one message */
};

#define FAB_KEY_MAX 64 /* longest raw key we carry (FI_MR_RAW) */
#define FAB_ADDR_MAX 256 /* longest endpoint address we carry */
#define FAB_RAILS_MAX 4 /* NICs (domains) one context stripes over */
#define FAB_IOV_MAX 8   /* most ranges one write gathers, on each side */

/* What fabxfer does on a provider: decided once from fi_info, in one place
 * (profile.c), and unit-tested with the attributes of providers that no
 * machine here has. */
struct fab_profile {
    char prov[64];
    int virt_addr;        /* FI_MR_VIRT_ADDR: remote address is the VA */
    int prov_key;         /* FI_MR_PROV_KEY: key from fi_mr_key() */
    int raw_key;          /* FI_MR_RAW: key bytes, mapped by the importer */
    int local_desc;       /* FI_MR_LOCAL: pass descriptors of source MRs */
    int ep_bind;          /* FI_MR_ENDPOINT: bind MRs to the ep, enable */
    int hmem_mr;          /* FI_MR_HMEM: device memory needs regattr */
    size_t key_size;      /* bytes of key carried in the blob */
    size_t chunk;         /* largest single write */
    size_t iov_limit;     /* source ranges one write may gather */
    size_t rma_iov_limit; /* target ranges one write may scatter to */
    size_t dev_iov_limit; /* ... source ranges when they are device memory */
    enum fab_notify notify;
    int delivery_complete; /* add FI_DELIVERY_COMPLETE to writes */
    int plain_writes;      /* message without delivery completion: shm's
                            * own queue orders it (profile.c) */
    int manual_progress;
    int lanes;            /* one endpoint per peer for writes: the provider
                           * completes an endpoint's operations in posting
                           * order across peers (shm before 2.5) */
    int polled_rx;        /* a write's bytes land only as the target's
                           * polls read them off its connection (tcp) */
    int source_copies;    /* a share of large writes goes plain, copied by
                           * the source (shm, FABXFER_SHM_COPY; profile.c):
                           * 1 for a source with one target, 2 for any */
    char notify_why[160]; /* why this notification mechanism */
};

/* FABXFER_SHM_COPY, in the order of its words. */
enum fab_shm_copy {
    FAB_SHM_COPY_AUTO,
    FAB_SHM_COPY_TARGET,
    FAB_SHM_COPY_BOTH
};

/* User overrides of the provider's defaults (FABXFER_NOTIFY, _SHM_COPY,
 * _CHUNK_SIZE, _IOV_MAX). */
struct fab_tuning {
    const char *notify; /* "auto", "writedata", "message" */
    size_t chunk;       /* 0: provider default */
    size_t iov_max;     /* 0: the provider's iov limits */
    int shm_copy;       /* enum fab_shm_copy */
};

/* The measured default largest write for a provider, before its limits,
 * and the run length below which packing into a bucket beats a write. */
size_t fab_default_chunk(const char *prov);
size_t fab_default_pack_max(const char *prov);
/* An iov limit lowered to user's (0: none), between 1 and FAB_IOV_MAX,
 * the most a write's arrays hold. */
size_t fab_iov_cap(size_t limit, size_t user);

/* Whether fab_open asks for FI_HMEM: never (FABXFER_GPU_PATH=staged); on
 * the RDMA providers only (efa, verbs, cxi: GPUDirect is what makes
 * registering device memory worth it); or on any provider that offers it
 * (FABXFER_GPU_PATH=direct). Either way only where gpu_present says there
 * is a GPU. */
enum fab_hmem_want { FAB_HMEM_NO, FAB_HMEM_RDMA, FAB_HMEM_ANY };
/* efa, verbs or cxi: what FAB_HMEM_RDMA asks. */
int fab_gpudirect_nic(const char *prov);

/* Paths per pair (path.c): the providers one rank offers, and the one a
 * pair takes. */
#define FAB_PATHS_MAX 4  /* providers one rank offers */
#define FAB_PROV_MAX 64  /* a provider's name, NUL included */
struct fab_paths {
    int n;
    char prov[FAB_PATHS_MAX][FAB_PROV_MAX];
};
/* Parse "shm,efa,tcp;ofi_rxm"; without allow_shm, shm is left out. */
fx_status_t fab_paths_parse(const char *spec, int allow_shm,
                            struct fab_paths *out);
/* A provider's place in the fixed pair order: shm, efa, cxi,
 * verbs;ofi_rxm, any other (by name), tcp;ofi_rxm, tcp. */
int fab_path_order(const char *prov);
/* The index in mine of the path a pair takes: the first in the pair order
 * that both offer (shm only when same_host); -1 if they share none. */
int fab_path_pick(const struct fab_paths *mine, const struct fab_paths *peer,
                  int same_host);
/* "shm,tcp;ofi_rxm", for messages. */
void fab_paths_text(const struct fab_paths *p, char *buf, size_t len);

struct fab_open_args {
    const char *provider; /* NULL: preference order */
    const char *rails;    /* "dom1,dom2": one rail per named domain of the
                           * provider; "auto": those nearest rails_near;
                           * NULL or "": one rail */
    const char *rails_near; /* with "auto": the GPU's PCI address */
    int single_host;      /* shm allowed: all ranks on this host, and
                           * not FABXFER_ISOLATE=1 (ctx.c) */
    int isolate;          /* FABXFER_ISOLATE=1: a list's shm is left out */
    int rank;
    int size;
    int timeout_ms;
    int spin_us;          /* idle polling before naps; < 0: never */
    struct fab_tuning tuning;
    enum fab_hmem_want hmem;
    /* Asked only once the provider qualifies: loading the CUDA driver is
     * start-up time that a host-only job on tcp or shm should not pay. */
    int (*gpu_present)(void);
};

/* provider may be a list ("shm,tcp;ofi_rxm"): then a path is opened
 * for each listed provider this node offers (one rail each, no
 * FABXFER_RAILS), and each peer is bound to one of them as its blob comes
 * in. The list's providers this node lacks are skipped (logged); none at
 * all is an error naming the reason of each. */
fx_status_t fab_open(const struct fab_open_args *args, struct fab **out);
void fab_close(struct fab *f);
/* Close the endpoints before any memory is deregistered, where the
 * provider allows it (teardown.c): on tcp;ofi_rxm every connection is
 * reset first, since closing one with a remote write partly received
 * crashed libfabric 1.17 (a version cut short by a stopped or partitioned
 * source). */
void fab_quiesce(struct fab *f);
/* After a push: progress until what was sent has left the process (tcp
 * may hold the end of it), for the context's timeout at most (then it
 * warns and returns FX_OK: the next call sends the rest). */
fx_status_t fab_flush(struct fab *f);
/* The same for what went to peer alone (fx_notify's): its connection. */
fx_status_t fab_flush_peer(struct fab *f, int peer);
/* The job's profile: the one provider's, or with several paths a merged
 * one whose prov is the list opened ("shm,tcp;ofi_rxm") and whose limits
 * (chunk, iov limits) are the tightest of the paths', which the engine
 * plans with; notify is writedata only if every path's is. */
const struct fab_profile *fab_profile(const struct fab *f);
/* Paths: the providers this rank opened, in its list's order. */
int fab_npaths(const struct fab *f);
void fab_paths_opened(const struct fab *f, struct fab_paths *out);
const struct fab_profile *fab_path_profile(const struct fab *f, int path);
/* The path a rail belongs to. */
int fab_rail_path(const struct fab *f, int rail);
/* Bind peer to path (fab_path_pick's answer) before its addresses go in;
 * a peer bound already to another path is refused. */
fx_status_t fab_peer_path(struct fab *f, int peer, int path);
/* Undo fab_peer_path for a peer none of whose addresses went in. */
void fab_peer_unbind(struct fab *f, int peer);
/* The path peer is bound to, or -1. */
int fab_peer_path_of(const struct fab *f, int peer);
/* 1 where the pair counts writedata (its path's notification), else 0
 * (message, or not bound yet). */
int fab_peer_writedata(const struct fab *f, int peer);
/* Whether peer's path registers CUDA memory here (the pair may move
 * device memory as it is). */
int fab_peer_hmem(const struct fab *f, int peer);
/* Rails: one domain and endpoint per NIC. Rail 0 carries the messages;
 * writes are dealt over all rails. */
int fab_rails(const struct fab *f);
/* A rail's domain name and the bytes written on it so far. */
const char *fab_rail_name(const struct fab *f, int rail);
uint64_t fab_rail_bytes(const struct fab *f, int rail);
uint64_t fab_rail_writes(const struct fab *f, int rail);
/* ... of its bytes, those this rank copied into the target itself (shm's
 * plain writes, FABXFER_SHM_COPY). */
uint64_t fab_rail_source_bytes(const struct fab *f, int rail);
/* A rail's endpoint address, to publish. */
fx_status_t fab_local_addr(struct fab *f, int rail, const void **addr,
                           size_t *len);
fx_status_t fab_peer_insert(struct fab *f, int rank, int rail,
                            const void *addr, size_t len);

/* Registered memory: one registration per rail. */
struct fab_mr_rail {
    struct fid_mr *mr;
    void *base;                /* what is registered: the region's memory,
                                * or (CUDA, a path without FI_HMEM) its
                                * pinned host slab */
    void *desc;
    uint64_t key;              /* the key peers use (not raw) */
    uint8_t key_bytes[FAB_KEY_MAX]; /* what the blob carries */
    size_t key_len;
};
struct fab_mr {
    void *base;
    size_t len;
    int nrails;                /* 0: not registered (base and len only) */
    int device;                /* registered as CUDA device memory */
    struct fab_mr_rail rail[FAB_RAILS_MAX];
};
fx_status_t fab_mr_reg(struct fab *f, void *base, size_t len, int remote_write,
                       struct fab_mr *out);
/* Memory of CUDA device cuda_dev (fi_mr_regattr with FI_HMEM_CUDA) on
 * the rails of every path opened with FI_HMEM (the device's context must
 * be current); on the other paths' rails, host (a pinned slab that peers
 * write into, the staged path) where host is given, else nothing (a
 * staged source is read by the GPU packer only). device_only: a device
 * allocation, not managed memory the host can touch too. An error where
 * no path has FI_HMEM, or where a registration fails: *bad_path is then
 * the path it failed on (-1: none). */
fx_status_t fab_mr_reg_cuda(struct fab *f, void *base, void *host,
                            size_t len, int cuda_dev, int remote_write,
                            int device_only, struct fab_mr *out,
                            int *bad_path);
void fab_mr_dereg(struct fab *f, struct fab_mr *mr);
/* Registrations open now (one per rail each), for leak checks. */
uint64_t fab_mr_count(const struct fab *f);

/* A peer's region, as learned from its blob. */
struct fab_rkey {
    uint64_t base; /* remote address of offset 0: VA or 0 */
    uint64_t len;
    uint64_t key[FAB_RAILS_MAX];
    int mapped[FAB_RAILS_MAX]; /* mapped with fi_mr_map_raw: unmap at close */
};
/* key_bytes holds one key of key_len bytes per rail of path. */
fx_status_t fab_rkey_import(struct fab *f, int path, const uint8_t *key_bytes,
                            size_t key_len, uint64_t base, uint64_t len,
                            struct fab_rkey *out);
void fab_rkey_release(struct fab *f, struct fab_rkey *rk);

/* Writes and notification (rma.c). Remote ranges are checked by the caller
 * against fab_rkey.len before this is called; fab_write checks again. */
/* pending, if not NULL, counts this write's chunks in flight: it grows as
 * they are posted and shrinks as they complete (or fail), so that callers
 * can recycle a buffer once it reaches zero. */
fx_status_t fab_write(struct fab *f, int peer, const struct fab_mr *src,
                      size_t src_off, const struct fab_rkey *dst,
                      uint64_t dst_off, size_t len, uint64_t *pending);
/* One range of a gathering write: len bytes at src_off of mr go to
 * dst_off of the target's region. */
struct fab_span {
    const struct fab_mr *mr;
    uint64_t src_off;
    uint64_t dst_off;
    uint64_t len;
};
/* Neighbouring spans that touch on one side share an iovec there. */
static inline int fab_span_src_touch(const struct fab_span *a,
                                     const struct fab_span *b)
{
    return a->mr == b->mr && a->src_off + a->len == b->src_off;
}
static inline int fab_span_dst_touch(const struct fab_span *a,
                                     const struct fab_span *b)
{
    return a->dst_off + a->len == b->dst_off;
}
/* The iovecs sp[0..n) make on each side, neighbours that touch merged. */
static inline void fab_span_ranges(const struct fab_span *sp, size_t n,
                                   size_t *nsrc, size_t *ndst)
{
    *nsrc = *ndst = n > 0;
    for (size_t i = 1; i < n; i++) {
        *nsrc += !fab_span_src_touch(&sp[i - 1], &sp[i]);
        *ndst += !fab_span_dst_touch(&sp[i - 1], &sp[i]);
    }
}
/* sp[0..n) as one operation, which counts as one write: at most
 * prof.iov_limit source iovecs, prof.rma_iov_limit target ones and
 * prof.chunk bytes (one write per span otherwise). */
fx_status_t fab_writev(struct fab *f, int peer, const struct fab_span *sp,
                       size_t n, const struct fab_rkey *dst,
                       uint64_t *pending);
fx_status_t fab_quiet(struct fab *f, int peer); /* peer -1: all */
/* How many targets this rank writes to, for the share of the large
 * writes it copies itself where their path lets it (FABXFER_SHM_COPY):
 * the more of them, the smaller the share; by default, none beyond one.
 * The last session set up says; 0 (no session) counts as one. */
void fab_copy_targets(struct fab *f, int ntargets);
fx_status_t fab_notify(struct fab *f, int peer, uint64_t tag);
/* Counted writedata only: close the epoch without waiting for anything,
 * so that the target learns, as soon as the writes posted so far to peer
 * have landed, the three words the caller says they covered. A mark never
 * ends a version; fab_notify still does. */
fx_status_t fab_mark(struct fab *f, int peer, uint64_t tag,
                     const uint64_t arg[3]);
fx_status_t fab_wait_notify(struct fab *f, int peer, uint64_t *tag);
/* A target waits for a version, or a progress thread stands for its
 * waits (on 1, off 0; the calls count). Where writes land without a
 * completion of their own (message mode over tcp), only its polls read
 * their bytes off the connection, so its idle polls then do not nap while
 * bytes wait there (progress.c). */
void fab_receiving(struct fab *f, int on);
/* Flow control. Target: tell peer, a source, that version tag is
 * released: nothing reads what it wrote of it any more (CTRL_READY). */
fx_status_t fab_release(struct fab *f, int peer, uint64_t tag);
/* Target: the next release to peer says that its bytes of that version
 * failed their checksums. Source: how many releases from peer said so,
 * and the last such version in *tag. */
void fab_reject_next(struct fab *f, int peer);
uint64_t fab_peer_rejected(const struct fab *f, int peer, uint64_t *tag);
/* Membership. Target: tell peer, a source, that this rank leaves the
 * session (CTRL_LEAVE) and wait until the message is sent. Source: peer
 * left (its message, or the application's word: fab_peer_leave, why in
 * the error of later calls about it); it counts as failed, and pushes
 * skip it without an error. */
fx_status_t fab_leave(struct fab *f, int peer);
void fab_peer_leave(struct fab *f, int peer, const char *why);
int fab_peer_left(const struct fab *f, int peer);
/* A new process of peer (the same rank) is about to be imported in place
 * of the old one, which failed or left: the old addresses leave the
 * address vectors and the pair starts afresh (member.c). FX_ERR_STATE
 * where peer has neither failed nor left, or where operations toward it
 * are still with the provider. A rank never imported needs nothing. */
fx_status_t fab_peer_replace(struct fab *f, int peer);
/* The job grows to size ranks (fx_session_grow): the new ranks are
 * peers never imported; or, smaller, back from a growth that failed: the
 * ranks past size are forgotten (nothing was posted to them). */
fx_status_t fab_resize(struct fab *f, int size);
/* Source: the last version of session notified to peer (0: none, or its
 * versions go to another session now). */
uint64_t fab_peer_notified(const struct fab *f, int peer, uint16_t session);
/* How many times peer's process was replaced: a session set up with an
 * older one no longer writes to it (its program is the old process's). */
uint32_t fab_peer_incarnation(const struct fab *f, int peer);
/* Source: wait until each of peers[0..n) has released the last version
 * notified to it (at once where none was), driving progress. One that
 * has not for the timeout is failed with FX_ERR_TIMEOUT naming it (undone
 * by fab_peer_revive): so a source writes into a target's memory only
 * what the target has freed. FX_OK unless progress itself failed; each
 * peer's outcome is in fab_peer_status. *waited_s: the time spent. */
fx_status_t fab_await_released(struct fab *f, const int *peers, int n,
                               double *waited_s);
/* A notification or a mark, as the target takes it. */
struct fab_note {
    uint64_t tag;
    int mark;
    uint64_t arg[3];
};
/* Without waiting: take the next complete notification or mark from peer
 * if there is one and its tag is at most max_tag (*taken = 1). Otherwise
 * *taken = 0, and note->tag is the waiting one's tag if there is one (left
 * in place for a later call). Fails if the peer has failed. */
fx_status_t fab_try_notify(struct fab *f, int peer, uint64_t max_tag,
                           struct fab_note *note, int *taken);
/* Sessions: versions, their notifications and releases belong to one.
 * fab_session_next numbers a set-up (every rank calls it at each, so the
 * numbers agree); fab_session_begin gives the pairs of that session to it:
 * toward targets, nothing notified or released yet; from sources, only its
 * notes are taken. fab_stamp(s) while a push of session s notifies (0
 * after): its notes carry s and count as versions to release. A message
 * of another session is dropped, counted stale. */
uint16_t fab_session_next(struct fab *f);
void fab_session_begin(struct fab *f, uint16_t session, const int *targets,
                       int ntargets, const int *sources, int nsources);
void fab_stamp(struct fab *f, uint16_t session);
/* fab_try_notify for the session receiving from peer: notes of another
 * session are dropped (counted stale) on the way. */
fx_status_t fab_try_note(struct fab *f, int peer, uint64_t max_tag,
                         struct fab_note *note, int *taken);
/* The first failure recorded with peer (FX_OK if none), its detail in
 * err_last(). */
fx_status_t fab_peer_status(struct fab *f, int peer);
/* Milliseconds (fab_clock_ms) since anything came from peer (a completion
 * of ours toward it, a message, a write), counted from since_ms at the
 * earliest: a wait gives up on a peer only after this reaches the
 * timeout. */
uint64_t fab_peer_quiet_ms(struct fab *f, int peer, uint64_t since_ms);
/* The version of the last notification that arrived from peer (0: none
 * yet), its writes landed or not. */
uint64_t fab_peer_noted(const struct fab *f, int peer);
/* The liveness clock, in ms: time this process spent in the library or
 * near it; gaps of more than 50 ms between polls (the process stopped or
 * descheduled) are left out, so that they never count as a peer's
 * silence. */
uint64_t fab_clock_ms(struct fab *f);
/* A push owes peer a notification (owed 1, at its start) or no longer
 * (0, at its end). While owed, a source that is blocked tells the peer
 * that it lives, so that the target does not give up on it while it
 * waits out another peer. */
void fab_owe(struct fab *f, int peer, int owed);
/* Forget peer's failure if it was a timeout and every operation we had
 * toward it has come back; else FX_ERR_STATE saying why not. Only the
 * application knows when a peer that went silent reads no longer what we
 * write (fabxfer has no back channel yet), so only it may ask. */
fx_status_t fab_peer_revive(struct fab *f, int peer);

/* Control messages carry the sender's secret token, which its blob
 * carries to the peers; a message without the right one is dropped. */
uint64_t fab_token(const struct fab *f);
fx_status_t fab_peer_token(struct fab *f, int peer, uint64_t token);
/* Whether fab_peer_token would accept token, changing nothing. */
fx_status_t fab_peer_token_ok(struct fab *f, int peer, uint64_t token);
/* What arrived and was not acted on: messages from no member (wrong
 * token or source address), malformed ones (length, magic, rank),
 * stale or duplicated sequence numbers, writedata counted beyond what a
 * notification announced. */
struct fab_ctrl_stats {
    uint64_t forged, malformed, stale, surplus;
};
const struct fab_ctrl_stats *fab_ctrl_stats(const struct fab *f);
/* Whether the provider names the sender of each message and writedata
 * (FI_SOURCE), so that those are checked against the sender's address. */
int fab_source_checked(const struct fab *f);
fx_status_t fab_progress(struct fab *f);

/* Whether the last fab_progress found something (a completion, a
 * message, a write): a poller with more to do should poll again before it
 * sleeps. */
int fab_progress_found(const struct fab *f);

/* Operations in flight (not counting those of failed peers). */
uint64_t fab_in_flight(const struct fab *f);

/* Forget every caller counter that operations in flight point to (the
 * caller is about to free them). */
void fab_detach_pending(struct fab *f);

/* Let waits ask the launcher whether a peer is dead: dead(arg, rank)
 * non-zero fails that peer at once instead of at the timeout. */
void fab_set_liveness(struct fab *f, int (*dead)(void *arg, int rank),
                      void *arg);

/* The libfabric this process runs on (fi_version(), which may differ
 * from the headers it was built with), as "major.minor". */
void fab_runtime_version(char *buf, size_t len);

/* Providers offered by this node that pass fabxfer's checks, as
 * "a, b, c" (for error messages and fabxfer-info). */
void fab_list_providers(char *buf, size_t len);
/* What a provider offers here and what fabxfer would do with it
 * (fabxfer-info). With gpu, also try a real registration of gpu_len bytes
 * of CUDA memory of device gpu_dev on its FI_HMEM entry. */
struct fab_desc {
    char prov[64];
    char domain[64];       /* the first entry's domain */
    char domains[256];     /* every domain it offers (FABXFER_RAILS) */
    int offered;           /* the provider exists here */
    int rma;               /* ... with FI_RMA on FI_EP_RDM */
    int usable;            /* ... and passes fab_profile_make() */
    char why[ERR_MSG_MAX]; /* usable: why this notification; else why not */
    char notify[16];
    size_t cq_data_size, max_msg_size, inject_size, chunk;
    size_t iov_limit, rma_iov_limit; /* ranges a write gathers, scatters */
    char mr_mode[128];
    int hmem;              /* has an FI_HMEM entry for fabxfer's hints */
    int gpu_reg;           /* -1: not tried; 0: failed; 1: succeeded */
    char hmem_why[ERR_MSG_MAX];
    /* What the provider does not protect between processes, where it is
     * known ("" elsewhere): shm lets any same-user process of the host
     * read and write memory that was never registered for it. */
    char isolation[256];
};
void fab_describe(const char *prov, void *gpu, size_t gpu_len, int gpu_dev,
                  struct fab_desc *d);
/* The notification probe, between each source and its targets at set-up:
 * the source writes 8 bytes into the target's probe buffer (at the word
 * of the source's rank) the way every write over their path goes
 * (counted writedata, or delivery-complete) and notifies with tag
 * FAB_PROBE_OK, or FAB_PROBE_FAILED with the reason in why when the write
 * failed (cxi's writedata stub before libfabric 2.5 fails only then). The
 * target waits for that notification and checks the word.
 * fab_fallback_message() then switches every later write over provider
 * prov's path to delivery-complete + message, or says why it cannot (a
 * rank without that path has nothing to switch). */
#define FAB_PROBE_OK UINT64_MAX
#define FAB_PROBE_FAILED (UINT64_MAX - 1)
#define FAB_PROBE_WORD 0x66785052u /* "fxPR" */
const struct fab_mr *fab_probe_mr(const struct fab *f);
fx_status_t fab_probe_import(struct fab *f, int peer, int path,
                             const uint8_t *keys, size_t key_len,
                             uint64_t base, uint64_t len);
fx_status_t fab_probe_write(struct fab *f, int peer, int *ok, char *why,
                            size_t len);
fx_status_t fab_fallback_message(struct fab *f, const char *prov,
                                 const char *why);
/* The same for a join's new process, whose sources use messages on
 * prov's path: no error where the path uses them already. */
fx_status_t fab_follow_message(struct fab *f, const char *prov,
                               const char *why);
/* The whole probe, collective over every rank of f: each rank probes the
 * targets[0..ntargets) it writes to, then checks the probes of the
 * sources[0..nsources) that write to it, so that every path a pair of the
 * job uses is tried; every rank learns every verdict through allgather
 * (len bytes from each rank into all, rank by rank), and all fall back to
 * messages on the failed paths together, or fail naming the rank and the
 * reason. A rank may wait out a whole timeout on a silent peer: allgather
 * should wait longer than that. take_part: 0 where this rank's set-up
 * failed already; it then enters the allgather only. */
typedef fx_status_t (*fab_allgather_fn)(void *arg, const void *mine,
                                        size_t len, void *all);
fx_status_t fab_probe_notification(struct fab *f, int take_part,
                                   const int *targets, int ntargets,
                                   const int *sources, int nsources,
                                   fab_allgather_fn allgather, void *arg);
/* Tests only: the probe writes over the path of this provider ("*": any)
 * fail as cxi's stub does. */
extern const char *fab_test_break_probe;
/* Whether some path of this fabric was opened with FI_HMEM, so that
 * fab_mr_reg_cuda may register device memory on it: FX_OK, or an error
 * status with the reason in why. Only a real registration of device
 * memory proves the direct path. */
fx_status_t fab_hmem_probe(struct fab *f, char *why, size_t len);
/* Whether path was opened with FI_HMEM (its pairs may take the direct
 * path); *why (if why) says why not, "" if it was. */
int fab_path_hmem(const struct fab *f, int path, const char **why);
/* The path's pairs stage after all: the first CUDA registration on it
 * failed (why). */
void fab_path_drop_hmem(struct fab *f, int path, const char *why);

#endif
