/* SDGP in the Winograd domain (spwino.c): the plan, and the per-ISA table of its data loops
 * (transform of dO into V, packing of pruned V rows into micro-kernel entries, and the inverse
 * transform into dD). The loops are plain C in spwino_loops.h, compiled once per ISA
 * (spwino_ref.c, spwino_avx2.c, spwino_avx512.c) so that the compiler vectorises them with that
 * ISA's registers; they use only additions and multiplications by +-1 (exact), so every path
 * produces the same bits. The one piece written per ISA is spwino_block_row (the entries of a
 * shared-mask block's row, its kept values permuted out of vectors of channels). The GEMM stage is
 * the sparse backward-data micro-kernel (spconv_tile). */
#ifndef SDGP_SPWINO_INTERNAL_H
#define SDGP_SPWINO_INTERNAL_H

#include "kernels/spconv_internal.h"
#include "prune/prune_internal.h"

#define WE 16  /* transform elements of F(2x2,3x3): 4x4 */
#define WROW 4 /* elements of one row a of B^T: e = 4a + bb */

/* Shared masks: where spwino_loops.block_entries (a prune_job's emit) writes the entries of the
 * job's rows: row r's slots at ent + r * slots. */
typedef struct {
    spconv_entry *ent;
    int64_t slots;
    uint32_t row_bytes;
} spwino_sink;

typedef struct {
    /* V_e of image b's tiles into v (T x Cout). */
    void (*transform)(const sdgp_sparse_wino *p, float *v, const float *dO, int64_t b, int e);
    /* spconv_entries_from_slots, compiled with this ISA's flags. */
    void (*entries)(spconv_entry *ent, const float *vals, const uint8_t *idx, const int32_t *base, int64_t rows,
                    int64_t slots, int64_t src_stride, uint32_t row_bytes);
    /* Shared masks: a prune_job emit (prune_internal.h; j->emit_ctx a spwino_sink) that makes the
     * entries of one block's rows straight from V, as entries() would from the block pruning's
     * compressed rows, bitwise: no compressed copy. */
    void (*block_entries)(const prune_job *j, const prune_block_slice *b);
    /* Row a of A^T (.) A: M of the elements (a, 0..3) of the unit's images b0.. into dD columns
     * [c0, c0+ncols); store (first row) or add. */
    void (*scatter_row)(const sdgp_sparse_wino *p, float *dD, const float *M, int64_t b0, int64_t nimg, int a, int64_t c0,
                        int64_t ncols, int store);
} spwino_loops;

extern const spwino_loops spwino_loops_ref;
extern const spwino_loops spwino_loops_avx2;
extern const spwino_loops spwino_loops_avx512;

struct sdgp_sparse_wino {
    sdgp_conv_geom g;
    int n, m, threads;
    spconv_kernels k;
    const prune_kernels *pk;
    const spwino_loops *loops;
    int nr, kc, nblocks;
    int64_t ldp, slots;  /* floats per panel row; kept slots per V row (Cout/m*n) */
    int q, th, tw;       /* padding of dO in the correlation (2 - pad); tiles per image */
    int64_t T, ib;       /* tiles per image; images per work unit */
    float *up;           /* U: [e][nb][Cout][ldp], 64-byte aligned rows */
    size_t up_floats;
    int packed;
    int32_t *slot_base;  /* per slot of a row: the first channel of its group */
    float *zrow;         /* Cout zeros: the patch pixels outside dO */
    /* per thread, one block each (offsets below, bytes) */
    unsigned char *tbuf;
    size_t tbytes, o_vals, o_idx, o_ent, o_mbuf, o_dense, o_kept, o_scale, o_keep;
    /* rescaled, channel scope: per (e, b) sums of a call and the factors */
    double *csums;
    float *cscale;
};

/* The plan's blocking as text ("nr=.. kc=.. unit=.."), for sdgp kernels. */
void spwino_describe(const sdgp_sparse_wino *p, char *buf, size_t size);

#endif
