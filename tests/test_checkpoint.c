/* Checkpoints: exact resume (MVUE, S-STE, measured conv plans), and the kernel and conv choices they keep. */
#include <omp.h>
#include <string.h>

#include "model_util.h"
#include "sdgp/isa.h"

static sdgp_dataset fmnist;
static int have_fmnist;

static sdgp_train_config run_config(const char *ckpt, int64_t max_steps) {
    sdgp_train_config c = sdgp_train_config_default();
    c.model.kind = SDGP_MODEL_SMALLCNN;
    c.model.width = 1.0f;
    c.model.batch = 64;
    c.model.seed = 11;
    c.model.prune = sdgp_prune_cfg_make(SDGP_PRUNE_MVUE, 2, 4);
    c.model.sparse = SDGP_SPARSE_ON;
    c.model.prune_first_layer = 1;
    /* S-STE weights too: beta must come back from the checkpoint, not from the initialisation */
    c.model.weights = (sdgp_weights_cfg){SDGP_WEIGHTS_SSTE, 2, 4, SDGP_WGROUP_KERNEL, 2e-4f, 0, 1};
    /* the dense passes' algorithms measured at start: a resume must plan the checkpoint's */
    c.model.conv_algo = SDGP_CONV_MEASURED;
    c.epochs = 1;
    c.max_steps = max_steps;
    c.checkpoint_every = 10;
    c.quiet = 1;
    c.tta = 0;
    snprintf(c.checkpoint, sizeof c.checkpoint, "%s", ckpt);
    return c;
}

