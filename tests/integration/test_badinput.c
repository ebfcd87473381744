/*
 * The table of refused inputs (docs/bad-inputs.md), checked row by row:
 * each case feeds fabxfer one bad input -- a FABXFER_* variable, a
 * manifest, a blob, a file in its way, a misused call -- and asserts the
 * status and a fragment of fx_last_error(), and, where bytes could have
 * moved, that none did.
 *
 * The cases live here and the document is printed from them:
 *   ./test_badinput --markdown > docs/bad-inputs.md
 * A run without arguments checks every case, then fails if
 * docs/bad-inputs.md differs from what --markdown prints, so that the two
 * cannot drift apart. Rows marked as job rows need a bootstrap: they run
 * in a job of JOB_RANKS ranks that this program launches on itself.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "itest.h"
#include "../unit/local_env.h"
#include "../unit/rules_collide.h"

#ifndef FX_TEST_DATA
#define FX_TEST_DATA "tests/data"
#endif
#ifndef FX_TEST_DOCS
#define FX_TEST_DOCS "docs"
#endif

#define PROV "tcp;ofi_rxm"
#define JOB_RANKS 4
#define NONCE "0123456789abcdef"
#define MSG_MAX 1024
#define NOT_HERE 1 /* a job row's status on a rank that does not check it */

/* Set by a job row that one rank checks (that rank prints it); rows that
 * every rank checks are printed by rank 0. */
static int one_checker;

struct bad {
    const char *kind;    /* env, manifest, blob, file, api */
    const char *input;   /* markdown: what was given */
    fx_status_t want;
    const char *frag[3]; /* fragments of the message, all required */
    fx_status_t (*run)(const struct bad *c, char *msg);
    const char *a, *b;   /* the runner's arguments */
    int job;             /* 1: runs in the launched job */
};

/* ---- helpers ---------------------------------------------------------- */

static char tmp_dir[] = "/tmp/test_badinput.XXXXXX";

/* The status of a call and the message it left where its caller reads
 * it: the context's, or the thread's for calls without one. */
static fx_status_t got(fx_status_t st, const fx_ctx_t *ctx, char *msg)
{
    snprintf(msg, MSG_MAX, "%s", fx_last_error(ctx));
    return st;
}

static const char *status_name(fx_status_t st)
{
    switch (st) {
#define NAME_(name, value, text) case name: return #name;
        FX_STATUS_LIST(NAME_)
#undef NAME_
    }
    return "?";
}

static char *tmp_path(const char *name)
{
    static char path[4][512];
    static int next;
    char *p = path[next++ % 4];

    snprintf(p, sizeof(path[0]), "%s/%s", tmp_dir, name);
    return p;
}

/* The FABXFER_* variables a case may set, cleared after each. */
static void clear_env(void)
{
    const char *name;

    for (int i = 0; fx_config_describe(i, &name, NULL, NULL) == FX_OK; i++)
        unsetenv(name);
    unsetenv("FABXFER_LOCAL_NONCE");
}

/* ---- env: a FABXFER_* variable with a bad value ----------------------- */

/* The name of "NAME=value" into name; returns the value. */
static const char *split_assignment(const char *assignment, char name[64])
{
    const char *eq = strchr(assignment, '=');

    snprintf(name, 64, "%.*s", (int)(eq - assignment), assignment);
    return eq + 1;
}

/* Set "NAME=value"; the option that would override the variable is left
 * unset. */
static void env_set(const char *assignment, fx_ctx_opts_t *o)
{
    char name[64];
    const char *value = split_assignment(assignment, name);

    if (strcmp(name, "FABXFER_PROVIDER") == 0)
        o->provider = NULL;
    if (strcmp(name, "FABXFER_BOOTSTRAP") == 0)
        o->bootstrap = NULL;
    setenv(name, value, 1);
}

/* a (and b, if set) is "NAME=value": fx_ctx_create must refuse it. With
 * b "opts.provider=P", that option is given instead of a variable. */
static fx_status_t run_env(const struct bad *c, char *msg)
{
    fx_ctx_opts_t o;
    fx_ctx_t *ctx = NULL;
    fx_status_t st;

    itest_solo_opts(&o, PROV, 0, 1);
    env_set(c->a, &o);
    if (c->b != NULL && strncmp(c->b, "opts.provider=", 14) == 0)
        o.provider = c->b + 14;
    else if (c->b != NULL)
        env_set(c->b, &o);
    st = got(fx_ctx_create(&o, &ctx), NULL, msg);
    if (ctx != NULL)
        ITEST_FAIL("%s: a refused fx_ctx_create set the context", c->a);
    clear_env();
    return st;
}

/* The local bootstrap's variables, as fabxfer-run sets them, with one of
 * them replaced by a ("NAME=value"; NAME= alone unsets it). */
static void local_env(const char *dir, int rank, int size, const char *a)
{
    setenv("FABXFER_BOOTSTRAP", "local", 1);
    local_env_set(dir, rank, size, NONCE);
    if (a != NULL) {
        char name[64];
        const char *value = split_assignment(a, name);

        if (value[0] == '\0')
            unsetenv(name);
        else
            setenv(name, value, 1);
    }
}

static fx_status_t local_create(fx_ctx_t **ctx, char *msg)
{
    fx_ctx_opts_t o;

    fx_ctx_opts_init(&o);
    o.provider = PROV;
    *ctx = NULL;
    return got(fx_ctx_create(&o, ctx), NULL, msg);
}

/* a: a local variable replaced, in a good folder of rank 0 of 2. */
static fx_status_t run_local_env(const struct bad *c, char *msg)
{
    char *dir = tmp_path("rdv-good");
    fx_ctx_t *ctx;
    fx_status_t st;

    mkdir(dir, 0700);
    local_env(dir, 0, 2, c->a);
    st = local_create(&ctx, msg);
    if (ctx != NULL)
        ITEST_FAIL("%s: a refused fx_ctx_create set the context", c->a);
    clear_env();
    return st;
}

/* ---- manifest: JSON text, files from tests/data/manifests, API -------- */

static fx_status_t run_json(const struct bad *c, char *msg)
{
    fx_manifest_t *m = NULL;
    fx_status_t st;

    st = got(fx_manifest_parse(c->a, strlen(c->a), &m), NULL, msg);
    if (m != NULL)
        ITEST_FAIL("a refused manifest was returned");
    return st;
}

static fx_status_t run_file(const struct bad *c, char *msg)
{
    char path[512];
    fx_manifest_t *m = NULL;
    fx_status_t st;

    snprintf(path, sizeof(path), "%s/manifests/%s", FX_TEST_DATA, c->a);
    if (access(path, R_OK) != 0)
        ITEST_FAIL("%s: %s", path, strerror(errno));
    st = got(fx_manifest_load(path, &m), NULL, msg);
    if (m != NULL)
        ITEST_FAIL("a refused manifest was returned");
    return st;
}

/* The object, a NUL and more text, all within the length given. */
static fx_status_t run_json_nul(const struct bad *c, char *msg)
{
    static const char text[] = "{\"tensors\": []}\0garbage";
    fx_manifest_t *m = NULL;
    fx_status_t st;

    (void)c;
    st = got(fx_manifest_parse(text, sizeof(text) - 1, &m), NULL, msg);
    if (m != NULL)
        ITEST_FAIL("a refused manifest was returned");
    return st;
}

/* A tensor name of 256 bytes: names are < 256 bytes. */
static fx_status_t run_long_name(const struct bad *c, char *msg)
{
    char json[512], name[257];

    memset(name, 'w', 256);
    name[256] = '\0';
    snprintf(json, sizeof(json), "{\"tensors\": [{\"name\": \"%s\", "
             "\"dtype\": \"u8\", \"shape\": [8]}]}", name);
    (void)c;
    return run_json(&(struct bad){.a = json}, msg);
}

/* ---- blob: fx_blob_import of a damaged or foreign blob ----------------- */

/* The blob's header, as src/core/blob.c lays it out (little-endian). */
#define OFF_MAGIC 0
#define OFF_VERSION 4
#define OFF_RANK 8
#define OFF_NRAILS 12
#define OFF_NREGIONS 16
#define OFF_ADDR_ROOM 20
#define OFF_TOKEN 24
#define HEADER_LEN 160 /* then host, then the rails' records: */
#define OFF_PROV 160   /* rail 0's provider, */
#define OFF_NOTIFY 192 /* its notification mode, */
#define OFF_KEY_LEN 196 /* its key length */
#define OFF_ADDR_LEN 200 /* and address length */
#define RAIL_REC 48   /* provider, notify, key_len, addr_len, hmem */
#define REGION_REC 16 /* id, reserved, len; then per rail an address */
#define REGION_ADDR 8 /* (8 bytes) and a key */

static struct {
    int ready;
    fx_ctx_t *tcp0, *tcp1;
    fx_region_t *src, *dst;
    unsigned char *blob;
    size_t len;
    char buf0[4096], buf1[4096];
} B;

/* A context that notifies by writedata, whatever auto picks (message on
 * tcp;ofi_rxm from libfabric 1.18): the blob rows import one another's
 * blobs, and the row of a blob from a message context needs the other
 * mode. */
static fx_ctx_t *solo_writedata(int rank, int size)
{
    fx_ctx_t *ctx;

    setenv("FABXFER_NOTIFY", "writedata", 1);
    ctx = itest_solo_ctx(PROV, rank, size);
    unsetenv("FABXFER_NOTIFY");
    return ctx;
}

static void blob_fixture(void)
{
    uint32_t magic, nrails;

    if (B.ready)
        return;
    B.tcp0 = solo_writedata(0, 2);
    B.tcp1 = solo_writedata(1, 2);
    ITEST_OK(B.tcp0, fx_region_register(B.tcp0, B.buf0, sizeof(B.buf0),
                                        FX_REGION_SOURCE, &B.src));
    ITEST_OK(B.tcp1, fx_region_register(B.tcp1, B.buf1, sizeof(B.buf1),
                                        FX_REGION_TARGET, &B.dst));
    ITEST_OK(B.tcp1, fx_blob_export(B.tcp1, (void **)&B.blob, &B.len));
    memcpy(&magic, B.blob + OFF_MAGIC, 4);
    memcpy(&nrails, B.blob + OFF_NRAILS, 4);
    if (magic != 0x34425846u || nrails != 1 || B.len < HEADER_LEN)
        ITEST_FAIL("the blob layout is not what this test knows "
                   "(magic 0x%08x, %u rails, %zu bytes): update its offsets",
                   magic, nrails, B.len);
    B.ready = 1;
}

static void blob_fixture_free(void)
{
    if (!B.ready)
        return;
    fx_blob_free(B.blob);
    fx_ctx_destroy(B.tcp1);
    fx_ctx_destroy(B.tcp0);
    B.ready = 0;
}

/* Import blob (len bytes) into rank 0. A refused blob leaves rank 1
 * unknown: a write to it is still refused. */
static fx_status_t import_checked(const void *blob, size_t len, char *msg)
{
    fx_status_t st, w;

    st = got(fx_blob_import(B.tcp0, blob, len), B.tcp0, msg);
    w = fx_write(B.tcp0, B.src, 0, 1, 0, 0, 1);
    if (st != FX_OK && w != FX_ERR_STATE)
        ITEST_FAIL("a refused blob left rank 1 known: fx_write gave %s (%s)",
                   fx_strerror(w), fx_last_error(B.tcp0));
    return st;
}

/* A copy of rank 1's blob with a 32-bit field at offset off set to value
 * (off < 0: unchanged), cut to len bytes (0: whole). */
static fx_status_t import_patched(long off, uint32_t value, size_t len,
                                  char *msg)
{
    unsigned char *copy;
    fx_status_t st;

    blob_fixture();
    copy = malloc(B.len);
    memcpy(copy, B.blob, B.len);
    if (off >= 0)
        memcpy(copy + off, &value, sizeof(value));
    st = import_checked(copy, len ? len : B.len, msg);
    free(copy);
    return st;
}

