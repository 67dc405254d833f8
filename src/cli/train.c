/* sdgp train / sdgp eval: flags map one to one onto the configuration table (src/train/config.c). */
#include <stdio.h>
#include <string.h>
#include <omp.h>
#include <unistd.h>

#include "cli/cli.h"
#include "sdgp/train.h"

static void train_usage(FILE *f) {
    sdgp_train_config def = sdgp_train_config_default();
    fprintf(f,
            "usage: sdgp train [options]\n\n"
            "Trains a model; with no options, ResNet-9 (width 0.25) on Fashion-MNIST with the reference recipe\n"
            "scaled to 15 epochs, and reports test accuracy.\n\noptions (default in brackets):\n");
    for (int i = 0; i < sdgp_train_config_field_count(); i++) {
        const char *help;
        char val[64], flag[48];
        const char *name = sdgp_train_config_field(&def, i, &help, val, sizeof val);
        if (sdgp_train_config_field_is_bool(i)) snprintf(flag, sizeof flag, "--[no-]%s", name);
        else snprintf(flag, sizeof flag, "--%s X", name);
        fprintf(f, "  %-26s %s [%s]\n", flag, help, val);
    }
    fprintf(f, "  %-26s continue the run of this checkpoint (its settings; flags given here override)\n", "--resume FILE");
    fprintf(f, "  %-26s no per-epoch lines\n", "--quiet");
    fprintf(f, "\nData parallel over MPI: mpirun -np K sdgp train ... runs K ranks on shares of each global batch\n"
               "(--batch-size, divisible by K); weight gradients are summed over ranks, rank 0 logs and checkpoints,\n"
               "and checkpoints resume under any K. --sync-bn makes BatchNorm use the global batch's statistics.\n");
}

/* Applies argv's flags to cfg. Returns 0 on success, else prints why and returns 2. */
int cli_apply_train_flags(sdgp_train_config *cfg, int argc, char **argv, const char **resume) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "sdgp: unexpected argument '%s' (see --help)\n", a);
            return 2;
        }
        const char *name = a + 2;
        if (!strcmp(name, "quiet")) {
            cfg->quiet = 1;
            continue;
        }
        if (!strcmp(name, "resume")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "sdgp: --resume needs a checkpoint file\n");
                return 2;
            }
            if (resume) *resume = argv[i + 1];
            i++;
            continue;
        }
        int field = -1, negate = 0;
        for (int f = 0; f < sdgp_train_config_field_count(); f++) {
            char buf[8];
            const char *fname = sdgp_train_config_field(cfg, f, NULL, buf, sizeof buf);
            if (!strcmp(name, fname)) field = f;
            else if (sdgp_train_config_field_is_bool(f) && !strncmp(name, "no-", 3) && !strcmp(name + 3, fname)) {
                field = f;
                negate = 1;
            }
        }
        if (field < 0) {
            fprintf(stderr, "sdgp: unknown option '%s' (see sdgp %s --help)\n", a, argv[0]);
            return 2;
        }
        char buf[8];
        const char *fname = sdgp_train_config_field(cfg, field, NULL, buf, sizeof buf);
        const char *value;
        if (sdgp_train_config_field_is_bool(field)) {
            value = negate ? "0" : "1";
        } else {
            if (i + 1 >= argc) {
                fprintf(stderr, "sdgp: %s needs a value\n", a);
                return 2;
            }
            value = argv[++i];
        }
        sdgp_error err;
        if (sdgp_train_config_set(cfg, fname, value, &err) != SDGP_OK) {
            fprintf(stderr, "sdgp: --%s\n", err.msg);
            return 2;
        }
    }
    return 0;
}

static int has_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    return 0;
}

/* Exit code for a library status: bad input 2, everything else 1. */
static int exit_code(sdgp_status st) {
    return st == SDGP_ERR_INVALID || st == SDGP_ERR_FORMAT || st == SDGP_ERR_IO ? 2 : 1;
}

static int train_run(int argc, char **argv, const sdgp_dist *dist);

int sdgp_cmd_train(int argc, char **argv) {
    if (has_help(argc, argv)) {
        train_usage(stdout);
        return 0;
    }
    const sdgp_dist *dist = cli_dist_start();
    int rc = train_run(argc, argv, dist && dist->size > 1 ? dist : NULL);
    cli_dist_end(dist, rc);
    return rc;
}

/* Under mpirun (dist): rank 0 alone prints the settings and the result; errors come from every
 * rank, each naming itself. */
