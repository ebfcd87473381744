/*
 * Fuzzes every control message a peer can send (src/fabric/ctrl.c): what
 * arrives in a receive buffer (ctrl_arrived), every writedata word
 * (ctrl_writedata), and the target taking notes (fab_try_notify,
 * fab_wait_notify). Contexts of ranks 0-3 of a five-rank job (bootstrap
 * none) are made once per provider, tcp and shm (FABXFER_PROVIDER: that
 * one only); rank 0 imports the blobs of ranks 0-3, as an exchange would,
 * so that it knows their addresses and tokens; rank 4's blob never comes.
 * Only rank 0's receive path runs: nothing is sent.
 *
 * An input is a header (provider, first expected sequence number) and
 * events; the bytes of a message are what was received, except that its
 * magic, sequence number and token are read relative to the right ones
 * (zero: the right magic, the input's first epoch, the token named), so
 * that inputs mean the same whatever the tokens of this run. Beside the
 * sanitizers (every byte of f->msgs but those received is poisoned while
 * a message is read), a model of the specification in ctrl.c's comment
 * is kept, and the library must agree with it after every event: the
 * same drops, waiting notes, counts, sequence numbers and surplus. And
 * directly: no note is taken before its epoch's count reaches what it
 * announced (promise 1); a dropped message queues nothing and, unless it
 * only came stale, is not taken as a sign of life; recv_seq moves by one
 * per note taken; a release (CTRL_READY) counts only for a version rank 0
 * notified (1 to FUZZ_NOTIFIED) above the last released. Per-peer state
 * is reset before each input.
 *
 * Seeds: with FX_FUZZ_CTRL_SEEDS=DIR set, the harness writes the inputs
 * of tests/fuzz/corpus/ctrl to DIR and exits.
 */
#include <stdlib.h>
#include <string.h>

#include "core/ctx_int.h"
#include "fabric/fabric_int.h"
#include "fuzz.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define FUZZ_ASAN 1
#endif
#endif
#ifndef FUZZ_ASAN
#define ASAN_POISON_MEMORY_REGION(a, n) ((void)(a), (void)(n))
#define ASAN_UNPOISON_MEMORY_REGION(a, n) ((void)(a), (void)(n))
#endif

#define FUZZ_JOB 5   /* ranks 0 (us) to 3 known, 4 never imported */
#define FUZZ_KNOWN 4
#define FUZZ_EVENTS 1024
#define FOREIGN_TOKEN 0x5eed5eed5eed5eedull /* "rank 4's" token */
#define STRAY_ADDR ((fi_addr_t)0x1234)

/* Events: the opcode's low three bits. */
enum { EV_MSG = 0, EV_MSG2, EV_MSG3, EV_WD, EV_WD2, EV_TAKE, EV_TAKE_ALL,
       EV_WAIT };

/* Where an input's sequence numbers start: wrap-around included. */
static const uint32_t starts[] = {0, 1, 127, 128, 255, 256, 0x7fffffffu,
                                  0xffffff80u, 0xffffffffu};

/* The model: what ctrl.c's comment says should happen. */
struct mpeer {
    uint32_t recv_seq;
    size_t n;
    struct pending_note notes[CTRL_SEQ_WINDOW];
    uint64_t counts[WD_EPOCHS];
    uint64_t surplus;
    uint64_t released;   /* flow control: the newest release taken */
};

/* As if rank 0 had notified every peer this version: releases of
 * versions 1 to it are acceptable once each, in increasing order. */
#define FUZZ_NOTIFIED 8

struct world {
    const char *prov;
    fx_ctx_t *ctx[FUZZ_KNOWN];
    struct fab *f;
    uint64_t token[FUZZ_JOB];
    int src_check;           /* the provider names senders: checked */
    uint32_t start;          /* this input's first epoch */
    struct mpeer m[FUZZ_JOB];
    struct fab_ctrl_stats drops;
};

static struct world worlds[2];
static int nworlds; /* those that opened here: inputs pick one modulo */

/* ---- set-up ---------------------------------------------------------- */

