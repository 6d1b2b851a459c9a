/*
 * Compiled policies and the algorithms' interface (policy.c, algo_*.c).
 * Part of the internal interfaces: included by internal.h, after the base
 * definitions it uses (sl_aword, SL_DEAD, SL_ASSERT), never on its own.
 */
#ifndef SL_POLICY_H
#define SL_POLICY_H
#ifndef SL_INTERNAL_H
#error "include internal.h"
#endif
/* ---- compiled policies (policy.c) ------------------------------------ */

/*
 * Who holds a sliding log's key while writing it (algo_log.c).  On a shared
 * limiter that is a process, which a SIGKILL can stop there for good, so a
 * waiter must be able to tell it died and release the key; the writer's
 * token (its process's place in the file) is stored in the word it holds.
 * NULL on in-process limiters, whose writers only die with their waiters.
 */
/* A live holder that stays in one write section this long is taken for a
 * stopped process (SIGSTOP, a debugger): its waiters give up rather than
 * wait for it (sl_holder.give_up_ns, sl_entry_commits_done). */
#define SL_HOLDER_GIVE_UP_NS (UINT64_C(2) * 1000000000)

struct sl_holder {
    uint32_t (*token)(const struct sl_holder *h);    /* the caller's: nonzero */
    bool (*dead)(const struct sl_holder *h, uint32_t token);
    /* How long a waiter waits for a live holder before it gives up (a
     * process stopped in its write section: SIGSTOP, a debugger); 0, for
     * ever (in-process: a thread of this process, a few stores long). */
    uint64_t give_up_ns;
    /* With give_up_ns: SL_HOLDER_STUCK fingerprints of the holds given up
     * on (algo_log.c, log_stuck_seen), so that a hold found stopped once
     * is not waited for again by each later call; NULL with 0. */
    _Atomic uint64_t *stuck;
};
#define SL_HOLDER_STUCK 8

/* One limit, validated and with everything the hot path needs precomputed. */
struct sl_lim {
    struct sluice_limit def;    /* as configured, burst/precision defaults filled */
    const struct sl_algo *ops;
    const struct sl_holder *holder; /* shared limiters' processes (above); else NULL */
    uint32_t off;               /* first state word of this limit in an entry */
    uint32_t nwords;
    uint64_t cap;               /* the largest cost ever admissible */
    /* GCRA: T = p/q ns (reduced; exact when count/gcd <= 1024, else rounded
     * up to q = a power of two), TAT stored as (A << fbits) | f meaning
     * A + f/q ns, A modulo 2^abits (algo_gcra.c). */
    uint64_t p, q, amask;
    unsigned fbits, abits;
    sl_u128 tau;                /* burst * p: tolerance scaled by q */
    struct sl_udiv by_p, by_q;  /* a result's numbers: x / p and x / q with no divide */
    /* Windowed algorithms: a word is (index mod 2^ibits) << ishift | counts;
     * the layout depends on the width only (algo_window.c). */
    uint64_t width;             /* window or sub-bucket width, ns */
    uint64_t nb;                /* SLIDING_WINDOW: sub-buckets per window */
    struct sl_udiv by_width, by_nb; /* x / width and x / nb with no divide */
    /* Idle beyond the range (sl_idle_beyond): after idle_over_ns since
     * last_ns the state is surely over; up to idle_read_ns its words read
     * right. */
    uint64_t idle_over_ns, idle_read_ns;
    unsigned cbits, ibits, ishift;
    uint64_t cmask, imask;
    /* A private limiter's default policies: the generation since which
     * every default has had a limit of this algorithm and period (policy.c,
     * sl_policy_follow); 0 elsewhere. */
    uint64_t since;
};

