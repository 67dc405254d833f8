/* N:M pruning: the public API (include/sdgp/prune.h). Validation, the compressed form, and the
 * driver that splits the work over an OpenMP team and dispatches to one ISA's kernels. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/align.h"
#include "prune/prune_internal.h"

static const char *const fn_names[SDGP_PRUNE_COUNT] = {"none", "random", "magnitude", "rescaled", "mvue", "mvue-approx"};

sdgp_prune_cfg sdgp_prune_cfg_make(sdgp_prune_fn fn, int n, int m) {
    sdgp_prune_cfg c;
    memset(&c, 0, sizeof c);
    c.fn = fn;
    c.n = n;
    c.m = m;
    c.axis = SDGP_AXIS_CHANNEL;
    c.scope = SDGP_SCOPE_SAMPLE_CHANNEL;
    c.isa = SDGP_ISA_AUTO;
    c.mask_block = 1;
    return c;
}

const char *sdgp_prune_fn_name(sdgp_prune_fn fn) {
    return fn >= 0 && fn < SDGP_PRUNE_COUNT ? fn_names[fn] : "?";
}

sdgp_status sdgp_prune_fn_parse(const char *name, sdgp_prune_fn *out, sdgp_error *err) {
    if (!name || !out) return sdgp_fail(err, SDGP_ERR_INVALID, "prune function name or output is NULL");
    for (int i = 0; i < SDGP_PRUNE_COUNT; i++)
        if (strcmp(name, fn_names[i]) == 0) {
            *out = (sdgp_prune_fn)i;
            return SDGP_OK;
        }
    return sdgp_fail(err, SDGP_ERR_INVALID,
                     "unknown prune function '%s' (expected none, random, magnitude, rescaled, mvue or mvue-approx)", name);
}

static sdgp_status check_nm(int n, int m, sdgp_error *err) {
    if (m < 1 || m > SDGP_NM_MAX_M) return sdgp_fail(err, SDGP_ERR_INVALID, "N:M: m=%d is out of range [1, %d]", m, SDGP_NM_MAX_M);
    if (n < 1 || n > m) return sdgp_fail(err, SDGP_ERR_INVALID, "N:M: n=%d is out of range [1, m=%d]", n, m);
    return SDGP_OK;
}

/* One decimal integer at *p (digits only), advancing p; -1 when none or too large. */
static long parse_digits(const char **p) {
    const char *s = *p;
    long v = 0;
    if (!isdigit((unsigned char)*s)) return -1;
    for (; isdigit((unsigned char)*s); s++) {
        v = v * 10 + (*s - '0');
        if (v > 1000000) return -1;
    }
    *p = s;
    return v;
}

sdgp_status sdgp_nm_parse(const char *text, int *n, int *m, sdgp_error *err) {
    if (!text || !n || !m) return sdgp_fail(err, SDGP_ERR_INVALID, "N:M text or output is NULL");
    const char *p = text;
    long a = parse_digits(&p), b = -1;
    if (a >= 0 && *p == ':') {
        p++;
        b = parse_digits(&p);
    }
    if (a < 0 || b < 0 || *p)
        return sdgp_fail(err, SDGP_ERR_INVALID, "N:M '%s': expected two integers as N:M, e.g. 2:4", text);
    if (b < 1 || b > SDGP_NM_MAX_M)
        return sdgp_fail(err, SDGP_ERR_INVALID, "N:M '%s': m=%ld is out of range [1, %d]", text, b, SDGP_NM_MAX_M);
    if (a < 1 || a > b) return sdgp_fail(err, SDGP_ERR_INVALID, "N:M '%s': n=%ld is out of range [1, m=%ld]", text, a, b);
    *n = (int)a;
    *m = (int)b;
    return SDGP_OK;
}

