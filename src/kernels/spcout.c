/* The sparse-weight forward for N:M masks along output channels (--weight-groups cout): plan,
 * packing, the transposes in and out, tiles and threading (micro-kernels: spcout_<isa>.c; contract:
 * spcout_internal.h; design and measurements: README.md, "The cout form").
 *
 * At each (input channel, tap), n of every m consecutive output channels keep their weight. Vectorised
 * over images, one loaded input vector then feeds the n kept output channels of a group: the entries
 * of a group are sorted by which n rows they feed, and each subset's loop keeps those rows'
 * accumulators in registers. */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/align.h"
#include "core/cache.h"
#include "core/transpose.h"
#include "kernels/spcout_internal.h"
#include "kernels/spfwd_internal.h"

/* Tiles of 3 columns in ymm (AVX2: 2 image vectors x K x 3 chains); AVX-512 keeps both image
 * vectors in one zmm, so it takes more columns for as many chains (spcout_avx512.c): 8 at n = 2
 * (16 chains; 8 columns measured 1.04-1.08x faster than 6 and 4 over ResNet-9 w1), 6 at n = 1
 * (two subsets interleaved: 12 chains; 8 columns were slower, their input outgrows L1), 6 at n > 2
 * (as many as 4 rows' accumulators and the inputs leave registers for). spcout.md has the figures. */
static const spcout_kernel kernel_table[SDGP_ISA_COUNT] = {
    [SDGP_ISA_REF] = {.isa = SDGP_ISA_REF, .tile = spcout_tile_ref, .tw = {3, 3, 3, 3, 3}},
    [SDGP_ISA_AVX2] = {.isa = SDGP_ISA_AVX2, .tile = spcout_tile_avx2, .tw = {3, 3, 3, 3, 3}},
    [SDGP_ISA_AVX512] = {.isa = SDGP_ISA_AVX512, .tile = spcout_tile_avx512, .tw = {6, 6, 8, 6, 6}, .pair = 1},
};

/* Input channels per chunk: 32, 16 or 8, the most whose rows of one tile (kh rows of the columns
 * its SPCOUT_TW outputs read, 2 vectors of images) fit the L1d (core/cache.h). With 32 KiB (where
 * this was measured): 32 on 3x3 stride-1 layers (30 KB) and 1x1 ones, 16 on 3x3 stride-2 ones
 * (21 KB), 8 on 5x5 stride-2 ones (23 KB). Longer
 * chunks mean longer subset loops (at 2:4 a chunk of c channels and 9 taps gives each of the 6
 * subsets about 1.5 c entries): fewer loads and stores of their accumulators and fewer mispredicted
 * loop exits. 32 measured 1.06-1.18x faster than 16 on ResNet-9's 3x3 layers, 64 slower than 32
 * (bench/kernel_ab.c, README.md; 1x1 layers not measured: the model times every layer at start); on
 * the 5x5 stride-2 layer 16 was no faster than 8, and fewer than 8 makes the loops too short.
 * SPCOUT_TW columns whatever the ISA's tile width: the chunks set the sum order, so they must not
 * depend on the ISA (AVX-512's wider tiles read a few more columns per chunk). */
static int chunk_channels(const sdgp_conv_geom *g) {
    const int64_t cols = (int64_t)(SPCOUT_TW - 1) * g->stride + g->kw;
    int chunk = SPCOUT_CHUNK;
    while (chunk > 8 && (int64_t)chunk * g->kh * cols * 2 * SPCOUT_VL * (int64_t)sizeof(float) > sdgp_caches()->l1d) chunk /= 2;
    return chunk;
}

/* Floats per channel plane of Xt (one pair of image vectors): the padded image, then an odd number
 * of cache lines between planes. A plane of a 4 KB multiple (14x14 with padding 1: 16 x 16 lines)
 * puts a tile's input rows of all the chunk's channels in the same L1 sets, more than its 8 ways
 * (ResNet-9 w0.25's 14x14 layers: 0-7 % faster in interleaved runs, when each vector of images had
 * planes of its own). Rows padded and planes shifted to spread a tile's lines over the sets even
 * more (chosen per layer by counting them) measured the same as this, 0.96-1.02x over seven layers
 * (README.md). */
