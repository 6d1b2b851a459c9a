/*
 * Shared limiters, what a killed process leaves behind, made on purpose
 * (internals: src/shm.h) rather than by chance as in shared_chaos:
 *   - a writer killed holding a shard lock, with a published entry frozen
 *     and its last_ns sealed, an entry allocated and never published, and
 *     a key reserved: the next caller takes the lock over, the key decides
 *     with its state and its latest admission time intact (also when the
 *     next holder seals another key of that shard before the repair),
 *     the count is right again and the lost entry comes back;
 *   - a process killed inside a section (left a zombie, not waited for), a
 *     record whose pid is alive but whose start time is another process's
 *     (a reused pid), and a record left mid-claim by a process killed
 *     between its claim and its owner store (or inside a reclaim, after
 *     its CAS and before clearing the counters): none stalls the reuse of
 *     memory, checked by cycling many times more keys through the table
 *     than it has entries.
 *   - a corrupt record that looks like a process stopped inside an
 *     acquire_all's window: a writer on the key gives up after 2 s with
 *     -EBUSY, changing nothing (stopped processes: shared_stopped.c).
 * A watchdog (alarm) turns a hang into a failure.
 */
#include <signal.h>
#include <sys/wait.h>

#include "shm_helpers.h"

#define S NS_PER_S
static const uint64_t T = UINT64_C(7000) * NS_PER_S;

static struct sluice_config cfg10(size_t max_keys)
{
    struct sluice_config cfg;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_FIXED_WINDOW, 10, S);
    cfg.max_keys = max_keys;
    cfg.max_key_len = 32;
    cfg.shards = 2;
    return cfg;
}

static void test_dead_writer(const char *path)
{
    struct sluice_config cfg = cfg10(64);
    sluice_t *l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
    struct sl_shm *m = l->shm;
    uint64_t lost = UINT64_MAX, n = 0;
    struct sluice_stats st;
    int pfd[2], status;
    pid_t pid;

    CHECK_EQ(sluice_acquire_at(l, "victim", 6, 3, T, NULL), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "other", 5, 1, T, NULL), SLUICE_ALLOW);
    CHECK(pipe(pfd) == 0);
    if ((pid = fork()) == 0) {
        uint64_t h = sl_hash(&l->hkey, "victim", 6);
        struct sl_shm_shard *s = &m->shards[m->shard_shift == 64 ? 0 : h >> m->shard_shift];
        struct sl_entry *e = t_shm_find(l, "victim");
        uint64_t idx;
        (void)sl_shm_word_lock(l, &s->lock, true);
        sl_entry_freeze_pol(e, atomic_load(&l->policy)); /* as a replace would, */
        (void)sl_last_seal(&e->last_ns, &s->sealed_last); /* its last_ns taken */
        idx = sl_shm_alloc(m);                           /* its new entry */
        atomic_fetch_add(&m->hdr->nkeys, 1);             /* a reservation */
        if (write(pfd[1], &idx, sizeof(idx)) != sizeof(idx))
            _exit(1);
        raise(SIGKILL);
    }
    CHECK(read(pfd[0], &lost, sizeof(lost)) == sizeof(lost));
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    CHECK(lost < m->pool && atomic_load(&m->states[lost]) == SL_ST_USED);
    alarm(30);
    /* the key decides, with the 3 units charged before the crash */
    while (sluice_acquire_at(l, "victim", 6, 1, T, NULL) == SLUICE_ALLOW)
        n++;
    CHECK_U64(n, 7);
    alarm(0);
    /* unsealed, with its latest admission time: later calls still commit */
    CHECK_U64(atomic_load(&t_shm_find(l, "victim")->last_ns), T + 1);
    sluice_stats(l, &st);
    CHECK_U64(st.keys, 2);                                     /* the reservation undone */
    CHECK((atomic_load(&m->states[lost]) & 3) == SL_ST_LIMBO); /* coming back */
    for (unsigned i = 0; i < l->nshards; i++)
        CHECK_U64(atomic_load(&m->shards[i].lock), 0);
    CHECK_U64(atomic_load(&m->hdr->repair), 0);
    sluice_destroy(l);
    close(pfd[0]);
    close(pfd[1]);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

