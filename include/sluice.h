/*
 * sluice — in-process, lock-free rate limiting of keys.
 *
 * One public header.  Every function is thread-safe and needs no per-thread
 * registration, except sluice_destroy(), which must not race with any other
 * call on the same limiter.  All times are uint64_t nanoseconds of the
 * limiter's clock; all counts are uint64_t units.
 *
 * fork(2) may be called while other threads are inside calls: the library
 * takes its locks around the fork, so the child's copy of every limiter is
 * whole and no lock stays held there.  The child has no reaper thread
 * (reap_interval_ns): its copy of a private limiter is reaped by its own
 * sluice_reap() calls only, and sluice_destroy() there joins nothing.  A
 * shared limiter (sluice_open_shared) is the same limiter in the child.
 *
 * Return convention: decisions return SLUICE_ALLOW (0) or SLUICE_DENY (1);
 * every other outcome is a negative errno and charges nothing.  (A request
 * that fails after a racing change, such as a set_policy that makes its
 * cost -E2BIG, takes back a key it created, unless another call has
 * charged or moved that key meanwhile (on a shared limiter, a set_policy
 * moves every key of the file); a key left behind is as after a denied
 * request (where racing charges were taken back, one unit may stay: fewer
 * admitted, never more).  Like a denied request, it may have started again
 * a key idle beyond its range: see SLUICE_GCRA.)
 *
 * This header is the contract: names, types, return values and the
 * semantics stated here are stable within a major version.
 *
 * Binary compatibility (soname libsluice.so.2): the public structs that
 * cross the library boundary by pointer (sluice_limit, sluice_policy,
 * sluice_config, sluice_result, sluice_stats) end in reserved space and
 * never change size within a soname.  A later minor version gives meaning
 * to reserved words, where zero always means "as before"; so a program
 * built against an older header keeps working with a newer library, which
 * never reads or writes a byte past the struct it was given.  Reserved
 * words must be zero on input (sluice_config_init() and
 * sluice_policy_add() zero them; a non-zero one gets -EINVAL, so a newer
 * program asking for a feature an older library lacks is refused, not
 * ignored).  struct sluice_key and struct sluice_req are arrays' elements:
 * they never change at all.  Version 1.0 (soname 1) had no reserved space;
 * soname 2 is the first with this rule.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SLUICE_VERSION_MAJOR 2
#define SLUICE_VERSION_MINOR 1
#define SLUICE_VERSION_PATCH 0

#if defined(SLUICE_BUILDING) && defined(__GNUC__)
#define SLUICE_API __attribute__((visibility("default")))
#else
#define SLUICE_API
#endif

typedef struct sluice sluice_t; /* opaque limiter handle */

