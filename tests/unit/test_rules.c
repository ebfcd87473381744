/*
 * The compact manifest: layouts by rules, expanded per rank. Each rank's
 * plan comes from its own expansion only, so the test checks what the
 * ranks must agree on without talking: every segment a target's plan
 * receives is one its source's plan sends (same bytes, same offsets),
 * and back; every target byte comes once from a source byte of the same
 * element (check_plan on the targets' plans); each rank keeps its own
 * pieces and its peers', not the job's.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan_check.h"
#include "rules_collide.h"
#include "util/error.h"

/* A MoE model in the shape of Kimi-K2's, small: an embedding and a head,
 * 4 layers of a block-scaled (FP8 on the targets) dense weight, a norm and
 * 4 experts. The JSON's start, up to its "layout" or "ranks". */
static size_t model_tensors(char *buf, size_t len)
{
    size_t n = 0;

    n += (size_t)snprintf(buf + n, len - n, "{\"tensors\": ["
                          "{\"name\": \"embed\", \"dtype\": \"bf16\", "
                          "\"shape\": [16, 8]},"
                          "{\"name\": \"head\", \"dtype\": \"bf16\", "
                          "\"shape\": [16, 8]}");
    for (int l = 0; l < 4; l++) {
        n += (size_t)snprintf(buf + n, len - n, ","
                              "{\"name\": \"layers.%d.w\", \"dtype\": "
                              "\"bf16\", \"shape\": [8, 8], \"target_dtype\":"
                              " \"fp8_e4m3\", \"block_scale\": {\"tensor\": "
                              "\"layers.%d.w_scale_inv\", \"block\": [4, 4]}},"
                              "{\"name\": \"layers.%d.w_scale_inv\", "
                              "\"dtype\": \"f32\", \"shape\": [2, 2]},"
                              "{\"name\": \"layers.%d.norm\", \"dtype\": "
                              "\"bf16\", \"shape\": [8]}", l, l, l, l);
        for (int e = 0; e < 4; e++)
            n += (size_t)snprintf(buf + n, len - n, ","
                                  "{\"name\": \"layers.%d.experts.%d.w\", "
                                  "\"dtype\": \"bf16\", \"shape\": [6, 8]}",
                                  l, e);
    }
    return n + (size_t)snprintf(buf + n, len - n, "], ");
}

/* Sources tp 2 x dp 2 x pp 2, the embedding and the head on the first and
 * last stage, layers by stage, experts by tp x dp; targets tp 3 x dp 2
 * that cut every matrix by rows (src_rules, tgt_rules below). */
static const char *model_json(char *buf, size_t len, const char *src_rules,
                              const char *tgt_rules)
{
    size_t n = model_tensors(buf, len);

    snprintf(buf + n, len - n, "\"layout\": {"
             "\"sources\": {\"grid\": [[\"tp\", 2], [\"dp\", 2], [\"pp\", 2]],"
             " \"rules\": [%s]},"
             "\"targets\": {\"first\": 8, \"grid\": [[\"tp\", 3], "
             "[\"dp\", 2]], \"rules\": [%s]}}}", src_rules, tgt_rules);
    return buf;
}

static const char *const src_rules =
    "{\"tensors\": \"embed\", \"cut\": {\"tp\": 0},"
    " \"place\": [{\"over\": \"pp\", \"at\": 0}]},"
    "{\"tensors\": \"head\", \"cut\": {\"tp\": 0},"
    " \"place\": [{\"over\": \"pp\", \"at\": -1}]},"
    "{\"tensors\": \"layers.*.experts.*\","
    " \"place\": [{\"over\": \"pp\", \"by\": \"layers\", \"of\": 4},"
    "  {\"over\": [\"tp\", \"dp\"], \"by\": \"experts\", \"of\": 4}]},"
    "{\"tensors\": \"layers.*\", \"ndim\": 2, \"cut\": {\"tp\": 0},"
    " \"place\": [{\"over\": \"pp\", \"by\": \"layers\", \"of\": 4}]},"
    "{\"tensors\": \"layers.*\","
    " \"place\": [{\"over\": \"pp\", \"by\": \"layers\", \"of\": 4}]}";
static const char *const tgt_rules =
    "{\"tensors\": \"*_scale_inv\"},"
    "{\"tensors\": \"*\", \"ndim\": 2, \"cut\": {\"tp\": 0}},"
    "{\"tensors\": \"*\"}";

#define NRANKS 14

static struct plan_manifest *load(const char *sr, const char *tr)
{
    static char buf[16384];
    struct plan_manifest *m = NULL;