/* a: the field ("magic", "version", ...), b: its new value. */
static fx_status_t run_blob_field(const struct bad *c, char *msg)
{
    static const struct { const char *name; long off; } fields[] = {
        {"magic", OFF_MAGIC}, {"version", OFF_VERSION}, {"rank", OFF_RANK},
        {"notify", OFF_NOTIFY}, {"addr_len", OFF_ADDR_LEN},
        {"nregions", OFF_NREGIONS}, {"key_len", OFF_KEY_LEN},
        {"nrails", OFF_NRAILS}, {"addr_room", OFF_ADDR_ROOM},
        {"token", OFF_TOKEN},
        {"token_hi", OFF_TOKEN + 4},
    };

    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (strcmp(fields[i].name, c->a) == 0)
            return import_patched(fields[i].off,
                                  (uint32_t)strtoll(c->b, NULL, 0), 0, msg);
    ITEST_FAIL("no blob field %s", c->a);
}

/* A token of zero: both of its words. */
static fx_status_t run_blob_token0(const struct bad *c, char *msg)
{
    unsigned char *copy;
    fx_status_t st;

    (void)c;
    blob_fixture();
    copy = calloc(1, B.len);
    memcpy(copy, B.blob, B.len);
    memset(copy + OFF_TOKEN, 0, 8);
    st = import_checked(copy, B.len, msg);
    free(copy);
    return st;
}

/* a: "cut" (3 bytes short), "short" (7 bytes), "null", "long" (1 more). */
static fx_status_t run_blob_len(const struct bad *c, char *msg)
{
    unsigned char *copy;
    fx_status_t st;

    blob_fixture();
    if (strcmp(c->a, "cut") == 0)
        return import_patched(-1, 0, B.len - 3, msg);
    if (strcmp(c->a, "short") == 0)
        return import_patched(-1, 0, 7, msg);
    if (strcmp(c->a, "null") == 0)
        return import_checked(NULL, 0, msg);
    copy = calloc(1, B.len + 1);
    memcpy(copy, B.blob, B.len);
    st = import_checked(copy, B.len + 1, msg);
    free(copy);
    return st;
}

/* The id of the region record at position 0 (after the probe's). */
static fx_status_t run_blob_region_id(const struct bad *c, char *msg)
{
    uint32_t addr_room, key_len;

    (void)c;
    blob_fixture();
    memcpy(&addr_room, B.blob + OFF_ADDR_ROOM, 4);
    memcpy(&key_len, B.blob + OFF_KEY_LEN, 4);
    /* past the rail's record and address, and the probe buffer's record */
    return import_patched(HEADER_LEN + RAIL_REC + addr_room + REGION_REC +
                              REGION_ADDR + key_len,
                          5, 0, msg);
}

/* A blob of another provider (shm) or another notification mode. */
static fx_status_t run_blob_foreign(const struct bad *c, char *msg)
{
    fx_ctx_opts_t o;
    fx_ctx_t *other;
    void *blob;
    size_t len;
    fx_status_t st;

    blob_fixture();
    itest_solo_opts(&o, PROV, 1, 2);
    if (strcmp(c->a, "shm") == 0)
        o.provider = "shm";
    else
        setenv("FABXFER_NOTIFY", c->a, 1);
    ITEST_OK(NULL, fx_ctx_create(&o, &other));
    clear_env();
    ITEST_OK(other, fx_blob_export(other, &blob, &len));
    st = import_checked(blob, len, msg);
    fx_blob_free(blob);
    fx_ctx_destroy(other);
    return st;
}

/* Rank 1's blob (of a job of 2) into rank 0 of a job of c->a ranks: of
 * 1, the rank is outside it. (Of 3, it is taken: a job that grew holds
 * ranks of both sizes.) */
static fx_status_t run_blob_job(const struct bad *c, char *msg)
{
    fx_ctx_t *other;
    fx_status_t st;

    blob_fixture();
    other = solo_writedata(0, atoi(c->a));
    st = got(fx_blob_import(other, B.blob, B.len), other, msg);
    fx_ctx_destroy(other);
    return st;
}

/* Rank 1 known, then another context claiming rank 1: its blob is
 * refused, and writes still reach the first one's region bounds. */
static fx_status_t run_blob_reimport(const struct bad *c, char *msg)
{
    fx_ctx_t *a0 = itest_solo_ctx(PROV, 0, 2);
    fx_ctx_t *a1 = itest_solo_ctx(PROV, 1, 2);
    fx_ctx_t *b1 = itest_solo_ctx(PROV, 1, 2);
    static char t1[4096], t2[64], s0[4096];
    fx_region_t *r1, *r2, *src;
    void *blob1, *blob2;
    size_t len1, len2;
    fx_status_t st, w;

    (void)c;
    ITEST_OK(a1, fx_region_register(a1, t1, sizeof(t1), FX_REGION_TARGET,
                                    &r1));
    ITEST_OK(b1, fx_region_register(b1, t2, sizeof(t2), FX_REGION_TARGET,
                                    &r2));
    ITEST_OK(a0, fx_region_register(a0, s0, sizeof(s0), FX_REGION_SOURCE,
                                    &src));
    ITEST_OK(a1, fx_blob_export(a1, &blob1, &len1));
    ITEST_OK(b1, fx_blob_export(b1, &blob2, &len2));
    ITEST_OK(a0, fx_blob_import(a0, blob1, len1));
    st = got(fx_blob_import(a0, blob2, len2), a0, msg);
    /* Still the first blob's region: 4096 bytes, not 64. */
    w = fx_write(a0, src, 0, 1, 0, 4000, 0);
    if (w != FX_OK)
        ITEST_FAIL("after a refused re-import, rank 1's first region is "
                   "gone: %s (%s)", fx_strerror(w), fx_last_error(a0));
    fx_blob_free(blob1);
    fx_blob_free(blob2);
    fx_ctx_destroy(b1);
    fx_ctx_destroy(a1);
    fx_ctx_destroy(a0);
    return st;
}

/* ---- file: things in the way of a path ------------------------------- */

/* a: what the manifest path is: "fifo", "dir", "missing", "devzero",
 * "huge" (a sparse 3 GiB file), "symlink-fifo". */
static fx_status_t run_manifest_path(const struct bad *c, char *msg)
{
    const char *path = tmp_path(c->a);
    fx_manifest_t *m = NULL;
    fx_status_t st;
    int fd;

    if (strcmp(c->a, "fifo") == 0) {
        if (mkfifo(path, 0600) != 0 && errno != EEXIST)
            ITEST_FAIL("mkfifo %s: %s", path, strerror(errno));
    } else if (strcmp(c->a, "dir") == 0) {
        mkdir(path, 0700);
    } else if (strcmp(c->a, "devzero") == 0) {
        path = "/dev/zero";
    } else if (strcmp(c->a, "huge") == 0) {
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || ftruncate(fd, 3LL << 30) != 0)
            ITEST_FAIL("sparse file %s: %s", path, strerror(errno));
        close(fd);
    } else if (strcmp(c->a, "symlink-fifo") == 0) {
        mkfifo(tmp_path("fifo2"), 0600);
        unlink(path);
        if (symlink(tmp_path("fifo2"), path) != 0)
            ITEST_FAIL("symlink %s: %s", path, strerror(errno));
    }
    st = got(fx_manifest_load(path, &m), NULL, msg);
    if (m != NULL)
        ITEST_FAIL("a refused manifest was returned");
    if (strcmp(c->a, "huge") == 0)
        unlink(path);
    return st;
}

/* a: what the rendezvous folder is: "0777", "0720" (modes), "symlink"
 * (to a good folder), "file", "missing". */
static fx_status_t run_rdv_folder(const struct bad *c, char *msg)
{
    char *dir = tmp_path(c->a);
    fx_ctx_t *ctx;
    fx_status_t st;

    if (c->a[0] == '0') {
        mkdir(dir, 0700);
        if (chmod(dir, (mode_t)strtol(c->a, NULL, 8)) != 0)
            ITEST_FAIL("chmod %s: %s", dir, strerror(errno));
    } else if (strcmp(c->a, "symlink") == 0) {
        mkdir(tmp_path("rdv-good"), 0700);
        unlink(dir);
        if (symlink(tmp_path("rdv-good"), dir) != 0)
            ITEST_FAIL("symlink %s: %s", dir, strerror(errno));
    } else if (strcmp(c->a, "file") == 0) {
        int fd = open(dir, O_WRONLY | O_CREAT, 0600);

        close(fd);
    }
    local_env(dir, 0, 2, NULL);
    st = local_create(&ctx, msg);
    if (ctx != NULL)
        ITEST_FAIL("a refused folder gave a context");
    clear_env();
    return st;
}

/* A peer's file in a good folder is a: "fence-symlink", "fence-fifo" (its
 * fence marker), "blob-dir" (its blob, the value of the first allgather,
 * after a forged fence marker). Rank 0 of 2's exchange must fail at once,
 * not wait out the timeout. */
static fx_status_t run_rdv_file(const struct bad *c, char *msg)
{
    char dir_name[64], name[600];
    char *dir;
    fx_ctx_t *ctx;
    fx_status_t st;
    double t0;
    int fd;

    snprintf(dir_name, sizeof(dir_name), "rdv-%s", c->a);
    dir = tmp_path(dir_name);
    if (mkdir(dir, 0700) != 0)
        ITEST_FAIL("mkdir %s: %s", dir, strerror(errno));
    snprintf(name, sizeof(name), "%s/fence.0.1", dir);
    if (strcmp(c->a, "fence-symlink") == 0) {
        if (symlink("elsewhere", name) != 0)
            ITEST_FAIL("symlink %s: %s", name, strerror(errno));
    } else if (strcmp(c->a, "fence-fifo") == 0) {
        if (mkfifo(name, 0600) != 0)
            ITEST_FAIL("mkfifo %s: %s", name, strerror(errno));
    } else {
        fd = open(name, O_WRONLY | O_CREAT, 0600);
        if (fd < 0 || write(fd, NONCE "\n", 17) != 17)
            ITEST_FAIL("%s: %s", name, strerror(errno));
        close(fd);
        snprintf(name, sizeof(name), "%s/kv.1.ag.0", dir);
        if (mkdir(name, 0700) != 0)
            ITEST_FAIL("mkdir %s: %s", name, strerror(errno));
    }
    local_env(dir, 0, 2, "FABXFER_TIMEOUT_MS=20000");
    ITEST_OK(NULL, local_create(&ctx, msg));
    t0 = clock_now();
    st = got(fx_ctx_exchange(ctx), ctx, msg);
    if (clock_now() - t0 > 5)
        ITEST_FAIL("%s: refused after %.0f s, not at once", c->a,
                   clock_now() - t0);
    fx_ctx_destroy(ctx);
    clear_env();
    return st;
}

/* ---- api: misuse of single calls, without a job ---------------------- */

