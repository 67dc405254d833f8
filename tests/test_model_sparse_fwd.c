/* The sparse-weight forward inside the model (src/model/model_fwd.c): with block-masked weights,
 * --sparse-kernel on runs it in every supported layer (Winograd in the 3x3 stride-1 ones, the direct
 * kernel in this ResNet-9's 5x5 stride-2 layer 1),
 * off runs oneDNN on W~; the direct kernel ('s') is a choice too; the choice is text that
 * checkpoints keep (the kernel-choice text's part after '/'), applying a dense choice gives the dense
 * model's bits exactly, and bad texts change nothing. The data gradient of those layers runs the
 * sparse-weight kernel too under on ('x' in the data-gradient part of the text, model_bwd.c):
 * close to oneDNN's, not its bits, and '-' gives oneDNN's bits again. */
#include <unistd.h>

#include "harness.h"
#include "model_util.h"
#include "sdgp/train.h"

#define NCONV 8 /* ResNet-9 */

static sdgp_model_config block_config(sdgp_sparse_mode mode) {
    sdgp_model_config c = sdgp_model_config_default();
    c.kind = SDGP_MODEL_RESNET9;
    c.width = 0.25f;
    c.batch = 4;
    c.height = c.width_px = 16;
    c.channels = 3;
    c.seed = 5;
    c.threads = 2;
    c.sparse = mode;
    c.weights = (sdgp_weights_cfg){SDGP_WEIGHTS_SSTE, 2, 4, SDGP_WGROUP_BLOCK32, 2e-4f, 0, 0};
    return c;
}

static size_t logits_of(sdgp_model *m, const float *x, float *out) {
    const sdgp_model_config *c = sdgp_model_get_config(m);
    size_t n = (size_t)c->batch * c->num_classes;
    memcpy(out, sdgp_model_forward(m, x, 0), n * sizeof(float));
    return n;
}