/* Shape checks shared by the compressed form and the pruning call. */
static sdgp_status check_shape(sdgp_axis axis, int n, int m, int64_t rows, int64_t C, sdgp_error *err) {
    sdgp_status st = check_nm(n, m, err);
    if (st) return st;
    if (axis != SDGP_AXIS_CHANNEL && axis != SDGP_AXIS_ROW) return sdgp_fail(err, SDGP_ERR_INVALID, "prune: axis=%d is not CHANNEL or ROW", (int)axis);
    if (rows < 1) return sdgp_fail(err, SDGP_ERR_INVALID, "prune: rows=%lld must be >= 1", (long long)rows);
    if (C < 1) return sdgp_fail(err, SDGP_ERR_INVALID, "prune: C=%lld must be >= 1", (long long)C);
    if (rows > INT64_MAX / C || (uint64_t)(rows * C) > SIZE_MAX / sizeof(float) / 2)
        return sdgp_fail(err, SDGP_ERR_NOMEM, "prune: rows=%lld x C=%lld elements overflow", (long long)rows, (long long)C);
    if (axis == SDGP_AXIS_CHANNEL && C % m)
        return sdgp_fail(err, SDGP_ERR_INVALID, "prune: C=%lld is not a multiple of m=%d (channel axis)", (long long)C, m);
    if (axis == SDGP_AXIS_ROW && rows % m)
        return sdgp_fail(err, SDGP_ERR_INVALID, "prune: rows=B*P=%lld is not a multiple of m=%d (row axis)", (long long)rows, m);
    return SDGP_OK;
}

sdgp_status sdgp_prune_check(const sdgp_prune_cfg *cfg, int64_t B, int64_t P, int64_t C, sdgp_error *err) {
    if (!cfg) return sdgp_fail(err, SDGP_ERR_INVALID, "prune: cfg is NULL");
    if (cfg->fn < 0 || cfg->fn >= SDGP_PRUNE_COUNT) return sdgp_fail(err, SDGP_ERR_INVALID, "prune: fn=%d is not a pruning function", (int)cfg->fn);
    if (cfg->scope != SDGP_SCOPE_SAMPLE_CHANNEL && cfg->scope != SDGP_SCOPE_CHANNEL)
        return sdgp_fail(err, SDGP_ERR_INVALID, "prune: scope=%d is not sample-channel or channel", (int)cfg->scope);
    if (cfg->threads < 0) return sdgp_fail(err, SDGP_ERR_INVALID, "prune: threads=%d must be >= 0", cfg->threads);
    if (cfg->layout != SDGP_LAYOUT_NHWC && cfg->layout != SDGP_LAYOUT_NCHW)
        return sdgp_fail(err, SDGP_ERR_INVALID, "prune: layout=%d is not NHWC or NCHW", (int)cfg->layout);
    if (cfg->layout == SDGP_LAYOUT_NCHW && cfg->axis != SDGP_AXIS_CHANNEL)
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED, "prune: the NCHW layout is implemented for the channel axis only");
    if (B < 1 || P < 1) return sdgp_fail(err, SDGP_ERR_INVALID, "prune: B=%lld and P=%lld must be >= 1", (long long)B, (long long)P);
    if (B > INT64_MAX / P) return sdgp_fail(err, SDGP_ERR_NOMEM, "prune: B=%lld x P=%lld overflows", (long long)B, (long long)P);
    sdgp_status st = check_shape(cfg->axis, cfg->n, cfg->m, B * P, C, err);
    if (st) return st;
    if (cfg->mask_block < 0 || cfg->mask_block > SDGP_MASK_BLOCK_MAX)
        return sdgp_fail(err, SDGP_ERR_INVALID, "prune: mask_block=%d is out of range [1, %d]", cfg->mask_block, SDGP_MASK_BLOCK_MAX);
    if (cfg->mask_block > 1 && cfg->axis == SDGP_AXIS_ROW && cfg->n != cfg->m) { /* channels sharing row masks */
        if (C % cfg->mask_block)
            return sdgp_fail(err, SDGP_ERR_INVALID, "prune: mask_block=%d channels share a row mask, but C=%lld is not a multiple of it",
                             cfg->mask_block, (long long)C);
        if (cfg->fn != SDGP_PRUNE_RANDOM && cfg->fn != SDGP_PRUNE_MAGNITUDE && cfg->fn != SDGP_PRUNE_MVUE)
            return sdgp_fail(err, SDGP_ERR_UNSUPPORTED, "prune: %s has no form with row masks shared by channels (mask_block=%d); "
                             "random, magnitude and mvue have", sdgp_prune_fn_name(cfg->fn), cfg->mask_block);
    } else if (cfg->mask_block > 1) {
        if (cfg->mask_line < 0 || (cfg->mask_line > 0 && P % cfg->mask_line))
            return sdgp_fail(err, SDGP_ERR_INVALID, "prune: mask_line=%lld must divide the P=%lld positions of a sample", (long long)cfg->mask_line,
                             (long long)P);
        if (cfg->fn == SDGP_PRUNE_MVUE_APPROX && cfg->n != cfg->m)
            return sdgp_fail(err, SDGP_ERR_INVALID, "prune: mvue-approx has no shared-mask form (mask_block=%d); use mvue", cfg->mask_block);
    }
    if (cfg->fn == SDGP_PRUNE_MVUE_APPROX && cfg->n != cfg->m && !(cfg->n == 2 && cfg->m == 4))
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED, "prune: mvue-approx supports only 2:4 (got %d:%d); use mvue for other N:M", cfg->n, cfg->m);
    return SDGP_OK;
}

