/* Logging sink: stderr filtered by FABXFER_LOG, or the user's callback;
 * and its first warning, of FABXFER_* names that cfg.c's table lacks
 * (here, not in cfg.c: the log reads its level from that table). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/cfg.h"
#include "util/log.h"

extern char **environ;

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

static void warn_unknown_once(void)
{
    static const char prefix[] = "FABXFER_";

    for (char **e = environ; e != NULL && *e != NULL; e++) {
        size_t n = strcspn(*e, "=");
        int known = 0;

        if (strncmp(*e, prefix, sizeof(prefix) - 1) != 0)
            continue;
        for (int k = 0; k < CFG_COUNT && !known; k++)
            known = strlen(cfg_name((enum cfg_key)k)) == n &&
                    strncmp(cfg_name((enum cfg_key)k), *e, n) == 0;
        if (!known)
            LOG_WARN("%.*s is set, but fabxfer has no such variable: it is "
                     "ignored (fabxfer-info -e lists them)", (int)n, *e);
    }
}

void log_warn_unknown(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    (void)pthread_once(&once, warn_unknown_once);
}
