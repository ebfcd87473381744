/*
 * Fuzzes blob import (src/core/blob.c): the bytes a peer or the application
 * hands to fx_blob_import. One context of a four-rank job (rank 0, over
 * FABXFER_PROVIDER, tcp unless set, bootstrap none) is made once; every
 * input is imported into it. A blob that imports must name a rank of the
 * job; one that is refused must leave every peer as it was (address,
 * token), so that the right blob can still come.
 *
 * Seeds: with FX_FUZZ_BLOB_SEEDS=DIR set, the harness writes the blobs of
 * ranks 1-3 (none, one and three target regions) to DIR and exits; that
 * is how tests/fuzz/corpus/blob was made.
 */
#include <stdlib.h>
#include <string.h>

#include "core/ctx_int.h"
#include "fabric/fabric_int.h"
#include "fuzz.h"

#define FUZZ_JOB 4

static fx_ctx_t *ctx;

static fx_ctx_t *make_ctx(int rank)
{
    fx_ctx_t *c = fuzz_ctx("fuzz_blob", NULL, rank, FUZZ_JOB, 0);

    if (c == NULL)
        exit(1);
    return c;
}

/* The blobs of ranks 1-3, each with rank - 1 ... target regions. */
static void write_seeds(const char *dir)
{
    static char mem[3][4096];

    for (int rank = 1; rank < FUZZ_JOB; rank++) {
        fx_ctx_t *c = make_ctx(rank);
        fx_region_t *r;
        char path[4096];
        void *blob;
        size_t len;
        FILE *f;

        for (int i = 0; i < (rank == 3 ? 3 : rank - 1); i++)
            if (fx_region_register(c, mem[i], sizeof(mem[i]),
                                   FX_REGION_TARGET, &r) != FX_OK)
                exit(1);
        if (fx_blob_export(c, &blob, &len) != FX_OK)
            exit(1);
        snprintf(path, sizeof(path), "%s/rank%d.blob", dir, rank);
        f = fopen(path, "wb");
        if (f == NULL || fwrite(blob, 1, len, f) != len || fclose(f) != 0)
            exit(1);
        fx_blob_free(blob);
        fx_ctx_destroy(c);
    }
    exit(0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("FABXFER_PROVIDER", "tcp", 0);
    setenv("FABXFER_TIMEOUT_MS", "1000", 0);
    if (getenv("FX_FUZZ_BLOB_SEEDS") != NULL)
        write_seeds(getenv("FX_FUZZ_BLOB_SEEDS"));
    ctx = make_ctx(0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fab_peer before[FUZZ_JOB];
    fx_status_t st;

    memcpy(before, ctx->fab->peers, sizeof(before));
    st = fx_blob_import(ctx, data, size);
    FUZZ_ASSERT(st <= FX_OK, "fx_blob_import returned %d", st);
    if (st != FX_OK) {
        FUZZ_ASSERT(fx_last_error(ctx)[0] != '\0', "failed with no message");
        for (int r = 0; r < FUZZ_JOB; r++)
            FUZZ_ASSERT(memcmp(&before[r], &ctx->fab->peers[r],
                               sizeof(before[r])) == 0,
                        "a refused blob changed what rank %d is known as "
                        "(present %d -> %d, token %s): %s", r,
                        before[r].present, ctx->fab->peers[r].present,
                        before[r].token == ctx->fab->peers[r].token ? "kept"
                                                                  : "changed",
                        fx_last_error(ctx));
    }
    return 0;
}
