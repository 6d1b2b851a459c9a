/*
 * Binary compatibility: the library never touches a byte past the public
 * struct it is handed (each struct here ends exactly where an unreadable,
 * unwritable page begins, as a caller's smaller struct from an older
 * header would), sizes stay what this soname promised, and non-zero
 * reserved words are refused rather than ignored.
 */
#include <stddef.h>
#include <sys/mman.h>
#include <unistd.h>

#include "helpers.h"

/* The sizes of soname 2 on LP64; a change here is an ABI break. */
#if defined(__LP64__)
_Static_assert(sizeof(struct sluice_limit) == 56, "sluice_limit changed size");
_Static_assert(sizeof(struct sluice_policy) == 8 + 8 * 56, "sluice_policy changed size");
_Static_assert(sizeof(struct sluice_result) == 88, "sluice_result changed size");
_Static_assert(sizeof(struct sluice_stats) == 120, "sluice_stats changed size");
_Static_assert(sizeof(struct sluice_key) == 24, "sluice_key changed size");
_Static_assert(offsetof(struct sluice_config, reserved) + 64 == sizeof(struct sluice_config),
               "sluice_config must end in its reserved words");
#endif

static size_t page;

/* An object of `size` bytes whose last byte is the last readable one. */
static void *at_page_end(size_t size)
{
    size_t span = (size + page - 1) / page * page;
    char *m = mmap(NULL, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (m == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    if (mprotect(m + span, page, PROT_NONE) != 0) {
        perror("mprotect");
        exit(1);
    }
    return m + span - size;
}

static void free_page_end(void *p, size_t size)
{
    size_t span = (size + page - 1) / page * page;

    munmap((char *)p + size - span, span + page);
}

static void guarded_calls(void)
{
    struct sluice_config *cfg = at_page_end(sizeof(*cfg));
    struct sluice_result *res = at_page_end(sizeof(*res));
    struct sluice_stats *st = at_page_end(sizeof(*st));
    struct sluice_policy *pol = at_page_end(sizeof(*pol));
    sluice_t *l = NULL;

    sluice_config_init(cfg);
    CHECK_EQ(sluice_policy_add(&cfg->policy, SLUICE_GCRA, 3, NS_PER_S), 0);
    CHECK_EQ(sluice_create(cfg, &l), 0);
    if (l == NULL)
        return;
    memset(res, 0xa5, sizeof(*res));
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 0, res), SLUICE_ALLOW);
    for (size_t i = 0; i < sizeof(res->reserved) / sizeof(res->reserved[0]); i++)
        CHECK_U64(res->reserved[i], 0);
    CHECK_EQ(sluice_peek_at(l, "k", 1, 5, 0, res), -E2BIG);
    CHECK_EQ(sluice_peek_at(l, "k", 1, 3, 0, res), SLUICE_DENY);
    struct sluice_key k = {l, "k", 1};
    CHECK_EQ(sluice_acquire_all(&k, 1, 1, 0, res), SLUICE_ALLOW);
    memset(st, 0xa5, sizeof(*st));
    sluice_stats(l, st);
    CHECK_U64(st->allowed, 2);
    for (size_t i = 0; i < sizeof(st->reserved) / sizeof(st->reserved[0]); i++)
        CHECK_U64(st->reserved[i], 0);
    memset(pol, 0, sizeof(*pol));
    CHECK_EQ(sluice_policy_add(pol, SLUICE_FIXED_WINDOW, 5, NS_PER_S), 0);
    CHECK_EQ(sluice_set_policy(l, pol), 0);
    CHECK_EQ(sluice_override_set(l, "o", 1, pol), 0);
    char buf[512];
    CHECK(sluice_format_headers(l, res, SLUICE_HDR_IETF | SLUICE_HDR_X, buf, sizeof(buf)) > 0);
    sluice_destroy(l);
    free_page_end(cfg, sizeof(*cfg));
    free_page_end(res, sizeof(*res));
    free_page_end(st, sizeof(*st));
    free_page_end(pol, sizeof(*pol));
}

static void reserved_refused(void)
{
    struct sluice_config cfg;
    struct sluice_policy p = {0};
    sluice_t *l = NULL;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_GCRA, 3, NS_PER_S);
    for (size_t i = 0; i < sizeof(cfg.reserved) / sizeof(cfg.reserved[0]); i++)
        CHECK_U64(cfg.reserved[i], 0);
    CHECK_U64(cfg.policy.limits[0].reserved[0], 0);
    cfg.reserved[7] = 1;
    CHECK_EQ(sluice_create(&cfg, &l), -EINVAL);
    cfg.reserved[7] = 0;
    cfg.policy.limits[0].reserved[1] = 1;
    CHECK_EQ(sluice_create(&cfg, &l), -EINVAL);
    cfg.policy.limits[0].reserved[1] = 0;
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    sluice_policy_add(&p, SLUICE_GCRA, 3, NS_PER_S);
    p.limits[0].reserved[0] = 42;
    CHECK_EQ(sluice_set_policy(l, &p), -EINVAL);
    CHECK_EQ(sluice_override_set(l, "k", 1, &p), -EINVAL);
    /* and nothing was charged or created by the refusals */
    struct sluice_stats st;
    sluice_stats(l, &st);
    CHECK_U64(st.keys, 0);
    sluice_destroy(l);
}

int main(void)
{
    page = (size_t)sysconf(_SC_PAGESIZE);
    guarded_calls();
    reserved_refused();
    return t_done("abi");
}
