/*
 * The models of fabxfer-bench sync: a manifest file, a synthetic model of
 * equal tensors, or a HuggingFace-style config.json (Llama, Qwen3 dense,
 * Qwen3-MoE, the DeepSeek-V3 family) turned into its tensors. Generated
 * models are sharded the way a trainer and an inference engine would hold
 * them, by layout: by default every source is a data-parallel replica
 * holding every tensor whole, and N > 1 targets split each 2-D tensor
 * along dim 0 (tensor parallel; 1-D tensors whole on each); "fsdp" gives
 * each rank of its side a flat range of every tensor; "vllm" holds vLLM's
 * fused tensors, views of the HF ones (fx_manifest_add_view). Every rank
 * derives the same model and the same layout from the spec.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "bench.h"
#include "plan/plan.h"
#include "util/cfg.h"

#define SRC_ALIGN 64 /* sources: tensors start on 64 bytes, 64 apart */
#define FP8_BLOCK MODEL_FP8_BLOCK

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    {"bf16", 2}, {"bfloat16", 2}, {"f16", 2}, {"float16", 2}, {"fp16", 2},
    {"half", 2}, {"f32", 4}, {"float32", 4}, {"fp32", 4}, {"float", 4},
    {"f64", 8}, {"float64", 8}, {"fp64", 8}, {"double", 8},
    {"fp8_e4m3", 1}, {"float8_e4m3fn", 1}, {"float8_e4m3", 1},
    {"fp8_e5m2", 1}, {"float8_e5m2", 1}, {"i8", 1}, {"int8", 1},
    {"u8", 1}, {"uint8", 1}, {"i16", 2}, {"int16", 2}, {"i32", 4},
    {"int32", 4}, {"i64", 8}, {"int64", 8}, {"bool", 1}, {"boolean", 1},
};

static size_t dtype_size(const char *name)
{
    for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
        if (strcmp(name, dtypes[i].name) == 0)
            return dtypes[i].size;
    return 0;
}

static int fail(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -1;
}

/* The library's K/M/G parser (powers of 2, no wrap), but a size of 0
 * means nothing to move. */
int bench_parse_size(const char *text, uint64_t *out)
{
    size_t n;

    if (cfg_parse_size(text, &n) != 0 || n == 0)
        return -1;
    *out = n;
    return 0;
}

/* Double *v's room of *cap elements (first, when empty). */
static int grow(void **v, size_t *cap, size_t first, size_t elem)
{
    size_t n = *cap ? *cap * 2 : first;
    void *grown = realloc(*v, n * elem);

    if (grown == NULL)
        return -1;
    *v = grown;
    *cap = n;
    return 0;
}

static int add_tensor(struct model *m, const char *name, const char *dtype,
                      int ndim, const int64_t *shape, char *err,
                      size_t errlen)
{
    struct model_tensor *t;

    if (ndim < 0 || ndim > MODEL_MAX_DIMS)
        return fail(err, errlen, "tensor \"%s\": %d dimensions (at most %d)",
                    name, ndim, MODEL_MAX_DIMS);
    if (m->nt == m->tcap && grow((void **)&m->t, &m->tcap, 256,
                                 sizeof(*m->t)) != 0)
        return fail(err, errlen, "no memory for %zu tensors", m->tcap * 2);
    t = &m->t[m->nt];
    memset(t, 0, sizeof(*t));
    snprintf(t->dtype, sizeof(t->dtype), "%s", dtype);
    snprintf(t->tdtype, sizeof(t->tdtype), "%s", dtype);
    t->esize = dtype_size(dtype);
    t->tesize = t->esize;
    t->scale = t->scale_of = t->fused = t->view_dim = -1;
    if (t->esize == 0)
        return fail(err, errlen, "tensor \"%s\": unknown dtype \"%s\"", name,
                    dtype);
    t->ndim = ndim;
    t->bytes = t->esize;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0)
            return fail(err, errlen, "tensor \"%s\": dim %d is %lld", name,
                        i, (long long)shape[i]);
        t->shape[i] = shape[i];
        t->bytes *= (uint64_t)shape[i];
    }
    if ((t->name = strdup(name)) == NULL)
        return fail(err, errlen, "no memory");
    m->nt++;
    return 0;
}

static int add_piece(struct model *m, int rank, fx_role_t role,
                     uint32_t tensor, int dim, int64_t start, int64_t end,
                     char *err, size_t errlen)
{
    const struct model_tensor *t = &m->t[tensor];
    struct model_piece *p;
    int64_t lo[MODEL_MAX_DIMS], hi[MODEL_MAX_DIMS];

    if (m->np == m->pcap && grow((void **)&m->p, &m->pcap, 1024,
                                 sizeof(*m->p)) != 0)
        return fail(err, errlen, "no memory for %zu pieces", m->pcap * 2);
    p = &m->p[m->np];
    *p = (struct model_piece){
        .rank = rank, .role = role, .tensor = tensor, .dim = dim,
        .start = start, .end = end,
        .bytes = role == FX_TARGET ? t->tesize : t->esize,
    };
    if (dim == MODEL_FLAT) {
        if (start < 0 || end <= start || (uint64_t)end * t->esize > t->bytes)
            return fail(err, errlen, "rank %d: elements [%lld, %lld) of "
                        "\"%s\" are empty or out of range", rank,
                        (long long)start, (long long)end, t->name);
        p->bytes *= (uint64_t)(end - start);
        m->np++;
        return 0;
    }
    model_piece_box(m, p, lo, hi);
    for (int i = 0; i < t->ndim; i++) {
        if (lo[i] < 0 || hi[i] > t->shape[i] || hi[i] <= lo[i])
            return fail(err, errlen, "rank %d: piece [%lld, %lld) of dim %d "
                        "of \"%s\" is empty or out of range", rank,
                        (long long)start, (long long)end, i, t->name);
        p->bytes *= (uint64_t)(hi[i] - lo[i]);
    }
    m->np++;
    return 0;
}

/* "ep=G": G expert groups (0 for plain "ep": one a rank). */
static int ep_groups(const char *name, long *g)
{
    char *end;

    if (strcmp(name, "ep") == 0) {
        *g = 0;
        return 1;
    }
    if (strncmp(name, "ep=", 3) != 0 || !isdigit((unsigned char)name[3]))
        return 0;
    *g = strtol(name + 3, &end, 10);
    return *end == '\0' && *g > 0;
}

int model_layout_known(const char *name)
{
    long g;

    return strcmp(name, "dp") == 0 || strcmp(name, "tp") == 0 ||
           strcmp(name, "tp-box") == 0 || strcmp(name, "tp-flat") == 0 ||
           strcmp(name, "fsdp") == 0 || strcmp(name, "vllm") == 0 ||
           ep_groups(name, &g);
}

/* The expert a HuggingFace tensor belongs to ("...mlp.experts.17.up_proj.
 * weight": 17), or -1. */
static long expert_of(const char *name)
{
    const char *e = strstr(name, ".experts.");

    if (e == NULL || !isdigit((unsigned char)e[9]))
        return -1;
    return strtol(e + 9, NULL, 10);
}

