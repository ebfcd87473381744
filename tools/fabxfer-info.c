/*
 * fabxfer-info: what fabxfer would do on this node. `-e` prints every
 * FABXFER_* variable with its default and documentation (the README's
 * table comes from here); without it, for each provider fabxfer knows:
 * its attributes under fabxfer's hints, the notification mechanism, the
 * GPU path (with a real registration of CUDA memory where a GPU is
 * present), what it does not isolate between processes, and a verdict. --json gives the same as one JSON object.
 */
#include <stdio.h>
#include <string.h>

#include <fabxfer.h>

#include "cli.h"
#include "fabric/fabric.h"
#include "mem/mem.h"
#include "util/cfg.h"

static const char *const providers[] = {
    "efa", "cxi", "verbs;ofi_rxm", "shm", "tcp;ofi_rxm", "tcp",
};

static void usage(FILE *out)
{
    fprintf(out,
"usage: fabxfer-info [--json] [-e [--markdown]] [-h] [-V]\n"
"  (no option)   for each provider fabxfer knows: whether this node offers\n"
"                it, its domains (for FABXFER_RAILS), RMA, remote CQ data,\n"
"                largest message, mr_mode, FI_HMEM\n"
"                (and, with a GPU, whether it registers CUDA memory), the\n"
"                notification mechanism and GPU path fabxfer takes, what\n"
"                it does not isolate (shm), and a verdict; then fabxfer's\n"
"                default pick\n"
"  --json        the same as one JSON object\n"
"  -e, --env     every FABXFER_* variable, its default and what it does\n"
"  --markdown    with -e: as a Markdown table (the README's)\n"
"  -h, --help    this text\n"
"  -V, --version fabxfer's version\n");
}

/* Every variable with its default, the bounds a number must keep (values
 * outside are refused by fx_ctx_create, naming them) and its doc. */
static void print_env(int markdown)
{
    const char *name, *def, *doc;
    char bounds[64];

    if (markdown)
        printf("| variable | default | bounds | meaning |\n"
               "|---|---|---|---|\n");
    for (int i = 0; fx_config_describe(i, &name, &def, &doc) == FX_OK; i++) {
        cfg_bounds_text(i, bounds, sizeof(bounds));
        if (markdown)
            printf("| `%s` | %s%s%s | %s | %s |\n", name, def[0] ? "`" : "",
                   def[0] ? def : "(unset)", def[0] ? "`" : "",
                   bounds[0] ? bounds : "", doc);
        else
            printf("%-20s default: %s%s%s\n    %s\n", name,
                   def[0] ? def : "(unset)", bounds[0] ? ", bounds: " : "",
                   bounds, doc);
    }
}

/* JSON string: the texts here are provider and libfabric messages. */
static void json_str(const char *key, const char *v, int last)
{
    printf("\"%s\": \"", key);
    for (; *v; v++) {
        if (*v == '"' || *v == '\\')
            putchar('\\');
        if ((unsigned char)*v >= 0x20)
            putchar(*v);
    }
    printf("\"%s", last ? "" : ", ");
}

/* direct / staged / unusable, and why: what FABXFER_GPU_PATH=auto would
 * take, which asks only GPUDirect NICs for FI_HMEM. */
static const char *verdict(const struct fab_desc *d, char *why, size_t len)
{
    if (!d->usable) {
        snprintf(why, len, "%s", d->why);
        return "unusable";
    }
    snprintf(why, len, "%s", d->hmem_why);
    if (d->gpu_reg != 1)
        return "staged";
    if (fab_gpudirect_nic(d->prov))
        return "direct";
    snprintf(why, len, "%s; auto stages on %s, FABXFER_GPU_PATH=direct "
             "would use it", d->hmem_why, d->prov);
    return "staged";
}

static void show(const struct fab_desc *d, int json, int first)
{
    char why[1200];
    const char *v = verdict(d, why, sizeof(why));

    if (json) {
        printf("%s\n    {", first ? "" : ",");
        json_str("provider", d->prov, 0);
        printf("\"offered\": %s, \"rma\": %s, ", d->offered ? "true" : "false",
               d->rma ? "true" : "false");
        if (d->rma) {
            json_str("domain", d->domain, 0);
            json_str("domains", d->domains, 0);
            printf("\"cq_data_size\": %zu, \"max_msg_size\": %zu, "
                   "\"inject_size\": %zu, \"write_size\": %zu, "
                   "\"write_source_ranges\": %zu, "
                   "\"write_target_ranges\": %zu, ",
                   d->cq_data_size, d->max_msg_size, d->inject_size, d->chunk,
                   d->iov_limit, d->rma_iov_limit);
            json_str("mr_mode", d->mr_mode, 0);
            printf("\"hmem\": %s, \"cuda_registration\": %s, ",
                   d->hmem ? "true" : "false",
                   d->gpu_reg < 0 ? "null" : d->gpu_reg ? "true" : "false");
            json_str("hmem_detail", d->hmem_why, 0);
        }
        if (d->isolation[0] != '\0')
            json_str("isolation", d->isolation, 0);
        if (d->usable)
            json_str("notify", d->notify, 0);
        json_str("verdict", v, 0);
        json_str("reason", why, 1);
        printf("}");
        return;
    }
    printf("%s\n", d->prov);
    if (!d->rma) {
        printf("  verdict: unusable (%s)\n", why);
        return;
    }
    printf("  domain %s (all: %s), remote CQ data %zu B, max message %zu "
           "B, inject %zu B, mr_mode %s\n", d->domain, d->domains,
           d->cq_data_size, d->max_msg_size, d->inject_size, d->mr_mode);
    if (d->usable)
        printf("  notification: %s (%s); writes of up to %zu B, from up "
               "to %zu source ranges to %zu target ranges\n", d->notify,
               d->why, d->chunk, d->iov_limit, d->rma_iov_limit);
    printf("  FI_HMEM: %s: %s\n", d->hmem ? "yes" : "no", d->hmem_why);
    if (d->isolation[0] != '\0')
        printf("  isolation: %s\n", d->isolation);
    printf("  verdict: %s (%s)\n", v, why);
}

