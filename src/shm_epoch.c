/*
 * Shared limiters across processes: process records, the file's epoch and
 * the entry pool.
 *
 * ck_epoch records live in one process's memory, so the file has its own
 * epoch.  Each attached process owns a record with two section counters,
 * one per epoch parity (a process's threads share it).  A section adds one
 * to cnt[e & 1] for the epoch e it began at.  The epoch moves from e to
 * e + 1 only when every record's cnt[(e + 1) & 1] is 0, i.e. no section
 * begun at e - 1 (or before) is still running; so once the epoch is e + 2,
 * every section that began at e or earlier has ended, and an entry
 * unpublished at epoch e can be reused.  A record whose process is dead
 * (kill(pid, 0) fails with ESRCH, or /proc/PID/stat shows a zombie or
 * another start time: the pid was reused) is reclaimed by whoever waits
 * for it: its counters are cleared and it is freed.  A dead process so
 * stalls reclamation only until the next advance looks at it.
 *
 * Memory orders.  Begin: the counter's add and the confirming load of the
 * epoch are seq_cst, and so are the lookups' slot loads; a writer stores
 * the unpublishing slot value (seq_cst), then reads the epoch it retires
 * the entry at by a seq_cst read-modify-write.  If a reader's slot load
 * missed that store, it precedes the store in the single order S, so the
 * reader's confirmed epoch (before its slot load) precedes the writer's
 * read of the epoch: it is at most the retirement epoch.  End: a release
 * subtraction; the advance reads counters seq_cst (acquire) and moves the
 * epoch with a seq_cst CAS, which a reusing writer reads before it writes
 * the entry: every reader's accesses happen before the reuse.
 */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shm.h"

/*
 * A record being claimed or reclaimed holds a claim word: bit 63, the low
 * 31 bits of the claimer's start time (/proc/PID/stat) and its pid.  A full
 * owner word never has bit 63 (its incarnation keeps 31 bits).  A process
 * killed between its claim and its owner store, or inside a reclaim, leaves
 * a claim word whose process is gone: the next process that needs the
 * record, or the epoch, reclaims it as any dead owner's.  The start time
 * tells a reused pid from the claimer, and makes two claims of one pid
 * different words (a reclaim's CAS cannot take a claim made since).
 */
static uint64_t sl_shm_claim_word(void)
{
    return sl_shm_claim_make((uint32_t)getpid(), sl_shm_self_start());
}

static bool sl_shm_is_claim(uint64_t owner)
{
    return (owner & SL_SHM_CLAIM_BIT) != 0;
}
#define SL_SHM_SPIN 256             /* reads of a busy counter before asking if its owner lives */


/* Field 22 of /proc/PID/stat (start time in clock ticks since boot) and
 * field 3 (state); false if the process is not there. */
static bool sl_proc_stat(long pid, uint64_t *start, char *state)
{
    char path[64], buf[1024], *p;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    if ((f = fopen(path, "re")) == NULL)
        return false;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* the command name may hold spaces and parentheses: skip to the last ')' */
    if ((p = strrchr(buf, ')')) == NULL || p[1] == '\0')
        return false;
    p += 2;
    *state = *p;
    for (int field = 3; field < 22 && p != NULL; field++)
        if ((p = strchr(p, ' ')) != NULL)
            p++;
    *start = p != NULL ? strtoull(p, NULL, 10) : 0;
    return true;
}

/* Threads of process pid (/proc/PID/status), 0 if not known.  A process
 * whose main thread has exited reads as a zombie in /proc/PID/stat while
 * its other threads still run: a zombie with threads is alive. */
static unsigned long sl_proc_threads(long pid)
{
    char path[64], line[256];
    unsigned long n = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%ld/status", pid);
    if ((f = fopen(path, "re")) == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "Threads: %lu", &n) == 1)
            break;
    fclose(f);
    return n;
}

uint64_t sl_shm_self_start(void)
{
    uint64_t start = 0;
    char state;

    return sl_proc_stat((long)getpid(), &start, &state) ? start : 0;
}

