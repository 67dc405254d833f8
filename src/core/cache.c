#include "core/cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static sdgp_cache_info info;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The environment's KiB for name, if it is a positive integer below 1 GiB; else fallback. */
static int64_t env_kib(const char *name, int64_t fallback, int *used) {
    const char *v = getenv(name);
    if (!v || !*v) return fallback;
    char *end;
    long long kib = strtoll(v, &end, 10);
    if (*end || kib < 1 || kib > (1 << 20)) return fallback; /* not a size: the hardware's reading stands */
    *used = 1;
    return (int64_t)kib * 1024;
}

static void detect(void) {
    long l1 = -1, l2 = -1;
#ifdef _SC_LEVEL1_DCACHE_SIZE
    l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    const int known = l1 > 0 && l2 > 0;
    info.l1d = known ? l1 : 32 * 1024;
    info.l2 = known ? l2 : 512 * 1024;
    int env = 0;
    info.l1d = env_kib("SDGP_L1D_KB", info.l1d, &env);
    info.l2 = env_kib("SDGP_L2_KB", info.l2, &env);
    info.source = env ? "env" : known ? "cpu" : "default";
}

const sdgp_cache_info *sdgp_caches(void) {
    pthread_once(&once, detect);
    return &info;
}