    model_json(buf, sizeof(buf), sr, tr);
    expect_ok(manifest_parse_json(buf, strlen(buf), &m));
    return m;
}

/* seg of plan a found in plan b, by what both ends see of it. */
static int seg_in(const struct plan_seg *g, const struct plan *b)
{
    for (size_t i = 0; i < b->nsegs; i++) {
        const struct plan_seg *h = &b->segs[i];

        if (h->source == g->source && h->target == g->target &&
            h->tensor == g->tensor && h->src_off == g->src_off &&
            h->dst_off == g->dst_off && h->run_len == g->run_len &&
            h->count == g->count && h->src_stride == g->src_stride &&
            h->dst_stride == g->dst_stride && h->conv == g->conv)
            return 1;
    }
    return 0;
}

START_TEST(ranks_agree)
{
    struct plan_manifest *m = load(src_rules, tgt_rules), *loc[NRANKS];
    struct plan *p[NRANKS];
    uint64_t whole = manifest_hash(m);

    ck_assert(manifest_compact(m));
    ck_assert_uint_eq(m->npieces, 0);
    for (int r = 0; r < NRANKS; r++) {
        expect_ok(manifest_expand(m, NRANKS, r, &loc[r]));
        ck_assert_int_eq(loc[r]->local_rank, r);
        ck_assert_uint_eq(manifest_hash(loc[r]), whole);
        expect_ok(manifest_validate(loc[r], NRANKS));
        expect_ok(plan_build(loc[r], NRANKS, r, &p[r]));
    }
    /* Every target byte once, from the same element (its own expansion
     * holds only its own target pieces: check_plan sees all of them). */
    for (int r = 8; r < NRANKS; r++) {
        check_plan(loc[r], p[r]);
        check_target_bytes(loc[r], p[r]);
    }
    /* What a target receives, its source sends, and nothing else. */
    for (int r = 0; r < NRANKS; r++)
        for (size_t i = 0; i < p[r]->nsegs; i++) {
            const struct plan_seg *g = &p[r]->segs[i];
            int peer = g->source == r ? g->target : g->source;

            ck_assert_msg(g->source < 8 && g->target >= 8, "rank %d: "
                          "segment %d -> %d", r, g->source, g->target);
            ck_assert_msg(seg_in(g, p[peer]), "rank %d's segment %zu "
                          "(%d -> %d, tensor %u) is not in rank %d's plan",
                          r, i, g->source, g->target, g->tensor, peer);
        }
    /* A source at stage 1 holds none of stage 0's layers, and its
     * expansion none of their pieces. */
    ck_assert_int_lt(manifest_find_piece(loc[4], 4, FX_SOURCE,
                     (uint32_t)manifest_find_tensor(m, "layers.0.w")), 0);
    ck_assert_int_ge(manifest_find_piece(loc[4], 4, FX_SOURCE,
                     (uint32_t)manifest_find_tensor(m, "layers.3.w")), 0);
    /* expert 3 of layer 3: stage 1, tp x dp coordinate 3: rank 7 alone */
    for (int r = 0; r < 8; r++)
        ck_assert_int_eq(manifest_find_piece(loc[r], r, FX_SOURCE,
                         (uint32_t)manifest_find_tensor(
                             m, "layers.3.experts.3.w")) >= 0, r == 7);
    for (int r = 0; r < NRANKS; r++) {
        plan_free(p[r]);
        manifest_free(loc[r]);
    }
    manifest_free(m);
}
END_TEST

/* The pieces each rank's expansion calls its own, listed in one explicit
 * manifest, are a valid layout (replicas identical or disjoint, targets
 * covered) whose plan (greedy replicas) moves the bytes the compact plans
 * do, pair by pair where no replica is chosen. */
