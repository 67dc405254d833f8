/* N:M pruning: every ISA path this CPU runs, and 1 vs 2 threads, bitwise equal to the reference
 * (single thread) for every function, axis, scope, output kind and a spread of shapes (tails of
 * 16-lane vectors, rows = 1, groups straddling samples on the row axis). */
#include "harness.h"
#include "sdgp/isa.h"
#include "sdgp/prune.h"

typedef struct {
    float *out;
    sdgp_nm_tensor nm;
    sdgp_status st;
} result;

static void run(result *r, const sdgp_prune_cfg *cfg, const float *x, int64_t B, int64_t P, int64_t C) {
    size_t total = (size_t)(B * P * C);
    r->out = test_xmalloc(total * 4);
    memset(r->out, 0xAB, total * 4); /* garbage: every element must be written */
    sdgp_error e;
    r->st = sdgp_nm_alloc(&r->nm, cfg->axis, cfg->n, cfg->m, B * P, C, &e);
    if (r->st == SDGP_OK) {
        memset(r->nm.values, 0xCD, sdgp_nm_slots(&r->nm) * 4);
        memset(r->nm.index, 0xEF, sdgp_nm_slots(&r->nm));
        r->st = sdgp_prune(cfg, x, B, P, C, r->out, &r->nm, &e);
    }
}

static int same(const result *a, const result *b, size_t total) {
    if (a->st != b->st) return 0;
    if (a->st != SDGP_OK) return 1;
    size_t slots = sdgp_nm_slots(&a->nm);
    return test_bitwise_equal(a->out, b->out, total * 4) && test_bitwise_equal(a->nm.values, b->nm.values, slots * 4) &&
           test_bitwise_equal(a->nm.index, b->nm.index, slots);
}

static void drop(result *r) {
    free(r->out);
    sdgp_nm_free(&r->nm);
}

static const int NM[][2] = {{2, 4}, {1, 4}, {3, 4}, {1, 2}, {2, 8}, {4, 8}, {7, 8}, {3, 16}, {4, 32}, {26, 32}, {3, 48}, {5, 24},
                            {2, 3}, {3, 5}, {5, 12}, {11, 20}, {16, 32}, {20, 32}, {12, 48}, {17, 64}, {52, 64}, {60, 64}, {4, 4}};

TEST_CASE(paths_and_threads_bitwise) {
    const struct {
        int64_t B, P, k; /* C = k * m on the channel axis; rows = B*P must be a multiple of m on the row axis */
    } shapes[] = {{1, 1, 1}, {2, 3, 5}, {3, 7, 9}, {2, 8, 16}};
    long compared = 0;
    for (int fn = SDGP_PRUNE_RANDOM; fn < SDGP_PRUNE_COUNT; fn++)
        for (size_t t = 0; t < sizeof NM / sizeof NM[0]; t++)
            for (int axis = 0; axis < 2; axis++)
                for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                    const int n = NM[t][0], m = NM[t][1];
                    if (fn == SDGP_PRUNE_MVUE_APPROX && !(n == 2 && m == 4)) continue;
                    int64_t B = shapes[si].B, P = shapes[si].P, C = shapes[si].k * m;
                    if (axis == SDGP_AXIS_ROW) { /* rows a multiple of m, groups straddling samples, odd C */
                        P = m + (B > 1 ? m / B : 0); /* B*P = B*m + m when B divides m: a group straddles */
                        if ((B * P) % m) P = m;
                        C = 3 + 8 * (int64_t)si + (si == 3 ? 13 : 0);
                    }
                    size_t total = (size_t)(B * P * C);
                    float *x = test_xmalloc(total * 4);
                    test_fill_prune_input(x, total, 31 * t + 7 * si + 1000 * fn + axis);
                    sdgp_prune_cfg cfg = sdgp_prune_cfg_make((sdgp_prune_fn)fn, n, m);
                    cfg.axis = (sdgp_axis)axis;
                    cfg.scope = si % 2 ? SDGP_SCOPE_CHANNEL : SDGP_SCOPE_SAMPLE_CHANNEL;
                    cfg.seed = 42 + si;
                    cfg.step = 3;
                    cfg.isa = SDGP_ISA_REF;
                    cfg.threads = 1;
                    result ref;
                    run(&ref, &cfg, x, B, P, C);
                    CHECK(ref.st == SDGP_OK, "%s %d:%d axis %d shape %lldx%lldx%lld: status %d", sdgp_prune_fn_name(cfg.fn), n, m, axis, (long long)B,
                          (long long)P, (long long)C, ref.st);
                    FOR_EACH_ISA(isa) {
                        for (int threads = 1; threads <= 2; threads++) {
                            if (isa == SDGP_ISA_REF && threads == 1) continue;
                            cfg.isa = isa;
                            cfg.threads = threads;
                            result r;
                            run(&r, &cfg, x, B, P, C);
                            CHECK(same(&ref, &r, total), "%s %d:%d axis %d scope %d shape %lldx%lldx%lld: %s with %d threads differs from ref",
                                  sdgp_prune_fn_name(cfg.fn), n, m, axis, cfg.scope, (long long)B, (long long)P, (long long)C,
                                  sdgp_isa_name(cfg.isa), threads);
                            compared++;
                            drop(&r);
                        }
                    }
                    drop(&ref);
                    free(x);
                }
    fprintf(stderr, "  %ld comparisons (best ISA here: %s)\n", compared, sdgp_isa_name(sdgp_isa_best()));
}

