/*
 * Reclamation with sections entered without a fence (src/epoch.c).
 *
 * Deciders on a few hot keys, in threads that come and go (records are
 * recycled), while a mutator flips the default policy (every entry
 * migrates: the old one is retired), resets keys and reaps them at a time
 * far ahead (they are frozen and retired while deciders use them), round
 * after round, polling after each.  A further thread makes one call and
 * then sleeps, alive and registered, for the whole run.
 *
 *  - Under AddressSanitizer (CI) a reader touching an entry, slot array or
 *    policy after it was freed is reported: the arena poisons freed
 *    entries for that.
 *  - Every decision is counted (allowed + denied), those of threads that
 *    have exited included.
 *  - The sleeping thread never holds reclamation back: once the deciders
 *    have stopped, a few reclaim steps that never wait free everything the
 *    mutator retired, although that thread is still registered.
 *  - The process reclaims the way it was asked to: meson runs this once
 *    as is (membarrier where the kernel has it) and once with
 *    SLUICE_EPOCH_FENCED=1 (fenced entries), so both paths run in CI.
 */
#include <signal.h>
#include <stdatomic.h>

#include "helpers.h"
#include "internal.h"

#define KEYS 8
#define DECIDERS 2

static sluice_t *lim;
static atomic_bool stop;
static _Atomic uint64_t decided;  /* decisions returned by exited deciders */
static pthread_mutex_t idle_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER;
static bool idle_release;

static void key_of(unsigned i, char *buf, size_t *len)
{
    *len = (size_t)snprintf(buf, 16, "hot-%u", i % KEYS);
}

/* Decide for a while, then exit: the next decider recycles the record. */
static void *decider(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg, n = 0;
    char key[16];
    size_t len;

    for (unsigned i = 0; i < 20000 && !atomic_load(&stop); i++) {
        key_of((unsigned)t_rand(&rng), key, &len);
        int rc = i % 8 == 0 ? sluice_peek_at(lim, key, len, 1, i, NULL)
                            : sluice_acquire_at(lim, key, len, 1 + i % 3, i, NULL);
        if (rc < 0) {
            fprintf(stderr, "decision failed: %s\n", sluice_strerror(rc));
            exit(1);
        }
        n += i % 8 != 0;
    }
    atomic_fetch_add(&decided, n);
    return NULL;
}

static void *decider_loop(void *arg)
{
    for (uintptr_t gen = 0; !atomic_load(&stop); gen++) {
        pthread_t th;
        if (pthread_create(&th, NULL, decider, (void *)(gen * 31 + (uintptr_t)arg)) != 0)
            exit(1);
        pthread_join(th, NULL);
    }
    return NULL;
}

/* One call, then asleep outside every section until the end. */
static void *idler(void *arg)
{
    (void)arg;
    (void)sluice_acquire_at(lim, "idle", 4, 1, 0, NULL);
    atomic_fetch_add(&decided, 1);
    pthread_mutex_lock(&idle_mu);
    while (!idle_release)
        pthread_cond_wait(&idle_cv, &idle_mu);
    pthread_mutex_unlock(&idle_mu);
    return NULL;
}

/* A reclamation that waits for a thread which stopped calling hangs the
 * deciders' exits: say so rather than leave it to meson's timeout. */
static void watchdog(int sig)
{
    static const char msg[] = "epoch_asym: no progress in 90 s: reclamation blocked\n";
    (void)sig;
    (void)!write(2, msg, sizeof(msg) - 1);
    _exit(1);
}

static unsigned pending(const struct sl_thread *t) { return t->n_cur + t->n_wait; }

int main(int argc, char **argv)
{
    double scale = t_scale(argc, argv);
    unsigned rounds = (unsigned)(20000 * scale) + 50, max_pending = 0;
    const char *env = getenv("SLUICE_EPOCH_FENCED");
    bool want_fenced = env != NULL && env[0] == '1';
    struct sluice_policy p[2];
    pthread_t dl[DECIDERS], idle;
    struct sluice_stats st;
    struct sl_thread *me;

    signal(SIGALRM, watchdog);
    alarm(90);
    printf("epoch_asym: sections entered %s\n",
           sl_epoch_asymmetric() ? "without a fence (membarrier)" : "with a fence");
    if (want_fenced)
        CHECK(!sl_epoch_asymmetric());

    lim = t_limiter1(SLUICE_GCRA, 1000000, NS_PER_S, 1000, 0);
    for (int i = 0; i < 2; i++) {
        memset(&p[i], 0, sizeof(p[i]));
        CHECK_EQ(sluice_policy_add(&p[i], SLUICE_GCRA, 1000000 + (uint64_t)i, NS_PER_S), 0);
    }
    me = sl_thread_get();
    CHECK(me != NULL);
    if (pthread_create(&idle, NULL, idler, NULL) != 0)
        return 1;
    for (uintptr_t i = 0; i < DECIDERS; i++)
        if (pthread_create(&dl[i], NULL, decider_loop, (void *)(i + 1)) != 0)
            return 1;

    for (unsigned r = 0; r < rounds; r++) {
        char key[16];
        size_t len;
        key_of(r, key, &len);
        CHECK_EQ(sluice_set_policy(lim, &p[r % 2]), 0);
        (void)sluice_reset(lim, key, len);
        if (r % 4 == 0)
            (void)sluice_reap(lim, UINT64_C(1) << 50);
        sl_epoch_begin(me); /* callbacks may retire policies: inside a section */
        sl_epoch_poll(me);
        sl_epoch_end(me);
        if (pending(me) > max_pending)
            max_pending = pending(me);
    }
    atomic_store(&stop, true);
    for (int i = 0; i < DECIDERS; i++)
        pthread_join(dl[i], NULL);

    /* No other section is open now, and the idler sleeps registered: steps
     * that never wait must free everything.  Each step runs in a section of
     * its own (callbacks retire policies), which holds back only what that
     * step fenced: the next one frees it. */
    for (int i = 0; i < 8 && pending(me) > 0; i++) {
        sl_epoch_begin(me);
        sl_epoch_reclaim(me);
        sl_epoch_end(me);
    }
    CHECK_EQ(pending(me), 0);
    printf("epoch_asym: %u rounds, at most %u callbacks pending in the mutator\n", rounds,
           max_pending);

    sluice_stats(lim, &st);
    CHECK_U64(st.allowed + st.denied, atomic_load(&decided));

    pthread_mutex_lock(&idle_mu);
    idle_release = true;
    pthread_cond_signal(&idle_cv);
    pthread_mutex_unlock(&idle_mu);
    pthread_join(idle, NULL);
    sluice_destroy(lim);
    return t_done("epoch_asym");
}