START_TEST(same_as_listed)
{
    static char buf[65536];
    struct plan_manifest *m = load(src_rules, tgt_rules), *whole = NULL;
    uint64_t got[NRANKS] = {0};
    size_t n = model_tensors(buf, sizeof(buf));
    struct plan *all;

    n += (size_t)snprintf(buf + n, sizeof(buf) - n, "\"ranks\": [");
    for (int r = 0; r < NRANKS; r++) {
        struct plan_manifest *loc = NULL;
        struct plan *p = NULL;
        int first = 1;

        expect_ok(manifest_expand(m, NRANKS, r, &loc));
        expect_ok(plan_build(loc, NRANKS, r, &p));
        for (int s = 0; s < NRANKS && r >= 8; s++)
            got[r] += p->bytes[s * NRANKS + r];
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s{\"rank\": %d, "
                              "\"%s\": [", r ? "," : "", r,
                              r < 8 ? "source" : "target");
        for (uint32_t i = 0; i < loc->npieces; i++) {
            const struct plan_piece *pc = &loc->pieces[i];
            const struct plan_tensor *t = &loc->tensors[pc->tensor];
            int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];

            /* its own, not the scales a source's weight piece brings */
            if (pc->rank != r || (r < 8 && t->scale_of >= 0))
                continue;
            plan_piece_box(loc, pc, lo, hi);
            n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s{\"tensor\": "
                                  "\"%s\", \"box\": [", first ? "" : ",",
                                  t->name);
            for (int d = 0; d < t->ndim; d++)
                n += (size_t)snprintf(buf + n, sizeof(buf) - n,
                                      "%s[%lld, %lld]", d ? "," : "",
                                      (long long)lo[d], (long long)hi[d]);
            n += (size_t)snprintf(buf + n, sizeof(buf) - n, "]}");
            first = 0;
        }
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "]}");
        plan_free(p);
        manifest_free(loc);
    }
    snprintf(buf + n, sizeof(buf) - n, "]}");
    ck_assert_uint_lt(n, sizeof(buf) - 8);
    expect_ok(manifest_parse_json(buf, strlen(buf), &whole));
    all = build(whole, NRANKS); /* validates, checks every rank's plan */
    check_plan(whole, all);
    for (int r = 8; r < NRANKS; r++) {
        uint64_t want = 0;

        for (int s = 0; s < 8; s++)
            want += all->bytes[s * NRANKS + r];
        ck_assert_msg(got[r] == want, "target %d: %llu bytes by rules, %llu "
                      "listed", r, (unsigned long long)got[r],
                      (unsigned long long)want);
    }
    (void)tensor; /* plan_check.h's builders: the JSON builds here */
    (void)piece;
    (void)new_manifest;
    plan_free(all);
    manifest_free(whole);
    manifest_free(m);
}
END_TEST

/* Two grid dims cutting one tensor dim cut it together, the first
 * fastest, and experts dealt round robin: sources etp 2 x ep 2, dense
 * rows [2 j, 2 j + 2) on rank j, expert e on the ep group e mod 2 cut by
 * rows over its etp ranks; one target holds everything and gets every
 * byte once. */
START_TEST(joint_cut_round_robin)
{
    const char *json =
        "{\"tensors\": [{\"name\": \"dense\", \"dtype\": \"bf16\", "
        "\"shape\": [8, 4]}, {\"name\": \"l.0.experts.{0..4}.w\", "
        "\"dtype\": \"bf16\", \"shape\": [4, 4]}], \"layout\": {"
        "\"sources\": {\"grid\": [[\"etp\", 2], [\"ep\", 2]], \"rules\": ["
        "{\"tensors\": \"*.experts.*\", \"cut\": {\"etp\": 0}, \"place\": "
        "[{\"over\": \"ep\", \"by\": \"experts\", \"of\": 5, "
        "\"round_robin\": true}]},"
        "{\"tensors\": \"*\", \"cut\": {\"etp\": 0, \"ep\": 0}}]},"
        "\"targets\": {\"first\": 4, \"grid\": [[\"tp\", 1]], "
        "\"rules\": [{\"tensors\": \"*\"}]}}}";
    struct plan_manifest *m = NULL, *loc = NULL;
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];
    struct plan *p = NULL;
    char name[32];
    int held;

    expect_ok(manifest_parse_json(json, strlen(json), &m));
    for (int r = 0; r < 4; r++) {
        expect_ok(manifest_rules_box(m, r, FX_SOURCE, 0, lo, hi, &held));
        ck_assert_msg(held && lo[0] == 2 * r && hi[0] == 2 * r + 2 &&
                      lo[1] == 0 && hi[1] == 4, "rank %d: dense rows "
                      "[%lld, %lld)", r, (long long)lo[0], (long long)hi[0]);
        for (int e = 0; e < 5; e++) {
            snprintf(name, sizeof(name), "l.0.experts.%d.w", e);
            expect_ok(manifest_rules_box(
                m, r, FX_SOURCE, (uint32_t)manifest_find_tensor(m, name), lo,
                hi, &held));
            ck_assert_msg(held == (e % 2 == r / 2), "rank %d %s expert %d",
                          r, held ? "holds" : "lacks", e);
            ck_assert(!held || (lo[0] == 2 * (r % 2) && hi[0] == lo[0] + 2));
        }
    }
    expect_ok(manifest_expand(m, 5, 4, &loc));
    expect_ok(manifest_validate(loc, 5));
    expect_ok(plan_build(loc, 5, 4, &p));
    check_plan(loc, p);
    check_target_bytes(loc, p);
    for (int s = 0; s < 4; s++) /* 16 bytes of dense, 16 of each expert */
        ck_assert_uint_eq(p->bytes[s * 5 + 4], 16 + 16 * (s < 2 ? 3 : 2));
    plan_free(p);
    manifest_free(loc);
    manifest_free(m);
}
END_TEST