/* Larger tensors, where threads split rows differently, for the hot 2:4 cases; on the row axis also
 * 16, 32 and 48 channels, whose random-number batches span row groups. */
TEST_CASE(large_tensor_bitwise) {
    const int64_t B = 6, P = 100, Cs[] = {256, 16, 32, 48};
    for (int ci = 0; ci < 4; ci++) {
        const int64_t C = Cs[ci];
        size_t total = (size_t)(B * P * C);
        float *x = test_xmalloc(total * 4);
        test_fill_prune_input(x, total, 99 + ci);
        for (int fn = SDGP_PRUNE_RANDOM; fn < SDGP_PRUNE_COUNT; fn++)
            for (int axis = ci ? SDGP_AXIS_ROW : 0; axis < 2; axis++)
                for (int scope = 0; scope < 2; scope++) {
                    sdgp_prune_cfg cfg = sdgp_prune_cfg_make((sdgp_prune_fn)fn, 2, 4);
                    cfg.axis = (sdgp_axis)axis;
                    cfg.scope = (sdgp_rescale_scope)scope;
                    cfg.isa = SDGP_ISA_REF;
                    cfg.threads = 1;
                    result ref;
                    run(&ref, &cfg, x, B, P, C);
                    FOR_EACH_ISA(isa) {
                        cfg.isa = isa;
                        cfg.threads = 2;
                        result r;
                        run(&r, &cfg, x, B, P, C);
                        CHECK(same(&ref, &r, total), "%s 2:4 axis %d scope %d C %lld: %s x2 threads differs", sdgp_prune_fn_name(cfg.fn), axis, scope,
                              (long long)C, sdgp_isa_name(cfg.isa));
                        drop(&r);
                    }
                    drop(&ref);
                }
        free(x);
    }
}

/* Mostly zeros and few distinct values: groups with fewer than n nonzeros and ties at the n-th
 * largest key everywhere (the threshold ranking's tie fix-up), for m = 8 .. 64, both sides of m/2;
 * for random, kept zeros, which the compressed form replaces by the lowest-index zeros; for MVUE,
 * groups left as they are (at most n nonzeros) beside sampled ones, and equal values to saturate. */
