/*
 * A target rank comes back (fx_session_join): a new process of a rank
 * that failed or left takes its place in a running session, between
 * versions; or ranks new to the job join it as it grows (fx_session_grow
 * on the sources: grow.c). It is a small collective of the session's
 * sources and the new processes, through the application's allgather over
 * that group; the other targets take no part. Round one: each member
 * gives a head, a source its blob and where the job grew, a new process
 * its bindings; each checks the others' (one fabxfer, one manifest, one
 * FABXFER_VERIFY, nobody refusing). Round two: a new process plans as the
 * sources did and gives its blob and where each source's CRCs go; the
 * sources take the rank's new address and keys in place of the old ones,
 * whose address leaves their address vectors (or, growing, extend their
 * manifest, plan and program), and the new process sets up its receive
 * side as set-up would. Round three: the verdicts, so that every member
 * fails if one did, naming it; a source then keeps the rank out.
 *
 * The sources' program, built at set-up, is kept as it is: only the keys
 * it points at change. So a new process keeps what the program follows:
 * the manifest, its pieces bound at the same offsets of the same region
 * ids, its path (docs/design.md, "Membership").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/session_int.h"
#include "util/clock.h"
#include "util/log.h"

#define JOIN_MAGIC 0x4e4a5846u /* "FXJN" */
#define JOIN_WHY 240
#define JOIN_SIZE_MAX (1 << 24) /* the fabric's most ranks */

enum { JOIN_SOURCE = 1, JOIN_NEW = 2 };

/* A source's path and whether it fell back to messages at set-up: the new
 * process follows it (there is no probe in a join). */
struct join_path {
    char prov[FAB_PROV_MAX];
    uint32_t message;
    uint32_t pad;
};

/* Each member's message: this head, its blob, then (a new process) its
 * bindings and, for each source that checks, where its CRCs go. */
struct join_head {
    uint32_t magic, role;
    int32_t rank, status;    /* status < 0: it refuses, why says why */
    int32_t size, pad0;      /* the job's ranks as it knows them */
    uint64_t version, hash;  /* fabxfer's, the manifest's */
    uint32_t verify_mode, verify_every;
    uint32_t checking;       /* source: its versions carry checksums */
    uint32_t gen;            /* source: the session's number */
    uint64_t pushed;         /* source: the last version it pushed */
    uint64_t blob_len, nwire, nchecks;
    uint32_t npaths, nsplits;  /* source: the job grew at splits[] */
    int32_t splits[FX_GROW_MAX];
    struct join_path paths[FAB_PATHS_MAX];
    char why[JOIN_WHY];
};

struct join_check {
    int32_t source;
    uint32_t pad;
    struct bind_wire w;
};

struct member {
    struct join_head h;
    const unsigned char *blob, *wire, *checks; /* unaligned: memcpy */
};

struct join {
    fx_session_t *s;
    const struct plan_manifest *grown; /* fx_session_grow's, or NULL */
    struct boot *group;
    int size, index;
    struct fx_gather *all, *all2; /* rounds one's and two's messages */
    struct member *mem;
    unsigned char *admitted; /* source: ranks taken back, per rank */
    int failed;              /* another member failed before round two */
};

/* Round two's message: a new process's status after its plan, and where
 * each source's CRCs go (struct join_check each); a source's, empty. */
struct join_areas {
    int32_t status;
    uint32_t nchecks;
    uint64_t blob_len;       /* the new process's blob, after the checks */
};

/* Never called: a join's collectives are allgathers. */
static int no_barrier(void *arg)
{
    (void)arg;
    return FX_ERR_STATE;
}

static void head_init(const fx_session_t *s, int role, struct join_head *h)
{
    memset(h, 0, sizeof(*h));
    h->magic = JOIN_MAGIC;
    h->role = (uint32_t)role;
    h->rank = s->ctx->rank;
    h->size = s->ctx->size;
    h->version = fx_version();
    h->hash = manifest_hash(s->m);
    session_verify_said(s, &h->verify_mode, &h->verify_every);
}

static void head_refuse(struct join_head *h, fx_status_t st)
{
    h->status = st;
    snprintf(h->why, sizeof(h->why), "%s", err_last());
}

/* A message: h, then blen bytes of body, which is freed either way. */
static fx_status_t join_message(const struct join_head *h, void *body,
                                size_t blen, unsigned char **out,
                                size_t *len)
{
    *len = sizeof(*h) + blen;
    if ((*out = malloc(*len)) == NULL) {
        free(body);
        return err_set(FX_ERR_NOMEM, "no memory for a join message");
    }
    memcpy(*out, h, sizeof(*h));
    if (blen > 0)
        memcpy(*out + sizeof(*h), body, blen);
    free(body);
    return FX_OK;
}

