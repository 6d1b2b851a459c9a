/*
 * A redis-server of the test's own: a temporary directory, a loopback port
 * found by trying, ready once it answers PING, stopped by its pid.  Only
 * 127.0.0.1 is ever used.
 */
#ifndef SLUICE_TEST_REDIS_SERVER_H
#define SLUICE_TEST_REDIS_SERVER_H

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif

/* How much slower than a plain build this one runs: wait bounds checked
 * against a timeout get this much slack (valgrind, sanitizers). */
static inline uint64_t slow_factor(void)
{
#ifdef RUNNING_ON_VALGRIND
    if (RUNNING_ON_VALGRIND)
        return 20;
#endif
    return t_scale(1, NULL) < 1.0 ? 4 : 1;
}

static int port;
static pid_t server;
static char dir[] = "/tmp/sluice-redis-XXXXXX";
static const char *server_extra[8]; /* more redis-server arguments, NULL-ended */

static uint64_t mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* A command on a fresh connection to the test's server; NULL if none. */
static redisReply *redis_cmd(const char *fmt, ...)
{
    struct timeval tv = {0, 500000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = NULL;
    va_list ap;

    if (c != NULL && !c->err) {
        redisSetTimeout(c, tv);
        va_start(ap, fmt);
        r = redisvCommand(c, fmt, ap);
        va_end(ap);
    }
    if (c)
        redisFree(c);
    return r;
}

static int redis_ping(void)
{
    redisReply *r = redis_cmd("PING");
    int ok = r != NULL && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;

    if (r)
        freeReplyObject(r);
    return ok;
}

/* The server answering on `port` is the one this test started: not
 * another test's that took the port first (ours then fails to bind, and
 * a PING alone would be answered by theirs). */
static int redis_is_ours(void)
{
    redisReply *r = redis_cmd("INFO server");
    const char *p;
    int ours = 0;

    if (r != NULL && r->type == REDIS_REPLY_STRING &&
        (p = strstr(r->str, "process_id:")) != NULL)
        ours = atol(p + strlen("process_id:")) == (long)server;
    if (r)
        freeReplyObject(r);
    return ours;
}

/* Start redis-server: on `port` if it is set, else on a free one found by trying. */
static int redis_start(void)
{
    char portstr[16];
    int fixed = port != 0;

    fflush(stdout); /* the child must not flush our buffer again */
    fflush(stderr);
    for (int attempt = 0; attempt < (fixed ? 50 : 10); attempt++) {
        if (!fixed)
            port = 20000 + (int)(mono() % 30000);
        snprintf(portstr, sizeof(portstr), "%d", port);
        server = fork();
        if (server == 0) {
            const char *argv[32] = {"redis-server", "--port", portstr, "--bind", "127.0.0.1",
                                    "--dir", dir, "--save", "", "--appendonly", "no"};
            int n = 11;

            for (int i = 0; server_extra[i] != NULL; i++)
                argv[n++] = server_extra[i];
            argv[n] = NULL;
            /* the server dies with the test, even one killed by a signal */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (freopen("/dev/null", "w", stdout) == NULL)
                _exit(127);
            execvp("redis-server", (char **)argv);
            _exit(127);
        }
        for (int i = 0; i < 100; i++) {
            int st;
            if (redis_ping() && redis_is_ours())
                return 0;
            if (waitpid(server, &st, WNOHANG) == server)
                break; /* port taken, or no redis-server: try again */
            usleep(20000);
        }
        kill(server, SIGKILL);
        waitpid(server, NULL, 0);
    }
    return -1;
}

static void redis_stop(void)
{
    if (server > 0) {
        kill(server, SIGCONT); /* in case a test stopped it */
        kill(server, SIGKILL);
        waitpid(server, NULL, 0);
        server = 0;
    }
}

/* Skip (77) without redis-server; 1 if it cannot be started. */
static int redis_setup(void)
{
    if (system("command -v redis-server >/dev/null 2>&1") != 0) {
        printf("redis-server is not installed: skipped (apt-get install redis-server)\n");
        return T_SKIP;
    }
    if (mkdtemp(dir) == NULL || redis_start() != 0) {
        fprintf(stderr, "could not start redis-server\n");
        return 1;
    }
    return 0;
}

static void redis_teardown(void)
{
    char cmd[128];

    redis_stop();
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

#endif
