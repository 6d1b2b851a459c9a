/*
 * sluice-http -w N: the pre-fork supervisor.  The parent makes the two
 * shared limiters (one file each, see sluice_open_shared), binds the
 * listening socket, forks N workers that each attach to both limiters and
 * serve connections from the one socket, and then only handles signals:
 *   SIGHUP          re-read the limits file and apply it to the shared
 *                   limiters (sluice_set_policy): every worker sees it at once;
 *   SIGCHLD         a worker that died (even by SIGKILL, inside a decision)
 *                   is replaced; the others never wait for it;
 *   SIGTERM/SIGINT  stop the workers (SIGTERM, then SIGKILL after 5 s),
 *                   remove the limiter files, exit.
 * The parent holds no limiter handle while it forks, so a worker starts
 * with nothing of the parent's but the socket.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "http.h"

/* A worker that dies this soon after it started, this many times in a row,
 * is not replaced again: the server stops (a bad setup, not bad luck).
 * SIGKILL does not count: it comes from outside (an operator, the OOM
 * killer), never from the worker's own failure, so a burst of kills is
 * answered with replacements, not with a stop. */
enum { QUICK_DEATH_MS = 1000, QUICK_DEATHS_MAX = 5, STOP_GRACE_MS = 5000 };

struct slot {
    pid_t pid;        /* 0: not running */
    uint64_t started; /* ms */
    int quick_deaths;
};

static uint64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Make the shared limiter files afresh (a stale one is removed first). */
static int shared_create(const struct http_prefork *pf, const struct sluice_policy *ip,
                         const struct sluice_policy *user)
{
    const struct sluice_policy *pol[2] = {ip, user};
    const char *path[2] = {pf->ip_path, pf->user_path}, *name[2] = {"ip", "user"};

    for (int i = 0; i < 2; i++) {
        struct sluice_config cfg;
        sluice_t *l;
        int rc;

        /* a file left by a server that was killed: start afresh */
        if ((rc = sluice_unlink_shared(path[i])) != 0 && rc != -ENOENT) {
            fprintf(stderr, "sluice-http: %s: %s\n", path[i], sluice_strerror(rc));
            return rc;
        }
        sluice_config_init(&cfg);
        cfg.policy = *pol[i];
        cfg.name = name[i];
        cfg.max_keys = 100000;
        rc = sluice_open_shared(path[i], &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL, &l);
        if (rc != 0) {
            fprintf(stderr, "sluice-http: %s: %s\n", path[i], sluice_strerror(rc));
            return rc;
        }
        sluice_destroy(l); /* the file stays; the workers attach to it */
    }
    return 0;
}

int http_shared_attach(const struct http_prefork *pf, struct http_limiters *lim)
{
    int rc = sluice_open_shared(pf->ip_path, NULL, 0, &lim->ip);

    if (rc == 0 && (rc = sluice_open_shared(pf->user_path, NULL, 0, &lim->user)) != 0) {
        sluice_destroy(lim->ip);
        lim->ip = NULL;
    }
    if (rc != 0)
        fprintf(stderr, "sluice-http: worker %d: attach: %s\n", (int)getpid(), sluice_strerror(rc));
    return rc;
}

static void reload(const struct http_prefork *pf)
{
    struct sluice_policy pol[2];
    const char *path[2] = {pf->ip_path, pf->user_path};
    int rc = http_load_limits(pf->limits, &pol[0], &pol[1]);

    for (int i = 0; i < 2 && rc == 0; i++) {
        sluice_t *l;
        if ((rc = sluice_open_shared(path[i], NULL, 0, &l)) == 0) {
            rc = sluice_set_policy(l, &pol[i]);
            sluice_destroy(l);
        }
    }
    fprintf(stderr, "sluice-http: reload %s: %s\n", pf->limits, rc ? sluice_strerror(rc) : "ok");
}

static pid_t spawn(const struct http_prefork *pf, const sigset_t *old_mask, int sfd)
{
    pid_t pid = fork();

    if (pid == 0) {
        close(sfd);
        sigprocmask(SIG_SETMASK, old_mask, NULL);
        exit(pf->worker(pf->lfd, pf, pf->arg));
    }
    if (pid < 0)
        perror("fork");
    return pid;
}

/* Reap every worker that exited; false if one keeps dying at start. */
static bool reap_children(const struct http_prefork *pf, struct slot *slots, bool stopping,
                          const sigset_t *old_mask, int sfd)
{
    pid_t pid;
    int st;

    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        for (int i = 0; i < pf->workers; i++) {
            struct slot *s = &slots[i];
            if (s->pid != pid)
                continue;
            s->pid = 0;
            if (stopping)
                break;
            if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
                s->quick_deaths =
                    mono_ms() - s->started < QUICK_DEATH_MS ? s->quick_deaths + 1 : 0;
            bool give_up = s->quick_deaths >= QUICK_DEATHS_MAX;
            if (WIFSIGNALED(st))
                fprintf(stderr, "sluice-http: worker %d killed by signal %d: %s\n", (int)pid,
                        WTERMSIG(st), give_up ? "not replaced" : "replaced");
            else
                fprintf(stderr, "sluice-http: worker %d exited with %d: %s\n", (int)pid,
                        WEXITSTATUS(st), give_up ? "not replaced" : "replaced");
            if (give_up) {
                fprintf(stderr, "sluice-http: workers keep dying at start: stopping\n");
                return false;
            }
            s->started = mono_ms();
            if ((s->pid = spawn(pf, old_mask, sfd)) < 0)
                s->pid = 0;
            break;
        }
    }
    return true;
}

