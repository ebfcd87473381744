/*
 * The local bootstrap's variables for one rank, as fabxfer-run sets them:
 * test_boot's ranks run on them, test_badinput replaces one at a time.
 */
#ifndef FX_TESTS_LOCAL_ENV_H
#define FX_TESTS_LOCAL_ENV_H

#include <stdio.h>
#include <stdlib.h>

/* Rank rank of size, meeting in folder dir, of the job of nonce. */
static inline void local_env_set(const char *dir, int rank, int size,
                                 const char *nonce)
{
    char num[16];

    setenv("FABXFER_LOCAL_DIR", dir, 1);
    snprintf(num, sizeof(num), "%d", rank);
    setenv("FABXFER_LOCAL_RANK", num, 1);
    snprintf(num, sizeof(num), "%d", size);
    setenv("FABXFER_LOCAL_SIZE", num, 1);
    setenv("FABXFER_LOCAL_NONCE", nonce, 1);
}

#endif
