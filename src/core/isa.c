#include "sdgp/isa.h"

#include <cpuid.h>
#include <stdlib.h>
#include <string.h>

static const char *const isa_names[SDGP_ISA_COUNT] = {"ref", "avx2", "avx512"};

const char *sdgp_isa_name(sdgp_isa isa) {
    if (isa == SDGP_ISA_AUTO) return "auto";
    if (isa < 0 || isa >= SDGP_ISA_COUNT) return "?";
    return isa_names[isa];
}

sdgp_status sdgp_isa_parse(const char *name, sdgp_isa *out, sdgp_error *err) {
    if (!name) return sdgp_fail(err, SDGP_ERR_INVALID, "ISA name is NULL");
    if (strcmp(name, "auto") == 0) {
        *out = SDGP_ISA_AUTO;
        return SDGP_OK;
    }
    for (int i = 0; i < SDGP_ISA_COUNT; i++)
        if (strcmp(name, isa_names[i]) == 0) {
            *out = (sdgp_isa)i;
            return SDGP_OK;
        }
    return sdgp_fail(err, SDGP_ERR_INVALID, "unknown ISA '%s' (expected auto, ref, avx2 or avx512)", name);
}

/* XCR0 tells whether the OS saves the YMM (bits 1-2) and ZMM/opmask (bits 5-7) state. */
static unsigned long long read_xcr0(void) {
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static int detect(sdgp_isa isa) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, avx = (c >> 28) & 1;
    if (!osxsave || !avx || !fma) return 0;
    unsigned long long xcr0 = read_xcr0();
    if ((xcr0 & 0x6) != 0x6) return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    int avx2 = (b >> 5) & 1, bmi2 = (b >> 8) & 1;
    if (isa == SDGP_ISA_AVX2) return avx2 && bmi2;
    if (isa == SDGP_ISA_AVX512) {
        int f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
        return avx2 && bmi2 && f && dq && bw && vl && (xcr0 & 0xe6) == 0xe6;
    }
    return 0;
}

/* cpuid traps to the hypervisor in a VM (about 14 us here) and every kernel call asks, so the
 * answer is cached. The CPU does not change under a process: a race only computes it twice. */
int sdgp_isa_supported(sdgp_isa isa) {
    static int cache[SDGP_ISA_COUNT]; /* 0 unknown, 1 no, 2 yes */
    if (isa == SDGP_ISA_REF) return 1;
    if (isa < 0 || isa >= SDGP_ISA_COUNT) return 0;
    int v = __atomic_load_n(&cache[isa], __ATOMIC_RELAXED);
    if (!v) {
        v = detect(isa) ? 2 : 1;
        __atomic_store_n(&cache[isa], v, __ATOMIC_RELAXED);
    }
    return v == 2;
}

sdgp_isa sdgp_isa_best(void) {
    for (int i = SDGP_ISA_COUNT - 1; i > 0; i--)
        if (sdgp_isa_supported((sdgp_isa)i)) return (sdgp_isa)i;
    return SDGP_ISA_REF;
}

sdgp_status sdgp_isa_resolve(sdgp_isa requested, sdgp_isa *out, sdgp_error *err) {
    sdgp_isa isa = requested;
    const char *env = NULL;
    if (isa == SDGP_ISA_AUTO) {
        env = getenv("SDGP_ISA");
        if (env && *env) {
            sdgp_status st = sdgp_isa_parse(env, &isa, err);
            if (st != SDGP_OK) return sdgp_fail(err, st, "SDGP_ISA=%s: unknown ISA (expected ref, avx2 or avx512)", env);
        }
        if (isa == SDGP_ISA_AUTO) isa = sdgp_isa_best();
    }
    if (isa < 0 || isa >= SDGP_ISA_COUNT) return sdgp_fail(err, SDGP_ERR_INVALID, "ISA value %d out of range", (int)isa);
    if (!sdgp_isa_supported(isa))
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED, "%s%s%s: this CPU cannot run the %s kernels", env ? "SDGP_ISA=" : "ISA ",
                         env ? env : sdgp_isa_name(isa), "", sdgp_isa_name(isa));
    *out = isa;
    return SDGP_OK;
}
