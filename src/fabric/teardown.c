/*
 * What was sent must leave the process: after each push (fab_flush), and
 * before a rail's endpoint closes, without crashing the provider (what
 * must happen before fi_close, where libfabric needs it).
 */
#include <dirent.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fabric/fabric_int.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/log.h"

/*
 * tcp;ofi_rxm cannot close a connection on which a write with remote CQ
 * data is partly received (its source stopped, partitioned, or still
 * pushing): tcp's close reports that write cancelled, with no context,
 * and rxm reads the context (libfabric 1.17: SIGSEGV in
 * rxm_handle_comp_error, prov/rxm/src/rxm_cq.c:1736, from rxm_close_conn
 * under fi_close of the endpoint). A connection that fails while tcp is
 * reading it drops such a write quietly instead (tcpx_process_remote_write,
 * as when a peer dies). So each socket of the rail is reset first and the
 * queue read until the provider has closed them all, each through its
 * read path; only then is the endpoint closed. A rail whose sockets are
 * not all gone by SETTLE_MS is left open, never progressed again, rather
 * than crash the process.
 *
 * From libfabric 1.18 tcp reports such a write cut short on the read path
 * too (xnet_complete_rx), and rxm crashes the same way during progress,
 * so there tcp;ofi_rxm notifies by message unless writedata is asked for
 * (profile.c) and no write carries CQ data; the reset is then harmless.
 */
#define SETTLE_MS 2000

struct rail_sock {
    int fd;
    ino_t ino;
};

/* a is the address b names; a wildcard b matches any address. */
static int sock_same(const struct sockaddr_storage *a,
                     const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;

        return x->sin_port == y->sin_port &&
               (x->sin_addr.s_addr == y->sin_addr.s_addr ||
                y->sin_addr.s_addr == htonl(INADDR_ANY));
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;

        return x->sin6_port == y->sin6_port &&
               (IN6_ARE_ADDR_EQUAL(&x->sin6_addr, &y->sin6_addr) ||
                IN6_IS_ADDR_UNSPECIFIED(&y->sin6_addr));
    }
    return 0;
}

/* Fabrics open in this process. A socket connected to a peer's listening
 * address is this rail's only where no other fabric of the process may
 * have connected there too (several contexts in one process: unit tests,
 * an application with two jobs): resetting another's connection left this
 * rail waiting for a close its provider never sees, and open. */
static atomic_int fabs_open;

void fab_teardown_count(int delta)
{
    atomic_fetch_add(&fabs_open, delta);
}

/* A connected TCP socket of this rail: accepted on our listening address,
 * or, alone in the process, connected to a peer's. */
static int rail_owns(struct fab *f, int rail, int fd)
{
    struct fab_rail *r = &f->rails[rail];
    struct sockaddr_storage ours, sa, pa;
    socklen_t len = sizeof(sa);
    int type = 0, listening = 1;
    socklen_t olen = sizeof(type);
    size_t alen;

    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &olen) != 0 ||
        type != SOCK_STREAM)
        return 0;
    olen = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &olen) != 0 ||
        listening)
        return 0;
    memset(&ours, 0, sizeof(ours));
    memcpy(&ours, r->addr, r->addrlen < sizeof(ours) ? r->addrlen
                                                      : sizeof(ours));
    if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0 &&
        sock_same(&sa, &ours))
        return 1;
    len = sizeof(sa);
    if (atomic_load(&fabs_open) > 1 ||
        getpeername(fd, (struct sockaddr *)&sa, &len) != 0)
        return 0;
    for (int k = 0; k < f->size; k++) {
        if (!f->peers[k].on_rail[rail])
            continue;
        memset(&pa, 0, sizeof(pa));
        alen = sizeof(pa);
        if (fi_av_lookup(r->av, f->peers[k].addr[rail], &pa, &alen) == 0 &&
            sock_same(&sa, &pa))
            return 1;
    }
    return 0;
}

/* Reset a connection without reading on: connecting to AF_UNSPEC drops
 * what the kernel holds unread (no stray bytes land in regions already
 * deregistered) and resets it; shut down after that, it polls readable
 * and the provider's next read fails, ending the connection there. */
static void sock_abort(int fd)
{
    struct sockaddr sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_family = AF_UNSPEC;
    (void)connect(fd, &sa, sizeof(sa));
    (void)shutdown(fd, SHUT_RDWR);
}

