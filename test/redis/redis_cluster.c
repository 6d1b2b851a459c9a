/*
 * The script in Redis Cluster: a one-node cluster of the test's own
 * (cluster-enabled, every slot added to it, waited for cluster_state:ok).
 * The script touches only its one key, so it runs there; a hash tag in the
 * key chooses the slot and the tier's prefix keeps it (the prefix cannot
 * contain braces).  With cfg.cluster, the calls of concurrent callers are
 * batched per slot, so keys of many slots never meet CROSSSLOT.
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

struct worker {
    sluice_redis_t *t;
    int id;
    uint64_t until, ok, failed;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char key[32];
    uint64_t i = 0;

    while (mono() < w->until) {
        int len = snprintf(key, sizeof(key), "{u%llu}:x", (unsigned long long)(i++ % 64));
        int rc = sluice_redis_acquire(w->t, key, (size_t)len, 1, NULL);

        w->ok += rc == SLUICE_ALLOW;
        w->failed += rc != SLUICE_ALLOW;
    }
    return NULL;
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
    sluice_redis_destroy(t);
    /* concurrent callers on keys of many slots: batches split by slot */
    cfg.count = 1000000;
    cfg.period_ns = NS_PER_S;
    cfg.cluster = 1;
    /* each caller waits for its own batch: a slow (sanitizer) run must not
     * turn that into outages, which this part does not test */
    cfg.timeout_ns = 2 * NS_PER_S;
    CHECK_EQ(sluice_redis_create(&cfg, &t), 0);
    {
        struct worker w[4];

        for (int i = 0; i < 4; i++)
            w[i] = (struct worker){t, i, mono() + NS_PER_S / 4, 0, 0};
        t_run_threads(4, worker_main, w, sizeof(w[0]));
        for (int i = 0; i < 4; i++) {
            CHECK_EQ(w[i].failed, 0);
            CHECK(w[i].ok > 0);
        }
    }
    sluice_redis_stats(t, &st);
    CHECK_EQ(st.errors + st.error_replies, 0);
    printf("cluster: 4 threads on keys of 64 slots, %llu decisions, %.2f per round trip, no "
           "CROSSSLOT\n",
           (unsigned long long)st.requests, (double)st.redis_calls / (double)st.round_trips);
    printf("cluster: key sluice:{user42}:api in slot %lld (that of user42), limit held\n",
           keyslot("sluice:{user42}:api"));
    sluice_redis_destroy(t);
    redis_teardown();
    return t_done("redis_cluster");
}