/* A flat cut: FSDP's flat shards, elements [floor(numel k / 3), ...) of
 * each tensor's flattening on source k, to targets that cut rows. Ranges
 * that are no box stay ranges, the rest become boxes; the two ends of
 * every segment agree, and every target byte comes once. */
START_TEST(flat_cut)
{
    const char *json =
        "{\"tensors\": [{\"name\": \"a\", \"dtype\": \"f32\", "
        "\"shape\": [7, 5]}, {\"name\": \"b\", \"dtype\": \"f32\", "
        "\"shape\": [4]}, {\"name\": \"c\", \"dtype\": \"bf16\", "
        "\"shape\": [3, 4, 2]}], \"layout\": {"
        "\"sources\": {\"grid\": [[\"fsdp\", 3]], \"rules\": ["
        "{\"tensors\": \"*\", \"cut\": {\"fsdp\": \"flat\"}}]},"
        "\"targets\": {\"first\": 3, \"grid\": [[\"tp\", 2]], "
        "\"rules\": [{\"tensors\": \"*\", \"cut\": {\"tp\": 0}}]}}}";
    struct plan_manifest *m = NULL, *loc[5];
    int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];
    struct plan *p[5];
    int held;

    expect_ok(manifest_parse_json(json, strlen(json), &m));
    /* a: 35 elements, [0, 11) on rank 0 (rows 0-1 and a bit): a range */
    expect_ok(manifest_rules_box(m, 0, FX_SOURCE, 0, lo, hi, &held));
    ck_assert_int_eq(held, 2);
    ck_assert(lo[0] == 0 && hi[0] == 11);
    /* b: 4 elements, [1, 2) on rank 1: one box */
    expect_ok(manifest_rules_box(m, 1, FX_SOURCE, 1, lo, hi, &held));
    ck_assert_int_eq(held, 1);
    ck_assert(lo[0] == 1 && hi[0] == 2);
    for (int r = 0; r < 5; r++) {
        expect_ok(manifest_expand(m, 5, r, &loc[r]));
        expect_ok(manifest_validate(loc[r], 5));
        expect_ok(plan_build(loc[r], 5, r, &p[r]));
    }
    for (int r = 3; r < 5; r++) {
        check_plan(loc[r], p[r]);
        check_target_bytes(loc[r], p[r]);
    }
    for (int r = 0; r < 5; r++)
        for (size_t i = 0; i < p[r]->nsegs; i++) {
            const struct plan_seg *g = &p[r]->segs[i];

            ck_assert_msg(seg_in(g, p[g->source == r ? g->target
                                                     : g->source]),
                          "rank %d's segment %zu (%d -> %d) has no match",
                          r, i, g->source, g->target);
        }
    /* Target 3 holds a's rows [0, 3), elements [0, 15): 11 from source 0
     * and 4 from source 1, b's [0, 2) one from each, c's first row from
     * source 0; target 4 the rest. */
    ck_assert_uint_eq(p[3]->bytes[0 * 5 + 3], 11 * 4 + 4 + 8 * 2);
    ck_assert_uint_eq(p[3]->bytes[1 * 5 + 3], 4 * 4 + 4);
    ck_assert_uint_eq(p[3]->bytes[2 * 5 + 3], 0);
    ck_assert_uint_eq(p[4]->bytes[1 * 5 + 4], 8 * 4 + 8 * 2);
    ck_assert_uint_eq(p[4]->bytes[2 * 5 + 4], 12 * 4 + 2 * 4 + 8 * 2);
    for (int r = 0; r < 5; r++) {
        plan_free(p[r]);
        manifest_free(loc[r]);
    }
    manifest_free(m);
}
END_TEST

/* A target piece that no source rule covers is named by the target's own
 * validation; an expansion refuses a job smaller than the layouts. */
