/* Checkpoints: a model's parameters, momentum buffers and the run's state in one safetensors
 * file (written atomically, CRC-checked by src/io). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdgp/safetensors.h"
#include "sdgp/train.h"
#include "model/model_choice.h"
#include "train/train_internal.h"

#define CKPT_FORMAT "sdgp-checkpoint-1"
#define CKPT_MAX_META 64

/* The model's registry name, width, input, classes and size: a checkpoint loads only into the same. */
static void model_signature(const sdgp_model *m, char *buf, size_t size) {
    const sdgp_model_config *c = sdgp_model_get_config(m);
    const sdgp_model_info *info = sdgp_model_zoo((int)c->kind);
    snprintf(buf, size, "%s width=%.9g input=%dx%dx%d classes=%d params=%zu", info ? info->name : "?", (double)c->width, c->height, c->width_px,
             c->channels, c->num_classes, sdgp_model_param_floats(m));
}

sdgp_status sdgp_checkpoint_save(const char *path, const sdgp_model *m, const sdgp_train_config *cfg,
                                 const sdgp_checkpoint_state *state, sdgp_error *err) {
    int np = sdgp_model_param_count(m);
    sdgp_st_tensor *t = calloc((size_t)np * 2, sizeof *t);
    char(*names)[96] = calloc((size_t)np, sizeof *names); /* "momentum." + a parameter's name */
    int nf = sdgp_train_config_field_count();
    char(*keys)[48] = calloc((size_t)nf, sizeof *keys);
    char(*vals)[1100] = calloc((size_t)nf, sizeof *vals);
    sdgp_st_meta *meta = calloc((size_t)nf + CKPT_MAX_META, sizeof *meta);
    if (!t || !names || !keys || !vals || !meta) {
        free(t), free(names), free(keys), free(vals), free(meta);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "checkpoint %s: out of memory", path);
    }
    int nt = 0;
    for (int i = 0; i < np; i++) {
        const sdgp_param *p = sdgp_model_param(m, i);
        t[nt++] = (sdgp_st_tensor){p->name, SDGP_DT_F32, p->ndim, {p->shape[0], p->shape[1], p->shape[2], p->shape[3]}, p->data};
        if (p->trainable) {
            snprintf(names[i], sizeof names[i], "momentum.%s", p->name);
            t[nt++] = (sdgp_st_tensor){names[i], SDGP_DT_F32, p->ndim, {p->shape[0], p->shape[1], p->shape[2], p->shape[3]},
                                       p->momentum};
        }
    }
    char sig[256], step[32], epoch[32], lsum[64], lcount[32], norm[256], choice[SDGP_CHOICE_LEN];
    sdgp_model_choice(m, choice, sizeof choice);
    model_signature(m, sig, sizeof sig);
    snprintf(step, sizeof step, "%lld", (long long)state->step);
    snprintf(epoch, sizeof epoch, "%d", state->epoch);
    snprintf(lsum, sizeof lsum, "%a", state->loss_sum); /* hex: exact, so a resumed epoch's mean is exact */
    snprintf(lcount, sizeof lcount, "%lld", (long long)state->loss_count);
    snprintf(norm, sizeof norm, "%a %a %a %a %a %a %a %a", (double)state->mean[0], (double)state->mean[1],
             (double)state->mean[2], (double)state->mean[3], (double)state->std[0], (double)state->std[1],
             (double)state->std[2], (double)state->std[3]);
    int nm = 0;
    meta[nm++] = (sdgp_st_meta){"format", CKPT_FORMAT};
    meta[nm++] = (sdgp_st_meta){"model", sig};
    meta[nm++] = (sdgp_st_meta){"step", step};
    meta[nm++] = (sdgp_st_meta){"epoch", epoch};
    meta[nm++] = (sdgp_st_meta){"loss_sum", lsum};
    meta[nm++] = (sdgp_st_meta){"loss_count", lcount};
    meta[nm++] = (sdgp_st_meta){"normalisation", norm};
    meta[nm++] = (sdgp_st_meta){"choice", choice}; /* every pass's implementation and algorithm */
    for (int i = 0; i < nf; i++) {
        const char *name = sdgp_train_config_field(cfg, i, NULL, vals[i], sizeof vals[i]);
        snprintf(keys[i], sizeof keys[i], "cfg.%s", name);
        meta[nm++] = (sdgp_st_meta){keys[i], vals[i]};
    }
    sdgp_status st = sdgp_safetensors_write(path, t, nt, meta, nm, err);
    free(t), free(names), free(keys), free(vals), free(meta);
    return st;
}