static int64_t xt_plane(const sdgp_conv_geom *g) {
    const int64_t plane = (int64_t)(g->H + 2 * g->pad) * (g->W + 2 * g->pad) * SPCOUT_XCOL;
    return plane % 32 ? plane : plane + 16; /* an even number of 64-byte lines: one more */
}

/* The set bits of a mask of m <= 8 rows. __builtin_popcount is a call into libgcc on x86-64 without
 * POPCNT (the library's baseline), per (input channel, tap) of the packing. */
static inline int popcount8(unsigned v) {
    v = v - (v >> 1 & 0x55u);
    v = (v & 0x33u) + (v >> 2 & 0x33u);
    return (int)((v + (v >> 4)) & 0x0fu);
}

int sdgp_sparse_fwd_cout_supports(const sdgp_conv_geom *g, int n, int m) {
    if (!g || g->groups > 1 || g->stride < 1 || g->stride > 2 || n < 1 || n >= m || n > SPCOUT_MAX_N || m > SPCOUT_MAX_M || g->Cout % m)
        return 0;
    if (g->kh * g->kw > SPFWD_MAX_TAPS) return 0;
    /* entry offsets are int32 floats into Xt's channels of one vector of images */
    return xt_plane(g) * g->Cin < INT32_MAX;
}

void spcout_free(spcout *c) {
    if (!c) return;
    free(c->own);
    free(c->ent);
    free(c->run);
    free(c->scratch);
    free(c);
}

size_t sdgp_sparse_fwd_workspace_bytes(const sdgp_sparse_fwd *p) { return p && p->cout ? p->cout->ws_bytes : 0; }

sdgp_status sdgp_sparse_fwd_set_workspace(sdgp_sparse_fwd *p, void *ws, size_t bytes, sdgp_error *err) {
    if (!p) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse-weight forward: NULL plan");
    if (ws && (bytes < sdgp_sparse_fwd_workspace_bytes(p) || (uintptr_t)ws % 64))
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse-weight forward: workspace of %zu bytes at %p: needs %zu, 64-byte aligned",
                         bytes, ws, sdgp_sparse_fwd_workspace_bytes(p));
    spcout *c = p->cout;
    if (!c) return SDGP_OK;
    free(c->own);
    c->own = NULL;
    c->Xt = ws; /* NULL: the plan's own, made at the next run */
    c->Ytile = ws ? (float *)((char *)ws + c->xt_bytes) : NULL;
    return SDGP_OK;
}

