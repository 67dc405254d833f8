/* The dense convolution of include/sdgp/conv.h through oneDNN's C API (2.x).
 *
 * One sdgp_conv holds, for one geometry, a CPU engine and stream and three passes (forward,
 * backward-data, backward-weights; conv_dnnl_pass.c builds them), each planned on its own:
 * - DIRECT: one oneDNN call on the caller's NHWC tensors in place (its jit kernels take NHWC fp32
 *   directly on AVX2/AVX-512, so we ask for exactly that layout).
 * - WINOGRAD: oneDNN's Winograd kernel only takes its blocked layout (nChw16c), so each call
 *   reorders the caller's NHWC into blocked copies in the workspace (and the result back).
 *   Measured on this 2-core AVX-512 CPU for the ResNet-9 layers (3x3, 64-512 channels, 4x4 to 32x32
 *   pixels): each pass 1.5-2.5x faster than DIRECT; one reorder costs 1-25 % of a pass's time.
 *   Under a workspace limit a pass runs as several calls: chunks of the batch x slices of the
 *   channels it writes (conv_pass_plan). Where oneDNN has no Winograd kernel (no AVX-512), the
 *   passes run sdgp's own F(4x4,3x3) kernels on NHWC (conv_sdgp_wino.c).
 * Weights change every step, so every call reorders the caller's OIHW into the layout oneDNN chose
 * (format_tag any), and backward-weights computes into its layout and reorders back.
 *
 * Workspace: the scratchpads (user mode), the weights in oneDNN's layouts and the blocked copies
 * are needed only during a call, so they live in one buffer that the passes take turns in (calls
 * run one after another on one stream). By default the conv owns that buffer;
 * sdgp_conv_set_workspace lets convs that never run at the same time (the layers of one model)
 * share one. One sdgp_conv must therefore not be used from two threads at once.
 *
 * Threads: oneDNN's OpenMP runtime sizes its parallel regions by omp_get_max_threads() of the
 * calling thread, both when a primitive is created (it fixes the work split) and when it runs.
 * With threads > 0, create and every call set that value to `threads` for their duration and
 * restore the caller's value before returning; threads == 0 leaves the caller's setting alone. */
#include "sdgp/conv.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conv_dnnl_internal.h"
#include "nn/onednn_team.h"

struct sdgp_conv {
    conv_ctx ctx; /* geometry, bias, engine */
    int threads;
    dnnl_stream_t stream;
    conv_pass pass[3]; /* indexed by sdgp_conv_pass */
    void *own_ws;      /* the conv's own workspace (NULL while a shared one is set) */
    void *ws;          /* the workspace in use */
    float *dbias_sink; /* 2 Cout: dbias when the caller passes NULL; a later chunk's dbias (with_bias) */
};

/* The geometry must be one sdgp_conv_geom_init accepts; checking it again keeps a hand-filled
 * struct from reaching oneDNN with inconsistent output sizes. */
static sdgp_status check_geom(const sdgp_conv_geom *g, sdgp_error *err) {
    sdgp_conv_geom chk;
    sdgp_status st = sdgp_conv_geom_init(&chk, g->B, g->H, g->W, g->Cin, g->Cout, g->kh, g->kw, g->stride, g->pad, err);
    if (st == SDGP_OK) st = sdgp_conv_geom_set_groups(&chk, g->groups, err);
    if (st != SDGP_OK) return st;
    if (chk.Ho != g->Ho || chk.Wo != g->Wo)
        return sdgp_fail(err, SDGP_ERR_INVALID, "conv_create: output %dx%d does not match the geometry (expected %dx%d)",
                         g->Ho, g->Wo, chk.Ho, chk.Wo);
    return SDGP_OK;
}

static const char *const pass_names[3] = {"forward", "backward-data", "backward-weights"};

