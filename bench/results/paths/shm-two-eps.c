/*
 * Whether one shm pair can have two copiers if it has two endpoints: a
 * plain fi_write is copied by its source (shm's fast path), holding the
 * lock of the target endpoint's region; a delivery-complete write is
 * copied by the target's progress, under the same lock when both go to one
 * endpoint (shm-share-2core.txt: no gain). Here they go to two endpoints of
 * the target, so two regions and two locks. 1 GiB in 8 MiB writes, parent
 * the source, child the target, each with two endpoints in one domain.
 *   cc -O2 shm-two-eps.c -lfabric -o shm-two-eps && ./shm-two-eps [rounds]
 * Modes: plain (all plain writes to endpoint A), dc (all delivery-complete
 * to B), both (alternate chunks: plain to A, delivery-complete to B).
 * SAME_EP=1: the plain writes go to B too, which the target polls all
 * along (one target endpoint: libfabric 1.18 and later copy a plain write
 * without the target's lock).
 * Not part of the build.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define TOTAL (1ul << 30)
#define CHUNK (8ul << 20)
#define DEPTH 64

struct side {
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
    struct fid_ep *ep[2];
    struct fid_cq *cq[2];
    struct fid_mr *mr;
    char *buf;
};

struct card { /* what the target tells the source */
    char name[2][64];
    size_t namelen[2];
    uint64_t base, key;
};

