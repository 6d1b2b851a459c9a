/*
 * Throughput of one tier against a real redis-server of its own: decisions
 * per second with 1, 2, 4 and 8 calling threads, without leases and with
 * leases of 64, and Redis round trips per decision.  Printed, never
 * asserted (timings depend on the machine); the table is in doc/REDIS.md.
 * Each thread decides its own keys under a limit that is never reached, so
 * the figures are the tier's cost, not the limit's.
 * Usage: redis_bench [seconds per row [connections]]  (default 0.5, 2)
 */
#include <stdatomic.h>

#include "server.h"
#include "sluice_redis.h"

struct worker {
    sluice_redis_t *t;
    int id;
    uint64_t until, decisions;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char key[32];
    uint64_t i = 0;

    while (mono() < w->until) {
        int len = snprintf(key, sizeof(key), "bench-%d-%llu", w->id,
                           (unsigned long long)(i++ % 64));
        if (sluice_redis_acquire(w->t, key, (size_t)len, 1, NULL) != SLUICE_ALLOW) {
            fprintf(stderr, "unexpected denial\n");
            exit(1);
        }
        w->decisions++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 0.5;
    unsigned conns = argc > 2 ? (unsigned)atoi(argv[2]) : 0;
    int rc = redis_setup();

    if (rc != 0)
        return rc;
    secs *= t_scale(1, argv) > 0.5 ? 1.0 : 0.4;
    printf("%-8s %-7s %14s %12s %16s\n", "threads", "lease", "decisions/s", "vs 1 thread",
           "round trips/dec");
    for (int lease = 0; lease <= 64; lease += 64) {
        double base = 0;

        for (unsigned n = 1; n <= 8; n *= 2) {
            struct sluice_redis_config cfg;
            struct sluice_redis_stats st;
            struct worker w[8];
            sluice_redis_t *t;
            uint64_t total = 0, start;
            double rate;

            sluice_redis_config_init(&cfg);
            cfg.port = port;
            cfg.count = UINT64_C(1) << 30; /* never reached */
            cfg.period_ns = NS_PER_S;
            cfg.lease = (uint64_t)lease;
            cfg.connections = conns;
            cfg.timeout_ns = NS_PER_S; /* a slow (sanitized) run is not an outage */
            if (sluice_redis_create(&cfg, &t) != 0)
                return 1;
            start = mono();
            for (unsigned i = 0; i < n; i++)
                w[i] = (struct worker){t, (int)i, start + (uint64_t)(secs * 1e9), 0};
            t_run_threads(n, worker_main, w, sizeof(w[0]));
            for (unsigned i = 0; i < n; i++)
                total += w[i].decisions;
            rate = (double)total / ((double)(mono() - start) / 1e9);
            if (n == 1)
                base = rate;
            sluice_redis_stats(t, &st);
            printf("%-8u %-7d %14.0f %11.2fx %16.3f\n", n, lease, rate, rate / base,
                   (double)st.round_trips / (double)st.requests);
            CHECK_EQ(st.errors + st.error_replies, 0);
            sluice_redis_destroy(t);
        }
    }
    redis_teardown();
    return t_done("redis_bench");
}