static sdgp_status parse_state(const sdgp_st_file *f, const char *path, sdgp_checkpoint_state *s, sdgp_error *err) {
    const char *step = sdgp_safetensors_meta(f, "step"), *epoch = sdgp_safetensors_meta(f, "epoch");
    const char *lsum = sdgp_safetensors_meta(f, "loss_sum"), *lcount = sdgp_safetensors_meta(f, "loss_count");
    const char *norm = sdgp_safetensors_meta(f, "normalisation");
    if (!step || !epoch || !lsum || !lcount || !norm)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "checkpoint %s: run state missing from the metadata", path);
    long long st = 0, lc = 0;
    double m[4], d[4];
    if (sscanf(step, "%lld", &st) != 1 || st < 0 || sscanf(epoch, "%d", &s->epoch) != 1 || s->epoch < 0 ||
        sscanf(lsum, "%la", &s->loss_sum) != 1 || sscanf(lcount, "%lld", &lc) != 1 || lc < 0 ||
        sscanf(norm, "%la %la %la %la %la %la %la %la", &m[0], &m[1], &m[2], &m[3], &d[0], &d[1], &d[2], &d[3]) != 8)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "checkpoint %s: malformed run state in the metadata", path);
    s->step = st;
    s->loss_count = lc;
    for (int i = 0; i < 4; i++) {
        s->mean[i] = (float)m[i];
        s->std[i] = (float)d[i];
    }
    return SDGP_OK;
}

static sdgp_status open_checkpoint(sdgp_st_file **f, const char *path, sdgp_error *err) {
    sdgp_status st = sdgp_safetensors_read(f, path, err);
    if (st != SDGP_OK) return st;
    const char *fmt = sdgp_safetensors_meta(*f, "format");
    if (!fmt || strcmp(fmt, CKPT_FORMAT) != 0) {
        sdgp_safetensors_free(*f);
        *f = NULL;
        return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: not an sdgp checkpoint (metadata format is %s%s%s, expected %s)", path,
                         fmt ? "'" : "", fmt ? fmt : "missing", fmt ? "'" : "", CKPT_FORMAT);
    }
    return SDGP_OK;
}

/* The checkpoint's choice text (sdgp_model_choice's) into choice (SDGP_CHOICE_LEN bytes; "" when
 * it has none): its "choice", or from before that existed its "kernels" and "conv_algos" (written
 * under every --conv-algo: what each pass ran). The algorithms are part of a run's bits as the
 * kernels are, so a model loading it plans them whatever its --conv-algo: a resume stays exact when
 * AUTO's rule changes between versions. */
static sdgp_status read_choice(const sdgp_st_file *f, const char *path, char *choice, sdgp_error *err) {
    const char *text = sdgp_safetensors_meta(f, "choice");
    const char *kernels = sdgp_safetensors_meta(f, "kernels"), *convs = sdgp_safetensors_meta(f, "conv_algos");
    choice[0] = '\0';
    if (text && strlen(text) >= SDGP_CHOICE_LEN) return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: choice text too long", path);
    sdgp_error e;
    if (text) snprintf(choice, SDGP_CHOICE_LEN, "%s", text);
    else if (kernels && model_choice_from_legacy(kernels, convs, choice, SDGP_CHOICE_LEN, &e) != SDGP_OK)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: %s", path, e.msg);
    return SDGP_OK;
}

