/*
 * Epoch reclamation (epoch.c): the per-thread record and the section entry
 * and exit every decision inlines.  Included by internal.h only.
 */
#ifndef SL_EPOCH_H
#define SL_EPOCH_H

struct sl_thread {
    /* Read by reclaimers: 0 outside sections, else the epoch the current
     * section began in (written by the owner only, release). */
    sl_aword word;
    _Atomic unsigned state;     /* in use, or free for the next thread (epoch.c) */
    struct sl_thread *next;     /* the list of every record; immutable once linked */
    /* The rest belongs to the owning thread (handed over with the record). */
    unsigned depth;             /* sections nested */
    unsigned id;                /* kept across owners: the statistics slot (decide.c) */
    bool draining;              /* in sl_epoch_drain: callbacks may retire (barrier follows) */
    ck_stack_entry_t *cur;      /* retired since the last fence */
    ck_stack_entry_t *wait;     /* fenced, freed once no section of epoch <= wait_tag is left */
    uint64_t wait_tag;
    unsigned n_cur, n_wait;
    struct sl_limbo *spare;     /* an empty batch of one, for the next writer (entry.c) */
};

/* The global epoch and the per-process choice of section entry (epoch.c). */
extern sl_aword sl_epoch_global;
extern bool sl_epoch_fenced;

/* The calling thread's record, made on first use; NULL if out of memory.
 * Inline: every call starts here, and the record is one %fs load away
 * (initial-exec TLS, hidden like every internal symbol). */
extern _Thread_local struct sl_thread *sl_tls __attribute__((tls_model("initial-exec")));
struct sl_thread *sl_thread_make(void);

static inline struct sl_thread *sl_thread_get(void)
{
    struct sl_thread *t = sl_tls;

    return t != NULL ? t : sl_thread_make();
}

/*
 * Enter a section: two plain stores and a load on x86 (no locked
 * instruction, no fence) when the process reclaims with membarrier(2);
 * epoch.c says why that is enough.  Sections nest; only the outermost
 * entry publishes.
 */
static inline void sl_epoch_begin(struct sl_thread *t)
{
    if (t->depth++ != 0)
        return;
    /* acquire: an epoch raised by a reclaimer brings its unpublishes along;
     * release: a reclaimer that reads this word also sees everything this
     * thread did before (its previous section included) */
    sl_store_rel(&t->word, sl_load_acq(&sl_epoch_global));
    if (sl_epoch_fenced)
        ck_pr_fence_memory(); /* seq_cst: the store before every later load */
    else
        ck_pr_barrier();      /* the compiler's order only: membarrier gives the CPU's */
}

static inline bool sl_epoch_active(const struct sl_thread *t) { return t->depth != 0; }

void sl_epoch_poll(struct sl_thread *t);
/* Retired but not yet reclaimed, past which a call reclaims what it can. */
#define SL_POLL_PENDING 64

/* Leave a section where nothing was retired (a private limiter's fast
 * decision only charges): four instructions fewer than sl_epoch_end. */
static inline void sl_epoch_end_hot(struct sl_thread *t)
{
    SL_ASSERT(t->depth > 0);
    /* release: the section's reads come before a reclaimer's free */
    if (--t->depth == 0)
        sl_store_rel(&t->word, 0);
}

static inline void sl_epoch_end(struct sl_thread *t)
{
    /* Calls that retire and never insert (set_policy, overrides of a
     * shared limiter, deciders compiling a new policy) poll here, as the
     * outermost section ends: without it a loop of them held every old
     * policy (a set_policy loop grew by 250 MB a second) */
    if (t->depth == 1 && t->n_cur > SL_POLL_PENDING)
        sl_epoch_poll(t);
    sl_epoch_end_hot(t);
}

/* Hand memory to the epoch: cb(entry) runs once no reader can hold it.
 * Retire inside the epoch section that unpublished the memory (asserted),
 * or while draining, which waits for the grace period itself. */
void sl_retire(struct sl_thread *t, ck_epoch_entry_t *entry, ck_epoch_cb_t *cb);
/* The same for a whole array (a shard's cells): weighed as a full batch,
 * so the next poll starts its grace period at once.  Counted as one among
 * 64, the arrays a flood of new keys outgrew stayed until the flood
 * stopped: 193 resident bytes a key at 10^6 keys, where the table holds 50. */
void sl_retire_array(struct sl_thread *t, ck_epoch_entry_t *entry, ck_epoch_cb_t *cb);
/* (Above) Run the callbacks whose grace period is over, once enough are
 * pending; never waits.  Inside a section (callbacks may retire;
 * asserted), not from a callback. */
/* The same whatever the number pending (the reaper, after a pass). */
void sl_epoch_reclaim(struct sl_thread *t);
/* Epoch records ever made (live and recyclable): tests of thread churn. */
size_t sl_epoch_records(void);
/* Reclaim what this thread retired, waiting for readers; outside sections only. */
void sl_epoch_drain(struct sl_thread *t);
/* Sections are entered without a fence (membarrier in use); tests. */
bool sl_epoch_asymmetric(void);

#endif
