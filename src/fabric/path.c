/*
 * Paths per pair (issue 35): a rank may offer several providers (a list in
 * FABXFER_PROVIDER: "shm,efa,tcp;ofi_rxm"), and each pair of ranks takes
 * the first path of one fixed order that both offer and that reaches.
 *
 * The order is fixed, not each rank's own list order, so that both ends of
 * a pair make the same choice from the same two offers without a word
 * between them: shm first (same host only: it moves through the host's
 * memory, CUDA IPC for device memory), then the RDMA NICs, then any other
 * provider a user names (udp;ofi_rxd or sockets stand in for an RDMA one
 * in tests), then tcp, the fallback every host has.
 */
#include <stdio.h>
#include <string.h>

#include "fabric/fabric.h"
#include "util/error.h"

static const char *const pair_order[] = {
    "shm", "efa", "cxi", "verbs;ofi_rxm",
    NULL, /* any other provider, by name */
    "tcp;ofi_rxm", "tcp",
};
#define ORDER_OTHER 4

int fab_path_order(const char *prov)
{
    for (int k = 0; k < (int)(sizeof(pair_order) / sizeof(pair_order[0]));
         k++)
        if (pair_order[k] != NULL && strcmp(pair_order[k], prov) == 0)
            return k;
    return ORDER_OTHER;
}

/* a before b in the pair order (providers of equal rank: by name) */
static int path_before(const char *a, const char *b)
{
    int oa = fab_path_order(a), ob = fab_path_order(b);

    return oa != ob ? oa < ob : strcmp(a, b) < 0;
}

fx_status_t fab_paths_parse(const char *spec, int allow_shm,
                            struct fab_paths *out)
{
    const char *p = spec;

    memset(out, 0, sizeof(*out));
    if (spec == NULL || spec[0] == '\0')
        return err_set(FX_ERR_INVALID, "provider list is empty: name one "
                       "provider or several, comma-separated (for example "
                       "\"shm,efa,tcp;ofi_rxm\")");
    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        char *name;

        if (len == 0 || len >= FAB_PROV_MAX)
            return err_set(FX_ERR_INVALID, "provider list \"%s\": %s at "
                           "offset %td", spec, len == 0 ? "an empty name"
                           : "a name too long", p - spec);
        if (out->n == FAB_PATHS_MAX)
            return err_set(FX_ERR_INVALID, "provider list \"%s\" names more "
                           "than %d providers", spec, FAB_PATHS_MAX);
        name = out->prov[out->n];
        memcpy(name, p, len);
        name[len] = '\0';
        for (int i = 0; i < out->n; i++)
            if (strcmp(out->prov[i], name) == 0)
                return err_set(FX_ERR_INVALID, "provider list \"%s\" names "
                               "\"%s\" twice", spec, name);
        p += len + (p[len] == ',');
        if (p[-1] == ',' && *p == '\0')
            return err_set(FX_ERR_INVALID, "provider list \"%s\" ends with "
                           "a comma", spec);
        /* FABXFER_ISOLATE=1 (or a job across hosts) leaves shm out, and
         * says so only if nothing else is left. */
        if (!allow_shm && strcmp(name, "shm") == 0)
            continue;
        out->n++;
    }
    if (out->n == 0)
        return err_set(FX_ERR_INVALID, "provider list \"%s\" holds shm only, "
                       "and shm is not allowed here (FABXFER_ISOLATE=1)",
                       spec);
    return FX_OK;
}

int fab_path_pick(const struct fab_paths *mine, const struct fab_paths *peer,
                  int same_host)
{
    int best = -1;

    for (int i = 0; i < mine->n; i++) {
        int shared = 0;

        if (strcmp(mine->prov[i], "shm") == 0 && !same_host)
            continue;
        for (int j = 0; j < peer->n; j++)
            shared |= strcmp(mine->prov[i], peer->prov[j]) == 0;
        if (shared && (best < 0 || path_before(mine->prov[i],
                                               mine->prov[best])))
            best = i;
    }
    return best;
}

void fab_paths_text(const struct fab_paths *p, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; i < p->n && used < len; i++) {
        int w = snprintf(buf + used, len - used, "%s%s", i ? "," : "",
                         p->prov[i]);

        if (w > 0)
            used += (size_t)w;
    }
}