/* Rows [a, b) of ext for rank j of n. A source cuts a block-scaled
 * weight between whole blocks, as fabxfer asks of sources (and as FP8
 * trainers shard): a rank may then get none. */
static void row_cut(const struct model_tensor *tt, fx_role_t role,
                    int64_t ext, long j, long n, int64_t *a, int64_t *b)
{
    int64_t nb = (ext + FP8_BLOCK - 1) / FP8_BLOCK;

    if (role != FX_SOURCE || tt->scale < 0) {
        *a = ext * j / n;
        *b = ext * (j + 1) / n;
        return;
    }
    *a = nb * j / n * FP8_BLOCK;
    *b = nb * (j + 1) / n * FP8_BLOCK;
    *a = *a < ext ? *a : ext;
    *b = *b < ext ? *b : ext;
}

/* Rank j of n's piece of tensor t by layout: dp whole, tp 2-D tensors along
 * dim 0 (with n > 1; a part of no rows is left out), fsdp a flat range, ep
 * routed expert e's tensors whole on rank e mod n, ep=G on group e mod G
 * of n / G ranks, cut by rows there; the rest as tp. */
static int add_layout_piece(struct model *m, const char *layout, int rank,
                            fx_role_t role, uint32_t t, int j, int n,
                            char *err, size_t errlen)
{
    const struct model_tensor *tt = &m->t[t];
    int64_t ext, a, b;
    long e, g;
    int rc;

    if (ep_groups(layout, &g)) {
        /* G groups of n / G ranks: expert e on group e mod G, cut along
         * dim 0 over its ranks (Megatron's expert tensor parallel) */
        if ((e = expert_of(tt->name)) >= 0) {
            long per = g > 0 && n % g == 0 ? n / g : 1;
            long groups = per > 1 ? g : n, k = j % per;

            if (e % groups != j / per)
                return 0;
            if (per == 1 || tt->ndim != 2)
                return add_piece(m, rank, role, t, -1, 0, 0, err, errlen);
            row_cut(tt, role, tt->shape[0], k, per, &a, &b);
            return b > a ? add_piece(m, rank, role, t, 0, a, b, err, errlen)
                         : 0;
        }
        layout = "tp";
    }

    if (strcmp(layout, "fsdp") == 0 && n > 1) {
        ext = (int64_t)(tt->bytes / tt->esize);
        a = ext * j / n;
        b = ext * (j + 1) / n;
        return b > a ? add_piece(m, rank, role, t, MODEL_FLAT, a, b, err,
                                 errlen)
                     : 0;
    }
    /* tp-box and tp-flat: tp's cuts (and bytes, and pairs) in the other
     * forms, so that a run can tell what a form costs from what a layout
     * does (fsdp's flat ranges also change who writes to whom). */
    if (strcmp(layout, "tp-flat") == 0) {
        ext = (int64_t)(tt->bytes / tt->esize);
        a = 0;
        b = ext;
        if (tt->ndim == 2 && n > 1) {
            row_cut(tt, role, tt->shape[0], j, n, &a, &b);
            a *= tt->shape[1];
            b *= tt->shape[1];
        }
        return b > a ? add_piece(m, rank, role, t, MODEL_FLAT, a, b, err,
                                 errlen)
                     : 0;
    }
    if (strncmp(layout, "tp", 2) == 0 && tt->ndim == 2 && n > 1) {
        row_cut(tt, role, tt->shape[0], j, n, &a, &b);
        if (b <= a)
            return 0; /* a part of no rows is left out */
        rc = add_piece(m, rank, role, t, 0, a, b, err, errlen);
    } else {
        rc = add_piece(m, rank, role, t, -1, 0, 0, err, errlen);
    }
    if (rc == 0)
        m->p[m->np - 1].as_box = strcmp(layout, "tp-box") == 0;
    return rc;
}

static int fp8_weights(struct model *m, char *err, size_t errlen)
{
    uint32_t nt = m->nt;

    for (uint32_t t = 0; t < nt; t++) {
        const struct model_tensor *w = &m->t[t];
        size_t len = strlen(w->name);
        char name[300];
        int64_t shape[2];

        if (w->ndim != 2 || len < 7 || strcmp(w->name + len - 7, ".weight") ||
            strstr(w->name, "embed_tokens") || strstr(w->name, "lm_head") ||
            strstr(w->name, ".mlp.gate.weight") ||
            (strcmp(w->dtype, "bf16") && strcmp(w->dtype, "bfloat16")))
            continue;
        snprintf(name, sizeof(name), "%s_scale_inv", w->name);
        shape[0] = (w->shape[0] + FP8_BLOCK - 1) / FP8_BLOCK;
        shape[1] = (w->shape[1] + FP8_BLOCK - 1) / FP8_BLOCK;
        if (add_tensor(m, name, "f32", 2, shape, err, errlen))
            return -1;
        w = &m->t[t]; /* the array may have moved */
        m->t[t].scale = (int)m->nt - 1;
        m->t[m->nt - 1].scale_of = (int)t;
        snprintf(m->t[t].tdtype, sizeof(m->t[t].tdtype), "fp8_e4m3");
        m->t[t].tesize = 1;
    }
    return 0;
}

/* A target's piece of a scale tensor: the block rows of its piece of the
 * weight, whole for anything but rows. */
static int add_scale_target(struct model *m, int rank, uint32_t t,
                            char *err, size_t errlen)
{
    const struct model_tensor *s = &m->t[t];
    const struct model_piece *w = NULL;

    for (size_t i = m->np; i-- > 0;)
        if (m->p[i].rank == rank && m->p[i].role == FX_TARGET &&
            (int)m->p[i].tensor == s->scale_of) {
            w = &m->p[i];
            break;
        }
    if (w == NULL)
        return 0;
    if (w->dim == 0)
        return add_piece(m, rank, FX_TARGET, t, 0, w->start / FP8_BLOCK,
                         (w->end + FP8_BLOCK - 1) / FP8_BLOCK, err, errlen);
    return add_piece(m, rank, FX_TARGET, t, -1, 0, 0, err, errlen);
}

/* ---- the vllm layout: vLLM's fused tensors as views ------------------ */

/* The HF tensors vLLM loads into one of its own, by name within a layer:
 * fused_qkv_a_proj is replicated (vLLM does not shard it), the others
 * are column-parallel. vLLM's FusedMoE stacks the routed experts into
 * w13_weight [E, 2I, H]; a view joins along one dim of its parts, and
 * the bench's experts are 2-D tensors each, so they stay as tp cuts. */