enum sluice_algo {
    /* Generic cell rate algorithm: one 64-bit word (the theoretical arrival
     * time) per limit.  Smooth: after a burst of `burst` units, one unit per
     * period/count.  Exact rational arithmetic, no drift, when
     * q = count/gcd(count, period) <= 1024; otherwise period/count is rounded
     * up to a multiple of 1/1024 ns (admits slightly less, never more).
     * The tolerance burst*period/count must be at most 2^52 - 2^50 - 1 ns
     * (about 39 days), else -EINVAL.  A key's state is read correctly from
     * times up to 2^50 ns (about 13 days) behind its latest admission and
     * up to 2^(62 - b) ns ahead, b = bits of q - 1: at least 2^52 ns
     * (52 days), 2^62 ns (146 years) when period/count is whole ns.
     * A key idle beyond these ranges (and the windowed ones below) is fresh
     * however its words read: peeks and reaping see it fresh, and the first
     * decision to meet it starts it again as a reap would (a later call
     * with a time before the key was surely fresh is decided as at that
     * time, even where that first decision admitted nothing or failed).  A time more than the range behind its latest admission
     * is decided at that admission.  One unit less: the TAT word 0 means
     * "never charged", so a TAT that falls exactly on a multiple of
     * 2^(63 - b) ns is kept 1/q ns later, and a burst that ends there
     * admits one unit less. */
    SLUICE_GCRA = 0,
    /* One counter per window [k*period, (k+1)*period).  One word per limit.
     * Admits up to 2*count units across a window boundary.  count must fit
     * the bits the window index leaves: below 2^36 at a 1 s period (2^26 at
     * 1 ms, 2^42 at 1 min, 2^48 at 1 h, 2^53 at 1 day), else -EINVAL.
     * Windowed algorithms read a key's state correctly from any time within
     * 2^55 ns (about 417 days) of its latest admission, behind or ahead;
     * idle longer, a key is fresh (as for GCRA) when its period is below
     * 2^54 - 2^41 ns (about 208 days), else it can read as spent (fail
     * closed), and the waits it tells beyond that range (retry_after_ns,
     * and a reset_after_ns that ends there) are estimates.  A stacked policy restarts a key once every limit is idle
     * beyond its own range; a limit read beyond its range before that
     * (GCRA's beside a long window or a sliding log) can read as spent,
     * and the waits it tells then are estimates. */
    SLUICE_FIXED_WINDOW,
    /* Ring of ceil(period/precision) sub-bucket counters plus a head word.
     * Boundary burst at most one sub-bucket's worth.  8 bytes per sub-bucket
     * per key: a 1 h period at the default 1 s precision costs 28.8 KiB per
     * key.  At most 131072 sub-buckets, and count below the FIXED_WINDOW
     * bound for a window of one sub-bucket (2^36 at 1 s precision), else
     * -EINVAL.  Range as FIXED_WINDOW, but for one case: a ring slot keeps
     * its sub-bucket's number modulo 2^56 to 2^57 ns, so on a key never
     * idle beyond its range for that long (2.3 to 4.6 years), a slot no
     * admission has rewritten since reads as the sub-bucket that long
     * after it: its old units count again, and the key can be denied
     * units its window has (fail closed, never more admitted); such a
     * slot is read once an admission moves the ring's head past it, so
     * the numbers after that admission (remaining, reset_after_ns) can
     * count them where a peek before it did not. */
    SLUICE_SLIDING_WINDOW,
    /* Exact: one timestamp per admitted unit.  count <= 65536, larger counts
     * get -EINVAL.  8 bytes per unit of count per key, plus 32.  Timestamps
     * are absolute: read the same from any time. */
    SLUICE_SLIDING_LOG,
    /* Two fixed windows, the previous one weighted by its overlap with the
     * sliding window.  One word per limit holding both counters, so count is
     * below 2^18 at a 1 s period (2^13 at 1 ms, 2^21 at 1 min, 2^24 at 1 h,
     * 2^26 at 1 day), else -EINVAL.  Range as FIXED_WINDOW. */
    SLUICE_APPROX_SLIDING,
};

struct sluice_limit {
    enum sluice_algo algo;
    uint64_t count;        /* units admitted per period; >= 1 */
    uint64_t period_ns;    /* >= 1 */
    uint64_t burst;        /* GCRA only: units admissible at once; 0 means count */
    uint64_t precision_ns; /* SLIDING_WINDOW only: sub-bucket width; 0 means 1 s,
                              capped at period_ns */
    uint64_t reserved[2];  /* zero */
};

#define SLUICE_MAX_LIMITS 8

struct sluice_policy { /* a request passes only if it passes every limit */
    unsigned nlimits;  /* 1..SLUICE_MAX_LIMITS */
    struct sluice_limit limits[SLUICE_MAX_LIMITS];
};

enum sluice_clock {
    SLUICE_CLOCK_MONOTONIC = 0, /* default */
    SLUICE_CLOCK_REALTIME,      /* windows line up with wall-clock seconds/hours/days */
    SLUICE_CLOCK_COARSE,        /* CLOCK_MONOTONIC_COARSE: cheaper, a few ms resolution */
    SLUICE_CLOCK_CUSTOM,        /* clock_fn(clock_ctx) */
    SLUICE_CLOCK_TSC,           /* the CPU's invariant time-stamp counter, calibrated to ns
                                   against CLOCK_MONOTONIC (20 ms, once per process, at the
                                   first such sluice_create); host-wide, about 2x cheaper
                                   than clock_gettime.  Where the CPU has no invariant TSC
                                   the limiter uses CLOCK_MONOTONIC: sluice_stats() says
                                   which clock is in use. */
};

enum sluice_when_full {   /* a new key arrives while max_keys keys are live */
    SLUICE_FULL_DENY = 0, /* fail closed: deny, result.flags has SLUICE_F_FULL */
    SLUICE_FULL_ALLOW,    /* fail open: allow untracked, result.flags has SLUICE_F_FULL */
};