static int open_world(struct world *w, const char *prov)
{
    w->prov = prov;
    for (int r = 0; r < FUZZ_KNOWN; r++)
        if ((w->ctx[r] = fuzz_ctx("fuzz_ctrl", prov, r, FUZZ_JOB, 1)) == NULL)
            return -1;
    for (int r = 0; r < FUZZ_KNOWN; r++) {
        void *blob;
        size_t len;

        if (fx_blob_export(w->ctx[r], &blob, &len) != FX_OK ||
            fx_blob_import(w->ctx[0], blob, len) != FX_OK) {
            fprintf(stderr, "fuzz_ctrl: blob of rank %d over %s: %s\n", r,
                    prov, fx_last_error(w->ctx[0]));
            exit(1);
        }
        fx_blob_free(blob);
        w->token[r] = fab_token(w->ctx[r]->fab);
    }
    w->token[FUZZ_KNOWN] = FOREIGN_TOKEN;
    w->f = w->ctx[0]->fab;
    w->src_check = fab_source_checked(w->f);
    for (int r = 0; r < FUZZ_JOB; r++)
        FUZZ_ASSERT(w->f->peers[r].present == (r < FUZZ_KNOWN) &&
                        w->f->peers[r].token == (r < FUZZ_KNOWN ?
                                                 w->token[r] : 0),
                    "rank %d not known as imported", r);
    fprintf(stderr, "fuzz_ctrl: %s (%s), sources %schecked\n", prov,
            w->f->job.prov, w->src_check ? "" : "not ");
    return 0;
}

/* Each input starts from a context that has just imported the blobs. */
static void reset(struct world *w, uint32_t start)
{
    struct fab *f = w->f;

    memset(&f->drops, 0, sizeof(f->drops));
    memset(&w->drops, 0, sizeof(w->drops));
    w->start = start;
    /* Older messages' bytes, as a receive buffer has them. */
    memset(f->msgs, 0xa5, ((size_t)f->nrecvs + CTRL_SENDS) * sizeof(*f->msgs));
    for (int r = 0; r < FUZZ_JOB; r++) {
        struct fab_peer *p = &f->peers[r];

        free(p->notes);
        p->notes = NULL;
        p->nnotes = p->notes_cap = 0;
        p->recv_seq = start;
        memset(p->counts, 0, sizeof(p->counts));
        p->surplus = 0;
        p->heard_ms = 0;
        p->notified = FUZZ_NOTIFIED;
        p->released = 0;
        FUZZ_ASSERT(p->failed == FX_OK, "rank %d failed", r);
        memset(&w->m[r], 0, sizeof(w->m[r]));
        w->m[r].recv_seq = start;
    }
}

/* ---- the model ------------------------------------------------------- */

static fi_addr_t addr_of(const struct world *w, int rank)
{
    return rank >= 0 && rank < FUZZ_KNOWN ? w->f->peers[rank].addr[0]
                                          : FI_ADDR_NOTAVAIL;
}

enum verdict { V_MALFORMED, V_FORGED, V_ALIVE, V_STALE, V_NOTE, V_RELEASE };

static enum verdict judge(const struct world *w, const struct ctrl_msg *m,
                          size_t len, fi_addr_t src)
{
    const struct mpeer *p;
    int r;

    if (len < CTRL_NOTE_LEN || m->magic != CTRL_MAGIC || m->src_rank < 0 ||
        m->src_rank >= FUZZ_JOB)
        return V_MALFORMED;
    r = m->src_rank;
    if (r >= FUZZ_KNOWN || m->token != w->token[r] ||
        (w->src_check && src != addr_of(w, r)))
        return V_FORGED;
    if ((m->flags != 0 && m->flags != CTRL_MARK && m->flags != CTRL_ALIVE &&
         m->flags != CTRL_READY && m->flags != (CTRL_READY | CTRL_REJECT) &&
         m->flags != CTRL_LEAVE) ||
        len != (m->flags == CTRL_MARK ? sizeof(*m) : CTRL_NOTE_LEN))
        return V_MALFORMED;
    if (m->flags == CTRL_ALIVE)
        return V_ALIVE;
    /* A leave counts only from a target of a session of ours, and no
     * peer here is one (no session toward it: 0). */
    if (m->flags == CTRL_LEAVE)
        return V_STALE;
    p = &w->m[r];
    /* A release (rejecting the version or not) opens the peer to rank
     * 0's next version: only of one notified and not yet released, in
     * the session that sent it (none here: 0). */
    if (m->flags & CTRL_READY)
        return m->session == 0 && m->tag > p->released &&
                       m->tag <= FUZZ_NOTIFIED ? V_RELEASE : V_STALE;
    if (m->seq - p->recv_seq >= CTRL_SEQ_WINDOW)
        return V_STALE;
    for (size_t i = 0; i < p->n; i++)
        if (p->notes[i].seq == m->seq)
            return V_STALE;
    return V_NOTE;
}

