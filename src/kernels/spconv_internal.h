/* The N:M sparse backward-data convolution: plan layout, micro-kernel contract and dispatch.
 * See src/kernels/README.md for the design, the measurements behind it and the contract. */
#ifndef SDGP_SPCONV_INTERNAL_H
#define SDGP_SPCONV_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sdgp/conv.h"
#include "sdgp/sparse.h"

/* Panels store rows of ldp = round_up(nr, SPCONV_LDP_ALIGN) floats for every column block (the
 * narrower last block too, so one entry offset serves all blocks), 64-byte aligned, zero padded:
 * the same layout for every ISA, so a vector kernel may read whole vectors of a row. */
#define SPCONV_LDP_ALIGN 16

/* One entry of the compressed dO as the micro-kernels read it: the value's float bits in the low
 * 32 bits, the byte offset of its panel row (channel k * ldp * 4) in the high 32 bits. One 64-bit
 * integer load yields both; the value reaches a vector register by a GPR broadcast instead of a
 * vector load, which would compete with the panel loads for the load ports (README.md). */
typedef uint64_t spconv_entry;

static inline spconv_entry spconv_entry_make(float v, uint32_t byte_offset) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return (uint64_t)bits | ((uint64_t)byte_offset << 32);
}
static inline float spconv_entry_value(spconv_entry e) {
    uint32_t bits = (uint32_t)e;
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}
static inline uint32_t spconv_entry_offset(spconv_entry e) { return (uint32_t)(e >> 32); }

/* Compressed rows -> entries: nrows rows of ns slots each, read at a stride of src_stride slots
 * (vals/idx in the sdgp_nm_tensor channel layout; ns < src_stride takes one chunk's slots of each
 * row) and written densely. base[s] is the first channel of slot s's group, row_bytes the bytes of
 * one panel row. A flat inner loop (it vectorises even for SSE2); static inline so each ISA file
 * compiles it with its flags. */
static inline void spconv_entries_from_slots(spconv_entry *restrict out, const float *restrict vals,
                                             const uint8_t *restrict idx, const int32_t *restrict base, int64_t nrows,
                                             int64_t ns, int64_t src_stride, uint32_t row_bytes) {
    for (int64_t r = 0; r < nrows; r++, out += ns, vals += src_stride, idx += src_stride)
        for (int64_t s = 0; s < ns; s++)
            out[s] = spconv_entry_make(vals[s], (uint32_t)(base[s] + idx[s]) * row_bytes);
}

/* The widest column block of any ISA's micro-kernel (AVX-512: 8 zmm). */
#define SPCONV_MAX_NR 128

/* Taps one micro-kernel call may take (larger tap groups are split into several calls). */
#define SPCONV_MAX_TAPS 32

/* One micro-kernel call: a 3D block of nx x ny x nz output (dD) pixels (columns, rows, images),
 * one column block, one chunk of output channels and a list of taps. For every pixel (x, y, z) of
 * the block and every tap t, with E_t = ent + tap_ent[t] + x*e_sx + y*e_sy + z*e_sz (the source
 * dO pixel of that tap) and D = dd + x*dd_sx + y*dd_sy + z*dd_sz:
 *   D[c] += sum_t sum_{e < ne} value(E_t[e]) * row(tap_panel[t], E_t[e])[c]
 * for c < ncols, where row(P, E) = (const float *)((const char *)P + offset(E)) is 64-byte aligned
 * and holds at least round_up(ncols, SPCONV_LDP_ALIGN) readable floats (zero beyond ncols).
 * The output row segment stays in registers across all taps and entries and is added to dD once
 * (overwrite = 1: stored into dD without reading it; the first call that reaches a pixel).
 * Reads exactly those dd (unless overwrite) and entry elements and those panel rows; writes only
 * dd[... + c], c < ncols.
 * The summation order inside one call is the kernel's own (ISA paths may differ in rounding) but
 * depends only on the taps and entries, never on nx, ny or the caller's blocking. */
typedef struct {
    float *dd;                     /* pixel (0, 0, 0)'s row segment in dD */
    int64_t dd_sx, dd_sy, dd_sz;   /* floats between neighbouring output pixels along x / y / z */
    const spconv_entry *ent;       /* base of the entries */
    int64_t e_sx, e_sy, e_sz;      /* entries between neighbouring source pixels along x / y / z */
    int ntaps;                     /* 1 .. SPCONV_MAX_TAPS */
    const int64_t *tap_ent;        /* per tap: offset from ent of pixel (0, 0, 0)'s first entry */
    const float *const *tap_panel; /* per tap: its panel (rows addressed by entry offsets) */
    int ne;                        /* entries per source pixel and tap (>= 0) */
    int nx, ny, nz;                /* pixels (>= 0) */
    int ncols;                     /* valid columns, 1 <= ncols <= the kernel's nr */
    int overwrite;                 /* 1: dd = sum (dd not read); 0: dd += sum */
} spconv_tile;

typedef void (*spconv_tile_fn)(const spconv_tile *t);
/* spconv_entries_from_slots compiled with an ISA's flags (spconv_<isa>.c): the packing of a unit's
 * entries is a third of a 1x1 layer's time when compiled for the baseline ISA. */