/* AUTO's rule, from the layers of ResNet-9 timed on the Zen 4 host with oneDNN's kernel (`sdgp
 * bench layers --conv-algo`): Winograd's 4x4 output tiles and 16-channel blocks are padded, so it
 * loses where few input channels fill a block (1 -> 32 channels: 5x slower) or where the output
 * wastes many tile positions (5x5 outputs use 25 of 64: 15 % slower), and wins elsewhere (14x14:
 * 1.2-1.4x, 32x32 and 4x4-16x16 with 128-512 channels: 2-2.5x). sdgp's kernels (no channel blocks)
 * win at 5x5 and 6x6 outputs too, in all three passes, on the Zen 3 host (`--conv-algo measured`
 * chose them there: ResNet-9 w0.25 at batch 512 and w1 at batch 64), so their share is a third.
 * used_twelfths: the share of tile outputs that must be used, in twelfths. */
static int winograd_pays(const sdgp_conv_geom *g, int used_twelfths) {
    if (g->groups > 1) return 0; /* no grouped Winograd kernel */
    int64_t tiles = (int64_t)((g->Ho + 3) / 4) * ((g->Wo + 3) / 4) * 16;
    return g->Cin >= 16 && (int64_t)g->Ho * g->Wo * 12 >= tiles * used_twelfths;
}
#define ONEDNN_USED 9 /* 75 % */
#define SDGP_USED 4   /* 33 % */

/* sdgp's 5x5 stride-2 passes run its 3x3 kernels by space-to-depth (conv_sdgp_wino.c). Against
 * oneDNN's direct kernel on Zen 3, AVX2 (`KERNEL_AB_ALGOS=direct,winograd build/sdgp_kernel_ab
 * dense-fwd|dense-data|dense-wgrad`, docs/bench/hosts/amd-zen3-f25m1/dense-s2d.txt), at 32 / 64 / 128 input
 * channels: backward-weights 1.53x / 1.72x / 2.82x, forward 1.15x / 1.26x / 1.78x, backward-data
 * 0.85x / 1.02x / 1.28x. At 32 the forward's gain (1.06-1.30x in three runs) did not pay for its
 * rounding (F(4x4)'s: 4x the direct kernel's rms) at ResNet-9's 5x5 layer: it put the PyTorch
 * golden step's gradients past its tolerance in 9 of 66 data seeds against 6 with the direct
 * forward (rounding across a ReLU or max-pool boundary, as the 3x3 Winograd layers do;
 * tests/golden_step.py), failing one case. So below 64 input channels those two stay direct.
 * Where oneDNN runs its AVX-512 kernels (direct at about 0.9 of the FMA ceiling) the gains differ:
 * on Zen 5 (`sdgp bench impls`, ResNet-9's 5x5 layer, 2 threads, docs/bench/hosts/amd-zen5-f26m2/impls/
 * s2d-5x5.txt), at 32 / 64 / 128 input channels: forward 1.02-1.05x / 1.35x / 1.40x, backward-data
 * 1.23-1.26x / 1.55x / 1.70x, backward-weights 0.83-0.89x / 1.16x / 1.33x: there all three pay from
 * 64 input channels and backward-data from 32, backward-weights not at 32. SDGP_WINOGRAD=sdgp
 * (sdgp_first) takes the AVX2 rule on any host. oneDNN's ISA decides, not the CPU's: under
 * DNNL_MAX_CPU_ISA=AVX2 an AVX-512 CPU runs oneDNN as the Zen 3 host did. */
