/* One kernel (a sparse one, or a pass of the dense convolution) of two libsdgp builds, A and B, in
 * one process: this host's speed drifts by 5-15 % between processes, more than most kernel changes
 * gain, so both builds run interleaved on the same operands and the best time of each is compared.
 * Each library is dlopen'ed with RTLD_LOCAL, so its symbols stay its own. It also says whether the
 * outputs are bitwise the same.
 *
 *   build/sdgp_kernel_ab KERNEL LIB_A LIB_B B H Cin Cout k stride pad threads reps
 *
 * KERNEL:
 *   cout  the cout-form sparse-weight forward (sdgp_sparse_fwd_create_cout): random 2:4 weight masks
 *         along output channels
 *   sdgp  SDGP's backward-data (sdgp_sparse_bwd_*): dO compressed 2:4 along channels with random masks,
 *         dense weights, packed once (the timed product is sdgp_sparse_bwd_data alone)
 *   mvue  the weight gradient (sdgp_sparse_wgrad_*): dO compressed 2:4 along positions (rows) with
 *         random masks per channel, as MVUE's pruning leaves it
 *   dense-fwd, dense-data, dense-wgrad
 *         one pass of the dense convolution (sdgp_conv_*), dense operands, with the AUTO algorithm
 *         (what training runs) or, with KERNEL_AB_ALGOS=A,B in the environment (direct, winograd or
 *         auto each), side A's and side B's: e.g. one library against itself, direct against winograd
 *   bn-fwd, bn-bwd
 *         the BatchNorm + ReLU after the conv (sdgp_batchnorm_relu_forward_train / _backward, on
 *         B*Ho*Wo rows of Cout channels), in the OpenMP team of `threads` (OMP_NUM_THREADS is set)
 *
 * e.g. with the previous commit's library built in a worktree:
 *   git worktree add /tmp/old HEAD~1 && cmake -S /tmp/old -B /tmp/old/build -DCMAKE_BUILD_TYPE=Release &&
 *   cmake --build /tmp/old/build --target sdgp_shared &&
 *   build/sdgp_kernel_ab sdgp /tmp/old/build/libsdgp.so build/libsdgp.so 64 16 256 256 3 1 1 2 5
 * Run each comparison in both orders (A and B swapped): the first of a pair has a small edge. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "sdgp/conv.h"
#include "sdgp/prune.h"
#include "sdgp/sparse.h"

typedef sdgp_status (*geom_fn)(sdgp_conv_geom *, int, int, int, int, int, int, int, int, int, sdgp_error *);
typedef sdgp_status (*fwd_create_fn)(sdgp_sparse_fwd **, const sdgp_conv_geom *, int, int, sdgp_isa, int, sdgp_error *);
typedef sdgp_status (*fwd_pack_fn)(sdgp_sparse_fwd *, const float *, sdgp_error *);
typedef sdgp_status (*fwd_run_fn)(sdgp_sparse_fwd *, float *, const float *, sdgp_error *);
typedef sdgp_status (*bwd_create_fn)(sdgp_sparse_bwd **, const sdgp_conv_geom *, int, int, sdgp_isa, int, sdgp_error *);
typedef sdgp_status (*bwd_pack_fn)(sdgp_sparse_bwd *, const float *, sdgp_error *);
typedef sdgp_status (*bwd_run_fn)(sdgp_sparse_bwd *, float *, const sdgp_nm_tensor *, sdgp_error *);
typedef sdgp_status (*wgrad_create_fn)(sdgp_sparse_wgrad **, const sdgp_conv_geom *, int, int, sdgp_isa, int, sdgp_error *);
typedef sdgp_status (*wgrad_run_fn)(sdgp_sparse_wgrad *, float *, const float *, const sdgp_nm_tensor *, sdgp_error *);
typedef sdgp_status (*conv_create_fn)(sdgp_conv **, const sdgp_conv_geom *, int, int, sdgp_conv_algo, sdgp_error *);
typedef sdgp_status (*conv_fwd_fn)(sdgp_conv *, float *, const float *, const float *, const float *, sdgp_error *);
typedef sdgp_status (*conv_data_fn)(sdgp_conv *, float *, const float *, const float *, sdgp_error *);
typedef sdgp_status (*conv_wgrad_fn)(sdgp_conv *, float *, float *, const float *, const float *, sdgp_error *);
typedef void (*bn_fwd_fn)(float *, float *, float *, float *, float *, const float *, const float *, const float *, int64_t,
                          int, float, float);
typedef void (*bn_bwd_fn)(float *, float *, float *, const float *, const float *, const float *, const float *,
                          const float *, const float *, int64_t, int);

typedef enum {
    KERNEL_COUT,
    KERNEL_SDGP,
    KERNEL_MVUE,
    KERNEL_DENSE_FWD,
    KERNEL_DENSE_DATA,
    KERNEL_DENSE_WGRAD,
    KERNEL_BN_FWD,
    KERNEL_BN_BWD
} kernel_kind;
static const char *const KERNEL_NAMES[] = {"cout", "sdgp", "mvue", "dense-fwd", "dense-data", "dense-wgrad", "bn-fwd", "bn-bwd"};
#define KERNEL_KINDS 8
static int is_dense(kernel_kind k) { return k >= KERNEL_DENSE_FWD && k <= KERNEL_DENSE_WGRAD; }
static int is_bn(kernel_kind k) { return k == KERNEL_BN_FWD || k == KERNEL_BN_BWD; }

typedef struct {
    kernel_kind kind;
    int B, H, Cin, Cout, k, stride, pad, threads, reps;
    int Ho; /* output rows = columns */
    float *w, *x; /* w: the weights (all but mvue); x: the input (all but sdgp and dense-data) */
    float *dyd;   /* the dense kinds' and bn-bwd's dO (bn-bwd: the gradient of the BatchNorm + ReLU's output) */
    float *z, *gamma, *beta; /* the BatchNorm's input (B*Ho*Wo x Cout) and its parameters */
    sdgp_nm_tensor dy; /* the compressed dO (sdgp: along channels; mvue: along rows) */
} problem;

