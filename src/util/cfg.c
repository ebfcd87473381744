/*
 * Every FABXFER_* variable, with its default and its documentation, in one
 * table. The README's table is generated from the same text by
 * `fabxfer-info -e`, so this is the one place to add a variable.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cfg.h"
#include "util/error.h"

/* Integers and byte counts have bounds, checked wherever they are read:
 * whatever is computed from them (SIZE x DEPTH, a deadline in ms from
 * now) then fits its type. Byte counts where 0 picks a default accept 0
 * besides [min, max]. */
enum cfg_kind { CFG_TEXT, CFG_INT, CFG_BYTES };

struct cfg_entry {
    const char *name;
    const char *def; /* NULL: unset */
    enum cfg_kind kind;
    int zero;        /* CFG_BYTES: 0 is accepted too (the default) */
    long long min, max;
    const char *doc;
};

#define TEXT CFG_TEXT, 0, 0, 0
#define INT_IN(lo, hi) CFG_INT, 0, (lo), (hi)
#define BYTES_IN(lo, hi) CFG_BYTES, 0, (lo), (hi)
#define ZERO_OR_BYTES_IN(lo, hi) CFG_BYTES, 1, (lo), (hi)
#define KIB 1024LL
#define GIB (1024LL * 1024 * 1024)
#define DAY_MS (24LL * 3600 * 1000)

