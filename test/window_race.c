/*
 * A call on several keys of private limiters opens its thread's window
 * on them before it tests that none is frozen (sl_window_open), and a
 * writer that froze one looks for windows holding it before it seals the
 * key's time (sl_windows_wait).  The two are a store-buffering pair: the
 * call stores its window and loads the frozen word, the writer stores the
 * freeze and loads the windows.  At least one of them must see the other,
 * or the call commits one key's time while the writer seals another's,
 * and its charges are taken back with that time standing (commit_race
 * shows what follows).  x86 lets a load pass an earlier plain store: only
 * the opening's exchange (and the writer's fence) forbid the outcome where
 * neither sees the other, which this test looks for, litmus style: both
 * threads released at once per round on a fresh word, the window kept
 * open until the writer has looked.
 * Usage: window_race [scale]
 */
#include <sched.h>
#include <stdatomic.h>

#include "helpers.h"
#include "internal.h"

#define WORDS 64

static sl_aword word[WORDS];
static atomic_uint_fast64_t go, looked, decided;
static atomic_bool caller_frozen; /* the round's test, published with `decided` */
static atomic_uint_fast64_t rounds; /* the caller's last round */

static void wait_for(atomic_uint_fast64_t *c, uint64_t v)
{
    for (unsigned n = 0; atomic_load_explicit(c, memory_order_acquire) < v; n++)
        if (n > 100000)
            sched_yield(); /* one CPU, or a preempted partner */
}

/* The call: its window on the round's word, then its test of the word,
 * the window kept open until the writer has looked. */
static void *caller(void *arg)
{
    struct sl_thread *t = sl_thread_get();

    (void)arg;
    if (t == NULL)
        exit(1);
    for (uint64_t r = 1; r <= atomic_load(&rounds); r++) {
        sl_aword *w = &word[r % WORDS];
        const void *e = w;
        wait_for(&go, r);
        sl_window_open(t, &e, 1);
        bool frozen = (sl_load_sc(w) & SL_DEAD) != 0;
        wait_for(&looked, r);
        sl_window_close(t);
        atomic_store_explicit(&caller_frozen, frozen, memory_order_relaxed);
        atomic_store_explicit(&decided, r, memory_order_release);
    }
    return NULL;
}

/* A round: the word reset, the call released, the writer's freeze after
 * a varying delay (so that either side comes first: the call needs about
 * one line transfer to see `go`) and its look.  true if neither saw the
 * other; *frozen and *window say which did. */
static bool round_race(uint64_t r, unsigned delay, bool *frozen, bool *window)
{
    sl_aword *w = &word[r % WORDS];

    atomic_store_explicit(w, 0, memory_order_relaxed);
    atomic_store_explicit(&go, r, memory_order_release);
    for (volatile unsigned d = 0; d < delay; d = d + 1)
        ;
    /* the writer: freeze (an RMW, as sl_entry_freeze's), then look */
    (void)atomic_fetch_or_explicit(w, SL_DEAD, memory_order_acq_rel);
    *window = !sl_windows_wait(w, false);
    atomic_store_explicit(&looked, r, memory_order_release);
    wait_for(&decided, r);
    *frozen = atomic_load_explicit(&caller_frozen, memory_order_relaxed);
    return !*window && !*frozen;
}

int main(int argc, char **argv)
{
    double scale = t_scale(argc, argv);
    uint64_t both_missed = 0, frozen_seen = 0, window_seen = 0, rng = 12345, r;
    uint64_t want = (uint64_t)(2000 * scale) + 10, deadline = t_mono() + 20 * NS_PER_S;
    pthread_t th;

    /* rounds until each side has come first `want` times, or 20 s */
    atomic_store(&rounds, UINT64_MAX);
    if (sl_thread_get() == NULL || pthread_create(&th, NULL, caller, NULL) != 0)
        return 1;
    for (r = 1; (frozen_seen < want || window_seen < want) && (r & 1023 || t_mono() < deadline);
         r++) {
        bool frozen, window;
        both_missed += round_race(r, (unsigned)(t_rand(&rng) % 400), &frozen, &window);
        frozen_seen += frozen;
        window_seen += window;
    }
    atomic_store(&rounds, r); /* the caller's last round: released below */
    atomic_store_explicit(&looked, r, memory_order_release);
    atomic_store_explicit(&go, r, memory_order_release);
    pthread_join(th, NULL);
    printf("window_race: %" PRIu64 " rounds: the call saw the freeze in %" PRIu64
           ", the writer the window in %" PRIu64 ", neither in %" PRIu64 "\n",
           r - 1, frozen_seen, window_seen, both_missed);
    CHECK_EQ(both_missed, 0);
    if (t_failures == 0 && (frozen_seen < want || window_seen < want)) {
        printf("window_race: the two threads rarely ran at once (a loaded machine), skipped\n");
        return T_SKIP;
    }
    return t_done("window_race");
}