/*
 * A writer killed after sealing key A's last_ns (a replace in progress),
 * and the next holder of that shard sealing key B before the repair: the
 * value saved for A must not be B's.  Before the fix A came back with B's
 * time, and a call stamped before A's latest admission was no longer
 * decided as at it.  One shard, so that both keys share it.
 */
static void test_dead_sealer(const char *path)
{
    struct sluice_config cfg = cfg10(64);
    sluice_t *l;
    struct sl_shm *m;
    const uint64_t ta = T + 100 * S;
    int status;
    pid_t pid;

    cfg.shards = 1;
    l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
    m = l->shm;
    CHECK_EQ(sluice_acquire_at(l, "A", 1, 10, ta, NULL), SLUICE_ALLOW); /* A spent, at ta */
    CHECK_EQ(sluice_acquire_at(l, "B", 1, 1, T, NULL), SLUICE_ALLOW);
    if ((pid = fork()) == 0) {
        struct sl_shm_shard *s = &m->shards[0];
        struct sl_entry *e = t_shm_find(l, "A");
        (void)sl_shm_word_lock(l, &s->lock, true);
        sl_entry_freeze_pol(e, atomic_load(&l->policy)); /* as a replace would */
        sl_store_rlx(&s->sealed_idx, sl_shm_entry_index(m, e) + 1);
        (void)sl_last_seal(&e->last_ns, &s->sealed_last);
        raise(SIGKILL);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    alarm(30);
    CHECK_EQ(sluice_reset(l, "B", 1), 0); /* takes the lock over, seals B */
    /* A is whole: its 10 units spent in ta's window, and a call stamped
     * before ta decided as at ta (denied), not in an empty earlier window */
    CHECK_U64(atomic_load(&t_shm_find(l, "A")->last_ns), ta + 1);
    CHECK_EQ(sluice_acquire_at(l, "A", 1, 1, T, NULL), SLUICE_DENY);
    CHECK_EQ(sluice_acquire_at(l, "A", 1, 1, ta + S, NULL), SLUICE_ALLOW);
    alarm(0);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

/*
 * A process killed inside an acquire_all's window (counted on a key, its
 * thread's window marked, not yet left): a writer on that key must not
 * wait on it for long (it waited 1 s per key, every time, and deciders on
 * the shard's keys waited behind it), and a key whose time word a corrupt
 * file left sealed, its state not frozen, must not make calls retry
 * forever (every commit failed on the seal).
 */
static void test_dead_committer(const char *path)
{
    struct sluice_config cfg = cfg10(64);
    sluice_t *l;
    uint64_t t0, waited, best = UINT64_MAX;
    int status;
    pid_t pid;

    l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
    CHECK_EQ(sluice_acquire_at(l, "s", 1, 3, T, NULL), SLUICE_ALLOW);
    /* The wait is judged on the best of up to 3 deaths: one that waits on
     * the dead (1 s a key) does in each, where a loaded machine holds the
     * writer up now and then. */
    for (int round = 0; round < 3 && best >= 500 * 1000 * 1000; round++) {
        CHECK_EQ(sluice_acquire_at(l, "c", 1, 3, T, NULL), SLUICE_ALLOW);
        if ((pid = fork()) == 0) {
            unsigned shm = sl_shm_enter(l);
            sl_shm_window(l, 0, 1); /* as sl_commits_count does */
            atomic_fetch_add(&t_shm_find(l, "c")->committing, 1);
            (void)shm;
            raise(SIGKILL);
        }
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        alarm(30);
        t0 = t_mono();
        CHECK_EQ(sluice_reset(l, "c", 1), 0); /* a writer that meets the count */
        waited = t_mono() - t0;
        alarm(0);
        best = waited < best ? waited : best;
    }
    CHECK(best < 500 * 1000 * 1000);
    alarm(30);
    CHECK_EQ(sluice_acquire_at(l, "c", 1, 10, T, NULL), SLUICE_ALLOW); /* reset: fresh */
    /* the corrupt time word: decided, not retried forever (repaired) */
    atomic_store(&t_shm_find(l, "s")->last_ns, SL_LAST_SEALED);
    CHECK(sluice_acquire_at(l, "s", 1, 1, T, NULL) >= 0);
    CHECK(atomic_load(&t_shm_find(l, "s")->last_ns) != SL_LAST_SEALED);
    alarm(0);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

/*
 * A corrupt file that looks like a process stopped in an acquire_all's
 * window (shared_stopped.c has the real one; fuzz_shared found this: a
 * writer hung for good): a record naming a live pid (1) with no start
 * time or mapping to test, a thread window open in it, and a count on a
 * key that no call will ever take back.  The writer gives up after 2 s, and again each time
 * (never a hang); decisions on the key go on.
 */
static void test_corrupt_window(const char *path)
{
    struct sluice_config cfg = cfg10(64);
    sluice_t *l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
    struct sl_shm *m = l->shm;
    struct sl_shm_proc *fake = &m->procs[SL_SHM_PROCS - 1];

    CHECK_EQ(sluice_acquire_at(l, "k", 1, 4, T, NULL), SLUICE_ALLOW);
    sl_store_rlx(&fake->start, 0);
    sl_store_rlx(&fake->base, 0);
    sl_store_rlx(&fake->stat[0].window, 1);
    sl_store_rel(&fake->owner, (UINT64_C(1) << 32) | 1);
    sl_store_rel(&m->hdr->procs_hi, SL_SHM_PROCS);
    atomic_fetch_add(&t_shm_find(l, "k")->committing, 1);
    alarm(30);
    CHECK_EQ(sluice_reset(l, "k", 1), -EBUSY);
    CHECK_EQ(sluice_reset(l, "k", 1), -EBUSY);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 6, T, NULL), SLUICE_ALLOW); /* 4 + 6: kept */
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, T, NULL), SLUICE_DENY);
    alarm(0);
    sl_store_rel(&fake->owner, 0); /* no process at all: the others' places */
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