static const struct cfg_entry cfg_table[CFG_COUNT] = {
    [CFG_PROVIDER] = {"FABXFER_PROVIDER", NULL, TEXT,
        "libfabric provider to use (e.g. efa, cxi, \"verbs;ofi_rxm\", shm, "
        "\"tcp;ofi_rxm\"), or a list of them (\"shm,efa,tcp;ofi_rxm\"): a "
        "path per pair of ranks, each pair taking the first that both "
        "offer of shm (same host only), efa, cxi, verbs;ofi_rxm, any "
        "other, tcp;ofi_rxm, tcp, and a listed provider this node lacks "
        "skipped; unset: the first available of efa, cxi, verbs;ofi_rxm, "
        "shm (all ranks on one host), tcp;ofi_rxm, tcp"},
    [CFG_ISOLATE] = {"FABXFER_ISOLATE", "0", INT_IN(0, 1),
        "1: never use shm, which isolates nothing between processes of the "
        "same user on this host (CMA: any of them may read or write this "
        "process's memory, registered or not): the automatic choice skips "
        "it, FABXFER_PROVIDER=shm is refused and a list loses shm; 0: shm "
        "is taken for single-host jobs"},
    [CFG_BOOTSTRAP] = {"FABXFER_BOOTSTRAP", "auto", TEXT,
        "out-of-band exchange: local (ranks started by fabxfer-run), pmix "
        "(mpirun, srun --mpi=pmix), none (the application gives "
        "fx_ctx_opts_t an exchange, or moves blobs itself), auto (local "
        "under fabxfer-run, pmix under a PMIx server, else none); an "
        "exchange in fx_ctx_opts_t replaces it"},
    [CFG_TIMEOUT_MS] = {"FABXFER_TIMEOUT_MS", "30000", INT_IN(1, DAY_MS),
        "how long a peer may stay silent (no completion toward it, no "
        "message, no write from it) before a wait gives up on it with an "
        "error that names it; a slow peer that keeps answering is waited "
        "for"},
    [CFG_LOG] = {"FABXFER_LOG", "none", TEXT,
        "log level on stderr: none, error, warn, info, debug"},
    [CFG_NOTIFY] = {"FABXFER_NOTIFY", "auto", TEXT,
        "how a target learns that writes arrived: writedata (counted remote "
        "CQ data), message (delivery-complete writes, then a message; on "
        "shm, plain writes that the sender copies itself, fastest from one "
        "source to one target), auto (per provider, see providers.md)"},
    [CFG_SHM_COPY] = {"FABXFER_SHM_COPY", "auto", TEXT,
        "who copies a large host-memory write over shm under counted "
        "writedata: target (the target's progress copies every write), "
        "both (the source copies a share itself as plain writes, 1/(1 + "
        "its targets), so that a pair has two copiers), auto (both for a "
        "source with one target from libfabric 1.18, where shm's plain "
        "write no longer holds the target's lock while it copies; else "
        "target)"},
    [CFG_CHUNK_SIZE] = {"FABXFER_CHUNK_SIZE", "0",
        ZERO_OR_BYTES_IN(4 * KIB, GIB),
        "largest single write in bytes (K/M/G suffixes); 0: the provider's "
        "measured default, capped by its max_msg_size"},
    [CFG_IOV_MAX] = {"FABXFER_IOV_MAX", "0", INT_IN(0, 8),
        "most ranges one write gathers from the source or scatters to the "
        "target (1 to 8), so that pieces written directly cost one "
        "operation per few; 0: the provider's iov limits (4 on tcp and "
        "shm, 1 on efa and cxi); 1: one range per write"},
    [CFG_BUCKET_SIZE] = {"FABXFER_BUCKET_SIZE", "0",
        ZERO_OR_BYTES_IN(4 * KIB, GIB),
        "size of one staging bucket into which small pieces are packed "
        "(K/M/G suffixes); registered once per session; 0: 4M, and 64M "
        "for a GPU source whose buckets stay on the GPU (the direct path, "
        "where each bucket costs kernels and a CUDA IPC copy per target), "
        "a slot each, sized to the largest"},
    [CFG_BUCKET_DEPTH] = {"FABXFER_BUCKET_DEPTH", "4",
                          INT_IN(CFG_BUCKET_DEPTH_MIN, CFG_BUCKET_DEPTH_MAX),
        "buckets per source: one is packed while the others are on the "
        "wire; the source stages through SIZE x DEPTH bytes, whatever the "
        "number of targets"},
    [CFG_PACK_MAX] = {"FABXFER_PACK_MAX", "0",
        BYTES_IN(0, GIB),
        "runs shorter than this many bytes are packed into buckets, longer "
        "ones are written directly from the tensor; 0: the provider's "
        "measured default"},
    [CFG_PACK_THREAD] = {"FABXFER_PACK_THREAD", "-1", INT_IN(-1, 1),
        "1: a packer thread fills the next buckets while the current one is "
        "written, and the posting thread packs any host bucket it needs "
        "that the packer has not started; 0: the posting thread packs each "
        "bucket itself; -1: a thread where the process may use 2 CPUs or "
        "more"},
    [CFG_SPIN_US] = {"FABXFER_SPIN_US", "20", INT_IN(-1, 1000000),
        "microseconds a wait polls with nothing arriving (yielding its "
        "core at each poll) before it naps between polls, where the host "
        "has more threads ready to run than CPUs, so that a packer thread "
        "or another rank sharing the cores can run; any wait naps after "
        "1 ms of idleness, but a target's not while bytes wait on its tcp "
        "connections in message mode (its polls read them); -1: never "
        "nap"},
    [CFG_GPU_PATH] = {"FABXFER_GPU_PATH", "auto", TEXT,
        "how CUDA regions move, path by path where FABXFER_PROVIDER lists "
        "several: direct (the NIC reads and writes GPU memory, FI_HMEM, "
        "over every path whose provider registers it, the others' pairs "
        "staged; an error where none can), staged (through pinned host "
        "buckets and slabs), auto (direct on efa, verbs and cxi where the "
        "first CUDA region registers, else staged; the log says why)"},
    [CFG_RAILS] = {"FABXFER_RAILS", NULL, TEXT,
        "comma-separated domains (NICs) of the provider to stripe writes "
        "over, one rail each, e.g. \"rdmap79s0,rdmap80s0\" or \"eth0,lo\"; "
        "auto or auto:N: the provider's NICs nearest CUDA device N (0) on "
        "PCIe (hwloc); every rank must have as many; unset: one rail, the "
        "provider's first domain (fabxfer-info lists the domains); with a "
        "FABXFER_PROVIDER list, each path whose provider offers the domains "
        "takes them, the others (shm always) keep one rail"},
    [CFG_PROGRESS] = {"FABXFER_PROGRESS", "auto", TEXT,
        "who lands writes on a target between its calls, where the "
        "provider needs the target to poll (tcp, shm): thread (a progress "
        "thread of the session), call (the application calls "
        "fx_session_progress between its steps), auto (a thread for a "
        "session with shadow regions on such a provider, else call)"},
    [CFG_PROGRESS_US] = {"FABXFER_PROGRESS_US", "50", INT_IN(1, 1000000),
        "microseconds the progress thread first naps once polls find "
        "nothing, doubling while they still find nothing, up to 1 ms (or "
        "this, if longer): the latency of the first write of a version "
        "against the CPU an idle thread takes from the engine"},
    [CFG_VERIFY] = {"FABXFER_VERIFY", "auto", TEXT,
        "checksums that prove each version: full (a CRC32C of every "
        "segment, taken by the source as it packs and checked by the "
        "target before fx_session_wait or fx_session_apply gives the "
        "version), sample (a source's first version in full, then a "
        "rotating share: each segment once in FABXFER_VERIFY_EVERY "
        "versions), off, auto (sample, but off for a "
        "session where a rank cannot check all it moves: GPU memory on two "
        "devices; full and sample refuse it); GPU memory that the host "
        "cannot read is summed by the GPU; every rank must agree"},
    [CFG_VERIFY_EVERY] = {"FABXFER_VERIFY_EVERY", "64", INT_IN(2, 1 << 20),
        "FABXFER_VERIFY=sample: after a source's first version, a segment "
        "is checked once in this many versions, so every byte within that "
        "many (the default keeps sample near 1 % of a version)"},
    [CFG_VERIFY_THREADS] = {"FABXFER_VERIFY_THREADS", "0", INT_IN(0, 8),
        "threads a target checks a version with: from 4 up, one in 4 of "
        "them (at most 3) checks each run of segments as its source "
        "announces it landed (counted writedata), while the rest arrives; "
        "0: the CPUs this process may use, at most 8"},
    [CFG_LOCAL_DIR] = {"FABXFER_LOCAL_DIR", NULL, TEXT,
        "set by fabxfer-run for its ranks: the job's rendezvous folder"},
    [CFG_LOCAL_RANK] = {"FABXFER_LOCAL_RANK", NULL, INT_IN(0, 65535),
        "set by fabxfer-run for its ranks: this rank"},
    [CFG_LOCAL_SIZE] = {"FABXFER_LOCAL_SIZE", NULL, INT_IN(1, 65536),
        "set by fabxfer-run for its ranks: the number of ranks"},
    [CFG_LOCAL_NONCE] = {"FABXFER_LOCAL_NONCE", NULL, TEXT,
        "set by fabxfer-run for its ranks: 16 random hex digits naming the "
        "job, written into every file of the rendezvous folder so that "
        "files an earlier job left there are ignored"},
    [CFG_RUN_RESTARTS] = {"FABXFER_RUN_RESTARTS", "0", INT_IN(0, 65535),
        "fabxfer-run (--restart): how many times in all a rank that dies "
        "(a signal, or a non-zero exit) is started again, with the same "
        "rank; its new process joins a running session "
        "(fx_session_join)"},
    [CFG_RESTARTED] = {"FABXFER_RESTARTED", NULL, INT_IN(0, 65535),
        "set by fabxfer-run for its ranks: 0 in the first process of a "
        "rank, k in the one started after its k-th death (--restart), which "
        "joins instead of setting up: a context with bootstrap none and the "
        "job's rank and size, then fx_session_join with a tag"},
    [CFG_LIBRARY] = {"FABXFER_LIBRARY", NULL, TEXT,
        "read by the Python package only: the path of the libfabxfer.so to "
        "load; unset: the one installed beside the package, then the "
        "system's search path"},
};

