/*
 * State shared by the files of the fabric layer; outside src/fabric only
 * the unit tests and fuzzers that reach its internals include this.
 */
#ifndef FX_FABRIC_INT_H
#define FX_FABRIC_INT_H

#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "fabric/fabric.h"

/* profile.c. Pure: derive a profile from a provider's attributes, or
 * refuse with a reason. runtime_version is fi_version() of the libfabric
 * in use. */
fx_status_t fab_profile_make(const struct fi_info *info,
                             uint32_t runtime_version,
                             const struct fab_tuning *tuning,
                             struct fab_profile *out);
/* dst takes src's notification and what follows from it (delivery
 * completion, plain writes, the source's share of the copies, the
 * reason): a path whose probe failed, or whose FI_HMEM entry notifies
 * differently. */
void fab_profile_take_notify(struct fab_profile *dst,
                             const struct fab_profile *src);

/* A tcp connection of a rail: its descriptor, and the socket's inode
 * that tells the descriptor still names it (conns.c). */
struct fab_conn {
    int fd;
    unsigned long ino;
};

/* conns.c: a rail's connections (peer's alone if peer >= 0), their number
 * in *n; whether c's descriptor still names the socket found (its /proc
 * link's inode); and whether bytes wait to be read on a connection of a
 * rail whose writes land without a completion (message mode over tcp),
 * the rails' connections listed again at most every 50 ms (now:
 * clock_now()). */
struct fab_conn *fab_rail_conns(struct fab *f, int rail, int peer, int *n);
int fab_conn_live(const struct fab_conn *c);
int fab_rx_waiting(struct fab *f, double now);

/* errors.c: the status for a libfabric call that failed with fi_ret (its
 * negative return, or an error entry's positive errno), or otherwise, the
 * caller's own status for that call, where the code says nothing a caller
 * could act on. The message stays the caller's (call name, fi_strerror).
 *
 *   FI_ENOMEM                                  FX_ERR_NOMEM
 *   FI_ENOSYS, FI_EOPNOTSUPP, FI_ENOPROTOOPT,
 *   FI_EBADFLAGS                               FX_ERR_UNSUPPORTED
 *   FI_ETIMEDOUT                               FX_ERR_TIMEOUT
 *   FI_ECONNREFUSED, FI_ECONNRESET,
 *   FI_ECONNABORTED, FI_ENOTCONN, FI_ESHUTDOWN,
 *   FI_EHOSTUNREACH, FI_EHOSTDOWN,
 *   FI_ENETUNREACH, FI_EREMOTEIO               FX_ERR_PEER
 *   FI_EMFILE                                  FX_ERR_SYSTEM
 *   anything else, and 0                       otherwise
 *
 * Left to otherwise on purpose: FI_EAGAIN (every caller retries it while
 * the liveness clock runs, which is what times a peer out), FI_EINVAL and
 * the like (fabxfer's own mistake: FX_ERR_FABRIC), FI_EACCES, FI_EPERM,
 * FI_EKEYREJECTED, FI_ENOKEY (no status says "access"; a registration's
 * otherwise is FX_ERR_REGISTER), FI_EADDRNOTAVAIL and FI_ENETDOWN (a local
 * address or network as often as the peer's), FI_ENODATA (fi_getinfo's "no
 * match", which fab_choose reads itself). A timeout or a peer status given
 * to fab_fail() fails that peer as its own would: FX_ERR_TIMEOUT can be
 * undone by fab_peer_revive, the others cannot. */
fx_status_t fab_status(int fi_ret, fx_status_t otherwise);

/* provider.c: fabxfer's hints for prov (NULL: any), with or without the
 * RMA capabilities, and the API version it asks for. */
struct fi_info *fab_make_hints(const char *prov, int want_rma);
uint32_t fab_api_version(void);
/* fi_getinfo with those hints (RMA wanted), plus FI_HMEM and FI_MR_HMEM
 * with hmem; NULL when nothing matches, with fi_getinfo's code in *ret. */
struct fi_info *fab_query(const char *prov, int hmem, int *ret);
/* Whether this node offers prov at all (with or without RMA). */
int fab_offered(const char *prov);
/* The distinct provider (or, with domains, domain) names of list, as
 * "a, b", or "none". */
void fab_distinct_names(const struct fi_info *list, int domains, char *buf,
                        size_t len);

