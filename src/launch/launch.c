/*
 * The local launcher behind fabxfer-run: starts N copies of a program on this
 * host with the FABXFER_LOCAL_* variables that the "local" bootstrap reads,
 * waits for them, reports every rank that failed, and removes the rendezvous
 * folder in every case. The folder is new (mkdtemp, 0700) and the job's
 * nonce random, so that neither another user nor an earlier job can put
 * values in a rank's way.
 *
 * When one rank dies the others are left running on purpose: noticing a dead
 * peer within the timeout is fabxfer's own job (promise 3), and the tests
 * check exactly that. Only the job timeout, if any, kills ranks. With
 * FABXFER_RUN_RESTARTS (fabxfer-run --restart) a rank that dies is started
 * again, as often as that allows in all, with FABXFER_RESTARTED counting
 * its deaths: its new process joins the running session.
 *
 * The ranks share one process group of their own, so that a timeout kills
 * whatever they started too; since the terminal then no longer signals them,
 * SIGINT and SIGTERM are forwarded for the duration of the launch. A
 * launcher killed outright (SIGKILL, as a CI job's or a test's timeout
 * sends) forwards nothing: on Linux each rank asks the kernel for SIGKILL
 * when its launcher dies, so that no job outlives what started it.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "boot/boot.h"
#include "util/cfg.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/host.h"

#define POLL_FIRST_NS 200000L  /* quick jobs are reaped quickly */
#define POLL_CAP_NS 10000000L  /* a long job costs 100 wake-ups a second */

extern char **environ;

/* A rank's process. */
struct rank {
    pid_t pid;            /* 0: not started */
    int wstatus;          /* from waitpid; -1: reaped by someone else */
    unsigned char done;   /* reaped */
    unsigned char killed; /* killed by us (timeout, failed launch) */
    int restarts;         /* its deaths that were restarted */
};

struct job {
    int nranks;
    struct rank *ranks;   /* by rank */
    int alive;
    pid_t pgid;
    pid_t launcher;       /* this process: the ranks' parent */
    char dir[PATH_MAX];
    char **envp;
    char *dir_var, *size_var;
    char nonce_var[64];   /* FABXFER_LOCAL_NONCE=<16 hex digits> */
    char rank_var[64];    /* rewritten before each fork */
    /* torch.distributed's env:// variables, so that Python ranks (and
     * anything else that reads them) need no launcher of their own. */
    char trank_var[32], tlocal_var[40];     /* rewritten before each fork */
    char restarted_var[40];                 /* ... FABXFER_RESTARTED=k */
    int restarts_left;    /* FABXFER_RUN_RESTARTS, less those used */
    int lead;             /* the next process leads a new group: the
                           * first, or a restart when no rank is left */
    char *const *argv;
    char world_var[40], lworld_var[48];
    char maddr_var[40], mport_var[32];      /* "" where inherited */
    sig_atomic_t forwarded[2];
    struct sigaction old_int, old_term, old_chld;
    sigset_t old_mask;
};

/* Written by the handler, read by the wait loop, which forwards. */
static volatile sig_atomic_t sig_seen[2]; /* SIGINT, SIGTERM */
static int launch_busy;

static void on_signal(int sig)
{
    sig_seen[sig == SIGINT ? 0 : 1]++;
}

/* Appends to a fixed buffer, ending it with "..." once it is full. */
struct text {
    char buf[ERR_MSG_MAX];
    size_t used;
};

__attribute__((format(printf, 2, 3)))
static void text_add(struct text *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (t->used >= sizeof(t->buf) - 1)
        return;
    va_start(ap, fmt);
    n = vsnprintf(t->buf + t->used, sizeof(t->buf) - t->used, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    t->used += (size_t)n;
    if (t->used >= sizeof(t->buf) - 1) {
        t->used = sizeof(t->buf) - 1;
        memcpy(t->buf + t->used - 3, "...", 3);
    }
}

static void sig_text(struct text *t, int sig)
{
    const char *abbrev = sigabbrev_np(sig);

    if (abbrev != NULL)
        text_add(t, "SIG%s", abbrev);
    else
        text_add(t, "%d", sig);
}

/* 64 bits from getrandom as hex: the ranks write it into every file, and
 * a file without it is another job's. */
static fx_status_t make_nonce(struct job *j)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[BOOT_LOCAL_NONCE_LEN / 2];
    size_t got = 0;
    int at;

    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return err_set(FX_ERR_SYSTEM, "getrandom for the job's nonce "
                           "failed: %s", strerror(errno));
        got += (size_t)n;
    }
    at = snprintf(j->nonce_var, sizeof(j->nonce_var), "%s=",
                  cfg_name(CFG_LOCAL_NONCE));
    for (size_t i = 0; i < sizeof(raw); i++) {
        j->nonce_var[at++] = hex[raw[i] >> 4];
        j->nonce_var[at++] = hex[raw[i] & 0xf];
    }
    j->nonce_var[at] = '\0';
    return FX_OK;
}

