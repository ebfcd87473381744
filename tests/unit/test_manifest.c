/*
 * Unit tests of the manifest (src/plan/dtype.c, manifest.c, json.c,
 * validate.c): good manifests from tests/data/manifests load, validate and
 * hash the same as when built through the API; every bad one is refused
 * with its status and a message naming the culprit (the table below); a
 * manifest path that is no regular file or too large is refused at once;
 * names with a NUL are refused and control characters come out escaped;
 * the lookups and validation keep up with 100,000 tensors.
 */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "plan/plan.h"
#include "unit.h"
#include "util/error.h"

#ifndef FX_TEST_DATA
#define FX_TEST_DATA "tests/data"
#endif

static const char *data_path(const char *file)
{
    static char buf[1024];

    snprintf(buf, sizeof(buf), "%s/manifests/%s", FX_TEST_DATA, file);
    return buf;
}

START_TEST(dtypes)
{
    static const struct {
        const char *name, *canon;
        size_t size;
    } rows[] = {
        {"bf16", "bf16", 2},         {"bfloat16", "bf16", 2},
        {"f16", "f16", 2},           {"float16", "f16", 2},
        {"f32", "f32", 4},           {"float32", "f32", 4},
        {"f64", "f64", 8},           {"float64", "f64", 8},
        {"fp8_e4m3", "fp8_e4m3", 1}, {"fp8_e5m2", "fp8_e5m2", 1},
        {"i8", "i8", 1},             {"int8", "i8", 1},
        {"u8", "u8", 1},             {"uint8", "u8", 1},
        {"i16", "i16", 2},           {"int16", "i16", 2},
        {"i32", "i32", 4},           {"int32", "i32", 4},
        {"i64", "i64", 8},           {"int64", "i64", 8},
        {"bool", "bool", 1},
    };
    char list[256];

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int d = plan_dtype_parse(rows[i].name);

        ck_assert_msg(d >= 0, "%s not parsed", rows[i].name);
        ck_assert_str_eq(plan_dtype_name(d), rows[i].canon);
        ck_assert_uint_eq(plan_dtype_size(d), rows[i].size);
    }
    ck_assert_int_eq(plan_dtype_parse("bf17"), -1);
    ck_assert_int_eq(plan_dtype_parse("BF16"), -1);
    ck_assert_int_eq(plan_dtype_parse(""), -1);
    ck_assert_int_eq(plan_dtype_parse(NULL), -1);
    ck_assert_uint_eq(plan_dtype_size(-1), 0);
    plan_dtype_list(list, sizeof(list));
    ck_assert_ptr_nonnull(strstr(list, "bf16, f16, f32"));
    ck_assert_ptr_nonnull(strstr(list, "bool"));
}
END_TEST

static const struct good_row {
    const char *file;
    int nranks;
    uint32_t ntensors, npieces;
} good_rows[] = {
    {"good-whole.json", 2, 4, 8},
    {"good-dp-replicas.json", 5, 3, 15},
    {"good-llama-layer.json", 8, 9, 72},
};

START_TEST(good_files)
{
    const struct good_row *r = &good_rows[_i];
    struct plan_manifest *m = NULL;

    expect_ok(manifest_load_file(data_path(r->file), &m));
    ck_assert_uint_eq(m->ntensors, r->ntensors);
    ck_assert_uint_eq(m->npieces, r->npieces);
    ck_assert_int_eq(m->max_rank, r->nranks - 1);
    expect_ok(manifest_validate(m, r->nranks));
    /* A rank past the job is refused even by a good manifest. */
    expect_err(manifest_validate(m, r->nranks - 1), FX_ERR_INVALID,
               "is not in the job");
    manifest_free(m);
}
END_TEST

START_TEST(whole_content)
{
    struct plan_manifest *m = NULL;
    const struct plan_tensor *t;
    const struct plan_piece *p;
    int ti, pi;

    expect_ok(manifest_load_file(data_path("good-whole.json"), &m));
    ti = manifest_find_tensor(m, "embed.weight");
    ck_assert_int_eq(ti, 0);
    t = &m->tensors[ti];
    ck_assert_str_eq(plan_dtype_name(t->dtype), "bf16");
    ck_assert_int_eq(t->ndim, 2);
    ck_assert_int_eq(t->shape[0], 1000);
    ck_assert_int_eq(t->shape[1], 64);
    ck_assert_uint_eq(t->bytes, 1000 * 64 * 2);
    t = &m->tensors[manifest_find_tensor(m, "norm.weight")];
    ck_assert_str_eq(plan_dtype_name(t->dtype), "f32"); /* "float32" */
    ck_assert_uint_eq(t->bytes, 256);
    t = &m->tensors[manifest_find_tensor(m, "step")];
    ck_assert_int_eq(t->ndim, 0);
    ck_assert_uint_eq(t->bytes, 8);
    ck_assert_int_eq(manifest_find_tensor(m, "nope"), -1);

    pi = manifest_find_piece(m, 1, FX_TARGET, 0);
    ck_assert_int_ge(pi, 0);
    p = &m->pieces[pi];
    ck_assert_int_eq(p->rank, 1);
    ck_assert_int_eq(p->dim, -1);
    {
        int64_t lo[PLAN_MAX_DIMS], hi[PLAN_MAX_DIMS];

        ck_assert_int_eq(plan_piece_box(m, p, lo, hi), 0);
        ck_assert_int_eq(lo[0], 0);
        ck_assert_int_eq(hi[0], 1000);
        ck_assert_int_eq(hi[1], 64);
    }
    ck_assert_uint_eq(p->bytes, 1000 * 64 * 2);
    ck_assert_int_eq(manifest_find_piece(m, 1, FX_SOURCE, 0), -1);
    ck_assert_int_eq(manifest_find_piece(m, 7, FX_TARGET, 0), -1);
    manifest_free(m);
}
END_TEST

