/* A step's activation memory: which buffers it needs, when each is alive, where each sits in the one
 * activation arena.
 *
 * A step is a timeline of 2N op runs: forward op k at time 2k, then backward op k at time
 * 2(2N-1-k); the odd time right after an add's backward is its block's recompute (plan_blocks).
 * Every buffer has an interval of that timeline in which it holds something still to be read:
 * - a slot kept for backward (an add's output, a pool's output, ...): from its producer's forward to
 *   its producer's backward (the consumers' backwards, which read it, come before that); the logits
 *   for the whole step (the caller reads them after backward);
 * - a conv's output that backward recomputes from z ("transient", see plan_transients): its
 *   producer's forward to its last consumer's forward;
 * - z, BatchNorm's statistics, pool indices: the op's forward to its backward; in a recomputed
 *   block, z twice: during the op's forward, and from the block's recompute to the op's backward;
 * - a gradient buffer: from its first writer's backward (the slot's last consumer) to its
 *   producer's backward (plan_gradients); a temporary for an accumulated gradient: one op;
 * - the pruned dL/dO (dense and compressed): the whole step (the kernel tuner also uses them before
 *   any step, beside the slots).
 * Buffers whose intervals overlap get disjoint bytes; the others may share. Packing them greedily,
 * largest first, each at the lowest offset free in its interval, puts backward's gradient buffers
 * into the bytes of activations that backward has already consumed: the arena is about the peak
 * of what is alive at once (at the start of backward), not the sum. ResNet-50 at 224x224, batch 32:
 * 2470 -> 2187 MB. */
#include <stdlib.h>
#include <string.h>

#include "core/align.h"
#include "model/model_internal.h"

const char *const sdgp_recompute_names[] = {"none", "blocks", NULL};

/* Time of an op's forward and of its backward on the step's timeline, and of the recompute of the
 * block an add closes (between the add's backward and its block's last conv's). */
static int fwd_time(int k) { return 2 * k; }
static int bwd_time(const sdgp_model *m, int k) { return 2 * (2 * m->n_ops - 1 - k); }
static int recompute_time(const sdgp_model *m, int add) { return bwd_time(m, add) + 1; }

/* ---- gradient buffers by liveness ----
 * Backward runs the ops in reverse. An op reads its output's gradient and writes its inputs'. A
 * slot's gradient is born at its first writer (the last consumer in forward order) and dies after
 * its producer's backward; an add hands its output gradient's buffer on to its shortcut input (no
 * copy). Each birth is a buffer of its own, with its interval; the packer shares their bytes. The
 * network input (slot 0) never needs a gradient. */
static sdgp_status plan_gradients(sdgp_model *m, int *live, sdgp_error *err) {
    int *owner = malloc((size_t)m->n_slots * sizeof *owner);
    if (!owner) return sdgp_fail(err, SDGP_ERR_NOMEM, "model: out of memory planning gradient buffers");
    int nbuf = 0;
    for (int s = 0; s < m->n_slots; s++) owner[s] = -1;
    owner[m->logits_slot] = -2; /* the caller's dlogits */
    for (int k = m->n_ops - 1; k >= 0; k--) {
        op *o = &m->ops[k];
        const int t = bwd_time(m, k);
        o->out_buf = owner[o->out];
        int inputs[2] = {o->in, o->in2};
        for (int j = 0; j < 2; j++) {
            int s = inputs[j];
            grad_mode *mode = j == 0 ? &o->in_mode : &o->in2_mode;
            int *buf = j == 0 ? &o->in_buf : &o->in2_buf;
            if (s < 0) continue;
            if (s == 0) {
                *mode = GRAD_NONE;
                *buf = -1;
                continue;
            }
            size_t count = m->slots[s].count;
            if (owner[s] != -1) {
                *mode = GRAD_ACCUMULATE;
                *buf = owner[s];
                if (o->kind != OP_ADD) { /* ADD adds dy directly; others write a temporary first */
                    o->acc_tmp = nbuf++;
                    m->grad_pool_count[o->acc_tmp] = count;
                    live[2 * o->acc_tmp] = live[2 * o->acc_tmp + 1] = t;
                }
                continue;
            }
            *mode = GRAD_WRITE;
            if (o->kind == OP_ADD && j == 0 && o->out_buf >= 0) {
                owner[s] = o->out_buf; /* inherit: the identity gradient needs no copy */
                o->in_inherits = 1;
                o->out_buf = -3;       /* released to the input, not freed */
            } else {
                owner[s] = nbuf++;
                live[2 * owner[s]] = live[2 * owner[s] + 1] = t;
            }
            *buf = owner[s];
            if (count > m->grad_pool_count[*buf]) m->grad_pool_count[*buf] = count;
        }
        if (o->out_buf >= 0) live[2 * o->out_buf + 1] = t; /* its last reader */
        if (o->in_inherits) o->out_buf = o->in_buf;
    }
    m->n_grad_pool = nbuf;
    free(owner);
    return SDGP_OK;
}