typedef struct {
    void *plan;
    fwd_run_fn fwd_run;
    bwd_run_fn bwd_run;
    wgrad_run_fn wgrad_run;
    conv_fwd_fn conv_fwd;
    conv_data_fn conv_data;
    conv_wgrad_fn conv_wgrad;
    bn_fwd_fn bn_fwd;
    bn_bwd_fn bn_bwd;
    float *stats; /* the BatchNorm's mean, rstd, running mean and variance, dgamma, dbeta: 6 x Cout */
    float *out;
    double best;
} side;

static const int KEEP24[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}}; /* the 2:4 subsets */

static float urand(void) { return (float)rand() / (float)RAND_MAX - 0.5f; }

static size_t out_floats(const problem *p) {
    switch (p->kind) {
    case KERNEL_SDGP:
    case KERNEL_DENSE_DATA: return (size_t)p->B * p->H * p->H * p->Cin;
    case KERNEL_MVUE:
    case KERNEL_DENSE_WGRAD: return (size_t)p->Cout * p->Cin * p->k * p->k;
    default: return (size_t)p->B * p->Ho * p->Ho * p->Cout;
    }
}

/* The operands: random values, random 2:4 masks (on the weights for cout, on dO for sdgp and mvue). 0 on failure. */
static int make_problem(problem *p) {
    const int taps = p->k * p->k;
    srand(3);
    if (p->kind != KERNEL_MVUE) { /* the weight gradient takes no weights */
        const size_t nw = (size_t)p->Cout * p->Cin * taps;
        if (!(p->w = malloc(nw * sizeof(float)))) return 0;
        for (int co = 0; co < p->Cout; co += 4)
            for (int ci = 0; ci < p->Cin; ci++)
                for (int t = 0; t < taps; t++) {
                    const int q = rand() % 6;
                    for (int r = 0; r < 4; r++) {
                        const int kept = p->kind != KERNEL_COUT || r == KEEP24[q][0] || r == KEEP24[q][1];
                        p->w[((size_t)(co + r) * p->Cin + ci) * taps + t] = kept ? urand() : 0.0f;
                    }
                }
    }
    if (is_bn(p->kind)) {
        const size_t nz = (size_t)p->B * p->Ho * p->Ho * p->Cout;
        p->z = malloc(nz * sizeof(float)), p->dyd = malloc(nz * sizeof(float));
        p->gamma = malloc((size_t)p->Cout * sizeof(float)), p->beta = malloc((size_t)p->Cout * sizeof(float));
        if (!p->z || !p->dyd || !p->gamma || !p->beta) return 0;
        for (size_t i = 0; i < nz; i++) p->z[i] = urand(), p->dyd[i] = urand();
        for (int c = 0; c < p->Cout; c++) p->gamma[c] = 1.0f + urand(), p->beta[c] = urand();
        return 1;
    }
    if (p->kind != KERNEL_SDGP && p->kind != KERNEL_DENSE_DATA) {
        const size_t nx = (size_t)p->B * p->H * p->H * p->Cin;
        if (!(p->x = malloc(nx * sizeof(float)))) return 0;
        for (size_t i = 0; i < nx; i++) p->x[i] = urand();
        if (p->kind == KERNEL_COUT) return 1;
    }
    if (is_dense(p->kind)) {
        const size_t ny = (size_t)p->B * p->Ho * p->Ho * p->Cout;
        if (!(p->dyd = malloc(ny * sizeof(float)))) return 0;
        for (size_t i = 0; i < ny; i++) p->dyd[i] = urand();
        return 1;
    }
    /* groups of 4 channels of a row (sdgp), or of 4 rows of a channel (mvue): 2 slots each, either way */
    const int64_t rows = (int64_t)p->B * p->Ho * p->Ho, groups = rows * p->Cout / 4;
    p->dy = (sdgp_nm_tensor){.axis = p->kind == KERNEL_MVUE ? SDGP_AXIS_ROW : SDGP_AXIS_CHANNEL, .n = 2, .m = 4, .rows = rows,
                             .C = p->Cout};
    p->dy.values = malloc((size_t)groups * 2 * sizeof(float));
    p->dy.index = malloc((size_t)groups * 2);
    if (!p->dy.values || !p->dy.index) return 0;
    for (int64_t gi = 0; gi < groups; gi++) {
        const int q = rand() % 6;
        for (int j = 0; j < 2; j++) p->dy.values[2 * gi + j] = urand(), p->dy.index[2 * gi + j] = (uint8_t)KEEP24[q][j];
    }
    return 1;
}

