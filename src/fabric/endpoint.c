/*
 * One endpoint per rail, one rail per NIC (FABXFER_RAILS; one by default):
 * open the chosen provider's fabric, domain, completion queue, address
 * vector and endpoint on each; read every rail's completions and turn
 * error completions into errors that name the peer; close in reverse.
 */
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "fabric/fabric_int.h"

#define WRITE_DEPTH_MAX 1024 /* writes in flight, if the provider allows */

uint64_t fab_now_ms(void)
{
    return (uint64_t)(clock_now() * 1000.0);
}

static void op_uncount(struct fab *f, struct fab_op *op)
{
    f->peers[op->peer].outstanding--;
    f->outstanding--;
    if (op->pending != NULL)
        (*op->pending)--;
    op->pending = NULL;
}

void fab_op_posted(struct fab *f, struct fab_op *op, uint64_t *pending)
{
    struct fab_peer *p = &f->peers[op->peer];

    if (p->outstanding++ == 0)
        p->active_ms = fab_now_ms();
    f->outstanding++;
    f->idle_since = 0;
    op->in_flight = 1;
    op->abandoned = 0;
    op->pending = pending;
    if (pending != NULL)
        (*pending)++;
}

/* Remember the first failure with a peer, so that every later call about
 * that peer reports it instead of waiting for a timeout. Its operations
 * in flight are counted out now: their completions may never come, and
 * buffers they hold must return to callers serving the other peers. */
fx_status_t fab_fail(struct fab *f, int peer, fx_status_t st)
{
    if (peer >= 0 && peer < f->size && f->peers[peer].failed == FX_OK) {
        f->peers[peer].failed = st;
        snprintf(f->peers[peer].errmsg, sizeof(f->peers[peer].errmsg), "%s",
                 err_last());
        LOG_WARN("rank %d: giving up on rank %d: %s", f->rank, peer,
                 err_last());
        for (size_t i = 0; i < f->nops; i++) {
            struct fab_op *op = &f->ops[i];

            if (op->in_flight && !op->abandoned && op->peer == peer &&
                op->kind != OP_RECV) {
                op_uncount(f, op);
                op->abandoned = 1;
            }
        }
    }
    return st;
}

uint64_t fab_in_flight(const struct fab *f)
{
    return f->outstanding;
}

const struct fab_profile *fab_profile(const struct fab *f)
{
    return &f->prof;
}

int fab_rails(const struct fab *f)
{
    return f->nrails;
}

const char *fab_rail_name(const struct fab *f, int rail)
{
    return rail >= 0 && rail < f->nrails ? f->rails[rail].name : NULL;
}

uint64_t fab_rail_bytes(const struct fab *f, int rail)
{
    return rail >= 0 && rail < f->nrails ? f->rails[rail].bytes : 0;
}

fx_status_t fab_local_addr(struct fab *f, int rail, const void **addr,
                           size_t *len)
{
    *addr = f->rails[rail].addr;
    *len = f->rails[rail].addrlen;
    return FX_OK;
}

/* A peer is present once its address is in on every rail; a rail that
 * has it already is not asked again (a retry after a failure on a later
 * rail would leave a second entry behind). */
fx_status_t fab_peer_insert(struct fab *f, int rank, int rail,
                            const void *addr, size_t len)
{
    struct fab_rail *r = &f->rails[rail];
    uint8_t padded[sizeof(r->addr)];
    fi_addr_t fa;
    int ret;

    if (rank < 0 || rank >= f->size)
        return err_set(FX_ERR_INVALID, "peer rank %d outside [0, %d)", rank,
                       f->size);
    if (f->peers[rank].present || f->peers[rank].on_rail[rail])
        return FX_OK;
    /* The provider reads as many bytes as its own addresses have: hand it
     * a zero-padded copy, never the blob's bytes past their end. */
    if (len == 0 || len >= sizeof(padded))
        return err_set(FX_ERR_BLOB, "rank %d's address is %zu bytes; %s "
                       "addresses here are %zu", rank, len, f->prof.prov,
                       r->addrlen);
    memset(padded, 0, sizeof(padded));
    memcpy(padded, addr, len);
    ret = fi_av_insert(r->av, padded, 1, &fa, 0, NULL);
    if (ret != 1)
        return err_set(FX_ERR_FABRIC,
                       "fi_av_insert of rank %d's address on domain %s "
                       "failed: %s", rank, r->name,
                       fi_strerror(ret < 0 ? -ret : FI_EINVAL));
    f->peers[rank].addr[rail] = fa;
    f->peers[rank].on_rail[rail] = 1;
    f->peers[rank].present = 1;
    for (int k = 0; k < f->nrails; k++)
        f->peers[rank].present &= f->peers[rank].on_rail[k];
    return FX_OK;
}

