/* The N:M weight-gradient kernel inside the model (src/model/model_wgrad.c): with --prune-wgrad
 * (MVUE 2:4 along positions), --sparse-kernel on runs it in every conv ('m' in the kernel-choice
 * text's part after '|'), off never (no such part); its weight gradients are close to oneDNN's on
 * the same pruned dL/dO (the same masks: the compressed and the dense pruning agree), not its bits;
 * '-' gives oneDNN's bits again; the choice survives the text round trip; bad texts are refused and
 * change nothing; forms the kernel does not take (shared row masks, m = 3) leave the text without
 * the part; auto times each layer and picks one of the two. */
#include "harness.h"
#include "model_util.h"
#include "sdgp/train.h"

#define NCONV 8 /* ResNet-9 */

static sdgp_model_config wgrad_config(sdgp_sparse_mode mode, int n, int m) {
    sdgp_model_config c = sdgp_model_config_default();
    c.kind = SDGP_MODEL_RESNET9;
    c.width = 0.25f;
    c.batch = 4;
    c.height = c.width_px = 12;
    c.channels = 3;
    c.seed = 7;
    c.threads = 2;
    c.sparse = mode;
    c.prune_wgrad = sdgp_prune_cfg_make(SDGP_PRUNE_MVUE, n, m);
    c.prune_wgrad_first_layer = 1; /* every conv (wgrad_first_conv_stays_dense has the default) */
    return c;
}

/* One training backward at a fixed step; every parameter's gradient, concatenated, into g. */
static size_t grads_of(sdgp_model *m, const float *x, float *g) {
    const sdgp_model_config *c = sdgp_model_get_config(m);
    float dl[64];
    int32_t y[4] = {2, 4, 6, 8};
    sdgp_error err;
    sdgp_softmax_xent(dl, NULL, sdgp_model_forward(m, x, 1), y, c->batch, c->num_classes, 0.0f);
    CHECK(sdgp_model_backward(m, dl, 5, &err) == SDGP_OK, "%s", err.msg);
    size_t k = 0;
    for (int i = 0; i < sdgp_model_param_count(m); i++) {
        const sdgp_param *p = sdgp_model_param(m, i);
        if (!p->grad) continue;
        if (g) memcpy(g + k, p->grad, p->count * sizeof(float));
        k += p->count;
    }
    return k;
}

