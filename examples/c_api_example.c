/* sdgp's C API in one file: prune a convolution's output gradient dL/dO to 2:4 along its channels,
 * then compute the input gradient dL/dD = prune(dL/dO) x W with the N:M sparse kernel, and check it
 * against the naive loop. Public headers and libsdgp only; built by examples/CMakeLists.txt, run by
 * ctest (c_api_example). Build outside the tree: cc c_api_example.c $(pkg-config --cflags --libs sdgp) -lm */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <sdgp/conv.h>
#include <sdgp/prune.h>
#include <sdgp/sparse.h>

/* Every call that can fail returns an sdgp_status and fills an sdgp_error with the reason. */
#define CHECK(call)                                                                     \
    do {                                                                                \
        if ((call) != SDGP_OK) {                                                        \
            fprintf(stderr, "%s: %s (%s)\n", #call, err.msg, sdgp_status_name(err.code)); \
            return 1;                                                                   \
        }                                                                               \
    } while (0)

int main(void) {
    enum { B = 2, H = 8, W = 8, CI = 16, CO = 32 }; /* a 3x3, stride-1, pad-1 conv, NHWC */
    static float w[CO * CI * 9], dO[B * H * W * CO], dO_pruned[B * H * W * CO];
    static float dD[B * H * W * CI], ref[B * H * W * CI];
    for (int i = 0; i < CO * CI * 9; i++) w[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
    for (int i = 0; i < B * H * W * CO; i++) dO[i] = (float)((i * 53) % 23) / 23.0f - 0.5f;

    sdgp_error err = {0};
    sdgp_conv_geom g;
    CHECK(sdgp_conv_geom_init(&g, B, H, W, CI, CO, 3, 3, /*stride*/ 1, /*pad*/ 1, &err));

    /* 1. Prune dL/dO (B x P x C, P = Ho*Wo) to 2:4: the dense result and the compressed form. */
    sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_RESCALED, 2, 4);
    sdgp_nm_tensor nm = {0};
    CHECK(sdgp_nm_alloc(&nm, SDGP_AXIS_CHANNEL, 2, 4, (int64_t)B * g.Ho * g.Wo, CO, &err));
    CHECK(sdgp_prune(&cfg, dO, B, (int64_t)g.Ho * g.Wo, CO, dO_pruned, &nm, &err));

    /* 2. The sparse backward-data kernel: pack the weights (OIHW), then run on the compressed dL/dO. */
    sdgp_sparse_bwd *plan = NULL;
    CHECK(sdgp_sparse_bwd_create(&plan, &g, 2, 4, SDGP_ISA_AUTO, /*threads: OpenMP default*/ 0, &err));
    CHECK(sdgp_sparse_bwd_pack(plan, w, &err));
    CHECK(sdgp_sparse_bwd_data(plan, dD, &nm, &err));

    /* 3. Check against the naive loop on the same pruned gradient. */
    sdgp_conv_backward_data_naive(ref, dO_pruned, w, &g);
    double worst = 0, scale = 0;
    for (int i = 0; i < B * H * W * CI; i++) {
        worst = fmax(worst, fabs((double)dD[i] - ref[i]));
        scale = fmax(scale, fabs((double)ref[i]));
    }
    long kept = 0;
    for (int i = 0; i < B * H * W * CO; i++) kept += dO_pruned[i] != 0.0f;
    printf("pruning kernel: %s, sparse kernel: %s\n", sdgp_prune_kernel(&cfg),
           sdgp_isa_name(sdgp_sparse_bwd_isa(plan)));
    printf("kept %ld of %d gradient values (2:4)\n", kept, B * H * W * CO);
    printf("sparse dL/dD vs naive loop: max error %.1e of %.2f: %s\n", worst, scale,
           worst <= 1e-5 * scale ? "ok" : "MISMATCH");

    sdgp_sparse_bwd_destroy(plan);
    sdgp_nm_free(&nm);
    return worst <= 1e-5 * scale ? 0 : 1;
}