TEST_CASE(sparse_ties_bitwise) {
    const int nm[][2] = {{2, 8}, {6, 8}, {1, 16}, {4, 16}, {12, 16}, {4, 32}, {28, 32}, {8, 64}, {5, 48}};
    const int64_t B = 3, P = 9, C = 192;
    const size_t total = (size_t)(B * P * C);
    float *x = test_xmalloc(total * 4);
    uint64_t seed = 7;
    for (size_t i = 0; i < total; i++) {
        double u = test_rand_u01(&seed);
        x[i] = u < 0.7 ? (u < 0.35 ? 0.0f : -0.0f) : (float)(int)(test_rand_u01(&seed) * 4 - 2) * (i % 3 ? 1.0f : 1e-39f);
    }
    for (size_t t = 0; t < sizeof nm / sizeof nm[0]; t++)
        for (int fn = SDGP_PRUNE_RANDOM; fn <= SDGP_PRUNE_MVUE; fn++) /* random: kept zeros, slots padded */
            for (int scope = 0; scope < 2; scope++) {
                sdgp_prune_cfg cfg = sdgp_prune_cfg_make((sdgp_prune_fn)fn, nm[t][0], nm[t][1]);
                cfg.scope = (sdgp_rescale_scope)scope;
                cfg.isa = SDGP_ISA_REF;
                cfg.threads = 1;
                result ref;
                run(&ref, &cfg, x, B, P, C);
                CHECK(ref.st == SDGP_OK, "%s %d:%d: status %d", sdgp_prune_fn_name(cfg.fn), cfg.n, cfg.m, ref.st);
                FOR_EACH_VECTOR_ISA(isa) {
                    cfg.isa = isa;
                    cfg.threads = 2;
                    result r;
                    run(&r, &cfg, x, B, P, C);
                    CHECK(same(&ref, &r, total), "%s %d:%d scope %d on sparse ties: %s differs from ref", sdgp_prune_fn_name(cfg.fn), cfg.n, cfg.m, scope,
                          sdgp_isa_name(cfg.isa));
                    drop(&r);
                }
                drop(&ref);
            }
    free(x);
}

/* A draw the reference rejects (its low word below 2^32 mod bound, odds 22 in 2^32 at 1:27): the
 * vector paths, which take each group's words in order, must hand that batch to the reference. Key
 * (seed 1907, step 3, layer 0), group 1747: its first word w = 636291452 has (27 w) mod 2^32 < 22. */
TEST_CASE(random_rejected_draw) {
    for (int axis = 0; axis < 2; axis++) {
        /* 2000 groups either way: channels, 100 rows of 20 groups (1747 in row 87); rows, 20 row
         * groups of 100 channels (1747 = row group 17, channel 47) */
        const int64_t B = 1, P = axis == SDGP_AXIS_ROW ? 27 * 20 : 100, C = axis == SDGP_AXIS_ROW ? 100 : 27 * 20;
        const size_t total = (size_t)(B * P * C);
        float *x = test_xmalloc(total * 4);
        test_fill_prune_input(x, total, 11);
        sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_RANDOM, 1, 27);
        cfg.axis = (sdgp_axis)axis;
        cfg.seed = 1907;
        cfg.step = 3;
        cfg.isa = SDGP_ISA_REF;
        cfg.threads = 1;
        result ref;
        run(&ref, &cfg, x, B, P, C);
        /* the first word would keep position (27 w) >> 32 = 4; the redraw keeps another (slot 1747 on both axes) */
        CHECK(ref.st == SDGP_OK && ref.nm.index[1747] != 4, "axis %d: the reference kept position %d of group 1747 (4 without the redraw)",
              axis, ref.nm.index[1747]);
        FOR_EACH_VECTOR_ISA(isa)
            for (int threads = 1; threads <= 2; threads++) {
                cfg.isa = isa;
                cfg.threads = threads;
                result r;
                run(&r, &cfg, x, B, P, C);
                CHECK(same(&ref, &r, total), "random 1:27 axis %d with a rejected draw: %s x%d differs from ref", axis,
                      sdgp_isa_name(cfg.isa), threads);
                drop(&r);
            }
        drop(&ref);
        free(x);
    }
}

/* sdgp_prune_kernel names what sdgp_prune runs: the shapes the vector kernels take and those they
 * hand to the reference, the portable paths, and an ISA this CPU lacks. */
