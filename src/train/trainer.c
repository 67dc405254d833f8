/* The training loop: data, schedule, steps, evaluation, logs, checkpoints, numerical guards. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sdgp/train.h"
#include "train/train_internal.h"

/* Over batches [b0, b1) of ds (batch b: images [bB, bB + B), the model's batch B): each batch's
 * loss sum into batch_loss[b - b0], and the correct count. */
static sdgp_status evaluate_batches(sdgp_model *m, const sdgp_dataset *ds, int64_t b0, int64_t b1,
                                    const sdgp_augment *aug, int tta, float smoothing, double *batch_loss,
                                    int64_t *correct_out, sdgp_error *err) {
    const sdgp_model_config *c = sdgp_model_get_config(m);
    int B = c->batch, K = c->num_classes;
    size_t img = (size_t)ds->h * ds->w * ds->c;
    float *x = calloc((size_t)B * img, sizeof(float)), *avg = calloc((size_t)B * K, sizeof(float));
    int32_t *y = calloc((size_t)B, sizeof(int32_t));
    int64_t *idx = calloc((size_t)B, sizeof(int64_t));
    if (!x || !avg || !y || !idx) {
        free(x), free(avg), free(y), free(idx);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "evaluate: out of memory for batch %d", B);
    }
    sdgp_augment norm = *aug;
    norm.flip = norm.translate = norm.cutout = 0;
    int64_t correct = 0;
    for (int64_t b = b0; b < b1; b++) {
        int64_t start = b * B;
        int n = (int)(ds->count - start < B ? ds->count - start : B);
        for (int i = 0; i < B; i++) idx[i] = start + (i < n ? i : 0); /* pad a short last batch; rows >= n are ignored */
        for (int pass = 0; pass < (tta ? 2 : 1); pass++) {
            sdgp_batch_build(x, y, ds, idx, B, &norm, 0, 0, pass);
            const float *logits = sdgp_model_forward(m, x, 0);
            for (size_t i = 0; i < (size_t)B * K; i++) avg[i] = pass ? 0.5f * (avg[i] + logits[i]) : logits[i];
        }
        int ok = 0;
        batch_loss[b - b0] = sdgp_softmax_xent(NULL, &ok, avg, y, n, K, smoothing) * n;
        correct += ok;
    }
    *correct_out = correct;
    free(x), free(avg), free(y), free(idx);
    return SDGP_OK;
}

/* Over all of ds; with d, each process takes a contiguous run of whole batches (the batches one
 * process makes, so every image is in the same batch at the same row) and the sums are added.
 * Each batch's loss sum has a slot of its own, filled by one process and zero on the others: the
 * allreduce adds only zeros to it, exact in any order, and the slots are then added in batch
 * order as one process adds them. So the loss is bitwise that of one process at the same batch
 * size, for any number of processes and any MPI reduction algorithm (and the count is exact). */
static sdgp_status evaluate_dist(sdgp_model *m, const sdgp_dataset *ds, const sdgp_augment *aug, int tta,
                                 float smoothing, const sdgp_dist *d, double *loss, double *acc, sdgp_error *err) {
    int64_t B = sdgp_model_get_config(m)->batch, nb = (ds->count + B - 1) / B;
    int64_t b0 = d ? nb * d->rank / d->size : 0, b1 = d ? nb * (d->rank + 1) / d->size : nb;
    double *sums = calloc((size_t)nb + 1, sizeof(double)); /* nb batch loss sums, then the correct count */
    if (!sums) return sdgp_fail(err, SDGP_ERR_NOMEM, "evaluate: out of memory for %lld batch sums", (long long)nb);
    int64_t correct = 0;
    sdgp_status st = evaluate_batches(m, ds, b0, b1, aug, tta, smoothing, sums + b0, &correct, err);
    sums[nb] = (double)correct; /* exact: counts below 2^53 */
    if (st == SDGP_OK && d) st = d->allreduce(d->ctx, sums, (size_t)nb + 1, SDGP_DIST_DOUBLE, err);
    double loss_sum = 0;
    for (int64_t b = 0; b < nb; b++) loss_sum += sums[b];
    if (st == SDGP_OK) {
        *loss = loss_sum / (double)ds->count;
        *acc = sums[nb] / (double)ds->count;
    }
    free(sums);
    return st;
}