#define PORT_TRIES 200

/* A TCP port on the loopback that nobody holds now, for MASTER_PORT: at
 * random below the kernel's ephemeral range, not one the kernel gave for
 * port 0, since that one is the kernel's to give again, and a tcp;ofi_rxm
 * endpoint of the job got it and lost it to the MASTER_PORT listener
 * ("Address already in use"). Two jobs on a host rarely draw the same. */
static int free_port(void)
{
    int low = host_ephemeral_low();

    for (int tries = 0; tries < PORT_TRIES; tries++) {
        struct sockaddr_in a = {.sin_family = AF_INET};
        unsigned int r;
        int fd, ok;

        if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
            r = (unsigned int)rand();
        a.sin_port = htons((uint16_t)(10000 + r % (unsigned)(low - 10000)));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
            return -1;
        ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
        close(fd);
        if (ok)
            return ntohs(a.sin_port);
    }
    return -1;
}

/* torch's variables; MASTER_ADDR and MASTER_PORT only where the caller
 * did not set them (a job spread over hosts would). */
static void torch_env(struct job *j)
{
    int port;

    snprintf(j->world_var, sizeof(j->world_var), "WORLD_SIZE=%d", j->nranks);
    snprintf(j->lworld_var, sizeof(j->lworld_var), "LOCAL_WORLD_SIZE=%d",
             j->nranks);
    j->maddr_var[0] = j->mport_var[0] = '\0';
    if (getenv("MASTER_ADDR") == NULL)
        snprintf(j->maddr_var, sizeof(j->maddr_var), "MASTER_ADDR=127.0.0.1");
    if (getenv("MASTER_PORT") == NULL && (port = free_port()) > 0)
        snprintf(j->mport_var, sizeof(j->mport_var), "MASTER_PORT=%d", port);
}

static fx_status_t build_env(struct job *j)
{
    const char *names[] = {cfg_name(CFG_LOCAL_DIR), cfg_name(CFG_LOCAL_RANK),
                           cfg_name(CFG_LOCAL_SIZE),
                           cfg_name(CFG_LOCAL_NONCE), "RANK", "LOCAL_RANK",
                           "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                           cfg_name(CFG_RESTARTED)};
    const int nnames = sizeof(names) / sizeof(names[0]);
    size_t n = 0, k = 0;

    if (asprintf(&j->dir_var, "%s=%s", names[0], j->dir) < 0) {
        j->dir_var = NULL;
        return err_set(FX_ERR_NOMEM, "out of memory building the ranks' "
                       "environment");
    }
    if (asprintf(&j->size_var, "%s=%d", names[2], j->nranks) < 0) {
        j->size_var = NULL;
        return err_set(FX_ERR_NOMEM, "out of memory building the ranks' "
                       "environment");
    }
    torch_env(j);
    while (environ != NULL && environ[n] != NULL)
        n++;
    j->envp = calloc(n + (size_t)nnames + 3, sizeof(*j->envp));
    if (j->envp == NULL)
        return err_set(FX_ERR_NOMEM, "out of memory building the ranks' "
                       "environment");
    /* Our own values replace any inherited ones (a launcher inside a rank). */
    for (size_t i = 0; i < n; i++) {
        int ours = 0;

        for (int v = 0; v < nnames; v++) {
            size_t len = strlen(names[v]);

            if (strncmp(environ[i], names[v], len) == 0 &&
                environ[i][len] == '=')
                ours = 1;
        }
        if (!ours)
            j->envp[k++] = environ[i];
    }
    j->envp[k++] = j->dir_var;
    j->envp[k++] = j->rank_var;
    j->envp[k++] = j->size_var;
    j->envp[k++] = j->nonce_var;
    j->envp[k++] = j->trank_var;
    j->envp[k++] = j->tlocal_var;
    j->envp[k++] = j->world_var;
    j->envp[k++] = j->lworld_var;
    j->envp[k++] = j->restarted_var;
    if (j->maddr_var[0] != '\0')
        j->envp[k++] = j->maddr_var;
    if (j->mport_var[0] != '\0')
        j->envp[k++] = j->mport_var;
    j->envp[k] = NULL;
    return FX_OK;
}

/* In the child, between fork and exec: async-signal-safe calls only. */
static void exec_rank(struct job *j, int rank, char *const argv[])
{
    char msg[512];
    int len, err;

    if (setpgid(0, j->lead ? 0 : j->pgid) != 0) {
        err = errno;
        len = snprintf(msg, sizeof(msg), "fabxfer-run: rank %d: cannot join "
                       "the job's process group: %s\n", rank, strerror(err));
        goto report;
    }
#ifdef __linux__
    /* Kept across exec. The launcher may have died before this call:
     * then the rank never runs. */
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != j->launcher)
        _exit(127);
#endif
    sigaction(SIGINT, &j->old_int, NULL);
    sigaction(SIGTERM, &j->old_term, NULL);
    sigaction(SIGCHLD, &j->old_chld, NULL);
    sigprocmask(SIG_SETMASK, &j->old_mask, NULL);
    execvpe(argv[0], argv, j->envp);
    err = errno;
    len = snprintf(msg, sizeof(msg), "fabxfer-run: rank %d: cannot run %s: "
                   "%s\n", rank, argv[0], strerror(err));
report:
    if (len > 0)
        (void)!write(STDERR_FILENO, msg,
                     (size_t)len < sizeof(msg) ? (size_t)len : sizeof(msg) - 1);
    _exit(127);
}

