/*
 * The FABXFER_* environment: one table (config.c) holds every variable with
 * its default and a sentence of documentation, which fabxfer-info -e and the
 * README print. Nothing else in the library calls getenv() for FABXFER_*.
 */
#ifndef FX_CORE_CONFIG_H
#define FX_CORE_CONFIG_H

#include <stddef.h>
#include "fabxfer.h"

enum cfg_key {
    CFG_PROVIDER,
    CFG_BOOTSTRAP,
    CFG_TIMEOUT_MS,
    CFG_LOG,
    CFG_NOTIFY,
    CFG_CHUNK_SIZE,
    CFG_IOV_MAX,
    CFG_BUCKET_SIZE,
    CFG_BUCKET_DEPTH,
    CFG_PACK_MAX,
    CFG_PACK_THREAD,
    CFG_SPIN_US,
    CFG_GPU_PATH,
    CFG_RAILS,
    CFG_LOCAL_DIR,
    CFG_LOCAL_RANK,
    CFG_LOCAL_SIZE,
    CFG_COUNT
};

/* The variable's value, or its default (NULL when the default is unset). */
const char *cfg_str(enum cfg_key key);
const char *cfg_name(enum cfg_key key);
/* Parse as an integer in [min, max]; an error names the variable. */
fx_status_t cfg_long(enum cfg_key key, long min, long max, long *out);
/* Parse as a byte count with an optional K, M or G suffix (powers of 2). */
fx_status_t cfg_size(enum cfg_key key, size_t *out);
/* "4K", "1M", "1G" or a plain number; -1 on malformed input. */
int cfg_parse_size(const char *text, size_t *out);

#endif