/* A source's word: the session's number, its last version, its paths;
 * growing, the hash of the manifest the job grows by. */
static fx_status_t source_says(const struct join *j, unsigned char **out,
                               size_t *len)
{
    fx_session_t *s = j->s;
    struct join_head h;
    void *blob = NULL;
    size_t blen = 0;
    fx_status_t st;

    head_init(s, JOIN_SOURCE, &h);
    if (j->grown != NULL)
        h.hash = manifest_hash(j->grown);
    if ((st = blob_encode(s->ctx, &blob, &blen)) != FX_OK) {
        head_refuse(&h, st);
        blen = 0;
    }
    h.gen = s->gen;
    h.pushed = s->pushed ? s->last_pushed : 0;
    h.nsplits = (uint32_t)s->nsplits;
    for (int k = 0; k < s->nsplits; k++)
        h.splits[k] = s->splits[k];
    if (j->grown != NULL && s->nsplits < FX_GROW_MAX) /* and now */
        h.splits[h.nsplits++] = s->ctx->size;
    h.checking = s->check_areas != NULL && s->check_skip < 0;
    h.npaths = (uint32_t)fab_npaths(s->ctx->fab);
    for (uint32_t p = 0; p < h.npaths; p++) {
        const struct fab_profile *q = fab_path_profile(s->ctx->fab, (int)p);

        snprintf(h.paths[p].prov, sizeof(h.paths[p].prov), "%s", q->prov);
        h.paths[p].message = q->notify == FAB_NOTIFY_MESSAGE;
    }
    h.blob_len = blen;
    return join_message(&h, blob, blen, out, len);
}

/* The new process, before its blob goes: what set-up does up to the
 * plan, which waits for the sources' word on how the job grew. */
static fx_status_t new_prepare(fx_session_t *s, struct bind_wire **wire,
                               size_t *nwire)
{
    fx_status_t st;

    if (s->refused != FX_OK)
        return err_set(s->refused, "%s", s->refused_why);
    if ((st = manifest_validate(s->m, s->ctx->size)) != FX_OK)
        return st;
    return session_check_bindings(s, wire, nwire);
}

/* The new process's word: its bindings; its blob comes in round two,
 * with the CRCs' area its plan adds. */
static fx_status_t new_says(fx_session_t *s, unsigned char **out,
                            size_t *len)
{
    struct bind_wire *wire = NULL;
    struct join_head h;
    size_t nwire = 0;
    fx_status_t st;

    head_init(s, JOIN_NEW, &h);
    if ((st = new_prepare(s, &wire, &nwire)) != FX_OK) {
        head_refuse(&h, st);
        nwire = 0;
    }
    h.nwire = nwire;
    return join_message(&h, wire, nwire * sizeof(*wire), out, len);
}

/* The new process after round one: its plan, as the sources made theirs
 * (the job grew where they say), and where each source's CRCs go. */
static fx_status_t new_plan(struct join *j, struct join_check **chk,
                            size_t *nchk)
{
    fx_session_t *s = j->s;
    const struct join_head *f = NULL;
    fx_status_t st;

    for (int i = 0; i < j->size; i++) {
        const struct join_head *h = &j->mem[i].h;

        if (h->role != JOIN_SOURCE)
            continue;
        if (f == NULL)
            f = h;
        else if (h->nsplits != f->nsplits ||
                 memcmp(h->splits, f->splits,
                        f->nsplits * sizeof(*f->splits)) != 0)
            return err_set(FX_ERR_INVALID, "sources %d and %d saw the job "
                           "grow differently (%u and %u times)", f->rank,
                           h->rank, f->nsplits, h->nsplits);
    }
    s->nsplits = (int)f->nsplits; /* read_members found a source */
    for (int k = 0; k < s->nsplits; k++)
        s->splits[k] = f->splits[k];
    if ((st = plan_build_split(s->m, s->ctx->size, s->ctx->rank, s->splits,
                               s->nsplits, &s->plan)) != FX_OK ||
        (st = verify_area(s)) != FX_OK)
        return st;
    if ((*chk = calloc((size_t)s->ctx->size, sizeof(**chk))) == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %d ranks' checksum "
                       "areas", s->ctx->size);
    for (int r = 0; r < s->ctx->size; r++)
        if (verify_wire(s, r, &(*chk)[*nchk].w))
            (*chk)[(*nchk)++].source = r;
    return FX_OK;
}

/* What came, read as hostile input would be; then one fabxfer, one
 * manifest, one FABXFER_VERIFY, no refusal, one member per rank. */
