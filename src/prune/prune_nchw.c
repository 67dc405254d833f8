/* sdgp_prune with cfg->layout NCHW (include/sdgp/prune.h): x is B x C x P. Each thread transposes a
 * tile of one sample's positions into an NHWC buffer of its own, runs the ISA's row kernels on it
 * as a job over exactly those rows of the whole tensor (the compressed rows, Philox counters,
 * factors and keep masks of those rows), and transposes the dense result back. The decisions are
 * those of the NHWC path by construction: the same kernels see the same rows with the same
 * counters, so the result is bitwise what pruning the NHWC copy gives.
 * Tiles: about TILE_FLOATS for the per-row kernels (the tile and the dense result stay in L1);
 * whole lines for shared masks (a block never crosses a tile and its position in the line is its
 * position in the tile); whole samples for rescaled, whose sums over a sample come before any of
 * its rows is pruned.
 * Measured (bench/nchw_micro.c, ResNet-9 w=1 / ResNet-18 shapes, batch 32, compressed output only
 * as sdgp.torch calls it, one thread, Zen 5): NCHW is not the slower layout here. Rescaled 2:4 took
 * 8.5 ms per ResNet-9 step in NCHW against 18.5 in NHWC, 10.8 against 16.1 for ResNet-18: the
 * per-sample tile is summed and pruned while it is in L2, where the NHWC path reads x from memory
 * once for the sums and again for the rows. The gather's transpose runs at 12-16 GB/s (memcpy
 * 34-48), 1-3 % of a step's prune + sparse backward-data time. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "core/transpose.h"
#include "prune/prune_internal.h"

#define TILE_FLOATS 4096 /* 16 KiB */

/* Positions per tile: a multiple of 16 (whole blocks of the AVX-512 transpose), whole lines with
 * shared masks, at most P. */
static int64_t tile_positions(const prune_job *j) {
    int64_t len = TILE_FLOATS / j->C;
    len = len < 16 ? 16 : len / 16 * 16;
    if (j->block > 1) len = (len + j->line - 1) / j->line * j->line;
    return len < j->P ? len : j->P;
}

/* The job over positions [p0, p0 + len) of sample b, held as NHWC rows in tile (dense result in
 * otile): rows r0 = b*P + p0 .. of the whole tensor seen as a one-sample tensor of len positions.
 * Everything a kernel derives from a row number (counter r*(C/m) + g via group0, the sample's
 * factors, keep masks, compressed slots, position in a line) is offset to r0. */
static prune_job tile_job(const prune_job *j, int64_t b, int64_t p0, int64_t len, const float *tile, float *otile) {
    prune_job t = *j;
    const int64_t r0 = b * j->P + p0, slots = j->C / j->m * j->n;
    t.B = 1;
    t.P = t.rows = len;
    t.x = tile;
    t.out = j->out ? otile : NULL;
    if (j->vals) {
        t.vals = j->vals + r0 * slots;
        t.idx = j->idx + r0 * slots;
    }
    t.group0 = j->group0 + (uint64_t)r0 * (uint64_t)(j->C / j->m);
    if (j->scale) t.scale = j->scale + b * j->scale_bstride;
    if (j->keep) {
        t.keep = j->keep + (r0 - j->keep_r0) * ((j->C + 15) / 16);
        t.keep_r0 = 0;
    }
    return t;
}

static void gather(transpose_fn tr, float *tile, const prune_job *j, int64_t b, int64_t p0, int64_t len) {
    tr(tile, j->C, j->x + b * j->C * j->P + p0, j->P, j->C, len); /* tile[p][c] = x[b][c][p0 + p] */
}

static void scatter(transpose_fn tr, const prune_job *j, const prune_job *t, int64_t b, int64_t p0) {
    if (t->out) tr(j->out + b * j->C * j->P + p0, j->P, t->out, j->C, t->rows, j->C);
}

/* Per-thread tile buffers: x's tile and, with out, the dense result's. */
typedef struct {
    float *x, *out;
} tiles;

static int tiles_alloc(tiles *b, const prune_job *j, int64_t len) {
    b->x = malloc((size_t)(len * j->C) * sizeof(float));
    b->out = j->out ? malloc((size_t)(len * j->C) * sizeof(float)) : NULL;
    return b->x && (b->out || !j->out);
}

static void tiles_free(tiles *b) {
    free(b->x);
    free(b->out);
}

/* The per-row path (identity: K NULL): every tile on its own. Returns 1 on a non-finite value, -1
 * out of memory. */
static int run_tiles(const prune_kernels *K, const prune_job *j, int nt, transpose_fn tr) {
    const int64_t len = tile_positions(j), per = (j->P + len - 1) / len, items = j->B * per;
    int bad = 0, nomem = 0;
#pragma omp parallel num_threads(nt) reduction(| : bad)
    {
        tiles buf;
        if (!tiles_alloc(&buf, j, len)) {
#pragma omp atomic write
            nomem = 1;
        }
#pragma omp barrier
        if (!nomem) {
#pragma omp for schedule(static)
            for (int64_t it = 0; it < items; it++) {
                const int64_t b = it / per, p0 = it % per * len, l = j->P - p0 < len ? j->P - p0 : len;
                const prune_job t = tile_job(j, b, p0, l, buf.x, buf.out);
                gather(tr, buf.x, j, b, p0, l);
                if (K)
                    bad |= K->prune(&t, 0, l);
                else
                    prune_identity_rows(&t, 0, l);
                scatter(tr, j, &t, b, p0);
            }
        }
        tiles_free(&buf);
    }
    return nomem ? -1 : bad;
}