/* The note the model's peer takes next, if its writes are all counted. */
static struct pending_note *m_ready(struct mpeer *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->notes[i].seq == p->recv_seq)
            return p->counts[p->recv_seq % WD_EPOCHS] >= p->notes[i].nwrites
                       ? &p->notes[i]
                       : NULL;
    return NULL;
}

/* Take n; the surplus found is added to *surplus too. */
static struct pending_note m_take(struct mpeer *p, struct pending_note *n,
                                  uint64_t *surplus)
{
    struct pending_note out = *n;
    uint64_t *c = &p->counts[n->seq % WD_EPOCHS];
    uint64_t *far = &p->counts[(n->seq + WD_EPOCHS / 2) % WD_EPOCHS];
    uint64_t extra = *c - n->nwrites + *far;

    p->surplus += extra;
    *surplus += extra;
    *c = *far = 0;
    *n = p->notes[--p->n];
    p->recv_seq++;
    return out;
}

/* The library agrees with the model. */
static void check_world(const struct world *w)
{
    const struct fab *f = w->f;

    FUZZ_ASSERT(memcmp(&f->drops, &w->drops, sizeof(w->drops)) == 0,
                "drops forged/malformed/stale/surplus %llu/%llu/%llu/%llu, "
                "model %llu/%llu/%llu/%llu",
                (unsigned long long)f->drops.forged,
                (unsigned long long)f->drops.malformed,
                (unsigned long long)f->drops.stale,
                (unsigned long long)f->drops.surplus,
                (unsigned long long)w->drops.forged,
                (unsigned long long)w->drops.malformed,
                (unsigned long long)w->drops.stale,
                (unsigned long long)w->drops.surplus);
    for (int r = 0; r < FUZZ_JOB; r++) {
        const struct fab_peer *p = &f->peers[r];
        const struct mpeer *m = &w->m[r];

        FUZZ_ASSERT(p->failed == FX_OK, "rank %d failed: %s", r, p->errmsg);
        FUZZ_ASSERT(p->recv_seq == m->recv_seq && p->nnotes == m->n &&
                        p->surplus == m->surplus,
                    "rank %d: recv_seq %u, %zu notes, surplus %llu; model "
                    "%u, %zu, %llu", r, p->recv_seq, p->nnotes,
                    (unsigned long long)p->surplus, m->recv_seq, m->n,
                    (unsigned long long)m->surplus);
        FUZZ_ASSERT(p->nnotes <= CTRL_SEQ_WINDOW, "rank %d: %zu notes", r,
                    p->nnotes);
        FUZZ_ASSERT(memcmp(p->counts, m->counts, sizeof(m->counts)) == 0,
                    "rank %d: counts differ from the model", r);
        for (size_t i = 0; i < p->nnotes; i++) {
            const struct pending_note *a = &p->notes[i], *b = NULL;

            for (size_t j = 0; j < m->n && b == NULL; j++)
                if (m->notes[j].seq == a->seq)
                    b = &m->notes[j];
            FUZZ_ASSERT(b != NULL && memcmp(a, b, sizeof(*a)) == 0,
                        "rank %d: note of epoch %u not as sent", r, a->seq);
        }
    }
}

/* ---- events ---------------------------------------------------------- */

struct input {
    const uint8_t *p;
    size_t left;
};

static uint8_t next(struct input *in)
{
    if (in->left == 0)
        return 0;
    in->left--;
    return *in->p++;
}

/* Source address selector: 0 the claimed rank's, 1-4 rank 0-3's, then
 * none, unspecified, a stranger's. */