/* ---- transient activations ----
 * A conv's output y = relu(bn(z)) (or bn(z)) need not be kept for backward: BatchNorm(+ReLU)'s
 * backward needs only z (it recomputes the ReLU mask from z), pools and adds use their own indices,
 * their own output (an add's ReLU mask) or nothing, and a conv consuming y recomputes it from z
 * (bitwise, sdgp_batchnorm_relu_recompute or sdgp_batchnorm_recompute) into the buffer its data
 * gradient goes to, which is free until then, and takes its weight gradient from there. So y lives
 * during forward only. Only a linear consumer (not in our models after a conv) keeps y; so does a
 * conv without BatchNorm (y is all there is). */
static void plan_transients(sdgp_model *m) {
    for (int s = 0; s < m->n_slots; s++) m->slots[s].transient = 0;
    for (int k = 0; k < m->n_ops; k++) m->ops[k].recompute_from = -1;
    for (int k = 0; k < m->n_ops; k++) {
        const op *o = &m->ops[k];
        slot *sl = &m->slots[o->out];
        if (o->kind != OP_CONV || !o->bn || o->out == m->logits_slot) continue;
        int last = k, kept = 0;
        for (int j = k + 1; j < m->n_ops; j++) {
            const op *c = &m->ops[j];
            if (c->in != o->out && c->in2 != o->out) continue;
            last = j;
            kept |= c->kind == OP_LINEAR;
        }
        if (kept) continue;
        sl->transient = 1;
        sl->live_to = last;
        for (int j = k + 1; j < m->n_ops; j++)
            if (m->ops[j].kind == OP_CONV && m->ops[j].in == o->out) m->ops[j].recompute_from = k;
    }
}

/* ---- recomputed blocks (SDGP_RECOMPUTE_BLOCKS) ----
 * A block is the run of convs with BatchNorm right before an add, [first, add), whose (transient)
 * outputs no op after the add reads: a residual block's branch convs and its projection shortcut.
 * Its convs' z need not be kept through the rest of forward and backward: after the add's backward
 * the block's forward runs again (model_run.c, recompute_block) from its inputs, which are kept
 * slots, or transient conv outputs from before the block, recomputed from their producers' z (kept:
 * those producers are in no block, or they would not be read after their add). */
static void plan_blocks(sdgp_model *m) {
    for (int k = 0; k < m->n_ops; k++) m->ops[k].block_first = m->ops[k].block_add = -1;
    if (m->cfg.recompute != SDGP_RECOMPUTE_BLOCKS) return;
    for (int add = 0; add < m->n_ops; add++) {
        if (m->ops[add].kind != OP_ADD) continue;
        int first = add;
        for (; first > 0; first--) {
            const op *c = &m->ops[first - 1];
            const slot *s = &m->slots[c->out];
            if (c->kind != OP_CONV || !c->bn || !s->transient || s->live_to > add) break;
        }
        if (first == add) continue;
        m->ops[add].block_first = first;
        for (int j = first; j < add; j++) m->ops[j].block_add = add;
    }
}

