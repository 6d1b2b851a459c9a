/* HTTP headers: byte-exact output, rounding up, never past cap. */
#include "helpers.h"

static void test_exact(void)
{
    struct sluice_config cfg;
    struct sluice_result r;
    char buf[512];
    sluice_t *l;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_FIXED_WINDOW, 100, 60 * NS_PER_S);
    cfg.name = "api";
    CHECK_EQ(sluice_create(&cfg, &l), 0);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 58, 43 * NS_PER_S + 1, &r), SLUICE_ALLOW);
    CHECK_EQ(r.remaining, 42);
    CHECK_EQ(sluice_format_headers(l, &r, SLUICE_HDR_IETF, buf, sizeof(buf)), 64);
    CHECK(strcmp(buf, "RateLimit-Policy: \"api\";q=100;w=60\r\n"
                      "RateLimit: \"api\";r=42;t=17\r\n") == 0);
    CHECK_EQ(sluice_format_headers(l, &r, SLUICE_HDR_X, buf, sizeof(buf)), (int)strlen(buf));
    CHECK(strcmp(buf, "X-RateLimit-Limit: 100\r\nX-RateLimit-Remaining: 42\r\n"
                      "X-RateLimit-Used: 58\r\nX-RateLimit-Reset: 17\r\n") == 0);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 43, 43 * NS_PER_S + 1, &r), SLUICE_DENY);
    CHECK_EQ(sluice_format_headers(l, &r, SLUICE_HDR_IETF | SLUICE_HDR_X, buf, sizeof(buf)),
             (int)strlen(buf));
    CHECK(strcmp(buf, "RateLimit-Policy: \"api\";q=100;w=60\r\n"
                      "RateLimit: \"api\";r=42;t=17\r\n"
                      "X-RateLimit-Limit: 100\r\nX-RateLimit-Remaining: 42\r\n"
                      "X-RateLimit-Used: 58\r\nX-RateLimit-Reset: 17\r\n"
                      "Retry-After: 17\r\n") == 0);
    sluice_destroy(l);
}

static void test_rounding_and_bounds(void)
{
    sluice_t *l = t_limiter1(SLUICE_GCRA, 1, 1500000000u, 0, 0); /* 1 per 1.5 s */
    struct sluice_result r;
    char buf[256], small[40];

    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 0, &r), SLUICE_ALLOW);
    CHECK_EQ(sluice_acquire_at(l, "k", 1, 1, 1, &r), SLUICE_DENY);
    CHECK_EQ(r.retry_after_ns, 1500000000u - 1);
    CHECK(sluice_format_headers(l, &r, SLUICE_HDR_IETF, buf, sizeof(buf)) > 0);
    CHECK(strcmp(buf, "RateLimit-Policy: \"default\";q=1;w=2\r\n"
                      "RateLimit: \"default\";r=0;t=2\r\nRetry-After: 2\r\n") == 0);
    /* every short buffer: -ENOSPC, an empty string, nothing past cap */
    for (size_t cap = 1; cap < strlen(buf) + 1; cap++) {
        memset(small, 'Z', sizeof(small));
        int rc = sluice_format_headers(l, &r, SLUICE_HDR_IETF, small, cap < 30 ? cap : 30);
        if (cap < 30) {
            CHECK_EQ(rc, -ENOSPC);
            CHECK_EQ(small[0], '\0');
            for (size_t i = cap; i < sizeof(small); i++)
                CHECK_EQ(small[i], 'Z');
        }
    }
    CHECK_EQ(sluice_format_headers(l, &r, SLUICE_HDR_IETF, buf, strlen(buf)), -ENOSPC);
    CHECK_EQ(sluice_format_headers(l, &r, SLUICE_HDR_IETF, buf, 0), -ENOSPC);
    CHECK_EQ(sluice_format_headers(l, &r, 4, buf, sizeof(buf)), -EINVAL);
    CHECK_EQ(sluice_format_headers(NULL, &r, 1, buf, sizeof(buf)), -EINVAL);
    CHECK_EQ(sluice_format_headers(l, NULL, 1, buf, sizeof(buf)), -EINVAL);
    CHECK_EQ(sluice_format_headers(l, &r, 1, NULL, 10), -EINVAL);
    sluice_destroy(l);
}

int main(void)
{
    test_exact();
    test_rounding_and_bounds();
    return t_done("headers");
}