static const struct fusion {
    const char *part[3];
    uint32_t n;
    const char *name;
    int whole;
} fusions[] = {
    {{"self_attn.q_proj.weight", "self_attn.k_proj.weight",
      "self_attn.v_proj.weight"}, 3, "self_attn.qkv_proj.weight", 0},
    {{"self_attn.q_proj.bias", "self_attn.k_proj.bias",
      "self_attn.v_proj.bias"}, 3, "self_attn.qkv_proj.bias", 0},
    {{"mlp.gate_proj.weight", "mlp.up_proj.weight"}, 2,
     "mlp.gate_up_proj.weight", 0},
    {{"mlp.shared_experts.gate_proj.weight",
      "mlp.shared_experts.up_proj.weight"}, 2,
     "mlp.shared_experts.gate_up_proj.weight", 0},
    {{"self_attn.q_a_proj.weight", "self_attn.kv_a_proj_with_mqa.weight"},
     2, "self_attn.fused_qkv_a_proj.weight", 1},
};
#define NFUSIONS (sizeof(fusions) / sizeof(fusions[0]))

/* A view of m (after every plain tensor): its shape and dtypes are its
 * first part's, dim 0 the sum of the ranges. Takes part, even on
 * failure. */
static int add_view(struct model *m, const char *name,
                    struct model_view_part *part, uint32_t n, char *err,
                    size_t errlen)
{
    const struct model_tensor *p0 = &m->t[part[0].tensor];
    int64_t shape[MODEL_MAX_DIMS];
    struct model_tensor *v;
    char dtype[24], tdtype[24]; /* adding may move m->t, and p0 */
    size_t tesize = p0->tesize;
    int ndim = p0->ndim;

    memcpy(shape, p0->shape, sizeof(shape));
    snprintf(dtype, sizeof(dtype), "%s", p0->dtype);
    snprintf(tdtype, sizeof(tdtype), "%s", p0->tdtype);
    shape[0] = 0;
    for (uint32_t i = 0; i < n; i++)
        shape[0] += part[i].end - part[i].start;
    if (add_tensor(m, name, dtype, ndim, shape, err, errlen)) {
        free(part);
        return -1;
    }
    v = &m->t[m->nt - 1];
    snprintf(v->tdtype, sizeof(v->tdtype), "%s", tdtype);
    v->tesize = tesize;
    v->view_dim = 0;
    v->part = part;
    v->nparts = n;
    for (uint32_t i = 0; i < n; i++)
        m->t[part[i].tensor].fused = (int)m->nt - 1;
    return 0;
}

/* The fused view named by fusion f of the tensors at idx (ntp ranks on
 * the side that holds it), and with FP8 weights the view of their
 * scales: the block rows under each range, so that a rank whose rows
 * cut a block gets that block's scale too (a target may cut blocks). */
static int add_fusion(struct model *m, const struct fusion *f,
                      const uint32_t *idx, const char *prefix, int ntp,
                      char *err, size_t errlen)
{
    uint32_t n = 0, cap = f->n * (uint32_t)(f->whole ? 1 : ntp);
    struct model_view_part *part = calloc(cap, sizeof(*part)), *sp;
    char name[300];

    if (part == NULL)
        return fail(err, errlen, "no memory");
    for (int j = 0; j < (f->whole ? 1 : ntp); j++)
        for (uint32_t k = 0; k < f->n; k++) {
            int64_t ext = m->t[idx[k]].shape[0];
            int64_t a = f->whole ? 0 : ext * j / ntp;
            int64_t b = f->whole ? ext : ext * (j + 1) / ntp;

            if (b > a)
                part[n++] = (struct model_view_part){idx[k], a, b,
                                                     f->whole ? -1 : j};
        }
    snprintf(name, sizeof(name), "%s%s", prefix, f->name);
    if (m->t[idx[0]].scale < 0)
        return add_view(m, name, part, n, err, errlen);
    if ((sp = calloc(n, sizeof(*sp))) == NULL) {
        free(part);
        return fail(err, errlen, "no memory");
    }
    for (uint32_t i = 0; i < n; i++)
        sp[i] = (struct model_view_part){
            (uint32_t)m->t[part[i].tensor].scale, part[i].start / FP8_BLOCK,
            (part[i].end + FP8_BLOCK - 1) / FP8_BLOCK, part[i].rank};
    if (add_view(m, name, part, n, err, errlen)) {
        free(sp);
        return -1;
    }
    snprintf(name + strlen(name), sizeof(name) - strlen(name), "_scale_inv");
    return add_view(m, name, sp, n, err, errlen);
}

/* Every fusion found among m's plain tensors, after them. */
static int vllm_views(struct model *m, int ntp, char *err, size_t errlen)
{
    uint32_t nt = m->nt;

    for (uint32_t t = 0; t < nt; t++)
        for (size_t f = 0; f < NFUSIONS; f++) {
            const struct fusion *fu = &fusions[f];
            size_t len = strlen(m->t[t].name), sl = strlen(fu->part[0]);
            uint32_t idx[3] = {t}, k;
            char prefix[256], want[300];

            if (len < sl || strcmp(m->t[t].name + len - sl, fu->part[0]) ||
                (len > sl && m->t[t].name[len - sl - 1] != '.') ||
                len - sl >= sizeof(prefix))
                continue;
            memcpy(prefix, m->t[t].name, len - sl);
            prefix[len - sl] = '\0';
            /* The other parts come a few tensors later in a layer. */
            for (k = 1; k < fu->n; k++) {
                snprintf(want, sizeof(want), "%s%s", prefix, fu->part[k]);
                for (idx[k] = t + 1; idx[k] < nt; idx[k]++)
                    if (strcmp(m->t[idx[k]].name, want) == 0)
                        break;
                if (idx[k] == nt)
                    break;
            }
            if (k == fu->n && add_fusion(m, fu, idx, prefix, ntp, err,
                                         errlen))
                return -1;
        }
    return 0;
}

/* Rank j's piece of a view: its own ranges, which TP order puts one
 * after the other; the whole view where it is replicated. */
static int add_view_piece(struct model *m, int rank, fx_role_t role,
                          uint32_t t, int j, char *err, size_t errlen)
{
    const struct model_tensor *v = &m->t[t];
    int64_t lo = 0, len = 0;

    for (uint32_t i = 0; i < v->nparts; i++) {
        int64_t rows = v->part[i].end - v->part[i].start;

        if (v->part[i].rank < 0)
            return add_piece(m, rank, role, t, -1, 0, 0, err, errlen);
        if (v->part[i].rank < j)
            lo += rows;
        else if (v->part[i].rank == j)
            len += rows;
    }
    return len > 0 ? add_piece(m, rank, role, t, 0, lo, lo + len, err,
                               errlen)
                   : 0;
}

/* A side's piece of t: with the vllm layout the views instead of the
 * tensors they join (the rest as tp), else the plain tensors alone. */
static int add_side_piece(struct model *m, const char *layout, int rank,
                          fx_role_t role, uint32_t t, int j, int n,
                          char *err, size_t errlen)
{
    int vllm = strcmp(layout, "vllm") == 0;

    if (m->t[t].view_dim >= 0)
        return vllm ? add_view_piece(m, rank, role, t, j, err, errlen) : 0;
    if (vllm && m->t[t].fused >= 0)
        return 0;
    return add_layout_piece(m, vllm ? "tp" : layout, rank, role, t, j, n,
                            err, errlen);
}