/* Loads one library and makes and packs its plan; 0 on failure (printed). */
/* Side k's algorithm for the dense kinds: KERNEL_AB_ALGOS=A,B, else AUTO; -1 for a name it does not know. */
static int dense_algo(int k) {
    const char *env = getenv("KERNEL_AB_ALGOS");
    if (!env) return SDGP_CONV_AUTO;
    const char *comma = strchr(env, ','), *name = k ? (comma ? comma + 1 : "") : env;
    const size_t len = k || !comma ? strlen(name) : (size_t)(comma - env);
    static const char *const names[] = {"direct", "winograd", "auto"};
    static const sdgp_conv_algo algos[] = {SDGP_CONV_DIRECT, SDGP_CONV_WINOGRAD, SDGP_CONV_AUTO};
    for (int i = 0; i < 3; i++)
        if (len == strlen(names[i]) && !strncmp(name, names[i], len)) return algos[i];
    return -1;
}

static int open_side(side *s, const char *lib, const problem *p, int k) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "kernel_ab: %s\n", dlerror());
        return 0;
    }
    geom_fn geom = (geom_fn)dlsym(h, "sdgp_conv_geom_init");
    sdgp_conv_geom g;
    sdgp_error e;
    if (!geom || geom(&g, p->B, p->H, p->H, p->Cin, p->Cout, p->k, p->k, p->stride, p->pad, &e) != SDGP_OK) {
        fprintf(stderr, "kernel_ab: %s: no geometry: %s\n", lib, geom ? e.msg : "sdgp_conv_geom_init missing");
        return 0;
    }
    sdgp_status st = SDGP_OK;
    if (is_bn(p->kind)) {
        s->bn_fwd = (bn_fwd_fn)dlsym(h, "sdgp_batchnorm_relu_forward_train");
        s->bn_bwd = (bn_bwd_fn)dlsym(h, "sdgp_batchnorm_relu_backward");
        if (!s->bn_fwd || !s->bn_bwd) return fprintf(stderr, "kernel_ab: %s lacks the BatchNorm's API\n", lib), 0;
        if (!(s->stats = calloc((size_t)6 * p->Cout, sizeof(float)))) return 0;
    } else if (is_dense(p->kind)) {
        conv_create_fn create = (conv_create_fn)dlsym(h, "sdgp_conv_create_algo");
        s->conv_fwd = (conv_fwd_fn)dlsym(h, "sdgp_conv_forward");
        s->conv_data = (conv_data_fn)dlsym(h, "sdgp_conv_backward_data");
        s->conv_wgrad = (conv_wgrad_fn)dlsym(h, "sdgp_conv_backward_weights");
        if (!create || !s->conv_fwd || !s->conv_data || !s->conv_wgrad)
            return fprintf(stderr, "kernel_ab: %s lacks the dense conv's API\n", lib), 0;
        const int algo = dense_algo(k);
        if (algo < 0)
            return fprintf(stderr, "kernel_ab: KERNEL_AB_ALGOS=%s: expected A,B, each direct, winograd or auto\n",
                           getenv("KERNEL_AB_ALGOS")),
                   0;
        sdgp_conv *conv = NULL;
        st = create(&conv, &g, 0, p->threads, (sdgp_conv_algo)algo, &e);
        s->plan = conv;
    } else if (p->kind == KERNEL_MVUE) {
        wgrad_create_fn create = (wgrad_create_fn)dlsym(h, "sdgp_sparse_wgrad_create");
        s->wgrad_run = (wgrad_run_fn)dlsym(h, "sdgp_sparse_wgrad_run");
        if (!create || !s->wgrad_run) return fprintf(stderr, "kernel_ab: %s lacks the weight gradient's API\n", lib), 0;
        sdgp_sparse_wgrad *plan = NULL;
        st = create(&plan, &g, 2, 4, SDGP_ISA_AUTO, p->threads, &e);
        s->plan = plan;
    } else if (p->kind == KERNEL_SDGP) {
        bwd_create_fn create = (bwd_create_fn)dlsym(h, "sdgp_sparse_bwd_create");
        bwd_pack_fn pack = (bwd_pack_fn)dlsym(h, "sdgp_sparse_bwd_pack");
        s->bwd_run = (bwd_run_fn)dlsym(h, "sdgp_sparse_bwd_data");
        if (!create || !pack || !s->bwd_run) return fprintf(stderr, "kernel_ab: %s lacks SDGP's backward-data API\n", lib), 0;
        sdgp_sparse_bwd *plan = NULL;
        st = create(&plan, &g, 2, 4, SDGP_ISA_AUTO, p->threads, &e);
        if (st == SDGP_OK) st = pack(plan, p->w, &e);
        s->plan = plan;
    } else {
        fwd_create_fn create = (fwd_create_fn)dlsym(h, "sdgp_sparse_fwd_create_cout");
        fwd_pack_fn pack = (fwd_pack_fn)dlsym(h, "sdgp_sparse_fwd_pack");
        s->fwd_run = (fwd_run_fn)dlsym(h, "sdgp_sparse_fwd_run");
        if (!create || !pack || !s->fwd_run) return fprintf(stderr, "kernel_ab: %s lacks the cout forward's API\n", lib), 0;
        sdgp_sparse_fwd *plan = NULL;
        st = create(&plan, &g, 2, 4, SDGP_ISA_AUTO, p->threads, &e);
        if (st == SDGP_OK) st = pack(plan, p->w, &e);
        s->plan = plan;
    }
    if (st != SDGP_OK) return fprintf(stderr, "kernel_ab: %s: %s\n", lib, e.msg), 0;
    s->out = malloc(out_floats(p) * sizeof(float));
    s->best = 1e30;
    return s->out != NULL;
}