struct sluice_config {
    struct sluice_policy policy; /* default policy for every key */
    size_t max_keys;             /* live keys at most; default 1 << 20 */
    size_t max_key_len;          /* bytes; default 256; longer keys get -ENAMETOOLONG */
    unsigned shards;             /* 0: chosen from the CPU count; else at most 4096
                                    (more: -EINVAL), rounded up to a power of two */
    uint64_t idle_ttl_ns;        /* a key idle this long may be reaped; 0: the time
                                    after which its state equals a fresh key's */
    uint64_t reap_interval_ns;   /* > 0: a background thread reaps at this interval,
                                    at the limiter's clock (decisions passing
                                    another clock to sluice_acquire_at: keep 0);
                                    0: no thread, call sluice_reap() yourself
                                    (a forked child has none: see the top) */
    enum sluice_when_full when_full;
    enum sluice_clock clock;
    uint64_t (*clock_fn)(void *clock_ctx);
    void *clock_ctx;
    const char *name;            /* policy name used in headers; default "default".
                                    Copied by sluice_create(). */
    uint64_t reserved[8];        /* zero */
};

/*
 * What a decision saw.  The binding limit is, for an admission, the limit
 * (of any key) with the fewest units remaining after this call's charge;
 * for a denial, the limit whose wait is longest.  remaining and
 * reset_after_ns describe the state after this call's charge (if any).
 * Waits count from the time the call passed, also when it was decided as
 * at a later time (a clock behind the key's latest admission, or a new key
 * behind the latest reap): the same request stamped now_ns + retry_after_ns
 * is admitted, absent other traffic, and one stamped a nanosecond earlier
 * is not (a wait of 0 stays 0).  Across the clock's wrap at 2^64 ns: a
 * policy with a windowed limit (any but GCRA) reads a key it kept from
 * before the wrap as at its latest admission before it, until the key has
 * been idle beyond its range (sluice_acquire_at()).  So such a policy's
 * wait that would end past 2^64 - 1 ns (on a key not yet past the wrap),
 * and every wait told to a call stamped after the wrap on such a key,
 * ends when the key goes idle beyond its range: told as the time until
 * then (counted modulo 2^64), or UINT64_MAX (never) where some limit
 * never reads a key as idle (a sliding log: its stamps are absolute);
 * likewise reset_after_ns.  A request on several keys whose wait ends
 * past the wrap waits as well for each key that refuses it as it was
 * before the wrap.
 */
struct sluice_result {
    uint64_t limit;          /* count of the binding limit */
    uint64_t remaining;      /* units still admissible now under the binding limit */
    uint64_t retry_after_ns; /* 0 if allowed; else the least wait after which the same
                                request passes every limit of every key, absent other
                                traffic (the largest of the per-limit waits;
                                UINT64_MAX if it never can).  A denial by when_full
                                (SLUICE_F_FULL) is an estimate instead: idle_ttl_ns,
                                else the binding limit's period (when some key
                                should have gone idle; sluice does not track when).
                                A wait that takes a stacked limit past its range
                                while another keeps the key (enum sluice_algo: a
                                GCRA limit beside a window of months) can end in
                                a denial again, failing closed, until that limit
                                reads right again or the key restarts */
    uint64_t reset_after_ns; /* time until the binding limit is fully replenished */
    uint64_t period_ns;      /* period of the binding limit */
    unsigned limit_index;    /* index in the policy of the binding limit */
    unsigned flags;          /* SLUICE_F_*; sluice_acquire_all: of any of its keys */
    /* appended in 1.0: */
    unsigned key_index;      /* sluice_acquire_all: index in keys[] of the binding
                                key; 0 for the single-key calls */
    uint64_t reserved[4];    /* written as zero by this version */
};
#define SLUICE_F_FULL 1u     /* decided by when_full, key not tracked */
#define SLUICE_F_OVERRIDE 2u /* a per-key override policy applied */
#define SLUICE_F_NEW_KEY 4u  /* this call created the key */
/* (2.1) sluice_peek_at (and a cost-0 acquire, which makes no key either):
 * the key is not tracked and the limiter holds max_keys keys.  An acquire
 * would first reap idle keys, which a peek does not do, so it answers as
 * if that made room; if it would not, the acquire is decided by when_full
 * (SLUICE_F_FULL). */
#define SLUICE_F_AT_MAX_KEYS 8u

struct sluice_stats {
    /* allowed, denied: charging decisions (cost 0 and peeks not counted); a
     * request on several keys counts once in each limiter it names */
    uint64_t keys, allowed, denied, inserted, reaped, full;
    uint64_t memory_bytes; /* bytes held by the limiter, tables and keys included */
    uint64_t clock;        /* (2.0) the enum sluice_clock in use: SLUICE_CLOCK_TSC asked
                              for on a CPU without an invariant TSC gives MONOTONIC */
    uint64_t reserved[7];  /* written as zero by this version */
};