static fx_status_t run_api(const struct bad *c, char *msg)
{
    static char buf[4096];
    const char *w = c->a;
    fx_ctx_opts_t o;
    fx_ctx_t *ctx = NULL, *other;
    fx_region_t *r, *r2;
    fx_manifest_t *m;
    fx_session_t *s;
    fx_status_t st;
    int64_t shape[2] = {64, 64};
    uint64_t u;
    void *blob;
    size_t len;
    char one;

    itest_solo_opts(&o, PROV, 0, 1);
    if (strcmp(w, "create-null") == 0)
        return got(fx_ctx_create(&o, NULL), NULL, msg);
    if (strcmp(w, "create-opts") == 0) {
        o.struct_size = 0;
        return got(fx_ctx_create(&o, &ctx), NULL, msg);
    }
    if (strcmp(w, "create-rank") == 0) {
        o.rank = 2;
        o.size = 2;
        return got(fx_ctx_create(&o, &ctx), NULL, msg);
    }
    if (strcmp(w, "create-timeout") == 0) {
        o.timeout_ms = 86400001;
        return got(fx_ctx_create(&o, &ctx), NULL, msg);
    }
    if (strcmp(w, "create-boot") == 0) {
        o.bootstrap = "carrier-pigeon";
        return got(fx_ctx_create(&o, &ctx), NULL, msg);
    }
    if (strcmp(w, "create-prov") == 0) {
        o.provider = "nosuch";
        return got(fx_ctx_create(&o, &ctx), NULL, msg);
    }
    if (strncmp(w, "manifest-", 9) == 0) {
        ITEST_OK(NULL, fx_manifest_create(&m));
        ITEST_OK(NULL, fx_manifest_add_tensor(m, "w", "bf16", 2, shape));
        ITEST_OK(NULL, fx_manifest_add_piece(m, 0, FX_SOURCE, "w", -1, 0, 0));
        if (strcmp(w, "manifest-ndim") == 0)
            st = fx_manifest_add_tensor(m, "x", "bf16", 9, shape);
        else if (strcmp(w, "manifest-ndim-neg") == 0)
            st = fx_manifest_add_tensor(m, "x", "bf16", -1, shape);
        else if (strcmp(w, "manifest-noshape") == 0)
            st = fx_manifest_add_tensor(m, "x", "bf16", 2, NULL);
        else if (strcmp(w, "manifest-role") == 0)
            st = fx_manifest_add_piece(m, 1, (fx_role_t)7, "w", -1, 0, 0);
        else if (strcmp(w, "manifest-rank") == 0)
            st = fx_manifest_add_piece(m, -1, FX_TARGET, "w", -1, 0, 0);
        else if (strcmp(w, "manifest-dim") == 0)
            st = fx_manifest_add_piece(m, 1, FX_TARGET, "w", 3, 0, 8);
        else if (strcmp(w, "manifest-range") == 0)
            st = fx_manifest_add_piece(m, 1, FX_TARGET, "w", 0, 32, 16);
        else if (strcmp(w, "manifest-dup") == 0)
            st = fx_manifest_add_tensor(m, "w", "bf16", 2, shape);
        else if (strcmp(w, "manifest-bytes") == 0)
            st = fx_manifest_piece_bytes(m, 1, FX_TARGET, "w", &u);
        else
            ITEST_FAIL("no api case %s", w);
        got(st, NULL, msg);
        fx_manifest_destroy(m);
        return st;
    }
    if (strcmp(w, "load-null") == 0)
        return got(fx_manifest_load(NULL, &m), NULL, msg);
    if (strcmp(w, "blob-import-null") == 0)
        return got(fx_blob_import(NULL, buf, 8), NULL, msg);
    if (strcmp(w, "session-create-null") == 0)
        return got(fx_session_create(NULL, NULL, &s), NULL, msg);
    if (strcmp(w, "session-setup-null") == 0)
        return got(fx_session_setup(NULL), NULL, msg);
    if (strcmp(w, "push-null") == 0)
        return got(fx_session_push(NULL, 1), NULL, msg);

    /* The rest need a context: rank 0 of 2 without a bootstrap. */
    ctx = itest_solo_ctx(PROV, 0, 2);
    st = FX_OK;
    if (strcmp(w, "region-null") == 0)
        st = got(fx_region_register(ctx, NULL, 10, FX_REGION_SOURCE, &r),
                 ctx, msg);
    else if (strcmp(w, "region-len0") == 0)
        st = got(fx_region_register(ctx, buf, 0, FX_REGION_SOURCE, &r), ctx,
                 msg);
    else if (strcmp(w, "region-flags") == 0)
        st = got(fx_region_register(ctx, buf, sizeof(buf), 0x40, &r), ctx,
                 msg);
    else if (strcmp(w, "region-flags0") == 0)
        st = got(fx_region_register(ctx, buf, sizeof(buf), 0, &r), ctx, msg);
    else if (strcmp(w, "region-kind") == 0)
        st = got(fx_region_register_mem(ctx, buf, sizeof(buf),
                                         FX_REGION_SOURCE, (fx_mem_kind_t)7,
                                         0, &r), ctx, msg);
    else if (strcmp(w, "exchange-none") == 0)
        st = got(fx_ctx_exchange(ctx), ctx, msg);
    else if (strcmp(w, "barrier-none") == 0)
        st = got(fx_barrier(ctx), ctx, msg);
    else if (strcmp(w, "allgather-none") == 0)
        st = got(fx_allgather(ctx, &one, 1, buf), ctx, msg);
    else if (strcmp(w, "rail") == 0)
        st = got(fx_ctx_rail(ctx, 5, NULL, NULL), NULL, msg);
    else if (strcmp(w, "rail-neg") == 0)
        st = got(fx_ctx_rail(ctx, -1, NULL, NULL), NULL, msg);
    else if (strcmp(w, "export-null") == 0)
        st = got(fx_blob_export(ctx, NULL, &len), NULL, msg);
    else if (strcmp(w, "write-noblob") == 0) {
        ITEST_OK(ctx, fx_region_register(ctx, buf, sizeof(buf),
                                         FX_REGION_SOURCE, &r));
        st = got(fx_write(ctx, r, 0, 1, 0, 0, 8), ctx, msg);
    } else if (strcmp(w, "write-foreign") == 0) {
        other = itest_solo_ctx(PROV, 1, 2);
        ITEST_OK(other, fx_region_register(other, buf, sizeof(buf),
                                           FX_REGION_SOURCE, &r));
        ITEST_OK(other, fx_blob_export(other, &blob, &len));
        ITEST_OK(ctx, fx_blob_import(ctx, blob, len));
        st = got(fx_write(ctx, r, 0, 1, 0, 0, 8), ctx, msg);
        fx_blob_free(blob);
        fx_ctx_destroy(other);
    } else if (strcmp(w, "write-null") == 0)
        st = got(fx_write(ctx, NULL, 0, 1, 0, 0, 8), ctx, msg);
    else if (strcmp(w, "notify-peer") == 0)
        st = got(fx_notify(ctx, 9, 1), ctx, msg);
    else if (strcmp(w, "wait-peer") == 0)
        st = got(fx_wait_notify(ctx, -1, &u), ctx, msg);
    else if (strncmp(w, "session-", 8) == 0) {
        ITEST_OK(NULL, fx_manifest_create(&m));
        ITEST_OK(NULL, fx_manifest_add_tensor(m, "w", "u8", 2, shape));
        ITEST_OK(NULL, fx_manifest_add_piece(m, 0, FX_SOURCE, "w", -1, 0, 0));
        ITEST_OK(NULL, fx_manifest_add_piece(m, 1, FX_TARGET, "w", -1, 0, 0));
        ITEST_OK(ctx, fx_session_create(ctx, m, &s));
        ITEST_OK(ctx, fx_region_register(ctx, buf, sizeof(buf),
                                         FX_REGION_SOURCE, &r));
        ITEST_OK(ctx, fx_region_register(ctx, buf, 1000, FX_REGION_TARGET,
                                         &r2));
        if (strcmp(w, "session-setup-none") == 0)
            st = fx_session_setup(s);
        else if (strcmp(w, "session-push-early") == 0)
            st = fx_session_push(s, 1);
        else if (strcmp(w, "session-wait-early") == 0)
            st = fx_session_wait(s, 1);
        else if (strcmp(w, "session-bind-unknown") == 0)
            st = fx_session_bind(s, FX_SOURCE, "nope", r, 0);
        else if (strcmp(w, "session-bind-role") == 0)
            st = fx_session_bind(s, FX_TARGET, "w", r2, 0);
        else if (strcmp(w, "session-bind-fit") == 0)
            st = fx_session_bind(s, FX_SOURCE, "w", r, 100);
        else if (strcmp(w, "session-bind-past") == 0)
            st = fx_session_bind(s, FX_SOURCE, "w", r, SIZE_MAX);
        else if (strcmp(w, "session-bind-flags") == 0)
            st = fx_session_bind(s, FX_SOURCE, "w", r2, 0);
        else if (strcmp(w, "session-bind-null") == 0)
            st = fx_session_bind(s, FX_SOURCE, NULL, r, 0);
        else if (strcmp(w, "session-refuse-ok") == 0)
            st = fx_session_refuse(s, FX_OK, "fine after all");
        else
            ITEST_FAIL("no api case %s", w);
        /* Calls given a session speak through its context, NULL
         * arguments aside (there may be no context to speak through). */
        got(st, strcmp(w, "session-bind-null") == 0 ||
                        strcmp(w, "session-refuse-ok") == 0 ? NULL : ctx,
            msg);
        fx_session_destroy(s);
        fx_manifest_destroy(m);
    } else {
        ITEST_FAIL("no api case %s", w);
    }
    fx_ctx_destroy(ctx);
    return st;
}

/* ---- job rows: sessions and writes between JOB_RANKS ranks ----------- */

#define JOB_BYTES 8192
/* Rank 0 holds w and b; ranks 1 to 3 need both. */
#define JOB_MANIFEST                                                          \
    "{\"tensors\": [{\"name\": \"w\", \"dtype\": \"u8\", \"shape\": [4096]}," \
    " {\"name\": \"b\", \"dtype\": \"u8\", \"shape\": [4096]}],"              \
    " \"ranks\": [{\"rank\": 0, \"source\": [{\"tensor\": \"w\"},"            \
    " {\"tensor\": \"b\"}]},"                                                 \
    " {\"rank\": 1, \"target\": [{\"tensor\": \"w\"}, {\"tensor\": \"b\"}]}," \
    " {\"rank\": 2, \"target\": [{\"tensor\": \"w\"}, {\"tensor\": \"b\"}]}," \
    " {\"rank\": 3, \"target\": [{\"tensor\": \"w\"}, {\"tensor\": \"b\"}]}]}"

static struct {
    fx_ctx_t *ctx;
    int rank, ready;
    fx_manifest_t *m;
    fx_session_t *s;
    unsigned char *buf;
    fx_region_t *reg;
} J;

/* Bind every piece this rank holds, one after the other in its region
 * (all at offset 0 where overlap is asked for). */
static void bind_all(fx_session_t *s, const fx_manifest_t *m, int overlap)
{
    fx_role_t role = J.rank == 0 ? FX_SOURCE : FX_TARGET;
    size_t off = 0;
    uint64_t bytes;

    for (uint32_t i = 0; i < fx_manifest_tensor_count(m); i++) {
        const char *name = fx_manifest_tensor_name(m, i);

        if (fx_manifest_piece_bytes(m, J.rank, role, name, &bytes) != FX_OK)
            continue;
        ITEST_OK(J.ctx, fx_session_bind(s, role, name, J.reg, off));
        if (!overlap || role == FX_SOURCE)
            off += bytes;
    }
}

/* A session set up from manifest file a (or text b): how it is refused. */
static fx_status_t job_setup(const fx_manifest_t *m, int bind, int overlap,
                             char *msg)
{
    fx_session_t *s;
    fx_status_t st;

    ITEST_OK(J.ctx, fx_session_create(J.ctx, m, &s));
    if (bind)
        bind_all(s, m, overlap);
    st = got(fx_session_setup(s), J.ctx, msg);
    fx_session_destroy(s);
    return st;
}

static fx_status_t run_job_manifest(const struct bad *c, char *msg)
{
    char path[512];
    fx_manifest_t *m;
    fx_status_t st;

    snprintf(path, sizeof(path), "%s/manifests/%s", FX_TEST_DATA, c->a);
    ITEST_OK(NULL, fx_manifest_load(path, &m));
    st = job_setup(m, 0, 0, msg);
    fx_manifest_destroy(m);
    return st;
}