#define TRY(x)                                                               \
    do {                                                                     \
        int r_ = (int)(x);                                                   \
        if (r_ != 0) {                                                       \
            fprintf(stderr, "%s: %s\n", #x, fi_strerror(-r_));               \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

static double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void open_side(struct side *s, struct fi_info *info, uint64_t access)
{
    struct fi_av_attr av = {.type = FI_AV_TABLE};
    struct fi_cq_attr cq = {.format = FI_CQ_FORMAT_CONTEXT, .size = 1024};

    TRY(fi_fabric(info->fabric_attr, &s->fab, NULL));
    TRY(fi_domain(s->fab, info, &s->dom, NULL));
    TRY(fi_av_open(s->dom, &av, &s->av, NULL));
    for (int e = 0; e < 2; e++) {
        char name[64];

        /* a name each: shm's default, the pid, serves one endpoint */
        snprintf(name, sizeof(name), "two_eps_%d_%d", (int)getpid(), e);
        free(info->src_addr);
        info->src_addr = strdup(name);
        info->src_addrlen = strlen(name) + 1;
        TRY(fi_endpoint(s->dom, info, &s->ep[e], NULL));
        TRY(fi_cq_open(s->dom, &cq, &s->cq[e], NULL));
        TRY(fi_ep_bind(s->ep[e], &s->cq[e]->fid, FI_TRANSMIT | FI_RECV));
        TRY(fi_ep_bind(s->ep[e], &s->av->fid, 0));
        TRY(fi_enable(s->ep[e]));
    }
    s->buf = aligned_alloc(4096, TOTAL);
    memset(s->buf, 0x5a, TOTAL);
    TRY(fi_mr_reg(s->dom, s->buf, TOTAL, access, 0, 7, 0, &s->mr, NULL));
}

/* The target: drive both endpoints' progress until the source says stop. */
static void target(struct fi_info *info, int to_src, int from_src)
{
    struct side s = {0};
    struct card c = {0};
    struct fi_cq_entry e[16];
    char b;

    open_side(&s, info, FI_REMOTE_WRITE);
    for (int k = 0; k < 2; k++) {
        c.namelen[k] = sizeof(c.name[k]);
        TRY(fi_getname(&s.ep[k]->fid, c.name[k], &c.namelen[k]));
    }
    c.base = (uint64_t)(uintptr_t)s.buf;
    c.key = fi_mr_key(s.mr);
    if (write(to_src, &c, sizeof(c)) != sizeof(c))
        exit(1);
    fcntl(from_src, F_SETFL, O_NONBLOCK);
    /* Both while the connections form (the warm-up round, until 'w'),
     * then B's only: polling A runs its progress under A's lock, which
     * each plain write holds for its whole copy (TWO_EPS_POLL_A=1: both
     * all along). */
    for (int only_b = 0;;) {
        if (read(from_src, &b, 1) == 1) {
            if (b == 'x')
                break;
            only_b = getenv("TWO_EPS_POLL_A") == NULL &&
                     getenv("SAME_EP") == NULL;
        }
        for (int k = only_b; k < 2; k++)
            fi_cq_read(s.cq[k], e, 16);
    }
    exit(0);
}

static long reap(struct side *s, int k)
{
    struct fi_cq_entry e[16];
    ssize_t n = fi_cq_read(s->cq[k], e, 16);

    return n > 0 ? n : 0;
}

/* One round of 1 GiB: mode 0 plain to A, 1 delivery-complete to B, 2 both
 * alternating. Returns GB/s. */
static double run(struct side *s, fi_addr_t *peer, const struct card *c,
                  int mode)
{
    long out[2] = {0, 0};
    double t0 = now();

    for (size_t o = 0, i = 0; o < TOTAL; o += CHUNK, i++) {
        int k = mode == 2 ? (int)(i & 1) : mode;
        ssize_t r;

        while (out[k] >= DEPTH)
            out[k] -= reap(s, k);
        do {
            if (k == 0)
                r = fi_write(s->ep[0], s->buf + o, CHUNK, NULL, peer[0],
                             c->base + o, c->key, NULL);
            else {
                struct iovec iov = {s->buf + o, CHUNK};
                struct fi_rma_iov rma = {c->base + o, CHUNK, c->key};
                struct fi_msg_rma m = {.msg_iov = &iov, .iov_count = 1,
                                       .addr = peer[1], .rma_iov = &rma,
                                       .rma_iov_count = 1};

                r = fi_writemsg(s->ep[1], &m,
                                FI_COMPLETION | FI_DELIVERY_COMPLETE);
            }
            if (r == -FI_EAGAIN)
                out[k] -= reap(s, k);
        } while (r == -FI_EAGAIN);
        TRY(r);
        out[k]++;
        out[1 - k] -= reap(s, 1 - k);
    }
    while (out[0] > 0 || out[1] > 0)
        for (int k = 0; k < 2; k++)
            out[k] -= reap(s, k);
    return (double)TOTAL / (now() - t0) / 1e9;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    int p2c[2], c2p[2];
    struct fi_info *hints = fi_allocinfo(), *info;
    static const char *names[] = {"plain", "dc", "both"};
    struct side s = {0};
    struct card c;
    fi_addr_t peer[2];
    pid_t child;

    setvbuf(stdout, NULL, _IOLBF, 0);
    hints->caps = FI_RMA;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR;
    hints->fabric_attr->prov_name = strdup("shm");
    TRY(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    if (pipe(p2c) || pipe(c2p))
        return 1;
    if ((child = fork()) == 0)
        target(info, c2p[1], p2c[0]);
    if (read(c2p[0], &c, sizeof(c)) != sizeof(c))
        return 1;
    open_side(&s, info, FI_WRITE);
    for (int k = 0; k < 2; k++)
        if (fi_av_insert(s.av, c.name[k], 1, &peer[k], 0, NULL) != 1)
            return 1;
    if (getenv("SAME_EP") != NULL)
        peer[0] = peer[1];
    run(&s, peer, &c, 2); /* connections form on first use */
    if (write(p2c[1], "w", 1) != 1)
        return 1;
    for (int r = 0; r < rounds; r++)
        for (int m = 0; m < 3; m++)
            printf("round %d  %-5s  %6.2f GB/s\n", r + 1, names[m],
                   run(&s, peer, &c, m));
    if (write(p2c[1], "x", 1) != 1)
        return 1;
    waitpid(child, NULL, 0);
    return 0;
}