typedef void (*spconv_entries_fn)(spconv_entry *restrict out, const float *restrict vals, const uint8_t *restrict idx,
                                  const int32_t *restrict base, int64_t nrows, int64_t ns, int64_t src_stride,
                                  uint32_t row_bytes);
/* Magnitude N:M pruning (m divides 16, n < m) of nrows dense dO rows x (Cout floats apart) straight
 * into a unit's entries for its pixels pix0 .. (the layout of spconv_pack_entries); scale: the
 * rows' rescale factors per channel (rescaled; all rows of one sample), or NULL. block > 1: masks
 * shared by blocks of `block` rows along lines of `line` rows (row 0 starts a line; the last block
 * of a line is shorter), each decided on the rows' summed |x| in row order. The entries are bitwise
 * those of sdgp_prune's compressed form (with cfg->mask_block = block, mask_line = line) packed by
 * spconv_pack_entries. */
struct sdgp_sparse_bwd;
typedef void (*spconv_prune_entries_fn)(spconv_entry *out, const struct sdgp_sparse_bwd *p, const float *x, const float *scale,
                                        int64_t nrows, int64_t pix0, int64_t npix, int64_t block, int64_t line);

/* Shared masks (mask blocks, README.md): the tile_shared kernels compute the same sum for calls
 * whose nx pixels share their entries' offsets: for every (y, z) and tap, entry e of pixel
 * (x, y, z) has the panel offset of entry e of pixel (0, y, z) (values differ). They read the
 * offsets of x = 0 only and load each panel row into registers once for all nx pixels, so the
 * FMAs need no loads of their own (the per-row kernel's bound). Limits: ncols <=
 * SPCONV_SHARED_MAX_NR and nx <= spconv_shared_nx(k, ncols). Summation: per pixel, taps in list
 * order, entries in index order, one chain per vector; so a pixel's result does not depend on nx
 * (nor on the caller's split of a block into calls). */
#define SPCONV_SHARED_MAX_NR 64
#define SPCONV_SHARED_MAX_NX 8

/* One ISA's kernels. nr: the widest column block the tile kernel takes; vec: floats per vector;
 * shared_acc: vector accumulators tile_shared may hold (nx * vectors of a row). Block sizes are
 * not here: they follow the caches of the machine (spconv.c, default_blocking). */
typedef struct {
    sdgp_isa isa;
    int nr;
    spconv_tile_fn tile;
    spconv_tile_fn tile_shared;
    spconv_entries_fn entries;
    spconv_prune_entries_fn prune_entries; /* NULL: this path prunes into slots, then entries() */
    int vec, shared_acc;
} spconv_kernels;

/* The most pixels one tile_shared call may take at this column width. */
static inline int spconv_shared_nx(const spconv_kernels *k, int ncols) {
    const int nv = (ncols + k->vec - 1) / k->vec, nx = k->shared_acc / nv;
    return nx < SPCONV_SHARED_MAX_NX ? nx : SPCONV_SHARED_MAX_NX;
}

/* The kernels of a resolved ISA path (spconv.c: the one table of micro-kernels and widths). */
const spconv_kernels *spconv_kernels_for(sdgp_isa isa);
/* The checks of g, n and m every sparse plan's create starts with, `who` in the messages: g non-NULL
 * and as sdgp_conv_geom_init makes it (Ho, Wo included), 1 <= n <= m <= SDGP_NM_MAX_M. */
sdgp_status sparse_check_geometry(const char *who, const sdgp_conv_geom *g, int n, int m, sdgp_error *err);
/* The checks every sparse plan's create makes, with `who` in the messages: out and g non-NULL, g
 * as sdgp_conv_geom_init makes it, 1 <= n <= m <= SDGP_NM_MAX_M, Cout % m == 0, threads >= 0;
 * then *resolved = sdgp_isa_resolve(isa). */
sdgp_status spconv_check_plan_args(const char *who, const void *out, const sdgp_conv_geom *g, int n, int m, sdgp_isa isa,
                                   int threads, sdgp_isa *resolved, sdgp_error *err);

void spconv_tile_ref(const spconv_tile *t);
void spconv_tile_avx2(const spconv_tile *t);
void spconv_tile_avx512(const spconv_tile *t);
void spconv_tile_shared_ref(const spconv_tile *t);
void spconv_tile_shared_avx2(const spconv_tile *t);
void spconv_tile_shared_avx512(const spconv_tile *t);
void spconv_prune_entries_avx512(spconv_entry *out, const struct sdgp_sparse_bwd *p, const float *x, const float *scale,
                                 int64_t nrows, int64_t pix0, int64_t npix, int64_t block, int64_t line);
void spconv_entries_ref(spconv_entry *restrict out, const float *restrict vals, const uint8_t *restrict idx,
                        const int32_t *restrict base, int64_t nrows, int64_t ns, int64_t src_stride, uint32_t row_bytes);
void spconv_entries_avx2(spconv_entry *restrict out, const float *restrict vals, const uint8_t *restrict idx,
                         const int32_t *restrict base, int64_t nrows, int64_t ns, int64_t src_stride, uint32_t row_bytes);