START_TEST(gaps_and_sizes)
{
    struct plan_manifest *m = load(
        "{\"tensors\": \"layers.*\", \"ndim\": 2, \"cut\": {\"tp\": 0},"
        " \"place\": [{\"over\": \"pp\", \"by\": \"layers\", \"of\": 4}]}",
        tgt_rules), *loc = NULL;
    fx_status_t st;

    st = manifest_expand(m, 13, 9, &loc);
    ck_assert_int_eq(st, FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(fx_last_error(NULL), "reach rank 13"));
    expect_ok(manifest_expand(m, NRANKS, 9, &loc));
    st = manifest_validate(loc, NRANKS);
    ck_assert_int_eq(st, FX_ERR_INVALID);
    ck_assert_msg(strstr(fx_last_error(NULL), "\"embed\"") != NULL &&
                  strstr(fx_last_error(NULL), "no source") != NULL,
                  "%s", fx_last_error(NULL));
    manifest_free(loc);
    manifest_free(m);
}
END_TEST

static const struct bad {
    const char *src, *want;
} bad[] = {
    {"{\"tensors\": \"*\", \"cut\": {\"ep\": 0}}", "not a grid dim"},
    {"{\"tensors\": \"*\", \"place\": [{\"over\": \"pp\", \"at\": 0, "
     "\"round_robin\": true}]}", "\"round_robin\" deals the numbers of"},
    {"{\"tensors\": \"*\", \"place\": [{\"over\": \"pp\", \"by\": "
     "\"layers\", \"of\": 4, \"round_robin\": 1}]}", "true or false"},
    {"{\"tensors\": \"*\", \"cut\": {\"tp\": 0}, \"place\": [{\"over\": "
     "\"tp\", \"at\": 0}]}", "cut or placed twice"},
    {"{\"tensors\": \"*\", \"place\": [{\"over\": \"pp\", \"at\": 2}]}",
     "places at 2 of 2"},
    {"{\"tensors\": \"*\", \"place\": [{\"over\": \"pp\"}]}",
     "give \"at\""},
    {"{\"tensors\": \"*\", \"place\": [{\"over\": \"pp\", \"by\": "
     "\"layers\"}]}", "missing \"of\""},
    {"{\"tensors\": \"*\", \"shard\": 1}", "shard"},
    {"{\"tensors\": \"*\", \"cut\": {\"tp\": \"rows\"}}",
     "a tensor dim or \"flat\""},
    {"{\"tensors\": \"*\", \"cut\": {\"tp\": \"flat\", \"dp\": 0}}",
     "the flattening too"},
    {"{\"cut\": {\"tp\": 0}}", "missing \"tensors\""},
};

/* Refusals at parse time name the rule and the culprit. */
START_TEST(json_refusals)
{
    static char buf[16384];
    struct plan_manifest *m = NULL;
    fx_status_t st;

    model_json(buf, sizeof(buf), bad[_i].src, tgt_rules);
    st = manifest_parse_json(buf, strlen(buf), &m);
    ck_assert_int_eq(st, FX_ERR_INVALID);
    ck_assert_msg(strstr(fx_last_error(NULL), bad[_i].want) != NULL,
                  "rule %s: \"%s\" lacks \"%s\"", bad[_i].src,
                  fx_last_error(NULL), bad[_i].want);
    ck_assert_ptr_null(m);
}
END_TEST

/* Refusals at expansion: a rule that reads a number the name lacks, a
 * cut of a dim the tensor lacks. */
START_TEST(expand_refusals)
{
    static const struct bad late[] = {
        {"{\"tensors\": \"*\", \"place\": [{\"over\": \"pp\", \"by\": "
         "\"experts\", \"of\": 4}]}", "\"embed\" by its number after "
         "\"experts.\", of 4: it has none"},
        {"{\"tensors\": \"*\", \"cut\": {\"tp\": 1}}",
         "cuts dim 1 of \"layers.0.norm\", which has 1"},
        {"{\"tensors\": \"*\", \"cut\": {\"tp\": \"flat\"}}",
         "cuts \"layers.0.w\" flat, and its block scales need whole "
         "blocks"},
    };

    for (size_t i = 0; i < sizeof(late) / sizeof(late[0]); i++) {
        struct plan_manifest *m = load(late[i].src, tgt_rules), *loc = NULL;
        fx_status_t st = manifest_expand(m, NRANKS, 0, &loc);

        ck_assert_int_eq(st, FX_ERR_INVALID);
        ck_assert_msg(strstr(fx_last_error(NULL), late[i].want) != NULL,
                      "\"%s\" lacks \"%s\"", fx_last_error(NULL),
                      late[i].want);
        manifest_free(m);
    }
}
END_TEST