fx_status_t fab_op_extra(struct fab *f)
{
    struct fab_op *op = calloc(1, sizeof(*op));

    if (op == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for an operation");
    op->extra_next = f->extra_ops;
    f->extra_ops = op;
    op->next = f->free_ops;
    f->free_ops = op;
    return FX_OK;
}

static void op_free(struct fab *f, struct fab_op *op)
{
    op->next = f->free_ops;
    f->free_ops = op;
}

static void op_done(struct fab *f, struct fab_op *op)
{
    if (!op->abandoned) {
        op_uncount(f, op);
        f->peers[op->peer].active_ms = fab_now_ms();
    }
    op->in_flight = 0;
    op->abandoned = 0;
    if (op->kind == OP_SEND)
        f->send_busy[op->slot] = 0;
    op_free(f, op);
}

static void note_push(struct fab *f, const struct ctrl_msg *m)
{
    struct fab_peer *p;

    if (m->magic != CTRL_MAGIC || m->src_rank < 0 || m->src_rank >= f->size) {
        LOG_WARN("dropping a malformed control message (magic 0x%x, rank "
                 "%d)", m->magic, m->src_rank);
        return;
    }
    p = &f->peers[m->src_rank];
    if (p->nnotes == p->notes_cap) {
        size_t cap = p->notes_cap ? 2 * p->notes_cap : 8;
        struct pending_note *n = realloc(p->notes, cap * sizeof(*n));

        if (n == NULL) {
            fab_fail(f, m->src_rank,
                     err_set(FX_ERR_NOMEM, "no memory for a notification "
                             "from rank %d", m->src_rank));
            return;
        }
        p->notes = n;
        p->notes_cap = cap;
    }
    /* A plain notification's words were not sent: the buffer holds an
     * older message's. */
    p->notes[p->nnotes++] = (struct pending_note){
        m->seq, m->flags, m->nwrites, m->tag, {0, 0, 0}};
    if (m->flags & CTRL_MARK)
        memcpy(p->notes[p->nnotes - 1].arg, m->arg, sizeof(m->arg));
}

static void handle_error(struct fab *f, struct fid_cq *cq)
{
    struct fi_cq_err_entry e;
    struct fab_op *op;
    char prov_msg[256];
    const char *prov_str;
    int peer;

    memset(&e, 0, sizeof(e));
    if (fi_cq_readerr(cq, &e, 0) != 1)
        return;
    op = e.op_context;
    if (op != NULL && op->kind == OP_RECV) {
        if (e.err != FI_ECANCELED) {
            LOG_WARN("message receive failed: %s", fi_strerror(e.err));
            if (rma_post_recv(f, op->slot) != FX_OK)
                LOG_ERROR("%s", err_last());
        }
        return;
    }
    /* fi_cq_strerror may return its own string rather than fill ours. */
    prov_msg[0] = '\0';
    prov_str = fi_cq_strerror(cq, e.prov_errno, e.err_data, prov_msg,
                              sizeof(prov_msg));
    if (prov_str == NULL)
        prov_str = prov_msg;
    if (op == NULL) {
        LOG_WARN("error completion without context: %s (%s)",
                 fi_strerror(e.err), prov_str);
        return;
    }
    peer = op->peer;
    if (op->abandoned) {
        op_done(f, op);
        return;
    }
    if (op->kind == OP_PROBE) {
        /* The probe's failure is the answer sought, not the peer's. */
        snprintf(f->probe_err, sizeof(f->probe_err), "the probe write to "
                 "rank %d completed in error on %s: %s (provider: %s)", peer,
                 f->prof.prov, fi_strerror(e.err), prov_str);
        f->probe_state = -1;
        op_done(f, op);
        return;
    }
    err_set(FX_ERR_PEER, "%s to rank %d failed on %s: %s (provider: %s)",
            op->kind == OP_WRITE ? "write" : "message", peer, f->prof.prov,
            fi_strerror(e.err), prov_str);
    fab_fail(f, peer, FX_ERR_PEER);
    op_done(f, op);
}

/* Read one rail's completions until its queue is empty; *found says
 * whether there were any. */
static fx_status_t drain(struct fab *f, struct fid_cq *cq, int *found)
{
    struct fi_cq_data_entry ev[16];
    fx_status_t st;
    ssize_t n;

    for (;;) {
        n = fi_cq_read(cq, ev, 16);
        if (n == -FI_EAGAIN)
            return FX_OK;
        *found = 1;
        if (n == -FI_EAVAIL) {
            handle_error(f, cq);
            continue;
        }
        if (n < 0)
            return err_set(FX_ERR_FABRIC, "fi_cq_read failed on %s: %s",
                           f->prof.prov, fi_strerror((int)-n));
        for (ssize_t i = 0; i < n; i++) {
            struct fab_op *op = ev[i].op_context;

            /* A peer's fi_writedata landed here: count it for its epoch. */
            if ((ev[i].flags & FI_REMOTE_CQ_DATA) &&
                !(ev[i].flags & FI_RECV)) {
                uint64_t src = ev[i].data & ((1u << WD_RANK_BITS) - 1);
                uint64_t epoch = (ev[i].data >> WD_RANK_BITS) % WD_EPOCHS;

                if (src < (uint64_t)f->size)
                    f->peers[src].counts[epoch]++;
                continue;
            }
            if (op == NULL)
                continue;
            if (op->kind == OP_RECV) {
                note_push(f, &f->msgs[op->slot]);
                /* A lost receive would silence notifications for good. */
                if ((st = rma_post_recv(f, op->slot)) != FX_OK)
                    return st;
            } else {
                if (op->kind == OP_PROBE)
                    f->probe_state = 2;
                op_done(f, op);
            }
        }
        if (n < 16)
            return FX_OK;
    }
}

#define CROWD_CHECK_S 1e-3 /* how often /proc/loadavg is read */
#define NAP_ALWAYS_S 1e-3  /* idle this long: nap even on a quiet host */

/* Whether this host has more threads ready to run than CPUs: the fourth
 * field of /proc/loadavg is "running/total", running counting the reader.
 * Read at most every millisecond; unreadable means not crowded. */
static int crowded(struct fab *f, double now)
{
    char buf[128];
    const char *p = buf;
    ssize_t n;
    long running;
    int fd;

    if (now - f->crowd_seen < CROWD_CHECK_S)
        return f->crowded;
    f->crowd_seen = now;
    f->crowded = 0;
    if ((fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC)) < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    for (int field = 0; field < 3 && p != NULL; field++)
        if ((p = strchr(p, ' ')) != NULL)
            p++;
    if (p != NULL && sscanf(p, "%ld/", &running) == 1)
        f->crowded = running > f->ncpus;
    return f->crowded;
}

/* A poll found nothing. It gives way at once to any thread ready on this
 * core. Where threads ready to run outnumber the CPUs (a packer thread, a
 * sender and a receiver on two cores), one that only spins holds a core
 * that another needs: 100,000 x 4 KiB over tcp on two cores spent 60 % of
 * the sender's core polling while the packer and the receiver shared the
 * other, because a yield only lets in threads queued on the same core.
 * So after FABXFER_SPIN_US with nothing completed or posted, the wait
 * naps, which leaves its core idle, and only an idle core makes the
 * kernel move a queued thread onto it. On a host with cores to spare a
 * nap only adds latency (on 16 cores, GPU buckets ran 16 % slower), so
 * there the wait spins, and naps only after a millisecond of idleness
 * (a target waiting for the next version). */
static void idle(struct fab *f)
{
    double now, idle_s;

    if (f->spin_us < 0) {
        sched_yield();
        return;
    }
    now = clock_now();
    if (f->idle_since == 0)
        f->idle_since = now;
    idle_s = now - f->idle_since;
    if (idle_s >= NAP_ALWAYS_S || (idle_s * 1e6 >= f->spin_us &&
                                   crowded(f, now)))
        nanosleep(&(struct timespec){0, 20000}, NULL);
    else
        sched_yield();
}

fx_status_t fab_progress(struct fab *f)
{
    fx_status_t st;
    int found = 0;

    /* Any peer whose writes stopped completing is failed here, whoever
     * polls: its writes are counted out and the others go on. */
    if ((++f->polls & 255) == 0)
        fab_fail_stalled(f);
    for (int slot = 0; slot < CTRL_RECVS; slot++)
        if (f->repost[slot] && (st = rma_post_recv(f, slot)) != FX_OK)
            return st;
    /* Every rail: writedata and write completions land where the write
     * went. */
    for (int r = 0; r < f->nrails; r++)
        if ((st = drain(f, f->rails[r].cq, &found)) != FX_OK)
            return st;
    if (found)
        f->idle_since = 0;
    else
        idle(f);
    return FX_OK;
}

/* shm names its shared-memory file after the pid by default; a rank killed
 * earlier leaves that file behind, and a new process that inherits the pid
 * then fails fi_enable with EBUSY. A name of our own avoids the clash. */
static int unique_shm_name(struct fab *f, struct fi_info *info)
{
    struct timespec ts;
    char name[64];

    if (strcmp(f->prof.prov, "shm") != 0)
        return 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(name, sizeof(name), "fabxfer_%d_%lld_%ld", (int)getpid(),
             (long long)ts.tv_sec, ts.tv_nsec);
    free(info->src_addr);
    info->src_addr = strdup(name);
    if (info->src_addr == NULL)
        return -1;
    info->src_addrlen = strlen(name) + 1;
    return 0;
}

static fx_status_t open_rail(struct fab *f, struct fab_rail *r)
{
    struct fi_cq_attr cq_attr;
    struct fi_av_attr av_attr;
    int ret;

#define FAB_TRY(call, what)                                                  \
    do {                                                                     \
        ret = (call);                                                        \
        if (ret != 0)                                                        \
            return err_set(FX_ERR_FABRIC, "%s failed on %s, domain %s: %s",  \
                           what, f->prof.prov, r->name, fi_strerror(-ret));  \
    } while (0)

    snprintf(r->name, sizeof(r->name), "%s",
             r->info->domain_attr->name ? r->info->domain_attr->name : "?");
    /* Chunks are dealt by link speed where the provider knows it. */
    r->weight = r->info->nic && r->info->nic->link_attr &&
                        r->info->nic->link_attr->speed > 0
                    ? r->info->nic->link_attr->speed
                    : 1;
    FAB_TRY(fi_fabric(r->info->fabric_attr, &r->fabric, NULL), "fi_fabric");
    FAB_TRY(fi_domain(r->fabric, r->info, &r->domain, NULL), "fi_domain");
    memset(&cq_attr, 0, sizeof(cq_attr));
    cq_attr.format = FI_CQ_FORMAT_DATA;
    cq_attr.wait_obj = FI_WAIT_NONE;
    cq_attr.size = r->info->tx_attr->size + r->info->rx_attr->size;
    FAB_TRY(fi_cq_open(r->domain, &cq_attr, &r->cq, NULL), "fi_cq_open");
    memset(&av_attr, 0, sizeof(av_attr));
    av_attr.type = FI_AV_TABLE;
    av_attr.count = (size_t)f->size;
    FAB_TRY(fi_av_open(r->domain, &av_attr, &r->av, NULL), "fi_av_open");
    if ((ret = unique_shm_name(f, r->info)) != 0)
        return err_set(FX_ERR_NOMEM, "no memory for the shm endpoint name");
    FAB_TRY(fi_endpoint(r->domain, r->info, &r->ep, NULL), "fi_endpoint");
    FAB_TRY(fi_ep_bind(r->ep, &r->av->fid, 0), "fi_ep_bind(av)");
    FAB_TRY(fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV),
            "fi_ep_bind(cq)");
    FAB_TRY(fi_enable(r->ep), "fi_enable");
#undef FAB_TRY
#if HAVE_DECL_FI_OPT_MAX_RMA_SIZE
    {
        size_t max_rma = 0, optlen = sizeof(max_rma);

        /* libfabric >= 1.22: a per-endpoint cap below max_msg_size. */
        if (fi_getopt(&r->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MAX_RMA_SIZE,
                      &max_rma, &optlen) == 0 &&
            max_rma > 0 && max_rma < f->prof.chunk)
            f->prof.chunk = max_rma;
    }
#endif
    r->addrlen = sizeof(r->addr);
    ret = fi_getname(&r->ep->fid, r->addr, &r->addrlen);
    if (ret != 0)
        return err_set(FX_ERR_FABRIC, "fi_getname failed on %s, domain %s: "
                       "%s", f->prof.prov, r->name, fi_strerror(-ret));
    return FX_OK;
}

