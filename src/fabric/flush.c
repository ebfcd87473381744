/*
 * What a push or a notification sent must leave this process before the
 * call returns. libfabric 1.17's tcp copies a send that a full socket
 * refused into a staging buffer (or queues an inject) and reports it
 * done, and only a later progress call of ours moves it into the socket.
 * A source that pushed its last version, or trains for a while before
 * the next, then left its targets without the last bytes or the
 * notification (test_serve's last version, never whole, about one CI run
 * in three under ASan; test_p2p's notification in distcheck). So the tcp
 * connections are progressed until none has been short of room for
 * FLUSH_QUIET polls in a row (sock_holding): with room in the socket, a
 * progress call writes whatever tcp held. A peer that stops reading
 * keeps its socket full: past the context's timeout (FLUSH_FAILED_MS once
 * a peer has failed: its failure is named already) the call returns,
 * warning, and the bytes go with the next call.
 *
 * The connections are found without touching any descriptor but ours:
 * another thread of the process may be closing its own meanwhile (a
 * descriptor's fstat raced a close in the local bootstrap, under
 * ThreadSanitizer). Each socket descriptor's inode comes from its
 * /proc/self/fd link, and which of them are this rail's connections from
 * /proc/self/net/tcp and tcp6 (their addresses).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fabric/fabric_int.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/log.h"

/* Room a socket must have for a poll to count as quiet (below). */
#define FLUSH_ROOM 65536
/* Polls in a row with room in every connection that end a flush: a poll
 * writes what tcp held once its socket has room (rxm's deferred queue
 * takes one more); a poll on a crowded host costs tens of us. */
#define FLUSH_QUIET 4
/* How long a flush waits where a peer has failed. */
#define FLUSH_FAILED_MS 100

/* Whether tcp may still hold bytes of ours back from fd: only while the
 * socket could not take another FLUSH_ROOM bytes, or half its buffer if
 * that is smaller (its queue counted twice for the kernel's overhead on
 * each byte), may a write of ours have been refused. An empty socket
 * holds nothing back, however small its buffer (a fixed 24 KiB one kept
 * every push waiting out the timeout). The bytes in the kernel are its
 * own to send: waiting for the socket to empty made every small
 * version's push wait out its transfer, and a delayed ACK. */
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

/* The inode fd's /proc link names, or 0 where it is no socket. */
static unsigned long fd_inode(int fd)
{
    char path[64], link[64];
    unsigned long ino = 0;
    ssize_t n;

    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    if ((n = readlink(path, link, sizeof(link) - 1)) <= 0)
        return 0;
    link[n] = '\0';
    return sscanf(link, "socket:[%lu]", &ino) == 1 ? ino : 0;
}

/* An address of /proc/net/tcp (hex words as the kernel prints them, the
 * port in host order) into out. */
static int proc_addr(const char *hex, int v6, struct sockaddr_storage *out)
{
    unsigned int w[4], port;

    memset(out, 0, sizeof(*out));
    if (!v6) {
        struct sockaddr_in *a = (struct sockaddr_in *)out;

        if (sscanf(hex, "%8X:%4X", &w[0], &port) != 2)
            return -1;
        a->sin_family = AF_INET;
        memcpy(&a->sin_addr, &w[0], 4);
        a->sin_port = htons((uint16_t)port);
        return 0;
    }
    {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)out;

        if (sscanf(hex, "%8X%8X%8X%8X:%4X", &w[0], &w[1], &w[2], &w[3],
                   &port) != 5)
            return -1;
        a->sin6_family = AF_INET6;
        memcpy(&a->sin6_addr, w, 16);
        a->sin6_port = htons((uint16_t)port);
        return 0;
    }
}

/* Whether a connection from local to remote is rail's (peer's alone if
 * peer >= 0): accepted on its listening address, or made to a peer's. */