static fi_addr_t pick_src(const struct world *w, uint8_t sel, int claimed)
{
    switch (sel & 7) {
    case 0: return addr_of(w, claimed);
    case 5: return FI_ADDR_NOTAVAIL;
    case 6: return FI_ADDR_UNSPEC;
    case 7: return STRAY_ADDR;
    default: return addr_of(w, (sel & 7) - 1);
    }
}

/* Token selector: 0 the claimed rank's, 1-5 rank 0-4's, else none. */
static uint64_t pick_token(const struct world *w, uint8_t sel, int claimed)
{
    sel &= 7;
    if (sel == 0)
        return claimed >= 0 && claimed < FUZZ_JOB ? w->token[claimed] : 0;
    return sel <= FUZZ_JOB ? w->token[sel - 1] : 0;
}

/* A message: [slot][len][src][sel] then len bytes of struct ctrl_msg,
 * whose magic (unless sel bit 3), seq and token are relative. */
static void ev_message(struct world *w, struct input *in)
{
    struct fab *f = w->f;
    int slot = next(in) % CTRL_RECVS;
    size_t len = next(in) % (sizeof(struct ctrl_msg) + 1);
    uint8_t src_sel = next(in), sel = next(in);
    struct ctrl_msg m;
    enum verdict v;
    fi_addr_t src;
    struct fab_ctrl_stats before = f->drops;
    uint64_t *dropc = NULL;
    size_t nnotes[FUZZ_JOB];
    char *buf = (char *)f->msgs;
    size_t total = (CTRL_RECVS + CTRL_SENDS) * sizeof(*f->msgs);
    char *at = (char *)&f->msgs[slot];

    if (len > in->left)
        len = in->left;
    memset(&m, 0, sizeof(m));
    memcpy(&m, in->p, len);
    in->p += len;
    in->left -= len;
    if (!(sel & 8))
        m.magic ^= CTRL_MAGIC;
    m.seq += w->start;
    m.token ^= pick_token(w, sel, m.src_rank);
    src = pick_src(w, src_sel, m.src_rank);
    v = judge(w, &m, len, src);

    for (int r = 0; r < FUZZ_JOB; r++) {
        nnotes[r] = f->peers[r].nnotes;
        f->peers[r].heard_ms = 0;
    }
    /* The provider wrote len bytes into the slot; the rest of the slot
     * holds an older message, and nothing past the slot is this one. */
    memcpy(at, &m, len);
    ASAN_POISON_MEMORY_REGION(buf, (size_t)(at - buf));
    ASAN_POISON_MEMORY_REGION(at + len, total - (size_t)(at - buf) - len);
    ctrl_arrived(f, slot, len, src);
    ASAN_UNPOISON_MEMORY_REGION(buf, total);

    switch (v) {
    case V_MALFORMED: dropc = &w->drops.malformed; break;
    case V_FORGED: dropc = &w->drops.forged; break;
    case V_STALE: dropc = &w->drops.stale; break;
    case V_ALIVE: break;
    case V_RELEASE: w->m[m.src_rank].released = m.tag; break;
    case V_NOTE: {
        struct mpeer *p = &w->m[m.src_rank];
        struct pending_note *n = &p->notes[p->n++];

        *n = (struct pending_note){m.seq, m.flags, m.session, m.nwrites,
                                   m.tag, {0, 0, 0}};
        if (m.flags & CTRL_MARK)
            memcpy(n->arg, m.arg, sizeof(m.arg));
        break;
    }
    }
    if (dropc != NULL)
        ++*dropc;
    for (int r = 0; r < FUZZ_JOB; r++)
        FUZZ_ASSERT(f->peers[r].released == w->m[r].released, "rank %d's "
                    "release is %llu, the model's %llu", r,
                    (unsigned long long)f->peers[r].released,
                    (unsigned long long)w->m[r].released);
    /* Directly, beside the model: a dropped message is counted once and
     * acted on never; only a stale one (right token) is a sign of life. */
    if (v != V_NOTE)
        for (int r = 0; r < FUZZ_JOB; r++)
            FUZZ_ASSERT(f->peers[r].nnotes == nnotes[r], "a %s message "
                        "queued a note of rank %d",
                        v == V_FORGED ? "forged" : "dropped", r);
    if (v == V_MALFORMED || v == V_FORGED) {
        for (int r = 0; r < FUZZ_JOB; r++)
            FUZZ_ASSERT(f->peers[r].heard_ms == 0, "a %s message claiming "
                        "rank %d revived rank %d",
                        v == V_FORGED ? "forged" : "malformed", m.src_rank, r);
        FUZZ_ASSERT(f->drops.forged + f->drops.malformed ==
                        before.forged + before.malformed + 1,
                    "a dropped message was not counted once");
    } else {
        FUZZ_ASSERT(f->peers[m.src_rank].heard_ms != 0, "a message of rank "
                    "%d with its token was no sign of life", m.src_rank);
    }
    check_world(w);
}