struct sluice_key { /* for sluice_acquire_all; never changes (array element) */
    sluice_t *limiter;
    const void *key;
    size_t len;
};

#define SLUICE_ALLOW 0
#define SLUICE_DENY 1

/*
 * Fill *cfg with every default: no limits (add at least one with
 * sluice_policy_add()), max_keys 1<<20, max_key_len 256, shards from the CPU
 * count, idle_ttl 0, no reaper thread, SLUICE_FULL_DENY, monotonic clock,
 * name "default".  Always call it before setting fields.
 */
SLUICE_API void sluice_config_init(struct sluice_config *cfg);

/*
 * Append one limit to *p (burst 0, precision 0: their defaults).
 * Returns 0, -EINVAL (NULL p, unknown algo, count or period 0, or a limit
 * sluice cannot represent, see enum sluice_algo) or -ENOSPC (already
 * SLUICE_MAX_LIMITS limits).  On error *p is unchanged.
 */
SLUICE_API int sluice_policy_add(struct sluice_policy *p, enum sluice_algo algo,
                                 uint64_t count, uint64_t period_ns);

/*
 * Create a limiter from *cfg, which is not referenced afterwards.
 * Returns 0 and sets *out, or:
 *   -EINVAL  NULL argument, empty or invalid policy, max_keys or max_key_len 0,
 *            max_key_len above 2^30, shards above 4096, CUSTOM clock without
 *            clock_fn, unknown enum;
 *   -ENOMEM  out of memory;
 *   -EAGAIN  the reaper thread could not be started.
 */
SLUICE_API int sluice_create(const struct sluice_config *cfg, sluice_t **out);

/*
 * One limiter shared by every process of the host that opens the same path:
 * a file mapping (a tmpfs path such as "/dev/shm/NAME", or any path the
 * caller chooses), created with mode 0600.  Every call works on it as on
 * any other limiter, host-wide: decisions (sluice_acquire_all may mix
 * shared and private limiters), sluice_set_policy, per-key overrides
 * (one process's sluice_override_set is in force for every process's
 * decisions, and for processes attaching later, until some process clears
 * it), sluice_reset, reaping and sluice_stats.  Lock-free across processes like within one: never
 * over-admits, and a process killed at any instruction (SIGKILL) blocks no
 * one, corrupts nothing and loses at most the units it was charging.
 * flags: SLUICE_SHARED_CREATE creates the file from *cfg if absent;
 * with SLUICE_SHARED_EXCL as well, an existing file is -EEXIST.
 * Attaching (cfg may then be NULL) takes the file's configuration; a cfg
 * given is checked against the one the file was created with.  Of a cfg,
 * each process keeps its own clock_fn/clock_ctx (needed when the file's
 * clock is SLUICE_CLOCK_CUSTOM: that clock is per process, the others are
 * host-wide) and reap_interval_ns (a reaper thread in this process).
 * Memory is fixed at creation from max_keys and max_key_len: room for
 * 2 * max_keys + 64 entries of 64 + 8 * words + max_key_len bytes (rounded
 * up to 64; words = the policy's state words, at least 8), plus the
 * tables, about 600 KiB of process records and 464 bytes for each of
 * min(max_keys, 4096) + shards override slots (below); pages are only
 * used as keys arrive.  At most min(max_keys,
 * 4096) keys have an override at once: sluice_override_set on another key
 * then returns -ENOSPC, changing nothing.
 * Every algorithm works on a shared limiter; a sliding log's key, held by a
 * process killed while it writes the key, is released by the next process
 * that waits for it (the killed charge counts fully or not at all); one
 * stopped (SIGSTOP) while it writes the key holds up that key's callers,
 * and a writer on it holding its shard's lock, until it resumes or dies.
 * Shared limiters refuse policies needing more state words per key than
 * the creation policy (or 8; a sliding log needs 4 + count), names of 64
 * bytes or more, and max_keys above 2^31 (-EINVAL), in sluice_set_policy
 * and sluice_override_set as well.  At most 1024 processes
 * attach at once (a dead process's place is taken back; a forked child,
 * which takes its own place on its first call, waits for one).  All processes
 * must share a pid namespace (dead ones are found by pid, and by whether
 * they still map the file: a process that calls exec(2) while a thread of
 * it is inside a call is gone, its calls with it; where /proc/PID/maps
 * cannot be read, another user's process, or when the new program maps
 * the file again at the same address, which only happens without address
 * randomisation, such a process holds up the others as a stopped one
 * does until it exits).  A stopped (not
 * dead: SIGSTOP, a debugger) process inside a call delays the reuse of
 * removed keys' memory (once none is free, a new key or a reset waits up to
 * 2 s for some and then gets -ENOMEM), and, if it stopped holding a shard's
 * lock, the calls
 * of other processes that need that lock (a new key of that shard, a reset,
 * sluice_set_policy, sluice_reap, overrides) until it resumes or dies:
 * taking the lock from a live holder could corrupt what it is writing.
 * Likewise, if it stopped inside a sluice_acquire_all of several keys
 * between its charges and its commits, a writer on one of those keys (a
 * reset, a policy change, an override, a decision or peek that moves the
 * key, to a new default or fresh after it was idle beyond its range) may
 * not go on (that could admit more than the limits): it
 * waits for it up to 2 s, then returns -EBUSY, having changed nothing.
 * And if it stopped inside a SLIDING_LOG key's write (a few stores of an
 * admission's stamps), calls on that key wait for it up to 2 s: a
 * decision or a peek then denies, charging nothing (its result says 0
 * remaining, retry after 2 s), and a writer returns -EBUSY, having
 * changed nothing; later calls in that process, on the same stopped
 * hold, give up at once.
 * Decisions on existing keys never wait for it, except behind such a
 * writer or a held SLIDING_LOG key.
 * Returns 0 and sets *out, or:
 *   -ENOENT  absent, without SLUICE_SHARED_CREATE;
 *   -EEXIST  SLUICE_SHARED_EXCL and it exists, or cfg given and its policy,
 *            max_keys or max_key_len differ from the creation's, or path
 *            is a dangling symbolic link (never created through);
 *   -EPROTO  not a sluice file, another layout version, truncated, corrupt;
 *   -EACCES  no permission;
 *   -ENOMEM  out of memory, no space for the file, or 1024 processes attached;
 *   -EINVAL  NULL path or out, unknown flags, EXCL without CREATE, CREATE
 *            without cfg, a cfg sluice_create() refuses or a shared limiter
 *            cannot hold (above), a CUSTOM-clock file opened without clock_fn;
 *   or another negative errno of open(2).
 * Decisions on a shared limiter may also return -EPROTO if they find the
 * file corrupt.
 */
