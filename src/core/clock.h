/* The one clock of sdgp: monotonic wall time in seconds, for every timing the library and the
 * command line take (per-layer times, kernel tuning, training throughput, communication, benchmarks). */
#ifndef SDGP_CORE_CLOCK_H
#define SDGP_CORE_CLOCK_H

#include <time.h>

static inline double sdgp_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
