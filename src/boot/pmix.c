/*
 * The PMIx bootstrap: the only file that includes pmix.h. Values go up
 * with PMIx_Put + PMIx_Commit, one PMIx_Fence without data collection makes
 * them visible, and each rank then fetches with PMIx_Get only the peers it
 * needs (the plan's), so set-up traffic grows with the plan, not with the
 * square of the job. Every blocking call carries PMIX_TIMEOUT.
 *
 * An event handler records peers that the launcher reports aborted or
 * terminated, and the loss of the launcher itself; waits on those peers
 * then fail at once. Open MPI 4.1 and Slurm 22.05 send no such event for a
 * SIGKILLed rank (see docs/launchers.md), so fabxfer's own timeouts remain
 * the guarantee and these events are a bonus.
 */
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pmix.h>

#include "boot/boot.h"
#include "util/error.h"
#include "util/log.h"

struct pmix_state {
    pmix_proc_t me;
    size_t handler;
    int handler_set;
};

/* Written by PMIx's event thread, read by waits. */
static _Atomic(int) *pmix_dead;
static int pmix_dead_n;
static _Atomic int pmix_lost;

/* PMIX_TIMEOUT is in whole seconds, rounded up so that a short timeout is
 * no "0" (which PMIx reads as none). In 64 bits: timeout_ms + 999 overflows
 * an int near INT_MAX ms, and a negative timeout would wait forever. */
static int pmix_timeout_s(const struct boot *b)
{
    int64_t s = ((int64_t)b->timeout_ms + 999) / 1000;

    if (s < 1)
        return 1;
    return s > INT_MAX ? INT_MAX : (int)s;
}

static void on_event(size_t id, pmix_status_t status, const pmix_proc_t *src,
                     pmix_info_t info[], size_t ninfo, pmix_info_t *results,
                     size_t nresults, pmix_event_notification_cbfunc_fn_t cb,
                     void *cbdata)
{
    int rank = -1;

    (void)id;
    (void)results;
    (void)nresults;
    for (size_t i = 0; i < ninfo; i++)
        if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_AFFECTED_PROC) &&
            info[i].value.type == PMIX_PROC)
            rank = (int)info[i].value.data.proc->rank;
    if (rank < 0 && src != NULL)
        rank = (int)src->rank;
    if (status == PMIX_ERR_LOST_CONNECTION)
        atomic_store(&pmix_lost, 1);
    else if (rank >= 0 && rank < pmix_dead_n)
        atomic_store(&pmix_dead[rank], 1);
    LOG_WARN("PMIx event %s for rank %d", PMIx_Error_string(status), rank);
    if (cb != NULL)
        cb(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
}

static int pmix_peer_dead(struct boot *b, int rank)
{
    (void)b;
    return atomic_load(&pmix_lost) ||
           (rank >= 0 && rank < pmix_dead_n && atomic_load(&pmix_dead[rank]));
}

static fx_status_t job_u32(struct pmix_state *ps, const char *key,
                           uint32_t *out)
{
    pmix_proc_t job;
    pmix_value_t *val = NULL;
    pmix_status_t rc;

    PMIX_LOAD_PROCID(&job, ps->me.nspace, PMIX_RANK_WILDCARD);
    rc = PMIx_Get(&job, key, NULL, 0, &val);
    if (rc != PMIX_SUCCESS || val == NULL || val->type != PMIX_UINT32) {
        if (val != NULL)
            PMIX_VALUE_RELEASE(val);
        return err_set(FX_ERR_BOOTSTRAP, "PMIx_Get(%s) of the job failed: %s",
                       key, PMIx_Error_string(rc));
    }
    *out = val->data.uint32;
    PMIX_VALUE_RELEASE(val);
    return FX_OK;
}

static void register_events(struct pmix_state *ps)
{
    pmix_status_t codes[] = {
        PMIX_ERR_LOST_CONNECTION, PMIX_PROC_TERMINATED,
        PMIX_ERR_PROC_TERM_WO_SYNC, PMIX_EVENT_PROC_TERMINATED,
        PMIX_ERR_PROC_ABORTED_BY_SIG,
#ifdef PMIX_ERR_PROC_ABORTED
        PMIX_ERR_PROC_ABORTED,
#endif
    };
    pmix_status_t rc;

    /* Blocking registration (no callback) returns the handler id. */
    rc = PMIx_Register_event_handler(codes, sizeof(codes) / sizeof(codes[0]),
                                     NULL, 0, on_event, NULL, NULL);
    if (rc >= 0) {
        ps->handler = (size_t)rc;
        ps->handler_set = 1;
    } else {
        LOG_WARN("PMIx event handler not registered: %s",
                 PMIx_Error_string(rc));
    }
}

