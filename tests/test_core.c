/* Core: status messages, ISA selection, Philox known-answer vectors. */
#include "core/philox.h"
#include "core/transpose.h"
#include "harness.h"
#include "sdgp/isa.h"
#include "sdgp/status.h"

TEST_CASE(philox_known_answers) {
    /* Vectors from the Random123 distribution (kat_vectors, philox4x32_10). */
    struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}, {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int t = 0; t < 3; t++) {
        sdgp_philox_ctr c = {{kat[t].ctr[0], kat[t].ctr[1], kat[t].ctr[2], kat[t].ctr[3]}};
        sdgp_philox_key k = {{kat[t].key[0], kat[t].key[1]}};
        sdgp_philox_ctr r = sdgp_philox4x32_10(c, k);
        for (int i = 0; i < 4; i++) CHECK(r.v[i] == kat[t].out[i], "vector %d word %d: %08x != %08x", t, i, r.v[i], kat[t].out[i]);
    }
}

TEST_CASE(philox_keys_differ) {
    sdgp_philox_key a = sdgp_philox_make_key(1, 0, 0), b = sdgp_philox_make_key(1, 1, 0), c = sdgp_philox_make_key(1, 0, 1);
    CHECK(a.v[0] != b.v[0] || a.v[1] != b.v[1], "step must change the key");
    CHECK(a.v[0] != c.v[0] || a.v[1] != c.v[1], "layer must change the key");
    CHECK(sdgp_u01f(0xffffffffu) < 1.0f, "u01f must stay below 1");
}

TEST_CASE(status_messages) {
    sdgp_error e;
    sdgp_error_clear(&e);
    CHECK(e.code == SDGP_OK && e.msg[0] == 0, "clear");
    sdgp_status st = sdgp_fail(&e, SDGP_ERR_INVALID, "n=%d > m=%d", 5, 4);
    CHECK(st == SDGP_ERR_INVALID && e.code == st, "code kept");
    CHECK(strcmp(e.msg, "n=5 > m=4") == 0, "message: %s", e.msg);
    CHECK(sdgp_fail(NULL, SDGP_ERR_IO, "x") == SDGP_ERR_IO, "NULL err allowed");
    CHECK(strcmp(sdgp_status_name(SDGP_ERR_FORMAT), "bad file format") == 0, "name");
}

TEST_CASE(isa_selection) {
    sdgp_isa isa;
    CHECK(sdgp_isa_supported(SDGP_ISA_REF), "ref always runs");
    CHECK(sdgp_isa_parse("avx2", &isa, NULL) == SDGP_OK && isa == SDGP_ISA_AVX2, "parse avx2");
    sdgp_error e;
    CHECK(sdgp_isa_parse("sse9", &isa, &e) == SDGP_ERR_INVALID && strstr(e.msg, "sse9"), "bad name named: %s", e.msg);
    setenv("SDGP_ISA", "ref", 1);
    CHECK(sdgp_isa_resolve(SDGP_ISA_AUTO, &isa, NULL) == SDGP_OK && isa == SDGP_ISA_REF, "env override");
    setenv("SDGP_ISA", "bogus", 1);
    CHECK(sdgp_isa_resolve(SDGP_ISA_AUTO, &isa, &e) == SDGP_ERR_INVALID && strstr(e.msg, "bogus"), "bad env: %s", e.msg);
    unsetenv("SDGP_ISA");
    CHECK(sdgp_isa_resolve(SDGP_ISA_AUTO, &isa, NULL) == SDGP_OK && isa == sdgp_isa_best(), "auto = best");
    CHECK(sdgp_isa_resolve(SDGP_ISA_COUNT, &isa, &e) == SDGP_ERR_INVALID, "out of range");
}

/* transpose_for(isa) of every ISA: each element lands where transpose.h says and nothing outside the
 * rows x cols block is written, for both loop orders (rows >= cols and rows < cols), whole 16 x 16
 * blocks, edges of 1..15, and leading dimensions with padding and of 4 KiB (32 x 32 planes). */
TEST_CASE(transpose_paths) {
    const int64_t dims[] = {1, 7, 8, 16, 17, 40, 64, 1024};
    long compared = 0;
    FOR_EACH_ISA(isa) {
        const transpose_fn tr = transpose_for(isa);
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
            for (size_t j = 0; j < sizeof dims / sizeof dims[0]; j++) {
                const int64_t rows = dims[i], cols = dims[j], lds = cols + 3 * (int64_t)(j % 2), ldd = rows == 1024 ? 1024 : rows + 5;
                if (rows * cols > 1024 * 64) continue;
                float *src = test_xmalloc((size_t)(rows * lds) * 4), *dst = test_xmalloc((size_t)(cols * ldd) * 4);
                for (int64_t k = 0; k < rows * lds; k++) src[k] = (float)k;
                for (int64_t k = 0; k < cols * ldd; k++) dst[k] = -1.0f;
                tr(dst, ldd, src, lds, rows, cols);
                int ok = 1;
                for (int64_t c = 0; c < cols; c++)
                    for (int64_t r = 0; r < ldd; r++) ok &= dst[c * ldd + r] == (r < rows ? src[r * lds + c] : -1.0f);
                CHECK(ok, "%s transpose %lld x %lld (lds %lld, ldd %lld) is wrong", sdgp_isa_name(isa), (long long)rows,
                      (long long)cols, (long long)lds, (long long)ldd);
                compared++;
                free(src);
                free(dst);
            }
    }
    CHECK(compared > 0, "no transpose compared");
}

int main(void) {
    RUN(philox_known_answers);
    RUN(philox_keys_differ);
    RUN(status_messages);
    RUN(isa_selection);
    RUN(transpose_paths);
    return test_finish();
}
