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
 * The connections are found as conns.c finds them.
 */
#include <linux/sockios.h>
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
            holding = fab_conn_live(&c[i]) && sock_holding(c[i].fd);
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
        c = fab_rail_conns(f, rail, -1, &n);
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
        if (fab_conn_live(&c)) {
            st = conns_flush(f, &c, 1, wait_ms);
            continue;
        }
        all = fab_rail_conns(f, rail, peer, &n);
        if (n == 1) {
            p->sock_fd[rail] = all[0].fd;
            p->sock_ino[rail] = all[0].ino;
        } else if (n == 0) { /* it connected to us: every connection */
            free(all);
            all = fab_rail_conns(f, rail, -1, &n);
        }
        st = conns_flush(f, all, n, wait_ms);
        free(all);
    }
    return st;
}