/* FABXFER_RAILS: one rail per named domain of the chosen provider, the
 * first replacing the domain fab_choose() took. Every rail must lead to
 * the same decisions (keys, addressing, notification) as the first. */
static fx_status_t choose_rails(struct fab *f, const char *list)
{
    char buf[512], *save = NULL, *name;
    fx_status_t st;

    if (snprintf(buf, sizeof(buf), "%s", list) >= (int)sizeof(buf))
        return err_set(FX_ERR_INVALID, "FABXFER_RAILS is too long");
    for (name = strtok_r(buf, ",", &save); name != NULL;
         name = strtok_r(NULL, ",", &save)) {
        struct fi_info *info = NULL;
        struct fab_profile prof;
        struct fab_tuning tuning = {
            f->prof.notify == FAB_NOTIFY_MESSAGE ? "message" : "auto",
            f->prof.chunk};
        int k = f->nrails;

        for (int j = 0; j < k; j++)
            if (strcmp(f->rails[j].info->domain_attr->name, name) == 0)
                return err_set(FX_ERR_INVALID, "FABXFER_RAILS names "
                               "domain \"%s\" twice", name);
        if (k == FAB_RAILS_MAX)
            return err_set(FX_ERR_INVALID, "FABXFER_RAILS: at most %d "
                           "rails", FAB_RAILS_MAX);
        if ((st = fab_rail_info(f->prof.prov, name, &info)) != FX_OK)
            return st;
        if ((st = fab_profile_make(info, fi_version(), &tuning, &prof)) !=
                FX_OK ||
            !fab_profile_same(&prof, &f->prof)) {
            fi_freeinfo(info);
            return st != FX_OK ? err_prefix(st, "FABXFER_RAILS: domain %s",
                                            name)
                               : err_set(FX_ERR_INVALID, "FABXFER_RAILS: "
                                         "domain %s keys, addresses or "
                                         "notifies differently from the "
                                         "first rail", name);
        }
        /* Every rail writes at most what the smallest one can take. */
        if (prof.chunk < f->prof.chunk)
            f->prof.chunk = prof.chunk;
        if (k == 0) {
            fi_freeinfo(f->rails[0].info);
            f->rails[0].info = info;
        } else {
            f->rails[k].info = info;
        }
        f->nrails = k + 1;
    }
    if (f->nrails == 0)
        return err_set(FX_ERR_INVALID, "FABXFER_RAILS=\"%s\" names no "
                       "domain", list);
    return FX_OK;
}