sdgp_status sdgp_evaluate(sdgp_model *m, const sdgp_dataset *ds, const sdgp_augment *aug, int tta, float smoothing,
                          double *loss, double *acc, sdgp_error *err) {
    return evaluate_dist(m, ds, aug, tta, smoothing, NULL, loss, acc, err);
}

sdgp_status sdgp_evaluate_dist(sdgp_model *m, const sdgp_dataset *ds, const sdgp_augment *aug, int tta,
                               float smoothing, const sdgp_dist *d, double *loss, double *acc, sdgp_error *err) {
    if (d && d->size > 1) { /* a difference would give a wrong total, or collectives of different counts */
        sdgp_status st = dist_check_eval(d, m, ds, aug, tta, smoothing, err);
        if (st != SDGP_OK) return st;
    }
    return evaluate_dist(m, ds, aug, tta, smoothing, d && d->size > 1 ? d : NULL, loss, acc, err);
}

/* Names the first parameter whose gradient (grads != 0) or value is not finite, or returns NULL. */
static const char *nonfinite_param(const sdgp_model *m, int grads) {
    for (int i = 0; i < sdgp_model_param_count(m); i++) {
        const sdgp_param *p = sdgp_model_param(m, i);
        if (grads && !p->trainable) continue;
        const float *v = grads ? p->grad : p->data;
        int bad = 0;
        for (size_t j = 0; j < p->count; j++) bad |= !(v[j] - v[j] == 0.0f); /* NaN and Inf give NaN */
        if (bad) return p->name;
    }
    return NULL;
}

enum { KERNELS_MEASURED, KERNELS_AS_GIVEN, KERNELS_FROM_CHECKPOINT };

typedef struct {
    const sdgp_train_config *cfg;
    sdgp_model *model;
    sdgp_dataset train, test;
    sdgp_augment aug;
    sdgp_loader *loader;
    FILE *log, *out;
    float *dlogits;
    float *bn_backup; /* running statistics before the step, for --on-nan skip */
    int64_t spe, total_steps, end_step;
    sdgp_schedule sched;
    double t_start, t_eval;  /* t_eval: time spent in evaluations, for the training throughput */
    const sdgp_dist *d;      /* data parallel over several processes, else NULL */
    int lead;                /* this process logs, prints and writes checkpoints (rank 0, or the only one) */
    int batch;               /* this process's rows of each batch */
    int kernels_given;       /* the choice was not measured: KERNELS_AS_GIVEN (--kernels) or _FROM_CHECKPOINT */
    grad_sync *gs;
} run;

static void run_free(run *r) {
    grad_sync_destroy(r->gs);
    sdgp_loader_destroy(r->loader);
    sdgp_model_destroy(r->model);
    sdgp_dataset_free(&r->train);
    sdgp_dataset_free(&r->test);
    if (r->log) fclose(r->log);
    free(r->dlogits);
    free(r->bn_backup);
}

static void bn_stats_copy(sdgp_model *m, float *buf, int restore) {
    for (int i = 0; i < sdgp_model_param_count(m); i++) {
        const sdgp_param *p = sdgp_model_param(m, i);
        if (p->trainable) continue;
        if (restore) memcpy(p->data, buf, p->count * sizeof(float));
        else memcpy(buf, p->data, p->count * sizeof(float));
        buf += p->count;
    }
}