struct sl_policy {
    _Atomic uint64_t refs;      /* the limiter's current-policy slot and each entry */
    ck_epoch_entry_t retire;
    bool is_override;
    /* A private limiter's defaults: 1 for the first, +1 per set_policy; 0
     * for overrides and shared limiters' policies (migrated eagerly). */
    uint64_t gen;
    uint64_t shm_ref;           /* shared limiters: the entry tag it was compiled for */
    unsigned nlimits;
    uint32_t nwords;            /* state words of an entry under this policy */
    uint64_t min_cap;           /* the smallest cap: costs above it get -E2BIG */
    /* the greatest idle_over_ns of its limits if no limit's idle_read_ns is
     * below it, else UINT64_MAX (sl_idle_beyond) */
    uint64_t idle_fresh_ns;
    /* some limit numbers windows from time 0 or keeps absolute stamps (all
     * but GCRA): a time past the clock's wrap at 2^64 ns is decided as at
     * the key's latest admission before it (sl_decide_time) */
    bool absolute;
    /* one GCRA limit: its step inline in the lean path (acquire.c) */
    bool gcra_alone;
    /* two one-word limits (a peak and a quota), words 0 and 1: the lean
     * path charges both by one CAS of the pair (lean.h) */
    bool pair_cas;
    sl_aword *zero_w;           /* nwords zero words: the state of an absent key */
    struct sluice_policy def;
    /* nlimits of them: a process compiles one policy per override slot it
     * meets and retires one per slot reused, so its size is what an
     * override churn holds (test/policy_churn.c) */
    struct sl_lim lim[];
};

int sl_limit_compile(struct sl_lim *lim, const struct sluice_limit *def);
int sl_policy_new(const struct sluice_policy *def, bool is_override, struct sl_policy **out);
bool sl_policy_tryref(struct sl_policy *p);
void sl_policy_unref(struct sl_policy *p);
/* Drop n references at once (a batch of freed entries). */
void sl_policy_unref_n(struct sl_policy *p, uint64_t n);
/* Free a policy that was never published. */
void sl_policy_discard(struct sl_policy *p);
/* The policy's reserved words are zero (else -EINVAL: see sluice.h). */
bool sl_policy_reserved_zero(const struct sluice_policy *p);
/* A charge on `from`'s limit j, carried, sits word for word in `to`'s limit
 * j (policy.c: the conditions). */
bool sl_policy_same_words(const struct sl_policy *from, const struct sl_policy *to, unsigned j);
/* Number `p` as the default after `prev` (NULL: the first); unpublished. */
void sl_policy_follow(struct sl_policy *p, const struct sl_policy *prev);
/* Carry the frozen state of `from` into the private words of `to`: limits
 * with the same algorithm and period keep their state exactly (never
 * refilled, even when the count was lowered), others start fresh; from an
 * older default, only if every default since had that limit too (cur: the
 * default in force, NULL on shared limiters).  Returns the set of `from`'s
 * limits carried somewhere (bit j: limit j). */
unsigned sl_policy_carry(const struct sl_policy *from, sl_aword *from_w,
                         const struct sl_policy *to, sl_aword *to_w,
                         const struct sl_policy *cur, uint64_t now);

/* ---- algorithms (algo_*.c) ------------------------------------------- */

struct sl_report {
    uint64_t remaining;         /* units admissible now (after the charge, if any) */
    uint64_t retry_after;       /* wait before `cost` fits; 0 if it fits now */
    uint64_t reset_after;       /* wait until the limit is fully replenished */
    uint64_t reset_charged;     /* the same once `cost` is charged, if it fits
                                   (what a peek reports: sl_report_all) */
};

/*
 * The wait from now until the time `at` of a windowed algorithm (whose
 * times are absolute, never past the clock's wrap), exact in 128 bits:
 * UINT64_MAX when `at` lies past 2^64 - 1, a time no call can be stamped
 * with ("never", as sluice.h says; a saturated time was told as a finite
 * wait after which the call was still denied), `early` when `at` is not
 * after now.
 */
static inline uint64_t sl_wait_until(sl_u128 at, uint64_t now, uint64_t early)
{
    if (at > UINT64_MAX)
        return UINT64_MAX;
    return (uint64_t)at > now ? (uint64_t)at - now : early;
}