TEST_CASE(kernel_names) {
    const struct {
        sdgp_prune_fn fn;
        int n, m, axis, block;
        int vector; /* 1: the ISA's kernels (on AVX2 and AVX-512), 0: "ref" there */
    } cases[] = {{SDGP_PRUNE_MAGNITUDE, 2, 4, 0, 1, 1}, {SDGP_PRUNE_RESCALED, 8, 16, 0, 1, 1}, {SDGP_PRUNE_MAGNITUDE, 3, 5, 1, 1, 1},
                 {SDGP_PRUNE_RANDOM, 1, 8, 1, 1, 1},    {SDGP_PRUNE_RANDOM, 1, 40, 0, 1, 0},  {SDGP_PRUNE_MVUE, 1, 2, 0, 1, 1},
                 {SDGP_PRUNE_MVUE, 1, 2, 1, 1, 0},      {SDGP_PRUNE_MVUE, 3, 4, 0, 1, 0},     {SDGP_PRUNE_MVUE, 4, 8, 1, 1, 1},
                 {SDGP_PRUNE_MVUE, 8, 48, 0, 1, 0},     {SDGP_PRUNE_MVUE_APPROX, 2, 4, 0, 1, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sdgp_prune_cfg cfg = sdgp_prune_cfg_make(cases[i].fn, cases[i].n, cases[i].m);
        cfg.axis = (sdgp_axis)cases[i].axis;
        for (int isa = 0; isa < SDGP_ISA_COUNT; isa++) {
            cfg.isa = (sdgp_isa)isa;
            const char *want = !sdgp_isa_supported((sdgp_isa)isa)  ? "?"
                             : isa == SDGP_ISA_REF || !cases[i].vector ? "ref"
                                                                       : sdgp_isa_name((sdgp_isa)isa);
            CHECK(!strcmp(sdgp_prune_kernel(&cfg), want), "%s %d:%d axis %d on %s: kernel %s, want %s", sdgp_prune_fn_name(cfg.fn), cfg.n,
                  cfg.m, cfg.axis, sdgp_isa_name(cfg.isa), sdgp_prune_kernel(&cfg), want);
        }
    }
    sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 4, 4);
    CHECK(!strcmp(sdgp_prune_kernel(&cfg), "copy"), "4:4: %s", sdgp_prune_kernel(&cfg));
    cfg = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 2, 4);
    cfg.mask_block = 4;
    CHECK(!strcmp(sdgp_prune_kernel(&cfg), "block"), "mask_block 4: %s", sdgp_prune_kernel(&cfg));
    cfg.axis = SDGP_AXIS_ROW;
    CHECK(!strcmp(sdgp_prune_kernel(&cfg), "rowblock"), "mask_block 4 along rows: %s", sdgp_prune_kernel(&cfg));
}

/* Non-finite input: every path gives the same status (and, for magnitude/random, the same bits). */
TEST_CASE(non_finite_every_path) {
    for (int64_t C = 40; C <= 48; C += 8) { /* 48: the row axis's batches of 16 channels */
        const int64_t B = 2, P = 8;
        size_t total = (size_t)(B * P * C);
        float *x = test_xmalloc(total * 4);
        test_fill_prune_input(x, total, 5);
        x[77] = NAN;
        x[300] = INFINITY;
        x[301] = -INFINITY;
        static const int nm[][2] = {{2, 4}, {1, 2}, {4, 8}};
        for (int fn = SDGP_PRUNE_RANDOM; fn < SDGP_PRUNE_COUNT; fn++)
            for (int t = 0; t < 3; t++)
            for (int axis = 0; axis < 2; axis++) {
                if (fn == SDGP_PRUNE_MVUE_APPROX && t) continue; /* 2:4 only */
                sdgp_prune_cfg cfg = sdgp_prune_cfg_make((sdgp_prune_fn)fn, nm[t][0], nm[t][1]);
                cfg.axis = (sdgp_axis)axis;
                cfg.isa = SDGP_ISA_REF;
                result ref;
                run(&ref, &cfg, x, B, P, C);
                int strict = fn == SDGP_PRUNE_MVUE || fn == SDGP_PRUNE_MVUE_APPROX || fn == SDGP_PRUNE_RESCALED;
                CHECK(ref.st == (strict ? SDGP_ERR_NUMERIC : SDGP_OK), "%s: status %d", sdgp_prune_fn_name(cfg.fn), ref.st);
                FOR_EACH_VECTOR_ISA(isa) {
                    cfg.isa = isa;
                    cfg.threads = 2;
                    result r;
                    run(&r, &cfg, x, B, P, C);
                    CHECK(r.st == ref.st && (strict || same(&ref, &r, total)), "%s %d:%d axis %d on %s: status %d vs %d", sdgp_prune_fn_name(cfg.fn),
                          cfg.n, cfg.m, axis, sdgp_isa_name(cfg.isa), r.st, ref.st);
                    drop(&r);
                }
                drop(&ref);
            }
        free(x);
    }
}

int main(void) {
    RUN(paths_and_threads_bitwise);
    RUN(large_tensor_bitwise);
    RUN(sparse_ties_bitwise);
    RUN(random_rejected_draw);
    RUN(kernel_names);
    RUN(non_finite_every_path);
    return test_finish();
}
