/* Philox4x32-10 (Salmon et al., SC'11): a counter-based random generator.
 *
 * Random numbers are a pure function of (key, counter), so results do not depend on thread
 * count, scheduling or ISA. sdgp keys every random decision by (seed, step, layer) -> key and
 * (group index, draw block) -> counter. Header-only so kernels of every ISA can inline it. */
#ifndef SDGP_PHILOX_H
#define SDGP_PHILOX_H

#include <stdint.h>

typedef struct { uint32_t v[4]; } sdgp_philox_ctr;
typedef struct { uint32_t v[2]; } sdgp_philox_key;

static inline uint64_t sdgp_splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* One key per (seed, step, layer): mixing first keeps the counter free for the group index. */
static inline sdgp_philox_key sdgp_philox_make_key(uint64_t seed, uint64_t step, uint32_t layer) {
    uint64_t h = sdgp_splitmix64(seed);
    h = sdgp_splitmix64(h ^ step);
    h = sdgp_splitmix64(h ^ ((uint64_t)layer << 32 | 0x5d9fu));
    sdgp_philox_key k = {{(uint32_t)h, (uint32_t)(h >> 32)}};
    return k;
}

static inline sdgp_philox_ctr sdgp_philox4x32_10(sdgp_philox_ctr c, sdgp_philox_key k) {
    const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)M0 * c.v[0], p1 = (uint64_t)M1 * c.v[2];
        sdgp_philox_ctr n = {{(uint32_t)(p1 >> 32) ^ c.v[1] ^ k.v[0], (uint32_t)p1,
                              (uint32_t)(p0 >> 32) ^ c.v[3] ^ k.v[1], (uint32_t)p0}};
        c = n;
        k.v[0] += W0;
        k.v[1] += W1;
    }
    return c;
}

/* Four random words for (group index, draw block). */
static inline sdgp_philox_ctr sdgp_philox_draw(sdgp_philox_key k, uint64_t group, uint32_t block) {
    sdgp_philox_ctr c = {{(uint32_t)group, (uint32_t)(group >> 32), block, 0x53444750u /* "SDGP" */}};
    return sdgp_philox4x32_10(c, k);
}

/* A uniform float in [0, 1) from 24 random bits (exactly representable, never 1.0f). */
static inline float sdgp_u01f(uint32_t r) { return (float)(r >> 8) * (1.0f / 16777216.0f); }

/* A uniform double in [0, 1) from 32 random bits. */
static inline double sdgp_u01d(uint32_t r) { return (double)r * (1.0 / 4294967296.0); }

#endif
