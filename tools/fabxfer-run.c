/*
 * fabxfer-run: start N ranks of a program on this host for the "local"
 * bootstrap (tests, demos, a single-node job without PMIx). A thin shell
 * around fx_launch_local(); it uses only the public header.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fabxfer.h>

#include "cli.h"

#define EXIT_JOB_FAILED 1
#define EXIT_USAGE 2
#define DEFAULT_RANKS 2

static void usage(FILE *out)
{
    fprintf(out,
"Usage: fabxfer-run [-n N] [--timeout SECONDS] [--restart K] [--]\n"
"                   PROGRAM [ARGS...]\n"
"\n"
"Start N copies (ranks) of PROGRAM on this host and wait for them all.\n"
"\n"
"Options:\n"
"  -n, --nranks N          number of ranks to start (default %d)\n"
"  -t, --timeout SECONDS   kill the whole job after SECONDS (decimals\n"
"                          allowed); 0, the default, waits without limit\n"
"  -r, --restart K         start a rank that dies (a signal, a non-zero\n"
"                          exit) again, K times in all for the job (default\n"
"                          0, or FABXFER_RUN_RESTARTS); its new process\n"
"                          joins the running session (fx_session_join)\n"
"  -h, --help              print this help and exit\n"
"  -V, --version           print fabxfer's version and exit\n"
"\n"
"Each rank gets, in its environment:\n"
"  FABXFER_LOCAL_DIR       the job's rendezvous folder (made 0700 under\n"
"                          $TMPDIR or /tmp, removed when the job ends)\n"
"  FABXFER_LOCAL_RANK      this rank, 0 to N-1\n"
"  FABXFER_LOCAL_SIZE      N\n"
"  FABXFER_LOCAL_NONCE     16 random hex digits naming this job, written\n"
"                          into every file of the folder, so that files of\n"
"                          an earlier job are told apart and ignored\n"
"  FABXFER_RESTARTED       0; k in a rank's process started after its k-th\n"
"                          death (--restart)\n"
"Ranks pick these up with FABXFER_BOOTSTRAP=auto (the default) or local.\n"
"And torch.distributed's env:// variables, for Python ranks:\n"
"  RANK, LOCAL_RANK        this rank\n"
"  WORLD_SIZE, LOCAL_WORLD_SIZE  N\n"
"  MASTER_ADDR, MASTER_PORT  127.0.0.1 and a port free when the job starts,\n"
"                          unless already set in fabxfer-run's environment\n"
"\n"
"When a rank fails the others keep running (fabxfer's own timeouts notice\n"
"a dead peer); each failed rank is reported on stderr. SIGINT and SIGTERM\n"
"are passed on to the ranks; if fabxfer-run itself is killed (SIGKILL), the\n"
"kernel kills its ranks (Linux).\n"
"\n"
"Exit status: 0 if every rank exited 0 (a restarted rank: its last\n"
"process); 1 if a rank failed, the job timed\n"
"out or could not be started; 2 for a usage error.\n",
            DEFAULT_RANKS);
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "fabxfer-run: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'fabxfer-run --help'.\n");
    return EXIT_USAGE;
}

/* A whole number in [lo, hi]. */
static int parse_count(const char *text, long lo, long hi, int *out)
{
    char *end;
    long n;

    errno = 0;
    n = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || n < lo || n > hi)
        return -1;
    *out = (int)n;
    return 0;
}

static int parse_timeout(const char *text, int *out_ms)
{
    char *end;
    double ms;
    int whole;

    errno = 0;
    ms = strtod(text, &end) * 1000.0;
    /* !(ms >= 0) also turns away "nan". */
    if (errno != 0 || end == text || *end != '\0' || !(ms >= 0) ||
        ms > INT_MAX - 1)
        return -1;
    whole = (int)ms;
    *out_ms = whole < ms ? whole + 1 : whole; /* 0.0001 s is no "0" */
    return 0;
}

int main(int argc, char *argv[])
{
    static const struct option longopts[] = {
        {"nranks", required_argument, NULL, 'n'},
        {"timeout", required_argument, NULL, 't'},
        {"restart", required_argument, NULL, 'r'},
        {NULL, 0, NULL, 0},
    };
    /* "+": options stop at PROGRAM, so its own options are left alone. */
    const struct cli cl = {longopts, "+:n:t:r:", usage,
                           "fabxfer-run (fabxfer)"};
    int nranks = DEFAULT_RANKS, timeout_ms = 0, restarts, c;
    char text[16];

    opterr = 0;
    while ((c = cli_next(&cl, argc, argv)) != -1) {
        switch (c) {
        case 'n':
            if (parse_count(optarg, 1, INT_MAX, &nranks) != 0)
                return usage_error("-n needs a whole number >= 1, not "
                                   "\"%s\"", optarg);
            break;
        case 't':
            if (parse_timeout(optarg, &timeout_ms) != 0)
                return usage_error("--timeout needs seconds >= 0, not \"%s\"",
                                   optarg);
            break;
        case 'r':
            /* the launcher reads it, as FABXFER_RUN_RESTARTS */
            if (parse_count(optarg, 0, 65535, &restarts) != 0)
                return usage_error("--restart needs a whole number from 0 "
                                   "to 65535, not \"%s\"", optarg);
            snprintf(text, sizeof(text), "%d", restarts);
            setenv("FABXFER_RUN_RESTARTS", text, 1);
            break;
        case ':':
            return usage_error("%s needs a value", argv[optind - 1]);
        default:
            if (optopt != 0) {
                char opt[3] = {'-', (char)optopt, '\0'};

                return usage_error("unknown option %s", opt);
            }
            return usage_error("unknown option %s", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return usage_error("%s", "no PROGRAM to run");

    fflush(stdout); /* nothing of ours may show up twice in the ranks */
    if (fx_launch_local(nranks, argv + optind, timeout_ms) != FX_OK) {
        fprintf(stderr, "fabxfer-run: %s\n", fx_last_error(NULL));
        return EXIT_JOB_FAILED;
    }
    return 0;
}