#define SLUICE_SHARED_CREATE 1u
#define SLUICE_SHARED_EXCL 2u
SLUICE_API int sluice_open_shared(const char *path, const struct sluice_config *cfg,
                                  unsigned flags, sluice_t **out);

/*
 * Remove the file of a shared limiter.  Handles open on it stay valid (and
 * keep sharing it); later opens of the path make or find another.
 * Returns 0, -EINVAL (NULL path) or the negative errno of unlink(2).
 */
SLUICE_API int sluice_unlink_shared(const char *path);

/*
 * Stop the reaper thread (if any) and free everything; for a shared
 * limiter, detach this process (the file and its keys stay).  NULL is a
 * no-op.  Must not race with other calls on the same limiter.
 */
SLUICE_API void sluice_destroy(sluice_t *l);

/*
 * Decide a request of `cost` units for `key` at the limiter's clock.
 * Equivalent to sluice_acquire_at(l, key, len, cost, sluice_now(l), res).
 */
SLUICE_API int sluice_acquire(sluice_t *l, const void *key, size_t len, uint64_t cost,
                              struct sluice_result *res);

/*
 * Decide a request of `cost` units for `key` at time now_ns, charging every
 * limit of the key's policy if and only if all of them admit it.
 * A new key is created (SLUICE_F_NEW_KEY); past max_keys it is decided by
 * when_full (SLUICE_F_FULL) after an attempt to reap idle keys.
 * cost 0 charges nothing, creates nothing and returns SLUICE_ALLOW, with
 * res telling the key's state (its remaining may be 0).
 * res may be NULL; when given it is filled for every ALLOW/DENY.
 * Returns SLUICE_ALLOW, SLUICE_DENY, or, charging nothing:
 *   -EINVAL       l NULL, or key NULL with len > 0;
 *   -ENAMETOOLONG len > max_key_len;
 *   -E2BIG        cost above what some limit could ever admit (burst for
 *                 GCRA, count otherwise);
 *   -ENOMEM       the new key could not be allocated (on a shared limiter:
 *                 no entry came free in 2 s, see sluice_open_shared);
 *   -EBUSY        (shared limiter) the key had to move (to a new default,
 *                 or fresh after it was idle beyond its range), and a
 *                 stopped process's call held it for 2 s.
 * Lock-free for existing keys: a denial writes no shared memory; an admission
 * is one CAS per limit (a short per-key write section for SLIDING_LOG) and
 * one on the key's latest-admission time.  A charge made and then found
 * racing a change (its key moved by set_policy, an override or a reset, or
 * decided behind a racing admission) is taken back and decided again; if
 * another call charged that limit meanwhile, it stays spent instead: fewer
 * admitted, never more.
 * Times earlier than the key's latest admission are decided as at that
 * time, so stale or backward clocks never admit more (times are compared
 * modulo 2^64).  GCRA alone reads a key correctly across the clock's wrap
 * at 2^64 ns; the windowed algorithms number windows from time 0 and the
 * log keeps absolute stamps, so a key they kept from before a wrap is
 * decided after it as at its latest admission before it: as full if it
 * was (fail closed), until idle beyond its range, reaped or reset.  No clock sluice
 * reads comes near 2^64 ns (584 years); a caller's own times may.  A key's
 * latest admission is kept exactly up to 2^64 - 3 ns and the two times
 * after read as that one, so there a call may be decided up to 2 ns before
 * its key's latest admission, against a state that reads fuller then:
 * fewer admitted, never more; and sluice_reap() at those times reaps as
 * at 2^64 - 3.
 */
