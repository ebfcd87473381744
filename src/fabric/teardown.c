/*
 * Closing a rail's endpoint without crashing the provider or losing what
 * was sent: what must happen before fi_close, where libfabric needs it.
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

/* a is the address b names; a wildcard b matches any address (flush.c
 * finds its connections with it too). */
int fab_sock_same(const struct sockaddr_storage *a,
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
        fab_sock_same(&sa, &ours))
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
            fab_sock_same(&sa, &pa))
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