/* One message between fabxfer endpoints: "everything of epoch seq that I
 * wrote to you is complete; you should count nwrites of it". A mark
 * (CTRL_MARK) says so in the middle of a version, with the caller's three
 * words about what those writes covered; CTRL_ALIVE only says that the
 * sender is still pushing (it is blocked on another peer); CTRL_READY
 * goes the other way, from a target to a source: "I no longer read
 * version tag, write the next one" (flow control; seq is not used: tags
 * only grow), with CTRL_REJECT "and it did not match its checksums". token is the sender's secret from its blob: only a member
 * of the job knows it. */
struct ctrl_msg {
    uint32_t magic;
    int32_t src_rank;
    uint32_t seq;
    uint16_t flags;
    uint16_t session; /* the session whose version tag is (fab_stamp), or
                       * 0: the application's fx_notify, the probe */
    uint64_t nwrites;
    uint64_t tag;
    uint64_t token;
    uint64_t arg[3];
};
#define CTRL_MAGIC 0x66784d33u /* "fxM3" */
#define CTRL_MARK 1u
#define CTRL_ALIVE 2u
#define CTRL_READY 4u
#define CTRL_REJECT 8u /* with CTRL_READY: what it wrote of the version
                        * failed its checksums at the target */
#define CTRL_LEAVE 16u /* a target to a source: it leaves the session */
#define CTRL_NOTE_LEN offsetof(struct ctrl_msg, arg) /* without the words */
/* Notes a peer may have waiting beyond the one its wait takes next: a
 * version is one epoch per target plus at most 76 marks (design.md). */
#define CTRL_SEQ_WINDOW 128u

/* Writedata carries 4 bytes: 8 bits of epoch, 24 bits of source rank. */
#define WD_EPOCHS 256
#define WD_RANK_BITS 24
#define WD_DATA(seq, rank) \
    ((((uint64_t)(seq) % WD_EPOCHS) << WD_RANK_BITS) | (uint64_t)(rank))

enum op_kind { OP_WRITE, OP_SEND, OP_RECV, OP_PROBE };

struct fab_op {
    struct fi_context2 ctx; /* first: op_context points here */
    enum op_kind kind;
    int peer;
    int slot;               /* message buffer index (send, recv) */
    uint64_t *pending;      /* the caller's in-flight counter, or NULL */
    int in_flight;          /* posted, completion not yet read */
    int copy;               /* a write the source copies (source_copies) */
    int abandoned;          /* its peer failed: counted out already */
    struct fab_op *extra_next; /* list of ops added beyond the pool */
    struct fab_op *next;    /* free list */
};

struct pending_note {
    uint32_t seq;
    uint16_t flags;
    uint16_t session;
    uint64_t nwrites;
    uint64_t tag;
    uint64_t arg[3];
};

struct fab_peer {
    fi_addr_t addr[FAB_RAILS_MAX]; /* its endpoint on each rail */
    uint8_t on_rail[FAB_RAILS_MAX]; /* addr[r] is in rail r's AV */
    uint64_t addr_hash[FAB_RAILS_MAX]; /* of addr[r] as its blob gave it */
    int path;                      /* the pair's path (fab_peer_path) */
    int bound;                     /* ... chosen: it stays */
    int present;                   /* on every rail of its path */
    /* tcp: our connection to it on each rail, where we made it (its
     * listening address): fab_flush_peer's; fd 0 unknown */
    int sock_fd[FAB_RAILS_MAX];
    unsigned long sock_ino[FAB_RAILS_MAX];
    /* source side */
    uint32_t send_seq;
    uint64_t writes_posted; /* in the current epoch: those it counts */
    uint64_t copies_out;    /* writes we copy, not completed locally */
    uint64_t copied_bytes;  /* of the large writes to it: those we copied */
    uint64_t counted_bytes; /* ... and those it copied */
    uint64_t outstanding;   /* writes and sends not completed locally */
    uint64_t busy_ms;       /* when outstanding last rose from 0 */
    uint64_t sent_ms;       /* when we last posted anything to it */
    int owed;               /* a push owes it a notification */
    uint16_t tx_session;    /* the session whose versions go to it: */
    uint64_t notified;      /* the last version notified to it, */
    uint64_t released;      /* and the newest it released (CTRL_READY) */
    uint64_t rejected;      /* releases that said its bytes failed their
                             * checksums (CTRL_REJECT), */
    uint64_t rejected_tag;  /* the last of them */
    uint64_t abandoned;     /* its operations counted out, still posted */
    fx_status_t failed;     /* first error seen with this peer */
    int final;              /* ... and it cannot be undone (not a timeout) */
    int replaced;           /* a new process of the rank (fab_peer_replace) */
    uint32_t incarnation;   /* ... how many times it was replaced */
    char errmsg[512];       /* and its detail */
    /* both sides: evidence that it lives (a completion of ours toward it,
     * a message or a write from it), and its secret, from its blob */
    uint64_t heard_ms;
    uint64_t token;
    /* ... and that it moves work along (progress.c): a completion of ours
     * toward it, a write, a notification or a release from it; not a
     * keepalive, nor anything dropped */
    uint64_t moved_ms;
    uint64_t noted;         /* the version of its last notification */
    uint64_t alives;        /* keepalives taken from it (tests read it) */
    /* target side */
    uint16_t rx_session;    /* the session whose notes are taken from it */
    int reject_next;        /* the next release says CTRL_REJECT */
    int left;               /* it left the session (CTRL_LEAVE), or the
                             * application removed it: failed, but no
                             * error of a push */
    uint32_t recv_seq;
    uint64_t counts[WD_EPOCHS];
    uint64_t surplus;       /* writedata beyond what a note announced */
    struct pending_note *notes;
    size_t nnotes, notes_cap;
};

