/*
 * The lean paths' decision time (sl_decide_time_predicted, src/entry.h),
 * written as branches so that a decision need not wait for its entry's
 * line, is sl_decide_time exactly: for both kinds of policy (GCRA only,
 * and one that reads times absolutely), at every boundary of its tests
 * (no admission yet, the seal, the two latest times, the half-range of
 * the signed distance, the clock's wrap) and for random pairs.
 */
#include "helpers.h"

#include "internal.h"
#include "policy.h"

static unsigned long checked, wrong;

static void check_pair(const struct sl_policy *pol, uint64_t lastw, uint64_t now)
{
    uint64_t want = sl_decide_time(lastw, pol, now), got = sl_decide_time_predicted(lastw, pol, now);

    checked++;
    if (got != want && wrong++ < 5)
        fprintf(stderr, "absolute %d lastw %" PRIu64 " now %" PRIu64 ": %" PRIu64 ", not %" PRIu64 "\n",
                (int)pol->absolute, lastw, now, got, want);
}

int main(int argc, char **argv)
{
    static const uint64_t half = UINT64_C(1) << 63;
    const uint64_t lasts[] = {0, 1, 2, 3, half - 1, half, half + 1, half + 2,
                              SL_LAST_EXACT - 1, SL_LAST_EXACT, SL_LAST_EXACT + 1, SL_LAST_SEALED,
                              UINT64_C(1000000007), UINT64_C(1) << 40};
    const uint64_t deltas[] = {0, 1, 2, 3, half - 2, half - 1, half, half + 1, half + 2};
    unsigned long rounds = (unsigned long)(2000000 * t_scale(argc, argv)) + 1000;
    static struct sl_policy gcra, absolute; /* only `absolute` is read */
    uint64_t rng = 0x2545f4914f6cdd1du;
    const struct sl_policy *pol[2] = {&gcra, &absolute};

    absolute.absolute = true;
    for (unsigned k = 0; k < 2; k++) {
        for (size_t i = 0; i < sizeof(lasts) / sizeof(lasts[0]); i++)
            for (size_t j = 0; j < sizeof(deltas) / sizeof(deltas[0]); j++) {
                uint64_t last = lasts[i] - 1; /* lastw encodes 1 + the time */
                check_pair(pol[k], lasts[i], last + deltas[j]);
                check_pair(pol[k], lasts[i], last - deltas[j]);
                check_pair(pol[k], lasts[i], deltas[j]);
                check_pair(pol[k], lasts[i], UINT64_MAX - deltas[j]);
            }
        for (unsigned long r = 0; r < rounds; r++) {
            uint64_t lastw = t_rand(&rng), near = lastw + (t_rand(&rng) % 2001) - 1000;
            check_pair(pol[k], lastw, t_rand(&rng));
            check_pair(pol[k], lastw, near);
            check_pair(pol[k], lastw, near ^ half);
        }
    }
    printf("%lu pairs, %lu decided otherwise than by sl_decide_time\n", checked, wrong);
    CHECK_EQ(wrong, 0);
    return t_done("decide_time");
}