bool sl_shm_proc_dead(uint64_t owner, uint64_t start)
{
    long pid = (long)(owner & UINT32_MAX);
    uint64_t now_start;
    char state;

    if (owner == 0 || pid == 0)
        return true; /* no process has pid 0: a corrupt file's record */
    if (sl_shm_is_claim(owner))
        start = (owner >> 32) & UINT64_C(0x7fffffff); /* the claimer's, not the record's */
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return true;
    if (!sl_proc_stat(pid, &now_start, &state))
        return access("/proc/self/stat", F_OK) == 0; /* no /proc at all: trust kill */
    if (sl_shm_is_claim(owner))
        now_start = SL_SHM_START_TAG(now_start);
    return (state == 'Z' && sl_proc_threads(pid) <= 1) || state == 'X' ||
           (start != 0 && now_start != start);
}

/*
 * The mapping of process pid that starts at base, from /proc/PID/maps:
 * 1 found (its device and inode as maps shows them), 0 none starts there,
 * -1 not known: unreadable (another user's or a non-dumpable process, no
 * /proc, out of descriptors) or no mapping listed at all (a process whose
 * main thread has exited lists none there while its other threads run).
 * Devices as maps shows them, never as stat(2) does: on btrfs a file's
 * st_dev is not its filesystem's device, and a test against it found
 * every live process gone.
 */
static int sl_maps_at(long pid, uint64_t base, struct sl_maps_id *id)
{
    char path[64], line[512];
    bool whole = true, any = false;
    int found = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%ld/maps", pid);
    if ((f = fopen(path, "re")) == NULL)
        return -1;
    while (found == 0 && fgets(line, sizeof(line), f) != NULL) {
        unsigned long long lo, hi, off, inode;
        unsigned maj, mnr;
        /* a line longer than the buffer (a long path) goes on in the next
         * reads: only the first piece of a line starts with its fields */
        bool start = whole;
        whole = strchr(line, '\n') != NULL;
        any = true;
        if (start && sscanf(line, "%llx-%llx %*s %llx %x:%x %llu", &lo, &hi, &off, &maj, &mnr,
                            &inode) == 6 && lo == base) {
            *id = (struct sl_maps_id){maj, mnr, inode};
            found = 1;
        }
    }
    if (ferror(f) || !any)
        found = -1;
    fclose(f);
    return found;
}

void sl_shm_maps_self(struct sl_shm *m)
{
    m->maps_known = sl_maps_at((long)getpid(), (uint64_t)(uintptr_t)m->base, &m->maps_id) == 1;
}

bool sl_shm_record_dead(const struct sl_shm *m, struct sl_shm_proc *p, uint64_t owner)
{
    uint64_t base = sl_load_rlx(&p->base);
    struct sl_maps_id id;
    int r;

    if (sl_shm_proc_dead(owner, sl_load_rlx(&p->start)))
        return true;
    /* a claim names its claimer, not the record's owner: never unmapped;
     * and a process that could not find its own mapping tests no other's */
    if (sl_shm_is_claim(owner) || base == 0 || !m->maps_known)
        return false;
    r = sl_maps_at((long)(owner & UINT32_MAX), base, &id);
    return r == 0 || (r == 1 && (id.maj != m->maps_id.maj || id.mnr != m->maps_id.mnr ||
                                 id.ino != m->maps_id.ino));
}

/* Free a dead process's record.  Only the CAS winner touches the counters,
 * so a record claimed again meanwhile is never cleared. */
static void sl_proc_clear_counts(struct sl_shm_proc *p)
{
    sl_store_rlx(&p->cnt[0], 0);
    sl_store_rlx(&p->cnt[1], 0);
    for (unsigned k = 0; k <= SL_SHM_TSLOTS; k++)
        sl_store_rlx(&p->stat[k].window, 0); /* the dead threads' windows */
}