/* good-llama-layer.json through the API, in the same order. */
static void build_llama(struct plan_manifest *m)
{
    static const struct {
        const char *name;
        int64_t rows, cols; /* cols 0: 1-D */
        int kind;           /* 0 norm, 1 column-parallel, 2 row-parallel */
    } ts[] = {
        {"model.layers.0.input_layernorm.weight", 4096, 0, 0},
        {"model.layers.0.self_attn.q_proj.weight", 4096, 4096, 1},
        {"model.layers.0.self_attn.k_proj.weight", 1024, 4096, 1},
        {"model.layers.0.self_attn.v_proj.weight", 1024, 4096, 1},
        {"model.layers.0.self_attn.o_proj.weight", 4096, 4096, 2},
        {"model.layers.0.post_attention_layernorm.weight", 4096, 0, 0},
        {"model.layers.0.mlp.gate_proj.weight", 11008, 4096, 1},
        {"model.layers.0.mlp.up_proj.weight", 11008, 4096, 1},
        {"model.layers.0.mlp.down_proj.weight", 4096, 11008, 2},
    };
    const size_t n = sizeof(ts) / sizeof(ts[0]);

    for (size_t i = 0; i < n; i++) {
        int64_t shape[2] = {ts[i].rows, ts[i].cols};

        expect_ok(manifest_add_tensor(m, ts[i].name, "bf16",
                                      ts[i].cols ? 2 : 1, shape));
    }
    for (int r = 0; r < 8; r++) {
        int src = r < 4, part = src ? r % 2 : r - 4, parts = src ? 2 : 4;

        for (size_t i = 0; i < n; i++) {
            int dim = (ts[i].kind == 1) == src ? 0 : 1;
            int64_t ext = (dim == 0 ? ts[i].rows : ts[i].cols) / parts;

            if (ts[i].kind == 0)
                expect_ok(manifest_add_piece(
                    m, r, src ? FX_SOURCE : FX_TARGET, ts[i].name, -1, 0,
                    0));
            else
                expect_ok(manifest_add_piece(
                    m, r, src ? FX_SOURCE : FX_TARGET, ts[i].name, dim,
                    part * ext, (part + 1) * ext));
        }
    }
}

START_TEST(hash_json_equals_api)
{
    struct plan_manifest *a = NULL, *b = NULL;

    expect_ok(manifest_load_file(data_path("good-llama-layer.json"), &a));
    expect_ok(manifest_new(&b));
    build_llama(b);
    ck_assert_uint_eq(a->npieces, b->npieces);
    ck_assert_uint_eq(manifest_hash(a), manifest_hash(b));
    ck_assert_uint_ne(manifest_hash(a), 0);
    expect_ok(manifest_validate(b, 8));
    manifest_free(a);
    manifest_free(b);
}
END_TEST

/* The hash sees every field: a change anywhere changes it; layout and key
 * order of the JSON, and dtype spellings, do not. */
START_TEST(hash_sensitivity)
{
    static const char *base =
        "{\"tensors\": [{\"name\": \"w\", \"dtype\": \"bf16\", \"shape\": "
        "[8, 4]}], \"ranks\": [{\"rank\": 0, \"source\": [{\"tensor\": "
        "\"w\"}]}, {\"rank\": 1, \"target\": [{\"tensor\": \"w\", \"dim\": "
        "0, \"start\": 0, \"end\": 4}]}]}";
    static const char *same[] = {
        "{\"version\": 1,\n \"tensors\": [{\"shape\": [8, 4], \"dtype\": "
        "\"bfloat16\", \"name\": \"w\"}], \"ranks\": [{\"source\": "
        "[{\"tensor\": \"w\"}], \"rank\": 0}, {\"rank\": 1, \"target\": "
        "[{\"end\": 4, \"start\": 0, \"dim\": 0, \"tensor\": \"w\"}]}]}",
    };
    /* Pieces hash in the order given: the same pieces listed from
     * rank 1 first are another manifest. */
    static const char *other[] = {
        "{\"tensors\": [{\"name\": \"w\", \"dtype\": \"bf16\", \"shape\": "
        "[8, 4]}], \"ranks\": [{\"rank\": 1, \"target\": [{\"tensor\": "
        "\"w\", \"dim\": 0, \"start\": 0, \"end\": 4}]}, {\"rank\": 0, "
        "\"source\": [{\"tensor\": \"w\"}]}]}",
        /* end */
        "{\"tensors\": [{\"name\": \"w\", \"dtype\": \"bf16\", \"shape\": "
        "[8, 4]}], \"ranks\": [{\"rank\": 0, \"source\": [{\"tensor\": "
        "\"w\"}]}, {\"rank\": 1, \"target\": [{\"tensor\": \"w\", \"dim\": "
        "0, \"start\": 0, \"end\": 5}]}]}",
        /* dtype */
        "{\"tensors\": [{\"name\": \"w\", \"dtype\": \"f16\", \"shape\": "
        "[8, 4]}], \"ranks\": [{\"rank\": 0, \"source\": [{\"tensor\": "
        "\"w\"}]}, {\"rank\": 1, \"target\": [{\"tensor\": \"w\", \"dim\": "
        "0, \"start\": 0, \"end\": 4}]}]}",
        /* shape */
        "{\"tensors\": [{\"name\": \"w\", \"dtype\": \"bf16\", \"shape\": "
        "[8, 4, 1]}], \"ranks\": [{\"rank\": 0, \"source\": [{\"tensor\": "
        "\"w\"}]}, {\"rank\": 1, \"target\": [{\"tensor\": \"w\", \"dim\": "
        "0, \"start\": 0, \"end\": 4}]}]}",
        /* name */
        "{\"tensors\": [{\"name\": \"v\", \"dtype\": \"bf16\", \"shape\": "
        "[8, 4]}], \"ranks\": [{\"rank\": 0, \"source\": [{\"tensor\": "
        "\"v\"}]}, {\"rank\": 1, \"target\": [{\"tensor\": \"v\", \"dim\": "
        "0, \"start\": 0, \"end\": 4}]}]}",
        /* rank */
        "{\"tensors\": [{\"name\": \"w\", \"dtype\": \"bf16\", \"shape\": "
        "[8, 4]}], \"ranks\": [{\"rank\": 0, \"source\": [{\"tensor\": "
        "\"w\"}]}, {\"rank\": 2, \"target\": [{\"tensor\": \"w\", \"dim\": "
        "0, \"start\": 0, \"end\": 4}]}]}",
        /* role */
        "{\"tensors\": [{\"name\": \"w\", \"dtype\": \"bf16\", \"shape\": "
        "[8, 4]}], \"ranks\": [{\"rank\": 0, \"target\": [{\"tensor\": "
        "\"w\"}]}, {\"rank\": 1, \"target\": [{\"tensor\": \"w\", \"dim\": "
        "0, \"start\": 0, \"end\": 4}]}]}",
    };
    struct plan_manifest *m = NULL;
    uint64_t h;

    expect_ok(manifest_parse_json(base, strlen(base), &m));
    h = manifest_hash(m);
    manifest_free(m);
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        expect_ok(manifest_parse_json(same[i], strlen(same[i]), &m));
        ck_assert_uint_eq(manifest_hash(m), h);
        manifest_free(m);
    }
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
        expect_ok(manifest_parse_json(other[i], strlen(other[i]), &m));
        ck_assert_msg(manifest_hash(m) != h, "variant %zu hashes alike", i);
        manifest_free(m);
    }
}
END_TEST