TEST_CASE(checkpoint_resume_is_exact) {
    if (!have_fmnist) return;
    char a[256], b[256];
    tmp_path(a, sizeof a, "a.safetensors");
    tmp_path(b, sizeof b, "b.safetensors");
    sdgp_train_result res;
    sdgp_error err;
    /* b measures its convs' algorithms; a, uninterrupted, plans b's (two measurements may differ) */
    sdgp_train_config cb = run_config(b, 10);
    REQUIRE(sdgp_train(&cb, &res, NULL, &err) == SDGP_OK, "run b: %s", err.msg);
    sdgp_train_config rc;
    REQUIRE(sdgp_checkpoint_read_config(b, &rc, &err) == SDGP_OK, "read config: %s", err.msg);
    CHECK(strlen(rc.model.choice) == 15 && rc.model.choice[7] == ',' && rc.model.choice[3] == ':', "b's choice: '%s'",
          rc.model.choice);
    char measured[SDGP_CHOICE_LEN];
    snprintf(measured, sizeof measured, "%s", rc.model.choice);
    sdgp_train_config ca = run_config(a, 20);
    snprintf(ca.model.choice, sizeof ca.model.choice, "%s", measured);
    REQUIRE(sdgp_train(&ca, &res, NULL, &err) == SDGP_OK, "run a: %s", err.msg);
    /* the resume (choice empty, as a fresh configuration) takes b's from its checkpoint, and
     * says so on its start-up line */
    cb.max_steps = 20;
    cb.quiet = 0;
    snprintf(cb.resume, sizeof cb.resume, "%s", b);
    FILE *out = tmpfile();
    REQUIRE(out, "tmpfile");
    REQUIRE(sdgp_train(&cb, &res, out, &err) == SDGP_OK, "resume b: %s", err.msg);
    CHECK(res.steps == 10, "resumed run took %lld steps", (long long)res.steps);
    char line[4096], said[64] = "";
    rewind(out);
    while (fgets(line, sizeof line, out))
        if (strstr(line, "dense convolutions")) snprintf(said, sizeof said, "%s", strstr(line, "[the checkpoint's") ? "ckpt" : "other");
    fclose(out);
    CHECK(!strcmp(said, "ckpt"), "resumed start-up line: the checkpoint's conv algorithms (%s)", said);
    REQUIRE(sdgp_checkpoint_read_config(b, &rc, &err) == SDGP_OK, "read config: %s", err.msg);
    CHECK(!strcmp(rc.model.choice, measured), "resumed b ran '%s', measured '%s'", rc.model.choice, measured);

    REQUIRE(sdgp_checkpoint_read_config(a, &rc, &err) == SDGP_OK, "read config: %s", err.msg);
    CHECK(!strcmp(rc.model.choice, measured), "a ran '%s', b measured '%s'", rc.model.choice, measured);
    CHECK(rc.model.prune.fn == SDGP_PRUNE_MVUE && rc.model.prune.n == 2 && rc.model.seed == 11, "config round trip");
    CHECK(rc.model.weights.kind == SDGP_WEIGHTS_SSTE && rc.model.weights.group == SDGP_WGROUP_KERNEL &&
              rc.model.weights.classifier == 1 && rc.model.weights.first_layer == 0,
          "sparse-weights config round trip");
    sdgp_model_config mc = rc.model;
    mc.height = mc.width_px = 28;
    mc.channels = 1;
    sdgp_model *ma, *mb;
    REQUIRE(sdgp_model_create(&ma, &mc, &err) == SDGP_OK && sdgp_model_create(&mb, &mc, &err) == SDGP_OK, "%s", err.msg);
    sdgp_checkpoint_state sa, sb;
    REQUIRE(sdgp_checkpoint_load(a, ma, &sa, &err) == SDGP_OK, "load a: %s", err.msg);
    REQUIRE(sdgp_checkpoint_load(b, mb, &sb, &err) == SDGP_OK, "load b: %s", err.msg);
    CHECK(sa.step == 20 && sb.step == 20, "steps %lld %lld", (long long)sa.step, (long long)sb.step);
    int same = 1;
    for (int i = 0; i < sdgp_model_param_count(ma); i++) {
        const sdgp_param *p = sdgp_model_param(ma, i), *q = sdgp_model_param(mb, i);
        if (!test_bitwise_equal(p->data, q->data, p->count * sizeof(float))) {
            fprintf(stderr, "  %s differs\n", p->name);
            same = 0;
        }
        if (p->trainable && !test_bitwise_equal(p->momentum, q->momentum, p->count * sizeof(float))) same = 0;
    }
    CHECK(same, "resumed run must end bitwise equal to the uninterrupted one");

    /* a checkpoint of another model is refused, naming the mismatch */
    sdgp_model_config other = mc;
    other.width = 2.0f;
    sdgp_model *mo;
    REQUIRE(sdgp_model_create(&mo, &other, &err) == SDGP_OK, "%s", err.msg);
    CHECK(sdgp_checkpoint_load(a, mo, NULL, &err) == SDGP_ERR_FORMAT && strstr(err.msg, "another model"), "%s", err.msg);
    sdgp_model_destroy(mo);
    sdgp_model_destroy(ma);
    sdgp_model_destroy(mb);
    unlink(a);
    unlink(b);
}

TEST_CASE(checkpoint_keeps_kernel_choice) {
    sdgp_model_config c = small_config(8);
    c.prune = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 2, 4);
    c.prune_first_layer = 1;
    c.sparse = SDGP_SPARSE_ON;
    sdgp_model *a, *b;
    sdgp_error err;
    REQUIRE(sdgp_model_create(&a, &c, &err) == SDGP_OK && sdgp_model_create(&b, &c, &err) == SDGP_OK, "%s", err.msg);
    char choice[16];
    kernel_text(b, choice, sizeof choice);
    CHECK(strcmp(choice, "-s") == 0 || strcmp(choice, "-f") == 0, "sparse on: %s", choice); /* f: s, its pruning fused */
    CHECK(sdgp_model_set_choice(a, "-d", &err) == SDGP_OK, "%s", err.msg);
    CHECK(sdgp_model_set_choice(a, "sd", &err) == SDGP_ERR_FORMAT, "the image conv has no data gradient to prune");
    CHECK(sdgp_model_set_choice(a, "-dd", &err) == SDGP_ERR_FORMAT, "length");
    char path[256];
    tmp_path(path, sizeof path, "kernels.safetensors");
    sdgp_train_config tc = sdgp_train_config_default();
    sdgp_checkpoint_state st = {0};
    REQUIRE(sdgp_checkpoint_save(path, a, &tc, &st, &err) == SDGP_OK, "%s", err.msg);
    REQUIRE(sdgp_checkpoint_load(path, b, NULL, &err) == SDGP_OK, "%s", err.msg);
    kernel_text(b, choice, sizeof choice);
    CHECK(strcmp(choice, "-d") == 0, "restored choice: %s", choice);
    unlink(path);
    sdgp_model_destroy(a);
    sdgp_model_destroy(b);
}

