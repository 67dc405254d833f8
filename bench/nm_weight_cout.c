/* The cout form's sparse-weight forward (sdgp_sparse_fwd_create_cout, --weight-groups cout) against
 * oneDNN's direct forward, per layer of ResNet-9 (issue 16), with two prototypes in the same
 * loop structure kept for the record:
 *   dense    every weight, 4 output channels x 3 columns x 1 vector of 8 images per tile (how the
 *            structure compares with oneDNN's direct kernel);
 *   cout2:4  the library's kernel (pack + run, its transposes of X and Y included);
 *   tap2:4   the accurate per-(output channel, tap) form (--weight-groups tap) in the same structure:
 *            a group of 4 output channels keeps each (input channel, tap) in some subset of the 4,
 *            so the entries are sorted by subset (15 loops of 1-4 rows). Measured slower than dense
 *            (docs/bench/hosts/amd-zen3-f25m1/nm-weights/cout-zen3.txt): subsets of one row are load-bound and the 15
 *            short loops per tile cost their accumulators' loads and stores. Not built.
 * The prototypes transpose X to [image vector][Cin][H+2p][W+2p][8] and Y back, as the library does.
 * Outputs are checked against oneDNN's direct forward on the same weights. Ratio = oneDNN direct
 * (dense weights) / (run + weight pack). Times: best of interleaved repetitions.
 * Build and run (not part of `all`):
 *   cmake --build build --target sdgp_nm_weight_cout && build/sdgp_nm_weight_cout [models] [reps] [threads] [batch]
 * The prototypes take stride-1 layers only: a stride-2 layer has the library's column alone, and two
 * totals follow, over the stride-1 layers (every column) and over all (the library's). AVX2 + FMA. */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "core/clock.h"
#include "core/transpose.h"
#include "sdgp/conv.h"
#include "sdgp/nn.h"
#include "sdgp/sparse.h"

#define TW 3     /* output columns per micro-tile */
#define CHUNK 16 /* input channels per chunk */

typedef struct {
    int32_t off; /* of the input vector in Xt, floats from the tile's base */
    float w[4];
} ent4;

typedef struct {
    sdgp_conv_geom g;
    int B8, nbv, Hp, Wp, groups, chunks;
    size_t plane_x, plane_y; /* floats per channel of Xt, Yt, for one vector of 8 images */
    float *Xt, *Yt;
    ent4 *e4;   /* [group][chunk][...] */
    ent4 *es;   /* tap form: [group][chunk][subset][...], the weights of the subset's rows in order */
    int *sstart; /* [group][chunk][16 + 1] into es, by subset bits 0..15 (0: none, never stored) */
} plan;

static int chunk_len(const plan *p, int c) { return c + 1 < p->chunks ? CHUNK : p->g.Cin - CHUNK * c; }

static void plan_init(plan *p, const sdgp_conv_geom *g) {
    memset(p, 0, sizeof *p);
    p->g = *g;
    p->B8 = (g->B + 15) / 16 * 16; /* subset tiles take 2 vectors of images */
    p->nbv = p->B8 / 8;
    p->Hp = g->H + 2 * g->pad;
    p->Wp = g->W + 2 * g->pad;
    p->groups = g->Cout / 4;
    p->chunks = (g->Cin + CHUNK - 1) / CHUNK;
    p->plane_x = (size_t)p->Hp * p->Wp * 8;
    p->plane_y = (size_t)g->Ho * g->Wo * 8;
    p->Xt = aligned_alloc(64, (p->plane_x * g->Cin * p->nbv * 4 + 63) / 64 * 64);
    p->Yt = aligned_alloc(64, (p->plane_y * g->Cout * p->nbv * 4 + 63) / 64 * 64);
    memset(p->Xt, 0, p->plane_x * g->Cin * p->nbv * 4); /* the padding (and images past B) stays zero */
    size_t per_group = (size_t)g->Cin * g->kh * g->kw;
    p->e4 = bench_xmalloc(per_group * p->groups * sizeof(ent4));
    p->es = bench_xmalloc(per_group * p->groups * sizeof(ent4));
    p->sstart = bench_xmalloc((size_t)p->groups * p->chunks * 17 * sizeof(int));
}