/* Generated models, cut by the layouts of each side. */
static int shard(struct model *m, const char *const *layouts, char *err,
                 size_t errlen)
{
    const char *src = layouts && layouts[0] ? layouts[0] : "dp";
    const char *tgt = layouts && layouts[1] ? layouts[1] : "tp";
    int vsrc = strcmp(src, "vllm") == 0, vtgt = strcmp(tgt, "vllm") == 0;

    if (vsrc && layouts[2])
        return fail(err, errlen, "--source-layout vllm with --dtypes "
                    "fp8-block: fabxfer refuses a source piece of a view "
                    "of FP8 weights (sources give the weights it joins, "
                    "whose scales they compute); use vllm for targets");
    if (vsrc && vtgt && m->nsrc != m->ntgt)
        return fail(err, errlen, "vllm on both sides needs as many "
                    "sources as targets (%d and %d): a view's TP order is "
                    "one side's", m->nsrc, m->ntgt);
    if (layouts && layouts[2] && fp8_weights(m, err, errlen))
        return -1;
    if (m->nranks == 0)
        return 0; /* the tensors only (fabxfer-plan writes its own rules) */
    if ((vsrc || vtgt) &&
        vllm_views(m, vtgt ? m->ntgt : m->nsrc, err, errlen))
        return -1;
    for (uint32_t t = 0; t < m->nt; t++) {
        if (m->t[t].scale_of >= 0) { /* sources compute these */
            for (int j = 0; j < m->ntgt && (!vtgt || m->t[t].fused < 0);
                 j++)
                if (add_scale_target(m, m->nsrc + j, t, err, errlen))
                    return -1;
            continue;
        }
        for (int r = 0; r < m->nsrc; r++)
            if (add_side_piece(m, src, r, FX_SOURCE, t, r, m->nsrc, err,
                               errlen))
                return -1;
        for (int j = 0; j < m->ntgt; j++)
            if (add_side_piece(m, tgt, m->nsrc + j, FX_TARGET, t, j,
                               m->ntgt, err, errlen))
                return -1;
    }
    return 0;
}

static int load_synthetic(struct model *m, const char *arg,
                          const char *const *layouts, char *err,
                          size_t errlen)
{
    char *copy = strdup(arg), *size_text, *end;
    unsigned long long count;
    uint64_t size;
    int rc = -1;

    if (copy == NULL)
        return fail(err, errlen, "no memory");
    size_text = strchr(copy, ':');
    if (size_text == NULL) {
        fail(err, errlen, "synthetic:COUNT:SIZE expected, got "
             "\"synthetic:%s\"", arg);
        goto out;
    }
    *size_text++ = '\0';
    errno = 0;
    count = strtoull(copy, &end, 10);
    if (!isdigit((unsigned char)copy[0]) || *end != '\0' || errno != 0 ||
        count == 0 || count > 100000000ULL) {
        fail(err, errlen, "synthetic: bad COUNT \"%s\" (1 to 100000000)",
             copy);
        goto out;
    }
    if (bench_parse_size(size_text, &size)) {
        fail(err, errlen, "synthetic: bad SIZE \"%s\" (bytes, K/M/G "
             "suffixes)", size_text);
        goto out;
    }
    for (unsigned long long i = 0; i < count; i++) {
        char name[64];
        int64_t shape[1] = {(int64_t)size};

        snprintf(name, sizeof(name), "synthetic.%llu.weight", i);
        if (add_tensor(m, name, "u8", 1, shape, err, errlen))
            goto out;
    }
    rc = shard(m, layouts, err, errlen);
out:
    free(copy);
    return rc;
}

/* ---- HuggingFace config.json ----------------------------------------- */

static int hf_int(json_object *root, const char *key, int64_t def,
                  int required, int64_t *out, const char *file, char *err,
                  size_t errlen)
{
    json_object *v;

    if (!json_object_object_get_ex(root, key, &v) || v == NULL) {
        if (required)
            return fail(err, errlen, "%s: missing \"%s\"", file, key);
        *out = def;
        return 0;
    }
    if (json_object_get_type(v) != json_type_int)
        return fail(err, errlen, "%s: \"%s\" is not an integer", file, key);
    *out = json_object_get_int64(v);
    if (*out < 0)
        return fail(err, errlen, "%s: \"%s\" is negative", file, key);
    return 0;
}

struct hf {
    int64_t hidden, inter, heads, kv_heads, head_dim, vocab, layers;
    int64_t experts, moe_inter, sparse_step;
    /* the DeepSeek-V3 family: MLA and its experts */
    int mla;
    int64_t q_lora, kv_lora, qk_nope, qk_rope, v_head, shared, first_dense;
    int tied, qk_norm, bias;
    const char *dtype;
    json_object *mlp_only; /* array or NULL */
};

static int hf_is_moe_layer(const struct hf *h, int64_t layer)
{
    if (h->experts <= 0)
        return 0;
    if (h->mla) /* the first first_k_dense_replace layers are dense */
        return layer >= h->first_dense &&
               layer % (h->sparse_step ? h->sparse_step : 1) == 0;
    if (h->mlp_only != NULL)
        for (size_t i = 0; i < json_object_array_length(h->mlp_only); i++)
            if (json_object_get_int64(json_object_array_get_idx(
                    h->mlp_only, i)) == layer)
                return 0;
    return h->sparse_step <= 1 || (layer + 1) % h->sparse_step == 0;
}

static int hf_add(struct model *m, const struct hf *h, int ndim, int64_t d0,
                  int64_t d1, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));

static int hf_add(struct model *m, const struct hf *h, int ndim, int64_t d0,
                  int64_t d1, char *err, size_t errlen, const char *fmt, ...)
{
    char name[256];
    int64_t shape[2] = {d0, d1};
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    return add_tensor(m, name, h->dtype, ndim, shape, err, errlen);
}

/* Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): queries through
 * a low rank q_lora_rank (or a plain q_proj without it), keys and values
 * through kv_lora_rank, with qk_rope_head_dim of rotary key shared by the
 * heads. */
static int hf_mla(struct model *m, const struct hf *h, int64_t i, char *err,
                  size_t errlen)
{
    int64_t nh = h->heads, H = h->hidden;
    int64_t qk = h->qk_nope + h->qk_rope;
    const char *L = "model.layers";

#define ADD(nd, a, b, ...)                                                   \
    do {                                                                     \
        if (hf_add(m, h, nd, a, b, err, errlen, __VA_ARGS__))                \
            return -1;                                                       \
    } while (0)
    if (h->q_lora > 0) {
        ADD(2, h->q_lora, H, "%s.%lld.self_attn.q_a_proj.weight", L,
            (long long)i);
        ADD(1, h->q_lora, 0, "%s.%lld.self_attn.q_a_layernorm.weight", L,
            (long long)i);
        ADD(2, nh * qk, h->q_lora, "%s.%lld.self_attn.q_b_proj.weight", L,
            (long long)i);
    } else {
        ADD(2, nh * qk, H, "%s.%lld.self_attn.q_proj.weight", L,
            (long long)i);
    }
    ADD(2, h->kv_lora + h->qk_rope, H,
        "%s.%lld.self_attn.kv_a_proj_with_mqa.weight", L, (long long)i);
    ADD(1, h->kv_lora, 0, "%s.%lld.self_attn.kv_a_layernorm.weight", L,
        (long long)i);
    ADD(2, nh * (h->qk_nope + h->v_head), h->kv_lora,
        "%s.%lld.self_attn.kv_b_proj.weight", L, (long long)i);
    ADD(2, H, nh * h->v_head, "%s.%lld.self_attn.o_proj.weight", L,
        (long long)i);
#undef ADD
    return 0;
}