/* ---- the compressed form ---- */

size_t sdgp_nm_slots(const sdgp_nm_tensor *t) {
    if (!t || t->m < 1 || t->rows < 1 || t->C < 1) return 0;
    return (size_t)(t->rows * t->C / t->m * t->n);
}

sdgp_status sdgp_nm_alloc(sdgp_nm_tensor *t, sdgp_axis axis, int n, int m, int64_t rows, int64_t C, sdgp_error *err) {
    if (!t) return sdgp_fail(err, SDGP_ERR_INVALID, "nm_alloc: tensor is NULL");
    memset(t, 0, sizeof *t);
    sdgp_status st = check_shape(axis, n, m, rows, C, err);
    if (st) return st;
    t->axis = axis;
    t->n = n;
    t->m = m;
    t->rows = rows;
    t->C = C;
    size_t slots = sdgp_nm_slots(t);
    size_t vbytes = sdgp_align64(slots * sizeof(float)), ibytes = sdgp_align64(slots);
    t->values = aligned_alloc(64, vbytes);
    t->index = aligned_alloc(64, ibytes);
    if (!t->values || !t->index) {
        sdgp_nm_free(t);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "nm_alloc: %zu slots (%zu bytes) failed", slots, vbytes + ibytes);
    }
    memset(t->values, 0, vbytes);
    memset(t->index, 0, ibytes);
    return SDGP_OK;
}

void sdgp_nm_free(sdgp_nm_tensor *t) {
    if (!t) return;
    free(t->values);
    free(t->index);
    memset(t, 0, sizeof *t);
}

static sdgp_status check_nm_tensor(const sdgp_nm_tensor *t, const char *who, sdgp_error *err) {
    if (!t) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: compressed tensor is NULL", who);
    if (!t->values || !t->index) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: compressed values or index is NULL (not allocated?)", who);
    return check_shape(t->axis, t->n, t->m, t->rows, t->C, err);
}

/* Position of slot j of group `grp` in the compressed arrays, and its dense base element. */
static int64_t slot_pos(const sdgp_nm_tensor *t, int64_t grp, int j) {
    if (t->axis == SDGP_AXIS_CHANNEL) return grp * t->n + j; /* grp = r*(C/m) + g */
    return (grp / t->C * t->n + j) * t->C + grp % t->C;      /* grp = g*C + c */
}

