/*
 * fabxfer-bench: measurements that compare fabxfer with a baseline measured
 * in the same run. Started by hand, it launches its own ranks on this host
 * (the local launcher) and each rank runs the subcommand.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

double bench_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *out)
{
    fprintf(out,
"usage: fabxfer-bench p2p [--provider PROV] [--sizes LIST] [--modes LIST]\n"
"                         [--iters N] [--reps R] [--json FILE]\n"
"\n"
"p2p: one source rank writes into one target rank on this host, started by\n"
"the local launcher. For each size, each mode moves the whole buffer\n"
"--iters times and reports bandwidth in 10^9 bytes per second.\n"
"  --provider PROV  libfabric provider, e.g. \"tcp;ofi_rxm\" or shm\n"
"                   (default: FABXFER_PROVIDER, else fabxfer's choice)\n"
"  --sizes LIST     comma-separated sizes with K/M/G suffixes\n"
"                   (default 4K,64K,1M,64M,1G)\n"
"  --modes LIST     raw: fi_write of the whole pre-registered buffer, 16 in\n"
"                   flight, straight on libfabric (the provider's ceiling);\n"
"                   fabxfer: fx_write + fx_notify through the public API\n"
"                   (default raw,fabxfer)\n"
"  --iters N        transfers per size and mode (default: about 4 GiB or\n"
"                   at least 8 transfers per size, at most 20000)\n"
"  --reps R         timed rounds per size, modes alternating; the fastest\n"
"                   round of each mode is reported (default 3)\n"
"  --json FILE      also write one JSON object per (mode, size) to FILE\n"
"  -h, --help       this text;  -V, --version  fabxfer's version\n"
"\n"
"Environment: every FABXFER_* variable applies (fabxfer-run --help and\n"
"the README list them); FABXFER_TIMEOUT_MS bounds every wait.\n");
}

static int parse_sizes(const char *list, struct p2p_args *a)
{
    char *copy = strdup(list), *save = NULL, *tok;

    a->nsizes = 0;
    for (tok = strtok_r(copy, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        char *end;
        unsigned long long n = strtoull(tok, &end, 10);

        switch (*end) {
        case 'G': case 'g': n <<= 10; /* fall through */
        case 'M': case 'm': n <<= 10; /* fall through */
        case 'K': case 'k': n <<= 10; end++; break;
        default: break;
        }
        if (end == tok || *end != '\0' || n == 0 ||
            a->nsizes == BENCH_MAX_SIZES) {
            fprintf(stderr, "fabxfer-bench: bad size \"%s\" in --sizes\n",
                    tok);
            free(copy);
            return -1;
        }
        a->sizes[a->nsizes++] = (size_t)n;
    }
    free(copy);
    return a->nsizes > 0 ? 0 : -1;
}

static int parse_modes(const char *list, struct p2p_args *a)
{
    char *copy = strdup(list), *save = NULL, *tok;
    int ok = 1;

    a->raw = a->fabxfer = 0;
    for (tok = strtok_r(copy, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        if (strcmp(tok, "raw") == 0)
            a->raw = 1;
        else if (strcmp(tok, "fabxfer") == 0)
            a->fabxfer = 1;
        else {
            fprintf(stderr, "fabxfer-bench: unknown mode \"%s\" (raw, "
                    "fabxfer)\n", tok);
            ok = 0;
        }
    }
    free(copy);
    return ok && (a->raw || a->fabxfer) ? 0 : -1;
}

static int p2p_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"provider", required_argument, NULL, 'p'},
        {"sizes", required_argument, NULL, 's'},
        {"modes", required_argument, NULL, 'm'},
        {"iters", required_argument, NULL, 'i'},
        {"json", required_argument, NULL, 'j'},
        {"reps", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct p2p_args a = {0};
    int c;

    parse_sizes("4K,64K,1M,64M,1G", &a);
    a.raw = a.fabxfer = 1;
    a.reps = 3;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'p': a.provider = optarg; break;
        case 's': if (parse_sizes(optarg, &a)) return 2; break;
        case 'm': if (parse_modes(optarg, &a)) return 2; break;
        case 'i':
            a.iters = strtol(optarg, NULL, 10);
            if (a.iters < 1) {
                fprintf(stderr, "fabxfer-bench: --iters needs N >= 1\n");
                return 2;
            }
            break;
        case 'j': a.json = optarg; break;
        case 'r':
            a.reps = (int)strtol(optarg, NULL, 10);
            if (a.reps < 1) {
                fprintf(stderr, "fabxfer-bench: --reps needs R >= 1\n");
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "fabxfer-bench: unexpected argument \"%s\"\n",
                argv[optind]);
        return 2;
    }
    if (getenv("FABXFER_LOCAL_RANK") == NULL) {
        /* Not a rank yet: start the two ranks of this benchmark. */
        char exe[4096];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

        if (n <= 0)
            return 1;
        exe[n] = '\0';
        argv[-1] = exe; /* argv[0] is "p2p": relaunch the whole line */
        if (fx_launch_local(2, argv - 1, 0) != FX_OK) {
            fprintf(stderr, "fabxfer-bench: %s\n", fx_last_error(NULL));
            return 1;
        }
        return 0;
    }
    return bench_p2p(&a) ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "-V") == 0 || strcmp(argv[1], "--version") == 0) {
        printf("fabxfer-bench %s\n", fx_version_string());
        return 0;
    }
    if (strcmp(argv[1], "p2p") == 0)
        return p2p_main(argc - 1, argv + 1);
    fprintf(stderr, "fabxfer-bench: unknown subcommand \"%s\"\n", argv[1]);
    usage(stderr);
    return 2;
}
