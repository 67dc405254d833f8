/* The test harness shared by every tests/test_*.c program.
 *
 * A test program defines cases with TEST_CASE(name) { ... } and lists them in main via
 * RUN(name). CHECK records a failure with file:line and a message and lets the case go on;
 * REQUIRE returns from the case. Each program ends with the plain line "N passed, M failed"
 * and exits non-zero when anything failed.
 * Also here: comparison helpers (relative error, bitwise equality), a seeded random-fill and
 * central finite differences, so every op's test is written the same way. */
#ifndef SDGP_TEST_HARNESS_H
#define SDGP_TEST_HARNESS_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 in sanitizer builds (about 15x slower): long-running cases shrink there, keeping their memory
 * checks but not assertions that need many steps (say so where it applies). */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_SANITIZED 1
#else
#define TEST_SANITIZED 0
#endif

typedef struct {
    int passed, failed;
    int case_failed;
    const char *case_name;
} test_state;

static test_state T_;

#define TEST_CASE(name) static void name(void)

/* Records a failed check of the running case: where, what, and the caller's message. */
static void test_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), unused));

/* cond is evaluated exactly once (it may be a call with effects). */
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) test_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);    \
    } while (0)

#define REQUIRE(cond, ...)                                                 \
    do {                                                                   \
        if (!(cond)) {                                                     \
            test_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);             \
            return;                                                        \
        }                                                                  \
    } while (0)

#define RUN(name)                                                         \
    do {                                                                  \
        T_.case_name = #name;                                             \
        T_.case_failed = 0;                                               \
        name();                                                           \
        if (T_.case_failed) T_.failed++; else T_.passed++;                \
        fprintf(stderr, "%s %s\n", T_.case_failed ? "FAILED" : "ok", #name); \
    } while (0)

static void test_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
    T_.case_failed = 1;
    fprintf(stderr, "FAIL %s (%s:%d): %s: ", T_.case_name, file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static inline int test_finish(void) {
    printf("%d passed, %d failed\n", T_.passed, T_.failed);
    return T_.failed ? 1 : 0;
}

/* FOR_EACH_ISA(isa) statement: runs the statement once for each kernel path this CPU supports
 * (sdgp_isa_supported: ref always, then avx2 and avx512 where the CPU and OS run them), in enum
 * order, with isa declared as an sdgp_isa; never SDGP_ISA_AUTO. FOR_EACH_VECTOR_ISA leaves out
 * ref, for tests that compare the vector paths against it. break and continue act on this loop.
 * The paths do not follow the SDGP_ISA variable: that picks what AUTO resolves to, and these tests
 * name each path explicitly. Only the expansion names sdgp/isa.h's declarations, so this header
 * stays usable by tests that do not include it. */
#define TEST_FOR_EACH_ISA_FROM(isa, first)                                              \
    for (sdgp_isa isa = (first); isa < SDGP_ISA_COUNT; isa = (sdgp_isa)(isa + 1))       \
        if (!sdgp_isa_supported(isa)) {                                                 \
        } else
#define FOR_EACH_ISA(isa) TEST_FOR_EACH_ISA_FROM(isa, SDGP_ISA_REF)
#define FOR_EACH_VECTOR_ISA(isa) TEST_FOR_EACH_ISA_FROM(isa, SDGP_ISA_AVX2)

/* A small deterministic generator for test data (not the library's Philox). */
static inline uint64_t test_rand_u64(uint64_t *s) {
    uint64_t x = (*s += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
static inline double test_rand_u01(uint64_t *s) { return (double)(test_rand_u64(s) >> 11) * (1.0 / 9007199254740992.0); }
static inline float test_rand_normal(uint64_t *s) {
    double u1 = test_rand_u01(s), u2 = test_rand_u01(s);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
static inline void test_fill_normal(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) x[i] = test_rand_normal(&seed);
}
/* Inputs for pruning tests: normal values with zeros of both signs, ties (few levels) and denormals. */
static inline void test_fill_prune_input(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        double u = test_rand_u01(&seed);
        float v = test_rand_normal(&seed);
        if (u < 0.08) v = 0.0f;
        else if (u < 0.10) v = -0.0f;
        else if (u < 0.25) v = (float)(int)(v * 2) * 0.5f; /* ties */
        else if (u < 0.27) v *= 1e-39f;                     /* denormal */
        x[i] = v;
    }
}

/* max_i |a_i - b_i| / max(max_i |b_i|, tiny): the error measure of all numeric tests. */
static inline double test_rel_err(const float *a, const float *b, size_t n) {
    double diff = 0, ref = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > diff || d != d) diff = d;
        if (fabs((double)b[i]) > ref) ref = fabs((double)b[i]);
    }
    return diff / (ref > 1e-30 ? ref : 1e-30);
}

static inline int test_bitwise_equal(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* Central finite difference of f at x[i]; f reads x and returns a scalar (in double). */
typedef double (*test_scalar_fn)(void *ctx, const float *x);
static inline double test_fd(test_scalar_fn f, void *ctx, float *x, size_t i, float h) {
    float keep = x[i];
    x[i] = keep + h;
    double fp = f(ctx, x);
    x[i] = keep - h;
    double fm = f(ctx, x);
    x[i] = keep;
    return (fp - fm) / (2.0 * (double)h);
}

static inline void *test_xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test: out of memory (%zu bytes)\n", bytes);
        exit(2);
    }
    return p;
}

#endif