/* Whether a conv of o's block reads o's output (then the recompute needs it as well as z). */
static int read_in_block(const sdgp_model *m, int k) {
    const op *o = &m->ops[k];
    for (int j = k + 1; j < o->block_add; j++)
        if (m->ops[j].in == o->out) return 1;
    return 0;
}

/* ---- the arena ---- */

/* Every buffer of the arena, in one fixed order: the first pass (base NULL) records each one's size
 * and interval, the second sets each pointer from its planned offset. */
typedef struct {
    sdgp_model *m;
    const int *grad_live; /* plan_gradients' intervals: first and last time of each gradient buffer */
    model_mem_item *items;
    int n;
    char *base; /* NULL: recording */
} mem_walk;

static void *mem_item_at(mem_walk *w, size_t bytes, int t0, int t1) {
    model_mem_item *it = &w->items[w->n++];
    if (!w->base) {
        it->bytes = model_align_up(bytes);
        it->t0 = t0;
        it->t1 = t1;
        return NULL;
    }
    return w->base + it->offset;
}

static void mem_walk_all(mem_walk *w) {
    sdgp_model *m = w->m;
    const int end = bwd_time(m, 0);
    for (int k = 0; k < m->n_ops; k++) {
        op *o = &m->ops[k];
        slot *out = &m->slots[o->out];
        const int tf = fwd_time(k), tb = bwd_time(m, k);
        if (out->transient) out->act = mem_item_at(w, out->count * sizeof(float), tf, fwd_time(out->live_to));
        else out->act = mem_item_at(w, out->count * sizeof(float), tf, o->out == m->logits_slot ? end : tb);
        if (o->kind == OP_CONV && o->bn && o->block_add >= 0) {
            const int tr = recompute_time(m, o->block_add);
            o->z_fwd = mem_item_at(w, out->count * sizeof(float), tf, tf);
            o->z = mem_item_at(w, out->count * sizeof(float), tr, tb);
            o->y_re = read_in_block(m, k) ? mem_item_at(w, out->count * sizeof(float), tr, tr) : NULL;
            o->x_re = o->recompute_from >= 0 && o->recompute_from < m->ops[o->block_add].block_first
                          ? mem_item_at(w, m->slots[o->in].count * sizeof(float), tr, tr)
                          : NULL;
        } else if (o->kind == OP_CONV && o->bn) {
            o->z = o->z_fwd = mem_item_at(w, out->count * sizeof(float), tf, tb);
        }
        if (o->kind == OP_CONV && o->bn) {
            o->mean = mem_item_at(w, (size_t)out->C * sizeof(float), tf, tb);
            o->rstd = mem_item_at(w, (size_t)out->C * sizeof(float), tf, tb);
        }
        if (o->kind == OP_CONV && !o->bn) o->z = o->z_fwd = out->act; /* y is all there is */
        if (o->kind == OP_MAXPOOL2 || o->kind == OP_MAXPOOL) o->pool_arg = mem_item_at(w, out->count, tf, tb);
        if (o->kind == OP_GLOBAL_MAXPOOL) o->gmp_arg = mem_item_at(w, out->count * sizeof(int32_t), tf, tb);
    }
    for (int i = 0; i < m->n_grad_pool; i++)
        m->grad_pool[i] = mem_item_at(w, m->grad_pool_count[i] * sizeof(float), w->grad_live[2 * i], w->grad_live[2 * i + 1]);
    /* the pruned dense dL/dO exists only when something is pruned */
    size_t max_nm_slots = 0;
    for (int k = 0; k < m->n_ops; k++) {
        const op *o = &m->ops[k];
        size_t nm_slots = m->slots[o->out].count / (size_t)m->cfg.prune.m * (size_t)m->cfg.prune.n;
        if (o->kind == OP_CONV && o->prune && nm_slots > max_nm_slots) max_nm_slots = nm_slots;
    }
    if (max_nm_slots > 0 || m->cfg.prune_wgrad.fn != SDGP_PRUNE_NONE)
        m->scratch2 = mem_item_at(w, m->max_count * sizeof(float), 0, end);
    m->nm.values = mem_item_at(w, max_nm_slots * sizeof(float), 0, end);
    m->nm.index = mem_item_at(w, max_nm_slots, 0, end);
}