static fx_status_t open_ops_and_msgs(struct fab *f)
{
    size_t depth = f->rails[0].info->tx_attr->size;
    fx_status_t st;

    if (depth == 0 || depth > WRITE_DEPTH_MAX)
        depth = WRITE_DEPTH_MAX;
    f->nops = depth + CTRL_RECVS + CTRL_SENDS;
    f->peer_cap = depth / 2 > 8 ? depth / 2 : 8;
    f->ops = calloc(f->nops, sizeof(*f->ops));
    f->msgs = calloc(CTRL_RECVS + CTRL_SENDS, sizeof(*f->msgs));
    if (f->ops == NULL || f->msgs == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %zu operations", f->nops);
    for (size_t i = CTRL_RECVS; i < f->nops; i++)
        op_free(f, &f->ops[i]);
    st = mr_reg_access(f, f->msgs,
                       (CTRL_RECVS + CTRL_SENDS) * sizeof(*f->msgs),
                       FI_SEND | FI_RECV, &f->msg_mr);
    if (st != FX_OK)
        return st;
    for (int i = 0; i < CTRL_RECVS; i++) {
        f->ops[i].kind = OP_RECV;
        f->ops[i].slot = i;
        st = rma_post_recv(f, i);
        if (st != FX_OK)
            return st;
    }
    return FX_OK;
}

fx_status_t fab_open(const struct fab_open_args *args, struct fab **out)
{
    struct fab *f;
    fx_status_t st;

    f = calloc(1, sizeof(*f));
    if (f == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the fabric state");
    f->rank = args->rank;
    f->size = args->size;
    f->timeout_ms = args->timeout_ms;
    f->spin_us = args->spin_us;
    f->ncpus = sysconf(_SC_NPROCESSORS_ONLN);
    f->stall_ms = args->timeout_ms / 2 > 0 ? args->timeout_ms / 2 : 1;
    f->next_key = 1;
    f->peers = calloc((size_t)args->size, sizeof(*f->peers));
    if (f->peers == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory for %d peers", args->size);
        goto fail;
    }
    if (args->size > (1 << WD_RANK_BITS)) {
        st = err_set(FX_ERR_INVALID, "%d ranks: at most %d are supported",
                     args->size, 1 << WD_RANK_BITS);
        goto fail;
    }
    st = fab_choose(args->provider, args->single_host, &args->tuning,
                    &f->rails[0].info, &f->prof);
    if (st != FX_OK)
        goto fail;
    f->nrails = 1;
    if (args->rails != NULL && args->rails[0] != '\0') {
        char near[512];
        const char *list = args->rails;

        if (args->rails_near != NULL) {
            if ((st = fab_near_domains(f->prof.prov, args->rails_near, near,
                                       sizeof(near))) != FX_OK)
                goto fail;
            list = near;
        }
        f->nrails = 0;
        if ((st = choose_rails(f, list)) != FX_OK) {
            f->nrails = f->nrails ? f->nrails : 1;
            goto fail;
        }
    }
    fab_take_hmem(f, args->hmem, args->gpu_present);
    for (int r = 0; r < f->nrails; r++) {
        if ((st = open_rail(f, &f->rails[r])) != FX_OK)
            goto fail;
    }
    st = open_ops_and_msgs(f);
    if (st != FX_OK)
        goto fail;
    f->probe_rk = calloc((size_t)f->size, sizeof(*f->probe_rk));
    if (f->probe_rk == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory for %d probe keys", f->size);
        goto fail;
    }
    st = mr_reg_access(f, f->probe_buf, sizeof(f->probe_buf),
                       FI_WRITE | FI_REMOTE_WRITE, &f->probe_mr);
    if (st != FX_OK)
        goto fail;
    LOG_INFO("rank %d: provider %s, fabric %s, domain %s (%d rail(s)); %s "
             "addressing, %s keys%s%s; writes up to %zu bytes, %zu source "
             "and %zu target ranges; notify: %s (%s)", f->rank, f->prof.prov,
             f->rails[0].info->fabric_attr->name, f->rails[0].name,
             f->nrails,
             f->prof.virt_addr ? "virtual-address" : "offset",
             f->prof.prov_key ? "provider" : "fabxfer",
             f->prof.local_desc ? ", local descriptors" : "",
             f->prof.ep_bind ? ", MRs bound to the endpoint" : "",
             f->prof.chunk, f->prof.iov_limit, f->prof.rma_iov_limit,
             f->prof.notify == FAB_NOTIFY_WRITEDATA ? "writedata" : "message",
             f->prof.notify_why);
    *out = f;
    return FX_OK;
fail:
    fab_close(f);
    return st;
}

void fab_close(struct fab *f)
{
    if (f == NULL)
        return;
    /* MRs before the endpoints: cxi (FI_MR_ENDPOINT) requires it. */
    fab_mr_dereg(f, &f->msg_mr);
    fab_mr_dereg(f, &f->probe_mr);
    for (int i = 0; f->probe_rk != NULL && i < f->size; i++)
        fab_rkey_release(f, &f->probe_rk[i]);
    free(f->probe_rk);
    for (int i = 0; i < FAB_RAILS_MAX; i++) {
        struct fab_rail *r = &f->rails[i];

        if (r->ep)
            fi_close(&r->ep->fid);
        if (r->av)
            fi_close(&r->av->fid);
        if (r->cq)
            fi_close(&r->cq->fid);
        if (r->domain)
            fi_close(&r->domain->fid);
        if (r->fabric)
            fi_close(&r->fabric->fid);
        fi_freeinfo(r->info);
    }
    for (int i = 0; f->peers != NULL && i < f->size; i++)
        free(f->peers[i].notes);
    free(f->peers);
    while (f->extra_ops != NULL) {
        struct fab_op *op = f->extra_ops;

        f->extra_ops = op->extra_next;
        free(op);
    }
    free(f->ops);
    free(f->msgs);
    free(f);
}

const struct fab_mr *fab_probe_mr(const struct fab *f)
{
    return &f->probe_mr;
}

fx_status_t fab_probe_import(struct fab *f, int peer, const uint8_t *keys,
                             size_t key_len, uint64_t base)
{
    if (peer < 0 || peer >= f->size)
        return err_set(FX_ERR_INVALID, "peer rank %d outside [0, %d)", peer,
                       f->size);
    fab_rkey_release(f, &f->probe_rk[peer]);
    return fab_rkey_import(f, keys, key_len, base, sizeof(f->probe_buf),
                           &f->probe_rk[peer]);
}

fx_status_t fab_fallback_message(struct fab *f, const char *why)
{
    struct fab_tuning tuning = {"message", f->prof.chunk};
    struct fab_profile prof;
    fx_status_t st;

    /* A probe that failed in message mode failed the fallback itself. */
    if (f->prof.notify == FAB_NOTIFY_MESSAGE)
        return err_set(FX_ERR_UNSUPPORTED, "the notification probe failed "
                       "in message mode (%s): no mechanism is left", why);
    st = fab_profile_make(f->rails[0].info, fi_version(), &tuning, &prof);
    if (st != FX_OK)
        return err_set(FX_ERR_UNSUPPORTED, "the notification probe failed "
                       "(%s) and there is no fallback: %s", why, err_last());
    f->prof.notify = prof.notify;
    f->prof.delivery_complete = prof.delivery_complete;
    snprintf(f->prof.notify_why, sizeof(f->prof.notify_why), "the writedata "
             "probe failed at set-up, so delivery-complete writes + message");
    LOG_WARN("rank %d: notification probe failed (%s); falling back to "
             "delivery-complete writes + message", f->rank, why);
    return FX_OK;
}