static int default_pick(int json)
{
    fx_ctx_opts_t o;
    fx_ctx_t *ctx;

    fx_ctx_opts_init(&o);
    o.bootstrap = "none";
    o.rank = 0;
    o.size = 1;
    o.single_host = 1;
    if (fx_ctx_create(&o, &ctx) != FX_OK) {
        if (json)
            json_str("default", "", 0), json_str("default_error",
                                                 fx_last_error(NULL), 1);
        else
            printf("default pick: none (%s)\n", fx_last_error(NULL));
        return -1;
    }
    if (json)
        json_str("default", fx_ctx_provider(ctx), 1);
    else if (cfg_str(CFG_PROVIDER) != NULL)
        printf("pick with %s=\"%s\": %s, notify by %s\n",
               cfg_name(CFG_PROVIDER), cfg_str(CFG_PROVIDER),
               fx_ctx_provider(ctx), fx_ctx_notify_mode(ctx));
    else
        printf("default pick for a single-host job (FABXFER_PROVIDER unset): "
               "%s, notify by %s\n", fx_ctx_provider(ctx),
               fx_ctx_notify_mode(ctx));
    /* A list: the paths it opened, which each pair chooses from. */
    for (int r = 0; !json && fx_ctx_rails(ctx) > 1 &&
                    r < fx_ctx_rails(ctx); r++) {
        fx_rail_info_t ri = {.struct_size = sizeof(ri)};

        if (fx_ctx_rail_info(ctx, r, &ri) == FX_OK)
            printf("  rail %d: %s, domain %s\n", r, ri.provider, ri.domain);
    }
    fx_ctx_destroy(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"env", no_argument, NULL, 'e'},
        {"markdown", no_argument, NULL, 'm'},
        {"json", no_argument, NULL, 'j'},
        {NULL, 0, NULL, 0},
    };
    const struct cli cl = {opts, "e", usage, "fabxfer-info"};
    int env = 0, markdown = 0, json = 0, c, ndev, rc;
    void *gpu = NULL;
    char gpu_why[600] = "", lf[32];
    const size_t gpu_len = 1 << 20;

    while ((c = cli_next(&cl, argc, argv)) != -1) {
        switch (c) {
        case 'e': env = 1; break;
        case 'm': markdown = 1; break;
        case 'j': json = 1; break;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    if (env) {
        print_env(markdown);
        return 0;
    }
    /* A GPU, if any, for a real registration on FI_HMEM entries. */
    ndev = mem_cuda_device_count();
    if (ndev == 0)
        snprintf(gpu_why, sizeof(gpu_why), "%s",
                 mem_cuda_init() == FX_OK ? "" : fx_last_error(NULL));
    else if (mem_dev_alloc(0, gpu_len, &gpu) != FX_OK)
        snprintf(gpu_why, sizeof(gpu_why), "%s", fx_last_error(NULL));
    fab_runtime_version(lf, sizeof(lf));
    if (json) {
        printf("{\"fabxfer\": \"%s\", \"libfabric\": \"%s\", "
               "\"cuda_built\": %s, \"gpus\": %d, ", fx_version_string(), lf,
               mem_cuda_built() ? "true" : "false", ndev);
        json_str("gpu_detail", gpu_why, 0);
        printf("\"providers\": [");
    } else {
        printf("fabxfer %s on libfabric %s, CUDA %s, %d GPU(s)%s%s%s\n",
               fx_version_string(), lf,
               mem_cuda_built() ? "built" : "not built", ndev,
               gpu_why[0] ? " (" : "", gpu_why, gpu_why[0] ? ")" : "");
    }
    for (size_t i = 0; i < sizeof(providers) / sizeof(providers[0]); i++) {
        struct fab_desc d;

        fab_describe(providers[i], gpu, gpu_len, 0, &d);
        show(&d, json, i == 0);
    }
    if (json)
        printf("\n  ], ");
    rc = default_pick(json);
    if (json)
        printf("}\n");
    mem_dev_free(gpu);
    return rc == 0 ? 0 : 1;
}
