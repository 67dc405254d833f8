/* sdgp: instruction-set selection for kernels.
 *
 * Kernels exist for a portable C reference, AVX2+FMA and AVX-512 (F/BW/VL/DQ). The best path
 * the CPU supports is chosen at run time; the environment variable SDGP_ISA=ref|avx2|avx512
 * lowers the choice (asking for an ISA the CPU lacks is an error, never a crash).
 * There is no global ISA state: callers pass the sdgp_isa they want in each config, and
 * SDGP_ISA_AUTO means "sdgp_isa_resolve() at call time". */
#ifndef SDGP_ISA_H
#define SDGP_ISA_H

#include "sdgp/export.h"
#include "sdgp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SDGP_ISA_AUTO = -1,
    SDGP_ISA_REF = 0,
    SDGP_ISA_AVX2 = 1,
    SDGP_ISA_AVX512 = 2,
    SDGP_ISA_COUNT = 3
} sdgp_isa;

/* "ref", "avx2", "avx512" ("auto" for SDGP_ISA_AUTO). */
SDGP_API const char *sdgp_isa_name(sdgp_isa isa);

/* Parses a name as above; returns SDGP_ERR_INVALID with a message for anything else. */
SDGP_API sdgp_status sdgp_isa_parse(const char *name, sdgp_isa *out, sdgp_error *err);

/* 1 when this CPU (and OS) can run the path; SDGP_ISA_REF always. */
SDGP_API int sdgp_isa_supported(sdgp_isa isa);

/* The best supported path. */
SDGP_API sdgp_isa sdgp_isa_best(void);

/* Turns a request into the path that will run: SDGP_ISA_AUTO becomes the SDGP_ISA environment
 * variable when set, else sdgp_isa_best(). Fails (SDGP_ERR_UNSUPPORTED / SDGP_ERR_INVALID) when
 * the request or the variable names a path this CPU cannot run or an unknown name. */
SDGP_API sdgp_status sdgp_isa_resolve(sdgp_isa requested, sdgp_isa *out, sdgp_error *err);

#ifdef __cplusplus
}
#endif
#endif
