/*
 * Fuzzes the FABXFER_* environment (src/util/cfg.c and its callers).
 * An input is lines of NAME=VALUE; names of the table (fx_config_describe)
 * are set, every other variable of the table is unset. Then each variable
 * is parsed as the library parses it: the integers and byte counts with
 * the ranges their callers give, the bootstrap by boot_open. A line
 * "#open" also makes a context with fx_ctx_create, which parses the rest
 * (provider, notification, GPU path, rails), over bootstrap none unless
 * the input names auto without a rendezvous folder. Opening a fabric takes
 * tens of ms where parsing takes microseconds, so only inputs that ask for
 * it do.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "boot/boot.h"
#include "fabric/fabric.h"
#include "fuzz.h"
#include "util/cfg.h"
#include "util/error.h"

/* The integers, with the ranges of the library's calls (ctx.c, boot.c,
 * local.c); the table's own bounds apply on top. */
static const struct {
    enum cfg_key key;
    long min, max;
} longs[] = {
    {CFG_TIMEOUT_MS, 1, INT_MAX},   {CFG_SPIN_US, -1, 1000000},
    {CFG_IOV_MAX, 0, FAB_IOV_MAX},  {CFG_BUCKET_DEPTH, 2, 16},
    {CFG_PACK_THREAD, -1, 1},       {CFG_LOCAL_SIZE, 1, INT_MAX},
};
static const enum cfg_key sizes[] = {CFG_CHUNK_SIZE, CFG_BUCKET_SIZE,
                                     CFG_PACK_MAX};

static void clear_env(void)
{
    const char *name;

    for (int i = 0; fx_config_describe(i, &name, NULL, NULL) == FX_OK; i++)
        unsetenv(name);
}

/* NAME=VALUE on one line: set it when NAME is in the table. */
static void set_line(char *line, int *want_ctx)
{
    char *eq = strchr(line, '=');
    const char *name;

    if (strcmp(line, "#open") == 0)
        *want_ctx = 1;
    if (eq == NULL)
        return;
    *eq = '\0';
    for (int i = 0; fx_config_describe(i, &name, NULL, NULL) == FX_OK; i++)
        if (strcmp(line, name) == 0) {
            setenv(name, eq + 1, 1);
            return;
        }
}

/* Every number as the library reads it; what is accepted must lie within
 * the table's bounds (cfg_bounds) and the caller's. */
static void parse_numbers(void)
{
    long long min, max;
    char text[128];
    long n, size;
    size_t z;

    for (size_t i = 0; i < sizeof(longs) / sizeof(longs[0]); i++) {
        enum cfg_key k = longs[i].key;

        cfg_bounds(k, &min, &max);
        if (cfg_long(k, longs[i].min, longs[i].max, &n) == FX_OK)
            FUZZ_ASSERT(n >= longs[i].min && n <= longs[i].max &&
                            (min == max || (n >= min && n <= max)),
                        "%s=\"%s\" gave %ld", cfg_name(k), cfg_str(k), n);
        else
            FUZZ_ASSERT(err_last()[0] != '\0', "%s: no message",
                        cfg_name(k));
        if (cfg_int(k, &n) == FX_OK)
            FUZZ_ASSERT(min == max || (n >= min && n <= max),
                        "%s=\"%s\" gave %ld outside [%lld, %lld]",
                        cfg_name(k), cfg_str(k), n, min, max);
    }
    if (cfg_long(CFG_LOCAL_SIZE, 1, INT_MAX, &size) == FX_OK)
        (void)cfg_long(CFG_LOCAL_RANK, 0, size - 1, &n);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        enum cfg_key k = sizes[i];

        cfg_bounds(k, &min, &max);
        if (cfg_size(k, &z) == FX_OK)
            FUZZ_ASSERT(z == 0 || ((long long)z >= min && (long long)z <= max),
                        "%s=\"%s\" gave %zu outside [%lld, %lld]",
                        cfg_name(k), cfg_str(k), z, min, max);
    }
    for (int k = 0; k < CFG_COUNT; k++) {
        (void)cfg_parse_size(cfg_str((enum cfg_key)k), &z);
        FUZZ_ASSERT(cfg_bounds_text(k, text, sizeof(text)) <
                        (int)sizeof(text), "%s's bounds do not fit %zu bytes",
                    cfg_name((enum cfg_key)k), sizeof(text));
    }
}

static int is(enum cfg_key key, const char *value)
{
    const char *v = cfg_str(key);

    return v != NULL && strcmp(v, value) == 0;
}

static void open_all(int want_ctx)
{
    fx_ctx_opts_t o;
    struct boot *b = NULL;
    fx_ctx_t *ctx = NULL;

    /* PMIx_Init would look for a server: not a parser's business. */
    if (is(CFG_BOOTSTRAP, "pmix"))
        return;
    if (boot_open(NULL, 0, &b) == FX_OK)
        boot_close(b);
    if (!want_ctx)
        return;
    fx_ctx_opts_init(&o);
    o.rank = 0;
    o.size = 2;
    o.single_host = 0;
    /* local opens a rendezvous only fabxfer-run makes: keep it to none. */
    if (!is(CFG_BOOTSTRAP, "auto") && !is(CFG_BOOTSTRAP, "none"))
        o.bootstrap = "none";
    if (is(CFG_BOOTSTRAP, "auto") && cfg_str(CFG_LOCAL_DIR) != NULL)
        o.bootstrap = "none";
    if (fx_ctx_create(&o, &ctx) == FX_OK)
        fx_ctx_destroy(ctx);
    else
        FUZZ_ASSERT(fx_last_error(NULL)[0] != '\0', "fx_ctx_create failed "
                    "with no message");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), *line, *save = NULL;
    int want_ctx = 0;

    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    clear_env();
    for (line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save))
        set_line(line, &want_ctx);
    parse_numbers();
    open_all(want_ctx);
    free(text);
    return 0;
}