/* The text need not end in a NUL: only len bytes are read. */
START_TEST(parse_length_bounded)
{
    static const char text[] =
        "{\"tensors\": [{\"name\": \"w\", \"dtype\": \"u8\", \"shape\": [3]}]}"
        "garbage that must not be read";
    struct plan_manifest *m = NULL;
    size_t len = strlen(text) - strlen("garbage that must not be read");

    expect_ok(manifest_parse_json(text, len, &m));
    ck_assert_uint_eq(m->ntensors, 1);
    ck_assert_uint_eq(m->npieces, 0);
    expect_ok(manifest_validate(m, 1)); /* no targets: nothing to cover */
    manifest_free(m);
    expect_err(manifest_parse_json(text, strlen(text), &m), FX_ERR_INVALID,
               "line 1, column 58: text after the JSON object");
    expect_err(manifest_parse_json(text, 10, &m), FX_ERR_INVALID,
               "ends inside an object");
    expect_err(manifest_parse_json("", 0, &m), FX_ERR_INVALID, "empty");
    expect_err(manifest_parse_json(NULL, 0, &m), FX_ERR_INVALID, "no text");
}
END_TEST

START_TEST(load_missing_file)
{
    struct plan_manifest *m = NULL;

    expect_err(manifest_load_file(data_path("no-such-file.json"), &m),
               FX_ERR_SYSTEM, "no-such-file.json\": cannot open");
    ck_assert_ptr_null(m);
}
END_TEST