/* The rail's sockets; their count in *n (-1: none could be looked for). */
static struct rail_sock *rail_sockets(struct fab *f, int rail, int *n)
{
    struct rail_sock *socks = NULL, *grown;
    struct dirent *e;
    struct stat sb;
    DIR *dir = opendir("/proc/self/fd");
    int cap = 0;

    *n = dir == NULL ? -1 : 0;
    while (dir != NULL && (e = readdir(dir)) != NULL) {
        int fd = atoi(e->d_name);

        if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(dir) ||
            fstat(fd, &sb) != 0 || !S_ISSOCK(sb.st_mode) ||
            !rail_owns(f, rail, fd))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            if ((grown = realloc(socks, (size_t)cap * sizeof(*socks))) ==
                NULL) {
                *n = -1;
                break;
            }
            socks = grown;
        }
        socks[*n].fd = fd;
        socks[(*n)++].ino = sb.st_ino;
    }
    if (dir != NULL)
        closedir(dir);
    return socks;
}

/* Bytes of fd not yet sent or not yet acknowledged by the peer. */
static int sock_unsent(int fd)
{
    int v = 0;

    return ioctl(fd, SIOCOUTQ, &v) == 0 ? v : 0;
}

/* Whether tcp may still hold bytes of ours back from fd: only while the
 * socket could not take another FLUSH_ROOM bytes, or half its buffer if
 * that is smaller (its queue counted twice for the kernel's overhead on
 * each byte), may a write of ours have been refused: what tcp holds back
 * is a staging buffer (9000 bytes in 1.17) or an inject. An empty socket
 * holds nothing back, however small its buffer (a fixed 24 KiB one kept
 * every push waiting out the timeout). The bytes in the kernel are its
 * own to send: a push does not wait for them (waiting for the socket to
 * empty made every small version's push wait out its transfer, and a
 * delayed ACK). */
#define FLUSH_ROOM 65536
/* Polls in a row with room in every socket that end a push's flush: a
 * poll writes what tcp held once its socket has room (rxm's deferred
 * queue takes one more); a poll on a crowded host costs tens of us. */
#define FLUSH_PUSH_QUIET 4
/* How long a push's flush waits where a peer has failed (below). */
#define FLUSH_FAILED_MS 100

static int sock_holding(int fd)
{
    int queued = 0, room = 0;
    socklen_t len = sizeof(room);

    if (ioctl(fd, SIOCOUTQ, &queued) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &room, &len) != 0)
        return 0; /* gone: nothing of ours waits in it */
    return queued > 0 &&
           2 * (long)queued + (room / 2 < FLUSH_ROOM ? room / 2 : FLUSH_ROOM) >
               (long)room;
}

/* Progress the rail once, dropping what completed: the context is going
 * away. What fi_cq_read returned. */
static ssize_t drop_completions(struct fab_rail *r)
{
    struct fi_cq_data_entry comp[16];
    struct fi_cq_err_entry err;
    ssize_t ret = fi_cq_read(r->cq, comp, 16);

    if (ret == -FI_EAVAIL) {
        memset(&err, 0, sizeof(err));
        fi_cq_readerr(r->cq, &err, 0);
    }
    return ret;
}

/* What this rank sent must reach its peers before the reset, which drops
 * whatever the kernel still holds: a source that closes right after its
 * push (a trainer at its last step) lost the notification still queued in
 * its socket behind the writes, and the target waited out its timeout
 * (test_sync's kill-first over tcp;ofi_rxm on 1.17 every run, its kill
 * and stop on 2.6 about one run in two). So while a socket of the rail
 * holds bytes unsent or unacknowledged (SIOCOUTQ), the provider is
 * progressed, until none has for FLUSH_QUIET polls in a row (tcp may
 * still hold what a full socket refused), for FLUSH_MS at most: a socket
 * toward a peer that stopped reading never drains, and what it holds is
 * lost anyway. A rank with nothing left to send is not progressed at all:
 * what would arrive meanwhile is not wanted, and rxm 1.17 leaked 376
 * bytes reading a connection its peer had just reset (test_errors'
 * stopped peer under ASan, when every rank polled here). */
#define FLUSH_MS 500
#define FLUSH_QUIET 32