TEST_CASE(wgrad_kernel_choice_runs_and_round_trips) {
    sdgp_model_config c = wgrad_config(SDGP_SPARSE_ON, 2, 4);
    sdgp_model *m = NULL;
    sdgp_error err;
    REQUIRE(sdgp_model_create(&m, &c, &err) == SDGP_OK, "%s", err.msg);
    char choice[64];
    const char *on = "--------|mmmmmmmm", *off = "--------|--------";
    kernel_text(m, choice, sizeof choice);
    CHECK(strcmp(choice, on) == 0, "on: %s", choice);
    for (int i = 0; i < NCONV; i++)
        CHECK(sdgp_model_conv_info(m, i)->sparse_wgrad && !strcmp(sdgp_model_conv_info(m, i)->bwd_weights_kernel, "sparse"),
              "layer %d info", i);

    size_t img = (size_t)c.batch * 12 * 12 * 3;
    float *x = test_xmalloc(img * sizeof(float));
    test_fill_normal(x, img, 3);
    const size_t n = grads_of(m, x, NULL);
    float *a = test_xmalloc(n * sizeof(float)), *d = test_xmalloc(n * sizeof(float)), *b = test_xmalloc(n * sizeof(float));
    grads_of(m, x, a);
    CHECK(sdgp_model_set_choice(m, off, &err) == SDGP_OK, "%s", err.msg);
    CHECK(!sdgp_model_conv_info(m, 3)->sparse_wgrad && !strcmp(sdgp_model_conv_info(m, 3)->bwd_weights_kernel, "dense"),
          "off: layer info");
    grads_of(m, x, d);
    CHECK(test_rel_err(a, d, n) < 1e-4, "kernel vs oneDNN on the same pruned dL/dO: rel err %g", test_rel_err(a, d, n));
    /* Not checked: that the bits differ from oneDNN's. Both sum the kept positions of a channel in
     * order in one chain per lane, and oneDNN's AVX2 kernel does so at these shapes: the same bits
     * (the zeros of the dense pruned tensor add exactly +0). Which path runs is the layer info's
     * (checked above); the kernel's own bits are tests/test_sparse_wgrad.c's. */

    /* a text without the part: oneDNN everywhere, its bits; back to the kernel: its bits */
    CHECK(sdgp_model_set_choice(m, on, &err) == SDGP_OK && sdgp_model_set_choice(m, "--------", &err) == SDGP_OK,
          "%s", err.msg);
    grads_of(m, x, b);
    CHECK(test_bitwise_equal(b, d, n * sizeof(float)), "no weight-gradient part: not oneDNN's gradients");
    CHECK(sdgp_model_set_choice(m, on, &err) == SDGP_OK, "%s", err.msg);
    grads_of(m, x, b);
    CHECK(test_bitwise_equal(b, a, n * sizeof(float)), "the kernel again: not its own bits");
    /* a mixed choice round-trips */
    CHECK(sdgp_model_set_choice(m, "--------|m-m-m-m-", &err) == SDGP_OK, "%s", err.msg);
    kernel_text(m, choice, sizeof choice);
    CHECK(strcmp(choice, "--------|m-m-m-m-") == 0, "mixed: %s", choice);

    /* bad texts change nothing */
    const char *bad[] = {"--------|mmmmmmmx", "--------|mmm", "--------|", "--------|mmmmmmmmm"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(sdgp_model_set_choice(m, bad[i], &err) == SDGP_ERR_FORMAT &&
                  (strstr(err.msg, "weight-gradient part") || strstr(err.msg, "bwd_weights pass")),
              "'%s': %s", bad[i], err.msg);
        kernel_text(m, choice, sizeof choice);
        CHECK(strcmp(choice, "--------|m-m-m-m-") == 0, "'%s' changed the choice to %s", bad[i], choice);
    }
    free(a), free(b), free(d), free(x);
    sdgp_model_destroy(m);
}

TEST_CASE(wgrad_kernel_where_it_applies) {
    sdgp_error err;
    sdgp_model *m = NULL;
    char choice[64];
    /* off: oneDNN everywhere, no part */
    sdgp_model_config c = wgrad_config(SDGP_SPARSE_OFF, 2, 4);
    REQUIRE(sdgp_model_create(&m, &c, &err) == SDGP_OK, "%s", err.msg);
    kernel_text(m, choice, sizeof choice);
    CHECK(strcmp(choice, "--------") == 0, "off: %s", choice);
    CHECK(sdgp_model_set_choice(m, "--------|mmmmmmmm", &err) == SDGP_ERR_FORMAT, "off takes no kernel: %s", err.msg);
    sdgp_model_destroy(m);
    /* row masks shared by channels, and m = 3: forms the kernel does not take */
    c = wgrad_config(SDGP_SPARSE_ON, 2, 4);
    c.prune_wgrad.mask_block = 8;
    REQUIRE(sdgp_model_create(&m, &c, &err) == SDGP_OK, "%s", err.msg);
    kernel_text(m, choice, sizeof choice);
    CHECK(strcmp(choice, "--------") == 0, "shared masks: %s", choice);
    sdgp_model_destroy(m);
    c = wgrad_config(SDGP_SPARSE_ON, 1, 3);
    c.batch = 3; /* every layer's positions a multiple of 3 */
    REQUIRE(sdgp_model_create(&m, &c, &err) == SDGP_OK, "%s", err.msg);
    kernel_text(m, choice, sizeof choice);
    CHECK(strcmp(choice, "--------") == 0, "1:3: %s", choice);
    sdgp_model_destroy(m);
    /* auto: each layer timed, one of the two kept */
    c = wgrad_config(SDGP_SPARSE_AUTO, 1, 4);
    REQUIRE(sdgp_model_create(&m, &c, &err) == SDGP_OK, "%s", err.msg);
    choice_column(m, 2, choice, sizeof choice); /* the weight gradient's letters */
    CHECK(strlen(choice) == NCONV && strspn(choice, "m-") == NCONV, "auto: %s", choice);
    sdgp_model_destroy(m);
}