SLUICE_API int sluice_acquire_at(sluice_t *l, const void *key, size_t len, uint64_t cost,
                                 uint64_t now_ns, struct sluice_result *res);

/* One request of a batch (an array element: never changes). */
struct sluice_req {
    const void *key;
    size_t len;
    uint64_t cost;
};

/*
 * n independent decisions at now_ns, made exactly as n sluice_acquire_at()
 * calls in order would make them (each request sees the charges of the
 * ones before it), in one pass that overlaps the memory latency of
 * consecutive keys: at 10^6 keys, where each lookup waits for DRAM, a
 * batch decides faster than the same calls one by one.
 * rcs[i] is what sluice_acquire_at() would return for reqs[i] (its errors
 * included: -EINVAL, -ENAMETOOLONG, -E2BIG, -ENOMEM); res is NULL or an
 * array of n results, res[i] filled as that call would fill it.
 * Returns 0, or -EINVAL (l NULL, or reqs or rcs NULL with n > 0; then
 * nothing is decided).
 */
SLUICE_API int sluice_acquire_batch(sluice_t *l, const struct sluice_req *reqs, size_t n,
                                    uint64_t now_ns, int *rcs, struct sluice_result *res);

/*
 * What sluice_acquire_at() would decide, changing no state at all (no key is
 * created, no statistic counted; a key whose policy changed since its last
 * decision is answered as moved to it, its state carried, and is not moved,
 * unless its old policy has a SLUICE_SLIDING_LOG limit: such a key is moved,
 * as the acquire would move it first, nothing charged).  Same return
 * values, and res the same, except for a key not yet tracked while the
 * limiter is at max_keys: an acquire would first try to reap room, a peek
 * answers as if it found some and sets SLUICE_F_AT_MAX_KEYS; and for the
 * sliding window's ring slots read past their range (SLUICE_SLIDING_WINDOW),
 * which an admission's numbers can count and a peek's do not.
 */
SLUICE_API int sluice_peek_at(sluice_t *l, const void *key, size_t len, uint64_t cost,
                              uint64_t now_ns, struct sluice_result *res);