static sdgp_status run_side(side *s, const problem *p) {
    sdgp_error e;
    const int64_t rows = (int64_t)p->B * p->Ho * p->Ho;
    const int C = p->Cout;
    float *const mean = s->stats, *const rstd = mean + C, *const dgamma = mean + 4 * C, *const dbeta = mean + 5 * C;
    switch (p->kind) {
    case KERNEL_BN_FWD:
    case KERNEL_BN_BWD: /* the backward's mean and rstd: the forward's, once, by the side's own library (rstd > 0 after) */
        if (p->kind == KERNEL_BN_FWD || rstd[0] == 0.0f)
            s->bn_fwd(s->out, mean, rstd, mean + 2 * C, mean + 3 * C, p->z, p->gamma, p->beta, rows, C, 0.1f, 1e-5f);
        if (p->kind == KERNEL_BN_BWD)
            s->bn_bwd(s->out, dgamma, dbeta, p->dyd, p->z, mean, rstd, p->gamma, p->beta, rows, C);
        return SDGP_OK;
    case KERNEL_SDGP: return s->bwd_run((sdgp_sparse_bwd *)s->plan, s->out, &p->dy, &e);
    case KERNEL_MVUE: return s->wgrad_run((sdgp_sparse_wgrad *)s->plan, s->out, p->x, &p->dy, &e);
    case KERNEL_DENSE_FWD: return s->conv_fwd((sdgp_conv *)s->plan, s->out, p->x, p->w, NULL, &e);
    case KERNEL_DENSE_DATA: return s->conv_data((sdgp_conv *)s->plan, s->out, p->dyd, p->w, &e);
    case KERNEL_DENSE_WGRAD: return s->conv_wgrad((sdgp_conv *)s->plan, s->out, NULL, p->x, p->dyd, &e);
    default: return s->fwd_run((sdgp_sparse_fwd *)s->plan, s->out, p->x, &e);
    }
}