/* --conv-algo measured: the algorithms are part of the choice text that checkpoints keep. A forced
 * mix plans what it says and survives a checkpoint into a model that measured for itself (and into
 * one built from the checkpoint's configuration, without measuring); a model under another
 * algorithm keeps its own. Bad texts fail with the layer named, the model keeps its convs and still
 * steps. */
TEST_CASE(checkpoint_keeps_conv_choice) {
    sdgp_model_config c = small_config(8);
    c.conv_algo = SDGP_CONV_MEASURED;
    sdgp_model *a, *b;
    sdgp_error err;
    REQUIRE(sdgp_model_create(&a, &c, &err) == SDGP_OK && sdgp_model_create(&b, &c, &err) == SDGP_OK, "%s", err.msg);
    char choice[SDGP_CHOICE_LEN], text[SDGP_CHOICE_LEN];
    algos_text(a, choice, sizeof choice);
    CHECK(strlen(choice) == 7 && strspn(choice, "dw,") == 7, "measured: '%s'", choice);
    const int wino = sdgp_isa_supported(SDGP_ISA_AVX512);
    const char *mix = wino ? "ddd,wdw" : "ddd,ddd";
    REQUIRE(sdgp_model_set_choice(a, with_algos(a, mix, text, sizeof text), &err) == SDGP_OK, "%s", err.msg);
    CHECK(!strcmp(algos_text(a, choice, sizeof choice), mix), "set: '%s'", choice);
    const sdgp_layer_info *li = sdgp_model_conv_info(a, 1);
    CHECK(li->plan[0].algo == (wino ? SDGP_CONV_WINOGRAD : SDGP_CONV_DIRECT) && li->plan[1].algo == SDGP_CONV_DIRECT &&
              li->winograd == wino,
          "layer info follows the plan");
    const char *bad[] = {"---:ddd", "---:ddd,---:wdw,---:ddd", "---:ddd;---:wdw", "---:ddd,---:wxw", "---:DDD,---:ddd",
                         "---:ddd,---=wdw", "", "---:ddd,"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(sdgp_model_set_choice(a, bad[i], &err) == SDGP_ERR_FORMAT && strstr(err.msg, "choice"), "'%s': %s", bad[i],
              err.msg);
    CHECK(!strcmp(algos_text(a, choice, sizeof choice), mix), "kept after errors: '%s'", choice);
    /* tokens without algorithms keep the layers' */
    CHECK(sdgp_model_set_choice(a, "---,---", &err) == SDGP_OK && !strcmp(algos_text(a, choice, sizeof choice), mix),
          "FBW tokens: '%s' %s", choice, err.msg);

    {   /* Winograd forced where oneDNN has none: a 1x1 stride-2 downsample conv of ResNet-18 */
        sdgp_model_config rc18 = small_config(2);
        rc18.kind = SDGP_MODEL_RESNET18;
        rc18.width = 0.25f;
        sdgp_model *r18;
        REQUIRE(sdgp_model_create(&r18, &rc18, &err) == SDGP_OK, "%s", err.msg);
        char kept[SDGP_CHOICE_LEN];
        sdgp_model_choice(r18, kept, sizeof kept);
        snprintf(text, sizeof text, "%s", kept);
        int ds = -1;
        for (int i = 0; i < sdgp_model_conv_count(r18) && ds < 0; i++)
            if (strstr(sdgp_model_conv_info(r18, i)->layer, "downsample")) ds = i;
        REQUIRE(ds > 0, "ResNet-18 has a downsample conv");
        text[8 * ds + 6] = 'w';
        CHECK(sdgp_model_set_choice(r18, text, &err) == SDGP_ERR_UNSUPPORTED && strstr(err.msg, "downsample") &&
                  strstr(err.msg, "Winograd") && strstr(err.msg, "backward-weights"),
              "Winograd on a 1x1 conv: %s", err.msg);
        sdgp_model_choice(r18, text, sizeof text);
        CHECK(!strcmp(text, kept), "kept after the refusal: '%s'", text);
        sdgp_model_destroy(r18);
        /* measured: the tuner gives Winograd only to passes that have it (never the 1x1 downsample) */
        rc18.conv_algo = SDGP_CONV_MEASURED;
        REQUIRE(sdgp_model_create(&r18, &rc18, &err) == SDGP_OK, "measured ResNet-18: %s", err.msg);
        algos_text(r18, text, sizeof text);
        CHECK(!strncmp(text + 4 * ds, "ddd", 3), "measured: the downsample conv planned '%.3s'", text + 4 * ds);
        sdgp_model_destroy(r18);
    }
    char path[256];
    tmp_path(path, sizeof path, "convs.safetensors");
    sdgp_train_config tc = sdgp_train_config_default();
    tc.model = c;
    sdgp_checkpoint_state st = {0};
    REQUIRE(sdgp_checkpoint_save(path, a, &tc, &st, &err) == SDGP_OK, "%s", err.msg);
    REQUIRE(sdgp_model_set_choice(b, with_algos(b, wino ? "ddd,dwd" : "ddd,ddd", text, sizeof text), &err) == SDGP_OK, "%s",
            err.msg);
    REQUIRE(sdgp_checkpoint_load(path, b, NULL, &err) == SDGP_OK, "%s", err.msg);
    CHECK(!strcmp(algos_text(b, choice, sizeof choice), mix), "restored: '%s'", choice);
    sdgp_train_config rc;
    REQUIRE(sdgp_checkpoint_read_config(path, &rc, &err) == SDGP_OK, "%s", err.msg);
    sdgp_model_choice(a, text, sizeof text);
    CHECK(!strcmp(rc.model.choice, text) && rc.model.conv_algo == SDGP_CONV_MEASURED, "config: '%s'", rc.model.choice);
    sdgp_model_config gc = c;
    snprintf(gc.choice, sizeof gc.choice, "%s", rc.model.choice);
    sdgp_model *g;
    REQUIRE(sdgp_model_create(&g, &gc, &err) == SDGP_OK, "%s", err.msg);
    CHECK(!strcmp(algos_text(g, choice, sizeof choice), mix), "built from the given choice: '%s'", choice);
    sdgp_model_destroy(g);
    snprintf(gc.choice, sizeof gc.choice, "%s", "---:ddd,---:qqq");
    CHECK(sdgp_model_create(&g, &gc, &err) == SDGP_ERR_INVALID && g == NULL && strstr(err.msg, "layer 1"),
          "a bad given choice: %s", err.msg);
    /* the algorithms are part of the run's bits: an AUTO model loading the checkpoint plans them too */
    sdgp_model_config ac = small_config(8);
    sdgp_model *m_auto;
    REQUIRE(sdgp_model_create(&m_auto, &ac, &err) == SDGP_OK, "%s", err.msg);
    REQUIRE(sdgp_checkpoint_load(path, m_auto, NULL, &err) == SDGP_OK, "%s", err.msg);
    CHECK(!strcmp(algos_text(m_auto, choice, sizeof choice), mix), "auto model planned '%s', the checkpoint '%s'", choice, mix);
    sdgp_model_destroy(m_auto);
    /* a and b now plan the same: a step gives bitwise the same gradients */
    double f1, l1, f2, l2;
    if (have_fmnist) {
        CHECK(train_steps(a, &fmnist, 2, 1, &f1, &l1) && train_steps(b, &fmnist, 2, 1, &f2, &l2), "steps");
        CHECK(f1 == f2 && l1 == l2, "same plans, same losses: %.9g %.9g vs %.9g %.9g", f1, l1, f2, l2);
    }
    unlink(path);
    sdgp_model_destroy(a);
    sdgp_model_destroy(b);
}

int main(void) {
    omp_set_num_threads(2);
    have_fmnist = load_fmnist(&fmnist);
    RUN(checkpoint_keeps_kernel_choice);
    RUN(checkpoint_keeps_conv_choice);
    RUN(checkpoint_resume_is_exact);
    sdgp_dataset_free(&fmnist);
    return test_finish();
}