/* Bad manifests: loading or else validating for nranks must fail so. */
static const struct bad_row {
    const char *file;
    int nranks;
    fx_status_t status;
    const char *sub;
} bad_rows[] = {
    {"bad-syntax.json", 1, FX_ERR_INVALID,
     "line 3, column 35: JSON syntax error: object value separator ','"},
    {"bad-truncated.json", 1, FX_ERR_INVALID,
     "ends inside an object or array"},
    {"bad-trailing.json", 1, FX_ERR_INVALID,
     "line 2, column 1: text after the JSON object"},
    {"bad-empty.json", 1, FX_ERR_INVALID, "the document is empty"},
    {"bad-not-object.json", 1, FX_ERR_INVALID,
     "line 1, column 1: expected a JSON object"},
    {"bad-missing-tensors.json", 1, FX_ERR_INVALID,
     "bad-missing-tensors.json\": missing \"tensors\""},
    {"bad-version.json", 1, FX_ERR_INVALID,
     "version: 2 is not supported"},
    {"bad-unknown-key.json", 2, FX_ERR_INVALID,
     "ranks[1].target[0].strat: unknown key (expected \"tensor\", \"dim\", "
     "\"start\", \"end\", \"box\" or \"flat\")"},
    {"bad-unknown-key-top.json", 1, FX_ERR_INVALID,
     "json\": rank: unknown key (expected \"version\", \"tensors\", "
     "\"ranks\" or \"layout\")"},
    {"bad-type-shape.json", 1, FX_ERR_INVALID,
     "tensors[0].shape[1]: expected a positive integer, got \"4096\" "
     "(a string)"},
    {"bad-type-rank.json", 1, FX_ERR_INVALID,
     "ranks[0].rank: expected a non-negative integer, got \"0\" (a string)"},
    {"bad-negative-rank.json", 1, FX_ERR_INVALID,
     "ranks[0].rank: expected a non-negative integer, got -1"},
    {"bad-type-dim.json", 1, FX_ERR_INVALID,
     "ranks[0].source[0].dim: expected a dimension index, got 0.5"},
    {"bad-type-pieces.json", 1, FX_ERR_INVALID,
     "ranks[0].source: expected an array of pieces, got"},
    {"bad-shape-huge.json", 1, FX_ERR_INVALID,
     "tensors[0].shape[0]: expected a positive integer, got a number past "
     "64 bits"},
    {"bad-null.json", 1, FX_ERR_INVALID,
     "ranks[0].source[0].dim: expected a dimension index, got null"},
    {"bad-dtype.json", 1, FX_ERR_INVALID,
     "tensors[0].dtype: unknown dtype \"bf17\" of \"w\" (expected one of "
     "bf16,"},
    {"bad-shape-zero.json", 1, FX_ERR_INVALID,
     "tensors[0].shape[1]: expected a positive integer, got 0"},
    {"bad-shape-negative.json", 1, FX_ERR_INVALID,
     "tensors[0].shape[0]: expected a positive integer, got -4096"},
    {"bad-dim-range.json", 1, FX_ERR_INVALID,
     "ranks[0].source[0].dim: 2 is out of range for \"w\" (2 dims)"},
    {"bad-dim-without-range.json", 1, FX_ERR_INVALID,
     "ranks[0].source[0]: \"dim\" needs \"start\" and \"end\""},
    {"bad-range-without-dim.json", 1, FX_ERR_INVALID,
     "ranks[0].source[0].start: given without \"dim\""},
    {"bad-start-end.json", 1, FX_ERR_INVALID,
     "ranks[0].source[0].end: 2048 is not past start 2048"},
    {"bad-end-past.json", 4, FX_ERR_INVALID,
     "ranks[3].target[0].end: 4097 is past dim 0 of \"w\" (4096)"},
    {"bad-dup-tensor.json", 1, FX_ERR_INVALID,
     "tensors[2].name: tensor \"w\" is already tensors[0]"},
    {"bad-unknown-tensor.json", 1, FX_ERR_INVALID,
     "ranks[0].source[1].tensor: unknown tensor \"wq\""},
    {"bad-dup-piece.json", 1, FX_ERR_INVALID,
     "ranks[0].source[1]: rank 0 already has a source piece of \"w\""},
    {"bad-dup-rank.json", 2, FX_ERR_INVALID,
     "ranks[2].rank: rank 0 is listed twice (ranks[0] and ranks[2])"},
    {"bad-rank-range.json", 4, FX_ERR_INVALID,
     "rank 4 (target piece of \"w\") is not in the job: nranks is 4"},
    {"bad-uncovered-partial.json", 4, FX_ERR_INVALID,
     "tensor \"w\": rows [2048, 4096) along dim 0, needed by target rank 2, "
     "are held by no source"},
    {"bad-uncovered-gap.json", 3, FX_ERR_INVALID,
     "tensor \"e\": rows [2, 4) along dim 0, needed by target rank 2"},
    {"bad-uncovered-none.json", 2, FX_ERR_INVALID,
     "tensor \"b\" has no source piece, but target rank 1 needs the whole "
     "tensor"},
    {"bad-overlap.json", 3, FX_ERR_INVALID,
     "tensor \"w\": the source pieces of ranks 0 ([0, 2048) along dim 0) "
     "and 1 ([1024, 4096) along dim 0) overlap without being identical"},
    {"bad-overlap-dims.json", 3, FX_ERR_INVALID,
     "ranks 0 ([0, 2048) along dim 0) and 1 ([2048, 4096) along dim 1) "
     "overlap"},
    {"bad-overlap-whole.json", 4, FX_ERR_INVALID,
     "ranks 3 (the whole tensor) and 0 ([2048, 4096) along dim 1) overlap"},
    /* "w\u0000b" would alias "w" (lookups compare C strings). */
    {"bad-name-nul.json", 1, FX_ERR_INVALID,
     "tensors[1].name: tensor name \"w\\x00b\" has a NUL byte at byte 1 "
     "(from 0); it would read as \"w\""},
    {"bad-piece-nul.json", 1, FX_ERR_INVALID,
     "ranks[0].source[0].tensor: tensor name \"w\\x00/../b\" has a NUL "
     "byte at byte 1"},
    {"bad-dtype-nul.json", 1, FX_ERR_INVALID,
     "tensors[0].dtype: dtype \"bf16\\x00junk\" has a NUL byte at byte 4"},
    /* Control characters reach the message escaped, never raw. */
    {"bad-name-control.json", 1, FX_ERR_INVALID,
     "tensors[1].name: tensor \"w\\x01\\x1b[2J\\n\" is already "
     "tensors[0]"},
    {"bad-key-control.json", 1, FX_ERR_INVALID,
     "rank\\x07s: unknown key"},
};

START_TEST(bad_files)
{
    const struct bad_row *r = &bad_rows[_i];
    struct plan_manifest *m = NULL;
    fx_status_t st;

    err_clear();
    st = manifest_load_file(data_path(r->file), &m);
    if (st == FX_OK) {
        st = manifest_validate(m, r->nranks);
        manifest_free(m);
    } else {
        ck_assert_ptr_null(m);
    }
    ck_assert_msg(st == r->status, "%s: status %d, expected %d (%s)",
                  r->file, st, r->status, err_last());
    ck_assert_msg(strstr(err_last(), r->sub) != NULL,
                  "%s: message \"%s\" lacks \"%s\"", r->file, err_last(),
                  r->sub);
}
END_TEST

