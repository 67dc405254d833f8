/* The dense matrix product of matmul_dnnl.h through oneDNN 2.x's matmul primitive.
 *
 * As the dense convolution (conv_dnnl.c): one CPU engine and stream per object, the primitive
 * created once for fixed shapes, memory objects without data that each run points at the
 * caller's buffers, and the scratchpad in user mode in a buffer the object owns (so that oneDNN
 * allocates nothing while it runs and the time of a run is the product alone). The operands keep
 * the caller's row-major layouts; a transposed operand is described by its strides, which oneDNN's
 * matmul takes directly (its kernels read either order), so no reorder is ever run.
 *
 * Threads: oneDNN's OpenMP runtime sizes its parallel regions by omp_get_max_threads() of the
 * calling thread, at creation (it fixes the work split) and at each run; with threads > 0 both set
 * it to `threads` and restore the caller's value. */
#include "nn/matmul_dnnl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dnnl.h>
#include <dnnl_debug.h>

#include "nn/onednn_team.h"

struct matmul_dnnl {
    int64_t M, N, K;
    int threads;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c, scratch;
    void *scratch_buf;
    char impl[64];
};

static sdgp_status ok(dnnl_status_t s, sdgp_error *err, const char *what) {
    if (s == dnnl_success) return SDGP_OK;
    return sdgp_fail(err, SDGP_ERR_INTERNAL, "matmul: oneDNN %s failed: %s (dnnl status %d)", what, dnnl_status2str(s),
                     (int)s);
}

/* rows x cols of a row-major matrix, or with trans the transpose of a stored cols x rows one. */
static dnnl_status_t matrix_md(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int trans) {
    dnnl_dims_t dims = {rows, cols}, strides = {cols, 1};
    if (trans) strides[0] = 1, strides[1] = rows;
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dnnl_f32, strides);
}

/* The primitive and its scratchpad (the descs and attr are freed by the caller, built or not). */
static sdgp_status build_prim(matmul_dnnl *mm, const dnnl_memory_desc_t *ma, const dnnl_memory_desc_t *mb,
                              const dnnl_memory_desc_t *mc, dnnl_primitive_attr_t *attr, dnnl_primitive_desc_t *pd,
                              sdgp_error *err) {
    dnnl_matmul_desc_t desc;
    sdgp_status st;
    if ((st = ok(dnnl_matmul_desc_init(&desc, ma, mb, NULL, mc), err, "matmul desc")) ||
        (st = ok(dnnl_primitive_attr_create(attr), err, "attr")) ||
        (st = ok(dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user), err, "attr")) ||
        (st = ok(dnnl_primitive_desc_create(pd, &desc, *attr, mm->engine, NULL), err, "matmul primitive desc")) ||
        (st = ok(dnnl_primitive_create(&mm->prim, *pd), err, "matmul primitive")))
        return st;
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(*pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl) impl = "?";
    snprintf(mm->impl, sizeof mm->impl, "%s", impl);
    const dnnl_memory_desc_t *ms = dnnl_primitive_desc_query_md(*pd, dnnl_query_scratchpad_md, 0);
    const size_t bytes = ms ? dnnl_memory_desc_get_size(ms) : 0;
    /* at least one line, so that the scratchpad's handle is never NULL */
    if (!(mm->scratch_buf = aligned_alloc(64, bytes > 64 ? (bytes + 63) / 64 * 64 : 64)))
        return sdgp_fail(err, SDGP_ERR_NOMEM, "matmul: scratchpad of %zu bytes", bytes);
    return ok(dnnl_memory_create(&mm->scratch, ms, mm->engine, mm->scratch_buf), err, "scratchpad memory");
}

