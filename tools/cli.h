/*
 * The command line of fabxfer's programs (fabxfer-run, fabxfer-info and the
 * bench's fabxfer-bench and fabxfer-plan): getopt_long over a command's own
 * options, with --help and --version answered the same way by all.
 */
#ifndef FX_TOOLS_CLI_H
#define FX_TOOLS_CLI_H

#include <getopt.h>
#include <stdio.h>

struct cli {
    const struct option *opts; /* the command's own, ending in {NULL} */
    const char *shorts;        /* its short options, as getopt takes them
                                * ("e", "+:n:"); -h and -V are added */
    void (*usage)(FILE *out);  /* the --help text */
    const char *version;       /* --version prints "VERSION fabxfer's
                                * version"; NULL: the command has none */
};

/* The next option, as getopt_long returns it: the val of one of c->opts,
 * '?' or ':' for a mistake (getopt has said which unless opterr is 0),
 * -1 after the last. -h and --help print the usage on stdout, and -V and
 * --version (where c->version is set) the version; both then exit 0. */
int cli_next(const struct cli *c, int argc, char **argv);

#endif