/*
 * A shard lock word holding the very token the next process to attach will
 * get (left by a holder killed 2^21 claims of its record ago, or written
 * by a corrupt file): that process's first writer would wait on itself,
 * alive, for ever.  A claim clears lock words that hold its new token.
 */
static void test_lock_own_token(const char *path)
{
    struct sluice_config cfg = cfg10(64);
    sluice_t *l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
    struct sl_shm *m = l->shm;
    uint64_t inc = (sl_load_rlx(&m->hdr->incarnation) + 1) & 0x1fffff;
    uint64_t hi = sl_load_rlx(&m->hdr->procs_hi);
    int status;
    pid_t pid;

    CHECK_EQ(sluice_acquire_at(l, "k", 1, 4, T, NULL), SLUICE_ALLOW);
    CHECK(hi < SL_SHM_PROCS);
    /* the child's record: the first free one, index hi (the parent's below) */
    for (unsigned i = 0; i < l->nshards; i++)
        sl_store_rel(&m->shards[i].lock, (hi + 1) | inc << 11);
    if ((pid = fork()) == 0) {
        alarm(20);
        _exit(sluice_reset(l, "k", 1) == 0 ? 0 : 1);
    }
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    alarm(30);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 10, T, NULL), SLUICE_ALLOW); /* reset: fresh */
    alarm(0);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

/* Cycle many times more keys than entries through the table: each round
 * inserts max_keys new keys and reaps them all at a later time. */
static void churn(sluice_t *l, size_t max_keys, unsigned rounds, const char *what)
{
    static uint64_t t = T; /* on from the previous churn: reaps set a floor */
    unsigned full = 0;

    for (unsigned r = 0; r < rounds; r++) {
        t += 10 * S;
        for (size_t k = 0; k < max_keys; k++) {
            char key[32];
            struct sluice_result res;
            int n = snprintf(key, sizeof(key), "r%u-k%zu", r, k);
            CHECK_EQ(sluice_acquire_at(l, key, (size_t)n, 1, t, &res), SLUICE_ALLOW);
            full += (res.flags & SLUICE_F_FULL) != 0;
        }
        CHECK_U64(sluice_reap(l, t + 5 * S), max_keys - 0);
    }
    if (full != 0)
        fprintf(stderr, "%s: %u new keys found no free entry\n", what, full);
    CHECK_EQ(full, 0);
}