static int live(const struct http_prefork *pf, const struct slot *slots)
{
    int n = 0;

    for (int i = 0; i < pf->workers; i++)
        n += slots[i].pid > 0;
    return n;
}

static void signal_all(const struct http_prefork *pf, const struct slot *slots, int sig)
{
    for (int i = 0; i < pf->workers; i++)
        if (slots[i].pid > 0)
            kill(slots[i].pid, sig);
}

static int supervise(const struct http_prefork *pf)
{
    struct slot *slots = calloc((size_t)pf->workers, sizeof(*slots));
    sigset_t sigs, old_mask;
    uint64_t stop_at = 0;
    bool stopping = false, ok = true;
    int sfd;

    sigemptyset(&sigs);
    sigaddset(&sigs, SIGCHLD);
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    if (slots == NULL || sigprocmask(SIG_BLOCK, &sigs, &old_mask) != 0 ||
        (sfd = signalfd(-1, &sigs, SFD_CLOEXEC)) < 0) {
        perror("sluice-http: supervisor");
        free(slots);
        return 1;
    }
    for (int i = 0; i < pf->workers; i++) {
        slots[i].started = mono_ms();
        if ((slots[i].pid = spawn(pf, &old_mask, sfd)) < 0)
            slots[i].pid = 0;
    }
    fprintf(stderr, "sluice-http: %d workers, shared limiters %s and %s\n", live(pf, slots),
            pf->ip_path, pf->user_path);
    while (!stopping || live(pf, slots) > 0) {
        struct pollfd p = {.fd = sfd, .events = POLLIN};
        struct signalfd_siginfo si;
        int wait_ms = -1;

        if (stopping) {
            uint64_t now = mono_ms();
            if (now >= stop_at) {
                signal_all(pf, slots, SIGKILL); /* past the grace period */
                stop_at = UINT64_MAX;
            }
            wait_ms = stop_at == UINT64_MAX ? -1 : (int)(stop_at - now);
        }
        if (poll(&p, 1, wait_ms) <= 0 || read(sfd, &si, sizeof(si)) != (ssize_t)sizeof(si))
            continue;
        if (si.ssi_signo == SIGHUP && !stopping) {
            reload(pf);
        } else if (si.ssi_signo == SIGCHLD) {
            if (!reap_children(pf, slots, stopping, &old_mask, sfd) && !stopping) {
                ok = false;
                stopping = true;
                stop_at = mono_ms() + STOP_GRACE_MS;
                signal_all(pf, slots, SIGTERM);
            }
        } else if ((si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) && !stopping) {
            stopping = true;
            stop_at = mono_ms() + STOP_GRACE_MS;
            signal_all(pf, slots, SIGTERM);
        }
    }
    close(sfd);
    free(slots);
    sluice_unlink_shared(pf->ip_path);
    sluice_unlink_shared(pf->user_path);
    fprintf(stderr, "sluice-http: stopped\n");
    return ok ? 0 : 1;
}

int http_prefork_main(const char *addr, long port, int workers, const char *prefix,
                      const char *limits, const struct sluice_policy *ip,
                      const struct sluice_policy *user,
                      int (*worker)(int lfd, const struct http_prefork *pf, void *arg), void *arg)
{
    static struct http_prefork pf; /* the workers' copy comes with fork() */
    char def[64];
    int rc;

    if (prefix == NULL) {
        snprintf(def, sizeof(def), "/dev/shm/sluice-http-%ld", port);
        prefix = def;
    }
    pf.workers = workers;
    pf.limits = limits;
    pf.worker = worker;
    pf.arg = arg;
    if ((size_t)snprintf(pf.ip_path, sizeof(pf.ip_path), "%s-ip", prefix) >= sizeof(pf.ip_path) ||
        (size_t)snprintf(pf.user_path, sizeof(pf.user_path), "%s-user", prefix) >=
            sizeof(pf.user_path)) {
        fprintf(stderr, "sluice-http: shared prefix too long\n");
        return 2;
    }
    if (shared_create(&pf, ip, user) != 0)
        return 1;
    if ((pf.lfd = http_listen(addr, port)) < 0) {
        sluice_unlink_shared(pf.ip_path);
        sluice_unlink_shared(pf.user_path);
        return 1;
    }
    fprintf(stderr, "sluice-http: listening on %s:%ld, limits from %s, %d workers\n", addr, port,
            limits, workers);
    rc = supervise(&pf);
    close(pf.lfd);
    return rc;
}
