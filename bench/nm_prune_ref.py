# Reference N:M pruning functions in PyTorch (float64), shared by the fidelity studies in bench/
# (grad_fidelity.py: dL/dO along channels, wgrad_fidelity.py: along positions), with their self-test, the
# cosine / relative L2 error of a result, the Fashion-MNIST training images, and the twin's training and
# capture of (input, dL/dO) per 3x3 layer.
import gzip
import numpy as np, torch, torch.nn.functional as F

# ---- pruning functions; X (..., C), groups of m consecutive channels of one row ----
def keep_mask(g, idx):
    return torch.zeros_like(g).scatter_(-1, idx, 1.0)

def mag_rows(X, n, m):  # keep the top-n |x| of each group
    s = X.shape; g = X.reshape(*s[:-1], s[-1] // m, m)
    return (g * keep_mask(g, g.abs().topk(n, dim=-1).indices)).reshape(s)

def mag_block(X, n, m, P):  # rows in blocks of P (along dim -2) share the mask chosen by the block's summed |x|
    R, C = X.shape[-2], X.shape[-1]; pad = (-R) % P
    Xp = F.pad(X, (0, 0, 0, pad)); g = Xp.reshape(*Xp.shape[:-2], (R + pad) // P, P, C // m, m)
    idx = g.abs().sum(-3, keepdim=True).topk(n, dim=-1).indices.expand(*g.shape[:-1], n)
    out = (g * keep_mask(g, idx)).reshape(Xp.shape)
    return out[..., :R, :]

def random_rows(X, n, m, gen):  # a uniformly random n-subset of each group, unscaled
    s = X.shape; g = X.reshape(*s[:-1], s[-1] // m, m)
    idx = torch.rand(g.shape, generator=gen, dtype=torch.float64).topk(n, dim=-1).indices
    return (g * keep_mask(g, idx)).reshape(s)

def rescaled(X, n, m, dims):
    """magnitude, then one factor r = sum|x| / sum|kept| per scope (r = 1 when the kept sum is 0); X is 4-D with
    channels last, the scope's positions are the dims summed over: pixel (B,H,W,C) sample-channel (1,2),
    channel (0,1,2); Winograd (16,B,T,C) sample-channel (2,), channel (0,1,2)."""
    K = mag_rows(X, n, m)
    dense, kept = X.abs().sum(dims, keepdim=True), K.abs().sum(dims, keepdim=True)
    r = torch.where(kept > 0, dense / torch.where(kept > 0, kept, torch.ones_like(kept)), torch.ones_like(kept))
    return K * r

def mvue_plan(X, n, m):
    """exact minimum-variance unbiased N:M sampler, the part that does not depend on the draw: P_i = min(1, c a_i),
    a_i = |x_i|, with c chosen by water-filling so that sum P_i = n; cumulative sums of P in index order.
    Groups with at most n nonzeros stay unchanged."""
    g = X.reshape(-1, m); a = g.abs()
    big = ((a > 0).sum(-1) > n)[:, None]                         # groups that are actually sampled
    a_s = a.sort(-1, descending=True).values
    S = a_s.flip(-1).cumsum(-1).flip(-1)                         # S[:, k] = sum of the m-k smallest
    ks = torch.arange(n, dtype=torch.float64)
    cond = (n - ks) * a_s[:, :n] <= S[:, :n]                     # k saturated: c_k a_(k) <= 1, c_k = (n-k)/S_k
    k = (~cond).to(torch.int64).cumprod(-1).sum(-1, keepdim=True)  # the first k meeting it (<= n-1 when big)
    del a_s, cond
    Sk = S.gather(-1, k); del S
    c = (n - k).to(torch.float64) / torch.where(Sk > 0, Sk, torch.ones_like(Sk))
    P = (c * a).clamp_(max=1.0); del a
    cum = P.cumsum(-1); prev = F.pad(cum[:, :-1], (1, 0))
    val = torch.where(P > 0, g / torch.where(P > 0, P, torch.ones_like(P)), torch.zeros_like(g))   # x_i / P_i
    return dict(shape=X.shape, n=n, g=g, big=big, cum=cum, prev=prev, val=val)

def mvue_sample(pl, gen):
    """one draw: systematic sampling, one u ~ U[0,1) per group, points u + j (j = 0..n-1); element i is kept, as
    x_i / P_i, when a point falls in [cum_{i-1}, cum_i); exactly n per sampled group."""
    n, cum = pl['n'], pl['cum']
    u = torch.rand(cum.shape[0], 1, generator=gen, dtype=torch.float64)
    # number of points in [prev, cum): ceil(cum - u) - ceil(prev - u), capped at the n points
    sel = (cum - u).ceil_().clamp_(max=n) > (pl['prev'] - u).ceil_().clamp_(max=n)
    assert bool((sel.sum(-1)[pl['big'][:, 0]] == n).all()), 'mvue: a sampled group did not keep exactly n'
    return torch.where(pl['big'], torch.where(sel, pl['val'], torch.zeros_like(cum)), pl['g']).reshape(pl['shape'])

def mvue_rows(X, n, m, gen):  # plan and one draw
    return mvue_sample(mvue_plan(X, n, m), gen)

def self_test():
    """MVUE: exactly n kept, marginals P, unbiased (statistically, fixed seeds); rescaled: L1 preserved per scope."""
    gen = torch.Generator().manual_seed(123)
    for n, m in [(2, 4), (1, 4), (2, 8), (4, 32)]:
        x = torch.randn(64, m, generator=gen, dtype=torch.float64) ** 3   # heavy-tailed: some P_i saturate
        x[0, :] = 0; x[1, n:] = 0; x[2, 1:] = 0; x[3, :] = 1.0            # trivial groups and ties
        acc = torch.zeros_like(x); N = 4000
        for t in range(N): acc += mvue_rows(x, n, m, torch.Generator().manual_seed(1000 + t))
        # standard error of the mean of x_i/P_i * Bernoulli(P_i) is |x_i| sqrt((1-P)/P) / sqrt(N); allow 6 sigma
        err = (acc / N - x).abs().max() / x.abs().max()
        assert err < 0.1, f'mvue {n}:{m} not unbiased: {err}'
        assert torch.equal(mvue_rows(x[:3], n, m, gen), x[:3])
    X = torch.randn(3, 5, 6, 8, generator=gen, dtype=torch.float64)
    for dims in [(1, 2), (0, 1, 2)]:
        R = rescaled(X, 2, 4, dims)
        assert torch.allclose(R.abs().sum(dims), X.abs().sum(dims), rtol=1e-12)
        assert torch.equal((R != 0), (mag_rows(X, 2, 4) != 0))


def cos_err(a, b):
    a, b = a.flatten(), b.flatten()
    return (a @ b / (a.norm() * b.norm())).item(), ((a - b).norm() / b.norm()).item()

def load(dirname):
    im = gzip.open(dirname + '/train-images-idx3-ubyte.gz').read(); lb = gzip.open(dirname + '/train-labels-idx1-ubyte.gz').read()
    x = torch.from_numpy(np.frombuffer(im, np.uint8, offset=16).reshape(-1, 1, 28, 28).astype(np.float32) / 255.0)
    return (x - 0.286) / 0.353, torch.from_numpy(np.frombuffer(lb, np.uint8, offset=8).astype(np.int64))


def train_twin(model, x, y, steps):
    """the fidelity studies' recipe: SGD (lr 0.2, momentum 0.9, Nesterov, weight decay 5e-4), label smoothing
    0.1, `steps` batches of 128 drawn by torch's global generator"""
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9, nesterov=True, weight_decay=5e-4)
    for s in range(steps):
        i = torch.randint(0, len(x), (128,))
        opt.zero_grad(); F.cross_entropy(model(x[i]), y[i], label_smoothing=0.1).backward(); opt.step()
    return model


def capture_3x3(model, x, y):
    """{'conv<j>': (module, its input, its output with .grad)} for every 3x3 stride-1 pad-1 conv but the first,
    from one forward and backward of the first 128 images"""
    outs, hooks = {}, []
    def keep(name):
        def hook(mod, inp, out): out.retain_grad(); outs[name] = (mod, inp[0].detach(), out)
        return hook
    for j, cb in enumerate(model.convs):
        c = cb.conv
        if c.kernel_size == (3, 3) and c.stride == (1, 1) and c.padding == (1, 1) and j > 0:
            hooks.append(c.register_forward_hook(keep(f'conv{j}')))
    i = torch.arange(128)
    F.cross_entropy(model(x[i]), y[i], label_smoothing=0.1).backward()
    for h in hooks: h.remove()
    return outs