static fx_status_t read_members(struct join *j)
{
    const struct join_head *me = &j->mem[j->index].h;
    int refused = -1, sources = 0, news = 0;
    char why[JOIN_WHY + 1];

    for (int i = 0; i < j->size; i++) {
        struct member *m = &j->mem[i];
        size_t l = j->all->len[i], need;

        if (l < sizeof(m->h))
            return err_set(FX_ERR_BOOTSTRAP, "member %d of the join sent "
                           "%zu bytes, not a join message", i, l);
        memcpy(&m->h, j->all->val[i], sizeof(m->h));
        need = sizeof(m->h) + m->h.blob_len;
        if (m->h.magic != JOIN_MAGIC || m->h.blob_len > l ||
            m->h.nwire > l / sizeof(struct bind_wire) ||
            m->h.nchecks > l / sizeof(struct join_check) ||
            (need += m->h.nwire * sizeof(struct bind_wire) +
                     m->h.nchecks * sizeof(struct join_check)) != l ||
            m->h.npaths > FAB_PATHS_MAX || m->h.nsplits > FX_GROW_MAX ||
            m->h.nchecks != 0 || m->h.rank < 0 ||
            m->h.size < 1 || m->h.size > JOIN_SIZE_MAX ||
            m->h.rank >= (m->h.size > j->s->ctx->size ? m->h.size
                                                        : j->s->ctx->size) ||
            (m->h.role != JOIN_SOURCE && m->h.role != JOIN_NEW))
            return err_set(FX_ERR_BOOTSTRAP, "member %d of the join sent "
                           "%zu bytes that are not a join message of a "
                           "rank of this job", i, l);
        m->blob = j->all->val[i] + sizeof(m->h);
        m->wire = m->blob + m->h.blob_len;
        m->checks = m->wire + m->h.nwire * sizeof(struct bind_wire);
        m->h.why[JOIN_WHY - 1] = '\0';
    }
    for (int i = 0; i < j->size; i++) {
        const struct member *m = &j->mem[i];

        for (int k = 0; k < i; k++)
            if (j->mem[k].h.rank == m->h.rank)
                return err_set(FX_ERR_INVALID, "members %d and %d of the "
                               "join are both rank %d", k, i, m->h.rank);
        if (m->h.version != me->version)
            return err_set(FX_ERR_STATE, "rank %d runs fabxfer version "
                           "0x%llx, rank %d 0x%llx", m->h.rank,
                           (unsigned long long)m->h.version, me->rank,
                           (unsigned long long)me->version);
        if (m->h.status != FX_OK) {
            if (refused < 0)
                refused = i;
            continue;
        }
        if (m->h.hash != me->hash)
            return err_set(FX_ERR_INVALID, "rank %d holds a different "
                           "manifest than rank %d (hash %016llx, not "
                           "%016llx)", m->h.rank, me->rank,
                           (unsigned long long)m->h.hash,
                           (unsigned long long)me->hash);
        if (m->h.verify_mode != me->verify_mode ||
            m->h.verify_every != me->verify_every)
            return err_set(FX_ERR_INVALID, "rank %d checks versions with "
                           "FABXFER_VERIFY mode %u (every %u), rank %d with "
                           "%u (every %u): every rank must agree",
                           m->h.rank, m->h.verify_mode, m->h.verify_every,
                           me->rank, me->verify_mode, me->verify_every);
        sources += m->h.role == JOIN_SOURCE;
        news += m->h.role == JOIN_NEW;
        if (m->h.role == JOIN_NEW && m->h.rank >= j->s->ctx->size &&
            j->s->ready && j->grown == NULL)
            return err_set(FX_ERR_INVALID, "rank %d is new to the job (of "
                           "%d ranks): the sources take it in with "
                           "fx_session_grow and the manifest that gives it "
                           "pieces", m->h.rank, j->s->ctx->size);
    }
    if (refused >= 0) {
        const struct member *m = &j->mem[refused];

        snprintf(why, sizeof(why), "%s", m->h.why);
        return err_set(m->h.status < 0 && m->h.status >= FX_ERR_VERIFY
                           ? (fx_status_t)m->h.status : FX_ERR_PEER,
                       "rank %d refused the join: %s", m->h.rank, why);
    }
    if (sources == 0 || news == 0)
        return err_set(FX_ERR_INVALID, "a join of %d source(s) and %d new "
                       "process(es): it needs both", sources, news);
    return FX_OK;
}

/* ---- the new process ------------------------------------------------- */

