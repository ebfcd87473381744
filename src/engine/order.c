/*
 * The order a source's steps go out in. A program is built group of
 * targets by group; posted in that order, a source keeps all its writes in
 * flight toward one target at a time, and every source starts with the
 * same target. Where the target does the work of a write (over shm the
 * target's own process copies each write, CMA), the other targets then
 * sit idle: Llama-3-8B's first layer, staged from 2 GPUs to 3 over shm on
 * the H200, moved 4.1 GB/s against naive's 5.3, naive keeping writes to
 * every target in flight at once. So the steps are dealt out one group at
 * a time in turn, and each source begins with a different group (its rank
 * modulo the groups), the order all-to-all exchanges use.
 *
 * Where a source's targets lie on different paths (shm on its host, the
 * NIC or tcp beyond), turns go first to the targets of the fastest path
 * (the pair's place in the path order): dealt in one turn with the
 * others, a same-host target took as long as the cross-host ones: a
 * mixed job's same-host pairs ran at 0.73 of an all-shm job's on 2 cores,
 * 1.66-1.78 with this order and each target told after its own last step
 * (pipeline.c; GPU targets are still told at the end, and stay at 0.23
 * with libfabric 2.6's slower tcp on the H200).
 *
 * Each target must still receive its writes in program order: its marks
 * (staged GPU targets) cover what it got so far as one range per region.
 * A group's writes lie in its own steps, except where its first writes
 * share a bucket that an earlier group opened; such a group waits until
 * that bucket has gone out.
 */
#include <stdlib.h>

#include "engine/engine.h"
#include "util/error.h"

/* The index of target (a rank) in p->targets, which is sorted. */
static size_t target_index(const struct eng_program *p, int target)
{
    size_t lo = 0, hi = (size_t)p->ntargets;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (p->targets[mid] < target)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* One turn for each group of class cls that may go (all groups: cls -1),
 * from group *l on; returns how many steps went out. */
static size_t one_round(struct eng_program *p, struct eng_step *steps,
                        size_t *done, const size_t *list, size_t *at,
                        const size_t *end, const size_t *first,
                        const size_t *group, const unsigned char *cls_of,
                        int cls, unsigned char *out, size_t ngroups,
                        size_t *l)
{
    size_t n = p->nsteps, before = *done;

    for (size_t k = 0; k < ngroups; k++, *l = (*l + 1) % ngroups) {
        size_t f = first[*l];

        if (at[*l] == end[*l] || (f < n && group[f] != *l && !out[f]) ||
            (cls >= 0 && cls_of != NULL && cls_of[*l] != cls))
            continue;
        out[list[at[*l]]] = 1;
        steps[(*done)++] = p->steps[list[at[*l]++]];
    }
    return *done - before;
}

fx_status_t eng_order_steps(struct eng_program *p, const size_t *group_of,
                            size_t ngroups, size_t start,
                            const unsigned char *cls_of)
{
    size_t n = p->nsteps, *group = NULL, *first = NULL, *end = NULL,
           *at = NULL, *fill = NULL, *list = NULL, done = 0, l;
    unsigned char *out = NULL;
    struct eng_step *steps = NULL;
    fx_status_t st = FX_OK;

    if (ngroups < 2 || n < 2)
        return FX_OK;
    l = start % ngroups;
    group = malloc(n * sizeof(*group));
    list = malloc(n * sizeof(*list));
    out = calloc(n, 1);
    steps = malloc(n * sizeof(*steps));
    first = malloc(ngroups * sizeof(*first));
    end = calloc(ngroups, sizeof(*end));
    at = calloc(ngroups, sizeof(*at));
    fill = calloc(ngroups, sizeof(*fill));
    if (group == NULL || list == NULL || out == NULL || steps == NULL ||
        first == NULL || end == NULL || at == NULL || fill == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory to order the program's steps");
        goto out;
    }
    for (size_t g = 0; g < ngroups; g++)
        first[g] = n;
    for (size_t i = n; i-- > 0;) {
        const struct eng_step *s = &p->steps[i];

        group[i] = s->nwrites == 0 ? (i + 1 < n ? group[i + 1] : 0)
                                  : group_of[target_index(
                                        p, p->writes[s->write0].target)];
        for (size_t w = s->write0; w < s->write0 + s->nwrites; w++)
            first[group_of[target_index(p, p->writes[w].target)]] = i;
        end[group[i]]++;
    }
    /* list holds each group's steps in program order, group after group:
     * group g's are list[at[g]..end[g]) */
    for (size_t g = 0, sum = 0; g < ngroups; g++) {
        at[g] = fill[g] = sum;
        sum += end[g];
        end[g] = sum;
    }
    for (size_t i = 0; i < n; i++)
        list[fill[group[i]]++] = i;
    /* One step per group in turn, the fastest class's groups alone while
     * they have steps. A group whose first writes are in another group's
     * step waits for it; the earliest step not yet out is always at the
     * head of a group that does not wait, so a round over every group
     * emits where the fastest class's all wait. */
    while (done < n) {
        int best = -1;

        for (size_t g = 0; cls_of != NULL && g < ngroups; g++)
            if (at[g] < end[g] && (best < 0 || cls_of[g] < best))
                best = cls_of[g];
        if (one_round(p, steps, &done, list, at, end, first, group, cls_of,
                      best, out, ngroups, &l) == 0)
            one_round(p, steps, &done, list, at, end, first, group, cls_of,
                      -1, out, ngroups, &l);
    }
    for (size_t i = 0, k = 0; i < n; i++)
        if (steps[i].kind == STEP_BUCKET)
            steps[i].bucket = (uint32_t)k++;
    free(p->steps);
    p->steps = steps;
    steps = NULL;
out:
    free(group);
    free(list);
    free(out);
    free(steps);
    free(first);
    free(end);
    free(at);
    free(fill);
    return st;
}