/* 3,000 tensors, rank 1's target piece of the 2,501st as piece opens. */
#define DEEP(piece)                                                         \
    "{\"tensors\": [{\"name\": \"t.{0..2999}\", \"dtype\": \"u8\", "     \
    "\"shape\": [4]}], \"ranks\": [{\"rank\": 0, \"source\": [{\"tensor\": " \
    "\"t.2500\"}]}, {\"rank\": 1, \"target\": [" piece "\"tensor\": "     \
    "\"t.2500\"}]}]}"

/* a: "unbound" (nobody binds), "overlap" (targets bind w and b to the
 * same bytes; b: the rank that checks), "other" (rank 3 loads another
 * manifest), "collide" (rank 3 loads layouts that hashed alike). */
static fx_status_t run_job_setup(const struct bad *c, char *msg)
{
    fx_manifest_t *m;
    fx_status_t st;
    const char *text = JOB_MANIFEST;
    char other[sizeof(JOB_MANIFEST)], extra[sizeof(JOB_MANIFEST) + 64];
    int checker = c->b ? atoi(c->b) : -1;

    if (strcmp(c->a, "extra") == 0 && J.rank == 3) { /* a third tensor */
        const char *at = strstr(JOB_MANIFEST, "[4096]}],") + 7;

        snprintf(extra, sizeof(extra), "%.*s, {\"name\": \"x\", \"dtype\": "
                 "\"f32\", \"shape\": [4]}%s", (int)(at - JOB_MANIFEST),
                 JOB_MANIFEST, at);
        text = extra;
    }
    if (strcmp(c->a, "deep") == 0) /* tensor 2500 of 3000 differs */
        text = J.rank == 3 ? DEEP("{\"dim\": 0, \"start\": 0, \"end\": 2, ")
                           : DEEP("{");
    if (strcmp(c->a, "collide") == 0) /* review 5.7's pair, by rules */
        text = J.rank == 3 ? COLLIDE_B : COLLIDE_A;
    if (strcmp(c->a, "other") == 0 && J.rank == 3) {
        /* the same, with b's dtype spelt i8: another manifest */
        snprintf(other, sizeof(other), "%s", JOB_MANIFEST);
        memcpy(strstr(other, "\"name\": \"b\", \"dtype\": \"u8\"") + 23,
               "i8", 2);
        text = other;
    }
    ITEST_OK(NULL, fx_manifest_parse(text, strlen(text), &m));
    st = job_setup(m, strcmp(c->a, "unbound") != 0,
                   strcmp(c->a, "overlap") == 0, msg);
    fx_manifest_destroy(m);
    if (st == FX_OK)
        ITEST_FAIL("rank %d: the set-up (%s) was not refused", J.rank, c->a);
    one_checker = checker >= 0;
    return checker < 0 || checker == J.rank ? st : NOT_HERE;
}

/* The job's one good session, set up and through version 1. */
static void job_ready(void)
{
    if (J.ready)
        return;
    ITEST_OK(NULL, fx_manifest_parse(JOB_MANIFEST, strlen(JOB_MANIFEST),
                                     &J.m));
    ITEST_OK(J.ctx, fx_session_create(J.ctx, J.m, &J.s));
    bind_all(J.s, J.m, 0);
    ITEST_OK(J.ctx, fx_session_setup(J.s));
    if (J.rank == 0) {
        itest_fill(J.buf, JOB_BYTES, 0, 1);
        ITEST_OK(J.ctx, fx_session_push(J.s, 1));
    } else {
        ITEST_OK(J.ctx, fx_session_wait(J.s, 1));
        if (itest_check(J.buf, JOB_BYTES, 0, 1) >= 0)
            ITEST_FAIL("rank %d: version 1 did not arrive", J.rank);
    }
    ITEST_OK(J.ctx, fx_barrier(J.ctx));
    J.ready = 1;
}

/* After a refused call on rank 0: it notifies every target with tag,
 * which each waits for (driving progress, so that whatever rank 0 wrote
 * before has landed); the tag must be that one, not a notification the
 * refused call sent, and every byte still version 1's. */
static void job_targets_unchanged(uint64_t tag, const char *what)
{
    uint64_t got_tag = 0;
    long long bad;

    if (J.rank == 0) {
        for (int t = 1; t < JOB_RANKS; t++)
            ITEST_OK(J.ctx, fx_notify(J.ctx, t, tag));
        return;
    }
    ITEST_OK(J.ctx, fx_wait_notify(J.ctx, 0, &got_tag));
    if (got_tag != tag)
        ITEST_FAIL("rank %d: notification %llu after %s, not %llu: it "
                   "notified", J.rank, (unsigned long long)got_tag, what,
                   (unsigned long long)tag);
    if ((bad = itest_check(J.buf, JOB_BYTES, 0, 1)) >= 0)
        ITEST_FAIL("rank %d: byte %lld changed after %s", J.rank, bad, what);
}

/* a: "repush" (version 1 again, with new bytes in the source), "rewait"
 * (rank 1 waits for 1 again), "bind-late", "setup-twice". */
static fx_status_t run_job_session(const struct bad *c, char *msg)
{
    fx_status_t st = NOT_HERE;

    job_ready();
    one_checker = strcmp(c->a, "repush") == 0 || strcmp(c->a, "rewait") == 0;
    /* A call of the other role, or a release, checked on one rank: rank 0
     * is the job's source only, rank 1 a target only. */
    if (strncmp(c->a, "role-", 5) == 0 || strncmp(c->a, "release-", 8) == 0) {
        one_checker = 1;
        if (strcmp(c->a, "role-push") == 0 && J.rank == 1)
            st = got(fx_session_push(J.s, 2), J.ctx, msg);
        else if (strcmp(c->a, "role-wait") == 0 && J.rank == 0)
            st = got(fx_session_wait(J.s, 2), J.ctx, msg);
        else if (strcmp(c->a, "role-apply") == 0 && J.rank == 0)
            st = got(fx_session_apply(J.s, 2, NULL), J.ctx, msg);
        else if (strcmp(c->a, "role-received") == 0 && J.rank == 0) {
            uint64_t v;

            st = got(fx_session_received(J.s, &v), J.ctx, msg);
        } else if (strcmp(c->a, "release-unwaited") == 0 && J.rank == 1)
            st = got(fx_session_release(J.s, 2), J.ctx, msg);
        else if (strcmp(c->a, "release-source") == 0 && J.rank == 0)
            st = got(fx_session_release(J.s, 1), J.ctx, msg);
        return st;
    }
    if (strcmp(c->a, "repush") == 0) {
        if (J.rank == 0) {
            itest_fill(J.buf, JOB_BYTES, 0, 2);
            st = got(fx_session_push(J.s, 1), J.ctx, msg);
        }
        job_targets_unchanged(1001, "a refused push");
        if (J.rank == 0)
            itest_fill(J.buf, JOB_BYTES, 0, 1);
    } else if (strcmp(c->a, "rewait") == 0) {
        if (J.rank == 1)
            st = got(fx_session_wait(J.s, 1), J.ctx, msg);
    } else if (strcmp(c->a, "bind-late") == 0) {
        st = got(fx_session_bind(J.s, J.rank == 0 ? FX_SOURCE : FX_TARGET,
                                 "w", J.reg, 0), J.ctx, msg);
    } else if (strcmp(c->a, "setup-twice") == 0) {
        st = got(fx_session_setup(J.s), J.ctx, msg);
    } else {
        ITEST_FAIL("no job case %s", c->a);
    }
    return st;
}

/* a: a raw write from rank 0 to rank 1: "end" (10 bytes before the end,
 * 11 long), "wrap" (offset near 2^64), "region" (region 3), "source"
 * (past the source region), "peer" (rank 7). Then every target checks
 * that nothing landed. */
static fx_status_t run_job_write(const struct bad *c, char *msg)
{
    fx_status_t st = NOT_HERE;
    const char *w = c->a;

    job_ready();
    one_checker = 1;
    if (J.rank == 0) {
        if (strcmp(w, "end") == 0)
            st = fx_write(J.ctx, J.reg, 0, 1, 0, JOB_BYTES - 10, 11);
        else if (strcmp(w, "wrap") == 0)
            st = fx_write(J.ctx, J.reg, 0, 1, 0, UINT64_MAX - 5, 10);
        else if (strcmp(w, "region") == 0)
            st = fx_write(J.ctx, J.reg, 0, 1, 3, 0, 8);
        else if (strcmp(w, "source") == 0)
            st = fx_write(J.ctx, J.reg, JOB_BYTES - 4, 1, 0, 0, 8);
        else if (strcmp(w, "peer") == 0)
            st = fx_write(J.ctx, J.reg, 0, 7, 0, 0, 8);
        else
            ITEST_FAIL("no job case %s", w);
        got(st, J.ctx, msg);
    }
    job_targets_unchanged(2000 + (uint64_t)w[0], "a refused write");
    return st;
}

/* ---- the table -------------------------------------------------------- */

#define ENV(var_value, st, ...)                                               \
    {"env", "`" var_value "`", st, {__VA_ARGS__}, run_env, var_value, NULL, 0}
#define ENV2(var_value, other, st, ...)                                       \
    {"env", "`" var_value "` with `" other "`", st, {__VA_ARGS__}, run_env,   \
     var_value, other, 0}
#define LOCAL_ENV(var_value, st, ...)                                         \
    {"env", "`" var_value "` in a rank of fabxfer-run", st, {__VA_ARGS__},   \
     run_local_env, var_value, NULL, 0}
#define JSON(text, st, ...)                                                   \
    {"manifest", "`" text "`", st, {__VA_ARGS__}, run_json, text, NULL, 0}
#define MFILE(file, what, st, ...)                                            \
    {"manifest", what " (`" file "`)", st, {__VA_ARGS__}, run_file, file,    \
     NULL, 0}
#define MJOB(file, what, st, ...)                                             \
    {"manifest", what " (`" file "`, at set-up in a job of 4)", st,          \
     {__VA_ARGS__}, run_job_manifest, file, NULL, 1}
#define BLOB(what, run, a, b, st, ...)                                        \
    {"blob", what, st, {__VA_ARGS__}, run, a, b, 0}
#define FILE_(what, run, a, st, ...)                                          \
    {"file", what, st, {__VA_ARGS__}, run, a, NULL, 0}
/* ---- the options and the application's exchange ---------------------- */

/* An application's allgather that misbehaves as its arg says: "7" returns
 * 7, "none" returns 0 having given nothing, "mix" gives rank 0 other
 * bytes than it sent, "late" keeps its handle for a call after it
 * returned. */
static fx_gather_t *kept_handle;

static int bad_allgather(void *arg, const void *mine, size_t len,
                         fx_gather_t *all)
{
    const char *how = arg;

    (void)mine;
    if (strcmp(how, "7") == 0)
        return 7;
    if (strcmp(how, "late") == 0) {
        kept_handle = all;
        return fx_gather_set(all, 0, mine, len) == FX_OK ? 0 : -1;
    }
    if (strcmp(how, "mix") == 0)
        return fx_gather_set(all, 0, "forged", 6) == FX_OK ? 0 : -1;
    (void)len;
    return 0;
}

static int ok_barrier(void *arg)
{
    (void)arg;
    return 0;
}

