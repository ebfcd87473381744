/*
 * A tcp rail's connections, found without touching any descriptor but
 * ours: another thread of the process may be closing its own meanwhile (a
 * descriptor's fstat raced a close in the local bootstrap, under
 * ThreadSanitizer). Each socket descriptor's inode comes from its
 * /proc/self/fd link, and which of them are this rail's connections from
 * /proc/self/net/tcp and tcp6 (their addresses). flush.c empties them
 * after a push; progress.c asks whether bytes wait to be read on them.
 * Calls nothing of the fabric's but address lookups.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fabric/fabric_int.h"

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
struct fab_conn *fab_rail_conns(struct fab *f, int rail, int peer, int *n)
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

int fab_conn_live(const struct fab_conn *c)
{
    return c->ino != 0 && fd_inode(c->fd) == c->ino; /* 0: none found */
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
            c = fab_rail_conns(f, rail, -1, &n);
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

        if (fab_conn_live(&f->rx_conns[i]) &&
            ioctl(f->rx_conns[i].fd, FIONREAD, &queued) == 0 && queued > 0)
            return 1;
    }
    return 0;
}