/* Writedata: [rank][epoch][repeat], epoch relative; rank 255 stands for
 * 0xabcdef. Its rank is taken as written (ctrl.c): only a member's
 * counts, never a stranger's. */
static void ev_writedata(struct world *w, struct input *in)
{
    uint8_t rb = next(in), e = next(in);
    int rep = next(in) % 8 + 1;
    uint64_t rank = rb == 255 ? 0xabcdef : rb;
    uint32_t epoch = w->start + e;
    uint64_t data = WD_DATA(epoch, rank);

    for (int i = 0; i < rep; i++) {
        ctrl_writedata(w->f, data, fab_clock_ms(w->f));
        if (rank >= FUZZ_KNOWN)
            w->drops.malformed++;
        else
            w->m[rank].counts[epoch % WD_EPOCHS]++;
    }
    check_world(w);
}

/* Take one note from peer with max_tag, as fab_try_notify. */
static void take(struct world *w, int peer, uint64_t max_tag)
{
    struct fab_peer *p = &w->f->peers[peer];
    struct mpeer *m = &w->m[peer];
    struct pending_note *want = peer < FUZZ_KNOWN ? m_ready(m) : NULL;
    uint32_t seq0 = p->recv_seq;
    uint64_t count0 = p->counts[seq0 % WD_EPOCHS], nwrites = 0;
    struct fab_note note;
    int taken = -1, found = 0;
    fx_status_t st;

    for (size_t i = 0; i < p->nnotes; i++)
        if (p->notes[i].seq == seq0) {
            nwrites = p->notes[i].nwrites;
            found = 1;
        }
    memset(&note, 0, sizeof(note));
    st = fab_try_notify(w->f, peer, max_tag, &note, &taken);
    if (peer >= FUZZ_KNOWN) {
        FUZZ_ASSERT(st == FX_ERR_INVALID && taken == 0,
                    "rank %d, never imported: status %d, taken %d", peer, st,
                    taken);
        return;
    }
    FUZZ_ASSERT(st == FX_OK, "fab_try_notify from rank %d: %d", peer, st);
    /* Promise 1, directly: the note taken was the next epoch's, and its
     * every write had been counted. */
    if (taken)
        FUZZ_ASSERT(found && count0 >= nwrites && p->recv_seq == seq0 + 1,
                    "rank %d: took epoch %u with %llu of %llu writes counted"
                    " (recv_seq now %u)", peer, seq0,
                    (unsigned long long)count0, (unsigned long long)nwrites,
                    p->recv_seq);
    else
        FUZZ_ASSERT(p->recv_seq == seq0, "recv_seq moved without a note");
    FUZZ_ASSERT(taken == (want != NULL && want->tag <= max_tag),
                "rank %d: taken %d, the model says %d", peer, taken,
                want != NULL && want->tag <= max_tag);
    if (want != NULL)
        FUZZ_ASSERT(note.tag == want->tag, "rank %d: tag %llu, sent %llu",
                    peer, (unsigned long long)note.tag,
                    (unsigned long long)want->tag);
    if (taken) {
        struct pending_note n = m_take(m, want, &w->drops.surplus);

        FUZZ_ASSERT(note.mark == ((n.flags & CTRL_MARK) != 0) &&
                        memcmp(note.arg, n.arg, sizeof(n.arg)) == 0,
                    "rank %d: the note taken is not the one sent", peer);
    }
}