static void log_grad_stats(run *r, int64_t step) {
    if (!r->log) return;
    fprintf(r->log, "{\"event\":\"grad_stats\",\"step\":%lld,\"layers\":[", (long long)step);
    int first = 1;
    for (int i = 0; i < sdgp_model_conv_count(r->model); i++) {
        const sdgp_layer_info *li = sdgp_model_conv_info(r->model, i);
        if (!li->pruned) continue;
        fprintf(r->log, "%s{\"layer\":\"%s\",\"rel_l2\":%.6g,\"cosine\":%.6g}", first ? "" : ",", li->layer, li->rel_l2,
                li->cosine);
        first = 0;
    }
    fprintf(r->log, "]}\n");
    fflush(r->log);
}

/* Data parallel: the training throughput and the gradient allreduce's counters of the epoch into
 * the open epoch line. exposed_s: time the training thread spent in communication calls; the
 * overlapped fraction compares it with a blocking allreduce of all gradients per step. */
static void log_comm(run *r, const sdgp_train_result *res, double elapsed) {
    double train_s = elapsed - r->t_eval;
    fprintf(r->log, ",\"train_img_per_s\":%.1f", (double)res->steps * r->cfg->model.batch / (train_s > 0 ? train_s : 1));
    if (!r->gs) return;
    grad_sync_stats g = grad_sync_take_stats(r->gs);
    double blocking_s = 1e-3 * g.blocking_ms * (double)g.steps;
    double overlap = blocking_s > 0 ? 1.0 - g.exposed_s / blocking_s : 0.0;
    fprintf(r->log,
            ",\"ranks\":%d,\"allreduce_bytes_per_step\":%zu,\"buckets\":%d,\"allreduce_blocking_ms\":%.3f,"
            "\"comm_steps\":%lld,\"comm_exposed_s\":%.4f,\"comm_wait_s\":%.4f,\"comm_inflight_s\":%.4f,"
            "\"overlap\":%.3f",
            r->d->size, g.floats * sizeof(float), g.buckets, g.blocking_ms, (long long)g.steps, g.exposed_s, g.wait_s,
            g.inflight_s, overlap < 0 ? 0.0 : overlap);
}

static sdgp_status end_of_epoch(run *r, int64_t step, int epoch, double train_loss, double lr, sdgp_train_result *res,
                                sdgp_error *err) {
    double test_loss, test_acc, t0 = sdgp_now_s();
    sdgp_status st = SDGP_OK;
    if (r->d && !r->cfg->sync_bn) st = dist_share_bn_stats(r->d, r->model, err); /* evaluate with rank 0's */
    if (st == SDGP_OK)
        st = evaluate_dist(r->model, &r->test, &r->aug, r->cfg->tta, r->cfg->label_smoothing, r->d, &test_loss,
                           &test_acc, err);
    if (st != SDGP_OK) return st;
    double elapsed = sdgp_now_s() - r->t_start;
    r->t_eval += sdgp_now_s() - t0;
    double ips = (double)res->steps * r->cfg->model.batch / (elapsed > 0 ? elapsed : 1);
    if (r->log) {
        fprintf(r->log,
                "{\"event\":\"epoch\",\"epoch\":%d,\"step\":%lld,\"lr\":%.6g,\"train_loss\":%.6f,\"test_loss\":%.6f,"
                "\"test_acc\":%.6f,\"elapsed_s\":%.3f,\"img_per_s\":%.1f",
                epoch, (long long)step, lr, train_loss, test_loss, test_acc, elapsed, ips);
        log_comm(r, res, elapsed);
        fprintf(r->log, "}\n");
        fflush(r->log);
    }
    if (!r->cfg->quiet && r->lead)
        fprintf(r->out, "%sepoch %d  step %lld  lr %.4f  train_loss %.4f  test_loss %.4f  test_acc %.2f%%  %.0fs  %.0f img/s\n",
                r->cfg->progress ? "\r\033[K" : "", epoch, (long long)step, lr, train_loss, test_loss, 100 * test_acc,
                elapsed, ips);
    res->epochs_done = epoch;
    res->train_loss = train_loss;
    res->test_loss = test_loss;
    res->test_acc = test_acc;
    res->elapsed_s = elapsed;
    res->img_per_s = ips;
    return SDGP_OK;
}

