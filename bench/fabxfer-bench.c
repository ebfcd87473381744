/*
 * fabxfer-bench: measurements that compare fabxfer with a baseline measured
 * in the same run. Started by hand, it launches its own ranks on this host
 * (the local launcher) and each rank runs the subcommand: p2p (one writer,
 * one reader) or sync (a model's weights from M sources to N targets).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

/* Started as a rank by a launcher (fabxfer-run, or mpirun / srun
 * --mpi=pmix through PMIx), rather than by hand? */
static int started_as_rank(void)
{
    return getenv("FABXFER_LOCAL_RANK") != NULL || getenv("PMIX_RANK") != NULL;
}

/* Started by hand: the whole command line again as nranks ranks on this
 * host, through the local launcher; the exit status. */
static int start_ranks(int nranks, char **argv)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

    if (n <= 0)
        return 1;
    exe[n] = '\0';
    argv[-1] = exe; /* argv[0] is the subcommand: relaunch the whole line */
    if (fx_launch_local(nranks, argv - 1, 0) != FX_OK) {
        fprintf(stderr, "fabxfer-bench: %s\n", fx_last_error(NULL));
        return 1;
    }
    return 0;
}

const char *bench_provider_origin(const char *opt)
{
    if (opt != NULL)
        return "from --provider";
    if (getenv("FABXFER_PROVIDER") != NULL)
        return "from FABXFER_PROVIDER";
    return "fabxfer's choice";
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

static void sync_usage(FILE *out)
{
    fprintf(out,
"usage: fabxfer-bench sync --sources M --targets N --model SPEC\n"
"                          [--modes LIST] [--versions V] [--rounds R]\n"
"                          [--verify]\n"
"                          [--provider PROV] [--json FILE]\n"
"                          [--device host|cuda[:N]] [--target-gap BYTES]\n"
"                          [--receive live|shadow] [--push LIST]\n"
"                          [--train-ms N]\n"
"                          [--source-layout LAYOUT] [--target-layout LAYOUT]\n"
"                          [--dtypes same|fp8-block] [--compact]\n"
"\n"
"sync: weight sync of a model from M source ranks (ranks 0..M-1) to N\n"
"target ranks (M..M+N-1). Started by hand, it launches its M+N ranks on\n"
"this host; under mpirun -n M+N or srun --mpi=pmix -n M+N every process is\n"
"one rank and PMIx carries the exchange. Each rank keeps its\n"
"pieces in one registered region: sources place tensors as an allocator\n"
"would (each start rounded up to 64 bytes, plus 64), targets back to back\n"
"(or --target-gap apart).\n"
"Before each version (untimed) sources fill every tensor with a pattern of\n"
"the version; then sources push and targets wait, and a barrier separates\n"
"versions. One untimed warm-up version, then V timed ones.\n"
"  --sources M      source ranks (data-parallel replicas), M >= 1\n"
"  --targets N      target ranks, N >= 1\n"
"  --model SPEC     what moves:\n"
"                   FILE.json: a manifest (docs/manifest.md) naming ranks\n"
"                     0..M+N-1, sources among 0..M-1, targets M..M+N-1;\n"
"                   synthetic:COUNT:SIZE: COUNT tensors of SIZE bytes (u8,\n"
"                     K/M/G suffixes);\n"
"                   hf:CONFIG.json[:LAYERS]: the tensors of a HuggingFace\n"
"                     config.json (Llama, Qwen3, Qwen3-MoE, DeepSeek-V3\n"
"                     and Kimi-K2), at most LAYERS layers (examples in\n"
"                     bench/configs/).\n"
"                   Synthetic and hf models are cut by the layouts below.\n"
"  --source-layout, --target-layout LAYOUT (dp, tp, tp-box, tp-flat,\n"
"                   fsdp, ep, ep=G or vllm)\n"
"                   how each side holds a generated model: dp every\n"
"                   tensor whole on every rank (replicas), tp 2-D tensors\n"
"                   cut along dim 0 over the side's ranks (1-D whole),\n"
"                   tp-box and tp-flat tp's cuts written as boxes or as\n"
"                   flat ranges (the manifest stores them as tp's: a\n"
"                   baseline of the run-to-run spread),\n"
"                   fsdp each tensor a flat range of its elements per rank\n"
"                   (FSDP's and ZeRO's shards; --modes fabxfer only), ep\n"
"                   routed expert e whole on rank e mod N (expert\n"
"                   parallel), ep=G on group e mod G of N/G ranks and\n"
"                   cut by rows over them (Megatron's tp x ep, e.g. ep=2\n"
"                   on 8 ranks: tp 4 x ep 2; as ep where G does not\n"
"                   divide N), the other tensors as tp; vllm vLLM's fused\n"
"                   tensors, tensor parallel over the side's ranks, as\n"
"                   views (docs/manifest.md) of an hf: model's: qkv_proj\n"
"                   (q/k/v_proj, and their biases), gate_up_proj (dense\n"
"                   and shared-expert MLPs) in TP order, rank j holding\n"
"                   [its rows of each] as one buffer, and the MLA's\n"
"                   fused_qkv_a_proj whole on every rank; with\n"
"                   fp8-block each fused weight's scales as a view too;\n"
"                   the other tensors as tp (routed experts included:\n"
"                   no w13 stacking). --modes fabxfer only; not for\n"
"                   sources with fp8-block.\n"
"                   Default: dp for sources, tp for targets.\n"
"  --dtypes fp8-block  targets hold an hf: model's bf16 linear weights as\n"
"                   FP8 e4m3 with 128x128 block scales (DeepSeek-V3's\n"
"                   checkpoints; the scale tensors added), converted and\n"
"                   scaled by the sources while packing. FP8 weights'\n"
"                   sources hold bf16 of magnitudes in [2^-8, 2^8) (the\n"
"                   pattern's exponents cut to 4 bits); --verify checks\n"
"                   their e4m3 bytes and f32 scales against the bench's\n"
"                   own conversion (each block's largest magnitude /\n"
"                   448). Tensor-parallel sources cut those weights\n"
"                   between whole 128-row blocks. Default: same.\n"
"  --compact        hand fabxfer the layouts as rules (the compact\n"
"                   manifest, docs/manifest.md), each rank expanding its\n"
"                   part, instead of every piece: dp, tp, fsdp and ep\n"
"                   sides (tp-box and tp-flat as tp; not vllm, whose\n"
"                   views are listed), generated models, no --dtypes\n"
"  --modes LIST     in the order given (default fabxfer,naive):\n"
"                   fabxfer: fx_session_push on sources, fx_session_wait\n"
"                     on targets (manifest, plan and setup done once);\n"
"                   naive: a straightforward port straight on libfabric:\n"
"                     targets register once; every version each source\n"
"                     does fi_mr_reg per tensor, one fi_write per (tensor,\n"
"                     target) with tx_attr->size in flight, waits for all\n"
"                     completions, fi_close of every MR, then an 8-byte\n"
"                     write of the version into each target's flag word.\n"
"                     Tensor i goes from source i mod M.\n"
"  --versions V     timed versions per mode (default 5)\n"
"  --rounds R       run the list of modes R times, alternating, and take\n"
"                   the medians over all R x V versions (default 1): a\n"
"                   ratio of two modes then suffers less from the machine\n"
"                   drifting between them\n"
"  --verify         after every version every target checks every byte\n"
"                   it holds (views' against the tensors they join);\n"
"                   a mismatch names the tensor, byte, rank and\n"
"                   version, and the run exits 1\n"
"  --provider PROV  libfabric provider, e.g. \"tcp;ofi_rxm\" or shm\n"
"                   (default: FABXFER_PROVIDER, else fabxfer's choice)\n"
"  --json FILE      also write a JSON array, one object per mode\n"
"  --device DEV     where every rank's tensors live: host (default), or\n"
"                   cuda[:N], CUDA device N (0) shared by all ranks; naive\n"
"                   then copies each tensor to a host buffer before\n"
"                   registering it (synchronously, every version)\n"
"  --target-gap BYTES  targets leave BYTES (K/M suffixes, at most 1M) after\n"
"                   each piece, as tensors allocated one by one lie, so\n"
"                   that no two target pieces touch (default 0)\n"
"  --receive KIND   how fabxfer's targets take a version: live (default),\n"
"                   straight into the tensors, fx_session_wait; shadow:\n"
"                   regions registered FX_REGION_TARGET|FX_REGION_SHADOW,\n"
"                   peers write a receive area, and after fx_session_wait\n"
"                   each version fx_session_apply(NULL stream) copies it\n"
"                   into the tensors: timed apart (apply_s; GPU tensors:\n"
"                   the apply and a device synchronisation) against a plain\n"
"                   copy of as many bytes of the receive area's kind in the\n"
"                   same loop (memcpy host->host; cuMemcpyAsync on the\n"
"                   same stream, pinned host->device on the staged GPU\n"
"                   path, device->device on the direct one, and the same\n"
"                   synchronisation), as apply/copy bandwidth; with --verify\n"
"                   targets also check that the tensors still hold the\n"
"                   version before until the apply\n"
"  --push LIST      how fabxfer's sources push, each kind a row, in the\n"
"                   order given (default block): block, fx_session_push;\n"
"                   start, fx_session_push_start, --train-ms of CPU work\n"
"                   (the trainer's next step), fx_session_push_wait.\n"
"                   push_block_s: the trainer's blocking time (the push,\n"
"                   or push_start + push_wait); with block,start the\n"
"                   start row gives it as a share of the blocking push's\n"
"  --train-ms N     --push start: milliseconds of CPU work (copies and\n"
"                   sums of 1 MiB) between start and wait (default 100)\n"
"  -h, --help       this text\n"
"\n"
"Reported per mode: s/version, the MEDIAN over the timed versions of the\n"
"slowest rank's time for that version (push on sources, wait on targets;\n"
"naive: registration to the last flag written, or waiting for every\n"
"flag); GB/s = bytes per version (summed over targets) / s/version / 1e9;\n"
"pack_s, post_s, wait_s: the median over versions of the slowest source's\n"
"figure (fabxfer: fx_session_report; naive: pack 0, post = fi_mr_reg and\n"
"fi_write including retries on -FI_EAGAIN, wait = until the last\n"
"completion); \"vs naive\" = naive s/version / this mode's. With --push\n"
"start a source's time is the push's own (fx_session_report), not the\n"
"work around it. Lines after the table give fabxfer's ready_wait_s (the\n"
"slowest source's wait for its targets' release, flow control), the\n"
"apply and the push's blocking time; --json has them per row (apply_s,\n"
"apply_gb_s, copy_s, apply_vs_copy, push_block_s, ready_wait_s, and\n"
"arrays of every timed version's apply_s, copy_s and push_block_s).\n"
"\n"
"Environment: every FABXFER_* variable applies (e.g. FABXFER_BUCKET_SIZE,\n"
"FABXFER_TIMEOUT_MS, which also bounds the naive targets' wait).\n"
"Exit status: 0 ok, 1 a rank failed (or verification did), 2 usage.\n");
}

static void top_usage(FILE *out)
{
    fprintf(out,
"usage: fabxfer-bench p2p [OPTIONS]    one source writes into one target\n"
"       fabxfer-bench sync --sources M --targets N --model SPEC [OPTIONS]\n"
"                                       weight sync, M sources to N targets\n"
"       fabxfer-bench pack --model synthetic:COUNT:SIZE [OPTIONS]\n"
"                                       the GPU packer against a plain copy\n"
"       fabxfer-bench -V | --version\n"
"\n");
    usage(out);
    fprintf(out, "\n");
    sync_usage(out);
}

static int parse_sizes(const char *list, struct p2p_args *a)
{
    char *copy = strdup(list), *save = NULL, *tok;

    a->nsizes = 0;
    for (tok = strtok_r(copy, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        uint64_t n;

        if (bench_parse_size(tok, &n) != 0 || a->nsizes == BENCH_MAX_SIZES) {
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
        {NULL, 0, NULL, 0},
    };
    const struct cli cl = {opts, "", usage, NULL};
    struct p2p_args a = {0};
    int c;

    parse_sizes("4K,64K,1M,64M,1G", &a);
    a.raw = a.fabxfer = 1;
    a.reps = 3;
    while ((c = cli_next(&cl, argc, argv)) != -1) {
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
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "fabxfer-bench: unexpected argument \"%s\"\n",
                argv[optind]);
        return 2;
    }
    if (!started_as_rank()) /* not a rank yet: start the two */
        return start_ranks(2, argv);
    return bench_p2p(&a) ? 1 : 0;
}

/* --modes and --push: one or both of two names (names[i] stands for the
 * enum value i), comma-separated, into out[], each once in the order
 * given, and their count into *n; -1 after saying what is wrong (what:
 * the messages' word for one, opt the option). */
static int sync_pick(const char *list, const char *what, const char *opt,
                     const char *const names[2], int out[2], int *n)
{
    char *copy = strdup(list), *save = NULL, *tok;
    int ok = 1;

    *n = 0;
    for (tok = strtok_r(copy, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        int v = strcmp(tok, names[0]) == 0 ? 0
                : strcmp(tok, names[1]) == 0 ? 1 : -1;
        int seen = 0;

        if (v < 0) {
            fprintf(stderr, "fabxfer-bench sync: unknown %s \"%s\" "
                    "(%s, %s)\n", what, tok, names[0], names[1]);
            ok = 0;
            continue;
        }
        for (int i = 0; i < *n; i++)
            seen |= out[i] == v;
        if (!seen)
            out[(*n)++] = v;
    }
    free(copy);
    if (ok && *n == 0)
        fprintf(stderr, "fabxfer-bench sync: %s needs %s and/or %s\n", opt,
                names[0], names[1]);
    return ok && *n > 0 ? 0 : -1;
}

static int sync_modes(const char *list, struct sync_args *a)
{
    return sync_pick(list, "mode", "--modes", sync_mode_names, a->modes,
                     &a->nmodes);
}

static int sync_pushes(const char *list, struct sync_args *a)
{
    return sync_pick(list, "--push", "--push", sync_push_names, a->pushes,
                     &a->npushes);
}

static int sync_count(const char *opt, const char *text, int min, int *out)
{
    char *end;
    long n = strtol(text, &end, 10);

    if (end == text || *end != '\0' || n < min || n > 100000) {
        fprintf(stderr, "fabxfer-bench sync: %s needs an integer from %d "
                "to 100000, not \"%s\"\n", opt, min, text);
        return -1;
    }
    *out = (int)n;
    return 0;
}

/* "host" (-1), "cuda" (device 0) or "cuda:N". */
int bench_parse_device(const char *text, int *device)
{
    char *end;
    long n;

    if (strcmp(text, "host") == 0) {
        *device = -1;
        return 0;
    }
    if (strcmp(text, "cuda") == 0) {
        *device = 0;
        return 0;
    }
    if (strncmp(text, "cuda:", 5) == 0) {
        n = strtol(text + 5, &end, 10);
        if (end != text + 5 && *end == '\0' && n >= 0 && n < 1024) {
            *device = (int)n;
            return 0;
        }
    }
    fprintf(stderr, "fabxfer-bench: --device \"%s\": use host, cuda or "
            "cuda:N\n", text);
    return -1;
}

static int sync_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"sources", required_argument, NULL, 's'},
        {"targets", required_argument, NULL, 't'},
        {"model", required_argument, NULL, 'M'},
        {"modes", required_argument, NULL, 'm'},
        {"versions", required_argument, NULL, 'v'},
        {"rounds", required_argument, NULL, 'r'},
        {"verify", no_argument, NULL, 'c'},
        {"provider", required_argument, NULL, 'p'},
        {"json", required_argument, NULL, 'j'},
        {"device", required_argument, NULL, 'd'},
        {"target-gap", required_argument, NULL, 'g'},
        {"receive", required_argument, NULL, 'R'},
        {"push", required_argument, NULL, 'P'},
        {"train-ms", required_argument, NULL, 'T'},
        {"source-layout", required_argument, NULL, 'S'},
        {"target-layout", required_argument, NULL, 'L'},
        {"dtypes", required_argument, NULL, 'D'},
        {"compact", no_argument, NULL, 'K'},
        {NULL, 0, NULL, 0},
    };
    const struct cli cl = {opts, "", sync_usage, NULL};
    struct sync_args a = {.device = -1};
    const char *local_size = getenv("FABXFER_LOCAL_SIZE");
    int c;

    a.modes[0] = SYNC_FABXFER;
    a.modes[1] = SYNC_NAIVE;
    a.nmodes = 2;
    a.versions = 5;
    a.rounds = 1;
    a.pushes[0] = SYNC_PUSH_BLOCK;
    a.npushes = 1;
    a.train_ms = 100;
    a.receive = SYNC_LIVE;
    while ((c = cli_next(&cl, argc, argv)) != -1) {
        switch (c) {
        case 's':
            if (sync_count("--sources", optarg, 1, &a.sources)) return 2;
            break;
        case 't':
            if (sync_count("--targets", optarg, 1, &a.targets)) return 2;
            break;
        case 'M': a.model = optarg; break;
        case 'm': if (sync_modes(optarg, &a)) return 2; break;
        case 'v':
            if (sync_count("--versions", optarg, 1, &a.versions)) return 2;
            break;
        case 'r':
            if (sync_count("--rounds", optarg, 1, &a.rounds)) return 2;
            break;
        case 'c': a.verify = 1; break;
        case 'p':
            if (optarg[0] == '\0') {
                fprintf(stderr, "fabxfer-bench sync: empty --provider\n");
                return 2;
            }
            a.provider = optarg;
            break;
        case 'j': a.json = optarg; break;
        case 'd':
            if (bench_parse_device(optarg, &a.device)) return 2;
            break;
        case 'g':
            a.target_gap = 0;
            if ((strcmp(optarg, "0") != 0 &&
                 bench_parse_size(optarg, &a.target_gap)) ||
                a.target_gap > (1u << 20)) {
                fprintf(stderr, "fabxfer-bench sync: bad --target-gap "
                        "\"%s\" (bytes, K/M suffixes, at most 1M)\n", optarg);
                return 2;
            }
            break;
        case 'R':
            if (strcmp(optarg, "live") == 0)
                a.receive = SYNC_LIVE;
            else if (strcmp(optarg, "shadow") == 0)
                a.receive = SYNC_SHADOW;
            else {
                fprintf(stderr, "fabxfer-bench sync: --receive \"%s\": use "
                        "live or shadow\n", optarg);
                return 2;
            }
            break;
        case 'P': if (sync_pushes(optarg, &a)) return 2; break;
        case 'T':
            if (sync_count("--train-ms", optarg, 0, &a.train_ms)) return 2;
            break;
        case 'S':
        case 'L':
            if (!model_layout_known(optarg)) {
                fprintf(stderr, "fabxfer-bench sync: --%s-layout \"%s\": "
                        "use dp, tp, tp-box, tp-flat, fsdp, ep, ep=G or vllm\n",
                        c == 'S' ? "source" : "target", optarg);
                return 2;
            }
            a.layouts[c == 'S' ? 0 : 1] = optarg;
            break;
        case 'D':
            if (strcmp(optarg, "fp8-block") != 0 &&
                strcmp(optarg, "same") != 0) {
                fprintf(stderr, "fabxfer-bench sync: --dtypes \"%s\": use "
                        "same or fp8-block\n", optarg);
                return 2;
            }
            a.layouts[2] = strcmp(optarg, "same") == 0 ? NULL : optarg;
            break;
        case 'K': a.compact = 1; break;
        default:
            fprintf(stderr, "Try 'fabxfer-bench sync --help'.\n");
            return 2;
        }
    }
    if (a.layouts[2] != NULL)
        for (int i = 0; i < a.nmodes; i++)
            if (a.modes[i] != SYNC_FABXFER) {
                fprintf(stderr, "fabxfer-bench sync: --dtypes fp8-block "
                        "converts while packing: --modes fabxfer only\n");
                return 2;
            }
    for (int k = 0; k < 2; k++) {
        const char *l = a.layouts[k];

        if (l == NULL || (strcmp(l, "fsdp") && strcmp(l, "vllm")))
            continue;
        for (int i = 0; i < a.nmodes; i++)
            if (a.modes[i] != SYNC_FABXFER) {
                fprintf(stderr, "fabxfer-bench sync: the %s layout's %s "
                        "move with --modes fabxfer only (the baselines "
                        "write boxes of plain tensors)\n", l,
                        l[0] == 'f' ? "flat pieces" : "views");
                return 2;
            }
    }
    if (optind != argc) {
        fprintf(stderr, "fabxfer-bench sync: unexpected argument \"%s\"\n",
                argv[optind]);
        return 2;
    }
    if (a.sources == 0 || a.targets == 0 || a.model == NULL) {
        fprintf(stderr, "fabxfer-bench sync: --sources, --targets and "
                "--model are required\nTry 'fabxfer-bench sync --help'.\n");
        return 2;
    }
    if (a.sources + a.targets > 1024) {
        fprintf(stderr, "fabxfer-bench sync: %d ranks on one host is too "
                "many (at most 1024)\n", a.sources + a.targets);
        return 2;
    }
    if (local_size != NULL && atoi(local_size) != a.sources + a.targets) {
        fprintf(stderr, "fabxfer-bench sync: the launcher started %s ranks "
                "(FABXFER_LOCAL_SIZE), but --sources %d --targets %d need "
                "%d\n", local_size, a.sources, a.targets,
                a.sources + a.targets);
        return 2;
    }
    if (!started_as_rank()) {
        /* Not a rank yet: check the model once, then start the ranks. */
        struct model *m = NULL;
        char err[512];

        if (model_load(a.model, a.sources, a.targets, a.target_gap,
                       a.layouts, &m, err, sizeof(err))) {
            fprintf(stderr, "fabxfer-bench sync: --model %s: %s\n", a.model,
                    err);
            return 2;
        }
        model_free(m);
        return start_ranks(a.sources + a.targets, argv);
    }
    return bench_sync(&a) ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "--help") == 0) {
        top_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "-V") == 0 || strcmp(argv[1], "--version") == 0) {
        printf("fabxfer-bench %s\n", fx_version_string());
        return 0;
    }
    if (strcmp(argv[1], "p2p") == 0)
        return p2p_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "sync") == 0)
        return sync_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "pack") == 0)
        return pack_main(argc - 1, argv + 1);
    fprintf(stderr, "fabxfer-bench: unknown subcommand \"%s\" (p2p, "
            "sync, pack)\n", argv[1]);
    top_usage(stderr);
    return 2;
}