static int train_run(int argc, char **argv, const sdgp_dist *dist) {
    int lead = !dist || dist->rank == 0;
    char who[32] = "";
    if (dist) snprintf(who, sizeof who, "rank %d: ", dist->rank);
    sdgp_train_config cfg = sdgp_train_config_default();
    const char *resume = NULL;
    if (cli_apply_train_flags(&cfg, argc, argv, &resume)) return 2;
    sdgp_error err;
    if (resume) { /* the checkpoint's settings, then this command's flags on top */
        if (sdgp_checkpoint_read_config(resume, &cfg, &err) != SDGP_OK) {
            fprintf(stderr, "sdgp: %s--resume %s\n", who, err.msg);
            return 2;
        }
        if (cli_apply_train_flags(&cfg, argc, argv, NULL)) return 2;
        snprintf(cfg.resume, sizeof cfg.resume, "%s", resume);
    }
    cfg.progress = isatty(2);
    cfg.dist = dist;
    char val[1100];
    if (lead) {
        fprintf(stderr, "sdgp train:");
        for (int i = 0; i < sdgp_train_config_field_count(); i++) {
            const char *name = sdgp_train_config_field(&cfg, i, NULL, val, sizeof val);
            if (val[0]) fprintf(stderr, " %s=%s", name, val);
        }
        fprintf(stderr, "\n");
    }
    sdgp_train_result res;
    sdgp_status st = sdgp_train(&cfg, &res, stderr, &err);
    if (st != SDGP_OK) {
        fprintf(stderr, "%ssdgp: %s%s\n", cfg.progress && lead ? "\n" : "", who, err.msg);
        return exit_code(st);
    }
    if (lead)
        printf("test accuracy %.2f%% (loss %.4f) after %d epochs, %lld steps, %.1f s, %.0f img/s\n", 100 * res.test_acc,
               res.test_loss, res.epochs_done, (long long)res.steps, res.elapsed_s, res.img_per_s);
    return 0;
}

int sdgp_cmd_eval(int argc, char **argv) {
    if (has_help(argc, argv)) {
        printf("usage: sdgp eval --checkpoint FILE [--data NAME] [--data-dir DIR] [--[no-]tta] [--threads N] [--batch-size B]\n\n"
               "Evaluates a checkpoint on the test split: prints accuracy and loss.\n");
        return 0;
    }
    const char *path = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--checkpoint")) path = argv[i + 1];
    if (!path) {
        fprintf(stderr, "sdgp: eval needs --checkpoint FILE\n");
        return 2;
    }
    sdgp_train_config cfg;
    sdgp_error err;
    if (sdgp_checkpoint_read_config(path, &cfg, &err) != SDGP_OK) {
        fprintf(stderr, "sdgp: %s\n", err.msg);
        return 2;
    }
    if (cli_apply_train_flags(&cfg, argc, argv, NULL)) return 2;
    if (cfg.model.threads > 0) omp_set_num_threads(cfg.model.threads);
    sdgp_dataset test;
    sdgp_status st = sdgp_dataset_load(&test, cfg.data, cfg.data_dir, 0, &err);
    if (st != SDGP_OK) {
        fprintf(stderr, "sdgp: %s\n", err.msg);
        return exit_code(st);
    }
    sdgp_model_config mc = cfg.model;
    mc.height = test.h;
    mc.width_px = test.w;
    mc.channels = test.c;
    mc.num_classes = test.num_classes;
    mc.prune.fn = SDGP_PRUNE_NONE; /* evaluation has no backward */
    mc.prune_wgrad.fn = SDGP_PRUNE_NONE;
    sdgp_model *m = NULL;
    sdgp_checkpoint_state state;
    double loss = 0, acc = 0;
    st = sdgp_model_create(&m, &mc, &err);
    if (st == SDGP_OK) st = sdgp_checkpoint_load(path, m, &state, &err);
    if (st == SDGP_OK) {
        sdgp_augment aug = cfg.augment;
        memcpy(aug.mean, state.mean, sizeof aug.mean);
        memcpy(aug.std, state.std, sizeof aug.std);
        st = sdgp_evaluate(m, &test, &aug, cfg.tta, cfg.label_smoothing, &loss, &acc, &err);
    }
    int64_t images = test.count;
    sdgp_model_destroy(m);
    sdgp_dataset_free(&test);
    if (st != SDGP_OK) {
        fprintf(stderr, "sdgp: %s\n", err.msg);
        return exit_code(st);
    }
    printf("test accuracy %.2f%% (loss %.4f) on %lld images of %s, step %lld%s\n", 100 * acc, loss, (long long)images,
           cfg.data, (long long)state.step, cfg.tta ? ", with flip TTA" : "");
    return 0;
}