/* fab_wait_notify, where the model says that it returns without waiting:
 * marks ready, then a ready notification. */
static void ev_wait(struct world *w, int peer)
{
    struct mpeer copy, *m = &w->m[peer];
    struct fab_peer *p = &w->f->peers[peer];
    struct pending_note *n;
    uint32_t seq0 = p->recv_seq, took = 0;
    uint64_t counts0[WD_EPOCHS], tag = 0, want, ignored = 0;

    if (peer >= FUZZ_KNOWN)
        return;
    copy = *m;
    while ((n = m_ready(&copy)) != NULL && (n->flags & CTRL_MARK))
        m_take(&copy, n, &ignored);
    if (n == NULL)
        return; /* it would wait */
    memcpy(counts0, p->counts, sizeof(counts0));
    FUZZ_ASSERT(fab_wait_notify(w->f, peer, &tag) == FX_OK,
                "fab_wait_notify from rank %d: %s", peer, err_last());
    do {
        n = m_ready(m);
        FUZZ_ASSERT(n != NULL, "model lost its note");
        want = n->tag;
        FUZZ_ASSERT(counts0[(seq0 + took) % WD_EPOCHS] >= n->nwrites,
                    "rank %d: wait took epoch %u before its writes",
                    peer, seq0 + took);
        took++;
    } while (m_take(m, n, &w->drops.surplus).flags & CTRL_MARK);
    FUZZ_ASSERT(tag == want && p->recv_seq == seq0 + took,
                "rank %d: wait gave tag %llu (want %llu), recv_seq %u "
                "(want %u)", peer, (unsigned long long)tag,
                (unsigned long long)want, p->recv_seq, seq0 + took);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct input in = {data, size};
    struct world *w;
    uint8_t max;

    if (size < 2)
        return 0;
    w = &worlds[next(&in) % nworlds];
    reset(w, starts[next(&in) % (sizeof(starts) / sizeof(starts[0]))]);
    for (int ev = 0; ev < FUZZ_EVENTS && in.left > 0; ev++) {
        switch (next(&in) & 7) {
        case EV_MSG:
        case EV_MSG2:
        case EV_MSG3:
            ev_message(w, &in);
            break;
        case EV_WD:
        case EV_WD2:
            ev_writedata(w, &in);
            break;
        case EV_TAKE: {
            int peer = next(&in) % FUZZ_JOB;

            max = next(&in);
            take(w, peer, max == 255 ? UINT64_MAX : max);
            check_world(w);
            break;
        }
        case EV_TAKE_ALL:
            max = next(&in);
            for (int r = 0; r < FUZZ_JOB; r++)
                take(w, r, max == 255 ? UINT64_MAX : max);
            check_world(w);
            break;
        case EV_WAIT:
            ev_wait(w, next(&in) % FUZZ_JOB);
            check_world(w);
            break;
        }
    }
    return 0;
}

/* ---- seeds ----------------------------------------------------------- */

struct seed {
    uint8_t b[4096];
    size_t n;
};

static void put(struct seed *s, const void *p, size_t n)
{
    memcpy(s->b + s->n, p, n);
    s->n += n;
}

static void put5(struct seed *s, int a, int b, int c, int d, int e)
{
    uint8_t v[5] = {(uint8_t)a, (uint8_t)b, (uint8_t)c, (uint8_t)d,
                    (uint8_t)e};
    put(s, v, 5);
}

/* A message from rank with the right magic, token and address: seq is
 * relative to the input's start, len the bytes received. */
static void put_msg(struct seed *s, int slot, int rank, uint32_t seq,
                    uint32_t flags, uint64_t nwrites, uint64_t tag, int len,
                    int src_sel, int tok_sel)
{
    struct ctrl_msg m = {.src_rank = rank, .seq = seq, .flags = flags,
                         .nwrites = nwrites, .tag = tag,
                         .arg = {tag, nwrites, 7}};

    put5(s, EV_MSG, slot, len, src_sel, tok_sel);
    put(s, &m, (size_t)len);
}