/* The default leaves the first conv's weight gradient dense: its gradient is bitwise the unpruned
 * model's (pruning the weight gradient changes no dL/dO, so both backwards give the first conv the
 * same one), its letter is '-' and 'm' is refused there; with prune_wgrad_first_layer it is pruned
 * (other bits). The later convs' masks are keyed by their own layer index: the same either way. */
TEST_CASE(wgrad_first_conv_stays_dense) {
    sdgp_model_config c[3] = {wgrad_config(SDGP_SPARSE_ON, 2, 4), wgrad_config(SDGP_SPARSE_ON, 2, 4),
                              wgrad_config(SDGP_SPARSE_ON, 2, 4)};
    c[0].prune_wgrad_first_layer = 0;                  /* the default */
    c[1].prune_wgrad.fn = SDGP_PRUNE_NONE;             /* no weight-gradient pruning */
    CHECK(sdgp_model_config_default().prune_wgrad_first_layer == 0, "default: the first conv pruned");
    size_t img = (size_t)c[0].batch * 12 * 12 * 3;
    float *x = test_xmalloc(img * sizeof(float)), *g[3];
    test_fill_normal(x, img, 5);
    size_t n = 0, w0 = 0; /* all gradients; the first conv's weight, the first parameter */
    sdgp_error err;
    for (int k = 0; k < 3; k++) {
        sdgp_model *m = NULL;
        REQUIRE(sdgp_model_create(&m, &c[k], &err) == SDGP_OK, "%s", err.msg);
        char choice[64];
        kernel_text(m, choice, sizeof choice);
        if (k == 0) {
            CHECK(strcmp(choice, "--------|-mmmmmmm") == 0, "default: %s", choice);
            CHECK(!sdgp_model_conv_info(m, 0)->pruned_wgrad && sdgp_model_conv_info(m, 1)->pruned_wgrad, "layer info");
            CHECK(sdgp_model_set_choice(m, "--------|mmmmmmmm", &err) == SDGP_ERR_FORMAT && strstr(err.msg, "layer 0"),
                  "the first conv took the kernel: %s", err.msg);
        }
        n = grads_of(m, x, NULL);
        g[k] = test_xmalloc(n * sizeof(float));
        grads_of(m, x, g[k]);
        w0 = sdgp_model_param(m, 0)->count;
        CHECK(!strcmp(sdgp_model_param(m, 0)->name, "conv0.weight"), "first parameter: %s", sdgp_model_param(m, 0)->name);
        sdgp_model_destroy(m);
    }
    CHECK(test_bitwise_equal(g[0], g[1], w0 * sizeof(float)), "default: the first conv's weight gradient is not the dense one");
    CHECK(!test_bitwise_equal(g[0], g[2], w0 * sizeof(float)), "prune_wgrad_first_layer: the first conv's gradient is unpruned");
    CHECK(test_bitwise_equal(g[0] + w0, g[2] + w0, (n - w0) * sizeof(float)), "the later layers' gradients changed");
    free(g[0]), free(g[1]), free(g[2]), free(x);
}

int main(void) {
    RUN(wgrad_kernel_choice_runs_and_round_trips);
    RUN(wgrad_kernel_where_it_applies);
    RUN(wgrad_first_conv_stays_dense);
    return test_finish();
}
