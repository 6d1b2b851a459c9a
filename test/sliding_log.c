/* Sliding log: exact per-unit timestamps in (now - period, now]; a log read
 * behind its newest stamp, and carried, while a charge is in flight. */
#include "helpers.h"
#include "internal.h"

static void test_exact(void)
{
    sluice_t *l = t_limiter1(SLUICE_SLIDING_LOG, 3, 10 * NS_PER_S, 0, 0);
    struct sluice_result r;

    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 1 * NS_PER_S, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 2 * NS_PER_S, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 3 * NS_PER_S, &r), SLUICE_ALLOW);
    CHECK_EQ(r.remaining, 0);
    CHECK_EQ(r.reset_after_ns, 10 * NS_PER_S);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 11 * NS_PER_S - 1, &r), SLUICE_DENY);
    CHECK_EQ(r.retry_after_ns, 1);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 2, 11 * NS_PER_S, &r), SLUICE_DENY);
    CHECK_EQ(r.retry_after_ns, NS_PER_S);
    CHECK_EQ(r.remaining, 1);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 11 * NS_PER_S, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 2, 13 * NS_PER_S, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 3, 23 * NS_PER_S - 1, &r), SLUICE_DENY);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 3, 23 * NS_PER_S, &r), SLUICE_ALLOW);
    sluice_destroy(l);
}

/* No boundary burst: never more than count in any period-long interval. */
static void test_no_burst(void)
{
    sluice_t *l = t_limiter1(SLUICE_SLIDING_LOG, 100, NS_PER_S, 0, 0);
    uint64_t rng = 7, now = 0, times[20000], n = 0, worst = 0;

    for (int i = 0; i < 20000; i++) {
        now += t_rand(&rng) % (NS_PER_S / 50);
        if (sluice_acquire_at(l, "k", 1, 1, now, NULL) == SLUICE_ALLOW)
            times[n++] = now;
    }
    for (uint64_t i = 0, j = 0; i < n; i++) {
        while (times[j] + NS_PER_S <= times[i])
            j++;
        worst = i - j + 1 > worst ? i - j + 1 : worst;
    }
    CHECK_EQ(worst, 100);
    sluice_destroy(l);
}

static void test_big_count(void)
{
    sluice_t *l = t_limiter1(SLUICE_SLIDING_LOG, 65536, NS_PER_S, 0, 0);
    struct sluice_result r;

    CHECK_EQ(sluice_acquire_at(l, "b", 1, 65536, 5, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "b", 1, 1, NS_PER_S + 4, &r), SLUICE_DENY);
    CHECK_EQ(sluice_acquire_at(l, "b", 1, 65536, NS_PER_S + 5, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "b", 1, 65537, NS_PER_S + 5, &r), -E2BIG);
    sluice_destroy(l);
}

/* Another call's charge in flight: landed on the key's first limit (a
 * sliding log) through its own op, its other limits and its time not yet
 * (charge.c does them next). */
static void charge_in_flight(sluice_t *l, uint64_t at, uint64_t cost)
{
    struct sl_thread *t = sl_thread_get();
    struct sl_target g;
    struct sl_entry *e;

    sl_epoch_begin(t);
    sl_target_init(&g, l, "k", 1);
    e = sl_table_get(g.s, g.h, "k", 1);
    CHECK(e != NULL);
    if (e != NULL) {
        const struct sl_lim *log = &e->pol->lim[0];
        sl_receipt r;
        CHECK_EQ(log->ops->charge(log, e->w + log->off, at, cost, r), SL_OK);
    }
    sl_epoch_end(t);
}

/*
 * A sliding log read behind its newest stamp, while another call's charge
 * is in flight (linearize_random, seed 1795615128, history 215619): a
 * stacked key [log 5 per 2 s, sliding window 3 per s], 3 units at 1 s; a
 * call at 3.5 s has charged the log (its first limit) but not yet the
 * window, nor committed its time.  A peek at 2 s read the log at its
 * newest stamp, 3.5 s, where the old units had left (fits), and the window
 * at 2 s, where they had left too (fits): ALLOW, which no order gives (at
 * 2 s before that call the log denies; after it, at 3.5 s, the window
 * does).  The in-flight charge is made here through the log's own op.
 */
static void test_log_behind_inflight(void)
{
    struct sluice_config cfg;
    sluice_t *l = NULL;
    const uint64_t ms = NS_PER_S / 1000;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_SLIDING_LOG, 5, 2 * NS_PER_S);
    sluice_policy_add(&cfg.policy, SLUICE_SLIDING_WINDOW, 3, NS_PER_S);
    cfg.policy.limits[1].precision_ns = 250 * ms;
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 3, 1000 * ms, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_peek_at(l, "k", 1, 3, 2000 * ms, NULL), SLUICE_DENY);
    charge_in_flight(l, 3500 * ms, 1);
    CHECK_EQ(sluice_peek_at(l, "k", 1, 3, 2000 * ms, NULL), SLUICE_DENY);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 3, 2000 * ms, NULL), SLUICE_DENY);
    sluice_destroy(l);
}

/*
 * The same charge in flight when the key moves (a reviewer): its commit
 * then fails and the call is decided again, while a sliding log's units
 * stay where they landed (a log charge is never taken back across a move),
 * so the carry sees them.  It kept only the units in the window at the
 * newest stamp, the in-flight one, and so dropped A's 3 units at 100 ns;
 * the call was denied on the retry, the key's latest time stayed 100, and
 * a call at 100 was admitted: 4 in a window of 3.  Moved by an override to
 * the same policy, and by set_policy adding a limit.
 */
static void test_log_carry_inflight(void)
{
    for (int by_default = 0; by_default < 2; by_default++) {
        struct sluice_policy to = {0};
        sluice_t *l = t_limiter1(SLUICE_SLIDING_LOG, 3, 10, 0, 0);

        sluice_policy_add(&to, SLUICE_SLIDING_LOG, 3, 10);
        if (by_default)
            sluice_policy_add(&to, SLUICE_GCRA, 1000, 10);
        CHECK_EQ(sluice_acquire_at(l, "k", 1, 3, 100, NULL), SLUICE_ALLOW);
        charge_in_flight(l, 111, 2);
        CHECK_EQ(sluice_peek_at(l, "k", 1, 1, 100, NULL), SLUICE_DENY);
        CHECK_EQ(by_default ? sluice_set_policy(l, &to) : sluice_override_set(l, "k", 1, &to), 0);
        CHECK_EQ(sluice_acquire_at(l, "k", 1, 2, 111, NULL), SLUICE_DENY); /* decided again */
        CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 100, NULL), SLUICE_DENY);
        sluice_destroy(l);
    }
}

int main(void)
{
    test_exact();
    test_no_burst();
    test_big_count();
    test_log_behind_inflight();
    test_log_carry_inflight();
    return t_done("sliding_log");
}