static void put_wd(struct seed *s, int rank, int epoch, int n)
{
    uint8_t v[4] = {EV_WD, (uint8_t)rank, (uint8_t)epoch, (uint8_t)(n - 1)};

    put(s, v, 4);
}

static void save(const char *dir, const char *name, const struct seed *s)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(s->b, 1, s->n, f) != s->n || fclose(f) != 0) {
        fprintf(stderr, "fuzz_ctrl: cannot write %s\n", path);
        exit(1);
    }
}

static void write_seeds(const char *dir)
{
    const int note = CTRL_NOTE_LEN, mark = sizeof(struct ctrl_msg);
    struct seed s;

    for (int world = 0; world < 2; world++) {
        char name[64];

        /* An epoch of three writes from rank 1, then its note taken. */
        s.n = 0;
        put(&s, (uint8_t[]){(uint8_t)world, 0}, 2);
        put_wd(&s, 1, 0, 3);
        put_msg(&s, 0, 1, 0, 0, 3, 9, note, 0, 0);
        put(&s, (uint8_t[]){EV_TAKE, 1, 255}, 3);
        snprintf(name, sizeof(name), "%s-epoch", world ? "shm" : "tcp");
        save(dir, name, &s);

        /* Note before its writes, marks, a wait, across a wrap. */
        s.n = 0;
        put(&s, (uint8_t[]){(uint8_t)world, 8}, 2);
        put_msg(&s, 1, 2, 0, CTRL_MARK, 2, 1, mark, 0, 0);
        put_msg(&s, 2, 2, 1, 0, 1, 2, note, 0, 0);
        put(&s, (uint8_t[]){EV_TAKE_ALL, 255}, 2);
        put_wd(&s, 2, 0, 2);
        put_wd(&s, 2, 1, 1);
        put(&s, (uint8_t[]){EV_WAIT, 2}, 2);
        snprintf(name, sizeof(name), "%s-marks-wait", world ? "shm" : "tcp");
        save(dir, name, &s);

        /* Dropped: no token, another's token, a stranger's address, a
         * short message, a keepalive, a replay, a surplus write. */
        s.n = 0;
        put(&s, (uint8_t[]){(uint8_t)world, 0}, 2);
        put_msg(&s, 3, 3, 0, 0, 0, 5, note, 0, 6);
        put_msg(&s, 4, 3, 0, 0, 0, 5, note, 0, 2);
        put_msg(&s, 5, 3, 0, 0, 0, 5, note, 7, 0);
        put_msg(&s, 6, 3, 0, 0, 0, 5, 24, 0, 0);
        put_msg(&s, 7, 3, 0, CTRL_ALIVE, 0, 0, note, 0, 0);
        put_msg(&s, 8, 3, 0, 0, 0, 5, note, 0, 0);
        put_msg(&s, 9, 3, 0, 0, 0, 5, note, 0, 0);
        put(&s, (uint8_t[]){EV_TAKE, 3, 255}, 3);
        put_msg(&s, 10, 3, 0, 0, 0, 5, note, 0, 0);
        put_wd(&s, 3, 0, 1);
        put_wd(&s, 4, 0, 1);
        put_msg(&s, 11, 3, 1, 0, 0, 6, note, 0, 0);
        put(&s, (uint8_t[]){EV_TAKE_ALL, 255}, 2);
        snprintf(name, sizeof(name), "%s-dropped", world ? "shm" : "tcp");
        save(dir, name, &s);
    }
    exit(0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *only = getenv("FABXFER_PROVIDER");
    static const char *provs[] = {"tcp", "shm"};

    (void)argc;
    (void)argv;
    setenv("FABXFER_TIMEOUT_MS", "1000", 0);
    if (getenv("FX_FUZZ_CTRL_SEEDS") != NULL)
        write_seeds(getenv("FX_FUZZ_CTRL_SEEDS"));
    for (int i = 0; i < 2; i++) {
        if (only != NULL && only[0] != '\0' && strcmp(only, provs[i]) != 0)
            continue;
        if (open_world(&worlds[nworlds], provs[i]) == 0)
            nworlds++;
    }
    if (nworlds == 0) {
        fprintf(stderr, "fuzz_ctrl: neither tcp nor shm opens here\n");
        exit(1);
    }
    return 0;
}