static void sl_proc_reclaim(struct sl_shm_proc *p, uint64_t owner)
{
    if (!atomic_compare_exchange_strong_explicit(&p->owner, &owner, sl_shm_claim_word(),
                                                 memory_order_acq_rel, memory_order_relaxed))
        return;
    sl_proc_clear_counts(p);
    sl_store_rel(&p->owner, 0); /* release: the cleared counters first */
}

static uint32_t sl_shm_token_of(const struct sl_shm *m, int pi);

/*
 * A lock word may already hold the token a claim makes: its holder died
 * 2^21 claims of this record ago and no one has locked since, or the file
 * is corrupt.  Left so, the claimer's first writer would wait on a holder
 * that is alive, itself, for ever.  Such a word gets the record's index
 * alone, a token no owner has (incarnations are never 0 in their low 21
 * bits), so the next locker takes it over as a dead holder's, and has
 * what it left repaired (sl_shm_locked).  Before any thread of this
 * process can lock: the claim is not yet returned.
 */
static void sl_proc_drop_stale_locks(struct sl_shm *m, uint32_t tok)
{
    uint64_t n = m->hdr->nshards; /* the layout's: checked on attach */

    for (uint64_t i = 0; i <= n; i++) {
        sl_aword *w = i < n ? &m->shards[i].lock : &m->hdr->pol_lock;
        uint64_t cur = tok;
        (void)atomic_compare_exchange_strong_explicit(w, &cur, tok & 0x7ff, memory_order_relaxed,
                                                      memory_order_relaxed);
    }
}

static int sl_proc_claim(struct sl_shm *m, uint64_t *owner_out)
{
    struct sl_shm_hdr *h = m->hdr;
    uint64_t claim = sl_shm_claim_word();

    for (int pass = 0; pass < 2; pass++) {
        for (unsigned i = 0; i < SL_SHM_PROCS; i++) {
            struct sl_shm_proc *p = &m->procs[i];
            uint64_t o = 0, hi, inc;
            if (sl_load_rlx(&p->owner) != 0 ||
                !atomic_compare_exchange_strong_explicit(&p->owner, &o, claim,
                                                         memory_order_acq_rel,
                                                         memory_order_relaxed))
                continue;
            /* the start time before the owner: a liveness test never sees
             * this pid with another process's start time */
            sl_store_rlx(&p->start, sl_shm_self_start());
            sl_store_rlx(&p->base, (uint64_t)(uintptr_t)m->base);
            /* A free record's counters are zero unless the file is corrupt:
             * then a window left open would read as one of this process's
             * own threads, and a writer meeting a stray count on an entry
             * would wait on itself.  Published by the owner store below. */
            sl_proc_clear_counts(p);
            /* tokens keep the low 21 bits of the incarnation: never 0 there,
             * so no token matches a record whose word is a claim's */
            do
                inc = (atomic_fetch_add_explicit(&h->incarnation, 1, memory_order_relaxed) + 1) &
                      UINT64_C(0x7fffffff); /* bit 63 of the word is the claim bit */
            while ((inc & 0x1fffff) == 0);
            o = (uint64_t)(uint32_t)getpid() | (inc << 32);
            sl_store_rel(&p->owner, o);
            sl_proc_drop_stale_locks(m, sl_shm_token_of(m, (int)i));
            hi = sl_load_rlx(&h->procs_hi);
            while (hi < i + 1 && !atomic_compare_exchange_weak_explicit(
                                     &h->procs_hi, &hi, i + 1, memory_order_release,
                                     memory_order_relaxed))
                ;
            *owner_out = o;
            return (int)i;
        }
        for (unsigned i = 0; i < SL_SHM_PROCS; i++) { /* make room: dead processes' records */
            uint64_t o = sl_load_acq(&m->procs[i].owner);
            if (o != 0 && sl_shm_record_dead(m, &m->procs[i], o))
                sl_proc_reclaim(&m->procs[i], o);
        }
    }
    return -ENOMEM;
}

/* me: (fork generation << 32) | (record + 1) in one word, so a thread
 * never pairs one fork's record with another's generation. */
