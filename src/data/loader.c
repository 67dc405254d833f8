/* The background loader: one pthread builds the batch of step s+1 into one buffer while the
 * caller trains on the batch of step s in the other.
 *
 * The batch of global step s is slice (s mod steps_per_epoch) of the permutation of epoch
 * s / steps_per_epoch, augmented with key (seed, s) and each image's position in the batch: a pure
 * function of s (a data-parallel process builds its rows of that batch, the same images whatever
 * the number of processes), so a loader started at
 * step s (resume) yields exactly what an uninterrupted one yields there. The thread is single-
 * threaded on purpose (batch_build_range, no OpenMP): it is light work and must not compete with
 * the training threads for the cores. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

struct sdgp_loader {
    const sdgp_dataset *ds;
    int B;
    int r0, r1; /* the rows of each batch this loader builds (a data-parallel process's share) */
    sdgp_augment aug;
    int has_aug;
    uint64_t seed;
    int64_t steps_per_epoch;

    /* Owned by the worker thread only. */
    int64_t *perm;
    int64_t perm_epoch; /* epoch whose permutation is in perm, -1 = none */

    float *x[2];
    int32_t *y[2];

    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t built[2];  /* step whose batch is in buffer b, -1 = empty/being rebuilt (guarded by mu) */
    int64_t next_build; /* next step the worker builds (worker only) */
    int64_t next_take;  /* next step the caller takes (caller only) */
    int held;           /* buffer the caller holds, -1 = none (guarded by mu) */
    int stop;           /* guarded by mu */
};

static void loader_build(sdgp_loader *l, int64_t step, int b) {
    int64_t epoch = step / l->steps_per_epoch, slot = step % l->steps_per_epoch;
    if (epoch != l->perm_epoch) {
        sdgp_epoch_permutation(l->perm, l->ds->count, l->seed, (uint64_t)epoch);
        l->perm_epoch = epoch;
    }
    batch_build_range(l->x[b], l->y[b], l->ds, l->perm + slot * l->B + l->r0, l->r0, l->r0, l->r1,
                      l->has_aug ? &l->aug : NULL, l->seed, (uint64_t)step, 0);
}

static void *loader_main(void *arg) {
    sdgp_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        int b = (int)(l->next_build & 1);
        /* Buffer b is free once the caller neither holds it nor has yet to take it. */
        while (!l->stop && (l->held == b || l->built[b] >= 0)) pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop) break;
        pthread_mutex_unlock(&l->mu);
        loader_build(l, l->next_build, b);
        pthread_mutex_lock(&l->mu);
        l->built[b] = l->next_build++;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void loader_free(sdgp_loader *l) {
    free(l->perm);
    for (int b = 0; b < 2; b++) {
        free(l->x[b]);
        free(l->y[b]);
    }
    free(l);
}

sdgp_status sdgp_loader_create(sdgp_loader **out, const sdgp_dataset *ds, int B, const sdgp_augment *aug,
                               uint64_t seed, int64_t start_step, sdgp_error *err) {
    return sdgp_loader_create_part(out, ds, B, 0, B, aug, seed, start_step, err);
}

sdgp_status sdgp_loader_create_part(sdgp_loader **out, const sdgp_dataset *ds, int B, int r0, int r1,
                                    const sdgp_augment *aug, uint64_t seed, int64_t start_step, sdgp_error *err) {
    if (!out) return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp_loader_create: out is NULL");
    *out = NULL;
    if (!ds || !ds->images || !ds->labels || ds->count <= 0)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp_loader_create: empty dataset");
    if (B <= 0 || B > ds->count)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp_loader_create: batch size %d must be in [1, %lld] (dataset size)", B,
                         (long long)ds->count);
    if (r0 < 0 || r1 <= r0 || r1 > B)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp_loader_create: rows [%d, %d) are not a part of a batch of %d", r0,
                         r1, B);
    if (start_step < 0) return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp_loader_create: start step %lld < 0", (long long)start_step);
    if (ds->c > 4) return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp_loader_create: %d channels (at most 4)", ds->c);

    sdgp_loader *l = calloc(1, sizeof *l);
    if (!l) return sdgp_fail(err, SDGP_ERR_NOMEM, "sdgp_loader_create: out of memory");
    l->ds = ds;
    l->B = B;
    l->r0 = r0;
    l->r1 = r1;
    if (aug) l->aug = *aug;
    l->has_aug = aug != NULL;
    l->seed = seed;
    l->steps_per_epoch = ds->count / B;
    l->perm_epoch = -1;
    l->next_build = l->next_take = start_step;
    l->held = -1;
    l->built[0] = l->built[1] = -1;
    size_t image = (size_t)ds->h * ds->w * ds->c;
    l->perm = malloc(sizeof(int64_t) * (size_t)ds->count);
    for (int b = 0; b < 2; b++) {
        l->x[b] = malloc(sizeof(float) * image * (size_t)(r1 - r0));
        l->y[b] = malloc(sizeof(int32_t) * (size_t)(r1 - r0));
    }
    if (!l->perm || !l->x[0] || !l->x[1] || !l->y[0] || !l->y[1]) {
        loader_free(l);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "sdgp_loader_create: out of memory for two batches of %d images", r1 - r0);
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    int rc = pthread_create(&l->thread, NULL, loader_main, l);
    if (rc != 0) {
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        loader_free(l);
        return sdgp_fail(err, SDGP_ERR_INTERNAL, "sdgp_loader_create: cannot start the loader thread: %s", strerror(rc));
    }
    *out = l;
    return SDGP_OK;
}

void sdgp_loader_next(sdgp_loader *l, const float **x, const int32_t **y) {
    int b = (int)(l->next_take & 1);
    pthread_mutex_lock(&l->mu);
    if (l->held >= 0) { /* the previous batch's pointers expire now: hand its buffer back */
        l->built[l->held] = -1;
        l->held = -1;
        pthread_cond_broadcast(&l->cv);
    }
    while (l->built[b] != l->next_take) pthread_cond_wait(&l->cv, &l->mu);
    l->held = b;
    pthread_mutex_unlock(&l->mu);
    l->next_take++;
    *x = l->x[b];
    *y = l->y[b];
}

int64_t sdgp_loader_steps_per_epoch(const sdgp_loader *l) { return l->steps_per_epoch; }

void sdgp_loader_destroy(sdgp_loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL); /* the worker finishes at most the batch in progress */
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    loader_free(l);
}