static void plan_free(plan *p) { free(p->Xt), free(p->Yt), free(p->e4), free(p->es), free(p->sstart); }

static int32_t entry_off(const plan *p, int ci, int kh, int kw) {
    return (int32_t)((size_t)ci * p->plane_x + ((size_t)kh * p->Wp + kw) * 8);
}

/* The dense entries of OIHW weights w. */
static void pack_dense(plan *p, const float *w) {
    const sdgp_conv_geom *g = &p->g;
    const int taps = g->kh * g->kw;
    ent4 *e = p->e4;
    for (int gr = 0; gr < p->groups; gr++)
        for (int ci = 0; ci < g->Cin; ci++)
            for (int t = 0; t < taps; t++, e++) {
                e->off = entry_off(p, ci, t / g->kw, t % g->kw);
                for (int i = 0; i < 4; i++) e->w[i] = w[((size_t)(4 * gr + i) * g->Cin + ci) * taps + t];
            }
}

/* The entries of tap-form weights w (n of every m input channels kept per (output channel, tap)):
 * per group of 4 output channels, an (input channel, tap) is kept by some subset of the 4; entries
 * sorted by subset within each (group, chunk), the all-zero subset dropped. */
static void pack_tap(plan *p, const float *w) {
    const sdgp_conv_geom *g = &p->g;
    const int taps = g->kh * g->kw;
#pragma omp parallel for schedule(static)
    for (int gr = 0; gr < p->groups; gr++) {
        ent4 *e = p->es + (size_t)gr * g->Cin * taps;
        for (int c = 0; c < p->chunks; c++) {
            int *st = p->sstart + ((size_t)gr * p->chunks + c) * 17;
            const int ci0 = c * CHUNK, n = chunk_len(p, c) * taps;
            int8_t kind[CHUNK * 49];
            int at[16] = {0};
            for (int j = 0; j < n; j++) {
                const float *wj = w + ((size_t)4 * gr * g->Cin + ci0 + j / taps) * taps + j % taps;
                int bits = 0;
                for (int i = 0; i < 4; i++) bits |= (wj[(size_t)i * g->Cin * taps] != 0) << i;
                at[kind[j] = (int8_t)bits]++;
            }
            st[0] = st[1] = (int)(e - p->es);
            at[0] = 0;
            for (int k = 1; k < 16; k++) st[k + 1] = st[k] + at[k], at[k] = st[k];
            for (int j = 0; j < n; j++) {
                const int bits = kind[j], ci = ci0 + j / taps, t = j % taps;
                if (!bits) continue;
                const float *wj = w + ((size_t)4 * gr * g->Cin + ci) * taps + t;
                ent4 *q = p->es + at[bits]++;
                q->off = entry_off(p, ci, t / g->kw, t % g->kw);
                for (int i = 0, r = 0; i < 4; i++)
                    if (bits >> i & 1) q->w[r++] = wj[(size_t)i * g->Cin * taps];
            }
            e += n;
        }
    }
}

static void pack_x(const plan *p, const float *x, transpose_fn tr) {
    const sdgp_conv_geom *g = &p->g;
#pragma omp parallel for collapse(2) schedule(static)
    for (int bv = 0; bv < p->nbv; bv++)
        for (int h = 0; h < g->H; h++)
            for (int w = 0; w < g->W; w++) {
                const int b0 = 8 * bv, rows = g->B - b0 < 8 ? g->B - b0 : 8;
                if (rows > 0)
                    tr(p->Xt + (size_t)bv * g->Cin * p->plane_x + ((size_t)(h + g->pad) * p->Wp + w + g->pad) * 8, (int64_t)p->plane_x,
                       x + (((size_t)b0 * g->H + h) * g->W + w) * g->Cin, (int64_t)g->H * g->W * g->Cin, rows, g->Cin);
            }
}