sdgp_status sdgp_sparse_fwd_create_cout(sdgp_sparse_fwd **out, const sdgp_conv_geom *g, int n, int m, sdgp_isa isa, int threads,
                                        sdgp_error *err) {
    const char *who = "sparse-weight forward (cout)";
    if (!out) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: NULL output", who);
    *out = NULL;
    sdgp_status st = sparse_check_geometry(who, g, n, m, err);
    if (st != SDGP_OK) return st;
    if (threads < 0) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: threads=%d < 0", who, threads);
    if (!sdgp_sparse_fwd_cout_supports(g, n, m))
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED,
                         "%s: needs stride 1 or 2, no groups, n <= %d, m <= %d dividing Cout, at most %d taps (got %d:%d, Cout=%d, "
                         "stride %d, groups %d, %dx%d)",
                         who, SPCOUT_MAX_N, SPCOUT_MAX_M, SPFWD_MAX_TAPS, n, m, g->Cout, g->stride, g->groups, g->kh, g->kw);
    sdgp_isa resolved;
    if ((st = sdgp_isa_resolve(isa, &resolved, err)) != SDGP_OK) return st;

    sdgp_sparse_fwd *p = calloc(1, sizeof *p);
    spcout *c = calloc(1, sizeof *c);
    if (!p || !c) {
        free(p), free(c);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory", who);
    }
    p->g = *g;
    p->n = n;
    p->m = m;
    p->threads = threads ? threads : omp_get_max_threads();
    p->k.isa = resolved; /* the kernel that runs (and the transposes') */
    p->cout = c;
    c->k = kernel_table[resolved];
    c->tw = c->k.tw[n];
    c->n = n;
    c->m = m;
    c->es = 1 + n;
    c->groups = g->Cout / m;
    c->chunk = chunk_channels(g);
    c->chunks = (g->Cin + c->chunk - 1) / c->chunk;
    c->nbv = (g->B + 15) / 16 * 2;
    c->Hp = g->H + 2 * g->pad;
    c->Wp = g->W + 2 * g->pad;
    c->ldrow = (int64_t)c->Wp * SPCOUT_XCOL;
    c->plane_x = xt_plane(g);
    c->ytile = (int64_t)2 * g->Cout * c->tw * SPCOUT_VL;
    c->ldr = (int64_t)c->tw * (c->k.pair ? 2 : 1) * SPCOUT_VL; /* [Cout][tw][2][8] or [2][Cout][tw][8] */
    c->yc = c->k.pair ? 2 * SPCOUT_VL : SPCOUT_VL;
    c->yb = c->k.pair ? SPCOUT_VL : (int64_t)g->Cout * c->ldr;
    for (int t = 0; t < g->kh * g->kw; t++) c->tap_off[t] = (int32_t)((int64_t)(t / g->kw) * c->ldrow + t % g->kw * SPCOUT_XCOL);
    memset(c->sub_index, -1, sizeof c->sub_index);
    for (int bits = 0; bits < 1 << m; bits++)
        if (popcount8((unsigned)bits) == n) c->sub_bits[c->nsub] = (uint8_t)bits, c->sub_index[bits] = (int16_t)c->nsub++;
    const size_t taps = (size_t)g->kh * g->kw;
    c->xt_bytes = sdgp_align64((size_t)c->nbv / 2 * g->Cin * c->plane_x * sizeof(float));
    c->ws_bytes = c->xt_bytes + (size_t)p->threads * c->ytile * sizeof(float); /* ytile: 64-byte multiple */
    c->ent = malloc((size_t)g->Cout / m * g->Cin * taps * c->es * sizeof(float));
    c->run = malloc((size_t)c->groups * c->chunks * (c->nsub + 1) * sizeof(int32_t));
    c->scratch = malloc((size_t)p->threads * c->chunk * taps);
    if (!c->ent || !c->run || !c->scratch) {
        sdgp_sparse_fwd_destroy(p);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory for the packed weights", who);
    }
    *out = p;
    return SDGP_OK;
}

/* Group gr's entries of one chunk, sorted by subset; 0, or 1 + the first (input channel * taps +
 * tap) whose group keeps more than n output channels. */
static int64_t pack_chunk(const sdgp_sparse_fwd *p, const float *w, int gr, int ch, uint8_t *sub) {
    const sdgp_conv_geom *g = &p->g;
    const spcout *c = p->cout;
    const int taps = g->kh * g->kw, ci0 = ch * c->chunk, nci = g->Cin - ci0 < c->chunk ? g->Cin - ci0 : c->chunk;
    const int64_t row = (int64_t)g->Cin * taps; /* floats between output channels in OIHW */
    const float *wg = w + (int64_t)gr * c->m * row;
    int32_t *run = c->run + ((size_t)gr * c->chunks + ch) * (c->nsub + 1);
    float *ent = c->ent + ((int64_t)gr * g->Cin + ci0) * taps * c->es;
    int count[128] = {0};
    for (int j = 0; j < nci * taps; j++) {
        const int64_t at = (int64_t)ci0 * taps + j;
        /* no branch per weight: the zeros fall at random, and mispredictions were most of the packing's time */
        int bits = 0;
        for (int i = 0; i < c->m; i++) bits |= (wg[i * row + at] != 0.0f) << i;
        int nnz = popcount8((unsigned)bits);
        if (nnz > c->n) return 1 + at;
        /* fewer than n: the lowest zero rows fill the subset (their weights are 0) */
        for (int i = 0; nnz < c->n; i++)
            if (!(bits >> i & 1)) bits |= 1 << i, nnz++;
        count[sub[j] = (uint8_t)c->sub_index[bits]]++;
    }
    run[0] = 0;
    for (int s = 0; s < c->nsub; s++) run[s + 1] = run[s] + count[s], count[s] = run[s];
    for (int ci = ci0, j = 0; ci < ci0 + nci; ci++)
        for (int t = 0; t < taps; t++, j++) {
            const int s = sub[j];
            float *e = ent + (int64_t)count[s]++ * c->es;
            const int32_t off = (int32_t)(ci * c->plane_x + c->tap_off[t]);
            memcpy(e, &off, sizeof off);
            const float *wj = wg + (int64_t)ci0 * taps + j;
            for (unsigned b = c->sub_bits[s], r = 0; b; b &= b - 1) e[1 + r++] = wj[__builtin_ctz(b) * row]; /* n rows */
        }
    return 0;
}