/* A message quoting the input must not carry it raw. */
static void assert_no_controls(const char *msg)
{
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++)
        ck_assert_msg(*p >= 0x20 && *p != 0x7f, "control byte 0x%02x in "
                      "\"%s\"", *p, msg);
}

START_TEST(bad_files_escaped)
{
    struct plan_manifest *m = NULL;

    ck_assert_int_eq(manifest_load_file(data_path("bad-name-control.json"),
                                        &m), FX_ERR_INVALID);
    assert_no_controls(err_last());
    ck_assert_int_eq(manifest_load_file(data_path("bad-key-control.json"),
                                        &m), FX_ERR_INVALID);
    assert_no_controls(err_last());
    ck_assert_int_eq(manifest_load_file(data_path("bad-name-nul.json"), &m),
                     FX_ERR_INVALID);
    assert_no_controls(err_last());
    /* The path, too, comes from outside. */
    expect_err(manifest_load_file("/nonexistent/a\nb\x1b.json", &m),
               FX_ERR_SYSTEM, "/nonexistent/a\\nb\\x1b.json\": cannot open");
    assert_no_controls(err_last());
    ck_assert_ptr_null(m);
}
END_TEST

START_TEST(escape_helper)
{
    char buf[ERR_ESC_MAX], small[12];
    /* U+00E9 and U+4E2D are kept; U+0085 (a C1 control), a lone
     * continuation byte, an overlong '/' and a cut sequence are not. */
    static const char in[] = "\xc3\xa9\xe4\xb8\xad\xc2\x85\x80\xc0\xaf\xe4";

    ck_assert_str_eq(err_escape(buf, sizeof(buf), "a\0b\x7f\"\\", 6),
                     "a\\x00b\\x7f\\\"\\\\");
    ck_assert_str_eq(err_escape(buf, sizeof(buf), in, sizeof(in) - 1),
                     "\xc3\xa9\xe4\xb8\xad\\xc2\\x85\\x80\\xc0\\xaf\\xe4");
    /* Cut to fit, and saying so. */
    ck_assert_str_eq(err_escape(small, sizeof(small), "abcdefghijklmn", 14),
                     "abcdefgh...");
    ck_assert_str_eq(err_escape(small, sizeof(small), "\x01\x02\x03", 3),
                     "\\x01\\x02...");
    ck_assert_str_eq(err_escape(small, sizeof(small), "abcdefghijk", 11),
                     "abcdefghijk");
    ck_assert_str_eq(err_escape(buf, sizeof(buf), NULL, 3), "(null)");
    ck_assert_str_eq(err_esc(buf, "a\tb\x1b"), "a\\tb\\x1b");
}
END_TEST

/* Not a regular file: refused at once, naming the path, never read. A
 * FIFO without a writer would block open() and read() for good. */
START_TEST(load_not_regular)
{
    char dir[] = "/tmp/test_manifest.XXXXXX", path[64];
    struct plan_manifest *m = NULL;
    double t0;
    int fd;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/fifo.json", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    /* Opened as a file, it would block until the tcase's timeout. */
    expect_err(manifest_load_file(path, &m), FX_ERR_INVALID,
               "fifo.json\": is a FIFO; a manifest must be a regular file");
    unlink(path);

    expect_err(manifest_load_file("/dev/zero", &m), FX_ERR_INVALID,
               "manifest \"/dev/zero\": is a character device");
    expect_err(manifest_load_file(dir, &m), FX_ERR_INVALID, "is a folder");

    /* Sparse: past the 2 GiB cap without using the disk. */
    snprintf(path, sizeof(path), "%s/huge.json", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)1 << 31), 0);
    close(fd);
    t0 = cpu_s();
    expect_err(manifest_load_file(path, &m), FX_ERR_INVALID,
               "huge.json\": is 2147483648 bytes; a manifest may have at "
               "most 2147483647 (2 GiB)");
    ck_assert_msg(cpu_s() - t0 < 1.0 * SLOWDOWN, "took %.3f s of CPU",
                  cpu_s() - t0);
    unlink(path);
    rmdir(dir);
    ck_assert_ptr_null(m);
}
END_TEST

/* A new manifest holding one tensor. */
static struct plan_manifest *one_tensor(const char *name, const char *dtype,
                                        int ndim, const int64_t *shape)
{
    struct plan_manifest *m = NULL;

    expect_ok(manifest_new(&m));
    expect_ok(manifest_add_tensor(m, name, dtype, ndim, shape));
    return m;
}

START_TEST(api_tensor_errors)
{
    struct plan_manifest *m = NULL;
    int64_t shape[PLAN_MAX_DIMS + 1] = {4, 4, 1, 1, 1, 1, 1, 1, 1};
    int64_t zero[2] = {4, 0}, huge[2] = {INT64_MAX, 4};
    char longname[PLAN_NAME_MAX + 8];

    m = one_tensor("w", "bf16", 2, shape);
    expect_err(manifest_add_tensor(m, "w", "f32", 1, shape), FX_ERR_INVALID,
               "tensor \"w\" is declared twice (tensors 0 and 1)");
    expect_err(manifest_add_tensor(m, "x", "bf17", 2, shape),
               FX_ERR_INVALID, "tensor \"x\": unknown dtype \"bf17\"");
    expect_err(manifest_add_tensor(m, "x", "bf16", 2, zero), FX_ERR_INVALID,
               "tensor \"x\": shape[1] is 0");
    expect_err(manifest_add_tensor(m, "x", "bf16", PLAN_MAX_DIMS + 1, shape),
               FX_ERR_INVALID, "tensor \"x\": 9 dimensions, expected 0 to 8");
    expect_err(manifest_add_tensor(m, "x", "bf16", 2, huge), FX_ERR_INVALID,
               "tensor \"x\": its size overflows");
    expect_err(manifest_add_tensor(m, "", "bf16", 2, shape), FX_ERR_INVALID,
               "empty name");
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    expect_err(manifest_add_tensor(m, longname, "bf16", 2, shape),
               FX_ERR_INVALID, "at most 255 are allowed");
    expect_ok(manifest_add_tensor(m, "s", "f32", 0, NULL));
    ck_assert_uint_eq(m->ntensors, 2);
    ck_assert_uint_eq(m->tensors[1].bytes, 4);
    manifest_free(m);
}
END_TEST