static fx_status_t spawn_rank(struct job *j, int r)
{
    pid_t pid;

    snprintf(j->rank_var, sizeof(j->rank_var), "%s=%d",
             cfg_name(CFG_LOCAL_RANK), r);
    snprintf(j->trank_var, sizeof(j->trank_var), "RANK=%d", r);
    snprintf(j->tlocal_var, sizeof(j->tlocal_var), "LOCAL_RANK=%d", r);
    snprintf(j->restarted_var, sizeof(j->restarted_var), "%s=%d",
             cfg_name(CFG_RESTARTED), j->ranks[r].restarts);
    pid = fork();
    if (pid < 0)
        return err_set(FX_ERR_SYSTEM, "fork for rank %d of %d failed: %s",
                       r, j->nranks, strerror(errno));
    if (pid == 0)
        exec_rank(j, r, j->argv);
    if (j->lead)
        j->pgid = pid;
    j->lead = 0;
    /* Also from this side, so that the group is complete before any
     * kill; EACCES only means the child got there first and exec'd. */
    setpgid(pid, j->pgid);
    j->ranks[r].pid = pid;
    j->ranks[r].done = 0;
    j->alive++;
    return FX_OK;
}

static fx_status_t spawn_ranks(struct job *j)
{
    fx_status_t st = FX_OK;

    j->lead = 1;
    for (int r = 0; r < j->nranks && st == FX_OK; r++)
        st = spawn_rank(j, r);
    return st;
}

/* A rank that died, started again where FABXFER_RUN_RESTARTS allows:
 * its new process joins the running session (FABXFER_RESTARTED). */
