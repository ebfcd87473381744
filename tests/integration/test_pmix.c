/*
 * The PMIx bootstrap under a real PMIx server (run by test_mpirun.sh under
 * mpirun): rank and size from the job, put/fence/get round trips, and the
 * failures users meet: a key a peer never published, a get that times out,
 * PMIx_Init without a server. Links the internal library to reach the
 * bootstrap table directly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "boot/boot.h"
#include "util/clock.h"
#include "util/error.h"

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);              \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, " (%s)\n", err_last());                          \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

int main(void)
{
    struct boot *b = NULL;
    char mine[32], want[32];
    void *val = NULL;
    size_t len = 0;
    fx_status_t st;
    double t0;

    if (getenv("PMIX_RANK") == NULL) {
        /* Outside a PMIx job: PMIx_Init's reason must reach the user. */
        st = boot_open("pmix", 2000, &b);
        CHECK(st == FX_ERR_BOOTSTRAP && b == NULL, "pmix without a server");
        CHECK(strstr(err_last(), "PMIx_Init failed") != NULL,
              "message: %s", err_last());
        printf("ok   no server: %s\n", err_last());
        return 0;
    }
    st = boot_open("auto", 2000, &b);
    CHECK(st == FX_OK && b != NULL, "auto under mpirun");
    CHECK(strcmp(b->ops->name, "pmix") == 0, "auto chose %s", b->ops->name);
    CHECK(b->rank == atoi(getenv("PMIX_RANK")), "rank %d", b->rank);
    CHECK(b->size >= 2, "size %d", b->size);

    snprintf(mine, sizeof(mine), "hello from %d", b->rank);
    CHECK(b->ops->put(b, "greet", mine, strlen(mine) + 1) == FX_OK, "put");
    CHECK(b->ops->fence(b) == FX_OK, "fence");
    for (int r = 0; r < b->size; r++) {
        snprintf(want, sizeof(want), "hello from %d", r);
        CHECK(b->ops->get(b, r, "greet", &val, &len) == FX_OK, "get %d", r);
        CHECK(len == strlen(want) + 1 && memcmp(val, want, len) == 0,
              "value of rank %d", r);
        free(val);
    }
    /* A key nobody published: the error names the key and the peer, and
     * comes back within the timeout (not found, or timed out). */
    t0 = clock_now();
    st = b->ops->get(b, (b->rank + 1) % b->size, "never", &val, &len);
    CHECK(st == FX_ERR_BOOTSTRAP || st == FX_ERR_TIMEOUT, "missing key: %d",
          st);
    snprintf(want, sizeof(want), "rank %d", (b->rank + 1) % b->size);
    CHECK(strstr(err_last(), "fx.never") && strstr(err_last(), want),
          "message names key and rank: %s", err_last());
    CHECK(clock_now() - t0 < 10, "missing key took %.1f s", clock_now() - t0);
    printf("ok   rank %d: missing key after %.2f s: %s\n", b->rank, clock_now() - t0,
           err_last());
    CHECK(boot_barrier(b, "test") == FX_OK, "barrier");
    boot_close(b);
    printf("ok   rank %d: pmix bootstrap\n", atoi(getenv("PMIX_RANK")));
    return 0;
}