/* "layout" with "ranks", pieces added to a compact manifest, and the two
 * sides' ranks overlapping are refused. */
START_TEST(forms_exclusive)
{
    struct plan_manifest *m = load(src_rules, tgt_rules);
    const char *both = "{\"tensors\": [{\"name\": \"a\", \"dtype\": \"f32\", "
                       "\"shape\": [4]}], \"ranks\": [], \"layout\": {}}";
    const char *overlap = "{\"tensors\": [{\"name\": \"a\", \"dtype\": "
                          "\"f32\", \"shape\": [4]}], \"layout\": {"
                          "\"sources\": {\"grid\": [[\"dp\", 2]], \"rules\":"
                          " [{\"tensors\": \"*\"}]}, \"targets\": "
                          "{\"first\": 1, \"grid\": [[\"tp\", 2]], "
                          "\"rules\": [{\"tensors\": \"*\"}]}}}";
    struct plan_manifest *x = NULL;

    ck_assert_int_eq(manifest_add_piece(m, 0, FX_SOURCE, "embed", -1, 0, 0),
                     FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(fx_last_error(NULL), "by rules"));
    ck_assert_int_eq(manifest_parse_json(both, strlen(both), &x),
                     FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(fx_last_error(NULL), "not both"));
    ck_assert_int_eq(manifest_parse_json(overlap, strlen(overlap), &x),
                     FX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(fx_last_error(NULL), "overlap"));
    manifest_free(m);
}
END_TEST

/* Names with ranges make the same manifest as the names listed: the same
 * tensors in the same order (the first range slowest), with their block
 * scales; a malformed range, a view's name with one and a scale whose
 * name lacks its weight's ranges are refused. */