static int s2d_pass_pays(const sdgp_conv_geom *g, sdgp_conv_pass pass, int sdgp_first) {
    if (!conv_sdgp_wino_s2d(g)) return 1;
    const int onednn_avx512 = (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
    if (!sdgp_first && onednn_avx512) return g->Cin >= 64 || (pass == SDGP_CONV_BACKWARD_DATA && g->Cin >= 32);
    return pass == SDGP_CONV_BACKWARD_WEIGHTS || g->Cin >= 64;
}

static int runs_sdgp(const conv_pass *p) { return p->own_fwd || p->own_data || p->own_wgrad; }

/* What conv_build plans: per_pass ? pass_algo[i] : algo for pass i. */
typedef struct {
    sdgp_conv_algo algo;
    size_t workspace_limit;
    int per_pass;
    sdgp_conv_algo pass_algo[3];
} build_opts;

static sdgp_status conv_build(sdgp_conv *c, const build_opts *opt, sdgp_error *err) {
    sdgp_status st;
    if ((st = conv_dnnl_ok(dnnl_engine_create(&c->ctx.engine, dnnl_cpu, 0), err, "engine create")) ||
        (st = conv_dnnl_ok(dnnl_stream_create(&c->stream, c->ctx.engine, dnnl_stream_default_flags), err,
                           "stream create")))
        return st;
    const int order = c->ctx.wino_order;
    const int pays_sdgp = winograd_pays(&c->ctx.g, SDGP_USED), pays_onednn = winograd_pays(&c->ctx.g, ONEDNN_USED);
    int no_wino = 0; /* one algo for all passes under AUTO: once oneDNN lacks Winograd, all go direct */
    for (int i = 0; i < 3; i++) {
        const sdgp_conv_algo asked = opt->per_pass ? opt->pass_algo[i] : opt->algo;
        const int autom = asked == SDGP_CONV_AUTO;
        const int pays = pays_sdgp && !no_wino && s2d_pass_pays(&c->ctx.g, (sdgp_conv_pass)i, order > 0);
        sdgp_conv_algo algo = autom ? (pays ? SDGP_CONV_WINOGRAD : SDGP_CONV_DIRECT) : asked;
        conv_pass *p = &c->pass[i];
        p->pass = (sdgp_conv_pass)i;
        st = conv_pass_plan(p, &c->ctx, algo, opt->workspace_limit, autom, err);
        const int unsupported = st == SDGP_ERR_UNSUPPORTED; /* no Winograd kernel here */
        if (unsupported) no_wino = !opt->per_pass;
        /* the rule of the implementation the list gave */
        const int slower = st == SDGP_OK && p->algo == SDGP_CONV_WINOGRAD && !runs_sdgp(p) && !pays_onednn;
        if (autom && (unsupported || slower)) {
            if (slower) conv_pass_free(p);
            st = conv_pass_plan(p, &c->ctx, SDGP_CONV_DIRECT, 0, 1, err);
        }
        if (st != SDGP_OK) return st;
    }
    c->own_ws = aligned_alloc(64, sdgp_conv_workspace_bytes(c));
    if (!c->own_ws) return sdgp_fail(err, SDGP_ERR_NOMEM, "conv_create: workspace of %zu bytes", sdgp_conv_workspace_bytes(c));
    c->ws = c->own_ws;
    for (int i = 0; i < 3; i++)
        if ((st = conv_pass_bind(&c->pass[i], c->ws, err))) return st;
    if (c->ctx.with_bias && !(c->dbias_sink = malloc(2 * sizeof(float) * (size_t)c->ctx.g.Cout)))
        return sdgp_fail(err, SDGP_ERR_NOMEM, "conv_create: %d bias floats", 2 * c->ctx.g.Cout);
    return SDGP_OK;
}

static sdgp_status create(sdgp_conv **out, const sdgp_conv_geom *g, int with_bias, int threads, const build_opts *opt,
                          sdgp_error *err) {
    if (!out || !g) return sdgp_fail(err, SDGP_ERR_INVALID, "conv_create: NULL %s", out ? "geometry" : "output");
    *out = NULL;
    if (threads < 0) return sdgp_fail(err, SDGP_ERR_INVALID, "conv_create: threads=%d < 0", threads);
    for (int i = opt->per_pass ? 0 : 2; i < 3; i++) {
        const sdgp_conv_algo a = opt->per_pass ? opt->pass_algo[i] : opt->algo;
        const char *what = opt->per_pass ? pass_names[i] : "all passes";
        if (a == SDGP_CONV_MEASURED)
            return sdgp_fail(err, SDGP_ERR_INVALID,
                             "conv_create (%s): 'measured' is chosen by a model, which times the passes; a conv takes "
                             "direct, winograd or auto per pass",
                             what);
        if (a != SDGP_CONV_DIRECT && a != SDGP_CONV_WINOGRAD && a != SDGP_CONV_AUTO)
            return sdgp_fail(err, SDGP_ERR_INVALID, "conv_create (%s): unknown algorithm %d", what, (int)a);
    }
    sdgp_status st = check_geom(g, err);
    if (st != SDGP_OK) return st;
    sdgp_conv *c = calloc(1, sizeof *c);
    if (!c) return sdgp_fail(err, SDGP_ERR_NOMEM, "conv_create: out of memory");
    c->ctx.g = *g;
    c->ctx.with_bias = with_bias != 0;
    c->ctx.threads = threads;
    if ((st = conv_sdgp_wino_order(&c->ctx.wino_order, err))) {
        free(c);
        return st;
    }
    c->threads = threads;
    int saved = onednn_team_enter(threads);
    st = conv_build(c, opt, err);
    onednn_team_leave(threads, saved);
    if (st != SDGP_OK) {
        sdgp_conv_destroy(c);
        return st;
    }
    *out = c;
    return SDGP_OK;
}

sdgp_status sdgp_conv_create_opts(sdgp_conv **out, const sdgp_conv_geom *g, int with_bias, int threads,
                                  const sdgp_conv_options *opt, sdgp_error *err) {
    const build_opts b = {opt ? opt->algo : SDGP_CONV_DIRECT, opt ? opt->workspace_limit : 0, 0, {0, 0, 0}};
    return create(out, g, with_bias, threads, &b, err);
}

sdgp_status sdgp_conv_create_passes(sdgp_conv **out, const sdgp_conv_geom *g, int with_bias, int threads,
                                    const sdgp_conv_algo pass_algo[3], const sdgp_conv_options *opt, sdgp_error *err) {
    if (!pass_algo) return sdgp_fail(err, SDGP_ERR_INVALID, "conv_create_passes: NULL algorithms");
    const build_opts b = {SDGP_CONV_DIRECT, opt ? opt->workspace_limit : 0, 1, {pass_algo[0], pass_algo[1], pass_algo[2]}};
    return create(out, g, with_bias, threads, &b, err);
}

sdgp_status sdgp_conv_create_algo(sdgp_conv **out, const sdgp_conv_geom *g, int with_bias, int threads,
                                  sdgp_conv_algo algo, sdgp_error *err) {
    const sdgp_conv_options opt = {algo, 0};
    return sdgp_conv_create_opts(out, g, with_bias, threads, &opt, err);
}

sdgp_status sdgp_conv_create(sdgp_conv **out, const sdgp_conv_geom *g, int with_bias, int threads, sdgp_error *err) {
    return sdgp_conv_create_opts(out, g, with_bias, threads, NULL, err);
}

void sdgp_conv_destroy(sdgp_conv *c) {
    if (!c) return;
    for (int i = 0; i < 3; i++) conv_pass_free(&c->pass[i]);
    if (c->stream) dnnl_stream_destroy(c->stream);
    if (c->ctx.engine) dnnl_engine_destroy(c->ctx.engine);
    free(c->own_ws);
    free(c->dbias_sink);
    free(c);
}

size_t sdgp_conv_workspace_bytes(const sdgp_conv *c) {
    size_t b = 64; /* at least one line, so that the views are never NULL */
    for (int i = 0; c && i < 3; i++)
        if (conv_pass_bytes(&c->pass[i]) > b) b = conv_pass_bytes(&c->pass[i]);
    return c ? b : 0;
}

sdgp_conv_algo sdgp_conv_get_algo(const sdgp_conv *c) {
    for (int i = 0; c && i < 3; i++)
        if (c->pass[i].algo == SDGP_CONV_WINOGRAD) return SDGP_CONV_WINOGRAD;
    return SDGP_CONV_DIRECT;
}

sdgp_conv_pass_plan sdgp_conv_get_plan(const sdgp_conv *c, sdgp_conv_pass pass) {
    sdgp_conv_pass_plan r = {SDGP_CONV_DIRECT, 0, 0, 0, "onednn"};
    if (!c || pass < SDGP_CONV_FORWARD || pass > SDGP_CONV_BACKWARD_WEIGHTS) return r;
    const conv_pass *p = &c->pass[pass];
    r.algo = p->algo;
    if (runs_sdgp(p)) r.impl = "sdgp";
    r.chunk = p->chunk;
    r.parts = p->parts;
    r.workspace_bytes = conv_pass_bytes(p);
    return r;
}

#define ALGO_NAME(name) #name,
const char *const sdgp_conv_algo_names[] = {SDGP_CONV_ALGO_LIST(ALGO_NAME) NULL}; /* by sdgp_conv_algo */
_Static_assert(sizeof sdgp_conv_algo_names / sizeof *sdgp_conv_algo_names == SDGP_CONV_MEASURED + 2,
               "SDGP_CONV_ALGO_LIST must name every sdgp_conv_algo");

const char *sdgp_conv_algo_name(sdgp_conv_algo algo) {
    return algo >= SDGP_CONV_DIRECT && algo <= SDGP_CONV_MEASURED ? sdgp_conv_algo_names[algo] : "?";
}

/* dnnl_get_effective_cpu_isa names what oneDNN's JIT kernels target here: the CPU's best,
 * lowered by oneDNN's own DNNL_MAX_CPU_ISA (SDGP_ISA does not reach oneDNN). */
const char *sdgp_conv_onednn_isa(void) {
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
    }
}

