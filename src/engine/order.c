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

size_t eng_target_index(const struct eng_program *p, int target)
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

/* The dealing: each group's steps in program order, group after group
 * (group g's are list[at[g]..end[g])), the step each group's first write
 * is in (first), and what went out so far. */
struct deal {
    const struct eng_program *p;
    size_t *group, *list, *first, *end, *at, *fill;
    const unsigned char *cls_of; /* NULL: one class */
    unsigned char *out;          /* per step: gone out */
    struct eng_step *steps;      /* the new order */
    size_t ngroups, done, l;     /* groups, steps out, whose turn */
};

/* One turn for each group of class cls that may go (all groups: cls -1),
 * from group d->l on; returns how many steps went out. */
static size_t one_round(struct deal *d, int cls)
{
    size_t n = d->p->nsteps, before = d->done;

    for (size_t k = 0; k < d->ngroups;
         k++, d->l = (d->l + 1) % d->ngroups) {
        size_t g = d->l, f = d->first[g];

        if (d->at[g] == d->end[g] || (f < n && d->group[f] != g &&
                                      !d->out[f]) ||
            (cls >= 0 && d->cls_of != NULL && d->cls_of[g] != cls))
            continue;
        d->out[d->list[d->at[g]]] = 1;
        d->steps[d->done++] = d->p->steps[d->list[d->at[g]++]];
    }
    return d->done - before;
}

fx_status_t eng_order_steps(struct eng_program *p, const size_t *group_of,
                            size_t ngroups, size_t start,
                            const unsigned char *cls_of)
{
    struct deal d = {.p = p, .cls_of = cls_of, .ngroups = ngroups};
    size_t n = p->nsteps;
    fx_status_t st = FX_OK;

    if (ngroups < 2 || n < 2)
        return FX_OK;
    d.l = start % ngroups;
    d.group = malloc(n * sizeof(*d.group));
    d.list = malloc(n * sizeof(*d.list));
    d.out = calloc(n, 1);
    d.steps = malloc(n * sizeof(*d.steps));
    d.first = malloc(ngroups * sizeof(*d.first));
    d.end = calloc(ngroups, sizeof(*d.end));
    d.at = calloc(ngroups, sizeof(*d.at));
    d.fill = calloc(ngroups, sizeof(*d.fill));
    if (d.group == NULL || d.list == NULL || d.out == NULL ||
        d.steps == NULL || d.first == NULL || d.end == NULL ||
        d.at == NULL || d.fill == NULL) {
        st = err_set(FX_ERR_NOMEM, "no memory to order the program's steps");
        goto out;
    }
    for (size_t g = 0; g < ngroups; g++)
        d.first[g] = n;
    for (size_t i = n; i-- > 0;) {
        const struct eng_step *s = &p->steps[i];

        d.group[i] = s->nwrites == 0 ? (i + 1 < n ? d.group[i + 1] : 0)
                                    : group_of[eng_target_index(
                                          p, p->writes[s->write0].target)];
        for (size_t w = s->write0; w < s->write0 + s->nwrites; w++)
            d.first[group_of[eng_target_index(p, p->writes[w].target)]] = i;
        d.end[d.group[i]]++;
    }
    for (size_t g = 0, sum = 0; g < ngroups; g++) {
        d.at[g] = d.fill[g] = sum;
        sum += d.end[g];
        d.end[g] = sum;
    }
    for (size_t i = 0; i < n; i++)
        d.list[d.fill[d.group[i]]++] = i;
    /* One step per group in turn, the fastest class's groups alone while
     * they have steps. A group whose first writes are in another group's
     * step waits for it; the earliest step not yet out is always at the
     * head of a group that does not wait, so a round over every group
     * emits where the fastest class's all wait. */
    while (d.done < n) {
        int best = -1;

        for (size_t g = 0; cls_of != NULL && g < ngroups; g++)
            if (d.at[g] < d.end[g] && (best < 0 || cls_of[g] < best))
                best = cls_of[g];
        if (one_round(&d, best) == 0)
            one_round(&d, -1);
    }
    for (size_t i = 0, k = 0; i < n; i++)
        if (d.steps[i].kind == STEP_BUCKET)
            d.steps[i].bucket = (uint32_t)k++;
    free(p->steps);
    p->steps = d.steps;
    d.steps = NULL;
out:
    free(d.group);
    free(d.list);
    free(d.out);
    free(d.steps);
    free(d.first);
    free(d.end);
    free(d.at);
    free(d.fill);
    return st;
}
