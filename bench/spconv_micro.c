/* What bounds SDGP's backward-data micro-kernel (spconv_tile, src/kernels/spconv_<isa>.c) on this core, one
 * thread, against the FMA ceiling of the same ISA. Random 2:4 entries (two kept rows of every four, in
 * order, as sdgp_prune leaves them), 64 columns, rows of 64 floats.
 *   L1 rows:  one call over 256 pixels and one tap; the panel has `rows` rows and each pixel `ne` = rows / 2
 *             entries, so 128 rows (32 KiB) is the default working set, 256 rows (64 KiB) outgrows L1.
 *             The entries and the dD rows stream (every pixel has its own).
 *   layer:    the calls of one column block of a 16x16 layer with 256 output channels, as spconv.c makes
 *             them: 2 chunks of 128 channels x 9 taps, one call per (chunk, tap) over the image's pixels,
 *             each tap its own panel of a 590 KB weight block, dD rows 256 floats apart (Cin 256); the
 *             entries either per pixel (all 128 slots of a pixel together, a chunk's 64 of them 128 apart)
 *             or chunk-major (a slab of the pixels per chunk, 64 apart: what spconv.c packs).
 *   GFLOP/s   useful (kept) multiply-adds; / ceiling the fraction of the FMA ceiling.
 * Build and run (not part of `all`):
 *   cmake --build build --target sdgp_spconv_micro && build/sdgp_spconv_micro [avx2|avx512]
 * Measure quietly: any other busy process on the core lowers the numbers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "kernels/spconv_internal.h"
#include "sdgp/isa.h"

enum { LDP = 64, COLS = 64, PIXELS = 256 };
/* the layer case: taps, output channels, chunk, image side, and the side of its dO with a 1-pixel border */
enum { T = 9, COUT = 256, KC = 128, SIDE = 16, WPAD = SIDE + 2 };

static uint32_t lcg(uint32_t *s) { return *s = *s * 1664525u + 1013904223u; }

/* ne entries for each of npix pixels, es apart: two of every four panel rows from row0 on (2 ne rows), in order. */
static void fill_entries(spconv_entry *ent, int64_t npix, int64_t es, int ne, int row0, uint32_t seed) {
    for (int64_t p = 0; p < npix; p++)
        for (int g = 0; g < ne / 2; g++) {
            const int a = (int)(lcg(&seed) >> 16) % 4, b = (a + 1 + (int)(lcg(&seed) >> 16) % 3) % 4;
            const int lo = a < b ? a : b, hi = a < b ? b : a;
            ent[p * es + 2 * g] = spconv_entry_make(0.5f, (uint32_t)(row0 + 4 * g + lo) * LDP * 4);
            ent[p * es + 2 * g + 1] = spconv_entry_make(0.25f, (uint32_t)(row0 + 4 * g + hi) * LDP * 4);
        }
}

/* One column block of the 16x16 layer: 2 chunks x 9 taps, a call per (chunk, tap) over the image. Entries
 * per pixel (es = all slots of a pixel) or chunk-major (es = one chunk's slots, a slab per chunk). */
static void layer_block(spconv_tile_fn tile, const float *wp, float *dd, const spconv_entry *ent, int chunk_major) {
    const int64_t es = chunk_major ? KC / 2 : COUT / 2;
    for (int k = 0; k < COUT / KC; k++)
        for (int tap = 0; tap < T; tap++) {
            const spconv_entry *base = chunk_major ? ent + (int64_t)k * WPAD * WPAD * es : ent + k * (KC / 2);
            const int64_t tap_ent[1] = {(tap % 3 + (int64_t)(tap / 3) * WPAD) * es};
            const float *tap_panel[1] = {wp + (size_t)tap * COUT * LDP};
            const spconv_tile t = {.dd = dd, .dd_sx = 256, .dd_sy = (int64_t)SIDE * 256, .ent = base, .e_sx = es,
                                   .e_sy = WPAD * es, .ntaps = 1, .tap_ent = tap_ent, .tap_panel = tap_panel,
                                   .ne = KC / 2, .nx = SIDE, .ny = SIDE, .nz = 1, .ncols = COLS};
            tile(&t);
        }
}