static int sl_shm_me(struct sluice *l)
{
    struct sl_shm *m = l->shm;
    uint64_t fg = sl_fork_generation();
    uint64_t me = atomic_load_explicit(&m->me, memory_order_acquire), owner;
    int pi;

    if ((me >> 32) == fg && (me & UINT32_MAX) != 0)
        return (int)(me & UINT32_MAX) - 1;
    /* A child after fork: claim one now, waiting while every record is
     * taken by live processes (sluice.h: 1024 processes at once). */
    while ((pi = sl_proc_claim(m, &owner)) < 0) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (!atomic_compare_exchange_strong_explicit(&m->me, &me, (fg << 32) | (uint64_t)(pi + 1),
                                                 memory_order_acq_rel, memory_order_acquire)) {
        sl_store_rel(&m->procs[pi].owner, 0); /* another thread of ours won */
        return sl_shm_me(l);
    }
    atomic_store_explicit(&m->owner, owner, memory_order_relaxed);
    return pi;
}

int sl_shm_register(struct sluice *l)
{
    struct sl_shm *m = l->shm;
    uint64_t owner;
    int pi;

    sl_fork_watch(); /* a child's handles take a record of their own on first use */
    if ((pi = sl_proc_claim(m, &owner)) < 0)
        return pi;
    atomic_store_explicit(&m->owner, owner, memory_order_relaxed);
    atomic_store_explicit(&m->me,
                          ((uint64_t)sl_fork_generation()
                           << 32) | (uint64_t)(pi + 1),
                          memory_order_release);
    return 0;
}

/* Leave the file: only a record this process (not a parent before fork)
 * claimed, and only if it is still ours. */
void sl_shm_unregister(struct sluice *l)
{
    struct sl_shm *m = l->shm;
    uint64_t me = atomic_load_explicit(&m->me, memory_order_acquire);
    uint64_t owner = atomic_load_explicit(&m->owner, memory_order_relaxed);

    if ((me & UINT32_MAX) == 0 ||
        (me >> 32) != sl_fork_generation())
        return;
    (void)atomic_compare_exchange_strong_explicit(&m->procs[(me & UINT32_MAX) - 1].owner, &owner,
                                                  0, memory_order_release, memory_order_relaxed);
}

unsigned sl_shm_enter(struct sluice *l)
{
    struct sl_shm *m = l->shm;
    struct sl_shm_proc *p = &m->procs[sl_shm_me(l)];
    struct sl_policy *cur;

    for (;;) {
        uint64_t e = atomic_load_explicit(&m->hdr->epoch, memory_order_seq_cst);
        atomic_fetch_add_explicit(&p->cnt[e & 1], 1, memory_order_seq_cst);
        if (atomic_load_explicit(&m->hdr->epoch, memory_order_seq_cst) == e) {
            cur = atomic_load_explicit(&l->policy, memory_order_acquire);
            if (cur->shm_ref != sl_load_acq(l->shm_gen))
                sl_shm_refresh(l);
            return (unsigned)((p - m->procs) << 1) | (unsigned)(e & 1);
        }
        atomic_fetch_sub_explicit(&p->cnt[e & 1], 1, memory_order_release);
    }
}

void sl_shm_leave(struct sluice *l, unsigned token)
{
    /* release: this section's reads happen before a reuse (see above) */
    atomic_fetch_sub_explicit(&l->shm->procs[token >> 1].cnt[token & 1], 1, memory_order_release);
}

/* Each distinct shared limiter of a decision once. */
void sl_shm_enter_targets(struct sl_target *g, size_t n, unsigned *tokens)
{
    for (size_t i = 0; i < n; i++) {
        bool seen = false;
        for (size_t k = 0; k < i && !seen; k++)
            seen = g[k].l == g[i].l;
        if (g[i].l->shm != NULL && !seen)
            tokens[i] = sl_shm_enter(g[i].l);
        else
            tokens[i] = UINT_MAX;
    }
}

