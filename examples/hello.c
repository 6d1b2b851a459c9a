/* The smallest useful program: 3 requests per second for one client. */
#include <sluice.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    struct sluice_config cfg;
    sluice_t *l;
    int allowed = 0, rc;

    sluice_config_init(&cfg);
    sluice_policy_add(&cfg.policy, SLUICE_GCRA, 3, 1000000000);
    rc = sluice_create(&cfg, &l);
    if (rc != 0) {
        fprintf(stderr, "sluice_create: %s\n", sluice_strerror(rc));
        return 1;
    }
    for (int i = 0; i < 5; i++)
        allowed += sluice_acquire_at(l, "10.0.0.1", strlen("10.0.0.1"), 1, 0, NULL) == SLUICE_ALLOW;
    printf("sluice %s: allowed %d of 5\n", sluice_version(), allowed);
    sluice_destroy(l);
    return 0;
}
