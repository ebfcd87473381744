/*
 * Shared by the libFuzzer harnesses of tests/fuzz: the entry points
 * libFuzzer calls, and FUZZ_ASSERT, which turns a broken invariant into a
 * crash that libFuzzer records (the sanitizers catch the rest).
 */
#ifndef FX_FUZZ_H
#define FX_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <fabxfer.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(cond, ...)                                            \
    do {                                                                  \
        if (!(cond)) {                                                    \
            fprintf(stderr, "%s:%d: invariant broken: %s: ", __FILE__,    \
                    __LINE__, #cond);                                     \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
            abort();                                                      \
        }                                                                 \
    } while (0)

/* A context of rank `rank` of a job of `size` without a bootstrap, over
 * prov (NULL: FABXFER_PROVIDER's); NULL, said on stderr as harness's, if
 * none opens. */
static inline fx_ctx_t *fuzz_ctx(const char *harness, const char *prov,
                                 int rank, int size, int single_host)
{
    fx_ctx_opts_t o;
    fx_ctx_t *c = NULL;

    fx_ctx_opts_init(&o);
    o.rank = rank;
    o.size = size;
    o.bootstrap = "none";
    o.provider = prov;
    o.single_host = single_host;
    if (fx_ctx_create(&o, &c) != FX_OK) {
        fprintf(stderr, "%s: no context over %s: %s\n", harness,
                prov ? prov : getenv("FABXFER_PROVIDER"),
                fx_last_error(NULL));
        return NULL;
    }
    return c;
}

#endif