#define CTRL_RECVS 32
#define CTRL_SENDS 16

/* Endpoints for writes where the profile asks for lanes: peer k writes
 * through lane k mod FAB_LANES, so that a hung peer holds back only the
 * peers that share its lane. 16 covers the ranks of a host (shm). */
#define FAB_LANES 16

/* What the completion queue brings that is the messages' (ctrl.c): the
 * message layer fills this table in (ctrl_attach, as the fabric opens)
 * and progress.c, which reads the queue, hands on through it. ctrl.c
 * waits through progress.c (fab_wait_step, the operation pool), so
 * progress.c must not call ctrl.c by name: the table keeps the wait
 * below the messages. */
struct fab_msg_ops {
    /* (re)post receive slot */
    fx_status_t (*post_recv)(struct fab *f, int slot);
    /* a receive completed in slot with len bytes from src */
    void (*arrived)(struct fab *f, int slot, size_t len, fi_addr_t src);
    /* a writedata landed with data */
    void (*writedata)(struct fab *f, uint64_t data, uint64_t now);
    /* every 256 polls while we make progress: keepalives owed */
    void (*keepalive)(struct fab *f, uint64_t now);
};

/* One NIC: its own fabric, domain, queue, address vector and endpoint.
 * Rail 0 also carries the messages. */
struct fab_rail {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    struct fid_ep *lane[FAB_LANES]; /* opened at the first write through
                                     * them (profile's lanes) */
    char name[64];           /* its domain */
    uint8_t addr[FAB_ADDR_MAX];
    size_t addrlen;
    uint64_t bytes;          /* written through it */
    uint64_t writes;         /* ... in so many writes */
    uint64_t source_bytes;   /* ... of which we copied ourselves */
    uint64_t weight;         /* share of the bytes: link speed, or 1 */
    int path;                /* the path it belongs to */
};

/* A path: the rails of one provider and what fabxfer does there. A job
 * on one provider has one path, whose rails are FABXFER_RAILS; a list
 * of providers opens a path of one rail for each that this node offers.
 * A peer's messages, writes and notifications all take its pair's path,
 * by that path's rules. */
struct fab_path {
    struct fab_profile prof;
    int rail0, nrails;       /* rails[rail0 .. rail0 + nrails) */
    int hmem;                /* opened with FI_HMEM entries: CUDA memory
                              * is registered on it (the direct path) */
    char hmem_why[ERR_MSG_MAX]; /* why not */
};