/* Field 22 of /proc/PID/stat: the start time a claim word keeps. */
static uint64_t start_of(pid_t pid)
{
    char p[64], buf[1024], *s;
    unsigned long long v = 0;
    size_t n;
    FILE *f;

    snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
    if ((f = fopen(p, "r")) == NULL)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    if ((s = strrchr(buf, ')')) == NULL ||
        sscanf(s + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
               &v) != 1)
        return 0;
    return v;
}

static void test_dead_section(const char *path)
{
    enum { MAX = 16 };
    struct sluice_config cfg = cfg10(MAX);
    sluice_t *l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
    struct sl_shm *m = l->shm;
    struct sl_shm_proc *fake;
    int status;
    pid_t pid;

    if ((pid = fork()) == 0) {
        (void)sl_shm_enter(l); /* and never leaves */
        raise(SIGKILL);
    }
    /* not waited for yet: a zombie holds the section */
    while (kill(pid, 0) == 0) {
        char p[64], st = 0;
        FILE *f;
        snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
        if ((f = fopen(p, "r")) == NULL)
            break;
        if (fscanf(f, "%*d %*s %c", &st) != 1)
            st = 0;
        fclose(f);
        if (st == 'Z')
            break;
    }
    alarm(60);
    churn(l, MAX, 40, "dead section (zombie)");
    waitpid(pid, &status, 0);
    /* a live pid with another process's start time: a reused pid */
    fake = &m->procs[SL_SHM_PROCS - 1];
    atomic_store(&fake->start, 12345);
    atomic_store(&fake->cnt[0], 1);
    atomic_store(&fake->cnt[1], 1);
    atomic_store(&fake->owner, (uint64_t)(uint32_t)getpid() | (UINT64_C(77) << 32));
    atomic_store(&m->hdr->procs_hi, SL_SHM_PROCS);
    churn(l, MAX, 40, "reused pid");
    CHECK_U64(atomic_load(&fake->owner), 0); /* reclaimed */
    /* a claimer killed mid-claim: its record holds its claim word, with the
     * counters a reclaim it interrupted never cleared */
    if ((pid = fork()) == 0)
        _exit(0);
    waitpid(pid, &status, 0);
    atomic_store(&fake->cnt[0], 1);
    atomic_store(&fake->cnt[1], 1);
    atomic_store(&fake->owner, sl_shm_claim_make((uint32_t)pid, sl_shm_self_start()));
    churn(l, MAX, 40, "dead claimer");
    CHECK_U64(atomic_load(&fake->owner), 0); /* reclaimed */
    /* the same, its pid since reused by a live process (started later:
     * another start time) */
    if ((pid = fork()) == 0) {
        pause();
        _exit(0);
    }
    atomic_store(&fake->cnt[0], 1);
    atomic_store(&fake->cnt[1], 1);
    atomic_store(&fake->owner, sl_shm_claim_make((uint32_t)pid, sl_shm_self_start() - 1));
    churn(l, MAX, 40, "dead claimer, pid reused");
    CHECK_U64(atomic_load(&fake->owner), 0); /* reclaimed */
    /* a live claimer is alive; the same pid with another start is not */
    CHECK(!sl_shm_proc_dead(sl_shm_claim_make((uint32_t)pid, start_of(pid)), 0));
    CHECK(sl_shm_proc_dead(sl_shm_claim_make((uint32_t)pid, start_of(pid) + 1), 0));
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    alarm(0);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

/* A process that dies (SIGKILL) inside a section of l's file. */
static void die_in_section(sluice_t *l)
{
    int status;
    pid_t pid = fork();

    if (pid == 0) {
        (void)sl_shm_enter(l); /* and never leaves */
        raise(SIGKILL);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

/*
 * New keys while the entries that would take them wait out a grace period
 * (resets retire one entry each), and reaps never run.  The entries are
 * no key's: a new key must wait for them, never be refused as
 * SLUICE_F_FULL.  Before the fix an insert that found no free entry was
 * decided as full at once, from inside its own section (which holds back
 * the second of the two advances those entries need): one new key refused
 * with 1 of 64 keys live; and, a process killed inside a section stalling
 * the epoch, every new key refused until a reap (the only decision path
 * that asked whether a stalling process was dead).
 */
static void fresh_after_resets(const char *path, bool dead_section)
{
    struct sluice_config cfg = cfg10(64);
    sluice_t *l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
    struct sl_shm *m = l->shm;
    struct sluice_stats st;
    unsigned full = 0, resets = (unsigned)m->pool - 42;

    CHECK_EQ(sluice_acquire_at(l, "a", 1, 1, T, NULL), SLUICE_ALLOW);
    if (dead_section)
        die_in_section(l);
    alarm(60);
    for (unsigned i = 0; i < resets; i++) /* each retires an entry */
        CHECK_EQ(sluice_reset(l, "a", 1), 0);
    for (unsigned k = 0; k < 63; k++) {
        char key[32];
        struct sluice_result res;
        int n = snprintf(key, sizeof(key), "new-%u", k);
        int rc = sluice_acquire_at(l, key, (size_t)n, 1, T, &res);
        CHECK(rc >= 0);
        full += rc < 0 || (res.flags & SLUICE_F_FULL) != 0;
    }
    alarm(0);
    sluice_stats(l, &st);
    if (full != 0)
        fprintf(stderr, "fresh after resets%s: %u of 63 new keys refused as full\n",
                dead_section ? " (dead section)" : "", full);
    CHECK_EQ(full, 0);
    CHECK_U64(st.keys, 64);
    CHECK_U64(st.full, 0);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

/*
 * The same for a shard's slots: a shard whose array is 7/8 tombstones
 * (reaped keys), rebuilt into its other array only once that one's grace
 * period is over.  Its new keys wait for the rebuild, never refused as
 * full (before the fix: one refused, or all of them while a dead
 * process's section stalled the epoch, until a reap).
 */
static void fresh_after_tombs(const char *path, bool dead_section)
{
    struct sluice_config cfg = cfg10(64);
    sluice_t *l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
    struct sl_shm *m = l->shm;
    struct sl_shm_shard *s = &m->shards[0];
    sl_aword *a = sl_shm_array(m, s, atomic_load(&s->cur));
    uint64_t tombs = m->nslots * 7 / 8;
    unsigned full = 0, tried = 0;

    for (uint64_t j = 0; j < tombs; j++) /* as reaps leave them */
        atomic_store(&a[j], SL_TOMB);
    atomic_store(&s->used, tombs);
    atomic_store(&s->retired[(atomic_load(&s->cur) & 1) ^ 1], atomic_load(&m->hdr->epoch));
    if (dead_section)
        die_in_section(l);
    alarm(60);
    for (unsigned k = 0; tried < 8; k++) { /* 8 new keys of shard 0 */
        char key[32];
        struct sluice_result res;
        int n = snprintf(key, sizeof(key), "new-%u", k), rc;
        if ((sl_hash(&l->hkey, key, (size_t)n) >> m->shard_shift) != 0)
            continue;
        rc = sluice_acquire_at(l, key, (size_t)n, 1, T, &res);
        CHECK(rc >= 0);
        full += rc < 0 || (res.flags & SLUICE_F_FULL) != 0;
        tried++;
    }
    alarm(0);
    if (full != 0)
        fprintf(stderr, "fresh after tombstones%s: %u of 8 new keys refused as full\n",
                dead_section ? " (dead section)" : "", full);
    CHECK_EQ(full, 0);
    CHECK_U64(atomic_load(&s->live), 8);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

static void test_fresh_after_resets(const char *path)
{
    fresh_after_resets(path, false);
    fresh_after_resets(path, true);
    fresh_after_tombs(path, false);
    fresh_after_tombs(path, true);
}

/*
 * A corrupt file where two slots name one entry: moving every key to a new
 * policy froze and retired the entry through the first slot, and retried
 * the second (an entry that never thaws) for ever, holding the file's
 * policy lock.  set_policy now gives up with -EPROTO in bounded time, and
 * every later call on the file returns.
 */
static void test_corrupt_slots(const char *path)
{
    struct sluice_config cfg = cfg10(64);
    struct sluice_policy lower = {0};
    sluice_t *l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL);
    struct sl_shm *m = l->shm;
    uint64_t h = sl_hash(&l->hkey, "a", 1), mask = m->nslots - 1, i;
    struct sl_shm_shard *s = &m->shards[m->shard_shift == 64 ? 0 : h >> m->shard_shift];
    sl_aword *slot = NULL, *a = sl_shm_array(m, s, atomic_load(&s->cur));

    CHECK_EQ(sluice_acquire_at(l, "a", 1, 1, T, NULL), SLUICE_ALLOW);
    CHECK(sl_shm_lookup(m, s, h, "a", 1, &slot) != NULL);
    for (i = (uint64_t)(slot - a + 1) & mask; atomic_load(&a[i]) != 0; i = (i + 1) & mask)
        ;
    atomic_store(&a[i], atomic_load(slot));
    sluice_policy_add(&lower, SLUICE_FIXED_WINDOW, 5, S);
    alarm(60);
    CHECK_EQ(sluice_set_policy(l, &lower), -EPROTO);
    CHECK_EQ(sluice_set_policy(l, &lower), -EPROTO); /* the move is still owed */
    CHECK(sluice_acquire_at(l, "b", 1, 1, T, NULL) >= -EPROTO);
    alarm(0);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

/*
 * A corrupt file whose free record (owner 0) holds open windows and epoch
 * counts, and an entry with a count no call left: the next handle claims
 * that record, and a writer meeting the count asked whether a live process
 * has a thread in a window.  Its own record said yes, so override_set
 * waited on itself for ever (found by fuzz_shared).  A claim now starts
 * its record's counters at zero.
 */
static void test_stale_free_record(const char *path)
{
    struct sluice_config cfg = cfg10(64);
    struct sluice_policy ovr = {0};
    sluice_t *l = t_open_shared(path, &cfg, SLUICE_SHARED_CREATE | SLUICE_SHARED_EXCL), *l2;
    struct sl_shm *m = l->shm;

    CHECK_EQ(sluice_acquire_at(l, "a", 1, 1, T, NULL), SLUICE_ALLOW);
    for (unsigned i = 0; i < SL_SHM_PROCS; i++) {
        struct sl_shm_proc *p = &m->procs[i];
        if (atomic_load(&p->owner) != 0)
            continue;
        atomic_store(&p->cnt[0], 1);
        for (unsigned k = 0; k <= SL_SHM_TSLOTS; k++)
            atomic_store(&p->stat[k].window, 1);
    }
    atomic_fetch_add(&t_shm_find(l, "a")->committing, 1);
    l2 = t_open_shared(path, NULL, 0); /* claims one of those records */
    sluice_policy_add(&ovr, SLUICE_FIXED_WINDOW, 3, S);
    alarm(30);
    CHECK_EQ(sluice_override_set(l2, "a", 1, &ovr), 0);
    CHECK_EQ(sluice_acquire_at(l2, "a", 1, 2, T, NULL), SLUICE_ALLOW); /* 1 + 2 of 3 */
    CHECK_EQ(sluice_acquire_at(l, "a", 1, 1, T, NULL), SLUICE_DENY);
    CHECK_EQ(sluice_override_clear(l2, "a", 1), 0);
    alarm(0);
    sluice_destroy(l2);
    sluice_destroy(l);
    CHECK_EQ(sluice_unlink_shared(path), 0);
}

int main(void)
{
    char path[256];

    t_shm_path(path, sizeof(path), "repair");
    test_dead_writer(path);
    test_dead_sealer(path);
    test_dead_committer(path);
    test_corrupt_window(path);
    test_lock_own_token(path);
    test_dead_section(path);
    test_fresh_after_resets(path);
    test_corrupt_slots(path);
    test_stale_free_record(path);
    return t_done("shared_repair");
}
