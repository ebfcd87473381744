/*
 * fabxfer-plan's tensor list, short: tensors that differ only by the
 * numbers in their names ("model.layers.7.mlp.experts.12.up_proj.weight")
 * and share a dtype and a shape are one entry with ranges
 * ("model.layers.{1..60}.mlp.experts.{0..383}.up_proj.weight") where
 * their numbers fill a whole product of ranges, so that Kimi-K2's 69,975
 * tensors take kilobytes. The manifest reads the ranges back in the same
 * order for any rank (the first range slowest).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MAX_NUMS 4 /* the manifest's JSON_RANGES_MAX */

struct family {
    char *tmpl;              /* the name, each number as "{}" */
    uint32_t first;          /* its first tensor: dtype, shape, scale */
    int nnum;
    int64_t lo[MAX_NUMS], hi[MAX_NUMS];
    uint64_t count;
};

/* name's template: each dot-separated component that is a number becomes
 * "{}" and goes to nums; -1 past MAX_NUMS numbers or out's size. */
static int name_template(const char *name, char *out, size_t len,
                         int64_t *nums, int *n)
{
    size_t o = 0;

    *n = 0;
    for (const char *p = name; *p;) {
        size_t d = strspn(p, "0123456789");

        if (d > 0 && d < 10 && (p == name || p[-1] == '.') &&
            (p[d] == '.' || p[d] == '\0')) {
            if (*n == MAX_NUMS || o + 3 > len)
                return -1;
            nums[(*n)++] = strtoll(p, NULL, 10);
            memcpy(out + o, "{}", 2);
            o += 2;
            p += d;
            continue;
        }
        if (o + 2 > len)
            return -1;
        out[o++] = *p++;
    }
    out[o] = '\0';
    return 0;
}

static int same_kind(const struct model_tensor *a,
                     const struct model_tensor *b)
{
    return strcmp(a->dtype, b->dtype) == 0 &&
           strcmp(a->tdtype, b->tdtype) == 0 && a->ndim == b->ndim &&
           memcmp(a->shape, b->shape, sizeof(a->shape[0]) * a->ndim) == 0 &&
           (a->scale >= 0) == (b->scale >= 0);
}

/* tmpl with its "{}" filled from the family's ranges (or a tensor's
 * numbers when nums is set). */
static void put_name(FILE *f, const char *tmpl, const struct family *fa,
                     const int64_t *nums)
{
    int k = 0;

    for (const char *p = tmpl; *p; p++) {
        if (p[0] == '{' && p[1] == '}') {
            if (nums != NULL)
                fprintf(f, "%lld", (long long)nums[k]);
            else
                fprintf(f, "{%lld..%lld}", (long long)fa->lo[k],
                        (long long)fa->hi[k]);
            k++;
            p++;
        } else {
            fputc(*p, f);
        }
    }
}

static void put_entry(FILE *f, const struct model *m, uint32_t t,
                      const struct family *fa, int ranged, int *first)
{
    const struct model_tensor *w = &m->t[t];
    char tmpl[512];
    int64_t nums[MAX_NUMS];
    int n;

    fprintf(f, "%s{\"name\": \"", *first ? "" : ",\n");
    *first = 0;
    if (ranged)
        put_name(f, fa->tmpl, fa, NULL);
    else
        fputs(w->name, f);
    fprintf(f, "\", \"dtype\": \"%s\", \"shape\": [", w->dtype);
    for (int d = 0; d < w->ndim; d++)
        fprintf(f, "%s%lld", d ? ", " : "", (long long)w->shape[d]);
    fprintf(f, "]");
    if (w->scale >= 0) {
        fprintf(f, ", \"target_dtype\": \"%s\", \"block_scale\": "
                "{\"tensor\": \"", w->tdtype);
        if (ranged &&
            name_template(m->t[w->scale].name, tmpl, sizeof(tmpl), nums,
                          &n) == 0 && n == fa->nnum)
            put_name(f, tmpl, fa, NULL);
        else
            fputs(m->t[w->scale].name, f);
        fprintf(f, "\", \"block\": [%d, %d]}", MODEL_FP8_BLOCK,
                MODEL_FP8_BLOCK);
    }
    fprintf(f, "}");
}

int plan_put_tensors(FILE *f, const struct model *m)
{
    struct family *fam = calloc(m->nt + 1, sizeof(*fam));
    uint32_t *of = calloc(m->nt + 1, sizeof(*of)), nfam = 0;
    int first = 1, rc = -1;

    if (fam == NULL || of == NULL)
        goto out;
    for (uint32_t t = 0; t < m->nt; t++) {
        char tmpl[512];
        int64_t nums[MAX_NUMS] = {0};
        int n, ok = name_template(m->t[t].name, tmpl, sizeof(tmpl), nums,
                                  &n) == 0;
        uint32_t k = nfam;

        for (uint32_t j = 0; ok && j < nfam; j++)
            if (fam[j].nnum == n && strcmp(fam[j].tmpl, tmpl) == 0 &&
                same_kind(&m->t[fam[j].first], &m->t[t])) {
                k = j;
                break;
            }
        if (k == nfam) { /* a new family (or a name of its own) */
            fam[k].tmpl = strdup(ok ? tmpl : m->t[t].name);
            if (fam[k].tmpl == NULL)
                goto out;
            fam[k].first = t;
            fam[k].nnum = ok ? n : 0;
            memcpy(fam[k].lo, nums, sizeof(nums));
            memcpy(fam[k].hi, nums, sizeof(nums));
            nfam++;
        }
        for (int i = 0; i < fam[k].nnum; i++) {
            if (nums[i] < fam[k].lo[i])
                fam[k].lo[i] = nums[i];
            if (nums[i] > fam[k].hi[i])
                fam[k].hi[i] = nums[i];
        }
        fam[k].count++;
        of[t] = k;
    }
    for (uint32_t k = 0; k < nfam; k++) {
        uint64_t product = 1;

        /* Names are unique, so as many as the product fill it. */
        for (int i = 0; i < fam[k].nnum; i++)
            product *= (uint64_t)(fam[k].hi[i] - fam[k].lo[i] + 1);
        if (fam[k].nnum > 0 && fam[k].count > 1 && fam[k].count == product) {
            put_entry(f, m, fam[k].first, &fam[k], 1, &first);
            continue;
        }
        for (uint32_t t = fam[k].first; t < m->nt; t++)
            if (of[t] == k)
                put_entry(f, m, t, &fam[k], 0, &first);
    }
    rc = 0;
out:
    for (uint32_t k = 0; fam != NULL && k < nfam; k++)
        free(fam[k].tmpl);
    free(fam);
    free(of);
    return rc;
}