/* Names and dtypes built through the API are quoted escaped in every
 * message of manifest_add_tensor and manifest_add_piece. */
START_TEST(api_escaped_names)
{
    struct plan_manifest *m = NULL;
    int64_t shape[PLAN_MAX_DIMS + 1] = {4, 4, 1, 1, 1, 1, 1, 1, 1};
    int64_t zero[2] = {4, 0}, huge[2] = {INT64_MAX, 4};
    static const char x[] = "x\x1b[2J\x01", ex[] = "\"x\\x1b[2J\\x01\"";
    char longname[PLAN_NAME_MAX + 8];

    m = one_tensor(x, "bf16", 2, shape);
    expect_err(manifest_add_tensor(m, x, "f32", 1, shape), FX_ERR_INVALID,
               ex);
    assert_no_controls(err_last());
    expect_err(manifest_add_tensor(m, "y\n", "bf\x01\x9b", 2, shape),
               FX_ERR_INVALID, "tensor \"y\\n\": unknown dtype "
               "\"bf\\x01\\x9b\"");
    assert_no_controls(err_last());
    expect_err(manifest_add_tensor(m, "y\n", "bf16", 2, zero),
               FX_ERR_INVALID, "tensor \"y\\n\": shape[1] is 0");
    expect_err(manifest_add_tensor(m, "y\n", "bf16", PLAN_MAX_DIMS + 1,
                                   shape),
               FX_ERR_INVALID, "tensor \"y\\n\": 9 dimensions");
    expect_err(manifest_add_tensor(m, "y\n", "bf16", 2, NULL),
               FX_ERR_INVALID, "tensor \"y\\n\": 2 dimensions but no shape");
    expect_err(manifest_add_tensor(m, "y\n", "bf16", 2, huge),
               FX_ERR_INVALID, "tensor \"y\\n\": its size overflows");
    memset(longname, '\x1b', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    expect_err(manifest_add_tensor(m, longname, "bf16", 2, shape),
               FX_ERR_INVALID, "tensor \"\\x1b\\x1b");
    ck_assert_ptr_nonnull(strstr(err_last(), "...\": the name is 263 bytes"));
    assert_no_controls(err_last());

    expect_err(manifest_add_piece(m, 0, FX_SOURCE, "z\x7f", -1, 0, 0),
               FX_ERR_INVALID, "unknown tensor \"z\\x7f\"");
    expect_err(manifest_add_piece(m, -1, FX_SOURCE, x, -1, 0, 0),
               FX_ERR_INVALID, ex);
    expect_err(manifest_add_piece(m, 0, (fx_role_t)7, x, -1, 0, 0),
               FX_ERR_INVALID, ex);
    expect_err(manifest_add_piece(m, 0, FX_TARGET, x, 2, 0, 1),
               FX_ERR_INVALID, ex);
    expect_err(manifest_add_piece(m, 0, FX_TARGET, x, 0, -1, 1),
               FX_ERR_INVALID, ex);
    expect_err(manifest_add_piece(m, 0, FX_TARGET, x, 0, 0, 5),
               FX_ERR_INVALID, "\"x\\x1b[2J\\x01\": end 5 is past dim 0 of "
               "\"x\\x1b[2J\\x01\" (4)");
    expect_err(manifest_add_piece(m, 0, FX_TARGET, x, 0, 2, 2),
               FX_ERR_INVALID, ex);
    expect_ok(manifest_add_piece(m, 0, FX_TARGET, x, -1, 0, 0));
    expect_err(manifest_add_piece(m, 0, FX_TARGET, x, -1, 0, 0),
               FX_ERR_INVALID, ex);
    assert_no_controls(err_last());
    manifest_free(m);
}
END_TEST

START_TEST(api_piece_errors)
{
    struct plan_manifest *m = one_tensor("w", "bf16", 2,
                                         (int64_t[]){4096, 4096});

    expect_ok(manifest_add_tensor(m, "s", "f32", 0, NULL));
    expect_err(manifest_add_piece(m, 0, FX_SOURCE, "x", -1, 0, 0),
               FX_ERR_INVALID, "rank 0 source piece: unknown tensor \"x\"");
    expect_err(manifest_add_piece(m, -1, FX_SOURCE, "w", -1, 0, 0),
               FX_ERR_INVALID, "for rank -1: ranks are non-negative");
    expect_err(manifest_add_piece(m, 3, FX_TARGET, "w", 2, 0, 1),
               FX_ERR_INVALID, "rank 3 target piece of \"w\": dim 2 is out "
               "of range (the tensor has 2 dims)");
    expect_err(manifest_add_piece(m, 3, FX_TARGET, "s", 0, 0, 1),
               FX_ERR_INVALID, "dim 0 is out of range (the tensor has 0 "
               "dims)");
    expect_err(manifest_add_piece(m, 3, FX_TARGET, "w", 0, 10, 10),
               FX_ERR_INVALID, "start 10 is not below end 10");
    expect_err(manifest_add_piece(m, 3, FX_TARGET, "w", 0, -1, 10),
               FX_ERR_INVALID, "start -1 is negative");
    expect_err(manifest_add_piece(m, 3, FX_TARGET, "w", 0, 2048, 4097),
               FX_ERR_INVALID, "end 4097 is past dim 0 of \"w\" (4096)");
    expect_err(manifest_add_piece(m, 3, (fx_role_t)7, "w", -1, 0, 0),
               FX_ERR_INVALID, "neither source nor target");
    expect_ok(manifest_add_piece(m, 3, FX_TARGET, "w", 1, 0, 2048));
    expect_err(manifest_add_piece(m, 3, FX_TARGET, "w", 1, 2048, 4096),
               FX_ERR_INVALID, "rank 3 has two target pieces of \"w\"");
    /* The same rank may hold the tensor as a source too. */
    expect_ok(manifest_add_piece(m, 3, FX_SOURCE, "w", -1, 0, 0));
    ck_assert_uint_eq(m->npieces, 2);
    ck_assert_uint_eq(m->pieces[0].bytes, 4096u * 2048 * 2);
    ck_assert_int_eq(m->max_rank, 3);
    expect_err(manifest_validate(m, 0), FX_ERR_INVALID, "a job of 0 ranks");
    expect_ok(manifest_validate(m, 4));
    manifest_free(m);
}
END_TEST

/* A range that spans its whole dimension is the whole tensor: it is a
 * replica of a whole piece, not an overlap. */
START_TEST(full_range_is_whole)
{
    struct plan_manifest *m = one_tensor("w", "f32", 2, (int64_t[]){64, 1});

    expect_ok(manifest_add_piece(m, 0, FX_SOURCE, "w", -1, 0, 0));
    expect_ok(manifest_add_piece(m, 1, FX_SOURCE, "w", 0, 0, 64));
    expect_ok(manifest_add_piece(m, 2, FX_SOURCE, "w", 1, 0, 1));
    expect_ok(manifest_add_piece(m, 3, FX_TARGET, "w", 0, 16, 48));
    expect_ok(manifest_validate(m, 4));
    manifest_free(m);
}
END_TEST

/* Sources exactly tiling the tensor, targets cut the other way, cover. */
START_TEST(tiled_sources_cover)
{
    struct plan_manifest *m = NULL;
    int64_t shape[3] = {8, 6, 10};

    m = one_tensor("e", "bf16", 3, shape);
    /* Uneven tiles, added out of order. */
    expect_ok(manifest_add_piece(m, 2, FX_SOURCE, "e", 1, 5, 6));
    expect_ok(manifest_add_piece(m, 0, FX_SOURCE, "e", 1, 0, 2));
    expect_ok(manifest_add_piece(m, 1, FX_SOURCE, "e", 1, 2, 5));
    expect_ok(manifest_add_piece(m, 3, FX_TARGET, "e", 2, 0, 3));
    expect_ok(manifest_add_piece(m, 4, FX_TARGET, "e", 1, 1, 6));
    expect_ok(manifest_add_piece(m, 5, FX_TARGET, "e", -1, 0, 0));
    expect_ok(manifest_validate(m, 6));
    manifest_free(m);

    /* A hole in the middle, found though targets start and end covered. */
    m = one_tensor("e", "bf16", 3, shape);
    expect_ok(manifest_add_piece(m, 0, FX_SOURCE, "e", 1, 0, 2));
    expect_ok(manifest_add_piece(m, 1, FX_SOURCE, "e", 1, 3, 6));
    expect_ok(manifest_add_piece(m, 3, FX_TARGET, "e", 1, 1, 4));
    expect_err(manifest_validate(m, 4), FX_ERR_INVALID,
               "tensor \"e\": indices [2, 3) along dim 1, needed by target "
               "rank 3");
    manifest_free(m);
}
END_TEST

#define BIG 100000

struct scale_times {
    double add, find, validate;
};

/* n tensors, 8 pieces each (DP 2 x TP 2 sources, TP 4 targets): the CPU
 * time of adding, looking up and validating them. The loops count failures
 * instead of asserting each call: every Check assertion writes to a pipe,
 * which would be most of what is timed. */
static struct scale_times scale_run(int n)
{
    struct plan_manifest *m = NULL;
    int64_t shape[2] = {32, 64};
    struct scale_times t;
    char name[64];
    double t0;
    long bad = 0;

    expect_ok(manifest_new(&m));
    t0 = cpu_s();
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "model.layers.%d.w%d.weight", i / 16,
                 i % 16);
        bad += manifest_add_tensor(m, name, "bf16", 2, shape) != FX_OK;
    }
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "model.layers.%d.w%d.weight", i / 16,
                 i % 16);
        for (int r = 0; r < 4; r++)
            bad += manifest_add_piece(m, r, FX_SOURCE, name, 0,
                                      (r % 2) * 16,
                                      (r % 2 + 1) * 16) != FX_OK;
        for (int r = 4; r < 8; r++)
            bad += manifest_add_piece(m, r, FX_TARGET, name, 1,
                                      (r - 4) * 16, (r - 3) * 16) != FX_OK;
    }
    t.add = cpu_s() - t0;
    ck_assert_msg(bad == 0, "%ld adds failed: %s", bad, err_last());
    t0 = cpu_s();
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "model.layers.%d.w%d.weight", i / 16,
                 i % 16);
        bad += manifest_find_tensor(m, name) != i;
        for (int r = 0; r < 8; r++) {
            fx_role_t role = r < 4 ? FX_SOURCE : FX_TARGET;

            bad += manifest_find_piece(m, r, role, (uint32_t)i) != i * 8 + r;
            bad += manifest_find_piece(m, r, !role, (uint32_t)i) != -1;
        }
    }
    t.find = cpu_s() - t0;
    ck_assert_msg(bad == 0, "%ld lookups went wrong", bad);
    t0 = cpu_s();
    expect_ok(manifest_validate(m, 8));
    t.validate = cpu_s() - t0;
    ck_assert_uint_eq(m->npieces, (unsigned)n * 8);
    manifest_free(m);
    return t;
}