sdgp_status sdgp_nm_decompress(const sdgp_nm_tensor *nm, float *out, sdgp_error *err) {
    sdgp_status st = check_nm_tensor(nm, "nm_decompress", err);
    if (st) return st;
    if (!out) return sdgp_fail(err, SDGP_ERR_INVALID, "nm_decompress: out is NULL");
    const int64_t C = nm->C, groups = nm->rows * C / nm->m;
    const int n = nm->n, m = nm->m;
    int64_t bad = -1;
    memset(out, 0, (size_t)(nm->rows * C) * sizeof *out);
#pragma omp parallel for schedule(static) reduction(max : bad)
    for (int64_t grp = 0; grp < groups; grp++) {
        for (int j = 0; j < n; j++) {
            int64_t s = slot_pos(nm, grp, j);
            int k = nm->index[s];
            if (k >= m) {
                bad = s > bad ? s : bad;
                continue;
            }
            int64_t e = nm->axis == SDGP_AXIS_CHANNEL ? grp * m + k : (grp / C * m + k) * C + grp % C;
            out[e] = nm->values[s];
        }
    }
    if (bad >= 0) return sdgp_fail(err, SDGP_ERR_INVALID, "nm_decompress: slot %lld holds index %d >= m=%d", (long long)bad, nm->index[bad], m);
    return SDGP_OK;
}

sdgp_status sdgp_nm_compress(const float *x, sdgp_nm_tensor *nm, sdgp_error *err) {
    sdgp_status st = check_nm_tensor(nm, "nm_compress", err);
    if (st) return st;
    if (!x) return sdgp_fail(err, SDGP_ERR_INVALID, "nm_compress: x is NULL");
    const int64_t C = nm->C, groups = nm->rows * C / nm->m;
    const int n = nm->n, m = nm->m;
    const int64_t stride = nm->axis == SDGP_AXIS_CHANNEL ? 1 : C;
    int64_t bad = groups;
#pragma omp parallel for schedule(static) reduction(min : bad)
    for (int64_t grp = 0; grp < groups; grp++) {
        float y[SDGP_NM_MAX_M];
        for (int k = 0; k < m; k++)
            y[k] = nm->axis == SDGP_AXIS_CHANNEL ? x[grp * m + k] : x[(grp / C * m + k) * C + grp % C];
        int64_t s = slot_pos(nm, grp, 0);
        if (prune_compress_group(nm->values + s, nm->index + s, stride, y, n, m) > n) bad = grp < bad ? grp : bad;
    }
    if (bad < groups) {
        if (nm->axis == SDGP_AXIS_CHANNEL)
            return sdgp_fail(err, SDGP_ERR_INVALID, "nm_compress: row %lld, channels %lld..%lld hold more than n=%d nonzeros",
                             (long long)(bad / (C / m)), (long long)(bad % (C / m) * m), (long long)(bad % (C / m) * m + m - 1), n);
        return sdgp_fail(err, SDGP_ERR_INVALID, "nm_compress: channel %lld, rows %lld..%lld hold more than n=%d nonzeros",
                         (long long)(bad % C), (long long)(bad / C * m), (long long)(bad / C * m + m - 1), n);
    }
    return SDGP_OK;
}

/* ---- pruning ---- */

const prune_kernels *prune_kernels_for(sdgp_isa isa) {
    switch (isa) {
    case SDGP_ISA_AVX512: return &prune_kernels_avx512;
    case SDGP_ISA_AVX2: return &prune_kernels_avx2;
    default: return &prune_kernels_ref;
    }
}

static int ranges_overlap(const void *a, size_t abytes, const void *b, size_t bbytes) {
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return a && b && pa < pb + bbytes && pb < pa + abytes;
}

sdgp_status prune_numeric_error(const prune_job *j, const char *fn, sdgp_error *err) {
    const int64_t P = j->P, C = j->C, total = j->rows * C;
    int64_t i = 0;
    while (i < total && isfinite(j->x[i])) i++;
    if (i == total) return sdgp_fail(err, SDGP_ERR_INTERNAL, "prune %s: non-finite result without a non-finite input", fn);
    const int nchw = j->layout == SDGP_LAYOUT_NCHW;
    const int64_t b = i / C / P, p = nchw ? i % P : i / C % P, c = nchw ? i / P % C : i % C;
    return sdgp_fail(err, SDGP_ERR_NUMERIC, "prune %s: x[%lld] (b=%lld, p=%lld, c=%lld; %s) is %s; %s needs finite values", fn,
                     (long long)i, (long long)b, (long long)p, (long long)c, nchw ? "NCHW" : "NHWC",
                     isnan(j->x[i]) ? "NaN" : "Inf", fn);
}

