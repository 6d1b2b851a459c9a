/*
 * A reachable Redis that refuses to load the script is not an outage.
 * Against a real redis-server of the test's own whose SCRIPT command is
 * renamed away (as an ACL without scripting, NOAUTH or LOADING refuse it):
 * every call gets -EPROTO, counted as an error reply, and none is admitted,
 * even by a tier that fails open.  The connection step once took the
 * error for an unreachable Redis: failing open, it admitted every call
 * (30 of 30 against a limit of 10/s), and failing closed it called them
 * outages.  Skips only if redis-server is not installed.
 */
#include "server.h"
#include "sluice_redis.h"

static void refused(int fail_open)
{
    struct sluice_redis_config cfg;
    struct sluice_redis_stats st;
    struct sluice_result r;
    sluice_redis_t *t;
    int allowed = 0, eproto = 0;

    sluice_redis_config_init(&cfg);
    cfg.port = port;
    cfg.count = 10;
    cfg.period_ns = NS_PER_S;
    cfg.fail_open = fail_open;
    cfg.timeout_ns = NS_PER_S * slow_factor(); /* a loaded machine is not an outage */
    CHECK_EQ(sluice_redis_create(&cfg, &t), 0);
    for (int i = 0; i < 30; i++) {
        int rc = sluice_redis_acquire(t, "refused", 7, 1, &r);
        allowed += rc == SLUICE_ALLOW;
        eproto += rc == -EPROTO;
        CHECK_EQ(r.flags & (SLUICE_REDIS_F_FAILED_OPEN | SLUICE_REDIS_F_FAILED_CLOSED), 0);
    }
    CHECK_EQ(allowed, 0);
    CHECK_EQ(eproto, 30);
    sluice_redis_stats(t, &st);
    CHECK_EQ(st.error_replies, 30);
    CHECK_EQ(st.errors, 0);
    CHECK_EQ(st.failed_open, 0);
    CHECK_EQ(st.failed_closed, 0);
    printf("script refused, fail_open %d: %d of 30 -EPROTO, %d admitted, %llu error replies\n",
           fail_open, eproto, allowed, (unsigned long long)st.error_replies);
    sluice_redis_destroy(t);
}

int main(void)
{
    int rc;

    server_extra[0] = "--rename-command";
    server_extra[1] = "SCRIPT";
    server_extra[2] = "";
    if ((rc = redis_setup()) != 0)
        return rc;
    refused(1);
    refused(0);
    redis_teardown();
    return t_done("redis_refused");
}