static int rail_unsent(const struct rail_sock *socks, int n)
{
    int unsent = 0;

    for (int i = 0; i < n; i++)
        unsent += sock_unsent(socks[i].fd) > 0;
    return unsent;
}

static void rail_flush(struct fab *f, int rail, const struct rail_sock *socks,
                       int n)
{
    struct fab_rail *r = &f->rails[rail];
    double deadline = clock_now() + FLUSH_MS / 1000.0;

    if (rail_unsent(socks, n) == 0)
        return;
    for (int quiet = 0; quiet < FLUSH_QUIET && clock_now() < deadline;) {
        ssize_t ret = drop_completions(r);

        quiet = rail_unsent(socks, n) ? 0 : quiet + 1;
        if (ret <= 0)
            sched_yield();
    }
}

/*
 * tcp may keep the end of a push in this process: libfabric 1.17's tcp
 * copies a send that a full socket refused into a staging buffer (or
 * queues an inject) and reports it done, and only a later progress call
 * of ours moves it into the socket. A source that pushes its last
 * version, or trains for a while before the next, then leaves its
 * targets without the last bytes or the notification (test_serve's last
 * version, never whole, about one CI run in three under ASan). So after
 * a push the tcp rails are progressed until none of their sockets has
 * been short of room for FLUSH_PUSH_QUIET polls in a row (sock_holding):
 * with room in the socket, a progress call writes whatever tcp held. A peer that stops reading keeps its socket full:
 * past the context's timeout the push returns, warning, and the bytes
 * go with the next call (the peer's failure is the next push's to name).
 */
fx_status_t fab_flush(struct fab *f)
{
    fx_status_t st = FX_OK;
    int failed = 0;

    /* A failed peer (a partition, a stopped process) keeps its socket
     * full for good, and its failure is named already: the others' bytes
     * get FLUSH_FAILED_MS, not a second timeout (the fault matrix's
     * partition was named after 6 s, its bound 5). */
    for (int r = 0; r < f->size && !failed; r++)
        failed = f->peers[r].present && f->peers[r].failed != FX_OK;
    for (int rail = 0; rail < f->nrails && st == FX_OK; rail++) {
        double deadline = clock_now() + (failed ? FLUSH_FAILED_MS
                                                : f->timeout_ms) / 1000.0;
        struct rail_sock *socks;
        int n, quiet = 0;

        if (f->rails[rail].ep == NULL ||
            strcmp(rail_prof(f, rail)->prov, "tcp;ofi_rxm") != 0)
            continue;
        socks = rail_sockets(f, rail, &n);
        while (n > 0 && quiet < FLUSH_PUSH_QUIET &&
               (st = fab_progress(f)) == FX_OK) {
            int holding = 0;

            for (int i = 0; i < n && !holding; i++)
                holding = sock_holding(socks[i].fd);
            quiet = holding ? 0 : quiet + 1;
            if (quiet == 0 && clock_now() > deadline) {
                LOG_WARN("rank %d: %s domain %s: a connection still holds "
                         "unsent bytes %d ms after the push; they go with "
                         "the next call", f->rank, rail_prof(f, rail)->prov,
                         f->rails[rail].name,
                         failed ? FLUSH_FAILED_MS : f->timeout_ms);
                break;
            }
        }
        free(socks);
    }
    return st;
}

/* Our connection to peer on rail, where we made it: a socket whose far
 * end is the peer's listening address (kept in the peer, checked by its
 * inode each time); -1 where none is (the peer connected to us). */
static int peer_socket(struct fab *f, int peer, int rail)
{
    struct fab_peer *p = &f->peers[peer];
    struct sockaddr_storage sa, pa;
    struct rail_sock *socks;
    struct stat sb;
    socklen_t len;
    size_t alen = sizeof(pa);
    int n, fd = -1;

    if (p->sock_fd[rail] > 0 && fstat(p->sock_fd[rail], &sb) == 0 &&
        sb.st_ino == p->sock_ino[rail])
        return p->sock_fd[rail];
    memset(&pa, 0, sizeof(pa));
    if (fi_av_lookup(f->rails[rail].av, p->addr[rail], &pa, &alen) != 0)
        return -1;
    socks = rail_sockets(f, rail, &n);
    for (int i = 0; i < n && fd < 0; i++) {
        len = sizeof(sa);
        if (getpeername(socks[i].fd, (struct sockaddr *)&sa, &len) == 0 &&
            sock_same(&sa, &pa)) {
            fd = socks[i].fd;
            p->sock_fd[rail] = fd;
            p->sock_ino[rail] = (unsigned long)socks[i].ino;
        }
    }
    free(socks);
    return fd;
}