static fx_status_t run_opts(const struct bad *c, char *msg)
{
    const char *w = c->a;
    fx_ctx_opts_t o;
    fx_ctx_t *ctx = NULL;
    fx_status_t st;

    itest_solo_opts(&o, PROV, 0, 1);
    if (strcmp(w, "size-big") == 0)
        o.struct_size = sizeof(o) + 8;
    else if (strcmp(w, "size-between") == 0)
        o.struct_size = FX_CTX_OPTS_SIZE_0_3 + 4;
    else if (strcmp(w, "log-level") == 0)
        o.log_level = 9;
    else if (strcmp(w, "bucket-size") == 0)
        o.bucket_size = 1024;
    else if (strcmp(w, "bucket-depth") == 0)
        o.bucket_depth = 99;
    else if (strcmp(w, "notify") == 0)
        o.notify = "pigeon";
    else if (strcmp(w, "gpu-path") == 0)
        o.gpu_path = "sideways";
    else if (strcmp(w, "rails") == 0)
        o.rails = "auto:x";
    else if (strcmp(w, "timeout-neg") == 0)
        o.timeout_ms = -5;
    else if (strcmp(w, "half-exchange") == 0)
        o.exchange_allgather = bad_allgather;
    else if (strcmp(w, "exchange-local") == 0) {
        o.exchange_allgather = bad_allgather;
        o.exchange_barrier = ok_barrier;
        o.bootstrap = "local";
    } else if (strcmp(w, "exchange-rank") == 0) {
        o.exchange_allgather = bad_allgather;
        o.exchange_barrier = ok_barrier;
        o.rank = 3;
    } else {
        /* the exchange misbehaves in the host-name allgather that
         * fx_ctx_create makes to learn whether shm may be chosen */
        o.exchange_allgather = bad_allgather;
        o.exchange_barrier = ok_barrier;
        o.exchange_arg = (void *)c->b;
        o.single_host = -1;
    }
    st = fx_ctx_create(&o, &ctx);
    if (st == FX_OK && c->b != NULL && strcmp(c->b, "late") == 0)
        st = fx_gather_set(kept_handle, 0, "late", 4);
    if (ctx != NULL)
        fx_ctx_destroy(ctx);
    return got(st, NULL, msg);
}

#define OPTS(what, a, b, st, ...)                                             \
    {"api", what, st, {__VA_ARGS__}, run_opts, a, b, 0}
#define API(what, a, st, ...)                                                 \
    {"api", what, st, {__VA_ARGS__}, run_api, a, NULL, 0}
#define JOB(what, run, a, b, st, ...)                                         \
    {"api", what, st, {__VA_ARGS__}, run, a, b, 1}