static int hf_tensors(struct model *m, const struct hf *h, char *err,
                      size_t errlen)
{
    int64_t q = h->heads * h->head_dim, kv = h->kv_heads * h->head_dim;
    int64_t H = h->hidden;

#define ADD(nd, a, b, ...)                                                   \
    do {                                                                     \
        if (hf_add(m, h, nd, a, b, err, errlen, __VA_ARGS__))                \
            return -1;                                                       \
    } while (0)
    ADD(2, h->vocab, H, "model.embed_tokens.weight");
    for (int64_t i = 0; i < h->layers; i++) {
        const char *L = "model.layers";

        ADD(1, H, 0, "%s.%lld.input_layernorm.weight", L, (long long)i);
        if (h->mla) {
            if (hf_mla(m, h, i, err, errlen))
                return -1;
            goto mlp;
        }
        for (int p = 0; p < 3; p++) { /* q, k and v; q and k normed */
            char x = "qkv"[p];
            int64_t rows = p == 0 ? q : kv;

            ADD(2, rows, H, "%s.%lld.self_attn.%c_proj.weight", L,
                (long long)i, x);
            if (h->bias)
                ADD(1, rows, 0, "%s.%lld.self_attn.%c_proj.bias", L,
                    (long long)i, x);
            if (h->qk_norm && p < 2)
                ADD(1, h->head_dim, 0, "%s.%lld.self_attn.%c_norm.weight", L,
                    (long long)i, x);
        }
        ADD(2, H, q, "%s.%lld.self_attn.o_proj.weight", L, (long long)i);
        if (h->bias)
            ADD(1, H, 0, "%s.%lld.self_attn.o_proj.bias", L, (long long)i);
mlp:
        ADD(1, H, 0, "%s.%lld.post_attention_layernorm.weight", L,
            (long long)i);
        if (hf_is_moe_layer(h, i)) {
            ADD(2, h->experts, H, "%s.%lld.mlp.gate.weight", L, (long long)i);
            if (h->mla) { /* the router's bias, f32 in the checkpoints */
                char name[256];
                int64_t n[1] = {h->experts};

                snprintf(name, sizeof(name), "%s.%lld.mlp.gate."
                         "e_score_correction_bias", L, (long long)i);
                if (add_tensor(m, name, "f32", 1, n, err, errlen))
                    return -1;
            }
            for (int64_t e = 0; e < h->experts; e++) {
                ADD(2, h->moe_inter, H, "%s.%lld.mlp.experts.%lld.gate_proj."
                    "weight", L, (long long)i, (long long)e);
                ADD(2, h->moe_inter, H, "%s.%lld.mlp.experts.%lld.up_proj."
                    "weight", L, (long long)i, (long long)e);
                ADD(2, H, h->moe_inter, "%s.%lld.mlp.experts.%lld.down_proj."
                    "weight", L, (long long)i, (long long)e);
            }
            if (h->shared > 0) {
                int64_t si = h->moe_inter * h->shared;

                ADD(2, si, H, "%s.%lld.mlp.shared_experts.gate_proj.weight",
                    L, (long long)i);
                ADD(2, si, H, "%s.%lld.mlp.shared_experts.up_proj.weight",
                    L, (long long)i);
                ADD(2, H, si, "%s.%lld.mlp.shared_experts.down_proj.weight",
                    L, (long long)i);
            }
        } else {
            ADD(2, h->inter, H, "%s.%lld.mlp.gate_proj.weight", L,
                (long long)i);
            ADD(2, h->inter, H, "%s.%lld.mlp.up_proj.weight", L,
                (long long)i);
            ADD(2, H, h->inter, "%s.%lld.mlp.down_proj.weight", L,
                (long long)i);
        }
    }
    ADD(1, H, 0, "model.norm.weight");
    if (!h->tied)
        ADD(2, h->vocab, H, "lm_head.weight");
#undef ADD
    return 0;
}