/* Its sources' blobs in, their paths' notification followed. */
static fx_status_t arrive_sources(struct join *j, uint16_t *gen,
                                  uint64_t *pushed, int *checking)
{
    fx_session_t *s = j->s;
    int first = -1;
    fx_status_t st;

    *pushed = 0;
    *checking = 1;
    for (int i = 0; i < j->size; i++) {
        const struct member *m = &j->mem[i];

        if (m->h.role != JOIN_SOURCE)
            continue;
        if (first < 0)
            first = i;
        if (m->h.gen != j->mem[first].h.gen)
            return err_set(FX_ERR_INVALID, "ranks %d and %d are sources of "
                           "different sessions (set-ups %u and %u): a join "
                           "goes to one session's sources",
                           j->mem[first].h.rank, m->h.rank,
                           j->mem[first].h.gen, m->h.gen);
        if ((st = blob_decode_import(s->ctx, m->blob, m->h.blob_len,
                                     m->h.rank)) != FX_OK)
            return err_prefix(st, "the blob of rank %d", m->h.rank);
        for (uint32_t p = 0; p < m->h.npaths; p++) {
            char prov[FAB_PROV_MAX];

            snprintf(prov, sizeof(prov), "%s", m->h.paths[p].prov);
            if (m->h.paths[p].message &&
                (st = fab_follow_message(s->ctx->fab, prov,
                                         "the sources fell back at "
                                         "set-up")) != FX_OK)
                return st;
        }
        if (m->h.pushed > *pushed)
            *pushed = m->h.pushed;
        *checking &= m->h.checking != 0;
    }
    if (first < 0) /* read_members saw to it */
        return err_set(FX_ERR_INVALID, "a join without sources");
    *gen = (uint16_t)j->mem[first].h.gen;
    return FX_OK;
}

static fx_status_t arrive(struct join *j)
{
    fx_session_t *s = j->s;
    int checking, in;
    uint16_t gen = 0;
    uint64_t pushed;
    fx_status_t st;

    if ((st = arrive_sources(j, &gen, &pushed, &checking)) != FX_OK ||
        (st = session_setup_target(s)) != FX_OK)
        return st;
    for (int i = 0; i < s->nsources; i++) {
        in = 0;
        for (int k = 0; k < j->size; k++)
            in |= j->mem[k].h.role == JOIN_SOURCE &&
                  j->mem[k].h.rank == s->sources[i];
        if (!in)
            return err_set(FX_ERR_INVALID, "rank %d writes to rank %d in "
                           "this session, and is not in the join",
                           s->sources[i], s->ctx->rank);
    }
    if (!checking && s->checker != NULL) {
        LOG_INFO("rank %d: its sources send no checksums in this session "
                 "(FABXFER_VERIFY=auto found a rank that cannot read all "
                 "it moves): nothing is checked here", s->ctx->rank);
        eng_checker_close(s->checker);
        s->checker = NULL;
    }
    if ((st = session_count_peers(s)) != FX_OK)
        return st;
    s->gen = gen;
    fab_session_begin(s->ctx->fab, gen, NULL, 0, s->sources, s->nsources);
    if ((st = serve_setup(s)) != FX_OK)
        return st;
    s->joined_at = pushed;
    s->epoch++; /* its own join, the one change a new process has seen */
    LOG_INFO("rank %d joins the session of %d source(s) at version %llu",
             s->ctx->rank, s->nsources, (unsigned long long)pushed);
    return FX_OK;
}

/* ---- a source --------------------------------------------------------- */

/* The new process's binding of tensor, if it gave one. */
static int wire_of(const struct member *m, uint32_t tensor,
                   struct bind_wire *w)
{
    for (size_t k = 0; k < m->h.nwire; k++) {
        memcpy(w, m->wire + k * sizeof(*w), sizeof(*w));
        if (w->tensor == tensor)
            return 1;
    }
    return 0;
}

/* Whether piece p is m's rank's and this source writes it (s->dst). */
static int writes_piece(const fx_session_t *s, const struct member *m,
                        uint32_t p)
{
    return s->m->pieces[p].rank == m->h.rank &&
           s->m->pieces[p].role == FX_TARGET && s->dst[p].rk != NULL;
}

/* The new process binds each piece this source writes where the old one
 * did (the program's writes go there). */
static fx_status_t same_bindings(const fx_session_t *s, const struct member *m)
{
    const struct plan_manifest *pm = s->m;
    char ebuf[ERR_ESC_MAX];
    struct bind_wire w;

    for (uint32_t p = 0; p < pm->npieces; p++) {
        const struct eng_dst_bind *d = &s->dst[p];
        const char *name = pm->tensors[pm->pieces[p].tensor].name;

        if (!writes_piece(s, m, p))
            continue;
        if (!wire_of(m, pm->pieces[p].tensor, &w))
            return err_set(FX_ERR_BLOB, "rank %d's new process gave no "
                           "binding for its piece of tensor \"%s\"",
                           m->h.rank, err_esc(ebuf, name));
        if (w.region_id != d->region || w.off != d->off)
            return err_set(FX_ERR_INVALID, "rank %d's new process binds "
                           "tensor \"%s\" at offset %llu of its region %u, "
                           "the old one at %llu of region %u: a new process "
                           "binds its pieces where the old one did",
                           m->h.rank, err_esc(ebuf, name),
                           (unsigned long long)w.off, w.region_id,
                           (unsigned long long)d->off, d->region);
    }
    return FX_OK;
}

