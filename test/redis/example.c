/* The README's example of the synchronous API (built and run by install.sh
 * against the installed library and sluice-redis.pc). */
#include <stdio.h>
#include <stdlib.h>

#include <sluice_redis.h>

static void log_line(void *ctx, int level, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "<%d>%s\n", level, msg); /* route to your logger */
}

int main(int argc, char **argv)
{
    struct sluice_redis_config cfg;
    struct sluice_result res;
    sluice_redis_t *t;
    int rc;

    sluice_redis_config_init(&cfg);
    cfg.port = argc > 1 ? atoi(argv[1]) : 6379;
    cfg.count = 2;                   /* 2 requests ...            */
    cfg.period_ns = 1000000000;      /* ... per second, all hosts */
    cfg.log_fn = log_line;
    if ((rc = sluice_redis_create(&cfg, &t)) != 0) {
        fprintf(stderr, "sluice_redis_create: %s\n", sluice_strerror(rc));
        return 1;
    }
    for (int i = 0; i < 3; i++) {
        /* {user42}: the hash tag that picks the Redis Cluster slot */
        rc = sluice_redis_acquire(t, "{user42}:api", 12, 1, &res);
        if (rc == SLUICE_ALLOW)
            printf("allowed (%llu left)\n", (unsigned long long)res.remaining);
        else if (rc == SLUICE_DENY && (res.flags & SLUICE_REDIS_F_FAILED_CLOSED))
            printf("denied: Redis is down (fail closed), not a rate limit\n");
        else if (rc == SLUICE_DENY)
            printf("rate limited: retry in %llu ms\n",
                   (unsigned long long)(res.retry_after_ns / 1000000));
        else
            printf("error: %s\n", sluice_strerror(rc));
    }
    sluice_redis_destroy(t);
    return 0;
}