int main(int argc, char **argv) {
    const int avx512 = argc > 1 && !strcmp(argv[1], "avx512");
    const sdgp_isa isa = avx512 ? SDGP_ISA_AVX512 : SDGP_ISA_AVX2;
    sdgp_isa got;
    sdgp_error e;
    if (sdgp_isa_resolve(isa, &got, &e) != SDGP_OK) return fprintf(stderr, "spconv_micro: %s\n", e.msg), 2;
    const spconv_tile_fn tile = avx512 ? spconv_tile_avx512 : spconv_tile_avx2;
    const double ceiling = spconv_fma_ceiling(isa, 1, 0.3);
    printf("# %s, one thread: FMA ceiling %.1f GFLOP/s; %d columns, 2:4 entries\n", sdgp_isa_name(isa), ceiling, COLS);

    float *wp = aligned_alloc(64, (size_t)T * COUT * LDP * sizeof(float));
    float *dd = aligned_alloc(64, (size_t)PIXELS * 256 * sizeof(float));
    spconv_entry *ent = malloc((size_t)WPAD * WPAD * (COUT / 2) * sizeof(spconv_entry));
    if (!wp || !dd || !ent) return fprintf(stderr, "spconv_micro: out of memory\n"), 1;
    for (int64_t i = 0; i < (int64_t)T * COUT * LDP; i++) wp[i] = 1e-3f * (float)(i % 7);
    memset(dd, 0, (size_t)PIXELS * 256 * sizeof(float));

    printf("%-28s %9s %9s\n", "case", "GFLOP/s", "/ceiling");
    static const int rows_cases[] = {64, 128, 256};
    for (size_t c = 0; c < sizeof rows_cases / sizeof *rows_cases; c++) {
        const int rows = rows_cases[c], ne = rows / 2;
        fill_entries(ent, PIXELS, ne, ne, 0, 7);
        const int64_t tap_ent[1] = {0};
        const float *tap_panel[1] = {wp};
        const spconv_tile t = {.dd = dd, .dd_sx = LDP, .ent = ent, .e_sx = ne, .ntaps = 1, .tap_ent = tap_ent,
                               .tap_panel = tap_panel, .ne = ne, .nx = PIXELS, .ny = 1, .nz = 1, .ncols = COLS};
        double best = 1e30;
        for (int round = 0; round < 7; round++) {
            const double t0 = sdgp_now_s();
            for (int it = 0; it < 40; it++) tile(&t);
            const double dt = sdgp_now_s() - t0;
            if (dt < best) best = dt;
        }
        const double gf = 40.0 * 2 * PIXELS * ne * COLS / best * 1e-9;
        char name[64];
        snprintf(name, sizeof name, "L1 rows %d (%d KiB), ne %d", rows, rows * LDP * 4 / 1024, ne);
        printf("%-28s %9.1f %8.2f\n", name, gf, gf / ceiling);
    }

    for (int chunk_major = 0; chunk_major < 2; chunk_major++) {
        if (chunk_major) /* slab k: the pixels' entries of chunk k, rows k*KC .. */
            for (int k = 0; k < COUT / KC; k++)
                fill_entries(ent + (int64_t)k * WPAD * WPAD * (KC / 2), (int64_t)WPAD * WPAD, KC / 2, KC / 2, k * KC, 11);
        else /* chunk k's entries are slots k*KC/2 .. of every pixel */
            fill_entries(ent, (int64_t)WPAD * WPAD, COUT / 2, COUT / 2, 0, 11);
        double best = 1e30;
        for (int round = 0; round < 7; round++) {
            const double t0 = sdgp_now_s();
            for (int it = 0; it < 4; it++) layer_block(tile, wp, dd, ent, chunk_major);
            const double dt = sdgp_now_s() - t0;
            if (dt < best) best = dt;
        }
        const double gf = 4.0 * 2 * SIDE * SIDE * (COUT / 2) * T * COLS / best * 1e-9;
        printf("%-28s %9.1f %8.2f\n", chunk_major ? "layer 16x16, chunk-major" : "layer 16x16, per pixel", gf, gf / ceiling);
    }
    free(wp), free(dd), free(ent);
    return 0;
}