sdgp_status sdgp_conv_algo_parse(const char *name, sdgp_conv_algo *out, sdgp_error *err) {
    if (!name || !out) return sdgp_fail(err, SDGP_ERR_INVALID, "conv algorithm name or output is NULL");
    char all[64] = "";
    for (int i = SDGP_CONV_DIRECT; i <= SDGP_CONV_MEASURED; i++) {
        if (strcmp(name, sdgp_conv_algo_names[i]) == 0) {
            *out = (sdgp_conv_algo)i;
            return SDGP_OK;
        }
        strcat(strcat(all, i ? (i == SDGP_CONV_MEASURED ? " or " : ", ") : ""), sdgp_conv_algo_names[i]);
    }
    return sdgp_fail(err, SDGP_ERR_INVALID, "unknown conv algorithm '%s' (expected %s)", name, all);
}

sdgp_status sdgp_conv_set_workspace(sdgp_conv *c, void *ws, sdgp_error *err) {
    if (!c) return sdgp_fail(err, SDGP_ERR_INVALID, "conv_set_workspace: NULL conv");
    if ((uintptr_t)ws % 64 != 0)
        return sdgp_fail(err, SDGP_ERR_INVALID, "conv_set_workspace: buffer %p is not 64-byte aligned", ws);
    if (ws && ws == c->own_ws) return SDGP_OK; /* already in use, and not to be freed below */
    void *own = NULL;
    if (!ws) { /* back to a workspace of its own */
        if (c->own_ws) return SDGP_OK;
        own = aligned_alloc(64, sdgp_conv_workspace_bytes(c));
        if (!own) return sdgp_fail(err, SDGP_ERR_NOMEM, "conv_set_workspace: %zu bytes", sdgp_conv_workspace_bytes(c));
        ws = own;
    }
    sdgp_status st = SDGP_OK;
    for (int i = 0; i < 3 && st == SDGP_OK; i++) st = conv_pass_bind(&c->pass[i], ws, err);
    if (st != SDGP_OK) { /* the views may be half rebound: point them all back where they were */
        free(own);
        for (int i = 0; i < 3; i++) (void)conv_pass_bind(&c->pass[i], c->ws, NULL);
        return st;
    }
    free(c->own_ws);
    c->own_ws = own;
    c->ws = ws;
    return SDGP_OK;
}