START_TEST(name_ranges)
{
    static char listed[8192];
    const char *ranged =
        "{\"tensors\": [{\"name\": \"l.{1..2}.e.{0..2}.w\", \"dtype\": "
        "\"bf16\", \"shape\": [8, 8], \"target_dtype\": \"fp8_e4m3\", "
        "\"block_scale\": {\"tensor\": \"l.{1..2}.e.{0..2}.s\", "
        "\"block\": [4, 4]}}, {\"name\": \"l.{1..2}.e.{0..2}.s\", "
        "\"dtype\": \"f32\", \"shape\": [2, 2]}]}";
    static const struct bad refused[] = {
        {"{\"tensors\": [{\"name\": \"l.{2..1}.w\", \"dtype\": \"f32\", "
         "\"shape\": [4]}]}", "a range is {A..B}"},
        {"{\"tensors\": [{\"name\": \"l.{x}.w\", \"dtype\": \"f32\", "
         "\"shape\": [4]}]}", "a range is {A..B}"},
        {"{\"tensors\": [{\"name\": \"l.{0..1}.w\", \"dtype\": "
         "\"bf16\", \"shape\": [4, 4], \"target_dtype\": \"fp8_e4m3\", "
         "\"block_scale\": {\"tensor\": \"s\"}}, {\"name\": \"s\", "
         "\"dtype\": \"f32\", \"shape\": [1, 1]}]}",
         "a scale tensor's name takes its weight's"},
        {"{\"tensors\": [{\"name\": \"a\", \"dtype\": \"f32\", "
         "\"shape\": [4]}, {\"name\": \"v.{0..1}\", \"view\": "
         "{\"dim\": 0, \"of\": [{\"tensor\": \"a\"}]}}]}",
         "a view's name takes no ranges"},
        /* A view's range takes its view's ranges, not others that its
         * values would silently replace. */
        {"{\"tensors\": [{\"name\": \"a.{0..6}\", \"dtype\": \"f32\", "
         "\"shape\": [4]}, {\"name\": \"v.{0..1}\", \"view\": "
         "{\"dim\": 0, \"of\": [{\"tensor\": \"a.{5..6}\"}]}}]}",
         "tensors[1].view.of[0].tensor: \"a.{5..6}\": its range 1 is "
         "{5..6} and its view's name's {0..1}"},
        /* A stack's later slab, made by a range, names its missing
         * tensor (its first slab's are checked as given). */
        {"{\"tensors\": [{\"name\": \"e.{0..1}\", \"dtype\": \"f32\", "
         "\"shape\": [4]}, {\"name\": \"v\", \"view\": {\"dim\": 0, "
         "\"stack\": [{\"tensor\": \"e.{0..2}\"}]}}]}",
         "unknown tensor \"e.2\""},
        /* Ranges of views are bounded before anything is made. */
        {"{\"tensors\": [{\"name\": \"e.0\", \"dtype\": \"f32\", "
         "\"shape\": [4]}, {\"name\": \"v\", \"view\": {\"dim\": 0, "
         "\"stack\": [{\"tensor\": \"e.{0..9999999}\"}]}}]}",
         "make more than 4194304 ranges of views"},
        /* Only what docs/manifest.md defines: digits, no sign, space or
         * leading zero, the entry named. */
        {"{\"tensors\": [{\"name\": \"a\", \"dtype\": \"f32\", "
         "\"shape\": [4]}, {\"name\": \"l.{ 1..2}.w\", \"dtype\": "
         "\"f32\", \"shape\": [4]}]}",
         "tensors[1].name: \"l.{ 1..2}.w\": a range is {A..B}"},
        {"{\"tensors\": [{\"name\": \"l.{+1..2}.w\", \"dtype\": "
         "\"f32\", \"shape\": [4]}]}",
         "tensors[0].name: \"l.{+1..2}.w\": a range is {A..B}"},
        {"{\"tensors\": [{\"name\": \"l.{01..02}.w\", \"dtype\": "
         "\"f32\", \"shape\": [4]}]}",
         "tensors[0].name: \"l.{01..02}.w\": a range is {A..B}"},
        {"{\"tensors\": [{\"name\": \"l.{1..02}.w\", \"dtype\": "
         "\"f32\", \"shape\": [4]}]}", "without sign, space or leading"},
        {"{\"tensors\": [{\"name\": \"l.{1.. 2}.w\", \"dtype\": "
         "\"f32\", \"shape\": [4]}]}", "a range is {A..B}"},
        {"{\"tensors\": [{\"name\": \"l.{-0..2}.w\", \"dtype\": "
         "\"f32\", \"shape\": [4]}]}", "a range is {A..B}"},
        {"{\"tensors\": [{\"name\": \"l.{1..99999999999}.w\", "
         "\"dtype\": \"f32\", \"shape\": [4]}]}", "a range is {A..B}"},
        /* The names ranges make are bounded in all (review 5.4: 131
         * bytes asked for more than 4 GiB), before any tensor is made:
         * the entry that passes the bound is named. */
        {"{\"tensors\": [{\"name\": \"a{0..16777215}\", \"dtype\": "
         "\"bf16\", \"shape\": [1]}, {\"name\": \"b{0..16777215}\", "
         "\"dtype\": \"bf16\", \"shape\": [1]}]}",
         "tensors[0].name: \"a{0..16777215}\" stands for 16777216 tensors; "
         "names with ranges may make at most 1048576 tensors"},
        {"{\"tensors\": [{\"name\": \"a{0..3}.{0..262143}\", \"dtype\": "
         "\"bf16\", \"shape\": [1]}, {\"name\": \"b.{0..1}\", "
         "\"dtype\": \"bf16\", \"shape\": [1]}]}",
         "tensors[1].name: \"b.{0..1}\" stands for 2 tensors; names with "
         "ranges may make at most 1048576 tensors and 64 MiB of names in "
         "all, and with those before it they make 1048578 tensors"},
    };
    struct plan_manifest *a = NULL, *b = NULL;
    size_t n = 0;

    n += (size_t)snprintf(listed + n, sizeof(listed) - n, "{\"tensors\": [");
    for (int l = 1; l <= 2; l++)
        for (int e = 0; e <= 2; e++)
            n += (size_t)snprintf(listed + n, sizeof(listed) - n,
                                  "%s{\"name\": \"l.%d.e.%d.w\", \"dtype\": "
                                  "\"bf16\", \"shape\": [8, 8], "
                                  "\"target_dtype\": \"fp8_e4m3\", "
                                  "\"block_scale\": {\"tensor\": "
                                  "\"l.%d.e.%d.s\", \"block\": [4, 4]}}",
                                  n > 13 ? "," : "", l, e, l, e);
    for (int l = 1; l <= 2; l++)
        for (int e = 0; e <= 2; e++)
            n += (size_t)snprintf(listed + n, sizeof(listed) - n,
                                  ",{\"name\": \"l.%d.e.%d.s\", \"dtype\": "
                                  "\"f32\", \"shape\": [2, 2]}", l, e);
    snprintf(listed + n, sizeof(listed) - n, "]}");
    expect_ok(manifest_parse_json(ranged, strlen(ranged), &a));
    expect_ok(manifest_parse_json(listed, strlen(listed), &b));
    ck_assert_uint_eq(a->ntensors, 12);
    ck_assert_str_eq(a->tensors[1].name, "l.1.e.1.w");
    ck_assert_str_eq(a->tensors[3].name, "l.2.e.0.w");
    ck_assert_int_eq(a->tensors[3].scale,
                     manifest_find_tensor(a, "l.2.e.0.s"));
    ck_assert_uint_eq(manifest_hash(a), manifest_hash(b));
    manifest_free(a);
    manifest_free(b);
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        struct plan_manifest *m = NULL;

        ck_assert_int_eq(manifest_parse_json(refused[i].src,
                                             strlen(refused[i].src), &m),
                         FX_ERR_INVALID);
        ck_assert_msg(strstr(fx_last_error(NULL), refused[i].want) != NULL,
                      "\"%s\" lacks \"%s\"", fx_last_error(NULL),
                      refused[i].want);
    }
}
END_TEST