int prune_scope_factors(const double *dense, const double *kept, int64_t B, int64_t C, sdgp_rescale_scope scope, float *scale) {
    int finite = 1;
    if (scope == SDGP_SCOPE_CHANNEL) {
        /* Per channel, the per-sample sums added in sample order: independent of threads. */
        for (int64_t c = 0; c < C; c++) {
            double d = 0, k = 0;
            for (int64_t b = 0; b < B; b++) {
                d += dense[b * C + c];
                k += kept[b * C + c];
            }
            finite &= isfinite(d) != 0;
            scale[c] = prune_rescale_factor(d, k);
        }
        return finite;
    }
    for (int64_t i = 0; i < B * C; i++) {
        finite &= isfinite(dense[i]) != 0;
        scale[i] = prune_rescale_factor(dense[i], kept[i]);
    }
    return finite;
}

/* n == m (every function) or fn NONE: a bitwise copy, and every position a slot. */
void prune_identity_rows(const prune_job *j, int64_t r0, int64_t r1) {
    const int64_t C = j->C;
    const int m = j->m;
    for (int64_t r = r0; r < r1; r++) {
        if (j->out) memcpy(j->out + r * C, j->x + r * C, (size_t)C * sizeof(float));
        if (j->vals) {
            memcpy(j->vals + r * C, j->x + r * C, (size_t)C * sizeof(float));
            for (int64_t c = 0; c < C; c++)
                j->idx[r * C + c] = (uint8_t)(j->axis == SDGP_AXIS_CHANNEL ? c % m : r % m);
        }
    }
}

static void prune_identity(const prune_job *j, int nt) {
#pragma omp parallel num_threads(nt)
    {
        const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
        prune_identity_rows(j, j->rows * t / T, j->rows * (t + 1) / T);
    }
}

/* Sample-channel scope on the channel axis: one sample at a time per thread, both passes, the
 * second finding the sample still in cache and reusing the keep masks of the first. The
 * workspace is per thread (one sample's sums, factors and masks), so it stays small and warm. */
static sdgp_status rescaled_fused(const prune_kernels *K, const prune_job *j0, int nt, sdgp_error *err) {
    const int64_t C = j0->C, P = j0->P, W = (C + 15) / 16;
    int finite = 1, nomem = 0;
#pragma omp parallel num_threads(nt) reduction(& : finite)
    {
        double *dense = malloc((size_t)C * sizeof *dense), *kept = malloc((size_t)C * sizeof *kept);
        float *scale = malloc((size_t)C * sizeof *scale);
        uint16_t *keep = malloc((size_t)(P * W) * sizeof *keep);
        if (!dense || !kept || !scale || !keep) {
#pragma omp atomic write
            nomem = 1;
        }
#pragma omp barrier
        if (!nomem) {
            prune_job j = *j0;
            j.scale = scale;
            j.scale_bstride = 0; /* every row of the sample uses scale[0..C) */
            j.keep = keep;
#pragma omp for schedule(static)
            for (int64_t b = 0; b < j0->B; b++) {
                j.keep_r0 = b * P;
                K->sums(&j, b, dense, kept);
                finite &= prune_scope_factors(dense, kept, 1, C, SDGP_SCOPE_SAMPLE_CHANNEL, scale);
                K->prune(&j, b * P, (b + 1) * P);
            }
        }
        free(dense);
        free(kept);
        free(scale);
        free(keep);
    }
    if (nomem) return sdgp_fail(err, SDGP_ERR_NOMEM, "prune rescaled: workspace of %lld x %lld per thread", (long long)P, (long long)C);
    return finite ? SDGP_OK : prune_numeric_error(j0, "rescaled", err);
}