static fx_status_t pmix_init(struct boot *b)
{
    struct pmix_state *ps = calloc(1, sizeof(*ps));
    uint32_t size = 0, local = 0;
    pmix_status_t rc;
    fx_status_t st;

    if (ps == NULL)
        return err_set(FX_ERR_NOMEM, "no memory for the PMIx bootstrap");
    rc = PMIx_Init(&ps->me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        free(ps);
        return err_set(FX_ERR_BOOTSTRAP, "PMIx_Init failed: %s (is this "
                       "process started by srun --mpi=pmix or mpirun?)",
                       PMIx_Error_string(rc));
    }
    if ((st = job_u32(ps, PMIX_JOB_SIZE, &size)) != FX_OK)
        goto fail;
    if (job_u32(ps, PMIX_LOCAL_SIZE, &local) != FX_OK)
        local = 0; /* unknown: assume several hosts */
    pmix_dead = calloc(size, sizeof(*pmix_dead));
    if (pmix_dead == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory for %u peers", size);
        goto fail;
    }
    pmix_dead_n = (int)size;
    atomic_store(&pmix_lost, 0);
    b->rank = (int)ps->me.rank;
    b->size = (int)size;
    b->single_host = local == size;
    b->priv = ps;
    register_events(ps);
    LOG_INFO("PMIx: rank %d of %u in %s, %u on this node", b->rank, size,
             ps->me.nspace, local);
    return FX_OK;
fail:
    PMIx_Finalize(NULL, 0);
    free(ps);
    return st;
}

static fx_status_t pmix_put(struct boot *b, const char *key, const void *val,
                            size_t len)
{
    char fullkey[PMIX_MAX_KEYLEN + 1];
    pmix_value_t v;
    pmix_status_t rc;

    (void)b;
    snprintf(fullkey, sizeof(fullkey), "fx.%s", key);
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = (char *)val;
    v.data.bo.size = len;
    rc = PMIx_Put(PMIX_GLOBAL, fullkey, &v);
    if (rc != PMIX_SUCCESS)
        return err_set(FX_ERR_BOOTSTRAP, "PMIx_Put(%s) failed: %s", fullkey,
                       PMIx_Error_string(rc));
    return FX_OK;
}

static fx_status_t pmix_fence(struct boot *b)
{
    pmix_info_t info;
    int timeout = pmix_timeout_s(b);
    pmix_status_t rc;

    rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS)
        return err_set(FX_ERR_BOOTSTRAP, "PMIx_Commit failed: %s",
                       PMIx_Error_string(rc));
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &timeout, PMIX_INT);
    /* No data collection: peers fetch only what they need, on demand. */
    rc = PMIx_Fence(NULL, 0, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    if (rc == PMIX_ERR_TIMEOUT)
        return err_set(FX_ERR_TIMEOUT, "PMIx_Fence timed out after %d s "
                       "(FABXFER_TIMEOUT_MS): a rank never reached it",
                       timeout);
    if (rc != PMIX_SUCCESS)
        return err_set(FX_ERR_BOOTSTRAP, "PMIx_Fence failed: %s",
                       PMIx_Error_string(rc));
    return FX_OK;
}

static fx_status_t pmix_get(struct boot *b, int rank, const char *key,
                            void **val, size_t *len)
{
    struct pmix_state *ps = b->priv;
    char fullkey[PMIX_MAX_KEYLEN + 1];
    pmix_value_t *v = NULL;
    pmix_proc_t peer;
    pmix_info_t info;
    int timeout = pmix_timeout_s(b);
    pmix_status_t rc;

    snprintf(fullkey, sizeof(fullkey), "fx.%s", key);
    PMIX_LOAD_PROCID(&peer, ps->me.nspace, (pmix_rank_t)rank);
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &timeout, PMIX_INT);
    rc = PMIx_Get(&peer, fullkey, &info, 1, &v);
    PMIX_INFO_DESTRUCT(&info);
    if (rc == PMIX_ERR_TIMEOUT)
        return err_set(FX_ERR_TIMEOUT, "PMIx_Get of key \"%s\" from rank %d "
                       "timed out after %d s", fullkey, rank, timeout);
    if (rc == PMIX_ERR_NOT_FOUND)
        return err_set(FX_ERR_BOOTSTRAP, "rank %d never published key "
                       "\"%s\" (PMIx_Get: %s)", rank, fullkey,
                       PMIx_Error_string(rc));
    if (rc != PMIX_SUCCESS || v == NULL || v->type != PMIX_BYTE_OBJECT) {
        if (v != NULL)
            PMIX_VALUE_RELEASE(v);
        return err_set(FX_ERR_BOOTSTRAP, "PMIx_Get of key \"%s\" from rank "
                       "%d failed: %s", fullkey, rank,
                       PMIx_Error_string(rc));
    }
    *len = v->data.bo.size;
    *val = malloc(*len ? *len : 1);
    /* an empty value (a source's bindings) may come with no bytes at all */
    if (*val != NULL && *len > 0)
        memcpy(*val, v->data.bo.bytes, *len);
    PMIX_VALUE_RELEASE(v);
    return *val ? FX_OK : err_set(FX_ERR_NOMEM, "no memory for %zu bytes",
                                  *len);
}

static void pmix_fini(struct boot *b)
{
    struct pmix_state *ps = b->priv;

    if (ps == NULL)
        return;
    if (ps->handler_set)
        PMIx_Deregister_event_handler(ps->handler, NULL, NULL);
    PMIx_Finalize(NULL, 0);
    free(pmix_dead);
    pmix_dead = NULL;
    pmix_dead_n = 0;
    free(ps);
}

const struct boot_ops boot_pmix_ops = {
    .name = "pmix",
    .init = pmix_init,
    .put = pmix_put,
    .fence = pmix_fence,
    .get = pmix_get,
    .fini = pmix_fini,
    .peer_dead = pmix_peer_dead,
};