/*
 * One request checked against 1 <= n <= 16 keys, possibly in different
 * limiters with different policies (client IP in one, user ID in another).
 * The same key (same limiter and bytes) given twice is one key, charged
 * once; two handles of one shared file are one limiter.  All-or-nothing: every limit of every key is charged, or none is.
 * Every limit of every key is checked read-only first but the first limit
 * of the first key, which its own charge decides (a charge that denies
 * writes nothing), so a denial writes nothing; then all are charged in
 * order, that one first, and a later charge that loses a race rolls back
 * the charges already made and the request is decided again.  A rollback takes back only this call's own charge: where
 * another call has charged since, it leaves the state as it is (a
 * concurrent observer may briefly see a reservation that is then rolled
 * back, a transient denial: under-admission, never over-admission).  A
 * charge whose key a racing call moves meanwhile (set_policy, an override,
 * a reset, even a peek of a key under an older policy) is taken back in
 * the key's new entry, except where the move changed how that limit's
 * state is kept (a GCRA limit whose period/count changed its fraction q,
 * a sliding log): there it stays spent, an under-admission.
 * Likewise a request on a windowed algorithm whose time falls in an
 * earlier window than a racing charge of the same key has moved it to is
 * refused while that charge is in flight (the window it left is not
 * counted on a charge that may yet be rolled back).
 * A new key of a full limiter is decided by that limiter's when_full: one
 * failing closed denies the whole request (SLUICE_F_FULL, key_index names
 * it), one failing open admits that key untracked.
 * A denial makes no key: while some key is absent (or its policy changed),
 * the request is first decided read-only, as sluice_peek_at() would (an
 * absent key reads as fresh, and a fresh key never denies), and a denial
 * there ends it; a key made for a request that is denied after all (a
 * full limiter failing closed, a charge that lost a race) is taken back,
 * unless it was charged or moved meanwhile (by another call, even a
 * charge that call took back after, or by this one's own charge taken
 * back: it then stands, fresh).  So one spent
 * client IP cannot fill the user limiter beside it with new user ids.
 * SLUICE_F_NEW_KEY is not set for a key taken back.
 * res describes the binding limit; res->key_index says of which key (its
 * first index in keys[] if it was given twice).
 * Returns as sluice_acquire_at(), plus -EINVAL for n == 0, n > 16, NULL keys
 * or a NULL limiter in keys[].
 */
SLUICE_API int sluice_acquire_all(const struct sluice_key *keys, size_t n, uint64_t cost,
                                  uint64_t now_ns, struct sluice_result *res);

/*
 * Forget the key's state: its next request is decided as a fresh key's.
 * A per-key override stays in place, and so does the key's latest
 * admission time: a request stamped earlier is decided as at it (the
 * time of an admission racing the reset too, whose units the reset may
 * forget).
 * Returns 0, -ENOENT (no such key), -EINVAL, -ENAMETOOLONG, -ENOMEM, or,
 * on a shared limiter, -EBUSY (a stopped process's call held the key for
 * 2 s, see sluice_open_shared; nothing changed).
 */
SLUICE_API int sluice_reset(sluice_t *l, const void *key, size_t len);

/*
 * Replace the default policy of every key without an override, while other
 * threads keep deciding.  Keys keep the state of each limit whose algorithm
 * and period are unchanged (raising 10/s to 20/s keeps the GCRA TAT); other
 * limits start fresh.  A change never refills: a kept limit keeps all of
 * its spent capacity, even above a lowered count, so lowering a limit and
 * raising it again admits nothing extra.  Where several old limits share the
 * new limit's algorithm and period, it keeps the spent capacity of all of
 * them (the latest TAT; per window, the larger count; per unit of a log,
 * the later stamp).  Keys migrate lazily on their next request, and a
 * limit whose algorithm and period some policy in between lacked starts
 * fresh, as stepping through every policy set meanwhile would, whether a
 * call met the key then or not (a peek included).  One difference stays,
 * never in a key's favour: a sliding window whose precision changed and
 * changed back keeps its units at their own sub-buckets if no call met the
 * key in between, and at the coarser ones (later, so longer in the window)
 * if one did.  A change of precision itself moves each unit into the new
 * sub-bucket holding the end of its old one (never earlier than the unit's
 * own time), so the new window keeps every unit admitted within its
 * period; units older than that, which the old, coarser sub-buckets still
 * counted, may leave it.  Requests costing more than the new policy admits get
 * -E2BIG from then on.
 * On a shared limiter (sluice_open_shared) the change reaches every
 * process, and every key has moved to it when the call returns.
 * Returns 0, -EINVAL (bad policy, or one a shared limiter cannot hold),
 * -ENOMEM.  On a shared limiter also -ENOMEM when a shard's keys found no
 * free entry to move to for 2 s, -EBUSY when a stopped process's call held
 * a key for 2 s (see sluice_open_shared), and -EPROTO when the file is
 * corrupt; the
 * new policy may then be in force already: keys still under the old one
 * move when next used, and the next sluice_set_policy finishes the move
 * before it changes anything.
 */
SLUICE_API int sluice_set_policy(sluice_t *l, const struct sluice_policy *p);