sdgp_status spcout_pack(sdgp_sparse_fwd *p, const float *w, sdgp_error *err) {
    const spcout *c = p->cout;
    const int taps = p->g.kh * p->g.kw;
    int64_t bad = INT64_MAX; /* the first bad (group, channel, tap): the same message for any thread count */
#pragma omp parallel for schedule(static) num_threads(p->threads) reduction(min : bad)
    for (int gr = 0; gr < c->groups; gr++) {
        uint8_t *sub = c->scratch + (size_t)omp_get_thread_num() * c->chunk * taps;
        for (int ch = 0; ch < c->chunks; ch++) {
            const int64_t r = pack_chunk(p, w, gr, ch, sub);
            if (r && (int64_t)gr * p->g.Cin * taps + r - 1 < bad) bad = (int64_t)gr * p->g.Cin * taps + r - 1;
            if (r) break;
        }
    }
    p->packed = bad == INT64_MAX;
    if (p->packed) return SDGP_OK;
    const int gr = (int)(bad / ((int64_t)p->g.Cin * taps)), at = (int)(bad % ((int64_t)p->g.Cin * taps));
    return sdgp_fail(err, SDGP_ERR_INVALID,
                     "sparse-weight forward (cout) pack: output channels %d-%d keep more than %d weights at input channel %d, "
                     "tap %d (the weights are not %d:%d along output channels)",
                     gr * c->m, gr * c->m + c->m - 1, c->n, at / taps, at % taps, c->n, c->m);
}

/* Xt's zeros, each run (the workspace may be shared): the padding of every channel, and whole
 * channels of a pair of vectors that is not full of images (its transposes write only the images < B). */
static void zero_padding(const sdgp_sparse_fwd *p) {
    const sdgp_conv_geom *g = &p->g;
    const spcout *c = p->cout;
    const size_t row = (size_t)c->ldrow * sizeof(float), side = (size_t)g->pad * SPCOUT_XCOL * sizeof(float);
#pragma omp parallel for collapse(2) schedule(static) num_threads(p->threads)
    for (int bp = 0; bp < c->nbv / 2; bp++)
        for (int ci = 0; ci < g->Cin; ci++) {
            float *plane = c->Xt + ((int64_t)bp * g->Cin + ci) * c->plane_x;
            if (g->B - bp * 2 * SPCOUT_VL < 2 * SPCOUT_VL) {
                memset(plane, 0, (size_t)c->plane_x * sizeof(float));
                continue;
            }
            memset(plane, 0, (size_t)g->pad * row);
            memset(plane + (int64_t)(g->H + g->pad) * c->ldrow, 0, (size_t)(c->Hp - g->H - g->pad) * row);
            for (int h = g->pad; side && h < g->H + g->pad; h++) {
                float *r = plane + (int64_t)h * c->ldrow;
                memset(r, 0, side);
                memset(r + (int64_t)(g->W + g->pad) * SPCOUT_XCOL, 0, (size_t)(c->Wp - g->W - g->pad) * SPCOUT_XCOL * sizeof(float));
            }
        }
}

/* X (NHWC) into Xt: one 8 x C block transpose per (vector of images, pixel). */
static void transpose_in(const sdgp_sparse_fwd *p, const float *x, transpose_fn tr) {
    const sdgp_conv_geom *g = &p->g;
    const spcout *c = p->cout;
    zero_padding(p);
#pragma omp parallel for collapse(2) schedule(static) num_threads(p->threads)
    for (int bv = 0; bv < c->nbv; bv++)
        for (int h = 0; h < g->H; h++) {
            const int b0 = bv * SPCOUT_VL, nb = g->B - b0 < SPCOUT_VL ? g->B - b0 : SPCOUT_VL;
            for (int w = 0; nb > 0 && w < g->W; w++)
                tr(c->Xt + (int64_t)(bv / 2) * g->Cin * c->plane_x + bv % 2 * SPCOUT_VL + (int64_t)(h + g->pad) * c->ldrow +
                       (int64_t)(w + g->pad) * SPCOUT_XCOL,
                   c->plane_x, x + (((int64_t)b0 * g->H + h) * g->W + w) * g->Cin, (int64_t)g->H * g->W * g->Cin, nb, g->Cin);
        }
}