sdgp_status sdgp_checkpoint_load(const char *path, sdgp_model *m, sdgp_checkpoint_state *state, sdgp_error *err) {
    sdgp_st_file *f;
    sdgp_status st = open_checkpoint(&f, path, err);
    if (st != SDGP_OK) return st;
    char sig[256];
    model_signature(m, sig, sizeof sig);
    const char *found = sdgp_safetensors_meta(f, "model");
    if (!found || strcmp(found, sig) != 0) {
        st = sdgp_fail(err, SDGP_ERR_FORMAT, "%s: checkpoint of another model (it has '%s', this run builds '%s')", path,
                       found ? found : "no model entry", sig);
        sdgp_safetensors_free(f);
        return st;
    }
    sdgp_checkpoint_state s;
    memset(&s, 0, sizeof s);
    st = parse_state(f, path, &s, err);
    for (int i = 0; i < sdgp_model_param_count(m) && st == SDGP_OK; i++) {
        const sdgp_param *p = sdgp_model_param(m, i);
        st = sdgp_safetensors_copy(f, p->name, SDGP_DT_F32, p->ndim, p->shape, p->data, err);
        if (st == SDGP_OK && p->trainable) {
            char name[96];
            snprintf(name, sizeof name, "momentum.%s", p->name);
            st = sdgp_safetensors_copy(f, name, SDGP_DT_F32, p->ndim, p->shape, p->momentum, err);
        }
    }
    /* the same implementations and algorithms as the run that wrote it */
    char choice[SDGP_CHOICE_LEN], mine[SDGP_CHOICE_LEN];
    if (st == SDGP_OK) st = read_choice(f, path, choice, err);
    sdgp_model_choice(m, mine, sizeof mine);
    if (st == SDGP_OK && choice[0] && strcmp(choice, mine)) {
        sdgp_error e;
        if (sdgp_model_set_choice(m, choice, &e) != SDGP_OK) st = sdgp_fail(err, SDGP_ERR_FORMAT, "%s: %s", path, e.msg);
    }
    sdgp_safetensors_free(f);
    if (st == SDGP_OK && state) *state = s;
    return st;
}

sdgp_status checkpoint_read_choice(const char *path, char *choice, sdgp_error *err) {
    sdgp_st_file *f;
    sdgp_status st = open_checkpoint(&f, path, err);
    if (st != SDGP_OK) return st;
    st = read_choice(f, path, choice, err);
    sdgp_safetensors_free(f);
    return st;
}

sdgp_status sdgp_checkpoint_read_config(const char *path, sdgp_train_config *cfg, sdgp_error *err) {
    sdgp_st_file *f;
    sdgp_status st = open_checkpoint(&f, path, err);
    if (st != SDGP_OK) return st;
    sdgp_train_config c = sdgp_train_config_default();
    char key[64];
    for (int i = 0; i < sdgp_train_config_field_count() && st == SDGP_OK; i++) {
        char buf[8];
        const char *name = sdgp_train_config_field(&c, i, NULL, buf, sizeof buf);
        snprintf(key, sizeof key, "cfg.%s", name);
        const char *v = sdgp_safetensors_meta(f, key);
        if (!v) v = train_config_field_before(i); /* a checkpoint from before the setting existed */
        if (!v) {
            st = sdgp_fail(err, SDGP_ERR_FORMAT, "%s: setting '%s' missing from the checkpoint", path, name);
            break;
        }
        sdgp_error e;
        if (sdgp_train_config_set(&c, name, v, &e) != SDGP_OK)
            st = sdgp_fail(err, SDGP_ERR_FORMAT, "%s: bad setting in the checkpoint: %s", path, e.msg);
    }
    /* every pass's implementation and algorithm, for a model built from this configuration (eval,
     * resume): nothing timed */
    if (st == SDGP_OK) st = read_choice(f, path, c.model.choice, err);
    sdgp_safetensors_free(f);
    if (st == SDGP_OK) *cfg = c;
    return st;
}