static int conn_ours(struct fab *f, int rail, int peer,
                     const struct sockaddr_storage *local,
                     const struct sockaddr_storage *remote)
{
    struct fab_rail *r = &f->rails[rail];
    struct sockaddr_storage ours, pa;
    size_t alen;

    memset(&ours, 0, sizeof(ours));
    memcpy(&ours, r->addr, r->addrlen < sizeof(ours) ? r->addrlen
                                                      : sizeof(ours));
    if (peer < 0 && fab_sock_same(local, &ours))
        return 1;
    for (int k = peer < 0 ? 0 : peer; k < (peer < 0 ? f->size : peer + 1);
         k++) {
        if (!f->peers[k].on_rail[rail])
            continue;
        memset(&pa, 0, sizeof(pa));
        alen = sizeof(pa);
        if (fi_av_lookup(r->av, f->peers[k].addr[rail], &pa, &alen) == 0 &&
            fab_sock_same(remote, &pa))
            return 1;
    }
    return 0;
}

/* Keeps, of the socket descriptors c[0..*n), those that are rail's
 * connections (peer's alone if peer >= 0) by the /proc/self/net table
 * at path; found[i] set for each. */
static void conns_listed(struct fab *f, int rail, int peer, const char *path,
                         int v6, const struct fab_conn *c, int n, char *found)
{
    char line[512], la[64], ra[64];
    struct sockaddr_storage local, remote;
    unsigned long ino;
    unsigned int st;
    FILE *in = fopen(path, "r");

    while (in != NULL && fgets(line, sizeof(line), in) != NULL) {
        if (sscanf(line, " %*d: %63s %63s %X %*s %*s %*s %*s %*s %lu", la,
                   ra, &st, &ino) != 4 || st == 0x0a /* LISTEN */ ||
            ino == 0 || proc_addr(la, v6, &local) != 0 ||
            proc_addr(ra, v6, &remote) != 0)
            continue;
        for (int i = 0; i < n; i++)
            if (c[i].ino == ino && !found[i])
                found[i] = (char)conn_ours(f, rail, peer, &local, &remote);
    }
    if (in != NULL)
        fclose(in);
}

/* rail's connections (peer's alone if peer >= 0); their number in *n. */
static struct fab_conn *rail_conns(struct fab *f, int rail, int peer, int *n)
{
    struct fab_conn *c = NULL, *grown;
    DIR *dir = opendir("/proc/self/fd");
    struct dirent *e;
    char *found;
    int cap = 0, k = 0;

    *n = 0;
    while (dir != NULL && (e = readdir(dir)) != NULL) {
        int fd = atoi(e->d_name);
        unsigned long ino;

        if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(dir) ||
            (ino = fd_inode(fd)) == 0)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            if ((grown = realloc(c, (size_t)cap * sizeof(*c))) == NULL)
                break; /* those found so far */
            c = grown;
        }
        c[(*n)++] = (struct fab_conn){fd, ino};
    }
    if (dir != NULL)
        closedir(dir);
    if (*n == 0 || (found = calloc((size_t)*n, 1)) == NULL) {
        *n = 0;
        return c;
    }
    conns_listed(f, rail, peer, "/proc/self/net/tcp", 0, c, *n, found);
    conns_listed(f, rail, peer, "/proc/self/net/tcp6", 1, c, *n, found);
    for (int i = 0; i < *n; i++)
        if (found[i])
            c[k++] = c[i];
    free(found);
    *n = k;
    return c;
}

/* Progress until no connection of c has been short of room for
 * FLUSH_QUIET polls, or the deadline. */
static fx_status_t conns_flush(struct fab *f, const struct fab_conn *c, int n,
                               int wait_ms)
{
    double deadline = clock_now() + wait_ms / 1000.0;
    fx_status_t st;

    for (int quiet = 0; n > 0 && quiet < FLUSH_QUIET;) {
        int holding = 0;

        if ((st = fab_progress(f)) != FX_OK)
            return st;
        for (int i = 0; i < n && !holding; i++)
            holding = fd_inode(c[i].fd) == c[i].ino && sock_holding(c[i].fd);
        quiet = holding ? 0 : quiet + 1;
        if (quiet == 0 && clock_now() > deadline) {
            LOG_WARN("rank %d: a tcp connection still holds unsent bytes "
                     "%d ms after a push or notification; they go with the "
                     "next call", f->rank, wait_ms);
            break;
        }
    }
    return FX_OK;
}