/* ---- the calls ---- */

/* Points a memory object at caller data (oneDNN takes void *; inputs are only read). */
static sdgp_status bind(dnnl_memory_t m, const void *p, sdgp_error *err) {
    return conv_dnnl_ok(dnnl_memory_set_data_handle(m, (void *)(uintptr_t)p), err, "set data handle");
}

static sdgp_status run(sdgp_conv *c, dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args, sdgp_error *err,
                       const char *name) {
    sdgp_status st = conv_dnnl_ok(dnnl_primitive_execute(p, c->stream, nargs, args), err, name);
    if (st == SDGP_OK) st = conv_dnnl_ok(dnnl_stream_wait(c->stream), err, name);
    return st;
}

static sdgp_status reorder(sdgp_conv *c, const conv_reorder *r, dnnl_memory_t from, dnnl_memory_t to, sdgp_error *err) {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}, {DNNL_ARG_SCRATCHPAD, r->scratch}};
    return run(c, r->prim, 3, args, err, r->name);
}

/* Forward and backward-data: the caller's weights slice (p->w, bound) into the primitive's layout. */
static sdgp_status weights_in(sdgp_conv *c, conv_pass *p, sdgp_error *err) {
    return p->wmem ? reorder(c, &p->w_re, p->w, p->wmem, err) : SDGP_OK;
}