/*
 * The operations every algorithm provides; `w` points at the limit's words.
 * charge:   admit `cost` at `now` or write nothing (SL_OK / SL_NO / SL_FROZEN);
 *           receipt[0..SL_RECEIPT_WORDS) lets undo() find what was charged:
 *           receipt[0] is the algorithm's own, [1] and [2] the control word
 *           before and after the charge's CAS (windowed algorithms).
 * undo:     take back a charge (all-or-nothing rollback): only what that
 *           charge added, never another's; when it cannot tell, or the
 *           state is frozen, it leaves the state as it is.  false: left
 *           because frozen (the charge went with the state: charge.c,
 *           sl_undo_carried); true otherwise.
 * report:   read-only: would `cost` fit at `now`, and the numbers for results;
 *           out NULL: the verdict alone, without the divisions the numbers
 *           take (the read-only check before a stacked policy's charges).
 * is_fresh: given the control word c, does the state equal a fresh key's?
 * freeze:   set SL_DEAD on the control word and wait until the words are
 *           stable: true; false if a live writer of the key stayed in past
 *           its holder's give_up_ns (the word is frozen all the same: the
 *           caller thaws it and gives up, changing nothing).
 * carry:    raise the private words of `to` to the frozen state of `from`
 *           (same algorithm and period), exactly: all spent capacity is
 *           kept, even above a lower count, rounded only toward more spent.
 *           Words already carried from another old limit are kept where
 *           they are more spent (several old limits may feed one new one).
 *           `now` only unwraps modular times; state ahead of it is kept.
 */
#define SL_RECEIPT_WORDS 3
typedef uint64_t sl_receipt[SL_RECEIPT_WORDS];

struct sl_algo {
    const char *name;
    int (*compile)(struct sl_lim *lim);
    int (*charge)(const struct sl_lim *lim, sl_aword *w, uint64_t now, uint64_t cost,
                  uint64_t *receipt);
    bool (*undo)(const struct sl_lim *lim, sl_aword *w, uint64_t cost, const uint64_t *receipt);
    int (*report)(const struct sl_lim *lim, sl_aword *w, uint64_t now, uint64_t cost,
                  struct sl_report *out);
    bool (*is_fresh)(const struct sl_lim *lim, uint64_t c, sl_aword *w, uint64_t now);
    bool (*freeze)(const struct sl_lim *lim, sl_aword *w);
    void (*carry)(const struct sl_lim *from, sl_aword *fw, const struct sl_lim *to, sl_aword *tw,
                  uint64_t now);
    /* Limits of one state word (NULL for the others): charge's step from
     * the word c, which charge takes in a CAS loop (sl_charge_by_step):
     * SL_OK with the word to store in *next and the receipt as charge
     * leaves it once *next is stored in place of c, SL_NO, or SL_FROZEN.
     * Pure, so the lean path steps a stacked limit in its read-only check
     * and stores the word after limit 0's charge (lean.h): a CAS from
     * c is the charge of a loop that read c just then. */
    int (*step)(const struct sl_lim *lim, uint64_t c, uint64_t now, uint64_t cost, uint64_t *next,
                uint64_t *receipt);
};

/* A windowed step's receipt (the window charged, the word before and
 * after: sl_undo_exact), and its SL_OK. */
static inline int sl_window_stepped(uint64_t *receipt, uint64_t idx, uint64_t before,
                                    uint64_t after)
{
    receipt[0] = idx;
    receipt[1] = before;
    receipt[2] = after;
    return SL_OK;
}

typedef int sl_step_fn(const struct sl_lim *lim, uint64_t c, uint64_t now, uint64_t cost,
                       uint64_t *next, uint64_t *receipt);

/* The charge of a one-word limit: its step from the word read, stored by
 * CAS, again from the word found if another charge came first.  Inline
 * with the algorithm's own step (a constant), so each op is one loop. */
static inline __attribute__((always_inline)) int
sl_charge_by_step(sl_step_fn *step, const struct sl_lim *lim, sl_aword *w, uint64_t now,
                  uint64_t cost, uint64_t *receipt)
{
    uint64_t c = sl_load_acq(w), next;
    int rc;

    while ((rc = step(lim, c, now, cost, &next, receipt)) == SL_OK && !sl_cas_acqrel(w, &c, next))
        ;
    return rc;
}

