/*
 * One place for what every command line of fabxfer answers alike: --help
 * and --version, added to each command's own option table.
 */
#include <stdlib.h>
#include <string.h>

#include <fabxfer.h>

#include "cli.h"

/* The most options of one command (fabxfer-plan has 22), --help and
 * --version aside. */
#define CLI_MAX 48

int cli_next(const struct cli *c, int argc, char **argv)
{
    static const struct option help = {"help", no_argument, NULL, 'h'};
    static const struct option version = {"version", no_argument, NULL, 'V'};
    /* getopt_long keeps its place in optind, not in the table: the table
     * can be put together again on every call. */
    struct option all[CLI_MAX + 3];
    char shorts[32];
    size_t n = 0;
    int opt;

    for (; c->opts[n].name != NULL; n++) {
        if (n == CLI_MAX) {
            fprintf(stderr, "cli_next: more than %d options\n", CLI_MAX);
            abort();
        }
        all[n] = c->opts[n];
    }
    all[n++] = help;
    if (c->version != NULL)
        all[n++] = version;
    memset(&all[n], 0, sizeof(all[n]));
    if (snprintf(shorts, sizeof(shorts), "%sh%s", c->shorts,
                 c->version != NULL ? "V" : "") >= (int)sizeof(shorts)) {
        fprintf(stderr, "cli_next: short options \"%s\" too long\n",
                c->shorts);
        abort();
    }
    opt = getopt_long(argc, argv, shorts, all, NULL);
    if (opt == 'h') {
        c->usage(stdout);
        exit(0);
    }
    if (opt == 'V' && c->version != NULL) {
        printf("%s %s\n", c->version, fx_version_string());
        exit(0);
    }
    return opt;
}