/* After the blob (whose FI_HMEM flag decides where slabs take writes):
 * each piece lands as it did, and the CRCs' area. */
static fx_status_t retarget(fx_session_t *s, const struct member *m)
{
    const struct remote_peer *rp = &s->ctx->remote[m->h.rank];
    const struct plan_manifest *pm = s->m;
    struct join_check c;
    struct bind_wire w;
    int staged;

    for (uint32_t p = 0; p < pm->npieces; p++) {
        if (!writes_piece(s, m, p) || !wire_of(m, pm->pieces[p].tensor, &w))
            continue; /* same_bindings found each */
        staged = bind_lands_staged(&w, rp);
        if (staged != s->dst[p].staged)
            return err_set(FX_ERR_INVALID, "rank %d's new process takes "
                           "tensor %u %s, the old one %s: a new process "
                           "moves GPU memory as the old one did "
                           "(FABXFER_GPU_PATH)", m->h.rank, w.tensor,
                           staged ? "staged" : "directly",
                           staged ? "directly" : "staged");
    }
    if (s->check_areas == NULL || s->check_skip >= 0)
        return FX_OK;
    for (size_t k = 0; k < m->h.nchecks; k++) {
        memcpy(&c, m->checks + k * sizeof(c), sizeof(c));
        if (c.source == s->ctx->rank)
            return verify_retarget(s, m->h.rank, &c.w);
    }
    return err_set(FX_ERR_BLOB, "rank %d's new process gave no area for "
                   "the checksums of the versions it gets from rank %d",
                   m->h.rank, s->ctx->rank);
}

static fx_status_t admit(struct join *j)
{
    fx_session_t *s = j->s;
    fx_status_t st;

    if ((j->admitted = calloc((size_t)s->ctx->size, 1)) == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %d ranks",
                       s->ctx->size);
    for (int i = 0; i < j->size; i++) {
        const struct member *m = &j->mem[i];
        int t = m->h.rank;
        size_t k;

        if (m->h.role != JOIN_NEW)
            continue;
        k = eng_target_index(&s->prog, t);
        if (k >= (size_t)s->prog.ntargets || s->prog.targets[k] != t)
            continue; /* nothing of ours goes to it */
        if ((st = same_bindings(s, m)) != FX_OK ||
            (st = blob_import_replace(s->ctx, m->blob, m->h.blob_len, t)) !=
                FX_OK)
            return st;
        j->admitted[t] = 1;
        s->targets_joined++;
        if (s->seen != NULL) {
            s->seen[t].incarn = fab_peer_incarnation(s->ctx->fab, t);
            s->out[t] = 0;
        }
        if ((st = retarget(s, m)) != FX_OK)
            return st;
        /* flow control afresh: nothing notified to it, nothing to wait
         * for before the next version */
        fab_session_begin(s->ctx->fab, s->gen, &t, 1, NULL, 0);
        LOG_INFO("rank %d: rank %d's new process joins; the next version "
                 "goes to it", s->ctx->rank, t);
    }
    return FX_OK;
}

/* Growing: the new ranks' blobs and bindings (with where this source's
 * CRCs go, as set-up's exchange gives them) for the session to take in. */