static sdgp_status prune_rescaled(const prune_kernels *K, prune_job *j, int nt, sdgp_rescale_scope scope, sdgp_error *err) {
    if (scope == SDGP_SCOPE_SAMPLE_CHANNEL && j->axis == SDGP_AXIS_CHANNEL) return rescaled_fused(K, j, nt, err);
    /* Two global passes: every sum before any factor (channel scope, or groups that may straddle
     * samples on the row axis). On the channel axis the first pass leaves the keep masks of every
     * row (C/8 bytes a row, 1/32 of x) so the second does not rank again. */
    const int64_t B = j->B, C = j->C, W = (C + 15) / 16;
    double *dense = malloc((size_t)(B * C) * sizeof *dense), *kept = malloc((size_t)(B * C) * sizeof *kept);
    float *scale = malloc((size_t)(B * C) * sizeof *scale);
    uint16_t *keep = j->axis == SDGP_AXIS_CHANNEL ? malloc((size_t)(j->rows * W) * sizeof *keep) : NULL;
    if (!dense || !kept || !scale || (j->axis == SDGP_AXIS_CHANNEL && !keep)) {
        free(dense);
        free(kept);
        free(scale);
        free(keep);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "prune rescaled: %lld scale sums and %lld x %lld keep masks", (long long)(B * C),
                         (long long)j->rows, (long long)C);
    }
    j->keep = keep;
    j->keep_r0 = 0;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t b = 0; b < B; b++) K->sums(j, b, dense + b * C, kept + b * C);
    const int finite = prune_scope_factors(dense, kept, B, C, scope, scale);
    j->scale_bstride = scope == SDGP_SCOPE_CHANNEL ? 0 : C;
    if (finite) {
        j->scale = scale;
        const int64_t tiles = j->axis == SDGP_AXIS_CHANNEL ? j->rows : j->rows / j->m;
#pragma omp parallel num_threads(nt)
        {
            int t = omp_get_thread_num(), T = omp_get_num_threads();
            K->prune(j, tiles * t / T, tiles * (t + 1) / T);
        }
        j->scale = NULL;
    }
    j->keep = NULL;
    free(dense);
    free(kept);
    free(scale);
    free(keep);
    return finite ? SDGP_OK : prune_numeric_error(j, "rescaled", err);
}

/* A job of cfg's function and shape of groups, nothing else set: what a kernel table's vectorised()
 * reads. */
static prune_job job_of(const sdgp_prune_cfg *cfg) {
    prune_job j;
    memset(&j, 0, sizeof j);
    j.fn = cfg->fn;
    j.axis = cfg->axis;
    j.n = cfg->n;
    j.m = cfg->m;
    return j;
}

const char *sdgp_prune_kernel(const sdgp_prune_cfg *cfg) {
    sdgp_isa isa;
    if (!cfg || sdgp_isa_resolve(cfg->isa, &isa, NULL)) return "?";
    if (cfg->fn == SDGP_PRUNE_NONE || cfg->n == cfg->m) return "copy";
    if (cfg->mask_block > 1) return cfg->axis == SDGP_AXIS_ROW ? "rowblock" : "block";
    const prune_kernels *K = prune_kernels_for(isa);
    const prune_job j = job_of(cfg);
    return K->vectorised && K->vectorised(&j) ? sdgp_isa_name(isa) : "ref";
}