/* How often the receive side lists its connections again: one that
 * opens later is seen that much later. */
#define RX_SCAN_S 0.05

static int rail_rx_polled(struct fab *f, int rail)
{
    const struct fab_profile *p = rail_prof(f, rail);

    return f->rails[rail].ep != NULL && p->polled_rx &&
           p->notify == FAB_NOTIFY_MESSAGE;
}

int fab_rx_waiting(struct fab *f, double now)
{
    if (now - f->rx_scan >= RX_SCAN_S) {
        free(f->rx_conns);
        f->rx_conns = NULL;
        f->nrx_conns = 0;
        for (int rail = 0; rail < f->nrails; rail++) {
            struct fab_conn *c, *all;
            int n;

            if (!rail_rx_polled(f, rail))
                continue;
            c = rail_conns(f, rail, -1, &n);
            /* n > 0: realloc to 0 bytes would free the list */
            all = n > 0 ? realloc(f->rx_conns, (size_t)(f->nrx_conns + n) *
                                                   sizeof(*all))
                        : NULL;
            if (all != NULL) {
                memcpy(all + f->nrx_conns, c, (size_t)n * sizeof(*c));
                f->rx_conns = all;
                f->nrx_conns += n;
            }
            free(c);
        }
        f->rx_scan = now;
    }
    for (int i = 0; i < f->nrx_conns; i++) {
        int queued = 0;

        if (fd_inode(f->rx_conns[i].fd) == f->rx_conns[i].ino &&
            ioctl(f->rx_conns[i].fd, FIONREAD, &queued) == 0 && queued > 0)
            return 1;
    }
    return 0;
}

static int flush_wait_ms(const struct fab *f)
{
    for (int r = 0; r < f->size; r++)
        if (f->peers[r].present && f->peers[r].failed != FX_OK)
            return FLUSH_FAILED_MS;
    return f->timeout_ms;
}

static int rail_tcp(struct fab *f, int rail)
{
    return f->rails[rail].ep != NULL &&
           strcmp(rail_prof(f, rail)->prov, "tcp;ofi_rxm") == 0;
}

fx_status_t fab_flush(struct fab *f)
{
    fx_status_t st = FX_OK;
    int wait_ms = flush_wait_ms(f);

    for (int rail = 0; rail < f->nrails && st == FX_OK; rail++) {
        struct fab_conn *c;
        int n;

        if (!rail_tcp(f, rail))
            continue;
        c = rail_conns(f, rail, -1, &n);
        st = conns_flush(f, c, n, wait_ms);
        free(c);
    }
    return st;
}

fx_status_t fab_flush_peer(struct fab *f, int peer)
{
    fx_status_t st = FX_OK;
    int wait_ms;

    if (peer < 0 || peer >= f->size)
        return err_set(FX_ERR_INVALID, "fab_flush_peer: rank %d", peer);
    wait_ms = flush_wait_ms(f);
    for (int rail = 0; rail < f->nrails && st == FX_OK; rail++) {
        struct fab_peer *p = &f->peers[peer];
        struct fab_conn c = {p->sock_fd[rail], p->sock_ino[rail]};
        struct fab_conn *all;
        int n;

        if (!p->on_rail[rail] || !rail_tcp(f, rail))
            continue;
        /* its connection where we made it (to its listening address),
         * found once and kept while its descriptor names the same socket */
        if (c.fd > 0 && fd_inode(c.fd) == c.ino) {
            st = conns_flush(f, &c, 1, wait_ms);
            continue;
        }
        all = rail_conns(f, rail, peer, &n);
        if (n == 1) {
            p->sock_fd[rail] = all[0].fd;
            p->sock_ino[rail] = all[0].ino;
        } else if (n == 0) { /* it connected to us: every connection */
            free(all);
            all = rail_conns(f, rail, -1, &n);
        }
        st = conns_flush(f, all, n, wait_ms);
        free(all);
    }
    return st;
}