/* One socket's flush, as fab_flush's (below). */
static fx_status_t sock_flush(struct fab *f, int fd, double deadline)
{
    fx_status_t st;

    for (int quiet = 0; quiet < FLUSH_PUSH_QUIET;) {
        if ((st = fab_progress(f)) != FX_OK)
            return st;
        quiet = sock_holding(fd) ? 0 : quiet + 1;
        if (quiet == 0 && clock_now() > deadline) {
            LOG_WARN("rank %d: a connection still holds unsent bytes %d ms "
                     "after a notification; they go with the next call",
                     f->rank, f->timeout_ms);
            break;
        }
    }
    return FX_OK;
}

fx_status_t fab_flush_peer(struct fab *f, int peer)
{
    double deadline = clock_now() + f->timeout_ms / 1000.0;
    fx_status_t st = FX_OK;

    if (peer < 0 || peer >= f->size)
        return err_set(FX_ERR_INVALID, "fab_flush_peer: rank %d", peer);
    for (int rail = 0; rail < f->nrails && st == FX_OK; rail++) {
        int fd;

        if (!f->peers[peer].on_rail[rail] || f->rails[rail].ep == NULL ||
            strcmp(rail_prof(f, rail)->prov, "tcp;ofi_rxm") != 0)
            continue;
        if ((fd = peer_socket(f, peer, rail)) < 0)
            return fab_flush(f); /* its connection: every one of ours */
        st = sock_flush(f, fd, deadline);
    }
    return st;
}

/* Whether every socket of the rail ended through the provider's read
 * path and was closed by it (the rail is then safe to close). */
static int rail_settle(struct fab *f, int rail)
{
    struct fab_rail *r = &f->rails[rail];
    double deadline = clock_now() + SETTLE_MS / 1000.0;
    struct rail_sock *socks;
    struct stat sb;
    int n, left;

    if (strcmp(rail_prof(f, rail)->prov, "tcp;ofi_rxm") != 0)
        return 1;
    socks = rail_sockets(f, rail, &n);
    rail_flush(f, rail, socks, n);
    for (int i = 0; i < n; i++)
        sock_abort(socks[i].fd);
    left = n;
    while (left > 0) {
        ssize_t ret = drop_completions(r);

        left = 0;
        for (int i = 0; i < n; i++)
            left += fstat(socks[i].fd, &sb) == 0 &&
                    sb.st_ino == socks[i].ino;
        if (left > 0 && clock_now() > deadline)
            break;
        if (left > 0 && ret <= 0)
            sched_yield();
    }
    free(socks);
    if (n < 0)
        LOG_WARN("rank %d: %s domain %s: its connections could not be "
                 "listed (/proc/self/fd); the endpoint is left open (never "
                 "progressed again), since closing it with a write partly "
                 "received crashes tcp;ofi_rxm", f->rank,
                 rail_prof(f, rail)->prov,
                 r->name);
    else if (left != 0)
        LOG_WARN("rank %d: %s domain %s: %d of %d connection(s) still open "
                 "%d ms after they were shut down; the endpoint is left "
                 "open (never progressed again), since closing it with a "
                 "write partly received crashes tcp;ofi_rxm", f->rank,
                 rail_prof(f, rail)->prov, r->name, left, n, SETTLE_MS);
    return left == 0;
}

void fab_quiesce(struct fab *f)
{
    /* MRs bound to an endpoint (cxi, FI_MR_ENDPOINT) must go before it,
     * so there the endpoint stays. */
    for (int i = 0; f != NULL && i < FAB_RAILS_MAX; i++) {
        struct fab_rail *r = &f->rails[i];

        if (r->ep == NULL || rail_prof(f, i)->ep_bind)
            continue;
        if (!rail_settle(f, i)) {
            /* Left open: its domain stays for the keys and regions that
             * still name it; no fabric marks it for fab_close. */
            r->ep = NULL;
            r->av = NULL;
            r->cq = NULL;
            r->fabric = NULL;
            continue;
        }
        fab_lanes_close(r);
        fi_close(&r->ep->fid);
        r->ep = NULL;
    }
}