static void unpack_y(const plan *p, float *y, transpose_fn tr) {
    const sdgp_conv_geom *g = &p->g;
#pragma omp parallel for collapse(2) schedule(static)
    for (int bv = 0; bv < p->nbv; bv++)
        for (int h = 0; h < g->Ho; h++)
            for (int w = 0; w < g->Wo; w++) {
                const int b0 = 8 * bv, cols = g->B - b0 < 8 ? g->B - b0 : 8;
                if (cols > 0)
                    tr(y + (((size_t)b0 * g->Ho + h) * g->Wo + w) * g->Cout, (int64_t)g->Ho * g->Wo * g->Cout,
                       p->Yt + (size_t)bv * g->Cout * p->plane_y + ((size_t)h * g->Wo + w) * 8, (int64_t)p->plane_y, g->Cout, cols);
            }
}

#define FMA _mm256_fmadd_ps
/* x = a load the compiler keeps in a register: it would otherwise fold the load into each of the
 * FMAs that use x (one load per FMA: load-bound) */
#define LOAD_REG(x, ptr)                                                                                               \
    do {                                                                                                               \
        x = _mm256_load_ps(ptr);                                                                                       \
        __asm__("" : "+x"(x));                                                                                         \
    } while (0)
/* acc row r (output channel r of the group) += wv * the J loaded vectors */
#define ACC(r, wv)                                                                                                     \
    do {                                                                                                               \
        a##r##0 = FMA(wv, x0, a##r##0);                                                                                \
        if (J > 1) a##r##1 = FMA(wv, x1, a##r##1);                                                                     \
        if (J > 2) a##r##2 = FMA(wv, x2, a##r##2);                                                                     \
    } while (0)
#define LOADX(ptr)                                                                                                     \
    const float *xp = (ptr);                                                                                           \
    __m256 x0, x1 = _mm256_setzero_ps(), x2 = x1;                                                                      \
    LOAD_REG(x0, xp);                                                                                                  \
    if (J > 1) LOAD_REG(x1, xp + ldj);                                                                                 \
    if (J > 2) LOAD_REG(x2, xp + 2 * ldj)
#define ACC_DECL(r)                                                                                                    \
    __m256 a##r##0 = first ? _mm256_setzero_ps() : _mm256_load_ps(y + r * ldc),                                         \
           a##r##1 = J > 1 && !first ? _mm256_load_ps(y + r * ldc + ldj) : _mm256_setzero_ps(),                         \
           a##r##2 = J > 2 && !first ? _mm256_load_ps(y + r * ldc + 2 * ldj) : _mm256_setzero_ps()