/* Rescaled, sample-channel scope: per sample, its sums (leaving keep masks), factors and rows, the
 * sample in the thread's buffer throughout. Returns 0 when every sum is finite, -1 out of memory. */
static int rescaled_samples(const prune_kernels *K, const prune_job *j, int nt, transpose_fn tr) {
    const int64_t C = j->C, P = j->P, W = (C + 15) / 16;
    int finite = 1, nomem = 0;
#pragma omp parallel num_threads(nt) reduction(& : finite)
    {
        tiles buf;
        double *dense = malloc((size_t)C * sizeof *dense), *kept = malloc((size_t)C * sizeof *kept);
        float *scale = malloc((size_t)C * sizeof *scale);
        uint16_t *keep = malloc((size_t)(P * W) * sizeof *keep);
        if (!tiles_alloc(&buf, j, P) || !dense || !kept || !scale || !keep) {
#pragma omp atomic write
            nomem = 1;
        }
#pragma omp barrier
        if (!nomem) {
#pragma omp for schedule(static)
            for (int64_t b = 0; b < j->B; b++) {
                prune_job t = tile_job(j, b, 0, P, buf.x, buf.out);
                t.keep = keep;
                gather(tr, buf.x, j, b, 0, P);
                K->sums(&t, 0, dense, kept);
                finite &= prune_scope_factors(dense, kept, 1, C, SDGP_SCOPE_SAMPLE_CHANNEL, scale);
                t.scale = scale;
                t.scale_bstride = 0;
                K->prune(&t, 0, P);
                scatter(tr, j, &t, b, 0);
            }
        }
        tiles_free(&buf);
        free(dense);
        free(kept);
        free(scale);
        free(keep);
    }
    return nomem ? -1 : !finite;
}

/* Rescaled, channel scope: the sums of every sample (keep masks of every row), the factors over all
 * samples, then the per-row path with them. Returns as run_tiles. */
static int rescaled_channels(const prune_kernels *K, const prune_job *j0, int nt, transpose_fn tr) {
    const int64_t B = j0->B, C = j0->C, P = j0->P, W = (C + 15) / 16;
    double *dense = malloc((size_t)(B * C) * sizeof *dense), *kept = malloc((size_t)(B * C) * sizeof *kept);
    float *scale = malloc((size_t)C * sizeof *scale);
    uint16_t *keep = malloc((size_t)(j0->rows * W) * sizeof *keep);
    int ret = -1, nomem = !dense || !kept || !scale || !keep;
    prune_job j = *j0;
    j.keep = keep;
    j.keep_r0 = 0;
    if (!nomem) {
#pragma omp parallel num_threads(nt)
        {
            float *tile = malloc((size_t)(P * C) * sizeof *tile);
            if (!tile) {
#pragma omp atomic write
                nomem = 1;
            }
#pragma omp barrier
            if (!nomem) {
#pragma omp for schedule(static)
                for (int64_t b = 0; b < B; b++) {
                    const prune_job t = tile_job(&j, b, 0, P, tile, NULL);
                    gather(tr, tile, &j, b, 0, P);
                    K->sums(&t, 0, dense + b * C, kept + b * C);
                }
            }
            free(tile);
        }
    }
    if (!nomem) {
        ret = 1;
        if (prune_scope_factors(dense, kept, B, C, SDGP_SCOPE_CHANNEL, scale)) {
            j.scale = scale;
            j.scale_bstride = 0;
            ret = run_tiles(K, &j, nt, tr);
        }
    }
    free(dense);
    free(kept);
    free(scale);
    free(keep);
    return ret;
}

sdgp_status prune_nchw(const prune_kernels *K, const prune_job *j, int nt, sdgp_isa isa, sdgp_rescale_scope scope,
                       sdgp_error *err) {
    const transpose_fn tr = transpose_for(isa);
    int r;
    if (j->fn == SDGP_PRUNE_RESCALED && K)
        r = scope == SDGP_SCOPE_SAMPLE_CHANNEL ? rescaled_samples(K, j, nt, tr) : rescaled_channels(K, j, nt, tr);
    else
        r = run_tiles(K, j, nt, tr);
    if (r < 0)
        return sdgp_fail(err, SDGP_ERR_NOMEM, "prune (NCHW): tile buffers of %lld x %lld floats per thread",
                         (long long)(j->fn == SDGP_PRUNE_RESCALED ? j->P : tile_positions(j)), (long long)j->C);
    return r ? prune_numeric_error(j, j->fn == SDGP_PRUNE_RESCALED ? "rescaled" : sdgp_prune_fn_name(j->fn), err) : SDGP_OK;
}