/* One oneDNN call of pass p on x, y, w, b as bound by the caller, through the blocked copies when
 * WINOGRAD (whose reorders the caller runs). */
static sdgp_status run_prim(sdgp_conv *c, conv_pass *p, sdgp_error *err) {
    /* the exec-arg ids of x, y, w and b (0: the pass has no bias argument), indexed by sdgp_conv_pass */
    static const int ids[3][4] = {{DNNL_ARG_SRC, DNNL_ARG_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS},
                                  {DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, 0},
                                  {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS}};
    const int *id = ids[p->pass], wino = p->algo == SDGP_CONV_WINOGRAD;
    dnnl_exec_arg_t args[5] = {{id[0], wino ? p->xb : p->x},
                               {id[1], wino ? p->yb : p->y},
                               {id[2], p->wmem ? p->wmem : p->w},
                               {DNNL_ARG_SCRATCHPAD, p->scratch},
                               {id[3], p->b}};
    return run(c, p->prim, c->ctx.with_bias && id[3] ? 5 : 4, args, err, p->name);
}

static sdgp_status forward_impl(sdgp_conv *c, float *y, const float *x, const float *w, const float *bias,
                                sdgp_error *err) {
    const sdgp_conv_geom *g = &c->ctx.g;
    conv_pass *p = &c->pass[SDGP_CONV_FORWARD];
    if (p->own_fwd) return conv_sdgp_wino_forward(p, y, x, w, c->ctx.with_bias ? bias : NULL, err);
    const int wino = p->algo == SDGP_CONV_WINOGRAD;
    const size_t xs = (size_t)g->H * g->W * g->Cin, ys = (size_t)g->Ho * g->Wo * g->Cout;
    const size_t ws = (size_t)p->slice * g->Cin * g->kh * g->kw; /* floats of a weights slice */
    sdgp_status st;
    for (int b0 = 0; b0 < g->B; b0 += p->chunk) {
        if ((st = bind(p->x, x + b0 * xs, err)) || (wino && (st = reorder(c, &p->x_re, p->x, p->xb, err)))) return st;
        for (int s = 0; s < p->parts; s++) {
            const size_t o = (size_t)s * p->slice;
            if ((st = bind(p->w, w + s * ws, err)) || (st = bind(p->y, y + b0 * ys + o, err)) ||
                (c->ctx.with_bias && (st = bind(p->b, bias + o, err))) ||
                ((p->parts > 1 || b0 == 0) && (st = weights_in(c, p, err))) || (st = run_prim(c, p, err)) ||
                (wino && (st = reorder(c, &p->y_re, p->yb, p->y, err))))
                return st;
        }
    }
    return SDGP_OK;
}

sdgp_status sdgp_conv_forward(sdgp_conv *c, float *y, const float *x, const float *w, const float *bias,
                              sdgp_error *err) {
    if (!c || !y || !x || !w) return sdgp_fail(err, SDGP_ERR_INVALID, "conv_forward: NULL argument");
    if (c->ctx.with_bias && !bias)
        return sdgp_fail(err, SDGP_ERR_INVALID, "conv_forward: created with bias but bias is NULL");
    int saved = onednn_team_enter(c->threads);
    sdgp_status st = forward_impl(c, y, x, w, bias, err);
    onednn_team_leave(c->threads, saved);
    return st;
}