/*
 * Give one key its own policy (a custom quota) until cleared, creating the
 * key if needed.  State carries over as for sluice_set_policy(): a key no
 * call met since an older default moves as if through the default in force
 * first.  Keys with
 * an override are never reaped.  Decisions show SLUICE_F_OVERRIDE.
 * On a shared limiter the override is host-wide (see sluice_open_shared).
 * Returns 0, -EINVAL (bad policy, or one a shared limiter cannot hold),
 * -ENAMETOOLONG, -ENOMEM, or -ENOSPC when it would add a key past max_keys
 * and no key was idle at the latest reap's time, or, on a shared limiter,
 * when min(max_keys, 4096) other keys already have an override, or -EBUSY
 * (a stopped process's call held the key for 2 s, see sluice_open_shared;
 * nothing changed).  It takes
 * no time, and the limiter's clock need not be the one decisions pass, so
 * it makes room only from keys idle at the time of the latest reap:
 * sluice_reap(l, now) at the decisions' time first frees the idle ones.
 */
SLUICE_API int sluice_override_set(sluice_t *l, const void *key, size_t len,
                                   const struct sluice_policy *p);

/*
 * Return the key to the default policy (state carried over as above).
 * Returns 0, -ENOENT (no override on that key), -EINVAL, -ENAMETOOLONG,
 * -ENOMEM, or -EBUSY as sluice_override_set().
 */
SLUICE_API int sluice_override_clear(sluice_t *l, const void *key, size_t len);

/*
 * Remove every key whose state equals a fresh key's at now_ns and that has
 * been idle idle_ttl_ns (no admitted request after now_ns - idle_ttl_ns, so
 * never a key admitted at a time later than now_ns).  Never changes a
 * decision.
 * A reap observes time now_ns: a key made after it (a removed key asked
 * for again, or a new one) is decided no earlier than the latest time keys
 * were reaped at, so a request stamped earlier (an out-of-order clock) is
 * decided as at that time.  Pass times of the clock your decisions use.
 * (Independently, a new key arriving at max_keys scans up to 1024 slots,
 * of its own shard and then of others it can lock at once, for the room of
 * an idle key; once scans have covered the whole table in vain, they pause
 * for 100 ns of the callers' time per key of max_keys.)
 * Keys are removed one at a time (each at its own instant within the
 * call), not in one atomic step: a call racing the reap may find one key
 * already removed and another not yet.
 * Memory returns through epoch-based reclamation while other threads keep
 * deciding.  Returns the number of keys removed (0 for NULL l).
 */
SLUICE_API size_t sluice_reap(sluice_t *l, uint64_t now_ns);

/* Counters and memory of the limiter.  Zeroes *out for NULL l. */
SLUICE_API void sluice_stats(sluice_t *l, struct sluice_stats *out);

/* The limiter's clock, in ns (0 for NULL l). */
SLUICE_API uint64_t sluice_now(sluice_t *l);

#define SLUICE_HDR_IETF 1u /* RateLimit-Policy and RateLimit, latest IETF httpapi draft */
#define SLUICE_HDR_X 2u    /* X-RateLimit-Limit/-Remaining/-Used/-Reset */

/*
 * Write HTTP response header lines for *res ("Name: value\r\n" each, then a
 * NUL) into buf[0..cap).  style is SLUICE_HDR_IETF, SLUICE_HDR_X or both;
 * a denial (retry_after_ns > 0) adds "Retry-After: <seconds>".  All seconds
 * round up.  The policy name comes from the config's name.
 * Returns the bytes written (without the NUL), -EINVAL (NULL l, res or buf
 * with cap > 0, unknown style bits) or -ENOSPC (buf too short: nothing
 * useful written, never past cap; buf holds "" when cap > 0).
 */
SLUICE_API int sluice_format_headers(sluice_t *l, const struct sluice_result *res,
                                     unsigned style, char *buf, size_t cap);

/*
 * Write the limiter's counters (struct sluice_stats) in the Prometheus text
 * exposition format (version 0.0.4): each metric with "# HELP" and "# TYPE"
 * lines, counters as sluice_*_total, gauges for live keys and memory, the
 * limiter's name as the label name="...".  Ends with a NUL.
 * Returns the bytes written (without the NUL), -EINVAL (NULL l, or NULL buf
 * with cap > 0) or -ENOSPC (buf too short; buf holds "" when cap > 0).
 */
SLUICE_API int sluice_format_prometheus(sluice_t *l, char *buf, size_t cap);

/* A static English text for a return value of this API ("allowed", "denied"
 * or the errno's meaning). */
SLUICE_API const char *sluice_strerror(int rc);

/* "MAJOR.MINOR.PATCH" of the library actually linked. */
SLUICE_API const char *sluice_version(void);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_H */