void sl_shm_leave_targets(struct sl_target *g, size_t n, const unsigned *tokens)
{
    for (size_t i = 0; i < n; i++)
        if (tokens[i] != UINT_MAX)
            sl_shm_leave(g[i].l, tokens[i]);
}

bool sl_shm_advance(struct sl_shm *m, bool check_dead)
{
    struct sl_shm_hdr *h = m->hdr;
    uint64_t e = atomic_load_explicit(&h->epoch, memory_order_seq_cst);
    uint64_t hi = sl_min64(sl_load_acq(&h->procs_hi), SL_SHM_PROCS);
    unsigned par = (unsigned)((e + 1) & 1);

    for (uint64_t i = 0; i < hi; i++) {
        struct sl_shm_proc *p = &m->procs[i];
        for (unsigned spin = 0;
             atomic_load_explicit(&p->cnt[par], memory_order_seq_cst) != 0; spin++) {
            uint64_t owner;
            if (spin < SL_SHM_SPIN) {
                sl_cpu_relax();
                continue;
            }
            owner = sl_load_acq(&p->owner);
            if (!check_dead || !sl_shm_record_dead(m, p, owner))
                return false; /* a live process is in a section: later */
            sl_proc_reclaim(p, owner);
            break;
        }
    }
    return atomic_compare_exchange_strong_explicit(&h->epoch, &e, e + 1, memory_order_seq_cst,
                                                   memory_order_seq_cst);
}

static bool sl_state_reusable(uint64_t s, uint64_t epoch)
{
    return s == SL_ST_FREE || ((s & 3) == SL_ST_LIMBO && (s >> 2) + 2 <= epoch);
}

uint64_t sl_shm_alloc(struct sl_shm *m)
{
    struct sl_shm_hdr *h = m->hdr;

    for (int round = 0; round < 2; round++) {
        uint64_t ep = atomic_load_explicit(&h->epoch, memory_order_seq_cst);
        uint64_t i = sl_load_rlx(&h->alloc_cursor) % m->pool;
        for (uint64_t n = 0; n < m->pool; n++, i = i + 1 == m->pool ? 0 : i + 1) {
            uint64_t s = sl_load_acq(&m->states[i]);
            if (sl_state_reusable(s, ep) && sl_cas_acqrel(&m->states[i], &s, SL_ST_USED)) {
                sl_store_rlx(&h->alloc_cursor, i + 1); /* a hint */
                return i;
            }
        }
        (void)sl_shm_advance(m, false);
        (void)sl_shm_advance(m, false);
    }
    return UINT64_MAX;
}

void sl_shm_free_unseen(struct sl_shm *m, uint64_t idx)
{
    sl_store_rel(&m->states[idx], SL_ST_FREE);
}

void sl_shm_retire(struct sl_shm *m, uint64_t idx)
{
    /* a seq_cst read-modify-write, after the seq_cst unpublishing store
     * (see the comment at the top; TSan has no fences) */
    uint64_t e = atomic_fetch_add_explicit(&m->hdr->epoch, 0, memory_order_seq_cst);

    sl_store_rel(&m->states[idx], (e << 2) | SL_ST_LIMBO);
}

