/*
 * The FABXFER_* environment: one table (cfg.c) holds every variable with
 * its default and a sentence of documentation, which fabxfer-info -e and the
 * README print. Nothing else in the library calls getenv() for FABXFER_*.
 */
#ifndef FX_UTIL_CFG_H
#define FX_UTIL_CFG_H

#include <stddef.h>
#include "fabxfer.h"

enum cfg_key {
    CFG_PROVIDER,
    CFG_ISOLATE,
    CFG_BOOTSTRAP,
    CFG_TIMEOUT_MS,
    CFG_LOG,
    CFG_NOTIFY,
    CFG_SHM_COPY,
    CFG_CHUNK_SIZE,
    CFG_IOV_MAX,
    CFG_BUCKET_SIZE,
    CFG_BUCKET_DEPTH,
    CFG_PACK_MAX,
    CFG_PACK_THREAD,
    CFG_SPIN_US,
    CFG_GPU_PATH,
    CFG_RAILS,
    CFG_PROGRESS,
    CFG_PROGRESS_US,
    CFG_VERIFY,
    CFG_VERIFY_EVERY,
    CFG_VERIFY_THREADS,
    CFG_LOCAL_DIR,
    CFG_LOCAL_RANK,
    CFG_LOCAL_SIZE,
    CFG_LOCAL_NONCE,
    CFG_RUN_RESTARTS,
    CFG_RESTARTED,
    CFG_LIBRARY,
    CFG_COUNT
};

/* FABXFER_BUCKET_DEPTH's bounds, which also size the engine's slots. */
#define CFG_BUCKET_DEPTH_MIN 2
#define CFG_BUCKET_DEPTH_MAX 16

/* The variable's value, or its default (NULL when the default is unset). */
const char *cfg_str(enum cfg_key key);
const char *cfg_name(enum cfg_key key);
/* Parse as an integer within the table's bounds for the variable and
 * within [min, max]; an error names the variable, the value and the
 * bounds. cfg_int: the table's bounds alone. */
fx_status_t cfg_long(enum cfg_key key, long min, long max, long *out);
fx_status_t cfg_int(enum cfg_key key, long *out);
/* Parse as a byte count with an optional K, M or G suffix (powers of 2),
 * within the table's bounds for the variable. */
fx_status_t cfg_size(enum cfg_key key, size_t *out);
/* "4K", "1M", "1G" or a plain number; -1 on malformed input, -2 when it
 * does not fit in 64 bits (nor in a size_t). */
int cfg_parse_size(const char *text, size_t *out);
/* The table's bounds of an integer or byte-count variable (0, 0 for text
 * ones), and as text for fabxfer-info and the README: "1 to 86400000",
 * "0, or 4K to 1G", "" for text. Returns snprintf's count, -1 past the
 * table. */
void cfg_bounds(enum cfg_key key, long long *min, long long *max);
int cfg_bounds_text(int index, char *buf, size_t len);

#endif