TEST_CASE(sparse_forward_choice_runs_and_round_trips) {
    sdgp_model_config con = block_config(SDGP_SPARSE_ON), coff = block_config(SDGP_SPARSE_OFF);
    sdgp_model *on = NULL, *off = NULL;
    sdgp_error err;
    REQUIRE(sdgp_model_create(&on, &con, &err) == SDGP_OK && sdgp_model_create(&off, &coff, &err) == SDGP_OK, "%s", err.msg);
    char choice[64], want_on[] = "--xxxxxx/-swwwwww", want_off[] = "--------/-ddddddd";
    kernel_text(on, choice, sizeof choice);
    CHECK(strcmp(choice, want_on) == 0, "on: %s (the image conv has dense weights)", choice);
    kernel_text(off, choice, sizeof choice);
    CHECK(strcmp(choice, want_off) == 0, "off: %s", choice);
    CHECK(sdgp_model_conv_info(on, 1)->sparse_forward && !sdgp_model_conv_info(off, 1)->sparse_forward &&
              !sdgp_model_conv_info(on, 0)->sparse_forward,
          "layer info");
    CHECK(sdgp_model_conv_info(on, 2)->sparse_data && !sdgp_model_conv_info(on, 1)->sparse_data &&
              !sdgp_model_conv_info(off, 2)->sparse_data,
          "layer info: sparse data gradient (5x5 stride-2 layer 1 has none)");

    size_t img = (size_t)con.batch * 16 * 16 * 3;
    float *x = test_xmalloc(img * sizeof(float)), a[64], b[64], d[64];
    test_fill_normal(x, img, 9);
    size_t n = logits_of(on, x, a);
    logits_of(off, x, d);
    /* the same weights through another kernel: close, and not the same bits (so it did run) */
    CHECK(test_rel_err(a, d, n) < 1e-4, "sparse vs dense forward: rel err %g", test_rel_err(a, d, n));
    CHECK(!test_bitwise_equal(a, d, n * sizeof(float)), "the sparse forward gave oneDNN's bits: did it run?");

    /* the direct sparse kernel: close to dense too, and its own rounding */
    CHECK(sdgp_model_conv_info(on, 2)->sparse_forward == 2 && sdgp_model_conv_info(on, 1)->sparse_forward == 1, "Winograd info");
    CHECK(!strcmp(sdgp_model_conv_info(on, 2)->fwd_kernel, "sparse-weights-winograd"), "%s", sdgp_model_conv_info(on, 2)->fwd_kernel);
    CHECK(sdgp_model_set_choice(on, "--------/-sssssss", &err) == SDGP_OK, "%s", err.msg);
    CHECK(sdgp_model_conv_info(on, 2)->sparse_forward == 1 && sdgp_model_conv_info(off, 2)->sparse_forward == 0, "direct info");
    /* each pass's implementation by name (sdgp_layer_info), as `sdgp kernels` lists them */
    CHECK(!strcmp(sdgp_model_conv_info(on, 2)->fwd_kernel, "sparse-weights") &&
              !strcmp(sdgp_model_conv_info(off, 2)->fwd_kernel, "dense") &&
              !strcmp(sdgp_model_conv_info(on, 2)->bwd_kernel, "dense") && /* the text's '-': oneDNN */
              !strcmp(sdgp_model_conv_info(on, 2)->bwd_weights_kernel, "dense"),
          "per-pass names: %s / %s / %s", sdgp_model_conv_info(on, 2)->fwd_kernel, sdgp_model_conv_info(on, 2)->bwd_kernel,
          sdgp_model_conv_info(on, 2)->bwd_weights_kernel);
    logits_of(on, x, b);
    CHECK(test_rel_err(b, d, n) < 1e-4 && !test_bitwise_equal(a, b, n * sizeof(float)) && !test_bitwise_equal(b, d, n * sizeof(float)),
          "direct sparse forward: rel err %g to dense, or the bits of another implementation", test_rel_err(b, d, n));

    /* the dense choice, with the '/' part or without one: the dense model's bits */
    CHECK(sdgp_model_set_choice(on, want_off, &err) == SDGP_OK, "%s", err.msg);
    logits_of(on, x, b);
    CHECK(test_bitwise_equal(b, d, n * sizeof(float)), "dense choice: not the dense model's logits");
    CHECK(sdgp_model_set_choice(on, want_on, &err) == SDGP_OK, "%s", err.msg);
    CHECK(sdgp_model_set_choice(on, "--------", &err) == SDGP_OK, "%s", err.msg);
    logits_of(on, x, b);
    CHECK(test_bitwise_equal(b, d, n * sizeof(float)), "a text without a forward part: dense");

    /* bad texts change nothing */
    CHECK(sdgp_model_set_choice(on, want_on, &err) == SDGP_OK, "%s", err.msg);
    CHECK(sdgp_model_set_choice(on, "--------/-swwwwwx", &err) == SDGP_ERR_FORMAT && strstr(err.msg, "layer 7"),
          "bad character: %s", err.msg);
    CHECK(sdgp_model_set_choice(on, "--------/-swwwww", &err) == SDGP_ERR_FORMAT, "short forward part");
    CHECK(sdgp_model_set_choice(on, "--------/swwwwww-", &err) == SDGP_ERR_FORMAT && strstr(err.msg, "layer 0"),
          "the image conv has no sparse plan: %s", err.msg);
    CHECK(sdgp_model_set_choice(on, "-------s/-ddddddd", &err) == SDGP_ERR_FORMAT, "bad data-gradient part");
    logits_of(on, x, b);
    CHECK(test_bitwise_equal(a, b, n * sizeof(float)), "a refused text changed the forward");
    kernel_text(on, choice, sizeof choice);
    CHECK(strcmp(choice, want_on) == 0, "after refused texts: %s", choice);

    /* checkpoints keep it: the on model's choice into the off model */
    char path[256];
    snprintf(path, sizeof path, "/tmp/sdgp_test_model_sparse_fwd_%d.safetensors", (int)getpid());
    sdgp_train_config tc = sdgp_train_config_default();
    sdgp_checkpoint_state st = {0};
    REQUIRE(sdgp_checkpoint_save(path, on, &tc, &st, &err) == SDGP_OK, "%s", err.msg);
    REQUIRE(sdgp_checkpoint_load(path, off, NULL, &err) == SDGP_OK, "%s", err.msg);
    kernel_text(off, choice, sizeof choice);
    CHECK(strcmp(choice, want_on) == 0, "restored: %s", choice);
    logits_of(off, x, b);
    CHECK(test_bitwise_equal(a, b, n * sizeof(float)), "restored model: not the sparse forward's logits (rel err %g)", test_rel_err(a, b, n));
    /* the data gradient: the sparse-weight kernel against oneDNN on the same W~ (forward dense in
     * both, so only the data products differ), through the gradient of the first conv's weights
     * (last: training forwards move BatchNorm's running statistics) */
    {
        float dl[64], *g[2];
        int32_t y[4] = {1, 3, 5, 7};
        const sdgp_param *p0 = sdgp_model_param(on, 0);
        const char *texts[2] = {"--xxxxxx/-ddddddd", "--------/-ddddddd"};
        for (int k = 0; k < 2; k++) {
            CHECK(sdgp_model_set_choice(on, texts[k], &err) == SDGP_OK, "%s", err.msg);
            sdgp_softmax_xent(dl, NULL, sdgp_model_forward(on, x, 1), y, con.batch, con.num_classes, 0.0f);
            CHECK(sdgp_model_backward(on, dl, 0, &err) == SDGP_OK, "%s", err.msg);
            g[k] = test_xmalloc(p0->count * sizeof(float));
            memcpy(g[k], p0->grad, p0->count * sizeof(float));
        }
        CHECK(sdgp_model_conv_info(on, 3)->sparse_data == 0, "'-' runs oneDNN");
        CHECK(test_rel_err(g[0], g[1], p0->count) < 1e-4 && !test_bitwise_equal(g[0], g[1], p0->count * sizeof(float)),
              "sparse-weight data gradient: rel err %g to oneDNN's, or its bits", test_rel_err(g[0], g[1], p0->count));
        CHECK(sdgp_model_set_choice(on, "--xxxxxu/-ddddddd", &err) == SDGP_OK && !sdgp_model_conv_info(on, 7)->sparse_data,
              "'u' (oneDNN, exact dL/dO) is a choice too: %s", err.msg);
        CHECK(sdgp_model_set_choice(on, "-xxxxxxx/-ddddddd", &err) == SDGP_ERR_FORMAT && strstr(err.msg, "layer 1"),
              "5x5 stride-2 layer 1 has no sparse-weight data gradient: %s", err.msg);
        free(g[0]), free(g[1]);
        CHECK(sdgp_model_set_choice(on, want_on, &err) == SDGP_OK, "%s", err.msg);
    }

    unlink(path);
    free(x);
    sdgp_model_destroy(on);
    sdgp_model_destroy(off);
}

