/* The data caches of the core a kernel runs on, for blocking: block sizes are derived from these
 * at run time, never from a CPU model (the project's host changes from session to session). */
#ifndef SDGP_CORE_CACHE_H
#define SDGP_CORE_CACHE_H

#include <stdint.h>

typedef struct {
    int64_t l1d; /* bytes of L1 data cache per core */
    int64_t l2;  /* bytes of L2 per core */
    const char *source; /* "cpu" (the OS's cpuid reading), "env" (an override), "default" (nothing known) */
} sdgp_cache_info;

/* The caches of this machine: glibc's reading of cpuid (sysconf _SC_LEVEL1_DCACHE_SIZE and
 * _SC_LEVEL2_CACHE_SIZE), each overridable by the environment, SDGP_L1D_KB and SDGP_L2_KB
 * (KiB, e.g. to replay another host's blocking: kernels' blockings and so their sum orders
 * follow these); 32 KiB and 512 KiB where neither says. Read once per process. */
const sdgp_cache_info *sdgp_caches(void);

#endif
