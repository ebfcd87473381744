/* Logging sink: stderr filtered by FABXFER_LOG, or the user's callback. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/cfg.h"
#include "util/log.h"

static fx_log_fn log_cb;
static void *log_cb_arg;
static int log_level = -1; /* -1: not read from FABXFER_LOG yet */

int log_level_named(const char *name)
{
    static const char *const names[] = {"none", "error", "warn", "info",
                                        "debug"};

    for (int i = 0; name != NULL &&
                    i < (int)(sizeof(names) / sizeof(names[0])); i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

static int level_from_env(void)
{
    int level = log_level_named(cfg_str(CFG_LOG));

    return level >= 0 ? level : FX_LOG_NONE;
}

int log_enabled(fx_log_level_t level)
{
    if (log_level < 0)
        log_level = level_from_env();
    return level != FX_LOG_NONE && (int)level <= log_level;
}

void log_set_level(fx_log_level_t level)
{
    log_level = (int)level;
}

void fx_set_log_callback(fx_log_fn fn, void *arg)
{
    log_cb = fn;
    log_cb_arg = arg;
}

void log_msg(fx_log_level_t level, const char *fmt, ...)
{
    static const char *const tags[] = {"", "error", "warn", "info", "debug"};
    char msg[1024];
    va_list ap;

    if (!log_enabled(level))
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (log_cb != NULL)
        log_cb(level, msg, log_cb_arg);
    else
        fprintf(stderr, "fabxfer %s: %s\n", tags[level], msg);
}