fx_status_t fx_config_describe(int index, const char **name,
                               const char **default_value, const char **doc)
{
    if (index < 0 || index >= CFG_COUNT)
        return FX_ERR_RANGE;
    if (name != NULL)
        *name = cfg_table[index].name;
    if (default_value != NULL)
        *default_value = cfg_table[index].def ? cfg_table[index].def : "";
    if (doc != NULL)
        *doc = cfg_table[index].doc;
    return FX_OK;
}

const char *cfg_name(enum cfg_key key)
{
    return cfg_table[key].name;
}

const char *cfg_str(enum cfg_key key)
{
    const char *v = getenv(cfg_table[key].name);

    return (v != NULL && v[0] != '\0') ? v : cfg_table[key].def;
}

void cfg_bounds(enum cfg_key key, long long *min, long long *max)
{
    *min = cfg_table[key].min;
    *max = cfg_table[key].max;
}

/* 4096 as "4K", 1073741824 as "1G": bounds read as they are written. */
static const char *size_text(long long n, char *buf, size_t len)
{
    static const char units[] = "KMG";
    int u = -1;

    while (u < 2 && n >= 1024 && n % 1024 == 0) {
        n /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, len, "%lld", n);
    else
        snprintf(buf, len, "%lld%c", n, units[u]);
    return buf;
}

