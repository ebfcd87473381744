/*
 * fabxfer-info: what fabxfer would do on this node. `-e` prints every
 * FABXFER_* variable with its default and documentation (the README's
 * table comes from here); without it, for each provider fabxfer knows,
 * whether it opens and which notification mechanism it picks.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include <fabxfer.h>

static const char *const providers[] = {
    "efa", "cxi", "verbs;ofi_rxm", "shm", "tcp;ofi_rxm", "tcp",
};

static void usage(FILE *out)
{
    fprintf(out,
"usage: fabxfer-info [-e] [--markdown] [-h] [-V]\n"
"  (no option)   for each provider fabxfer knows: usable here or why not,\n"
"                and how targets are notified; then fabxfer's default pick\n"
"  -e, --env     every FABXFER_* variable, its default and what it does\n"
"  --markdown    with -e: as a Markdown table (the README's)\n"
"  -h, --help    this text\n"
"  -V, --version fabxfer's version\n");
}

static void print_env(int markdown)
{
    const char *name, *def, *doc;

    if (markdown)
        printf("| variable | default | meaning |\n|---|---|---|\n");
    for (int i = 0; fx_config_describe(i, &name, &def, &doc) == FX_OK; i++) {
        if (markdown)
            printf("| `%s` | %s%s%s | %s |\n", name, def[0] ? "`" : "",
                   def[0] ? def : "(unset)", def[0] ? "`" : "", doc);
        else
            printf("%-20s default: %s\n    %s\n", name,
                   def[0] ? def : "(unset)", doc);
    }
}

static int probe(const char *prov)
{
    fx_ctx_opts_t o;
    fx_ctx_t *ctx;

    fx_ctx_opts_init(&o);
    o.bootstrap = "none";
    o.provider = prov;
    o.rank = 0;
    o.size = 1;
    o.single_host = 1;
    if (fx_ctx_create(&o, &ctx) != FX_OK) {
        printf("%-14s unusable: %s\n", prov ? prov : "(default)",
               fx_last_error(NULL));
        return -1;
    }
    printf("%-14s usable: provider %s, notify by %s\n",
           prov ? prov : "(default)", fx_ctx_provider(ctx),
           fx_ctx_notify_mode(ctx));
    fx_ctx_destroy(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"env", no_argument, NULL, 'e'},
        {"markdown", no_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int env = 0, markdown = 0, c;

    while ((c = getopt_long(argc, argv, "ehV", opts, NULL)) != -1) {
        switch (c) {
        case 'e': env = 1; break;
        case 'm': markdown = 1; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("fabxfer-info %s\n", fx_version_string()); return 0;
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
    printf("fabxfer %s\n", fx_version_string());
    for (size_t i = 0; i < sizeof(providers) / sizeof(providers[0]); i++)
        probe(providers[i]);
    printf("default for a single-host job (FABXFER_PROVIDER unset):\n");
    return probe(NULL) == 0 ? 0 : 1;
}
