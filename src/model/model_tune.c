/* --sparse-kernel auto: per pruned layer, keep the sparse kernel only where it is faster.
 *
 * Both paths are timed as they run in a step, pruning included: sparse = prune to the
 * compressed form + pack W + sparse kernel; dense = prune to a dense tensor + oneDNN
 * backward-data. Interleaved repetitions, the best of each, so a noisy neighbour hurts both. */
#include <math.h>
#include <string.h>
#include <time.h>

#include "model/model_internal.h"

#define TUNE_REPS 5

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double time_path(sdgp_model *m, op *o, float *dx, const float *dz, sdgp_status *st, sdgp_error *err) {
    double t0 = now_s();
    *st = model_conv_backward_data(m, o, dx, dz, 0, err);
    return now_s() - t0;
}

sdgp_status sdgp_model_tune_sparse(sdgp_model *m, sdgp_error *err) {
    if (m->n_grad_pool < 1) return SDGP_OK;
    int stats = m->grad_stats, timing = m->timing;
    m->grad_stats = m->timing = 0;
    sdgp_status st = SDGP_OK;
    for (int i = 0; i < m->n_convs && st == SDGP_OK; i++) {
        op *o = &m->ops[m->conv_ops[i]];
        if (!o->prune || !o->sparse || o->in_mode == GRAD_NONE) continue;
        /* before the first step the activations are free: the conv's output and input slots (the
         * input is not the image, in_mode says so) hold dL/dO and dL/dD while timing */
        float *dz = m->slots[o->out].act, *dx = m->slots[o->in].act;
        size_t n = m->slots[o->out].count;
        uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
        for (size_t j = 0; j < n; j++) { /* any dense gradient will do: the masks' cost is data independent */
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            dz[j] = (float)((int32_t)(s >> 32)) * (1.0f / 2147483648.0f);
        }
        double best_sparse = INFINITY, best_dense = INFINITY;
        sdgp_sparse_bwd *plan = o->sparse;
        for (int r = 0; r < TUNE_REPS && st == SDGP_OK; r++) {
            o->sparse = plan;
            double t = time_path(m, o, dx, dz, &st, err);
            if (t < best_sparse) best_sparse = t;
            o->sparse = NULL;
            if (st == SDGP_OK) t = time_path(m, o, dx, dz, &st, err);
            if (t < best_dense) best_dense = t;
        }
        if (best_sparse < best_dense) {
            o->sparse = plan;
        } else {
            sdgp_sparse_bwd_destroy(plan);
            o->sparse = NULL;
        }
        o->info.sparse_kernel = o->sparse != NULL;
        o->times.bwd_data_ms = 1e3 * (o->sparse ? best_sparse : best_dense);
    }
    m->grad_stats = stats;
    m->timing = timing;
    return st;
}

void sdgp_model_sparse_choice(const sdgp_model *m, char *buf, size_t size) {
    size_t k = 0;
    for (int i = 0; i < m->n_convs && k + 1 < size; i++) {
        const op *o = &m->ops[m->conv_ops[i]];
        buf[k++] = !o->prune ? '-' : o->sparse ? 's' : 'd';
    }
    if (size) buf[k] = 0;
}

sdgp_status sdgp_model_set_sparse_choice(sdgp_model *m, const char *choice, sdgp_error *err) {
    if (!choice || (int)strlen(choice) != m->n_convs)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "kernel choice '%s' does not fit a model of %d conv layers",
                         choice ? choice : "(null)", m->n_convs);
    for (int i = 0; i < m->n_convs; i++) {
        op *o = &m->ops[m->conv_ops[i]];
        char c = choice[i];
        if (c != (o->prune ? 's' : '-') && c != (o->prune ? 'd' : '-'))
            return sdgp_fail(err, SDGP_ERR_FORMAT, "kernel choice '%s': layer %d cannot be '%c'", choice, i, c);
    }
    for (int i = 0; i < m->n_convs; i++) {
        op *o = &m->ops[m->conv_ops[i]];
        if (choice[i] == 'd' && o->sparse) {
            sdgp_sparse_bwd_destroy(o->sparse);
            o->sparse = NULL;
        } else if (choice[i] == 's' && !o->sparse) {
            const sdgp_prune_cfg *pc = &m->cfg.prune;
            sdgp_status st = sdgp_sparse_bwd_create(&o->sparse, &o->geom, pc->n, pc->m, pc->isa, m->cfg.threads, err);
            if (st != SDGP_OK) return st;
        }
        o->info.sparse_kernel = o->sparse != NULL;
    }
    return SDGP_OK;
}