struct fab {
    struct fab_rail rails[FAB_RAILS_MAX];
    int nrails;
    struct fab_path paths[FAB_PATHS_MAX];
    int npaths;
    /* What the layers above see (fab_profile): the one path's profile,
     * or, with several, the tightest of their limits (endpoint.c). */
    struct fab_profile job;
    int rank, size, timeout_ms;
    int copy_targets;        /* fab_copy_targets */
    uint64_t token;          /* our secret: every message we send has it */
    int src_check;           /* FI_SOURCE: the provider names senders */
    struct fab_ctrl_stats drops; /* what arrived and was not acted on */
    const struct fab_msg_ops *msg; /* ctrl.c's, for progress.c */
    uint16_t sessions;       /* session set-ups so far (fab_session_next) */
    uint16_t stamp;          /* the session whose push notifies now, 0 */
    uint64_t peer_cap;       /* most operations in flight to one peer */
    unsigned polls;          /* fab_progress calls, to pace liveness */
    uint64_t moved_ms;       /* our last progress with any peer: keepalives
                              * are sent only while it is recent */
    uint64_t real_ms;        /* fab_clock_ms: the last reading, */
    uint64_t absent_ms;      /* and the gaps left out of it */
    int spin_us;             /* FABXFER_SPIN_US */
    int receiving;           /* fab_receiving */
    struct fab_conn *rx_conns; /* fab_rx_waiting's connections, */
    int nrx_conns;
    double rx_scan;          /* listed at this clock_now() */
    double rx_seen;          /* when bytes last waited on one */
    int crowded;             /* more threads ready than CPUs, as of */
    double crowd_seen;       /* this clock_now() */
    long ncpus;              /* online on this host */
    double idle_since;       /* clock_now() when polls began finding
                              * nothing and nothing was posted; 0: busy */
    struct fab_peer *peers;

    struct fab_op *ops;      /* pool, tx depth + message buffers */
    size_t nops;
    struct fab_op *free_ops;
    struct fab_op *extra_ops;   /* replacements for ops failed peers hold */
    uint64_t outstanding;

    struct ctrl_msg *msgs;   /* nrecvs receive then CTRL_SENDS send */
    int nrecvs;              /* CTRL_RECVS on each path's first rail */
    struct fab_mr msg_mr;
    int send_busy[CTRL_SENDS];
    int repost[CTRL_RECVS * FAB_PATHS_MAX]; /* receives to post again
                                             * (got -FI_EAGAIN) */

    uint64_t next_key;       /* our own keys without FI_MR_PROV_KEY */
    uint64_t nmr;            /* registrations open now, every rail */
    int counted;             /* in teardown.c's count of open fabrics */
    /* The notification probe (rma.c, probe.c): word 0 is what we
     * write, word 1 + r where rank r writes to us (a word per source, so
     * that each pair's bytes are checked alone); peers' keys for theirs,
     * and the outcome of the probe write in flight. */
    uint64_t *probe_buf;
    size_t probe_len;
    struct fab_mr probe_mr;
    struct fab_rkey *probe_rk;   /* per peer, from its blob */
    int probe_state;             /* 0 idle, 1 in flight, 2 done, -1 failed */
    char probe_err[ERR_MSG_MAX];
    int hmem;                    /* some path has FI_HMEM entries */
    char hmem_why[ERR_MSG_MAX];  /* why not all: the first path's reason */
    int (*dead)(void *arg, int rank); /* the launcher's word, or NULL */
    void *dead_arg;
};

/* The rules of the path a rail or a peer is on. */
static inline struct fab_profile *rail_prof(struct fab *f, int rail)
{
    return &f->paths[f->rails[rail].path].prof;
}
static inline struct fab_profile *peer_prof(struct fab *f, int peer)
{
    return &f->paths[f->peers[peer].path].prof;
}
/* The rail that carries a peer's messages: its path's first. */
static inline int peer_rail0(const struct fab *f, int peer)
{
    return f->paths[f->peers[peer].path].rail0;
}
/* The rail a receive slot is posted on. */
static inline int recv_rail(const struct fab *f, int slot)
{
    return f->paths[slot / CTRL_RECVS].rail0;
}
/* endpoint.c: the job's view after the paths' profiles change. */
void fab_job_profile(struct fab *f);

/* provider.c */
/* Each path takes its rails' FI_HMEM entries in place of their plain
 * ones, if want allows and each has one leading to the same decisions;
 * else it keeps the plain ones and says why (paths[p].hmem_why). Before
 * the rails are opened. */
void fab_take_hmem(struct fab *f, enum fab_hmem_want want,
                   int (*gpu_present)(void));
/* Two profiles key, address, bind, describe and (unless any_notify)
 * notify alike. */
int fab_profile_same(const struct fab_profile *a,
                     const struct fab_profile *b, int any_notify);