/* Training with the sparse forward stays next to training with the dense one, and SGD steps
 * repack W~ each forward (a stale pack would leave the first step's weights in use). */
TEST_CASE(sparse_forward_trains_next_to_dense) {
    float *p[2] = {NULL, NULL};
    size_t n = 0;
    for (int k = 0; k < 2; k++) {
        sdgp_model_config c = block_config(k ? SDGP_SPARSE_OFF : SDGP_SPARSE_ON);
        sdgp_model *m;
        sdgp_error err;
        REQUIRE(sdgp_model_create(&m, &c, &err) == SDGP_OK, "%s", err.msg);
        size_t img = (size_t)c.batch * 16 * 16 * 3;
        float *x = test_xmalloc(img * sizeof(float)), dl[64];
        int32_t y[4] = {1, 3, 5, 7};
        test_fill_normal(x, img, 21);
        for (int s = 0; s < 4; s++) {
            sdgp_softmax_xent(dl, NULL, sdgp_model_forward(m, x, 1), y, c.batch, c.num_classes, 0.0f);
            CHECK(sdgp_model_backward(m, dl, (uint64_t)s, &err) == SDGP_OK, "%s", err.msg);
            sdgp_model_sgd(m, 0.05f, 0.9f, 5e-4f, 0);
        }
        float l[64];
        size_t nl = logits_of(m, x, l);
        p[k] = test_xmalloc(nl * sizeof(float));
        memcpy(p[k], l, nl * sizeof(float));
        n = nl;
        free(x);
        sdgp_model_destroy(m);
    }
    CHECK(test_rel_err(p[0], p[1], n) < 1e-3, "after 4 steps, sparse vs dense forward: rel err %g", test_rel_err(p[0], p[1], n));
    free(p[0]), free(p[1]);
}