/* 100,000 tensors: adding, lookups and validation grow linearly from a
 * quarter of them. */
START_TEST(scale)
{
    struct scale_times q = scale_run(BIG / 4), t = scale_run(BIG);

    printf("manifest: %d tensors, %d pieces, CPU time: add %.3f s, %d "
           "lookups %.3f s, validate %.3f s (a quarter: %.3f, %.3f, "
           "%.3f)\n", BIG, BIG * 8, t.add, BIG * 17, t.find, t.validate,
           q.add, q.find, q.validate);
    expect_linear("adding", q.add, t.add);
    expect_linear("lookups", q.find, t.find);
    expect_linear("validation", q.validate, t.validate);
}
END_TEST

/* What set-up tells ranks with different manifests: per-tensor digests
 * that differ exactly in the part that does, and the tensor in words. */
START_TEST(item_digests)
{
    const char *a = "{\"tensors\": [{\"name\": \"w\", \"dtype\": \"u8\", "
                    "\"shape\": [8]}, {\"name\": \"b\", \"dtype\": \"u8\", "
                    "\"shape\": [8]}], \"ranks\": [{\"rank\": 0, \"source\": "
                    "[{\"tensor\": \"w\"}, {\"tensor\": \"b\"}]}, {\"rank\": 1, "
                    "\"target\": [{\"tensor\": \"b\"}]}]}";
    const char *b = "{\"tensors\": [{\"name\": \"w\", \"dtype\": \"i8\", "
                    "\"shape\": [8]}, {\"name\": \"b\", \"dtype\": \"u8\", "
                    "\"shape\": [8]}], \"ranks\": [{\"rank\": 0, \"source\": "
                    "[{\"tensor\": \"w\"}, {\"tensor\": \"b\"}]}, {\"rank\": 1, "
                    "\"target\": [{\"tensor\": \"b\", \"dim\": 0, \"start\": 0, "
                    "\"end\": 4}]}]}";
    struct plan_manifest *ma = NULL, *mb = NULL;
    struct plan_item *ia = NULL, *ib = NULL;
    struct plan_item_text t;

    expect_ok(manifest_parse_json(a, strlen(a), &ma));
    expect_ok(manifest_parse_json(b, strlen(b), &mb));
    ck_assert_uint_eq(manifest_items(ma), 3);
    expect_ok(manifest_item_digests(ma, &ia));
    expect_ok(manifest_item_digests(mb, &ib));
    /* w: the dtype only; b: its pieces only; the rest: the whole hash */
    ck_assert_uint_eq(ia[0].name, ib[0].name);
    ck_assert_uint_ne(ia[0].type, ib[0].type);
    ck_assert_uint_eq(ia[0].shape, ib[0].shape);
    ck_assert_uint_eq(ia[0].pieces, ib[0].pieces);
    ck_assert_uint_eq(ia[1].type, ib[1].type);
    ck_assert_uint_ne(ia[1].pieces, ib[1].pieces);
    ck_assert_uint_eq(ia[1].rules, ib[1].rules);
    ck_assert_uint_ne(ia[2].pieces, ib[2].pieces);
    manifest_item_describe(mb, 1, &t);
    ck_assert_str_eq(t.decl, "\"b\" u8 [8]");
    ck_assert_uint_eq(t.npieces, 2);
    ck_assert_str_eq(t.piece[0], "rank 0 source, the whole tensor");
    ck_assert_str_eq(t.piece[1], "rank 1 target, [0, 4) along dim 0");
    ck_assert_str_eq(t.rules, "sources listed; targets listed");
    free(ia);
    free(ib);
    manifest_free(ma);
    manifest_free(mb);
}
END_TEST

int main(void)
{
    const struct unit_test dtype[] = {{dtypes}};
    const struct unit_test json[] = {
        {good_files, UNIT_ROWS(good_rows)}, {whole_content},
        {hash_json_equals_api}, {hash_sensitivity}, {parse_length_bounded},
        {load_missing_file}, {bad_files, UNIT_ROWS(bad_rows)},
        {bad_files_escaped}, {escape_helper}, {load_not_regular},
    };
    const struct unit_test api[] = {
        {api_tensor_errors}, {api_piece_errors}, {api_escaped_names},
        {full_range_is_whole}, {tiled_sources_cover},
    };
    const struct unit_test scales[] = {{scale}, {item_digests}};
    Suite *s = suite_create("manifest");

    unit_tcase(s, "dtype", 0, dtype, UNIT_ROWS(dtype));
    unit_tcase(s, "json", 0, json, UNIT_ROWS(json));
    unit_tcase(s, "api", 0, api, UNIT_ROWS(api));
    unit_tcase(s, "scale", 60, scales, UNIT_ROWS(scales));
    return unit_run(s);
}