fx_status_t fab_choose(const char *prov, int single_host,
                       const struct fab_tuning *tuning, struct fi_info **info,
                       struct fab_profile *prof);
/* The fi_info of provider prov for the named domain, or an error that
 * lists the domains prov offers here (or names the provider that owns
 * the domain, when it is another). */
fx_status_t fab_rail_info(const char *prov, const char *domain,
                          struct fi_info **info);
/* Whether provider prov offers the named domain here. */
int fab_offers_domain(const char *prov, const char *domain);
/* FABXFER_RAILS=auto: the domains of prov nearest the GPU at PCI address
 * gpu, as "a,b" in names. */
fx_status_t fab_near_domains(const char *prov, const char *gpu, char *names,
                             size_t len);
/* Ask the provider to name senders (FI_SOURCE) where that is known to be
 * truthful; sets f->src_check. Before the rails are opened. */
void fab_take_source(struct fab *f);
/* lane.c: the endpoint that carries writes to peer on rail: its lane,
 * opened now if need be, where the profile asks for lanes; the rail's own
 * otherwise. */
fx_status_t fab_lane(struct fab *f, int rail, int peer, struct fid_ep **ep);
/* Close the rail's lanes (before its endpoint). */
void fab_lanes_close(struct fab_rail *r);
/* An shm endpoint's own name in info (others: unchanged); -1 without
 * memory. */
int fab_shm_name(const struct fab_profile *prof, struct fi_info *info);
/* teardown.c: a is the address b names; a wildcard b matches any. */
struct sockaddr_storage;
int fab_sock_same(const struct sockaddr_storage *a,
                  const struct sockaddr_storage *b);
/* teardown.c: one more (1) or one fewer (-1) fabric open in the process. */
void fab_teardown_count(int delta);
/* progress.c: the operation pool, progress and liveness */
/* Remember the first failure with a peer; st FX_ERR_TIMEOUT can be undone
 * by the application (fab_peer_revive), any other cannot. */
fx_status_t fab_fail(struct fab *f, int peer, fx_status_t st);
/* Something came from peer at now (ms): it lives. */
void fab_heard(struct fab *f, int peer, uint64_t now);
/* Whether peer may be used: in range, present, not failed, not reported
 * dead by the launcher. */
fx_status_t fab_peer_check(struct fab *f, int peer);
/* Called when something must wait on peer: drive progress once, then say
 * whether to keep waiting (FX_OK), or why not: peer failed, or nothing
 * came from it since max(since_ms, its last sign of life) for the
 * timeout. */
fx_status_t fab_wait_step(struct fab *f, int peer, uint64_t since_ms,
                          const char *what);
/* A free operation, within peer's share of the pool. */
fx_status_t fab_op_get(struct fab *f, int peer, uint64_t since_ms,
                       struct fab_op **out);
void fab_op_put(struct fab *f, struct fab_op *op);
/* One more operation, beyond the pool, on the free list. */
fx_status_t fab_op_extra(struct fab *f);
/* An operation was posted to peer (counters, activity clock). */
void fab_op_posted(struct fab *f, struct fab_op *op, uint64_t *pending);
/* ctrl.c: control messages. ctrl_attach fills f->msg in (fab_open, first
 * of all); the four below are its entries, called by name only from
 * above progress.c (and the fuzz harness). */
void ctrl_attach(struct fab *f);
fx_status_t ctrl_post_recv(struct fab *f, int slot);
/* A receive completed with len bytes from src (FI_ADDR_NOTAVAIL when the
 * provider does not say); a writedata arrived with data. */
void ctrl_arrived(struct fab *f, int slot, size_t len, fi_addr_t src);
void ctrl_writedata(struct fab *f, uint64_t data, uint64_t now);
/* Tell every owed peer not heard from us lately that we still push. */
void ctrl_keepalive(struct fab *f, uint64_t now);
/* rma.c: post the 8-byte probe write to peer's probe buffer as every
 * write goes, through ep (op is the caller's); *call names the libfabric
 * call. */
ssize_t rma_post_probe(struct fab *f, int peer, struct fid_ep *ep,
                       struct fab_op *op, const char **call);
/* mr.c */
fx_status_t mr_reg_access(struct fab *f, void *base, size_t len,
                          uint64_t access, struct fab_mr *out);

#endif
