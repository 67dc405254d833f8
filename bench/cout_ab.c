/* The cout-form sparse-weight forward (sdgp_sparse_fwd_create_cout) of two libsdgp builds, A and
 * B, in one process: this host's speed drifts by 5-15 % between processes, more than most kernel
 * changes gain, so both builds run interleaved on the same input and weights (random 2:4 masks
 * along output channels) and the best of each is compared. Each library is dlopen'ed with
 * RTLD_LOCAL, so its symbols stay its own. It also says whether the outputs are bitwise the same.
 *
 *   build/sdgp_cout_ab LIB_A LIB_B B H Cin Cout k stride pad threads reps
 *
 * e.g. with the previous commit's library built in a worktree:
 *   git worktree add /tmp/old HEAD~1 && cmake -S /tmp/old -B /tmp/old/build -DCMAKE_BUILD_TYPE=Release &&
 *   cmake --build /tmp/old/build --target sdgp_shared &&
 *   build/sdgp_cout_ab /tmp/old/build/libsdgp.so build/libsdgp.so 64 16 256 256 3 1 1 2 5 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "sdgp/conv.h"
#include "sdgp/sparse.h"

typedef sdgp_status (*geom_fn)(sdgp_conv_geom *, int, int, int, int, int, int, int, int, int, sdgp_error *);
typedef sdgp_status (*create_fn)(sdgp_sparse_fwd **, const sdgp_conv_geom *, int, int, sdgp_isa, int, sdgp_error *);
typedef sdgp_status (*pack_fn)(sdgp_sparse_fwd *, const float *, sdgp_error *);
typedef sdgp_status (*run_fn)(sdgp_sparse_fwd *, float *, const float *, sdgp_error *);

typedef struct {
    sdgp_sparse_fwd *plan;
    run_fn run;
    float *y;
    double best;
} side;

/* loads one library and makes its plan; 0 on failure (printed) */
static int open_side(side *s, const char *lib, const int *a, const float *w) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "cout_ab: %s\n", dlerror());
        return 0;
    }
    geom_fn geom = (geom_fn)dlsym(h, "sdgp_conv_geom_init");
    create_fn create = (create_fn)dlsym(h, "sdgp_sparse_fwd_create_cout");
    pack_fn pack = (pack_fn)dlsym(h, "sdgp_sparse_fwd_pack");
    s->run = (run_fn)dlsym(h, "sdgp_sparse_fwd_run");
    if (!geom || !create || !pack || !s->run) {
        fprintf(stderr, "cout_ab: %s lacks the cout forward's API\n", lib);
        return 0;
    }
    sdgp_conv_geom g;
    sdgp_error e;
    if (geom(&g, a[0], a[1], a[1], a[2], a[3], a[4], a[4], a[5], a[6], &e) != SDGP_OK ||
        create(&s->plan, &g, 2, 4, SDGP_ISA_AUTO, a[7], &e) != SDGP_OK || pack(s->plan, w, &e) != SDGP_OK) {
        fprintf(stderr, "cout_ab: %s: %s\n", lib, e.msg);
        return 0;
    }
    s->y = malloc((size_t)a[0] * g.Ho * g.Wo * a[3] * sizeof(float));
    s->best = 1e30;
    return s->y != NULL;
}

int main(int argc, char **argv) {
    if (argc != 12) {
        fprintf(stderr, "usage: %s LIB_A LIB_B B H Cin Cout k stride pad threads reps\n", argv[0]);
        return 2;
    }
    int a[9]; /* B H Cin Cout k stride pad threads reps */
    for (int i = 0; i < 9; i++) a[i] = atoi(argv[3 + i]);
    if (a[0] < 1 || a[1] < 1 || a[2] < 1 || a[3] < 4 || a[3] % 4 || a[4] < 1 || a[7] < 1 || a[8] < 1) {
        fprintf(stderr, "cout_ab: sizes must be >= 1, Cout a multiple of 4\n");
        return 2;
    }
    const int B = a[0], H = a[1], Cin = a[2], Cout = a[3], taps = a[4] * a[4];
    const size_t nx = (size_t)B * H * H * Cin, nw = (size_t)Cout * Cin * taps;
    float *x = malloc(nx * sizeof(float)), *w = malloc(nw * sizeof(float));
    if (!x || !w) return 1;
    srand(3);
    for (size_t i = 0; i < nx; i++) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    static const int keep[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}}; /* the 2:4 subsets */
    for (int co = 0; co < Cout; co += 4)
        for (int ci = 0; ci < Cin; ci++)
            for (int t = 0; t < taps; t++) {
                const int q = rand() % 6;
                for (int r = 0; r < 4; r++)
                    w[((size_t)(co + r) * Cin + ci) * taps + t] =
                        r == keep[q][0] || r == keep[q][1] ? (float)rand() / (float)RAND_MAX - 0.5f : 0.0f;
            }
    side s[2];
    sdgp_error e;
    for (int k = 0; k < 2; k++)
        if (!open_side(&s[k], argv[1 + k], a, w) || s[k].run(s[k].plan, s[k].y, x, &e) != SDGP_OK) return 1; /* warm-up */
    for (int r = 0; r < a[8]; r++)
        for (int k = 0; k < 2; k++) {
            const double t0 = sdgp_now_s();
            s[k].run(s[k].plan, s[k].y, x, &e);
            const double t = sdgp_now_s() - t0;
            if (t < s[k].best) s[k].best = t;
        }
    const int Ho = (H + 2 * a[6] - a[4]) / a[5] + 1;
    const int same = !memcmp(s[0].y, s[1].y, (size_t)B * Ho * Ho * Cout * sizeof(float));
    printf("B %d %dx%d %d->%d k%d s%d, %d threads, best of %d: A %.3f ms, B %.3f ms, A/B %.3fx, outputs %s\n", B, H, H, Cin,
           Cout, a[4], a[5], a[7], a[8], s[0].best * 1e3, s[1].best * 1e3, s[0].best / s[1].best,
           same ? "bitwise the same" : "DIFFER");
    return 0;
}