/* One tile: output row h, columns w0 .. w0+J-1, image vectors bv .. bv+1, every output channel:
 * chunks outside, so a chunk's input rows stay in L1 across the groups. Output (h, w) reads the
 * input from (h, w) * stride on. The tile accumulates in the thread's buffer yt (Ytile's layout)
 * and goes to y (NHWC) from there, while it is in L1 or L2. */
static void run_tile(const sdgp_sparse_fwd *p, float *y, float *yt, int bv, int h, int w0, int J, transpose_fn tr) {
    const sdgp_conv_geom *g = &p->g;
    const spcout *c = p->cout;
    const int taps = g->kh * g->kw;
    const int64_t pair = (int64_t)g->Cin * c->plane_x, ldr = c->ldr, yb = c->yb;
    const int S = g->stride;
    spcout_tile t = {.x = c->Xt + bv / 2 * pair + (int64_t)h * S * c->ldrow + (int64_t)w0 * S * SPCOUT_XCOL,
                     .sub_bits = c->sub_bits,
                     .nsub = c->nsub, .ldr = ldr, .yc = c->yc, .yb = yb, .m = c->m, .K = c->n, .J = J, .S = S};
    for (int ch = 0; ch < c->chunks; ch++)
        for (int gr = 0; gr < c->groups; gr++) {
            t.y = yt + (int64_t)gr * c->m * ldr;
            t.run = c->run + ((size_t)gr * c->chunks + ch) * (c->nsub + 1);
            t.e = c->ent + ((int64_t)gr * g->Cin + (int64_t)ch * c->chunk) * taps * c->es;
            t.first = ch == 0;
            c->k.tile(&t);
        }
    /* per pixel one block transpose, Cout x the images: both vectors at once where they sit side by
     * side (the pair layout: a 16-column block for AVX-512's transpose), else one per vector */
    const int per = c->k.pair ? 2 : 1;
    for (int v = 0; v < 2; v += per) {
        const int b0 = (bv + v) * SPCOUT_VL, nb = g->B - b0 < per * SPCOUT_VL ? g->B - b0 : per * SPCOUT_VL;
        for (int j = 0; nb > 0 && j < J; j++)
            tr(y + (((int64_t)b0 * g->Ho + h) * g->Wo + w0 + j) * g->Cout, (int64_t)g->Ho * g->Wo * g->Cout, yt + v * yb + j * c->yc,
               ldr, g->Cout, nb);
    }
}

sdgp_status spcout_run(const sdgp_sparse_fwd *p, float *y, const float *x, sdgp_error *err) {
    const sdgp_conv_geom *g = &p->g;
    spcout *c = p->cout;
    if (!c->Xt) {
        if (!(c->own = sdgp_alloc64(c->ws_bytes)))
            return sdgp_fail(err, SDGP_ERR_NOMEM, "sparse-weight forward (cout): out of memory for its workspace (%zu MB)",
                             c->ws_bytes >> 20);
        c->Xt = c->own;
        c->Ytile = (float *)((char *)c->own + c->xt_bytes);
    }
    const transpose_fn tr = transpose_for(p->k.isa);
    transpose_in(p, x, tr);
    /* ntw tiles per row, as even as they go (7 columns in tiles of 3: 3 2 2, not 3 3 1): a tile of one
     * column has K * 2 ymm accumulator chains, 4 at 2:4, too few to cover the FMA latency (two FMAs a
     * cycle, four cycles each, want 8). The bits do not depend on the tiles (one chain per output
     * element). */
    const int ntw = (g->Wo + c->tw - 1) / c->tw, base = g->Wo / ntw, extra = g->Wo % ntw, npairs = c->nbv / 2;
    /* units: (pair of image vectors, output row); each output element is one unit's, in one order */
#pragma omp parallel for collapse(2) schedule(static) num_threads(p->threads)
    for (int bp = 0; bp < npairs; bp++)
        for (int h = 0; h < g->Ho; h++) {
            float *yt = c->Ytile + (int64_t)omp_get_thread_num() * c->ytile;
            for (int t = 0; t < ntw; t++) {
                const int w0 = t * base + (t < extra ? t : extra), J = base + (t < extra);
                run_tile(p, y, yt, 2 * bp, h, w0, J, tr);
            }
        }
    return SDGP_OK;
}