static int load_hf(struct model *m, const char *arg,
                   const char *const *layouts, char *err, size_t errlen)
{
    char *file = strdup(arg), *colon;
    long long limit = -1;
    json_object *root = NULL, *v;
    struct hf h = {0};
    int rc = -1;

    if (file == NULL)
        return fail(err, errlen, "no memory");
    colon = strrchr(file, ':');
    if (colon != NULL && colon[1] != '\0' &&
        strspn(colon + 1, "0123456789") == strlen(colon + 1)) {
        limit = atoll(colon + 1);
        *colon = '\0';
        if (limit < 1) {
            fail(err, errlen, "hf: LAYERS must be at least 1");
            goto out;
        }
    }
    root = json_object_from_file(file);
    if (root == NULL) {
        fail(err, errlen, "hf: cannot read JSON from \"%s\": %s", file,
             json_util_get_last_err() ? json_util_get_last_err() : "?");
        goto out;
    }
    if (json_object_get_type(root) != json_type_object) {
        fail(err, errlen, "hf: %s is not a JSON object", file);
        goto out;
    }
    if (hf_int(root, "hidden_size", 0, 1, &h.hidden, file, err, errlen) ||
        hf_int(root, "num_attention_heads", 0, 1, &h.heads, file, err,
                errlen) ||
        hf_int(root, "num_hidden_layers", 0, 1, &h.layers, file, err,
                errlen) ||
        hf_int(root, "vocab_size", 0, 1, &h.vocab, file, err, errlen) ||
        hf_int(root, "num_key_value_heads", h.heads, 0, &h.kv_heads, file,
                err, errlen) ||
        hf_int(root, "head_dim", h.heads ? h.hidden / h.heads : 0, 0,
                &h.head_dim, file, err, errlen) ||
        hf_int(root, "num_experts", 0, 0, &h.experts, file, err, errlen) ||
        hf_int(root, "decoder_sparse_step", 1, 0, &h.sparse_step, file, err,
                errlen))
        goto out;
    /* The DeepSeek-V3 family (model_type deepseek_v3 or kimi_k2): MLA,
     * n_routed_experts and n_shared_experts, dense first layers. */
    if (json_object_object_get_ex(root, "kv_lora_rank", &v) && v != NULL) {
        h.mla = 1;
        if (hf_int(root, "kv_lora_rank", 0, 1, &h.kv_lora, file, err,
                   errlen) ||
            hf_int(root, "q_lora_rank", 0, 0, &h.q_lora, file, err,
                   errlen) ||
            hf_int(root, "qk_nope_head_dim", 0, 1, &h.qk_nope, file, err,
                   errlen) ||
            hf_int(root, "qk_rope_head_dim", 0, 1, &h.qk_rope, file, err,
                   errlen) ||
            hf_int(root, "v_head_dim", 0, 1, &h.v_head, file, err, errlen) ||
            hf_int(root, "n_routed_experts", 0, 0, &h.experts, file, err,
                   errlen) ||
            hf_int(root, "n_shared_experts", 0, 0, &h.shared, file, err,
                   errlen) ||
            hf_int(root, "first_k_dense_replace", 0, 0, &h.first_dense,
                   file, err, errlen) ||
            hf_int(root, "moe_layer_freq", 1, 0, &h.sparse_step, file, err,
                   errlen))
            goto out;
    }
    if (hf_int(root, "intermediate_size", 0, h.experts == 0, &h.inter, file,
                err, errlen) ||
        hf_int(root, "moe_intermediate_size", h.inter, 0, &h.moe_inter,
                file, err, errlen))
        goto out;
    if (h.hidden == 0 || h.heads == 0 || h.kv_heads == 0 ||
        h.head_dim == 0 || h.vocab == 0 || h.layers == 0 ||
        (h.experts == 0 && h.inter == 0) ||
        (h.experts > 0 && h.moe_inter == 0)) {
        fail(err, errlen, "hf: %s: a size is 0 (hidden_size, heads, "
             "head_dim, vocab_size, num_hidden_layers, intermediate sizes)",
             file);
        goto out;
    }
    h.dtype = "bf16";
    if ((json_object_object_get_ex(root, "torch_dtype", &v) ||
         json_object_object_get_ex(root, "dtype", &v)) &&
        json_object_get_type(v) == json_type_string)
        h.dtype = json_object_get_string(v);
    if (json_object_object_get_ex(root, "tie_word_embeddings", &v))
        h.tied = json_object_get_boolean(v);
    if (json_object_object_get_ex(root, "attention_bias", &v))
        h.bias = json_object_get_boolean(v);
    if (json_object_object_get_ex(root, "mlp_only_layers", &v) &&
        json_object_get_type(v) == json_type_array)
        h.mlp_only = v;
    if (json_object_object_get_ex(root, "model_type", &v) &&
        json_object_get_type(v) == json_type_string)
        h.qk_norm = strncmp(json_object_get_string(v), "qwen3", 5) == 0;
    if (limit > 0 && limit < h.layers)
        h.layers = limit;
    if (hf_tensors(m, &h, err, errlen) == 0)
        rc = shard(m, layouts, err, errlen);
out:
    json_object_put(root);
    free(file);
    return rc;
}

/* ---- manifest files ---------------------------------------------------- */

/* The library has checked the file (fx_manifest_load); this reads the
 * same tensors and pieces, in file order, for the layout and the pattern. */
static int load_manifest(struct model *m, const char *file, char *err,
                         size_t errlen)
{
    json_object *root, *tensors, *ranks;
    fx_manifest_t *fm = NULL;
    uint32_t cursor = 0;
    int rc = -1, max_rank = -1;

    if (fx_manifest_load(file, &fm) != FX_OK)
        return fail(err, errlen, "%s", fx_last_error(NULL));
    fx_manifest_destroy(fm);
    root = json_object_from_file(file);
    if (root == NULL || !json_object_object_get_ex(root, "tensors", &tensors))
        goto bad;
    for (size_t i = 0; i < json_object_array_length(tensors); i++) {
        json_object *o = json_object_array_get_idx(tensors, i);
        json_object *jname, *jdtype, *jshape;
        int64_t shape[MODEL_MAX_DIMS];
        int ndim;

        if (json_object_object_get_ex(o, "view", NULL) ||
            json_object_object_get_ex(o, "target_dtype", NULL)) {
            fail(err, errlen, "manifest %s: tensors[%zu] is a view or is "
                 "converted, which this benchmark's pattern and check do "
                 "not follow (tests/integration/test_layouts does; here use "
                 "--source-layout, --target-layout and --dtypes)", file, i);
            goto out;
        }
        if (!json_object_object_get_ex(o, "name", &jname) ||
            !json_object_object_get_ex(o, "dtype", &jdtype) ||
            !json_object_object_get_ex(o, "shape", &jshape))
            goto bad;
        ndim = (int)json_object_array_length(jshape);
        for (int d = 0; d < ndim && d < MODEL_MAX_DIMS; d++)
            shape[d] = json_object_get_int64(
                json_object_array_get_idx(jshape, (size_t)d));
        if (add_tensor(m, json_object_get_string(jname),
                       json_object_get_string(jdtype), ndim, shape, err,
                       errlen))
            goto out;
    }
    if (!json_object_object_get_ex(root, "ranks", &ranks))
        ranks = NULL;
    for (size_t i = 0; ranks && i < json_object_array_length(ranks); i++) {
        json_object *rk = json_object_array_get_idx(ranks, i), *v;
        int rank;

        json_object_object_get_ex(rk, "rank", &v);
        rank = (int)json_object_get_int64(v);
        max_rank = rank > max_rank ? rank : max_rank;
        for (int role = FX_SOURCE; role <= FX_TARGET; role++) {
            json_object *list;

            if (!json_object_object_get_ex(rk,
                                           plan_role_name((fx_role_t)role),
                                           &list))
                continue;
            for (size_t j = 0; j < json_object_array_length(list); j++) {
                json_object *pc = json_object_array_get_idx(list, j), *jt;
                const char *name;
                uint32_t t;
                int dim = -1;
                int64_t start = 0, end = 0;

                if (json_object_object_get_ex(pc, "box", NULL) ||
                    json_object_object_get_ex(pc, "flat", NULL)) {
                    fail(err, errlen, "manifest %s: ranks[%zu] has boxes or "
                         "flat ranges, which this benchmark reads from "
                         "--source-layout and --target-layout only", file,
                         i);
                    goto out;
                }
                json_object_object_get_ex(pc, "tensor", &jt);
                name = json_object_get_string(jt);
                /* Pieces mostly follow the tensors' order: look from
                 * the last one found onwards, wrapping around. */
                for (t = 0; t < m->nt; t++)
                    if (strcmp(m->t[(cursor + t) % m->nt].name, name) == 0)
                        break;
                if (t == m->nt)
                    goto bad;
                t = (cursor + t) % m->nt;
                cursor = t + 1;
                if (json_object_object_get_ex(pc, "dim", &v)) {
                    dim = (int)json_object_get_int64(v);
                    json_object_object_get_ex(pc, "start", &v);
                    start = json_object_get_int64(v);
                    json_object_object_get_ex(pc, "end", &v);
                    end = json_object_get_int64(v);
                }
                if (add_piece(m, rank, (fx_role_t)role, t, dim, start, end,
                              err, errlen))
                    goto out;
            }
        }
    }
    if (max_rank + 1 != m->nranks) {
        fail(err, errlen, "manifest %s names ranks 0 to %d (%d ranks), but "
             "--sources %d --targets %d make %d", file, max_rank,
             max_rank + 1, m->nsrc, m->ntgt, m->nranks);
        goto out;
    }
    m->file = file;
    rc = 0;
    goto out;
bad:
    fail(err, errlen, "manifest %s: cannot read back what fabxfer accepted",
         file);
out:
    json_object_put(root);
    return rc;
}

