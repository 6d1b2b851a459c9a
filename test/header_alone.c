/* The public header compiles on its own, with nothing included before it. */
#include "sluice.h"

int main(void)
{
    struct sluice_config cfg;
    sluice_config_init(&cfg);
    return sluice_version()[0] == '2' && cfg.max_keys == ((size_t)1 << 20) ? 0 : 1;
}