/* SDGP on layers with block-masked weights: 'v' (the pixel-domain pruning into a dense tensor, then
 * the sparse-weight kernel) against 'd' (the same pruned tensor into oneDNN): close, not the same
 * bits. And the weight gradient's row masks shared by channels (--wgrad-block): a model takes them
 * when every conv's output channels fit, and says which conv does not. */
TEST_CASE(pruned_sparse_weights_and_shared_wgrad_masks) {
    sdgp_model_config c = block_config(SDGP_SPARSE_AUTO);
    c.prune = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 2, 4); /* deterministic: both entries see the same dL/dO */
    c.prune_wgrad = sdgp_prune_cfg_make(SDGP_PRUNE_MVUE, 2, 4);
    c.prune_wgrad.mask_block = 8;
    sdgp_model *m = NULL;
    sdgp_error err;
    REQUIRE(sdgp_model_create(&m, &c, &err) == SDGP_OK, "%s", err.msg);
    size_t img = (size_t)c.batch * 16 * 16 * 3;
    float *x = test_xmalloc(img * sizeof(float)), dl[64], *g[2];
    int32_t y[4] = {1, 3, 5, 7};
    test_fill_normal(x, img, 31);
    const sdgp_param *p0 = sdgp_model_param(m, 0);
    const char *texts[2] = {"-dvvvvvv/-ddddddd", "-ddddddd/-ddddddd"};
    for (int k = 0; k < 2; k++) {
        CHECK(sdgp_model_set_choice(m, texts[k], &err) == SDGP_OK, "%s: %s", texts[k], err.msg);
        CHECK(sdgp_model_conv_info(m, 4)->sparse_data == !k && sdgp_model_conv_info(m, 4)->pruned, "%s: layer info", texts[k]);
        sdgp_softmax_xent(dl, NULL, sdgp_model_forward(m, x, 1), y, c.batch, c.num_classes, 0.0f);
        CHECK(sdgp_model_backward(m, dl, 3, &err) == SDGP_OK, "%s", err.msg);
        g[k] = test_xmalloc(p0->count * sizeof(float));
        memcpy(g[k], p0->grad, p0->count * sizeof(float));
    }
    CHECK(test_rel_err(g[0], g[1], p0->count) < 1e-4 && !test_bitwise_equal(g[0], g[1], p0->count * sizeof(float)),
          "pruned+sparse-weights: rel err %g to oneDNN on the same pruned dL/dO, or its bits", test_rel_err(g[0], g[1], p0->count));
    CHECK(sdgp_model_set_choice(m, "-vvvvvvv/-ddddddd", &err) == SDGP_ERR_FORMAT && strstr(err.msg, "layer 1"),
          "5x5 stride-2 layer 1 has no sparse-weight data gradient: %s", err.msg);
    free(g[0]), free(g[1]), free(x);
    sdgp_model_destroy(m);
    c.prune_wgrad.mask_block = 24; /* ResNet-9 w0.25's conv1 has 64 output channels (conv0's weight gradient is not pruned) */
    CHECK(sdgp_model_create(&m, &c, &err) == SDGP_ERR_INVALID && strstr(err.msg, "--wgrad-block 24"), "wgrad block 24: %s", err.msg);
}

int main(void) {
    RUN(sparse_forward_choice_runs_and_round_trips);
    RUN(sparse_forward_trains_next_to_dense);
    RUN(pruned_sparse_weights_and_shared_wgrad_masks);
    return test_finish();
}