static sdgp_status backward_data_impl(sdgp_conv *c, float *dx, const float *dy, const float *w, sdgp_error *err) {
    const sdgp_conv_geom *g = &c->ctx.g;
    conv_pass *p = &c->pass[SDGP_CONV_BACKWARD_DATA];
    if (p->own_data) return conv_sdgp_wino_backward_data(p, dx, dy, w, err);
    const int wino = p->algo == SDGP_CONV_WINOGRAD;
    const size_t xs = (size_t)g->H * g->W * g->Cin, ys = (size_t)g->Ho * g->Wo * g->Cout;
    const size_t kk = (size_t)g->kh * g->kw;
    sdgp_status st;
    for (int b0 = 0; b0 < g->B; b0 += p->chunk) {
        if ((st = bind(p->y, dy + b0 * ys, err)) || (wino && (st = reorder(c, &p->y_re, p->y, p->yb, err)))) return st;
        for (int s = 0; s < p->parts; s++) { /* slice s: input channels [s slice, (s + 1) slice) */
            const size_t i = (size_t)s * p->slice;
            if ((st = bind(p->w, w + i * kk, err)) || (st = bind(p->x, dx + b0 * xs + i, err)) ||
                ((p->parts > 1 || b0 == 0) && (st = weights_in(c, p, err))) || (st = run_prim(c, p, err)) ||
                (wino && (st = reorder(c, &p->x_re, p->xb, p->x, err))))
                return st;
        }
    }
    return SDGP_OK;
}

sdgp_status sdgp_conv_backward_data(sdgp_conv *c, float *dx, const float *dy, const float *w, sdgp_error *err) {
    if (!c || !dx || !dy || !w) return sdgp_fail(err, SDGP_ERR_INVALID, "conv_backward_data: NULL argument");
    int saved = onednn_team_enter(c->threads);
    sdgp_status st = backward_data_impl(c, dx, dy, w, err);
    onednn_team_leave(c->threads, saved);
    return st;
}

/* The first chunk writes dw and dbias; later ones add to them (dw through the adding reorder,
 * dbias through the second half of the sink). */
static sdgp_status backward_weights_impl(sdgp_conv *c, float *dw, float *dbias, const float *x, const float *dy,
                                         sdgp_error *err) {
    const sdgp_conv_geom *g = &c->ctx.g;
    conv_pass *p = &c->pass[SDGP_CONV_BACKWARD_WEIGHTS];
    const int wino = p->algo == SDGP_CONV_WINOGRAD;
    const size_t xs = (size_t)g->H * g->W * g->Cin, ys = (size_t)g->Ho * g->Wo * g->Cout;
    const size_t ws = (size_t)p->slice * g->Cin * g->kh * g->kw;
    float *db = dbias ? dbias : c->dbias_sink, *db_chunk = c->dbias_sink ? c->dbias_sink + g->Cout : NULL;
    if (p->own_wgrad) return conv_sdgp_wino_backward_weights(p, dw, c->ctx.with_bias ? db : NULL, x, dy, err);
    sdgp_status st;
    for (int b0 = 0; b0 < g->B; b0 += p->chunk) {
        if ((st = bind(p->x, x + b0 * xs, err)) || (wino && (st = reorder(c, &p->x_re, p->x, p->xb, err)))) return st;
        for (int s = 0; s < p->parts; s++) {
            const size_t o = (size_t)s * p->slice;
            if ((st = bind(p->y, dy + b0 * ys + o, err)) || (st = bind(p->w, dw + s * ws, err)) ||
                (c->ctx.with_bias && (st = bind(p->b, (b0 == 0 ? db : db_chunk) + o, err))) ||
                (wino && (st = reorder(c, &p->y_re, p->y, p->yb, err))) || (st = run_prim(c, p, err)) ||
                (p->wmem && (st = reorder(c, b0 == 0 ? &p->w_re : &p->w_add, p->wmem, p->w, err))))
                return st;
            if (c->ctx.with_bias && b0 > 0)
                for (int k = 0; k < p->slice; k++) db[o + k] += db_chunk[o + k];
        }
    }
    return SDGP_OK;
}

sdgp_status sdgp_conv_backward_weights(sdgp_conv *c, float *dw, float *dbias, const float *x, const float *dy,
                                       sdgp_error *err) {
    if (!c || !dw || !x || !dy) return sdgp_fail(err, SDGP_ERR_INVALID, "conv_backward_weights: NULL argument");
    int saved = onednn_team_enter(c->threads);
    sdgp_status st = backward_weights_impl(c, dw, dbias, x, dy, err);
    onednn_team_leave(c->threads, saved);
    return st;
}
