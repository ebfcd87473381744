/*
 * One place for what every command line of fabxfer answers alike: --help
 * and --version, added to each command's own option table.
 */
#include <stdlib.h>
#include <string.h>

#include <fabxfer.h>

#include "cli.h"

/* The most options one command has, with room to spare. */
#define CLI_MAX 48

int cli_next(const struct cli *c, int argc, char **argv)
{
    static const struct option help = {"help", no_argument, NULL, 'h'};
    static const struct option version = {"version", no_argument, NULL, 'V'};
    struct option all[CLI_MAX + 3];
    char shorts[2 * CLI_MAX];
    size_t n = 0;
    int opt;

    while (c->opts[n].name != NULL && n < CLI_MAX) {
        all[n] = c->opts[n];
        n++;
    }
    if (c->opts[n].name != NULL ||
        strlen(c->shorts) + 3 > sizeof(shorts)) {
        fprintf(stderr, "cli: more than %d options\n", CLI_MAX);
        abort();
    }
    all[n++] = help;
    if (c->version != NULL)
        all[n++] = version;
    memset(&all[n], 0, sizeof(all[n]));
    snprintf(shorts, sizeof(shorts), "%sh%s", c->shorts,
             c->version != NULL ? "V" : "");
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