/* Restore the control word to its value before a charge, if nothing has
 * changed it since (windowed undo: exact, even when the charge moved the
 * window).  True if it did. */
static inline bool sl_undo_exact(sl_aword *w, const uint64_t *receipt)
{
    uint64_t expect = receipt[2];

    return receipt[1] != receipt[2] && sl_cas_acqrel(w, &expect, receipt[1]);
}

extern const struct sl_algo sl_algo_gcra, sl_algo_fixed, sl_algo_sliding, sl_algo_log,
    sl_algo_approx;

/*
 * Ranges (see the algo files): a key's state is read correctly from any time
 * within these of its latest observed time, behind or ahead; limits that
 * cannot guarantee them are refused with -EINVAL.
 *   windows: SL_WINDOW_RANGE_NS both ways;
 *   GCRA:    SL_GCRA_RANGE_NS behind, 2^(62 - fbits) ns (>= 2^52) ahead.
 */
#define SL_WINDOW_RANGE_NS (UINT64_C(1) << 55)
#define SL_GCRA_RANGE_NS (UINT64_C(1) << 50)
/* How far a charge's time may run ahead of its key's last_ns before it
 * publishes a floor first (charge.h, sl_floor_ahead): every charge that
 * stands was made at most 2 * SL_TIME_SLACK after last_ns as read after it. */
#define SL_TIME_SLACK (UINT64_C(1) << 40)

/*
 * Idle beyond the range.  A key idle longer than its limits' idle_fresh_ns
 * (since its latest admission, last_ns) is fresh under every one of them,
 * and its words may no longer be read right (a stored time modulo the range
 * looks recent again: spent, although over long ago).  So such a key is
 * not read: decisions replace it by a fresh entry (sl_entry_move_state),
 * peeks read it as absent, reaping takes it.  Each limit states how long
 * its state can stay busy after an admission, plus the 2 * SL_TIME_SLACK a
 * charge may run ahead of last_ns (idle_over_ns), and how far its words
 * read right (idle_read_ns: UINT64_MAX for the sliding log's absolute
 * stamps).  A policy restarts a key past the greatest idle_over_ns of its
 * limits, if that is within every one's idle_read_ns; never otherwise
 * (a limit read beyond its range then fails closed).  Reaping takes each
 * limit idle past its own idle_over_ns as fresh.
 */
static inline bool sl_idle_beyond(uint64_t at, uint64_t last, uint64_t idle_fresh_ns)
{
    uint64_t d = at - last; /* times are modular: behind is negative */

    return (int64_t)d > 0 && d > idle_fresh_ns;
}

/* Shared by the windowed algorithms (algo_window.c). */
int sl_window_pack_compile(struct sl_lim *lim, unsigned nfields);
void sl_window_copy(sl_aword *fw, sl_aword *tw, uint32_t nwords);
bool sl_window_freeze(const struct sl_lim *lim, sl_aword *w);
uint64_t sl_window_later(const struct sl_lim *lim, unsigned nfields, uint64_t x, uint64_t y);
/* A window word's fields; inline: every windowed step takes them, and
 * their calls were a fifth of a fixed window's charge. */
static inline uint64_t sl_word_index(const struct sl_lim *lim, uint64_t word)
{
    return (word >> lim->ishift) & lim->imask;
}

static inline uint64_t sl_word_make(const struct sl_lim *lim, uint64_t index, uint64_t counts)
{
    return ((index & lim->imask) << lim->ishift) | counts;
}

/* Signed distance a - b of two window indexes modulo 2^ibits: the
 * difference's low ibits, sign-extended (ibits >= 2: sl_window_pack_compile). */
static inline int64_t sl_index_diff(const struct sl_lim *lim, uint64_t a, uint64_t b)
{
    unsigned drop = 64 - lim->ibits;

    return (int64_t)((a - b) << drop) >> drop; /* arithmetic shift: GCC's, as C11 allows */
}

#endif