static void restart(struct job *j, int r)
{
    int st = j->ranks[r].wstatus;
    sigset_t block, old;

    /* not after the user's SIGINT or SIGTERM, which ended it on purpose */
    if (j->restarts_left == 0 || j->ranks[r].killed || sig_seen[0] ||
        sig_seen[1] || (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0))
        return;
    j->restarts_left--;
    j->ranks[r].restarts++;
    fprintf(stderr, "fabxfer-run: starting rank %d again (%s=%d; %d "
            "restart(s) left)\n", r, cfg_name(CFG_RESTARTED),
            j->ranks[r].restarts, j->restarts_left);
    /* as at the start: signals held while forking */
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    /* with no rank left the job's group is gone: a new one */
    j->lead = j->alive == 0;
    if (spawn_rank(j, r) != FX_OK) {
        fprintf(stderr, "fabxfer-run: %s\n", err_last());
        err_clear();
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void report_exit(const struct job *j, int r)
{
    int st = j->ranks[r].wstatus;
    struct text t = {.used = 0};

    if (j->ranks[r].killed ||
        (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0))
        return;
    text_add(&t, "fabxfer-run: rank %d (pid %d) ", r, (int)j->ranks[r].pid);
    if (st == -1) {
        text_add(&t, "was reaped by someone else; its status is unknown");
    } else if (WIFEXITED(st)) {
        text_add(&t, "exited with status %d", WEXITSTATUS(st));
    } else {
        text_add(&t, "killed by signal ");
        sig_text(&t, WTERMSIG(st));
        if (WCOREDUMP(st))
            text_add(&t, " (core dumped)");
    }
    fprintf(stderr, "%s\n", t.buf);
}

static void forward_signals(struct job *j)
{
    static const int sigs[2] = {SIGINT, SIGTERM};

    for (int i = 0; i < 2; i++) {
        sig_atomic_t seen = sig_seen[i];

        /* An unreaped rank keeps the group's id from being reused. */
        if (seen != j->forwarded[i] && j->alive > 0 && j->pgid > 0)
            kill(-j->pgid, sigs[i]);
        j->forwarded[i] = seen;
    }
}

static void reap(struct job *j, int r, int options)
{
    int st;
    pid_t w;

    do
        w = waitpid(j->ranks[r].pid, &st, options);
    while (w < 0 && errno == EINTR);
    if (w == 0)
        return;
    j->ranks[r].wstatus = w < 0 ? -1 : st; /* ECHILD: someone else reaped it */
    j->ranks[r].done = 1;
    j->alive--;
    report_exit(j, r);
}

/* Returns 1 if the timeout killed ranks. */
static int wait_ranks(struct job *j, int timeout_ms)
{
    struct timespec nap = {0, POLL_FIRST_NS};
    double start = clock_now();

    for (;;) {
        forward_signals(j);
        for (int r = 0; r < j->nranks; r++)
            if (j->ranks[r].pid > 0 && !j->ranks[r].done) {
                reap(j, r, WNOHANG);
                if (j->ranks[r].done)
                    restart(j, r);
            }
        if (j->alive == 0)
            return 0;
        if (timeout_ms > 0 && (clock_now() - start) * 1000.0 >= timeout_ms)
            break;
        nanosleep(&nap, NULL); /* a forwarded signal cuts it short */
        nap.tv_nsec = nap.tv_nsec * 2 > POLL_CAP_NS ? POLL_CAP_NS
                                                    : nap.tv_nsec * 2;
    }
    kill(-j->pgid, SIGKILL);
    for (int r = 0; r < j->nranks; r++) {
        if (j->ranks[r].pid <= 0 || j->ranks[r].done)
            continue;
        kill(j->ranks[r].pid, SIGKILL); /* unreaped, so still ours */
        j->ranks[r].killed = 1;
        reap(j, r, 0);
    }
    return 1;
}

/* Removes what the ranks left: plain files, as the local bootstrap makes. */
static void remove_rendezvous(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;

    if (d != NULL) {
        while ((e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    if (rmdir(dir) != 0)
        fprintf(stderr, "fabxfer-run: cannot remove rendezvous folder %s: "
                "%s\n", dir, strerror(errno));
}

static fx_status_t summarize(const struct job *j, int timeout_ms,
                             int timed_out)
{
    struct text failed = {.used = 0}, dead = {.used = 0};
    int nfailed = 0, ndead = 0;

    for (int r = 0; r < j->nranks; r++) {
        int st = j->ranks[r].wstatus;

        if (j->ranks[r].killed) {
            text_add(&dead, "%s%d", ndead++ ? ", " : "", r);
            continue;
        }
        if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
            continue;
        text_add(&failed, "%srank %d (", nfailed++ ? ", " : "", r);
        if (st == -1) {
            text_add(&failed, "status unknown)");
        } else if (WIFEXITED(st)) {
            text_add(&failed, "exit status %d)", WEXITSTATUS(st));
        } else {
            sig_text(&failed, WTERMSIG(st));
            text_add(&failed, ")");
        }
    }
    if (timed_out) {
        fprintf(stderr, "fabxfer-run: timed out after %d ms; killed rank(s) "
                "%s\n", timeout_ms, dead.buf);
        if (nfailed > 0)
            return err_set(FX_ERR_TIMEOUT, "job timed out after %d ms with "
                           "rank(s) %s still running (killed); failed "
                           "before: %s", timeout_ms, dead.buf, failed.buf);
        return err_set(FX_ERR_TIMEOUT, "job timed out after %d ms with "
                       "rank(s) %s still running (killed)", timeout_ms,
                       dead.buf);
    }
    if (nfailed > 0)
        return err_set(FX_ERR_PEER, "%d of %d ranks failed: %s", nfailed,
                       j->nranks, failed.buf);
    return FX_OK;
}

static fx_status_t make_rendezvous(struct job *j)
{
    const char *tmp = getenv("TMPDIR");

    if (tmp == NULL || tmp[0] == '\0')
        tmp = "/tmp";
    if (snprintf(j->dir, sizeof(j->dir), "%s/fabxfer.XXXXXX", tmp) >=
        (int)sizeof(j->dir) - 256) /* room for the bootstrap's file names */
        return err_set(FX_ERR_INVALID, "TMPDIR is too long (%zu bytes)",
                       strlen(tmp));
    /* mkdtemp makes it 0700 whatever the umask: the ranks refuse a folder
     * that another user or group may write in. */
    if (mkdtemp(j->dir) == NULL)
        return err_set(FX_ERR_SYSTEM, "cannot make the rendezvous folder "
                       "%s: %s", j->dir, strerror(errno));
    return FX_OK;
}

static void catch_signals(struct job *j)
{
    struct sigaction sa;
    sigset_t block;

    sig_seen[0] = sig_seen[1] = 0;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal; /* no SA_RESTART: wake the wait loop */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &j->old_int);
    sigaction(SIGTERM, &sa, &j->old_term);
    /* What the caller ignores (nohup, a background job) stays ignored. */
    if (j->old_int.sa_handler == SIG_IGN)
        sigaction(SIGINT, &j->old_int, NULL);
    if (j->old_term.sa_handler == SIG_IGN)
        sigaction(SIGTERM, &j->old_term, NULL);
    /* Ignored SIGCHLD (or SA_NOCLDWAIT) would reap the ranks behind our
     * back, and an application's handler might too. */
    sa.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &sa, &j->old_chld);
    /* Held back while forking; the wait loop forwards what arrived. */
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &j->old_mask);
}

static void restore_signals(struct job *j)
{
    sigaction(SIGINT, &j->old_int, NULL);
    sigaction(SIGTERM, &j->old_term, NULL);
    sigaction(SIGCHLD, &j->old_chld, NULL);
}

fx_status_t fx_launch_local(int nranks, char *const argv[], int timeout_ms)
{
    struct job *j;
    fx_status_t st;

    if (nranks < 1 || argv == NULL || argv[0] == NULL || timeout_ms < 0)
        return err_set(FX_ERR_INVALID, "fx_launch_local: need nranks >= 1 "
                       "(got %d), a program (argv %s) and timeout_ms >= 0 "
                       "(got %d)", nranks, argv == NULL ? "NULL" :
                       argv[0] == NULL ? "empty" : "given", timeout_ms);
    if (__atomic_exchange_n(&launch_busy, 1, __ATOMIC_ACQ_REL))
        return err_set(FX_ERR_STATE, "fx_launch_local is already running in "
                       "this process (one launch at a time)");
    j = calloc(1, sizeof(*j));
    if (j == NULL) {
        st = err_set(FX_ERR_NOMEM, "out of memory launching %d ranks", nranks);
        goto release_busy;
    }
    j->nranks = nranks;
    j->launcher = getpid();
    j->ranks = calloc((size_t)nranks, sizeof(*j->ranks));
    j->argv = argv;
    if (j->ranks == NULL) {
        st = err_set(FX_ERR_NOMEM, "out of memory launching %d ranks", nranks);
        goto free_job;
    }
    st = make_nonce(j);
    if (st == FX_OK) {
        long n;

        st = cfg_long(CFG_RUN_RESTARTS, 0, 65535, &n);
        j->restarts_left = (int)n;
    }
    if (st != FX_OK)
        goto free_job;
    st = make_rendezvous(j);
    if (st != FX_OK)
        goto free_job;
    st = build_env(j);
    if (st != FX_OK)
        goto remove_dir;

    catch_signals(j);
    st = spawn_ranks(j);
    if (st != FX_OK && j->alive > 0)
        kill(-j->pgid, SIGKILL); /* half a job would only hang at a fence */
    pthread_sigmask(SIG_SETMASK, &j->old_mask, NULL);
    if (st != FX_OK) {
        for (int r = 0; r < nranks; r++)
            if (j->ranks[r].pid > 0)
                j->ranks[r].killed = 1; /* killed by us: no line per rank */
        for (int r = 0; r < nranks; r++)
            if (j->ranks[r].pid > 0)
                reap(j, r, 0);
    } else {
        st = summarize(j, timeout_ms, wait_ranks(j, timeout_ms));
    }
    restore_signals(j);
remove_dir:
    remove_rendezvous(j->dir);
free_job:
    free(j->envp);
    free(j->dir_var);
    free(j->size_var);
    free(j->ranks);
    free(j);
release_busy:
    __atomic_store_n(&launch_busy, 0, __ATOMIC_RELEASE);
    return st;
}
