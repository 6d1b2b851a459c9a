/*
 * The script in Redis Cluster: a one-node cluster of the test's own
 * (cluster-enabled, every slot added to it, waited for cluster_state:ok).
 * The script touches only its one key, so it runs there; a hash tag in the
 * key chooses the slot and the tier's prefix keeps it (the prefix cannot
 * contain braces).
 */
#include "server.h"
#include "sluice_redis.h"

static long long keyslot(const char *key)
{
    redisReply *r = redis_cmd("CLUSTER KEYSLOT %s", key);
    long long slot = r != NULL && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;

    if (r)
        freeReplyObject(r);
    return slot;
}

static int cluster_ok(void)
{
    for (int i = 0; i < 250; i++) {
        redisReply *r = redis_cmd("CLUSTER INFO");
        int ok = r != NULL && r->type == REDIS_REPLY_STRING &&
                 strstr(r->str, "cluster_state:ok") != NULL;

        if (r)
            freeReplyObject(r);
        if (ok)
            return 1;
        usleep(20000);
    }
    return 0;
}

int main(void)
{
    struct sluice_redis_config cfg;
    struct sluice_redis_stats st;
    sluice_redis_t *t;
    redisReply *r;
    int rc;

    server_extra[0] = "--cluster-enabled";
    server_extra[1] = "yes";
    server_extra[2] = "--cluster-config-file";
    server_extra[3] = "nodes.conf"; /* in --dir, the temporary directory */
    if ((rc = redis_setup()) != 0)
        return rc;
    r = redis_cmd("CLUSTER ADDSLOTSRANGE 0 16383");
    CHECK(r != NULL && r->type == REDIS_REPLY_STATUS);
    if (r)
        freeReplyObject(r);
    if (!cluster_ok()) {
        fprintf(stderr, "cluster_state never became ok\n");
        redis_teardown();
        return 1;
    }

    sluice_redis_config_init(&cfg);
    cfg.port = port;
    cfg.count = 3;
    cfg.period_ns = 60 * NS_PER_S;
    cfg.timeout_ns = 500000000;
    CHECK_EQ(sluice_redis_create(&cfg, &t), 0);
    /* two limits of one user, in the user's slot */
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(sluice_redis_acquire(t, "{user42}:api", 12, 1, NULL), SLUICE_ALLOW);
        CHECK_EQ(sluice_redis_acquire(t, "{user42}:login", 14, 1, NULL), SLUICE_ALLOW);
    }
    CHECK_EQ(sluice_redis_acquire(t, "{user42}:api", 12, 1, NULL), SLUICE_DENY);
    CHECK_EQ(sluice_redis_acquire(t, "plain", 5, 1, NULL), SLUICE_ALLOW);
    r = redis_cmd("EXISTS sluice:{user42}:api");
    CHECK(r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
    if (r)
        freeReplyObject(r);
    CHECK_EQ(keyslot("sluice:{user42}:api"), keyslot("user42"));
    CHECK_EQ(keyslot("sluice:{user42}:login"), keyslot("user42"));
    sluice_redis_stats(t, &st);
    CHECK_EQ(st.errors + st.error_replies, 0);
    printf("cluster: key sluice:{user42}:api in slot %lld (that of user42), limit held\n",
           keyslot("sluice:{user42}:api"));
    sluice_redis_destroy(t);
    redis_teardown();
    return t_done("redis_cluster");
}