static fx_status_t grow_admit(struct join *j)
{
    fx_session_t *s = j->s;
    struct grow_rank *g = calloc((size_t)j->size, sizeof(*g));
    int n = 0, size = 0;
    fx_status_t st = FX_OK;

    if (g == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for %d members", j->size);
    for (int i = 0; i < j->size && st == FX_OK; i++) {
        const struct member *m = &j->mem[i];
        struct join_check c;
        unsigned char *b = NULL;

        if (m->h.role != JOIN_NEW)
            continue;
        if (m->h.rank < s->ctx->size)
            st = err_set(FX_ERR_INVALID, "rank %d is in the job already: a "
                         "grown job takes ranks new to it (its %d ranks "
                         "grow), and a new process of a rank comes back "
                         "with fx_session_join", m->h.rank, s->ctx->size);
        else if (size != 0 && m->h.size != size)
            st = err_set(FX_ERR_INVALID, "new ranks %d and %d see jobs of %d "
                         "and %d ranks", g[0].rank, m->h.rank, size,
                         m->h.size);
        else if ((b = malloc((m->h.nwire + 1) * sizeof(struct bind_wire))) ==
                 NULL)
            st = err_set(FX_ERR_NOMEM, "no memory for rank %d's bindings",
                         m->h.rank);
        if (st != FX_OK)
            break;
        size = m->h.size;
        memcpy(b, m->wire, m->h.nwire * sizeof(struct bind_wire));
        g[n] = (struct grow_rank){m->h.rank, m->blob, m->h.blob_len, b,
                                  m->h.nwire * sizeof(struct bind_wire)};
        for (size_t k = 0; k < m->h.nchecks; k++) {
            memcpy(&c, m->checks + k * sizeof(c), sizeof(c));
            if (c.source == s->ctx->rank) {
                memcpy(b + g[n].binds_len, &c.w, sizeof(c.w));
                g[n].binds_len += sizeof(c.w);
            }
        }
        n++;
    }
    if (st == FX_OK &&
        (j->admitted = calloc((size_t)(size > s->ctx->size ? size
                                                            : s->ctx->size),
                              1)) == NULL)
        st = err_set(FX_ERR_NOMEM, "no memory for %d ranks", size);
    if (st == FX_OK)
        st = session_grow(s, j->grown, size, g, n, j->admitted);
    for (int i = 0; i < n; i++)
        free((void *)g[i].binds);
    free(g);
    return st;
}

/* ---- the rounds -------------------------------------------------------- */

/* Round three: every member's verdict; the first failure names its rank. */
struct join_verdict {
    int32_t rank, status;
    char why[JOIN_WHY];
};

static fx_status_t verdicts(struct join *j, fx_status_t mine)
{
    struct join_verdict v = {j->s->ctx->rank, mine, ""};
    struct fx_gather *all = NULL;
    char why[ERR_MSG_MAX]; /* this member's, whole: v.why is cut to fit */
    fx_status_t st;

    snprintf(why, sizeof(why), "%s", mine != FX_OK ? err_last() : "");
    memcpy(v.why, why, strnlen(why, sizeof(v.why) - 1)); /* cut to fit */
    st = boot_allgatherv(j->group, "join verdicts", &v, sizeof(v), &all);
    for (int i = 0; st == FX_OK && mine == FX_OK && i < j->size; i++) {
        struct join_verdict o;

        if (all->len[i] != sizeof(o)) {
            st = err_set(FX_ERR_BOOTSTRAP, "member %d of the join sent a "
                         "verdict of %zu bytes", i, all->len[i]);
            break;
        }
        memcpy(&o, all->val[i], sizeof(o));
        o.why[JOIN_WHY - 1] = '\0';
        if (o.status != FX_OK)
            st = err_set(FX_ERR_PEER, "rank %d failed its part of the join: "
                         "%s", o.rank, o.why);
    }
    boot_gather_free(all);
    /* this member's own failure stands, whatever the round did */
    return mine != FX_OK ? err_set(mine, "%s", why) : st;
}

/* Round two: a new process plans once it knows how the job grew, and
 * tells each source where its CRCs go; whoever failed so far says so,
 * and the others stop before taking anything in. */
static fx_status_t round_two(struct join *j, fx_status_t st)
{
    struct join_check *chk = NULL;
    struct join_areas a = {0, 0, 0};
    unsigned char *mine = NULL;
    void *blob = NULL;
    size_t nchk = 0, blen = 0, len;
    fx_status_t xs;

    if (st == FX_OK && !j->s->ready &&
        (st = new_plan(j, &chk, &nchk)) == FX_OK)
        st = blob_encode(j->s->ctx, &blob, &blen);
    a.status = st;
    a.nchecks = (uint32_t)(st == FX_OK ? nchk : 0);
    a.blob_len = st == FX_OK ? blen : 0;
    len = sizeof(a) + a.nchecks * sizeof(*chk) + a.blob_len;
    if ((mine = malloc(len)) != NULL) {
        memcpy(mine, &a, sizeof(a));
        if (a.nchecks > 0)
            memcpy(mine + sizeof(a), chk, a.nchecks * sizeof(*chk));
        if (a.blob_len > 0)
            memcpy(mine + sizeof(a) + a.nchecks * sizeof(*chk), blob, blen);
    }
    free(chk);
    free(blob);
    if (mine == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for a join message");
    xs = boot_allgatherv(j->group, "join areas", mine, len, &j->all2);
    free(mine);
    if (xs != FX_OK) {
        boot_gather_free(j->all2);
        j->all2 = NULL;
        return xs;
    }
    for (int i = 0; st == FX_OK && i < j->size; i++) {
        struct member *m = &j->mem[i];
        size_t l = j->all2->len[i];

        if (l >= sizeof(a))
            memcpy(&a, j->all2->val[i], sizeof(a));
        if (l < sizeof(a) || a.nchecks > (l - sizeof(a)) / sizeof(*chk) ||
            a.blob_len != l - sizeof(a) - a.nchecks * sizeof(*chk) ||
            (m->h.role == JOIN_SOURCE && l != sizeof(a)))
            return err_set(FX_ERR_BOOTSTRAP, "member %d of the join sent "
                           "%zu bytes in round two, not its areas and blob",
                           i, l);
        if (a.status != FX_OK) {
            j->failed = 1; /* the verdicts name it, saying why */
            return FX_OK;
        }
        if (m->h.role == JOIN_NEW) {
            m->checks = j->all2->val[i] + sizeof(a);
            m->h.nchecks = a.nchecks;
            m->blob = m->checks + a.nchecks * sizeof(*chk);
            m->h.blob_len = a.blob_len;
        }
    }
    return st;
}

static fx_status_t rounds(struct join *j, fx_allgather_fn allgather,
                          void *arg)
{
    fx_session_t *s = j->s;
    struct boot_app_args a = {allgather, no_barrier, arg, j->index,
                              j->size, 0, s->ctx->timeout_ms};
    unsigned char *mine = NULL;
    size_t len = 0;
    fx_status_t st;

    /* No allgather: through fabxfer-run's folder, arg the group's tag. */
    st = allgather != NULL
             ? boot_open_app(&a, &j->group)
             : boot_open_local_group(arg, j->size, j->index,
                                     s->ctx->timeout_ms, &j->group);
    if (st != FX_OK)
        return st;
    st = s->ready ? source_says(j, &mine, &len) : new_says(s, &mine, &len);
    if (st != FX_OK)
        return st;
    st = boot_allgatherv(j->group, "join", mine, len, &j->all);
    free(mine);
    if (st != FX_OK)
        return st;
    if ((j->mem = calloc((size_t)j->size, sizeof(*j->mem))) == NULL)
        st = err_set(FX_ERR_NOMEM, "no memory for %d members", j->size);
    else
        st = read_members(j);
    if ((st = round_two(j, st)) != FX_OK && j->all2 == NULL)
        return st; /* the channel failed: no verdicts either */
    if (st == FX_OK && !j->failed)
        st = !s->ready ? arrive(j) : j->grown ? grow_admit(j) : admit(j);
    return verdicts(j, st);
}

/* What no member's word could change is refused at once, outside the
 * collective, as a second fx_session_setup is: the application called
 * the wrong session. What this rank finds wrong with its part (bindings,
 * manifest) is said in the collective, so that the others fail with it. */
static fx_status_t join_misuse(const fx_session_t *s, const char *call,
                               int grow)
{
    if (s->broken || s->left)
        return err_set(FX_ERR_STATE, "%s: this session's %s: destroy it and "
                       "create a new one", call, s->left ? "rank left it"
                       : "set-up or join failed before");
    if (grow && (!s->ready || !s->has_source))
        return err_set(FX_ERR_STATE, "%s: rank %d is not a source of a "
                       "session set up: the sources grow the job, and each "
                       "new rank calls fx_session_join", call, s->ctx->rank);
    if (s->ready && !s->has_source)
        return err_set(FX_ERR_STATE, "%s: rank %d is a target of the session "
                       "already: only a new process joins, and the sources "
                       "admit it", call, s->ctx->rank);
    if (!s->ready && s->has_source)
        return err_set(FX_ERR_UNSUPPORTED, "%s: rank %d holds source pieces: "
                       "only targets join a running session (new sources "
                       "set up a new session)", call, s->ctx->rank);
    if (!s->ready && !s->has_target)
        return err_set(FX_ERR_STATE, "%s: rank %d holds no piece of this "
                       "session", call, s->ctx->rank);
    return FX_OK;
}

static fx_status_t join_run(fx_session_t *s, const fx_manifest_t *grown,
                            int size, int index, fx_allgather_fn allgather,
                            void *arg)
{
    const char *call = grown ? "fx_session_grow" : "fx_session_join";
    struct join j = {0};
    fx_status_t st;
    double t0;

    if (s == NULL)
        return err_set(FX_ERR_INVALID, "%s: NULL session", call);
    if (size < 2 || index < 0 || index >= size ||
        (allgather == NULL && arg == NULL))
        return ctx_fail(s->ctx, err_set(FX_ERR_INVALID, "%s: a group of %d "
                        "with this rank at %d%s: the group is the session's "
                        "sources and the new processes", call, size, index,
                        allgather == NULL && arg == NULL
                        ? ", and neither an allgather nor a tag" : ""));
    if ((st = join_misuse(s, call, grown != NULL)) != FX_OK)
        return ctx_fail(s->ctx, st);
    j.grown = grown != NULL ? manifest_of(grown) : NULL;
    j.s = s;
    j.size = size;
    j.index = index;
    ctx_lock(s->ctx);
    t0 = clock_now();
    st = rounds(&j, allgather, arg);
    s->join_s = clock_now() - t0;
    if (st != FX_OK && !s->ready) {
        s->broken = 1; /* half a set-up is not retried */
    } else if (st != FX_OK) {
        for (int t = 0; j.admitted != NULL && t < s->ctx->size; t++)
            if (j.admitted[t]) {
                fab_peer_leave(s->ctx->fab, t, "its new process's join "
                               "failed");
                s->targets_joined--;
            }
    } else if (!s->ready) {
        s->ready = 1;
    }
    for (int t = 0; st == FX_OK && j.admitted != NULL && t < s->ctx->size;
         t++)
        if (j.admitted[t])
            members_joined(s, t, s->last_pushed, s->join_s);
    /* the report says so at once, not after the next push or wait */
    s->report.targets_joined = s->targets_joined;
    s->report.join_s = s->join_s;
    /* spent, as after set-up */
    plan_free(s->plan);
    s->plan = NULL;
    boot_gather_free(j.all);
    boot_gather_free(j.all2);
    boot_close(j.group);
    free(j.mem);
    free(j.admitted);
    ctx_unlock(s->ctx);
    return ctx_fail(s->ctx, st);
}

fx_status_t fx_session_join(fx_session_t *s, int size, int index,
                            fx_allgather_fn allgather, void *arg)
{
    return join_run(s, NULL, size, index, allgather, arg);
}

fx_status_t fx_session_grow(fx_session_t *s, const fx_manifest_t *m,
                            int size, int index, fx_allgather_fn allgather,
                            void *arg)
{
    if (s != NULL && m == NULL)
        return ctx_fail(s->ctx, err_set(FX_ERR_INVALID, "fx_session_grow: "
                        "NULL manifest (the job's, grown by the new ranks)"));
    return join_run(s, m, size, index, allgather, arg);
}

/* ---- the new process's first version at once ---------------------------- */

/* *serves: whether this source writes to rank at all (a source that does
 * not has nothing to push to it). */
static fx_status_t push_to_check(fx_session_t *s, uint64_t version, int rank,
                                 int *serves)
{
    fx_status_t st;
    size_t k;
    int holds = 0;

    *serves = 0;
    if ((st = session_source_check(s, "fx_session_push_to")) != FX_OK)
        return st;
    if (s->push_job && atomic_load(&s->push_done) == 0)
        return err_set(FX_ERR_STATE, "fx_session_push_to: version %llu "
                       "started by fx_session_push_start is not finished",
                       (unsigned long long)s->push_version);
    if (!s->pushed || version != s->last_pushed)
        return err_set(FX_ERR_INVALID, "fx_session_push_to: version %llu: "
                       "a new process gets the version pushed last (%llu%s), "
                       "which the tensors hold until the next push",
                       (unsigned long long)version,
                       (unsigned long long)s->last_pushed,
                       s->pushed ? "" : ": none yet");
    for (uint32_t p = 0; p < s->m->npieces; p++)
        holds |= s->m->pieces[p].rank == rank &&
                 s->m->pieces[p].role == FX_TARGET;
    if (!holds)
        return err_set(FX_ERR_INVALID, "fx_session_push_to: rank %d holds "
                       "no target piece of this session", rank);
    k = eng_target_index(&s->prog, rank);
    if (k >= (size_t)s->prog.ntargets || s->prog.targets[k] != rank)
        return FX_OK; /* nothing of this source goes to it */
    if (s->seen != NULL &&
        s->seen[rank].incarn != fab_peer_incarnation(s->ctx->fab, rank))
        return err_set(FX_ERR_STATE, "fx_session_push_to: rank %d's new "
                       "process joined another session of this context, "
                       "not this one", rank);
    if (fab_peer_notified(s->ctx->fab, rank, s->gen) >= version)
        return err_set(FX_ERR_INVALID, "fx_session_push_to: rank %d has "
                       "version %llu already", rank,
                       (unsigned long long)version);
    *serves = 1;
    return FX_OK;
}

fx_status_t fx_session_push_to(fx_session_t *s, uint64_t version, int rank)
{
    uint8_t *alone = NULL;
    fx_status_t st;
    int serves;

    if (s == NULL)
        return err_set(FX_ERR_INVALID, "fx_session_push_to: NULL session");
    ctx_lock(s->ctx);
    if ((st = push_to_check(s, version, rank, &serves)) != FX_OK || !serves)
        goto out;
    if ((alone = malloc((size_t)s->ctx->size)) == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory for %d ranks", s->ctx->size);
        goto out;
    }
    memset(alone, 1, (size_t)s->ctx->size);
    alone[rank] = 0;
    if ((st = session_sources_ready(s)) != FX_OK ||
        (st = session_push_some(s, version, alone)) != FX_OK)
        st = err_prefix(st, "push of version %llu to rank %d",
                        (unsigned long long)version, rank);
out:
    ctx_unlock(s->ctx);
    free(alone);
    return ctx_fail(s->ctx, st);
}