int cfg_bounds_text(int index, char *buf, size_t len)
{
    const struct cfg_entry *e;
    char lo[24], hi[24];

    if (index < 0 || index >= CFG_COUNT || len == 0)
        return -1;
    e = &cfg_table[index];
    if (e->kind == CFG_INT)
        return snprintf(buf, len, "%lld to %lld", e->min, e->max);
    if (e->kind == CFG_BYTES)
        return snprintf(buf, len, "%s%s to %s", e->zero ? "0, or " : "",
                        size_text(e->min, lo, sizeof(lo)),
                        size_text(e->max, hi, sizeof(hi)));
    buf[0] = '\0';
    return 0;
}

fx_status_t cfg_long(enum cfg_key key, long min, long max, long *out)
{
    const struct cfg_entry *e = &cfg_table[key];
    const char *v = cfg_str(key);
    char *end;
    long n;

    /* The table's bounds hold whatever the caller allows. */
    if (e->kind == CFG_INT && e->min > min)
        min = (long)e->min;
    if (e->kind == CFG_INT && e->max < max)
        max = (long)e->max;
    if (v == NULL)
        return err_set(FX_ERR_INVALID, "%s is not set", cfg_name(key));
    errno = 0;
    n = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || n < min || n > max)
        return err_set(FX_ERR_INVALID,
                       "%s=\"%s\" is not an integer in [%ld, %ld]",
                       cfg_name(key), v, min, max);
    *out = n;
    return FX_OK;
}

fx_status_t cfg_int(enum cfg_key key, long *out)
{
    return cfg_long(key, LONG_MIN, LONG_MAX, out);
}

int cfg_parse_size(const char *text, size_t *out)
{
    unsigned long long n, unit = 1;
    char *end;

    if (text == NULL || text[0] < '0' || text[0] > '9')
        return -1;
    errno = 0;
    n = strtoull(text, &end, 10);
    if (errno == ERANGE)
        return -2;
    if (errno != 0)
        return -1;
    switch (*end) {
    case 'G': case 'g': unit <<= 10; /* fall through */
    case 'M': case 'm': unit <<= 10; /* fall through */
    case 'K': case 'k': unit <<= 10; end++; break;
    case '\0': break;
    default: return -1;
    }
    if (*end != '\0')
        return -1;
    /* "99999999999G" must not wrap into a small size. */
    if (__builtin_mul_overflow(n, unit, &n) || n > SIZE_MAX)
        return -2;
    *out = (size_t)n;
    return 0;
}

fx_status_t cfg_size(enum cfg_key key, size_t *out)
{
    const struct cfg_entry *e = &cfg_table[key];
    const char *v = cfg_str(key);
    char bounds[64];
    size_t n;
    int rc;

    if (v == NULL)
        return err_set(FX_ERR_INVALID, "%s is not set", cfg_name(key));
    cfg_bounds_text(key, bounds, sizeof(bounds));
    rc = cfg_parse_size(v, &n);
    if (rc == -2)
        return err_set(FX_ERR_INVALID, "%s=\"%s\" does not fit in 64 bits; "
                       "use %s bytes", cfg_name(key), v, bounds);
    if (rc != 0)
        return err_set(FX_ERR_INVALID, "%s=\"%s\" is not a byte count (e.g. "
                       "65536, 64K, 1M); use %s bytes", cfg_name(key), v,
                       bounds);
    if (e->kind == CFG_BYTES && !(n == 0 && e->zero) &&
        (n < (unsigned long long)e->min || n > (unsigned long long)e->max))
        return err_set(FX_ERR_INVALID, "%s=\"%s\" is out of bounds: use %s "
                       "bytes", cfg_name(key), v, bounds);
    *out = n;
    return FX_OK;
}