/* Review 5.7 (rules_collide.h): the two layouts hash apart. */
START_TEST(hash_rules_canonical)
{
    const char *a = COLLIDE_A, *b = COLLIDE_B;
    struct plan_manifest *ma = NULL, *mb = NULL;
    int64_t lo[1], hi[1];
    int held_a, held_b;

    expect_ok(manifest_parse_json(a, strlen(a), &ma));
    expect_ok(manifest_parse_json(b, strlen(b), &mb));
    /* different layouts ... */
    expect_ok(manifest_rules_box(ma, 1, FX_SOURCE, 0, lo, hi, &held_a));
    expect_ok(manifest_rules_box(mb, 1, FX_SOURCE, 0, lo, hi, &held_b));
    ck_assert_int_eq(held_a, 0);
    ck_assert_int_eq(held_b, 1);
    /* ... different hashes */
    ck_assert_uint_ne(manifest_hash(ma), manifest_hash(mb));
    manifest_free(ma);
    manifest_free(mb);
}
END_TEST

/* Review 5.6: a source's expansion cost tensors x target replicas x
 * source replicas (each target's pick counted the source replicas
 * again): 2,048 tensors with 1,000 replicas a side took 31 s. Counted in
 * grid cells visited, it is now at most twice tensors x (target
 * replicas + source replicas) on either side (each list is counted, then
 * filled): here 51,456 at most, against 2,560,000 before. */
START_TEST(expand_cost_linear)
{
    enum { T = 64, S = 200, R = 200 };
    char doc[1024];
    struct plan_manifest *m = NULL, *src = NULL, *tgt = NULL;

    snprintf(doc, sizeof(doc), "{\"tensors\": [{\"name\": \"w.{0..%d}\", "
             "\"dtype\": \"bf16\", \"shape\": [8, 8]}], \"layout\": {"
             "\"sources\": {\"grid\": [[\"dp\", %d]], \"rules\": "
             "[{\"tensors\": \"*\"}]}, \"targets\": {\"first\": %d, "
             "\"grid\": [[\"dp\", %d]], \"rules\": [{\"tensors\": "
             "\"*\"}]}}}", T - 1, S, S, R);
    expect_ok(manifest_parse_json(doc, strlen(doc), &m));
    expect_ok(manifest_expand(m, S + R, 0, &src));
    expect_ok(manifest_expand(m, S + R, S, &tgt));
    /* each tensor to the targets whose pick is rank 0: one in S */
    ck_assert_uint_eq(src->npieces, T + T * R / S);
    ck_assert_uint_eq(tgt->npieces, 2 * T);
    ck_assert_msg(src->expand_cells <= 2 * (uint64_t)T * (S + R + 2),
                  "a source visited %llu cells for %d tensors of %d + %d "
                  "replicas", (unsigned long long)src->expand_cells, T, S,
                  R);
    ck_assert_msg(tgt->expand_cells <= 2 * (uint64_t)T * (S + R + 2),
                  "a target visited %llu cells",
                  (unsigned long long)tgt->expand_cells);
    manifest_free(src);
    manifest_free(tgt);
    manifest_free(m);
}
END_TEST

int main(void)
{
    const struct unit_test tests[] = {
        {ranks_agree}, {same_as_listed}, {gaps_and_sizes},
        {joint_cut_round_robin}, {flat_cut}, {json_refusals, UNIT_ROWS(bad)},
        {expand_refusals}, {forms_exclusive}, {name_ranges},
        {hash_rules_canonical}, {expand_cost_linear},
    };
    Suite *s = suite_create("rules");

    unit_tcase(s, "rules", 0, tests, UNIT_ROWS(tests));
    return unit_run(s);
}