int main(int argc, char **argv) {
    problem p = {0};
    int known = 0;
    for (int k = 0; argc == 13 && k < KERNEL_KINDS; k++)
        if (!strcmp(argv[1], KERNEL_NAMES[k])) p.kind = (kernel_kind)k, known = 1;
    if (!known) {
        fprintf(stderr,
                "usage: %s cout|sdgp|mvue|dense-fwd|dense-data|dense-wgrad|bn-fwd|bn-bwd LIB_A LIB_B B H Cin Cout k stride pad "
                "threads "
                "reps\n",
                argv[0]);
        return 2;
    }
    int *const a[] = {&p.B, &p.H, &p.Cin, &p.Cout, &p.k, &p.stride, &p.pad, &p.threads, &p.reps};
    for (int i = 0; i < 9; i++) *a[i] = atoi(argv[4 + i]);
    p.Ho = p.stride > 0 ? (p.H + 2 * p.pad - p.k) / p.stride + 1 : 0;
    if (p.B < 1 || p.H < 1 || p.Cin < 1 || p.Cout < 4 || p.Cout % 4 || p.k < 1 || p.pad < 0 || p.Ho < 1 || p.threads < 1 ||
        p.reps < 1) {
        fprintf(stderr, "kernel_ab: sizes must be >= 1 and make a convolution, Cout a multiple of 4\n");
        return 2;
    }
    if (p.kind == KERNEL_MVUE && (int64_t)p.B * p.Ho * p.Ho % 4) {
        fprintf(stderr, "kernel_ab: mvue needs B*Ho*Wo (%lld) a multiple of 4\n", (long long)p.B * p.Ho * p.Ho);
        return 2;
    }
    side s[2] = {0};
    char threads[16];
    snprintf(threads, sizeof threads, "%d", p.threads);
    setenv("OMP_NUM_THREADS", threads, 1); /* before the first dlopen loads OpenMP: the BatchNorm's team */
    if (!make_problem(&p)) return fprintf(stderr, "kernel_ab: out of memory\n"), 1;
    for (int k = 0; k < 2; k++)
        if (!open_side(&s[k], argv[2 + k], &p, k) || run_side(&s[k], &p) != SDGP_OK) return 1; /* warm-up */
    for (int r = 0; r < p.reps; r++)
        for (int k = 0; k < 2; k++) {
            const double t0 = sdgp_now_s();
            run_side(&s[k], &p);
            const double t = sdgp_now_s() - t0;
            if (t < s[k].best) s[k].best = t;
        }
    const int same = !memcmp(s[0].out, s[1].out, out_floats(&p) * sizeof(float));
    printf("%s B %d %dx%d %d->%d k%d s%d, %d threads, best of %d: A %.3f ms, B %.3f ms, A/B %.3fx, outputs %s\n", argv[1], p.B,
           p.H, p.H, p.Cin, p.Cout, p.k, p.stride, p.threads, p.reps, s[0].best * 1e3, s[1].best * 1e3, s[0].best / s[1].best,
           same ? "bitwise the same" : "DIFFER");
    return 0;
}