/* Each rank's pieces in one region: sources as an allocator would place
 * them (each start rounded up to 64 bytes, plus 64: never one flat
 * buffer), targets in manifest order, back to back or m->tgt_gap bytes
 * apart. */
static int layout(struct model *m, char *err, size_t errlen)
{
    m->rank_len = calloc(m->nranks ? (size_t)m->nranks : 1,
                         sizeof(*m->rank_len));
    if (m->rank_len == NULL)
        return fail(err, errlen, "no memory");
    for (size_t i = 0; i < m->np; i++) {
        struct model_piece *p = &m->p[i];
        uint64_t *len = &m->rank_len[p->rank];

        if ((p->rank < m->nsrc) != (p->role == FX_SOURCE))
            return fail(err, errlen, "rank %d holds a %s piece of \"%s\", "
                        "but ranks 0..%d are sources and %d..%d targets",
                        p->rank, plan_role_name(p->role),
                        m->t[p->tensor].name, m->nsrc - 1, m->nsrc,
                        m->nranks - 1);
        if (p->role == FX_SOURCE)
            *len = (*len + SRC_ALIGN - 1) / SRC_ALIGN * SRC_ALIGN + SRC_ALIGN;
        p->off = *len;
        *len += p->bytes + (p->role == FX_TARGET ? m->tgt_gap : 0);
    }
    return 0;
}