static const struct bad cases[] = {
    ENV("FABXFER_PROVIDER=nosuch", FX_ERR_NO_PROVIDER, "\"nosuch\"",
        "not available"),
    ENV("FABXFER_PROVIDER=TCP;OFI_RXM", FX_ERR_NO_PROVIDER,
        "provider \"TCP;OFI_RXM\" is not available", "tcp;ofi_rxm"),
    ENV("FABXFER_ISOLATE=2", FX_ERR_INVALID, "FABXFER_ISOLATE=\"2\"",
        "[0, 1]"),
    ENV2("FABXFER_ISOLATE=1", "FABXFER_PROVIDER=shm", FX_ERR_INVALID,
         "FABXFER_PROVIDER=\"shm\" is refused with FABXFER_ISOLATE=1"),
    ENV2("FABXFER_ISOLATE=1", "opts.provider=shm", FX_ERR_INVALID,
         "fx_ctx_opts_t.provider=\"shm\" is refused with FABXFER_ISOLATE=1"),
    ENV("FABXFER_BOOTSTRAP=carrier-pigeon", FX_ERR_INVALID,
        "carrier-pigeon"),
    ENV("FABXFER_TIMEOUT_MS=soon", FX_ERR_INVALID, "FABXFER_TIMEOUT_MS",
        "[1, 86400000]"),
    ENV("FABXFER_TIMEOUT_MS=0", FX_ERR_INVALID, "FABXFER_TIMEOUT_MS",
        "[1, 86400000]"),
    ENV("FABXFER_TIMEOUT_MS=86400001", FX_ERR_INVALID, "FABXFER_TIMEOUT_MS",
        "[1, 86400000]"),
    ENV("FABXFER_LOG=loud", FX_ERR_INVALID, "FABXFER_LOG=\"loud\"",
        "none, error, warn, info or debug"),
    ENV("FABXFER_LOG=DEBUG", FX_ERR_INVALID, "FABXFER_LOG=\"DEBUG\""),
    ENV("FABXFER_NOTIFY=pigeon", FX_ERR_INVALID, "FABXFER_NOTIFY",
        "auto, writedata or message"),
    ENV("FABXFER_SHM_COPY=source", FX_ERR_INVALID,
        "FABXFER_SHM_COPY=\"source\"", "auto, target or both"),
    ENV("FABXFER_CHUNK_SIZE=12Q", FX_ERR_INVALID, "FABXFER_CHUNK_SIZE",
        "not a byte count"),
    ENV("FABXFER_CHUNK_SIZE=1K", FX_ERR_INVALID, "FABXFER_CHUNK_SIZE",
        "out of bounds", "0, or 4K to 1G"),
    ENV("FABXFER_IOV_MAX=9", FX_ERR_INVALID, "FABXFER_IOV_MAX",
        "[0, 8]"),
    ENV("FABXFER_IOV_MAX=-1", FX_ERR_INVALID, "FABXFER_IOV_MAX",
        "[0, 8]"),
    ENV("FABXFER_IOV_MAX=0x3", FX_ERR_INVALID, "FABXFER_IOV_MAX=\"0x3\"",
        "not an integer"),
    ENV("FABXFER_BUCKET_SIZE=99999999999G", FX_ERR_INVALID,
        "FABXFER_BUCKET_SIZE", "64 bits"),
    ENV("FABXFER_BUCKET_SIZE=2G", FX_ERR_INVALID, "FABXFER_BUCKET_SIZE",
        "out of bounds", "4K to 1G"),
    ENV("FABXFER_BUCKET_SIZE=2K", FX_ERR_INVALID, "FABXFER_BUCKET_SIZE",
        "0, or 4K to 1G"),
    ENV("FABXFER_BUCKET_SIZE=4MB", FX_ERR_INVALID, "FABXFER_BUCKET_SIZE",
        "not a byte count"),
    ENV("FABXFER_BUCKET_SIZE= 4M", FX_ERR_INVALID,
        "FABXFER_BUCKET_SIZE=\" 4M\"", "not a byte count"),
    ENV("FABXFER_BUCKET_DEPTH=1", FX_ERR_INVALID, "FABXFER_BUCKET_DEPTH",
        "[2, 16]"),
    ENV("FABXFER_BUCKET_DEPTH=17", FX_ERR_INVALID, "FABXFER_BUCKET_DEPTH",
        "[2, 16]"),
    ENV("FABXFER_PACK_MAX=16E", FX_ERR_INVALID, "FABXFER_PACK_MAX",
        "byte count"),
    ENV("FABXFER_PACK_MAX=2G", FX_ERR_INVALID, "FABXFER_PACK_MAX",
        "0 to 1G"),
    ENV("FABXFER_PACK_THREAD=2", FX_ERR_INVALID, "FABXFER_PACK_THREAD",
        "[-1, 1]"),
    ENV("FABXFER_SPIN_US=-5", FX_ERR_INVALID, "FABXFER_SPIN_US",
        "[-1, 1000000]"),
    ENV("FABXFER_SPIN_US=1000001", FX_ERR_INVALID, "FABXFER_SPIN_US",
        "[-1, 1000000]"),
    ENV("FABXFER_GPU_PATH=sideways", FX_ERR_INVALID,
        "FABXFER_GPU_PATH=\"sideways\"", "direct, staged or auto"),
    ENV("FABXFER_PROGRESS=sometimes", FX_ERR_INVALID,
        "FABXFER_PROGRESS=\"sometimes\"", "auto, thread or call"),
    ENV("FABXFER_PROGRESS_US=0", FX_ERR_INVALID, "FABXFER_PROGRESS_US",
        "[1, 1000000]"),
    ENV("FABXFER_RAILS=nosuch0", FX_ERR_INVALID, "FABXFER_RAILS",
        "no domain \"nosuch0\""),
    ENV("FABXFER_RAILS=auto:x", FX_ERR_INVALID, "FABXFER_RAILS=\"auto:x\"",
        "auto:N"),
    ENV("FABXFER_RAILS=autox", FX_ERR_INVALID, "FABXFER_RAILS=\"autox\""),
    ENV("FABXFER_RAILS=lo,lo", FX_ERR_INVALID, "names domain \"lo\" twice"),
    ENV("FABXFER_RAILS=,", FX_ERR_INVALID, "FABXFER_RAILS=\",\" names no "
        "domain"),
    ENV("FABXFER_BOOTSTRAP=local", FX_ERR_BOOTSTRAP,
        "not all set", "fabxfer-run"),
    LOCAL_ENV("FABXFER_LOCAL_RANK=2", FX_ERR_BOOTSTRAP, "bootstrap \"local\"",
              "FABXFER_LOCAL_RANK", "[0, 1]"),
    LOCAL_ENV("FABXFER_LOCAL_SIZE=0", FX_ERR_BOOTSTRAP, "FABXFER_LOCAL_SIZE",
              "not an integer"),
    LOCAL_ENV("FABXFER_LOCAL_NONCE=0123", FX_ERR_BOOTSTRAP,
              "FABXFER_LOCAL_NONCE=\"0123\"", "16 hex digits"),
    LOCAL_ENV("FABXFER_LOCAL_DIR=", FX_ERR_BOOTSTRAP, "not all set"),

    JSON("{\"tensors\": [{\"name\": \"w\", \"dtype\": \"bf17\", "
         "\"shape\": [8]}]}", FX_ERR_INVALID, "unknown dtype \"bf17\""),
    JSON("{\"tensors\": [{\"name\": \"\", \"dtype\": \"u8\", "
         "\"shape\": [8]}]}", FX_ERR_INVALID, "empty name"),
    {"manifest", "a tensor name of 256 bytes", FX_ERR_INVALID,
     {"256 bytes", "at most"}, run_long_name, NULL, NULL, 0},
    JSON("{\"tensors\": [{\"name\": \"w\", \"dtype\": \"u8\", "
         "\"shape\": [1, 1, 1, 1, 1, 1, 1, 1, 1]}]}", FX_ERR_INVALID,
         "tensors[0].shape", "9 dimensions, at most 8"),
    JSON("{\"tensors\": [{\"name\": \"w\", \"dtype\": \"bf16\", "
         "\"shape\": [4611686018427387904, 4]}]}", FX_ERR_INVALID,
         "overflows 63 bits"),
    JSON("{\"tensors\": [{\"name\": \"w\", \"dtype\": \"u8\", "
         "\"shape\": []}], \"ranks\": [{\"rank\": 0, \"source\": "
         "[{\"tensor\": \"w\", \"dim\": 0, \"start\": 0, \"end\": 1}]}]}",
         FX_ERR_INVALID, "\"w\" is a scalar and has no dimension to split"),
    JSON("{\"tensors\": [{\"name\": \"w\", \"dtype\": \"u8\", "
         "\"shape\": [8]}], \"ranks\": [{\"rank\": 18446744073709551616}]}",
         FX_ERR_INVALID, "ranks[0].rank", "past 64 bits"),
    JSON("{\"tensors\": [{\"name\": \"w\", \"dtype\": \"u8\", "
         "\"shape\": [8]}], \"ranks\": [{\"rank\": 2147483648}]}",
         FX_ERR_INVALID, "ranks[0].rank", "got 2147483648"),
    JSON("{\"tensors\": [{\"name\": \"w\", \"dtype\": \"u8\", "
         "\"shape\": [8]}], \"ranks\": [{\"rank\": 0, \"source\": "
         "[{\"tensor\": \"w\", \"dim\": 0, \"start\": -1, \"end\": 8}]}]}",
         FX_ERR_INVALID, "ranks[0].source[0].start", "got -1"),
    JSON("{\"tensors\": [{\"name\": \"w\", \"dtype\": \"BF16\", "
         "\"shape\": [8]}]}", FX_ERR_INVALID, "unknown dtype \"BF16\""),
    JSON("{\"version\": 1.0, \"tensors\": []}", FX_ERR_INVALID,
         "version: expected an integer, got 1.0"),
    JSON("{\"tensors\": [],}", FX_ERR_INVALID, "JSON syntax error"),
    JSON("{\"tensors\": [{\"name\": \"l.{+1..2}.w\", \"dtype\": \"u8\", "
         "\"shape\": [8]}]}", FX_ERR_INVALID, "tensors[0].name",
         "\"l.{+1..2}.w\": a range is {A..B}"),
    JSON("{\"tensors\": [{\"name\": \"l.{01..02}.w\", \"dtype\": \"u8\", "
         "\"shape\": [8]}]}", FX_ERR_INVALID, "tensors[0].name",
         "without sign, space or leading zero"),
    JSON("{\"tensors\": [{\"name\": \"a{0..16777215}\", \"dtype\": "
         "\"u8\", \"shape\": [1]}, {\"name\": \"b{0..16777215}\", "
         "\"dtype\": \"u8\", \"shape\": [1]}]}", FX_ERR_INVALID,
         "tensors[0].name: \"a{0..16777215}\" stands for 16777216 tensors",
         "at most 1048576 tensors and 64 MiB of names"),
    JSON("{\"tensors\": []} // comment", FX_ERR_INVALID, "text after"),
    {"manifest", "`{\"tensors\": []}`, a NUL, then `garbage`, all within "
     "the length given", FX_ERR_INVALID, {"line 1, column 17",
     "text after the JSON object"}, run_json_nul, NULL, NULL, 0},
    {"manifest", "0 bytes", FX_ERR_INVALID, {"the document is empty"},
     run_json, "", NULL, 0},
    MFILE("bad-syntax.json", "JSON syntax error", FX_ERR_INVALID,
          "line 3", "JSON syntax error"),
    MFILE("bad-truncated.json", "a document cut short", FX_ERR_INVALID,
          "ends inside an object or array"),
    MFILE("bad-trailing.json", "two objects", FX_ERR_INVALID,
          "text after the JSON object"),
    MFILE("bad-empty.json", "blank file", FX_ERR_INVALID,
          "the document is empty"),
    MFILE("bad-not-object.json", "an array, not an object", FX_ERR_INVALID,
          "expected a JSON object"),
    MFILE("bad-missing-tensors.json", "no tensors", FX_ERR_INVALID,
          "missing \"tensors\""),
    MFILE("bad-version.json", "version 2", FX_ERR_INVALID,
          "2 is not supported"),
    MFILE("bad-unknown-key.json", "misspelt key", FX_ERR_INVALID,
          "ranks[1].target[0].strat", "unknown key"),
    MFILE("bad-unknown-key-top.json", "unknown top-level key",
          FX_ERR_INVALID, "unknown key"),
    MFILE("bad-key-control.json", "a control byte in a key", FX_ERR_INVALID,
          "\\x07"),
    MFILE("bad-type-shape.json", "a string in a shape", FX_ERR_INVALID,
          "tensors[0].shape[1]", "(a string)"),
    MFILE("bad-type-rank.json", "a string rank", FX_ERR_INVALID,
          "ranks[0].rank", "got \"0\" (a string)"),
    MFILE("bad-type-dim.json", "a fractional dim", FX_ERR_INVALID,
          "ranks[0].source[0].dim", "got 0.5"),
    MFILE("bad-type-pieces.json", "an object for a piece list",
          FX_ERR_INVALID, "ranks[0].source", "expected an array of pieces"),
    MFILE("bad-null.json", "a null dim", FX_ERR_INVALID,
          "ranks[0].source[0].dim", "got null"),
    MFILE("bad-shape-zero.json", "a zero dimension", FX_ERR_INVALID,
          "tensors[0].shape[1]", "got 0"),
    MFILE("bad-shape-negative.json", "a negative dimension", FX_ERR_INVALID,
          "tensors[0].shape[0]", "-4096"),
    MFILE("bad-shape-huge.json", "a dimension past 64 bits", FX_ERR_INVALID,
          "tensors[0].shape[0]", "past 64 bits"),
    MFILE("bad-dtype.json", "unknown dtype", FX_ERR_INVALID,
          "unknown dtype \"bf17\""),
    MFILE("bad-dtype-nul.json", "NUL in a dtype", FX_ERR_INVALID,
          "tensors[0].dtype", "NUL"),
    MFILE("bad-name-nul.json", "NUL in a name", FX_ERR_INVALID,
          "tensors[1].name", "NUL"),
    MFILE("bad-piece-nul.json", "NUL in a piece's tensor", FX_ERR_INVALID,
          "ranks[0].source[0].tensor", "NUL"),
    MFILE("bad-name-control.json", "control bytes in a name",
          FX_ERR_INVALID, "tensor \"w\\x01\\x1b[2J\\n\" is already tensors[0]"),
    MFILE("bad-dup-tensor.json", "a tensor declared twice", FX_ERR_INVALID,
          "tensors[2].name", "already tensors[0]"),
    MFILE("bad-dup-rank.json", "a rank listed twice", FX_ERR_INVALID,
          "rank 0 is listed twice"),
    MFILE("bad-dup-piece.json", "two pieces of one tensor on one rank",
          FX_ERR_INVALID, "already has a source piece of \"w\""),
    MFILE("bad-negative-rank.json", "rank -1", FX_ERR_INVALID,
          "ranks[0].rank", "-1"),
    MFILE("bad-unknown-tensor.json", "a piece of an undeclared tensor",
          FX_ERR_INVALID, "unknown tensor \"wq\""),
    MFILE("bad-dim-range.json", "dim 2 of a 2-d tensor", FX_ERR_INVALID,
          "2 is out of range for \"w\" (2 dims)"),
    MFILE("bad-dim-without-range.json", "dim without end", FX_ERR_INVALID,
          "\"dim\" needs \"start\" and \"end\""),
    MFILE("bad-range-without-dim.json", "range without dim", FX_ERR_INVALID,
          "given without \"dim\""),
    MFILE("bad-start-end.json", "an empty range", FX_ERR_INVALID,
          "may not be empty"),
    MFILE("bad-end-past.json", "end past the shape", FX_ERR_INVALID,
          "4097 is past dim 0 of \"w\" (4096)"),
    MJOB("bad-rank-range.json", "rank 4 in a job of 4", FX_ERR_INVALID,
         "rank 4 (target piece of \"w\") is not in the job", "nranks is 4"),
    MJOB("bad-overlap.json", "partly overlapping sources", FX_ERR_INVALID,
         "overlap without being identical"),
    MJOB("bad-overlap-dims.json", "sources cut along different dims",
         FX_ERR_INVALID, "along dim 1", "overlap without being identical"),
    MJOB("bad-overlap-whole.json", "a whole source over a half",
         FX_ERR_INVALID, "overlap without being identical"),
    MJOB("bad-uncovered-partial.json", "target columns held by no source",
         FX_ERR_INVALID, "needed by target rank", "held by no source"),
    MJOB("bad-uncovered-gap.json", "a gap between sources", FX_ERR_INVALID,
         "[2, 4) along dim 0", "held by no source"),
    MJOB("bad-uncovered-none.json", "a tensor without a source",
         FX_ERR_INVALID, "tensor \"b\" has no source piece"),
    {"manifest", "ranks given different manifests (rank 3's `b` is `i8`), "
     "at set-up in a job of 4", FX_ERR_INVALID,
     {"rank 3 holds a different manifest than rank 0",
      "tensors[1] differs in its dtype: rank 0 has \"b\" u8 [4096], "
      "rank 3 \"b\" i8 [4096]"}, run_job_setup, "other", NULL, 1},
    {"manifest", "rank 3 given layout rules that differ from the others' "
     "only where a place's `by` meets the next rule's pattern (`layers` + "
     "`x*`, `layersx` + `*`), at set-up in a job of 4", FX_ERR_INVALID,
     {"rank 3 holds a different manifest than rank 0",
      "tensors[0] differs in its rules: rank 0 has "
      "\"a.layers.0.layersx.1.w\" f32 [4], sources rule 0 \"a*\" place pp "
      "by \"layers\" of 2", "rank 3 \"a.layers.0.layersx.1.w\" f32 [4], "
      "sources rule 0 \"a*\" place pp by \"layersx\" of 2"},
     run_job_setup, "collide", NULL, 1},
    {"manifest", "rank 3 given a manifest of 3,000 tensors whose 2,501st "
     "has another target piece, at set-up in a job of 4", FX_ERR_INVALID,
     {"rank 3 holds a different manifest than rank 0",
      "tensors[2500] \"t.2500\" u8 [4] differs in its pieces: its piece 1 "
      "is (rank 1 target, the whole tensor) on rank 0, (rank 1 target, "
      "[0, 2) along dim 0) on rank 3"}, run_job_setup, "deep", NULL, 1},
    {"manifest", "rank 3 given a third tensor after the others', at set-up "
     "in a job of 4", FX_ERR_INVALID,
     {"rank 3 holds a different manifest than rank 0",
      "rank 0 has 2 tensors, rank 3 3; the first extra is tensors[2] \"x\" "
      "f32 [4] on rank 3"}, run_job_setup, "extra", NULL, 1},

    BLOB("a blob cut 3 bytes short", run_blob_len, "cut", NULL, FX_ERR_BLOB,
         "blob of rank 1 is truncated or corrupt"),
    BLOB("a blob one byte too long", run_blob_len, "long", NULL, FX_ERR_BLOB,
         "truncated or corrupt"),
    BLOB("7 bytes", run_blob_len, "short", NULL, FX_ERR_BLOB,
         "shorter than a fabxfer blob header"),
    BLOB("NULL, 0 bytes", run_blob_len, "null", NULL, FX_ERR_BLOB,
         "blob of 0 bytes"),
    BLOB("bad magic", run_blob_field, "magic", "0x12345678", FX_ERR_BLOB,
         "not a fabxfer blob", "0x12345678"),
    BLOB("from fabxfer 0.0.9", run_blob_field, "version", "9", FX_ERR_BLOB,
         "comes from fabxfer 0.0.9"),
    BLOB("from a `shm` context into a `tcp;ofi_rxm` one", run_blob_foreign,
         "shm", NULL, FX_ERR_BLOB, "rank 1 offers \"shm\"",
         "offers \"tcp;ofi_rxm\": no path in common"),
    BLOB("from a context with `FABXFER_NOTIFY=message`", run_blob_foreign,
         "message", NULL, FX_ERR_BLOB, "notifies by message",
         "set FABXFER_NOTIFY alike"),
    BLOB("the notification mode field set to 7", run_blob_field, "notify",
         "7", FX_ERR_BLOB, "notifies by"),
    BLOB("rank 5 in a job of 2", run_blob_field, "rank", "5", FX_ERR_BLOB,
         "blob of rank 5, outside this job's 2 ranks"),
    BLOB("rank -1", run_blob_field, "rank", "-1", FX_ERR_BLOB,
         "blob of rank -1, outside"),
    BLOB("rank 1 of 2 into a job of 1", run_blob_job, "1", NULL,
         FX_ERR_BLOB, "outside this job's 1 ranks"),

    BLOB("2 rails claimed, the records of 1 given", run_blob_field,
         "nrails", "2", FX_ERR_BLOB, "truncated or corrupt"),
    BLOB("addresses' room 0x10000", run_blob_field, "addr_room", "0x10000",
         FX_ERR_BLOB, "truncated or corrupt", "1 rails"),
    BLOB("region count 0xffffffff", run_blob_field, "nregions",
         "0xffffffff", FX_ERR_BLOB, "truncated or corrupt",
         "4294967295 regions"),
    BLOB("address length 0x10000000", run_blob_field, "addr_len",
         "0x10000000", FX_ERR_BLOB, "truncated or corrupt"),
    BLOB("key length 4096", run_blob_field, "key_len", "4096", FX_ERR_BLOB,
         "truncated or corrupt"),
    BLOB("region 0's record says region 5", run_blob_region_id, NULL, NULL,
         FX_ERR_BLOB, "lists region 5 at position 0"),
    BLOB("secret token zero", run_blob_token0, NULL, NULL, FX_ERR_BLOB,
         "has no secret token"),
    BLOB("rank 1 known, then another context's blob for rank 1",
         run_blob_reimport, NULL, NULL, FX_ERR_BLOB,
         "rank 1 is already known"),

    FILE_("manifest path is a FIFO", run_manifest_path, "fifo",
          FX_ERR_INVALID, "a FIFO"),
    FILE_("manifest path is a symlink to a FIFO", run_manifest_path,
          "symlink-fifo", FX_ERR_INVALID, "a FIFO"),
    FILE_("manifest path is a folder", run_manifest_path, "dir",
          FX_ERR_INVALID, "a folder"),
    FILE_("manifest path is `/dev/zero`", run_manifest_path, "devzero",
          FX_ERR_INVALID, "/dev/zero", "character device"),
    FILE_("manifest path does not exist", run_manifest_path, "missing",
          FX_ERR_SYSTEM, "No such file or directory"),
    FILE_("manifest of 3 GiB (sparse)", run_manifest_path, "huge",
          FX_ERR_INVALID, "2 GiB"),
    FILE_("rendezvous folder of mode 0777", run_rdv_folder, "0777",
          FX_ERR_BOOTSTRAP, "has mode 0777", "fabxfer-run makes it 0700"),
    FILE_("rendezvous folder of mode 0720", run_rdv_folder, "0720",
          FX_ERR_BOOTSTRAP, "has mode 0720"),
    FILE_("rendezvous folder is a symlink", run_rdv_folder, "symlink",
          FX_ERR_BOOTSTRAP, "is not a folder (or is a symbolic link)"),
    FILE_("rendezvous folder is a file", run_rdv_folder, "file",
          FX_ERR_BOOTSTRAP, "is not a folder"),
    FILE_("rendezvous folder does not exist", run_rdv_folder, "missing",
          FX_ERR_BOOTSTRAP, "No such file or directory"),
    FILE_("a peer's fence marker is a symlink", run_rdv_file,
          "fence-symlink", FX_ERR_BOOTSTRAP, "fence.0.1 is a symbolic link"),
    FILE_("a peer's fence marker is a FIFO", run_rdv_file, "fence-fifo",
          FX_ERR_BOOTSTRAP, "fence.0.1 is a FIFO"),
    FILE_("a peer's blob file is a folder", run_rdv_file, "blob-dir",
          FX_ERR_BOOTSTRAP, "kv.1.ag.0 is a folder"),

    API("`fx_ctx_create(&opts, NULL)`", "create-null", FX_ERR_INVALID,
        "ctx is NULL"),
    API("options not from `fx_ctx_opts_init` (`struct_size` 0)",
        "create-opts", FX_ERR_INVALID, "fx_ctx_opts_init()"),
    API("bootstrap none, rank 2 of 2", "create-rank", FX_ERR_INVALID,
        "rank and size; got rank 2, size 2"),
    API("`opts.timeout_ms` 86400001", "create-timeout", FX_ERR_INVALID,
        "timeout_ms=86400001", "86400000"),
    API("`opts.bootstrap` \"carrier-pigeon\"", "create-boot", FX_ERR_INVALID,
        "carrier-pigeon"),
    OPTS("`opts.struct_size` past this library's struct", "size-big", NULL,
         FX_ERR_INVALID, "struct_size", "does not know"),
    OPTS("`opts.struct_size` between two releases' sizes", "size-between",
         NULL, FX_ERR_INVALID, "struct_size", "fx_ctx_opts_init"),
    OPTS("`opts.log_level` 9", "log-level", NULL, FX_ERR_INVALID,
         "log_level=9", "FX_LOG_DEBUG"),
    OPTS("`opts.bucket_size` 1024", "bucket-size", NULL, FX_ERR_INVALID,
         "fx_ctx_opts_t.bucket_size=1024", "FABXFER_BUCKET_SIZE"),
    OPTS("`opts.bucket_depth` 99", "bucket-depth", NULL, FX_ERR_INVALID,
         "fx_ctx_opts_t.bucket_depth=99", "2 to 16"),
    OPTS("`opts.notify` \"pigeon\"", "notify", NULL, FX_ERR_INVALID,
         "fx_ctx_opts_t.notify=\"pigeon\"", "writedata or message"),
    OPTS("`opts.gpu_path` \"sideways\"", "gpu-path", NULL, FX_ERR_INVALID,
         "fx_ctx_opts_t.gpu_path=\"sideways\"", "direct, staged or auto"),
    OPTS("`opts.rails` \"auto:x\"", "rails", NULL, FX_ERR_INVALID,
         "fx_ctx_opts_t.rails=\"auto:x\""),
    OPTS("`opts.timeout_ms` -5", "timeout-neg", NULL, FX_ERR_INVALID,
         "timeout_ms=-5"),
    OPTS("an exchange with an allgather and no barrier", "half-exchange",
         NULL, FX_ERR_INVALID, "exchange_barrier", "go together"),
    OPTS("an exchange and `opts.bootstrap` \"local\"", "exchange-local",
         NULL, FX_ERR_INVALID, "bootstrap \"local\" and an exchange"),
    OPTS("an exchange with rank 3 of 1", "exchange-rank", NULL,
         FX_ERR_INVALID, "rank 3, size 1"),
    OPTS("the exchange's allgather returns 7", "exchange-bad", "7",
         FX_ERR_BOOTSTRAP, "allgather 0 (host names) over exchange",
         "the application's allgather returned 7"),
    OPTS("the exchange's allgather returns 0 but gives no bytes",
         "exchange-bad", "none", FX_ERR_BOOTSTRAP, "(host names)",
         "without giving rank 0's bytes"),
    OPTS("the exchange's allgather gives this rank other bytes",
         "exchange-bad", "mix", FX_ERR_BOOTSTRAP, "(host names)",
         "mixes ranks up"),
    OPTS("`fx_gather_set` on a handle its allgather callback returned",
         "exchange-bad", "late", FX_ERR_STATE, "fx_gather_set: called "
         "after the allgather callback returned"),
    API("`opts.provider` \"nosuch\"", "create-prov", FX_ERR_NO_PROVIDER,
        "\"nosuch\" is not available"),
    API("`fx_region_register` of NULL", "region-null", FX_ERR_INVALID,
        "empty region"),
    API("`fx_region_register` of 0 bytes", "region-len0", FX_ERR_INVALID,
        "len=0"),
    API("region flags 0x40", "region-flags", FX_ERR_INVALID, "flags 0x40"),
    API("region flags 0", "region-flags0", FX_ERR_INVALID, "flags 0x0"),
    API("memory kind 7", "region-kind", FX_ERR_INVALID,
        "unknown memory kind 7"),
    API("`fx_ctx_exchange` without a bootstrap or exchange", "exchange-none",
        FX_ERR_STATE, "fx_ctx_exchange needs a collective channel"),
    API("`fx_barrier` without a bootstrap or exchange", "barrier-none",
        FX_ERR_STATE, "fx_barrier needs a collective channel"),
    API("`fx_allgather` without a bootstrap or exchange", "allgather-none",
        FX_ERR_STATE, "fx_allgather needs a collective channel"),
    API("`fx_ctx_rail` 5 of 1", "rail", FX_ERR_RANGE,
        "rail 5; this context has 1"),
    API("`fx_ctx_rail` -1", "rail-neg", FX_ERR_RANGE, "rail -1"),
    API("`fx_blob_export` to NULL", "export-null", FX_ERR_INVALID,
        "NULL argument"),
    API("`fx_blob_import` on a NULL context", "blob-import-null",
        FX_ERR_INVALID, "ctx is NULL"),
    API("`fx_write` to a rank whose blob was never imported", "write-noblob",
        FX_ERR_STATE, "no blob from rank 1"),
    API("`fx_write` from another context's region", "write-foreign",
        FX_ERR_INVALID, "another context"),
    API("`fx_write` from a NULL region", "write-null", FX_ERR_INVALID,
        "source region is NULL"),
    API("`fx_notify` to rank 9 of 2", "notify-peer", FX_ERR_INVALID,
        "peer rank 9 outside [0, 2)"),
    API("`fx_wait_notify` on rank -1", "wait-peer", FX_ERR_INVALID,
        "peer rank -1 outside [0, 2)"),
    API("`fx_manifest_load(NULL)`", "load-null", FX_ERR_INVALID,
        "NULL argument"),
    API("`fx_manifest_add_tensor` of 9 dims", "manifest-ndim",
        FX_ERR_INVALID, "9 dimensions, expected 0 to 8"),
    API("`fx_manifest_add_tensor` of -1 dims", "manifest-ndim-neg",
        FX_ERR_INVALID, "-1 dimensions, expected 0 to 8"),
    API("`fx_manifest_add_tensor` of 2 dims, shape NULL", "manifest-noshape",
        FX_ERR_INVALID, "no shape"),
    API("`fx_manifest_add_tensor` of a name already there", "manifest-dup",
        FX_ERR_INVALID, "declared twice"),
    API("`fx_manifest_add_piece` with role 7", "manifest-role",
        FX_ERR_INVALID, "role 7"),
    API("`fx_manifest_add_piece` for rank -1", "manifest-rank",
        FX_ERR_INVALID, "ranks are non-negative"),
    API("`fx_manifest_add_piece` along dim 3 of 2", "manifest-dim",
        FX_ERR_INVALID, "dim 3 is out of range"),
    API("`fx_manifest_add_piece` of [32, 16)", "manifest-range",
        FX_ERR_INVALID, "start 32 is not below end 16"),
    API("`fx_manifest_piece_bytes` of a piece the rank lacks",
        "manifest-bytes", FX_ERR_INVALID, "rank 1 holds no target piece"),
    API("`fx_session_create(NULL, NULL, &s)`", "session-create-null",
        FX_ERR_INVALID, "NULL context"),
    API("`fx_session_setup(NULL)`", "session-setup-null", FX_ERR_INVALID,
        "NULL session"),
    API("`fx_session_push(NULL, 1)`", "push-null", FX_ERR_INVALID,
        "NULL session"),
    API("`fx_session_setup` without a bootstrap or exchange",
        "session-setup-none", FX_ERR_STATE,
        "give fx_ctx_opts_t an exchange"),
    API("`fx_session_push` before set-up", "session-push-early",
        FX_ERR_STATE, "not set up"),
    API("`fx_session_wait` before set-up", "session-wait-early",
        FX_ERR_STATE, "not set up"),
    API("`fx_session_bind` of an unknown tensor", "session-bind-unknown",
        FX_ERR_INVALID, "no tensor \"nope\""),
    API("`fx_session_bind` of a piece the rank does not hold",
        "session-bind-role", FX_ERR_INVALID, "rank 0 holds no target piece"),
    API("`fx_session_bind` past the region's end", "session-bind-fit",
        FX_ERR_RANGE, "do not fit"),
    API("`fx_session_bind` at offset `SIZE_MAX`", "session-bind-past",
        FX_ERR_RANGE, "do not fit"),
    API("`fx_session_bind` of a source to a target-only region",
        "session-bind-flags", FX_ERR_INVALID, "is not a source region"),
    API("`fx_session_bind` of a NULL tensor", "session-bind-null",
        FX_ERR_INVALID, "NULL argument"),
    API("`fx_session_refuse` with `FX_OK` for a status",
        "session-refuse-ok", FX_ERR_INVALID,
        "fx_session_refuse: status is not an error"),
    JOB("`fx_session_setup` with nothing bound (job of 4)", run_job_setup,
        "unbound", NULL, FX_ERR_STATE, "never bound its"),
    JOB("target pieces bound to overlapping bytes (job of 4; rank 1)",
        run_job_setup, "overlap", "1", FX_ERR_INVALID,
        "to overlapping bytes of region 0"),
    JOB("the same, as rank 0 sees it", run_job_setup, "overlap", "0",
        FX_ERR_INVALID, "refused the session set-up",
        "overlapping bytes"),
    JOB("`fx_session_push` of version 1 again (targets unchanged)",
        run_job_session, "repush", NULL, FX_ERR_INVALID,
        "version 1 is not newer than 1"),
    JOB("`fx_session_wait` for version 1 again", run_job_session, "rewait",
        NULL, FX_ERR_INVALID, "the last waited for"),
    JOB("`fx_session_push` on a rank holding only target pieces",
        run_job_session, "role-push", NULL, FX_ERR_STATE,
        "fx_session_push: rank 1 holds no source piece of this session "
        "(it is a target only)"),
    JOB("`fx_session_wait` on a rank holding only source pieces",
        run_job_session, "role-wait", NULL, FX_ERR_STATE,
        "fx_session_wait: rank 0 holds no target piece of this session "
        "(it is a source only)"),
    JOB("`fx_session_apply` on a rank holding only source pieces",
        run_job_session, "role-apply", NULL, FX_ERR_STATE,
        "fx_session_apply: rank 0 holds no target piece"),
    JOB("`fx_session_received` on a rank holding only source pieces",
        run_job_session, "role-received", NULL, FX_ERR_STATE,
        "fx_session_received: rank 0 holds no target piece"),
    JOB("`fx_session_release` of a version not waited for (live target)",
        run_job_session, "release-unwaited", NULL, FX_ERR_INVALID,
        "fx_session_release(2): not waited for yet",
        "the last version fx_session_wait returned is 1"),
    JOB("`fx_session_release` on a rank holding only source pieces",
        run_job_session, "release-source", NULL, FX_ERR_STATE,
        "fx_session_release: rank 0 holds no target piece"),
    JOB("`fx_session_bind` after set-up", run_job_session, "bind-late",
        NULL, FX_ERR_STATE, "after fx_session_setup"),
    JOB("`fx_session_setup` twice", run_job_session, "setup-twice", NULL,
        FX_ERR_STATE, "called twice"),
    JOB("`fx_write` of 11 bytes 10 before the end of rank 1's region "
        "(targets unchanged)", run_job_write, "end", NULL, FX_ERR_RANGE,
        "falls outside its 8192 bytes", "nothing was posted"),
    JOB("`fx_write` at offset 2^64 - 6 (targets unchanged)", run_job_write,
        "wrap", NULL, FX_ERR_RANGE, "nothing was posted"),
    JOB("`fx_write` to target region 3 of 1 (targets unchanged)",
        run_job_write, "region", NULL, FX_ERR_RANGE, "no target region 3"),
    JOB("`fx_write` from past the source region's end (targets unchanged)",
        run_job_write, "source", NULL, FX_ERR_RANGE,
        "8192-byte source region", "nothing was posted"),
    JOB("`fx_write` to rank 7 of 4 (targets unchanged)", run_job_write,
        "peer", NULL, FX_ERR_INVALID, "peer rank 7 outside [0, 4)"),
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* ---- checking and printing ------------------------------------------- */

static int check_case(size_t i)
{
    const struct bad *c = &cases[i];
    char msg[MSG_MAX];
    fx_status_t st;

    msg[0] = '\0';
    one_checker = 0;
    st = c->run(c, msg);
    if (st == NOT_HERE)
        return 0;
    if (st != c->want) {
        fprintf(stderr, "FAIL row %zu (%s, %s): expected %s, got %s (%s)\n",
                i + 1, c->kind, c->input, status_name(c->want),
                status_name(st), st == FX_OK ? "accepted" : msg);
        return 1;
    }
    for (int k = 0; k < 3 && c->frag[k] != NULL; k++)
        if (strstr(msg, c->frag[k]) == NULL) {
            fprintf(stderr, "FAIL row %zu (%s, %s): message \"%s\" lacks "
                    "\"%s\"\n", i + 1, c->kind, c->input, msg, c->frag[k]);
            return 1;
        }
    if (!c->job || J.rank == 0 || one_checker)
        printf("ok   %3zu %-8s %s: %s\n", i + 1, c->kind, c->input, msg);
    return 0;
}

/* A fragment in backticks: what it holds may not break the table. */
static void put_code(FILE *f, const char *s)
{
    if (strchr(s, '`') != NULL || strchr(s, '|') != NULL ||
        strchr(s, '\n') != NULL)
        ITEST_FAIL("\"%s\" cannot stand in a table cell", s);
    fprintf(f, "`%s`", s);
}

static void markdown(FILE *f)
{
    static const char *const kinds[] = {"env", "manifest", "blob", "file",
                                        "api"};
    int count[5] = {0};

    for (size_t i = 0; i < NCASES; i++)
        for (int k = 0; k < 5; k++)
            count[k] += strcmp(cases[i].kind, kinds[k]) == 0;
    fprintf(f,
        "# Refused inputs\n"
        "\n"
        "Inputs that fabxfer refuses as it is built today, each with the\n"
        "status it returns and fragments of the message that\n"
        "`fx_last_error()` then holds (every fragment is in the message).\n"
        "Every row is checked by `tests/integration/test_badinput` (run by\n"
        "`make check`): it feeds the input, compares the status and each\n"
        "fragment, and where bytes could have moved (writes, pushes, blobs)\n"
        "checks that none did. Rows of kind *(job)* run in a job of %d\n"
        "ranks that the test launches on itself (local bootstrap); the\n"
        "others in one process, with bootstrap `none`; both over\n"
        "`tcp;ofi_rxm`.\n"
        "\n"
        "This file is generated: edit the cases in the test, then\n"
        "\n"
        "    tests/integration/test_badinput --markdown > docs/bad-inputs.md\n"
        "\n"
        "The test fails when this file differs from what it prints.\n"
        "\n"
        "%zu rows: %d env (`FABXFER_*` variables, given to `fx_ctx_create`),\n"
        "%d manifest (`fx_manifest_parse`, `fx_manifest_load` of\n"
        "`tests/data/manifests/`, or `fx_session_setup`), %d blob\n"
        "(`fx_blob_import` of rank 1's blob, damaged), %d file (paths and\n"
        "the local rendezvous folder) and %d api (calls misused).\n"
        "\n"
        "| # | kind | input | status | message |\n"
        "|---|------|-------|--------|---------|\n",
        JOB_RANKS, NCASES, count[0], count[1], count[2], count[3], count[4]);
    for (size_t i = 0; i < NCASES; i++) {
        const struct bad *c = &cases[i];

        if (strchr(c->input, '|') != NULL)
            ITEST_FAIL("row %zu: \"%s\" cannot stand in a table cell", i + 1,
                       c->input);
        fprintf(f, "| %zu | %s%s | %s | `%s` | ", i + 1, c->kind,
                c->job ? " (job)" : "", c->input, status_name(c->want));
        for (int k = 0; k < 3 && c->frag[k] != NULL; k++) {
            if (k > 0)
                fputs(", ", f);
            put_code(f, c->frag[k]);
        }
        fputs(" |\n", f);
    }
}

/* docs/bad-inputs.md must be what markdown() prints. */
static int check_doc(void)
{
    char path[512], *mine = NULL, *theirs;
    size_t mine_len = 0, theirs_len;
    FILE *f = open_memstream(&mine, &mine_len);
    long n;

    markdown(f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/bad-inputs.md", FX_TEST_DOCS);
    f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "FAIL %s: %s\n", path, strerror(errno));
        free(mine);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    theirs = malloc((size_t)n + 1);
    theirs_len = fread(theirs, 1, (size_t)n, f);
    fclose(f);
    if (theirs_len != mine_len || memcmp(theirs, mine, mine_len) != 0) {
        size_t at = 0;

        while (at < mine_len && at < theirs_len && mine[at] == theirs[at])
            at++;
        fprintf(stderr, "FAIL %s differs from the cases (first at byte %zu);"
                " regenerate it: tests/integration/test_badinput --markdown "
                "> docs/bad-inputs.md\n", path, at);
        free(theirs);
        free(mine);
        return 1;
    }
    printf("ok   %s matches the %zu cases\n", path, NCASES);
    free(theirs);
    free(mine);
    return 0;
}

/* Every FABXFER_* variable of the table has an env row; a variable added
 * since is named (a warning: the row belongs to whoever adds it). */
static void check_env_rows(void)
{
    const char *name;

    for (int i = 0; fx_config_describe(i, &name, NULL, NULL) == FX_OK; i++) {
        size_t n = strlen(name), k;

        if (strcmp(name, "FABXFER_LIBRARY") == 0)
            continue; /* the Python package's, never the library's */

        for (k = 0; k < NCASES; k++)
            if (strcmp(cases[k].kind, "env") == 0 && cases[k].a != NULL &&
                strncmp(cases[k].a, name, n) == 0 && cases[k].a[n] == '=')
                break;
        if (k == NCASES)
            printf("WARN %s has no env row in the table: add one (a value "
                   "fx_ctx_create refuses)\n", name);
    }
}

/* ---- ranks and main ---------------------------------------------------- */

static int rank_main(void)
{
    int failed = 0, checked = 0;

    ITEST_OK(NULL, fx_ctx_create(NULL, &J.ctx));
    J.rank = fx_ctx_rank(J.ctx);
    J.buf = malloc(JOB_BYTES);
    memset(J.buf, 0xEE, JOB_BYTES);
    ITEST_OK(J.ctx, fx_region_register(J.ctx, J.buf, JOB_BYTES,
                                       J.rank == 0 ? FX_REGION_SOURCE
                                                   : FX_REGION_TARGET,
                                       &J.reg));
    for (size_t i = 0; i < NCASES; i++)
        if (cases[i].job) {
            failed += check_case(i);
            checked++;
        }
    if (failed == 0)
        ITEST_OK(J.ctx, fx_barrier(J.ctx));
    itest_close(J.s, J.m, J.ctx);
    free(J.buf);
    if (J.rank == 0)
        printf("rank 0: %d job rows, %d failed\n", checked, failed);
    return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
    int failed = 0, solo = 0, job = 0;
    double t0 = clock_now(), t1;
    fx_status_t st;

    if (argc > 1 && strcmp(argv[1], "--markdown") == 0) {
        markdown(stdout);
        return 0;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (itest_rank() >= 0)
        return rank_main();
    clear_env();
    if (mkdtemp(tmp_dir) == NULL)
        ITEST_FAIL("mkdtemp: %s", strerror(errno));
    for (size_t i = 0; i < NCASES; i++) {
        if (cases[i].job) {
            job++;
            continue;
        }
        failed += check_case(i);
        solo++;
    }
    blob_fixture_free();
    {
        char cmd[600];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "warning: could not remove %s\n", tmp_dir);
    }
    setenv("FABXFER_PROVIDER", PROV, 1);
    setenv("FABXFER_TIMEOUT_MS", "10000", 1);
    fflush(stdout);
    t1 = clock_now();
    st = itest_launch(JOB_RANKS, 120000);
    clear_env();
    if (st != FX_OK) {
        fprintf(stderr, "FAIL the job rows (%d): %s\n", job, fx_strerror(st));
        failed += job;
    }
    failed += check_doc();
    check_env_rows();
    printf("%zu rows (%d in one process, %.1f s; %d in a job of %d, %.1f s): "
           "%s\n", NCASES, solo, t1 - t0, job, JOB_RANKS, clock_now() - t1,
           failed ? "FAILED" : "all refused as documented");
    return failed ? 1 : 0;
}