/* Data parallel: every process on rank 0's kernels, the same configuration, data and weights
 * (checked), BatchNorm synchronised when asked, and the gradient buckets. */
static sdgp_status setup_dist(run *r, int64_t start_step, sdgp_error *err) {
    sdgp_status st = dist_share_kernels(r->d, r->model, err);
    if (st == SDGP_OK) st = dist_check_config(r->d, r->cfg, &r->train, r->model, start_step, err);
    if (st == SDGP_OK && r->cfg->sync_bn) st = sdgp_model_set_bn_dist(r->model, r->d, err);
    if (st == SDGP_OK) st = grad_sync_create(&r->gs, r->model, r->d, r->cfg->allreduce_at_end, err);
    return st;
}

static sdgp_status setup(run *r, sdgp_checkpoint_state *state, sdgp_error *err) {
    const sdgp_train_config *cfg = r->cfg;
    sdgp_status st = sdgp_dataset_load(&r->train, cfg->data, cfg->data_dir, 1, err);
    if (st == SDGP_OK) st = sdgp_dataset_load(&r->test, cfg->data, cfg->data_dir, 0, err);
    if (st != SDGP_OK) return st;
    r->aug = cfg->augment;
    sdgp_dataset_stats(&r->train, r->aug.mean, r->aug.std);
    sdgp_model_config mc = cfg->model;
    if (r->d && mc.batch % r->d->size != 0)
        return sdgp_fail(err, SDGP_ERR_INVALID, "--batch-size %d is not divisible by the %d MPI ranks (each takes an "
                         "equal share of the global batch)", mc.batch, r->d->size);
    r->batch = mc.batch = r->d ? mc.batch / r->d->size : mc.batch;
    mc.height = r->train.h;
    mc.width_px = r->train.w;
    mc.channels = r->train.c;
    mc.num_classes = r->train.num_classes;
    /* resumed: the checkpoint's implementations and algorithms, so that the model is built as the run
     * it continues, bitwise, without timing anything (checkpoint loading would set them anyway) */
    r->kernels_given = mc.choice[0] ? KERNELS_AS_GIVEN : KERNELS_MEASURED;
    char saved[SDGP_CHOICE_LEN] = "";
    if (cfg->resume[0]) {
        if ((st = checkpoint_read_choice(cfg->resume, saved, err)) != SDGP_OK) return st;
        if (!mc.choice[0] && saved[0]) snprintf(mc.choice, sizeof mc.choice, "%s", saved);
        if (saved[0] && !strcmp(mc.choice, saved)) r->kernels_given = KERNELS_FROM_CHECKPOINT; /* read_config's too */
    }
    st = sdgp_model_create(&r->model, &mc, err);
    if (st != SDGP_OK) return st;
    if (r->kernels_given == KERNELS_AS_GIVEN && saved[0]) { /* --kernels on a resume: only the run's own choice */
        char mine[SDGP_CHOICE_LEN];
        sdgp_model_choice(r->model, mine, sizeof mine);
        if (strcmp(mine, saved))
            return sdgp_fail(err, SDGP_ERR_INVALID, "--kernels %s: the run in %s ran on %s, and a resumed run keeps its choice",
                             mc.choice, cfg->resume, saved);
    }
    memset(state, 0, sizeof *state);
    if (cfg->resume[0]) {
        st = sdgp_checkpoint_load(cfg->resume, r->model, state, err);
        if (st != SDGP_OK) return st;
        memcpy(r->aug.mean, state->mean, sizeof state->mean);
        memcpy(r->aug.std, state->std, sizeof state->std);
    } else {
        memcpy(state->mean, r->aug.mean, sizeof state->mean);
        memcpy(state->std, r->aug.std, sizeof state->std);
    }
    const int B = cfg->model.batch;
    r->spe = r->train.count / B;
    if (r->spe < 1)
        return sdgp_fail(err, SDGP_ERR_INVALID, "batch size %d is larger than the training set (%lld images)", B,
                         (long long)r->train.count);
    r->total_steps = r->spe * cfg->epochs;
    r->end_step = cfg->max_steps > 0 && cfg->max_steps < r->total_steps ? cfg->max_steps : r->total_steps;
    if (state->step > r->end_step)
        return sdgp_fail(err, SDGP_ERR_INVALID, "%s: checkpoint is at step %lld, past this run's end (%lld)", cfg->resume,
                         (long long)state->step, (long long)r->end_step);
    r->sched = (sdgp_schedule){cfg->schedule, cfg->lr, 1e-4f, (int64_t)(cfg->warmup_epochs * (float)r->spe),
                               r->total_steps, (int64_t)(cfg->step_epochs * (float)r->spe), cfg->step_gamma};
    if (r->sched.step_size < 1) r->sched.step_size = 1;
    if (r->d) st = setup_dist(r, state->step, err);
    if (st != SDGP_OK) return st;
    int r0 = r->d ? r->d->rank * r->batch : 0;
    st = sdgp_loader_create_part(&r->loader, &r->train, B, r0, r0 + r->batch, &r->aug, mc.seed, state->step, err);
    if (st != SDGP_OK) return st;
    size_t bn_floats = 0;
    for (int i = 0; i < sdgp_model_param_count(r->model); i++)
        if (!sdgp_model_param(r->model, i)->trainable) bn_floats += sdgp_model_param(r->model, i)->count;
    r->dlogits = calloc((size_t)mc.batch * mc.num_classes, sizeof(float));
    r->bn_backup = calloc(bn_floats + 1, sizeof(float));
    if (!r->dlogits || !r->bn_backup) return sdgp_fail(err, SDGP_ERR_NOMEM, "train: out of memory");
    if (cfg->log[0] && r->lead) {
        r->log = fopen(cfg->log, cfg->resume[0] ? "a" : "w");
        if (!r->log) return sdgp_fail(err, SDGP_ERR_IO, "--log %s: cannot open for writing", cfg->log);
    }
    return SDGP_OK;
}