/* Offsets: largest first (then in walk order), each at the lowest offset that no already placed
 * buffer with an overlapping interval occupies. Returns the arena's size. */
static size_t pack(model_mem_item *items, int n, int *order, size_t *lo, size_t *hi) {
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) { /* insertion sort: stable, and n is a few hundred */
        int v = order[i], j = i;
        for (; j > 0 && items[order[j - 1]].bytes < items[v].bytes; j--) order[j] = order[j - 1];
        order[j] = v;
    }
    size_t total = 0;
    for (int p = 0; p < n; p++) {
        model_mem_item *it = &items[order[p]];
        int nc = 0;
        for (int q = 0; q < p; q++) { /* the placed ones it conflicts with, sorted by offset */
            const model_mem_item *o = &items[order[q]];
            if (o->bytes == 0 || o->t1 < it->t0 || it->t1 < o->t0) continue;
            int j = nc++;
            for (; j > 0 && lo[j - 1] > o->offset; j--) lo[j] = lo[j - 1], hi[j] = hi[j - 1];
            lo[j] = o->offset;
            hi[j] = o->offset + o->bytes;
        }
        size_t off = 0;
        for (int j = 0; j < nc && lo[j] < off + it->bytes; j++)
            if (hi[j] > off) off = hi[j];
        it->offset = off;
        if (off + it->bytes > total) total = off + it->bytes;
    }
    return total;
}

sdgp_status model_memory_plan(sdgp_model *m, sdgp_error *err) {
    /* at most two gradient buffers per op (a new one and an accumulation temporary), one more for
     * the second input of an add */
    const int max_bufs = 3 * m->n_ops + 1;
    m->grad_pool_count = calloc((size_t)max_bufs, sizeof *m->grad_pool_count);
    int *live = malloc(2 * (size_t)max_bufs * sizeof *live);
    sdgp_status st = !m->grad_pool_count || !live ? sdgp_fail(err, SDGP_ERR_NOMEM, "model: out of memory planning memory")
                                                  : plan_gradients(m, live, err);
    if (st != SDGP_OK) {
        free(live);
        return st;
    }
    plan_transients(m);
    plan_blocks(m);
    m->max_count = 0;
    for (int s = 0; s < m->n_slots; s++)
        if (m->slots[s].count > m->max_count) m->max_count = m->slots[s].count;

    m->grad_pool = calloc((size_t)m->n_grad_pool + 1, sizeof(float *));
    m->mem_items = calloc(7 * (size_t)m->n_ops + (size_t)m->n_grad_pool + 3, sizeof *m->mem_items);
    if (!m->grad_pool || !m->mem_items) {
        free(live);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "model: out of memory planning memory");
    }
    mem_walk w = {m, live, m->mem_items, 0, NULL};
    mem_walk_all(&w);
    m->n_mem_items = w.n;
    int *order = malloc((size_t)w.n * sizeof *order);
    size_t *lo = malloc((size_t)w.n * sizeof *lo), *hi = malloc((size_t)w.n * sizeof *hi);
    if (!order || !lo || !hi) {
        free(order), free(lo), free(hi), free(live);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "model: out of memory planning memory");
    }
    size_t bytes = pack(m->mem_items, w.n, order, lo, hi);
    free(order), free(lo), free(hi);
    m->act_bytes = bytes;
    if (!(m->act_arena = sdgp_alloc64(bytes))) {
        free(live);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "model: cannot allocate %.1f MB of activations for batch %d", (double)bytes / 1e6,
                         m->B);
    }
    memset(m->act_arena, 0, bytes);
    w = (mem_walk){m, live, m->mem_items, 0, m->act_arena};
    mem_walk_all(&w);
    free(live);
    return SDGP_OK;
}