int sl_shm_word_lock(struct sluice *l, sl_aword *w, bool wait)
{
    uint64_t tok = sl_shm_pin_token(l);

    for (unsigned n = 0;; n++) {
        uint64_t cur = sl_load_rlx(w);
        /* acquire: the previous holder's section happens before ours */
        if (cur == 0 && atomic_compare_exchange_weak_explicit(w, &cur, tok, memory_order_acquire,
                                                              memory_order_relaxed))
            return 0;
        if (cur == 0)
            continue;
        if (!wait && n >= 64)
            return -1;
        if (n % 64 == 63 && !sl_shm_pin_live(l->shm, (uint32_t)cur) &&
            atomic_compare_exchange_strong_explicit(w, &cur, tok, memory_order_acquire,
                                                    memory_order_relaxed))
            return 1; /* its owner died holding it */
        if (n < 128) {
            sl_cpu_relax();
        } else if (n < 1024) {
            sched_yield();
        } else {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}

void sl_shm_word_unlock(sl_aword *w)
{
    sl_store_rel(w, 0);
}

/* The token of record pi: its index and incarnation, read from the record
 * itself (claimed, with that owner, before any thread could see pi in
 * m->me: a child's second thread never pairs the new record with the
 * parent's incarnation). */
static uint32_t sl_shm_token_of(const struct sl_shm *m, int pi)
{
    uint64_t owner = atomic_load_explicit(&m->procs[pi].owner, memory_order_acquire);

    return (uint32_t)(pi + 1) | (uint32_t)(((owner >> 32) & 0x1fffff) << 11);
}

uint32_t sl_shm_pin_token(struct sluice *l)
{
    return sl_shm_token_of(l->shm, sl_shm_me(l));
}

/* This process's token in the file (its record, which sl_shm_enter made
 * current), as sl_shm_pin_token. */
static uint32_t sl_shm_holder_token(const struct sl_holder *h)
{
    const struct sl_shm *m = (const void *)((const char *)h - offsetof(struct sl_shm, holder));
    uint64_t me = atomic_load_explicit(&m->me, memory_order_acquire);

    return sl_shm_token_of(m, (int)(me & UINT32_MAX) - 1);
}

static bool sl_shm_holder_dead(const struct sl_holder *h, uint32_t token)
{
    return !sl_shm_pin_live((struct sl_shm *)((char *)(uintptr_t)h - offsetof(struct sl_shm, holder)),
                            token);
}

void sl_shm_holder_init(struct sl_shm *m)
{
    m->holder.token = sl_shm_holder_token;
    m->holder.dead = sl_shm_holder_dead;
    m->holder.give_up_ns = SL_HOLDER_GIVE_UP_NS;
    m->holder.stuck = m->log_stuck;
}

bool sl_shm_pin_live(struct sl_shm *m, uint32_t pin)
{
    uint32_t idx = (pin & 0x7ff) - 1;
    uint64_t owner;

    if (pin == 0 || idx >= SL_SHM_PROCS)
        return false;
    owner = sl_load_acq(&m->procs[idx].owner);
    return !sl_shm_is_claim(owner) && ((owner >> 32) & 0x1fffff) == pin >> 11 &&
           !sl_shm_record_dead(m, &m->procs[idx], owner);
}

/*
 * The window of a call on several keys (charge.c, sl_commits_count): each
 * thread marks its own counter slot of its process's record, before its
 * count on the keys and after leaving it, so that a writer that meets a
 * count can tell one left by a killed process (no live process has a
 * thread in a window: the count is cleared) from a live call, however
 * slow or stopped, which it waits for (entry.c, sl_entry_commits_done).
 * The slot is the statistics' (sl_shm_slot_add); the entry count's RMWs
 * order the mark before the count and after the leave.
 */
void sl_shm_window(struct sluice *l, unsigned tid, int delta)
{
    sl_shm_slot_add(&sl_shm_own_slot(l->shm, tid)->window, tid, (uint64_t)(int64_t)delta);
}

bool sl_shm_window_live(struct sl_shm *m)
{
    uint64_t hi = sl_min64(sl_load_acq(&m->hdr->procs_hi), SL_SHM_PROCS);

    for (uint64_t i = 0; i < hi; i++) {
        struct sl_shm_proc *p = &m->procs[i];
        uint64_t owner = sl_load_acq(&p->owner);
        bool open = false;
        /* a window counts the process's threads inside it: a value past
         * 2^31 is a corrupt file's, not a call to wait for */
        for (unsigned k = 0; k <= SL_SHM_TSLOTS; k++) {
            uint64_t w = sl_load_acq(&p->stat[k].window);
            open |= w != 0 && w < UINT64_C(1) << 31;
        }
        if (open && !sl_shm_record_dead(m, p, owner))
            return true;
    }
    return false;
}