static sdgp_status build(matmul_dnnl *mm, int trans_a, int trans_b, sdgp_error *err) {
    dnnl_memory_desc_t ma, mb, mc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    /* on failure st says what failed; what was made is freed by matmul_dnnl_destroy */
    sdgp_status st = ok(dnnl_engine_create(&mm->engine, dnnl_cpu, 0), err, "engine create");
    if (!st) st = ok(dnnl_stream_create(&mm->stream, mm->engine, dnnl_stream_default_flags), err, "stream create");
    if (!st) st = ok(matrix_md(&ma, mm->M, mm->K, trans_a), err, "A desc");
    if (!st) st = ok(matrix_md(&mb, mm->K, mm->N, trans_b), err, "B desc");
    if (!st) st = ok(matrix_md(&mc, mm->M, mm->N, 0), err, "C desc");
    if (!st) st = build_prim(mm, &ma, &mb, &mc, &attr, &pd, err);
    if (!st) st = ok(dnnl_memory_create(&mm->a, &ma, mm->engine, DNNL_MEMORY_NONE), err, "memory create");
    if (!st) st = ok(dnnl_memory_create(&mm->b, &mb, mm->engine, DNNL_MEMORY_NONE), err, "memory create");
    if (!st) st = ok(dnnl_memory_create(&mm->c, &mc, mm->engine, DNNL_MEMORY_NONE), err, "memory create");
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return st;
}

sdgp_status matmul_dnnl_create(matmul_dnnl **out, int64_t M, int64_t N, int64_t K, int trans_a, int trans_b,
                               int threads, sdgp_error *err) {
    if (!out) return sdgp_fail(err, SDGP_ERR_INVALID, "matmul_create: NULL output");
    *out = NULL;
    if (M < 1 || N < 1 || K < 1 || threads < 0)
        return sdgp_fail(err, SDGP_ERR_INVALID, "matmul_create: M=%lld N=%lld K=%lld threads=%d (sizes must be >= 1, "
                         "threads >= 0)", (long long)M, (long long)N, (long long)K, threads);
    matmul_dnnl *mm = calloc(1, sizeof *mm);
    if (!mm) return sdgp_fail(err, SDGP_ERR_NOMEM, "matmul_create: out of memory");
    mm->M = M, mm->N = N, mm->K = K, mm->threads = threads;
    const int saved = onednn_team_enter(threads);
    sdgp_status st = build(mm, trans_a != 0, trans_b != 0, err);
    onednn_team_leave(threads, saved);
    if (st != SDGP_OK) {
        matmul_dnnl_destroy(mm);
        return st;
    }
    *out = mm;
    return SDGP_OK;
}

/* Points a memory object at caller data (oneDNN takes void *; inputs are only read). */
static sdgp_status bind(dnnl_memory_t m, const void *p, sdgp_error *err) {
    return ok(dnnl_memory_set_data_handle(m, (void *)(uintptr_t)p), err, "set data handle");
}

sdgp_status matmul_dnnl_run(matmul_dnnl *mm, float *c, const float *a, const float *b, sdgp_error *err) {
    if (!mm || !c || !a || !b) return sdgp_fail(err, SDGP_ERR_INVALID, "matmul_run: NULL argument");
    const int saved = onednn_team_enter(mm->threads);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mm->a}, {DNNL_ARG_WEIGHTS, mm->b}, {DNNL_ARG_DST, mm->c},
                               {DNNL_ARG_SCRATCHPAD, mm->scratch}};
    sdgp_status st;
    if (!(st = bind(mm->a, a, err)) && !(st = bind(mm->b, b, err)) && !(st = bind(mm->c, c, err)) &&
        !(st = ok(dnnl_primitive_execute(mm->prim, mm->stream, 4, args), err, "matmul execute")))
        st = ok(dnnl_stream_wait(mm->stream), err, "matmul stream wait");
    onednn_team_leave(mm->threads, saved);
    return st;
}

const char *matmul_dnnl_impl(const matmul_dnnl *mm) { return mm ? mm->impl : "?"; }

void matmul_dnnl_destroy(matmul_dnnl *mm) {
    if (!mm) return;
    dnnl_memory_t mems[4] = {mm->a, mm->b, mm->c, mm->scratch};
    for (int i = 0; i < 4; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
    if (mm->prim) dnnl_primitive_destroy(mm->prim);
    if (mm->stream) dnnl_stream_destroy(mm->stream);
    if (mm->engine) dnnl_engine_destroy(mm->engine);
    free(mm->scratch_buf);
    free(mm);
}