#define ACC_STORE(r)                                                                                                   \
    do {                                                                                                               \
        _mm256_store_ps(y + r * ldc, a##r##0);                                                                         \
        if (J > 1) _mm256_store_ps(y + r * ldc + ldj, a##r##1);                                                        \
        if (J > 2) _mm256_store_ps(y + r * ldc + 2 * ldj, a##r##2);                                                    \
    } while (0)

static inline __attribute__((always_inline)) void tile4(const int J, const float *base, const ent4 *e, int count, float *y,
                                                        size_t ldc, int ldj, int first) {
    ACC_DECL(0);
    ACC_DECL(1);
    ACC_DECL(2);
    ACC_DECL(3);
    for (const ent4 *q = e, *end = e + count; q < end; q++) {
        LOADX(base + q->off);
        /* one broadcast at a time: 12 accumulators + 3 inputs + 1 weight = 16 registers */
        __m256 wv = _mm256_broadcast_ss(&q->w[0]);
        ACC(0, wv);
        wv = _mm256_broadcast_ss(&q->w[1]);
        ACC(1, wv);
        wv = _mm256_broadcast_ss(&q->w[2]);
        ACC(2, wv);
        wv = _mm256_broadcast_ss(&q->w[3]);
        ACC(3, wv);
    }
    ACC_STORE(0);
    ACC_STORE(1);
    ACC_STORE(2);
    ACC_STORE(3);
}

/* K rows (the subset's output channels, y pointers rows[]) x J columns x NB vectors of images (at
 * x + v * xb, y + v * yb8) over the entries [q, end): accumulators from y and back. */
static inline __attribute__((always_inline)) void subset_loop(const int K, const int J, const int NB, const float *base,
                                                              const ent4 *q, const ent4 *end, float *const *rows, int ldj,
                                                              size_t xb, size_t yb8) {
    __m256 acc[4][3][2];
#pragma GCC unroll 4
    for (int r = 0; r < K; r++)
#pragma GCC unroll 3
        for (int j = 0; j < J; j++)
#pragma GCC unroll 2
            for (int v = 0; v < NB; v++) acc[r][j][v] = _mm256_load_ps(rows[r] + j * ldj + v * yb8);
    for (; q < end; q++) {
        const float *xp = base + q->off;
        __m256 x[3][2];
#pragma GCC unroll 3
        for (int j = 0; j < J; j++)
#pragma GCC unroll 2
            for (int v = 0; v < NB; v++) LOAD_REG(x[j][v], xp + j * ldj + v * xb);
#pragma GCC unroll 4
        for (int r = 0; r < K; r++) {
            const __m256 wv = _mm256_broadcast_ss(&q->w[r]);
#pragma GCC unroll 3
            for (int j = 0; j < J; j++)
#pragma GCC unroll 2
                for (int v = 0; v < NB; v++) acc[r][j][v] = FMA(wv, x[j][v], acc[r][j][v]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < K; r++)
#pragma GCC unroll 3
        for (int j = 0; j < J; j++)
#pragma GCC unroll 2
            for (int v = 0; v < NB; v++) _mm256_store_ps(rows[r] + j * ldj + v * yb8, acc[r][j][v]);
}

/* Tap form: one group's tile (4 output channels x J columns x 2 vectors of images). Subsets of 1
 * or 2 rows run both image vectors at once (2J or 4J accumulators), of 3 or 4 one vector at a time
 * (3J or 4J), so every loop fits the 16 registers. */
static inline __attribute__((always_inline)) void tileS(const int J, const float *base, const ent4 *e, const int *st, float *y,
                                                        size_t ldc, int ldj, size_t xb, size_t yb8, int first) {
    if (first)
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < J; j++) {
                _mm256_store_ps(y + r * ldc + j * ldj, _mm256_setzero_ps());
                _mm256_store_ps(y + r * ldc + j * ldj + yb8, _mm256_setzero_ps());
            }
    for (int bits = 1; bits < 16; bits++) {
        if (st[bits] == st[bits + 1]) continue;
        float *rows[4];
        int k = 0;
        for (int i = 0; i < 4; i++)
            if (bits >> i & 1) rows[k++] = y + i * ldc;
        const ent4 *q = e + st[bits], *end = e + st[bits + 1];
        if (k == 1) subset_loop(1, J, 2, base, q, end, rows, ldj, xb, yb8);
        else if (k == 2) subset_loop(2, J, 2, base, q, end, rows, ldj, xb, yb8);
        else
            for (int v = 0; v < 2; v++) {
                float *rv[4] = {rows[0] + v * yb8, rows[1] + v * yb8, rows[2] + v * yb8, rows[3] + v * yb8};
                if (k == 3) subset_loop(3, J, 1, base + v * xb, q, end, rv, ldj, xb, yb8);
                else subset_loop(4, J, 1, base + v * xb, q, end, rv, ldj, xb, yb8);
            }
    }
}

static void run(const plan *p, int sparse) {
    const sdgp_conv_geom *g = &p->g;
    const int taps = g->kh * g->kw, ldj = 8, bstep = sparse ? 2 : 1, nbt = p->nbv / bstep;
    const size_t ldc = p->plane_y, xb = (size_t)g->Cin * p->plane_x, yb = (size_t)g->Cout * p->plane_y;
#pragma omp parallel for collapse(2) schedule(static)
    for (int bt = 0; bt < nbt; bt++)
        for (int h = 0; h < g->Ho; h++)
            for (int w0 = 0; w0 < g->Wo; w0 += TW) {
                const int J = g->Wo - w0 < TW ? g->Wo - w0 : TW, bv = bt * bstep;
                const float *base = p->Xt + bv * xb + ((size_t)h * p->Wp + w0) * 8;
                for (int c = 0; c < p->chunks; c++)
                    for (int gr = 0; gr < p->groups; gr++) {
                        float *y = p->Yt + bv * yb + (size_t)4 * gr * ldc + ((size_t)h * g->Wo + w0) * 8;
                        if (sparse) {
                            const int *st = p->sstart + ((size_t)gr * p->chunks + c) * 17;
                            if (J == 3) tileS(3, base, p->es, st, y, ldc, ldj, xb, yb, c == 0);
                            else if (J == 2) tileS(2, base, p->es, st, y, ldc, ldj, xb, yb, c == 0);
                            else tileS(1, base, p->es, st, y, ldc, ldj, xb, yb, c == 0);
                        } else {
                            const ent4 *e = p->e4 + ((size_t)gr * g->Cin + (size_t)c * CHUNK) * taps;
                            const int count = chunk_len(p, c) * taps;
                            if (J == 3) tile4(3, base, e, count, y, ldc, ldj, c == 0);
                            else if (J == 2) tile4(2, base, e, count, y, ldc, ldj, c == 0);
                            else tile4(1, base, e, count, y, ldc, ldj, c == 0);
                        }
                    }
            }
}

/* One prototype variant (v 0 dense, 2 tap) or the library's cout plan (v 1): weight pack, then the
 * product (transposes included); times into *tp, *tr. */
static void run_variant(int v, plan *p, sdgp_sparse_fwd *lib, const float *w, float *y, const float *x, transpose_fn tr,
                        double *tp, double *trun) {
    sdgp_error e;
    double t0 = sdgp_now_s();
    if (v == 1) BENCH_CHECK(sdgp_sparse_fwd_pack(lib, w, &e), "cout", "pack");
    else v ? pack_tap(p, w) : pack_dense(p, w);
    double t1 = sdgp_now_s();
    if (v == 1) BENCH_CHECK(sdgp_sparse_fwd_run(lib, y, x, &e), "cout", "run");
    else {
        pack_x(p, x, tr);
        run(p, v);
        unpack_y(p, y, tr);
    }
    double t2 = sdgp_now_s();
    *tp = fmin(*tp, t1 - t0);
    *trun = fmin(*trun, t2 - t1);
}

int main(int argc, char **argv) {
    bench_prog = "nm_weight_cout";
    if (!sdgp_isa_supported(SDGP_ISA_AVX2)) return fprintf(stderr, "nm_weight_cout: needs AVX2 + FMA\n"), 2;
    bench_layer layers[64];
    int reps, threads, nl = bench_layers_from_args(argc, argv, bench_prog, layers, 64, &reps, &threads);
    if (nl < 0) return 2;
    omp_set_num_threads(threads);
    const transpose_fn tr = transpose_for(SDGP_ISA_AVX2);
    static const char *const VNAME[3] = {"dense", "cout2:4", "tap2:4"};
    printf("# forward ms, best of %d, %d threads; run = the product with the transposes of X and Y, wpack = the weights' "
           "packing (once per step in training); ratio = oneDNN direct (dense weights) / (run + wpack);\n"
           "# dense and tap2:4 are prototypes (see the source), cout2:4 is sdgp_sparse_fwd_create_cout\n",
           reps, threads);
    printf("%-14s %8s", "layer", "oneDNN");
    for (int v = 0; v < 3; v++) printf(" | %8s %6s %6s", VNAME[v], "wpack", "ratio");
    printf("\n");
    double tot_dnn = 0, tot[3] = {0}, all_dnn = 0, all_cout = 0;
    for (int li = 0; li < nl; li++) {
        const bench_layer *l = &layers[li];
        sdgp_conv_geom g;
        sdgp_error e;
        BENCH_CHECK(sdgp_conv_geom_init(&g, l->B, l->H, l->W, l->Cin, l->Cout, l->k, l->k, l->stride, l->pad, &e), l->name,
                    "geometry");
        if (l->groups > 1 || g.Cout % 4 || l->k > 7 || !sdgp_sparse_fwd_cout_supports(&g, 2, 4)) {
            printf("%-14s skipped (stride %d, groups %d)\n", l->name, l->stride, l->groups);
            continue;
        }
        size_t nx = (size_t)g.B * g.H * g.W * g.Cin, ny = (size_t)g.B * g.Ho * g.Wo * g.Cout, nw = (size_t)g.Cout * g.Cin * g.kh * g.kw;
        float *x = bench_xmalloc(nx * 4), *w[3], *y = bench_xmalloc(ny * 4), *ref = bench_xmalloc(ny * 4);
        for (int v = 0; v < 3; v++) w[v] = bench_xmalloc(nw * 4);
        bench_fill(x, nx, 1 + li);
        bench_fill(w[0], nw, 100 + li);
        sdgp_weights_project(w[1], w[0], g.Cout, g.Cin, g.kh * g.kw, SDGP_WEIGHTS_SSTE, SDGP_WGROUP_COUT, 2, 4, 1.0f);
        sdgp_weights_project(w[2], w[0], g.Cout, g.Cin, g.kh * g.kw, SDGP_WEIGHTS_SSTE, SDGP_WGROUP_TAP, 2, 4, 1.0f);
        sdgp_conv *direct = NULL;
        sdgp_sparse_fwd *lib = NULL;
        const sdgp_conv_options od = {SDGP_CONV_DIRECT, 0};
        BENCH_CHECK(sdgp_conv_create_opts(&direct, &g, 0, threads, &od, &e), l->name, "oneDNN direct");
        BENCH_CHECK(sdgp_sparse_fwd_create_cout(&lib, &g, 2, 4, SDGP_ISA_AUTO, threads, &e), l->name, "cout plan");
        plan p;
        plan_init(&p, &g);
        double t_dnn = INFINITY, t_p[3], t_r[3];
        for (int v = 0; v < 3; v++) t_p[v] = t_r[v] = INFINITY;
        const int s1 = l->stride == 1; /* the prototypes' geometry */
        /* correctness: every variant against oneDNN on the same weights */
        for (int v = 0; v < 3; v++) {
            if (!s1 && v != 1) continue;
            run_variant(v, &p, lib, w[v], y, x, tr, &t_p[v], &t_r[v]);
            BENCH_CHECK(sdgp_conv_forward(direct, ref, x, w[v], NULL, &e), l->name, "oneDNN forward");
            double err = bench_rel_l2(y, ref, ny);
            if (err > 3e-5) fprintf(stderr, "nm_weight_cout: %s %s: relative L2 error %.3g against oneDNN\n", l->name, VNAME[v], err);
        }
        for (int v = 0; v < 3; v++) t_p[v] = t_r[v] = INFINITY;
        for (int r = 0; r < reps; r++) {
            double t0 = sdgp_now_s();
            sdgp_conv_forward(direct, y, x, w[0], NULL, &e);
            t_dnn = fmin(t_dnn, sdgp_now_s() - t0);
            for (int v = 0; v < 3; v++)
                if (s1 || v == 1) run_variant(v, &p, lib, w[v], y, x, tr, &t_p[v], &t_r[v]);
        }
        all_dnn += 1e3 * t_dnn * l->count;
        all_cout += 1e3 * (t_r[1] + t_p[1]) * l->count;
        if (s1) tot_dnn += 1e3 * t_dnn * l->count;
        printf("%-14s %8.3f", l->name, 1e3 * t_dnn);
        for (int v = 0; v < 3; v++) {
            if (!s1 && v != 1) {
                printf(" | %8s %6s %6s", "-", "-", "-");
                continue;
            }
            if (s1) tot[v] += 1e3 * (t_r[v] + t_p[v]) * l->count;
            printf(" | %8.3f %6.3f %5.2fx", 1e3 * t_r[v], 1e3 * t_p[v], t_dnn / (t_r[v] + t_p[v]));
        }
        printf("\n");
        fflush(stdout);
        plan_free(&p);
        sdgp_sparse_fwd_destroy(lib);
        sdgp_conv_destroy(direct);
        for (int v = 0; v < 3; v++) free(w[v]);
        free(x), free(y), free(ref);
    }
    printf("%-14s %8.3f", "total stride 1", tot_dnn);
    for (int v = 0; v < 3; v++) printf(" | %8.3f %6s %5.2fx", tot[v], "", tot_dnn / tot[v]);
    printf("\n%-14s %8.3f | %8s %6s %6s | %8.3f %6s %5.2fx\n", "total", all_dnn, "-", "", "", all_cout, "", all_dnn / all_cout);
    return 0;
}
