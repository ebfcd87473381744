/*
 * How fast one process writes 1 GiB into another with process_vm_writev
 * (CMA, what shm's large writes use), from 1 or more threads, against a
 * memcpy: whether two copiers per pair could pay (shm-share-2core.txt).
 *   cc -O2 -pthread cma-threads.c -o cma-threads && ./cma-threads 2 4
 * (threads, MiB per call). Not part of the build.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const size_t total = 1ul << 30;
static size_t chunk;
static char *src, *dst;
static pid_t owner;
static int nthreads;

static double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *copier(void *arg)
{
    size_t id = (size_t)arg;

    for (size_t o = id * chunk; o < total; o += (size_t)nthreads * chunk) {
        struct iovec l = {src + o, chunk}, r = {dst + o, chunk};

        if (process_vm_writev(owner, &l, 1, &r, 1, 0) != (ssize_t)chunk) {
            perror("process_vm_writev");
            exit(1);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t th[16];
    pid_t child;
    double t;

    if (argc != 3 || (nthreads = atoi(argv[1])) < 1 || nthreads > 16 ||
        (chunk = (size_t)atoi(argv[2]) << 20) == 0 || total % chunk != 0) {
        fprintf(stderr, "usage: %s THREADS MIB_PER_CALL\n", argv[0]);
        return 2;
    }
    /* the target's pages exist before the child writes into them */
    dst = mmap(NULL, total, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (dst == MAP_FAILED)
        return 1;
    memset(dst, 1, total);
    owner = getpid();
    if ((child = fork()) != 0) {
        waitpid(child, NULL, 0);
        return 0;
    }
    if ((src = malloc(total)) == NULL)
        return 1;
    memset(src, 2, total);
    for (int rep = 0; rep < 4; rep++) { /* the first pins cold pages */
        t = now();
        for (size_t i = 0; i < (size_t)nthreads; i++)
            pthread_create(&th[i], NULL, copier, (void *)i);
        for (int i = 0; i < nthreads; i++)
            pthread_join(th[i], NULL);
        printf("%d thread(s), %zu MiB a call: %.2f GB/s\n", nthreads,
               chunk >> 20, (double)total / (now() - t) / 1e9);
    }
    t = now();
    memmove(src, src + 1, total - 1);
    printf("memmove in one process: %.2f GB/s\n",
           (double)total / (now() - t) / 1e9);
    return 0;
}