int model_load(const char *spec, int nsrc, int ntgt, uint64_t tgt_gap,
               const char *const *layouts, struct model **out, char *err,
               size_t errlen)
{
    struct model *m = calloc(1, sizeof(*m));
    int rc;

    if (m == NULL)
        return fail(err, errlen, "no memory");
    m->nsrc = nsrc;
    m->ntgt = ntgt;
    m->nranks = nsrc + ntgt;
    m->tgt_gap = tgt_gap;
    if (strncmp(spec, "synthetic:", 10) == 0)
        rc = load_synthetic(m, spec + 10, layouts, err, errlen);
    else if (strncmp(spec, "hf:", 3) == 0)
        rc = load_hf(m, spec + 3, layouts, err, errlen);
    else if (layouts && (layouts[0] || layouts[1]))
        rc = fail(err, errlen, "a manifest file holds its own layout: "
                  "--source-layout and --target-layout are for synthetic: "
                  "and hf: models");
    else
        rc = load_manifest(m, spec, err, errlen);
    if (rc == 0)
        rc = layout(m, err, errlen);
    if (rc != 0) {
        model_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

/* View t as fx_manifest_add_view takes it: names and bounds apart. */
static int add_manifest_view(fx_manifest_t *fm, const struct model *m,
                             uint32_t t)
{
    const struct model_tensor *v = &m->t[t];
    const char **names = calloc(v->nparts, sizeof(*names));
    int64_t *start = calloc(v->nparts, sizeof(*start));
    int64_t *end = calloc(v->nparts, sizeof(*end));
    int rc = -1;

    if (names == NULL || start == NULL || end == NULL)
        goto out;
    for (uint32_t i = 0; i < v->nparts; i++) {
        names[i] = m->t[v->part[i].tensor].name;
        start[i] = v->part[i].start;
        end[i] = v->part[i].end;
    }
    rc = fx_manifest_add_view(fm, v->name, v->view_dim, v->nparts, names,
                              start, end) == FX_OK ? 0 : -1;
out:
    free(names);
    free(start);
    free(end);
    return rc;
}

int model_manifest(const struct model *m, fx_manifest_t **out)
{
    fx_manifest_t *fm;

    if (m->file != NULL)
        return fx_manifest_load(m->file, out) == FX_OK ? 0 : -1;
    if (fx_manifest_create(&fm) != FX_OK)
        return -1;
    for (uint32_t t = 0; t < m->nt; t++)
        if (m->t[t].view_dim < 0 &&
            fx_manifest_add_tensor(fm, m->t[t].name, m->t[t].dtype,
                                   m->t[t].ndim, m->t[t].shape) != FX_OK)
            goto fail;
    for (uint32_t t = 0; t < m->nt; t++)
        if (m->t[t].scale >= 0 &&
            (fx_manifest_set_target_dtype(fm, m->t[t].name,
                                          m->t[t].tdtype) != FX_OK ||
             fx_manifest_set_block_scale(fm, m->t[t].name,
                                         m->t[m->t[t].scale].name, FP8_BLOCK,
                                         FP8_BLOCK) != FX_OK))
            goto fail;
    /* Views after the dtypes, which they take from their parts. */
    for (uint32_t t = 0; t < m->nt; t++)
        if (m->t[t].view_dim >= 0 && add_manifest_view(fm, m, t) != 0)
            goto fail;
    for (size_t i = 0; i < m->np; i++) {
        const struct model_piece *p = &m->p[i];

        int64_t lo[MODEL_MAX_DIMS], hi[MODEL_MAX_DIMS];

        if (p->as_box)
            model_piece_box(m, p, lo, hi);
        if (p->dim == MODEL_FLAT
                ? fx_manifest_add_flat(fm, p->rank, p->role,
                                       m->t[p->tensor].name, p->start,
                                       p->end) != FX_OK
            : p->as_box
                ? fx_manifest_add_box(fm, p->rank, p->role,
                                      m->t[p->tensor].name,
                                      m->t[p->tensor].ndim, lo,
                                      hi) != FX_OK
                : fx_manifest_add_piece(fm, p->rank, p->role,
                                        m->t[p->tensor].name, p->dim,
                                        p->start, p->end) != FX_OK)
            goto fail;
    }
    *out = fm;
    return 0;
fail:
    fx_manifest_destroy(fm);
    return -1;
}

/* One side's rules for a layout rules can say: "dp" holds every tensor
 * whole, "tp" (and its box and flat spellings, which build tp's plan)
 * cuts 2-D tensors by rows over the side's ranks, "ep=G" deals the
 * model's nexp routed experts round robin over G groups of n / G ranks
 * that cut them by rows (the grid etp x ep), the other tensors as tp over
 * both dims together, "fsdp" cuts every tensor's flattening. vllm's views
 * are no rules. */
static int put_side(FILE *f, const char *layout, int first, int n,
                    long nexp, char *err, size_t errlen)
{
    const char *l = layout ? layout : first == 0 ? "dp" : "tp";
    long g;

    if (strcmp(l, "dp") == 0) {
        fprintf(f, "{\"first\": %d, \"grid\": [[\"dp\", %d]], \"rules\": "
                "[{\"tensors\": \"*\"}]}", first, n);
        return 0;
    }
    if (strncmp(l, "tp", 2) == 0 && (l[2] == '\0' || strcmp(l, "tp-box") == 0 ||
                                     strcmp(l, "tp-flat") == 0)) {
        fprintf(f, "{\"first\": %d, \"grid\": [[\"tp\", %d]], \"rules\": "
                "[{\"tensors\": \"*\", \"ndim\": 2, \"cut\": {\"tp\": 0}}, "
                "{\"tensors\": \"*\"}]}", first, n);
        return 0;
    }
    if (strcmp(l, "fsdp") == 0) {
        fprintf(f, "{\"first\": %d, \"grid\": [[\"fsdp\", %d]], "
                "\"rules\": [{\"tensors\": \"*\", \"cut\": {\"fsdp\": "
                "\"flat\"}}]}", first, n);
        return 0;
    }
    if (ep_groups(l, &g)) {
        /* as add_layout_piece: groups of one rank unless G divides n */
        long per = g > 0 && n % g == 0 ? n / g : 1;

        fprintf(f, "{\"first\": %d, \"grid\": [[\"etp\", %ld], [\"ep\", "
                "%ld]], \"rules\": [", first, per, n / per);
        if (nexp > 0)
            fprintf(f, "{\"tensors\": \"*.experts.[0-9]*\", \"ndim\": 2, "
                    "\"cut\": {\"etp\": 0}, \"place\": [{\"over\": \"ep\", "
                    "\"by\": \"experts\", \"of\": %ld, \"round_robin\": "
                    "true}]}, {\"tensors\": \"*.experts.[0-9]*\", \"place\": "
                    "[{\"over\": \"ep\", \"by\": \"experts\", \"of\": %ld, "
                    "\"round_robin\": true}]}, ", nexp, nexp);
        fprintf(f, "{\"tensors\": \"*\", \"ndim\": 2, \"cut\": {\"etp\": 0, "
                "\"ep\": 0}}, {\"tensors\": \"*\"}]}");
        return 0;
    }
    return fail(err, errlen, "--compact: layout \"%s\" is not one rules "
                "say (dp, tp, fsdp and ep are; vllm's views are listed "
                "only)", l);
}

int model_manifest_compact(const struct model *m, const char *const *layouts,
                           fx_manifest_t **out, char *err, size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    long nexp = 0;
    FILE *f;
    int rc = -1;

    if (m->file != NULL || (layouts && layouts[2]))
        return fail(err, errlen, "--compact: for generated models without "
                    "--dtypes (targets' scale pieces follow their weights' "
                    "rows, which rules do not say)");
    if ((f = open_memstream(&text, &len)) == NULL)
        return fail(err, errlen, "no memory");
    fprintf(f, "{\"version\": 1, \"tensors\": [");
    for (uint32_t t = 0; t < m->nt; t++) {
        fprintf(f, "%s{\"name\": \"%s\", \"dtype\": \"%s\", \"shape\": [",
                t ? ", " : "", m->t[t].name, m->t[t].dtype);
        for (int d = 0; d < m->t[t].ndim; d++)
            fprintf(f, "%s%lld", d ? ", " : "", (long long)m->t[t].shape[d]);
        fprintf(f, "]}");
    }
    fprintf(f, "], \"layout\": {\"sources\": ");
    for (uint32_t t = 0; t < m->nt; t++)
        if (expert_of(m->t[t].name) >= nexp)
            nexp = expert_of(m->t[t].name) + 1;
    if (put_side(f, layouts ? layouts[0] : NULL, 0, m->nsrc, nexp, err,
                 errlen) == 0) {
        fprintf(f, ", \"targets\": ");
        rc = put_side(f, layouts ? layouts[1] : NULL, m->nsrc, m->ntgt, nexp,
                      err, errlen);
    }
    fprintf(f, "}}");
    if (fclose(f) != 0 && rc == 0)
        rc = fail(err, errlen, "no memory");
    if (rc == 0 && fx_manifest_parse(text, len, out) != FX_OK)
        rc = fail(err, errlen, "%s", fx_last_error(NULL));
    free(text);
    return rc;
}

void model_free(struct model *m)
{
    if (m == NULL)
        return;
    for (uint32_t t = 0; t < m->nt; t++) {
        free(m->t[t].name);
        free(m->t[t].part);
    }
    free(m->t);
    free(m->p);
    free(m->rank_len);
    free(m);
}

int model_runs(const struct model_tensor *t, const int64_t *alo,
               const int64_t *ahi, const int64_t *blo, const int64_t *bhi,
               model_run_fn fn, void *arg)
{
    return model_runs_clip(t, alo, ahi, blo, bhi, NULL, NULL, fn, arg);
}

int model_runs_clip(const struct model_tensor *t, const int64_t *alo,
                    const int64_t *ahi, const int64_t *blo,
                    const int64_t *bhi, const int64_t *clo,
                    const int64_t *chi, model_run_fn fn, void *arg)
{
    int64_t lo[MODEL_MAX_DIMS], hi[MODEL_MAX_DIMS], idx[MODEL_MAX_DIMS];
    uint64_t as[MODEL_MAX_DIMS], bs[MODEL_MAX_DIMS], run;
    int n = t->ndim, c = 0;

    if (n == 0)
        return fn(arg, 0, 0, t->esize);
    for (int i = 0; i < n; i++) {
        lo[i] = alo[i] > blo[i] ? alo[i] : blo[i];
        hi[i] = ahi[i] < bhi[i] ? ahi[i] : bhi[i];
        if (clo != NULL) {
            lo[i] = clo[i] > lo[i] ? clo[i] : lo[i];
            hi[i] = chi[i] < hi[i] ? chi[i] : hi[i];
        }
        if (hi[i] <= lo[i])
            return 0;
    }
    /* Dims after c are whole in both boxes: a run spans them. */
    for (int i = n - 1; i >= 0; i--)
        if (lo[i] != alo[i] || hi[i] != ahi[i] || lo[i] != blo[i] ||
            hi[i] != bhi[i]) {
            c = i;
            break;
        }
    run = t->esize;
    for (int i = c; i < n; i++)
        run *= (uint64_t)(hi[i] - lo[i]);
    as[n - 1] = bs[n - 1] = t->esize;
    for (int i = n - 2; i >= 0; i--) {
        as[i] = as[i + 1] * (uint64_t)(ahi[i + 1] - alo[i + 1]);
        bs[i] = bs[i + 1] * (uint64_t)(bhi[i + 1] - blo[i + 1]);
    }
    memcpy(idx, lo, sizeof(idx));
    for (;;) {
        uint64_t a = 0, b = 0;
        int i, rc;

        for (i = 0; i < n; i++) {
            a += (uint64_t)(idx[i] - alo[i]) * as[i];
            b += (uint64_t)(idx[i] - blo[i]) * bs[i];
        }
        if ((rc = fn(arg, a, b, run)) != 0)
            return rc;
        for (i = c - 1; i >= 0; i--) {
            if (++idx[i] < hi[i])
                break;
            idx[i] = lo[i];
        }
        if (i < 0)
            return 0;
    }
}