void spconv_entries_avx512(spconv_entry *restrict out, const float *restrict vals, const uint8_t *restrict idx,
                           const int32_t *restrict base, int64_t nrows, int64_t ns, int64_t src_stride, uint32_t row_bytes);

/* The plan's blocking as text ("nr=.. kc=.. tg=.. unit=IBxHR"), for sdgp kernels. */
void spconv_describe(const sdgp_sparse_bwd *p, char *buf, size_t size);

/* Blocking parameters of a plan (chosen in create; overridable for tuning experiments). */
typedef struct {
    int nr;          /* column block width (<= the kernel's nr) */
    int kc;          /* output channels per chunk, a multiple of m */
    int tg;          /* taps per group (consecutive in i*kw + j order); the registers accumulate a
                        pixel over a group's taps. 0: all taps */
    int64_t tile_px; /* target dD pixels per work unit (the unit's dD block stays in L2) */
} spconv_blocking;

/* A run of dD rows (or columns) that see the same valid taps: positions start + stride*y for
 * y < count, tap rows i (columns j) with bit i set in mask. */
typedef struct {
    int start, count;
    uint64_t mask;
} spconv_run;

struct sdgp_sparse_bwd {
    sdgp_conv_geom g;
    int n, m, threads;
    spconv_kernels k;
    spconv_blocking blk;
    int64_t cig, cog;  /* input / output channels per conv group (Cin, Cout when ungrouped) */
    int nbg;           /* column blocks per conv group: a block never straddles two groups */
    int nblocks;       /* column blocks of Cin: groups * nbg, block nb in group nb / nbg */
    int64_t ldp;       /* floats per panel row, every block: round_up(min(nr, cig), SPCONV_LDP_ALIGN) */
    int64_t slots;     /* entries per dO row: Cout/m*n (group g's are slots g*cog/m*n ..) */
    float *wp;         /* packed weights: [block][tap][cog][ldp] (64-byte aligned), rows = the
                          block's group's output channels */
    size_t wp_floats;
    int64_t ib, hr;    /* work unit: ib images x hr dD rows */
    spconv_entry *tbuf; /* per thread: the entries of the unit in progress */
    size_t tbuf_entries; /* per thread */
    spconv_run *row_runs, *col_runs; /* over all of H and W (kh, kw <= 64) */
    int nrow_runs, ncol_runs;
    uint8_t *written;  /* per thread: nrow_runs x ncol_runs flags of the unit in progress */
    int32_t *slot_base; /* per slot of a row: first channel of its group of m within its conv
                           group, (slot / n) * m % cog (the panel row of index 0) */
    int mask_block;    /* dO rows share masks in blocks of this many pixels (1: per row) */
    int packed;
    /* dD's layout (sdgp_sparse_bwd_set_output_layout). NCHW: each unit computes into its thread's
     * stage (the unit's NHWC block, ib*hr*W*Cin floats) and transposes each column block into dD
     * right after computing it. */
    sdgp_layout out_layout;
    float *stage;
    size_t stage_floats; /* per thread; 0 until the first NCHW call allocates it */
    /* sdgp_sparse_bwd_data_pruned: per thread, the slots of prune_piece rows (values, indices),
     * allocated at its first call */
    float *pvals;
    uint8_t *pidx;
    int64_t prune_piece;
};

/* Packing (pack_spconv.c). */
/* W (Cout x Cin/groups x kh x kw) -> p->wp; w's element (k, c, i, j), c < cig, at w + k*strides[0] +
 * c*strides[1] + i*strides[2] + j*strides[3]. Team size: p->threads. */
void spconv_pack_weights(struct sdgp_sparse_bwd *p, const float *w, const int64_t strides[4]);
/* Compressed dO rows row0 .. row0+nrows-1 (values + offsets within the group) -> entries of a unit's
 * pixels pix0 .. pix0+nrows-1, the unit having npix pixels. The unit's buffer is chunk-major: the
 * slots of one chunk (kc output channels of one conv group: slots s0 .. s0+ns-1, s0 = the chunk's
 * first slot) form a slab of npix x ns entries at npix * s0, so a (chunk, tap) pass reads its
 * pixels' entries as one contiguous stream. */
void spconv_pack_entries(spconv_entry *out, const struct sdgp_sparse_bwd *p, const sdgp_nm_tensor *dO, int64_t row0,
                         int64_t nrows, int64_t pix0, int64_t npix);

/* Overrides the plan's blocking (tuning experiments and tests); validates it. */
sdgp_status spconv_set_blocking(struct sdgp_sparse_bwd *p, const spconv_blocking *b, sdgp_error *err);

/* The FMA ceiling (GFLOP/s) of an ISA path on `threads` threads (peak.c): a pure register FMA
 * loop, about `seconds` per round. The loops themselves live in peak_<isa>.c. */
double spconv_fma_ceiling(sdgp_isa isa, int threads, double seconds);
int64_t spconv_peak_loop_avx512(int64_t iters, float *sink);
int64_t spconv_peak_loop_avx2(int64_t iters, float *sink);

#endif