sdgp_status sdgp_prune(const sdgp_prune_cfg *cfg, const float *x, int64_t B, int64_t P, int64_t C, float *out,
                       sdgp_nm_tensor *nm, sdgp_error *err) {
    sdgp_status st = sdgp_prune_check(cfg, B, P, C, err);
    if (st) return st;
    if (!x) return sdgp_fail(err, SDGP_ERR_INVALID, "prune: x is NULL");
    if (!out && !nm) return sdgp_fail(err, SDGP_ERR_INVALID, "prune: out and nm are both NULL (nothing to write)");
    const int64_t rows = B * P;
    const size_t bytes = (size_t)(rows * C) * sizeof(float);
    if (ranges_overlap(x, bytes, out, bytes)) return sdgp_fail(err, SDGP_ERR_INVALID, "prune: out overlaps x");
    if (nm) {
        if ((st = check_nm_tensor(nm, "prune", err))) return st;
        if (nm->axis != cfg->axis || nm->n != cfg->n || nm->m != cfg->m || nm->rows != rows || nm->C != C)
            return sdgp_fail(err, SDGP_ERR_INVALID,
                             "prune: compressed tensor is %s %d:%d of %lld x %lld, the call needs %s %d:%d of %lld x %lld",
                             nm->axis == SDGP_AXIS_ROW ? "row" : "channel", nm->n, nm->m, (long long)nm->rows, (long long)nm->C,
                             cfg->axis == SDGP_AXIS_ROW ? "row" : "channel", cfg->n, cfg->m, (long long)rows, (long long)C);
        size_t slots = sdgp_nm_slots(nm);
        if (ranges_overlap(x, bytes, nm->values, slots * sizeof(float)) || ranges_overlap(x, bytes, nm->index, slots) ||
            ranges_overlap(out, out ? bytes : 0, nm->values, slots * sizeof(float)) || ranges_overlap(out, out ? bytes : 0, nm->index, slots))
            return sdgp_fail(err, SDGP_ERR_INVALID, "prune: the compressed buffers overlap x or out");
        if (cfg->fn == SDGP_PRUNE_NONE && cfg->n != cfg->m)
            return sdgp_fail(err, SDGP_ERR_INVALID, "prune: fn none keeps every value, so a compressed output needs n = m (got %d:%d)", cfg->n, cfg->m);
    }
    sdgp_isa isa;
    if ((st = sdgp_isa_resolve(cfg->isa, &isa, err))) return st;
    const prune_kernels *K = prune_kernels_for(isa);
    const int nt = cfg->threads > 0 ? cfg->threads : omp_get_max_threads();

    prune_job j = job_of(cfg);
    j.B = B;
    j.P = P;
    j.C = C;
    j.rows = rows;
    j.x = x;
    j.out = out;
    j.vals = nm ? nm->values : NULL;
    j.idx = nm ? nm->index : NULL;
    j.key = sdgp_philox_make_key(cfg->seed, cfg->step, cfg->layer);

    j.layout = cfg->layout;

    const int identity = cfg->fn == SDGP_PRUNE_NONE || cfg->n == cfg->m;
    if (identity && cfg->layout == SDGP_LAYOUT_NHWC) {
        prune_identity(&j, nt);
        return SDGP_OK;
    }
    if (cfg->mask_block > 1 && cfg->axis == SDGP_AXIS_ROW) {
        if (nm) return sdgp_fail(err, SDGP_ERR_UNSUPPORTED, "prune: row masks shared by channels (mask_block=%d) write the dense output only",
                                 cfg->mask_block);
        if (!out) return sdgp_fail(err, SDGP_ERR_INVALID, "prune: row masks shared by channels need out");
        K = &prune_kernels_rowblock;
        j.block = cfg->mask_block;
    } else if (cfg->mask_block > 1) {
        j.rank = K;
        K = &prune_kernels_block;
        j.block = cfg->mask_block;
        j.line = cfg->mask_line ? cfg->mask_line : P;
    }
    if (cfg->layout == SDGP_LAYOUT_NCHW) return prune_nchw(identity ? NULL : K, &j, nt, isa, cfg->scope, err);
    if (cfg->fn == SDGP_PRUNE_RESCALED) return prune_rescaled(K, &j, nt, cfg->scope, err);

    const int64_t tiles = cfg->axis == SDGP_AXIS_CHANNEL ? rows : rows / cfg->m;
    int bad = 0;
#pragma omp parallel num_threads(nt) reduction(| : bad)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        bad |= K->prune(&j, tiles * t / T, tiles * (t + 1) / T);
    }
    if (bad) return prune_numeric_error(&j, sdgp_prune_fn_name(cfg->fn), err);
    return SDGP_OK;
}