static void report_layers(run *r) {
    if (r->cfg->quiet || !r->lead) return;
    if (r->d) {
        grad_sync_stats g = grad_sync_take_stats(r->gs);
        fprintf(r->out, "data parallel: %d ranks x %d threads, global batch %d (%d per rank), BN %s; gradient allreduce "
                "%.2f MB per step in %d buckets (blocking: %.2f ms)\n", r->d->size, omp_get_max_threads(),
                r->cfg->model.batch, r->batch, r->cfg->sync_bn ? "synced" : "per-rank", 1e-6 * (double)g.floats * 4,
                g.buckets, g.blocking_ms);
    }
    /* which instruction sets run: a run's bits depend on them (SDGP_ISA and --isa lower sdgp's,
     * DNNL_MAX_CPU_ISA oneDNN's) */
    sdgp_isa own, pruning;
    sdgp_error e;
    if (sdgp_isa_resolve(SDGP_ISA_AUTO, &own, &e) == SDGP_OK) {
        fprintf(r->out, "kernel ISA: sdgp %s", sdgp_isa_name(own));
        if (sdgp_isa_resolve(r->cfg->model.prune.isa, &pruning, &e) == SDGP_OK && pruning != own)
            fprintf(r->out, " (pruning and sparse kernels %s: --isa)", sdgp_isa_name(pruning));
        fprintf(r->out, ", oneDNN %s\n", sdgp_conv_onednn_isa());
    }
    /* per layer: forward,backward-data,backward-weights as "direct", or "wino" (oneDNN's, with its
     * split, images per call x channel slices, when it has one) or "sdgp-wino" (sdgp's kernels) */
    fprintf(r->out, "dense convolutions (--conv-algo %s%s --conv-workspace %d; fwd,bwd-data,bwd-weights):",
            sdgp_conv_algo_name(r->cfg->model.conv_algo),
            r->cfg->model.conv_algo != SDGP_CONV_MEASURED ? ""
            : r->kernels_given == KERNELS_MEASURED          ? " [timed at start]"
            : r->kernels_given == KERNELS_FROM_CHECKPOINT   ? " [the checkpoint's, not timed]"
                                                            : " [as given, not timed]",
            r->cfg->model.conv_workspace_mb);
    for (int i = 0; i < sdgp_model_conv_count(r->model); i++) {
        const sdgp_layer_info *li = sdgp_model_conv_info(r->model, i);
        fprintf(r->out, " %s=", li->layer);
        for (int p = 0; p < 3; p++) {
            const sdgp_conv_pass_plan *pl = &li->plan[p];
            if (pl->algo != SDGP_CONV_WINOGRAD) fprintf(r->out, "%sdirect", p ? "," : "");
            else if (!strcmp(pl->impl, "sdgp")) fprintf(r->out, "%ssdgp-wino", p ? "," : "");
            else if (pl->chunk == r->batch && pl->parts == 1) fprintf(r->out, "%swino", p ? "," : "");
            else fprintf(r->out, "%swino/%dx%d", p ? "," : "", pl->chunk, pl->parts);
        }
    }
    fprintf(r->out, "\nactivations: %.1f MB per step (--recompute %s)\n", 1e-6 * (double)sdgp_model_activation_bytes(r->model),
            sdgp_recompute_names[r->cfg->model.recompute]);
    const sdgp_weights_cfg *w = &r->cfg->model.weights;
    if (w->kind != SDGP_WEIGHTS_DENSE) {
        /* what one mask covers, indexed by sdgp_weights_group */
        static const char *const mask_per[] = {"(output channel, tap)", "output channel", "block of 16 output channels",
                                               "block of 32 output channels", "(input channel, tap)"};
        fprintf(r->out, "sparse weights: %s %d:%d along %s channels, a mask per %s%s; layers:",
                sdgp_weights_kind_names[w->kind], w->n, w->m, w->group == SDGP_WGROUP_COUT ? "output" : "input", mask_per[w->group],
                w->kind == SDGP_WEIGHTS_SRSTE ? "" : ", beta per tensor frozen at initialisation");
        for (int i = 0; i < sdgp_model_conv_count(r->model); i++) {
            const sdgp_layer_info *li = sdgp_model_conv_info(r->model, i);
            fprintf(r->out, " %s=%s%s", li->layer,
                    !li->sparse_weights ? "dense" : li->sparse_forward == 3 ? "sparse+cout" : li->sparse_forward == 2 ? "sparse+winograd"
                                    : li->sparse_forward ? "sparse+kernel" : "sparse",
                    li->sparse_data ? "+data" : "");
        }
        fprintf(r->out, " classifier=%s (forward: the sparse-weight kernel where marked +kernel, +winograd or +cout, else oneDNN on "
                "W~; data gradient: the sparse-weight kernel where marked +data, else as below or oneDNN on W~)\n",
                w->classifier ? "sparse" : "dense");
    }
    const sdgp_prune_cfg *pw = &r->cfg->model.prune_wgrad;
    if (pw->fn != SDGP_PRUNE_NONE) {
        /* m: the N:M weight-gradient kernel on the compressed dL/dO; else oneDNN on the dense pruned tensor */
        sdgp_prune_cfg rows = *pw; /* pruned along positions */
        rows.axis = SDGP_AXIS_ROW;
        fprintf(r->out, "weight gradient: %s %d:%d along positions (%s pruning), a mask per %d output channel%s; kernel per layer:",
                sdgp_prune_fn_name(pw->fn), pw->n, pw->m, sdgp_prune_kernel(&rows), pw->mask_block > 1 ? pw->mask_block : 1,
                pw->mask_block > 1 ? "s" : "");
        for (int i = 0; i < sdgp_model_conv_count(r->model); i++) {
            const sdgp_layer_info *li = sdgp_model_conv_info(r->model, i);
            fprintf(r->out, " %s=%s", li->layer, li->sparse_wgrad ? "sparse" : li->pruned_wgrad ? "pruned+dense" : "dense");
        }
        fprintf(r->out, "\n");
    }
    if (r->cfg->model.prune.fn == SDGP_PRUNE_NONE) return;
    /* which pruning kernels: the ISA's, or the reference for a shape they do not take */
    fprintf(r->out, "pruning dL/dO: %s %d:%d (%s pruning), domain %s, mask block %d; data gradient per layer:",
            sdgp_prune_fn_name(r->cfg->model.prune.fn), r->cfg->model.prune.n, r->cfg->model.prune.m, sdgp_prune_kernel(&r->cfg->model.prune),
            sdgp_prune_domain_name(r->cfg->model.domain), r->cfg->model.prune.mask_block > 1 ? r->cfg->model.prune.mask_block : 1);
    for (int i = 0; i < sdgp_model_conv_count(r->model); i++) {
        const sdgp_layer_info *li = sdgp_model_conv_info(r->model, i);
        /* sparse: pixel-domain kernel; winograd: Winograd-domain kernel; pruned+dense: oneDNN on the pruned tensor */
        fprintf(r->out, " %s=%s", li->layer,
                !li->pruned ? (li->bwd_kernel[0] == 'd' ? "dense" : li->bwd_kernel) : !li->sparse_kernel ? "pruned+dense" : li->bwd_kernel);
    }
    fprintf(r->out, "\n");
}

