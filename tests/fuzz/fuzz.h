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

#endif
