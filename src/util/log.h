/*
 * Logging. Silent unless FABXFER_LOG asks (or a callback is installed):
 * a library must not write to the application's stderr uninvited.
 */
#ifndef FX_UTIL_LOG_H
#define FX_UTIL_LOG_H

#include "fabxfer.h"

void log_msg(fx_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int log_enabled(fx_log_level_t level);
/* The level a FABXFER_LOG value names, or -1. */
int log_level_named(const char *name);
/* fx_ctx_opts_t.log_level: replaces FABXFER_LOG's for the process. */
void log_set_level(fx_log_level_t level);
/* Warn once per process (FABXFER_LOG=warn) of each FABXFER_* variable in
 * the environment that cfg.c's table does not have: a misspelt one would
 * otherwise be ignored without a word. */
void log_warn_unknown(void);

#define LOG_ERROR(...) log_msg(FX_LOG_ERROR, __VA_ARGS__)
#define LOG_WARN(...) log_msg(FX_LOG_WARN, __VA_ARGS__)
#define LOG_INFO(...) log_msg(FX_LOG_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) log_msg(FX_LOG_DEBUG, __VA_ARGS__)

#endif