/* The choice as text: `--kernels TEXT` runs a fresh run on the same implementations and
 * algorithms, so with the same bits. */
static void report_choice(run *r) {
    if (r->cfg->quiet || !r->lead) return;
    char choice[SDGP_CHOICE_LEN];
    sdgp_model_choice(r->model, choice, sizeof choice);
    fprintf(r->out, "choice (per conv layer: fwd, bwd-data, bwd-weights implementation : oneDNN algorithms) %s (%s)\n",
            choice, r->kernels_given == KERNELS_AS_GIVEN          ? "as given"
                    : r->kernels_given == KERNELS_FROM_CHECKPOINT ? "the checkpoint's, not timed"
                                                                  : "timed at start; --kernels replays it");
}

sdgp_status sdgp_train(const sdgp_train_config *cfg, sdgp_train_result *res, FILE *out, sdgp_error *err) {
    run r;
    memset(&r, 0, sizeof r);
    memset(res, 0, sizeof *res);
    r.cfg = cfg;
    r.out = out ? out : stderr;
    r.d = cfg->dist && cfg->dist->size > 1 ? cfg->dist : NULL;
    r.lead = !r.d || r.d->rank == 0;
    if (cfg->model.threads > 0) omp_set_num_threads(cfg->model.threads);
    sdgp_checkpoint_state state;
    sdgp_status st = setup(&r, &state, err);
    if (st != SDGP_OK) {
        run_free(&r);
        return st;
    }
    report_layers(&r);
    report_choice(&r);
    const int B = cfg->model.batch, K = r.train.num_classes;
    r.t_start = sdgp_now_s();
    double lr = 0;
    for (int64_t step = state.step; step < r.end_step; step++) {
        const float *x;
        const int32_t *y;
        sdgp_loader_next(r.loader, &x, &y);
        lr = sdgp_schedule_lr(&r.sched, step);
        int stats = cfg->grad_stats_every > 0 && step % cfg->grad_stats_every == 0;
        sdgp_model_enable_grad_stats(r.model, stats);
        if (cfg->on_nan == SDGP_ON_NAN_SKIP) bn_stats_copy(r.model, r.bn_backup, 0);
        const float *logits = sdgp_model_forward(r.model, x, 1);
        /* this process's rows' share of the global batch's mean loss, and their dlogits */
        double loss = sdgp_softmax_xent_part(r.dlogits, NULL, logits, y, r.batch, K, cfg->label_smoothing, B);
        /* data parallel: every process needs the global loss to take the same decision below */
        if (r.d && (st = r.d->allreduce(r.d->ctx, &loss, 1, SDGP_DIST_DOUBLE, err)) != SDGP_OK) break;
        const char *bad = isfinite(loss) ? NULL : "the loss";
        if (!bad) {
            if (r.gs) grad_sync_begin(r.gs);
            st = sdgp_model_backward(r.model, r.dlogits, (uint64_t)step, err);
            if (st == SDGP_OK && r.gs) st = grad_sync_end(r.gs, err); /* the sums over processes */
            if (st != SDGP_OK) break;
            bad = nonfinite_param(r.model, 1);
        }
        if (bad) {
            if (cfg->on_nan == SDGP_ON_NAN_STOP) {
                st = sdgp_fail(err, SDGP_ERR_NUMERIC,
                               "step %lld (epoch %lld): NaN or Inf in %s%s; stopped (the last checkpoint is kept; "
                               "--on-nan skip skips such steps)",
                               (long long)step, (long long)(step / r.spe + 1), bad, bad[0] == 't' ? "" : "'s gradient");
                break;
            }
            bn_stats_copy(r.model, r.bn_backup, 1);
            res->skipped_steps++;
            if (!cfg->quiet && r.lead) fprintf(r.out, "step %lld: NaN or Inf in %s: step skipped\n", (long long)step, bad);
        } else {
            sdgp_model_sgd(r.model, (float)lr, cfg->momentum, cfg->weight_decay, cfg->nesterov);
            state.loss_sum += loss;
            state.loss_count++;
        }
        if (stats) log_grad_stats(&r, step); /* (rank 0's layers) */
        res->steps++;
        int64_t done = step + 1;
        if (cfg->progress && !cfg->quiet && r.lead && (done % 5 == 0)) {
            double el = sdgp_now_s() - r.t_start, ips = (double)res->steps * B / el;
            double eta = (double)(r.end_step - done) * B / (ips > 0 ? ips : 1);
            fprintf(r.out, "\r\033[Kepoch %lld/%d  step %lld/%lld  loss %.4f  %.0f img/s  ETA %dm%02ds",
                    (long long)(step / r.spe + 1), cfg->epochs, (long long)done, (long long)r.end_step,
                    state.loss_count ? state.loss_sum / (double)state.loss_count : loss, ips, (int)(eta / 60), (int)eta % 60);
            fflush(r.out);
        }
        int epoch_end = done % r.spe == 0 || done == r.end_step;
        if (epoch_end) {
            int epoch = (int)((done + r.spe - 1) / r.spe);
            double mean_loss = state.loss_count ? state.loss_sum / (double)state.loss_count : NAN;
            st = end_of_epoch(&r, done, epoch, mean_loss, lr, res, err);
            if (st != SDGP_OK) break;
            state.loss_sum = 0;
            state.loss_count = 0;
        }
        if (cfg->checkpoint[0] && (epoch_end || (cfg->checkpoint_every > 0 && done % cfg->checkpoint_every == 0))) {
            const char *nf = nonfinite_param(r.model, 0); /* never replace a good checkpoint with a broken one */
            if (nf) {
                st = sdgp_fail(err, SDGP_ERR_NUMERIC, "step %lld: NaN or Inf in %s after the update; stopped, the last "
                               "checkpoint is kept", (long long)step, nf);
                break;
            }
            state.step = done;
            state.epoch = (int)(done / r.spe);
            if (r.d && (st = dist_check_weights(r.d, r.model, done, err)) != SDGP_OK) break;
            if (r.lead && (st = sdgp_checkpoint_save(cfg->checkpoint, r.model, cfg, &state, err)) != SDGP_OK) break;
        }
    }
    run_free(&r);
    return st;
}
