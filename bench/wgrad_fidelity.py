# Weight-gradient fidelity of N:M pruning of dL/dO along *positions* (issue 16's third product: MVUE, as S-STE's
# code prunes it), on real ResNet-9 gradients (Fashion-MNIST, the project's PyTorch twin): the question a sparse
# weight-gradient kernel asks before it is built. dW = sum over positions p of X(p + tap) dO(p), so a kernel skips
# the pruned positions at speed only when several output channels share them (one loaded input row then feeds
# several FMAs, as the sparse-weight forward's block masks do); a mask per channel leaves every FMA its own load.
# Forms, groups of m consecutive positions (pixels in NHWC order, along W), n kept, kept values scaled unbiasedly:
#   mvue per channel   the exact minimum-variance unbiased sampler on each channel's |dO| (sdgp --prune-wgrad mvue)
#   mvue Q channels    one draw per (block of Q consecutive channels, group): the sampler on the block's L2 norm
#                      per position, each kept position's whole block row scaled by 1/P (still unbiased)
#   random Q channels  n of m positions uniformly at random per (block, group), scaled m/n (the baseline)
# Per 3x3 stride-1 layer: cosine and relative L2 error of dW against the dense dW (float64): one draw (mean over 3
# seeds) and the mean of 8 draws (unbiased estimators approach 1). Then the min-max over the layers, as markdown.
# Usage, from the project's root:
#   /usr/bin/python3 bench/wgrad_fidelity.py [--width 0.25] [--steps 400] [--nm 2:4,1:4] [--blocks 8,16,32] [--out FILE]
import argparse, os, sys, time
import numpy as np, torch, torch.nn.functional as F

T0 = time.time()
ap = argparse.ArgumentParser(description='weight-gradient fidelity of N:M pruning along positions (see the header)')
ap.add_argument('--root', default='.'); ap.add_argument('--width', type=float, default=0.25)
ap.add_argument('--steps', type=int, default=400); ap.add_argument('--nm', default='2:4,1:4')
ap.add_argument('--blocks', default='8,16,32', help='channels sharing one draw')
ap.add_argument('--out', default=None, help='also write the markdown to this file')
args = ap.parse_args()
NM = [tuple(int(v) for v in s.split(':')) for s in args.nm.split(',')]
QS = [int(v) for v in args.blocks.split(',')]
assert all(0 < n < m for n, m in NM), 'n:m needs 0 < n < m'
sys.path.insert(0, os.path.join(args.root, 'python'))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import ResNet9  # noqa: E402
from nm_prune_ref import mvue_plan, mvue_sample, self_test, cos_err, load, train_twin, capture_3x3  # noqa: E402
torch.manual_seed(0); torch.set_num_threads(2)
self_test()


def mvue_channels(D, n, m, gen):
    """D (P, C) positions x channels: each channel's groups of m positions sampled on their own."""
    return mvue_sample(mvue_plan(D.t().contiguous(), n, m), gen).t()


def mvue_shared(D, n, m, Q, gen):
    """one draw per (block of Q channels, group of m positions) on the block's L2 norm per position; a kept
    position's block row scaled by norm / (norm / P) = 1/P, so each element stays unbiased."""
    P, C = D.shape
    nrm = D.reshape(P, C // Q, Q).norm(dim=-1).t().contiguous()              # (C/Q, P)
    kept = mvue_sample(mvue_plan(nrm, n, m), gen)                             # norm / P_i where kept, else 0
    factor = torch.where(nrm > 0, kept / torch.where(nrm > 0, nrm, torch.ones_like(nrm)), torch.zeros_like(nrm))
    return (D.reshape(P, C // Q, Q) * factor.t()[:, :, None]).reshape(P, C)


def random_shared(D, n, m, Q, gen):
    P, C = D.shape
    u = torch.rand(C // Q, P // m, m, generator=gen, dtype=torch.float64)
    sel = torch.zeros_like(u).scatter_(-1, u.topk(n, dim=-1).indices, m / n).reshape(C // Q, P)
    return (D.reshape(P, C // Q, Q) * sel.t()[:, :, None]).reshape(P, C)


x, y = load('/usr/share/datasets/fashion-mnist')
model = train_twin(ResNet9(in_ch=1, width=args.width), x, y, args.steps)
T_train = time.time() - T0
outs = capture_3x3(model, x, y)  # X and dL/dO of every 3x3 stride-1 pad-1 conv on one batch

lines = []
def emit(s=''): print(s, flush=True); lines.append(s)


forms = [('mvue per channel', None)] + [(f'mvue {q} channels', q) for q in QS] + [(f'random {q} channels', q) for q in QS]
res = {}  # (form, n:m) -> {layer: (cos1, err1, cos8, err8)}
emit('## Layers\n')
emit('| layer | conv (Cin -> Cout) | H x W | positions (B x H x W) |')
emit('|---|---|---|---|')
for name, (mod, X, out) in outs.items():
    B, C, H, W = out.shape
    emit(f'| {name} | {mod.in_channels} -> {mod.out_channels} | {H} x {W} | {B * H * W} |')
emit()
for li, (name, (mod, X, out)) in enumerate(outs.items()):
    t0 = time.time()
    Xd, g = X.double(), out.grad.double()
    B, C, H, W = g.shape
    wshape = mod.weight.shape
    dense = torch.nn.grad.conv2d_weight(Xd, wshape, g, padding=1)
    D = g.permute(0, 2, 3, 1).reshape(-1, C)                                  # positions x channels (NHWC order)

    def dw(Dp): return torch.nn.grad.conv2d_weight(Xd, wshape, Dp.reshape(B, H, W, C).permute(0, 3, 1, 2), padding=1)

    for n, m in NM:
        assert D.shape[0] % m == 0, f'{name}: {D.shape[0]} positions not divisible by m={m}'
        for form, q in forms:
            if q is not None and C % q: continue
            ce, acc = [], None
            for s in range(8):
                gen = torch.Generator().manual_seed(1000 * li + 10 * s + 1)
                Dp = mvue_channels(D, n, m, gen) if q is None else \
                    mvue_shared(D, n, m, q, gen) if form.startswith('mvue') else random_shared(D, n, m, q, gen)
                if s < 3: ce.append(cos_err(dw(Dp), dense))
                acc = Dp.clone() if acc is None else acc.add_(Dp)
            c8 = cos_err(dw(acc / 8), dense)
            res.setdefault((form, f'{n}:{m}'), {})[name] = tuple(np.mean(ce, 0)) + c8
    print(f'  ({name}: {time.time() - t0:.1f} s)', file=sys.stderr, flush=True)

layers = list(outs)
emit('## Per layer: cosine / relative L2 error of dW against dense, one draw (mean of 3) | mean of 8 draws\n')
for nm in [f'{n}:{m}' for n, m in NM]:
    emit(f'### {nm}\n')
    emit('| form | ' + ' | '.join(layers) + ' |')
    emit('|---|' + '---|' * len(layers))
    for form, q in forms:
        if (form, nm) not in res: continue
        r = res[(form, nm)]
        emit(f'| {form} | ' + ' | '.join('%.3f / %.3f \\| %.3f' % (r[l][0], r[l][1], r[l][2]) if l in r else '' for l in layers) + ' |')
    emit()
emit(f'## Summary: min - max over {", ".join(layers)}, one draw\n')
emit('| form | n:m | cosine | rel L2 | cosine, mean of 8 |')
emit('|---|---|---|---|---|')
for n, m in NM:
    nm = f'{n}:{m}'
    for form, q in forms:
        if (form, nm) not in res: continue
        v = np.array([res[(form, nm)][l] for l in layers if l in res[(form, nm)]])
        emit(f'| {form} | {nm} | {v[:, 0].min():.3f} - {v[:, 0].max():.3f} | {v[:, 1].min():.3f} - {v[:, 1].max():.3f} | '
             f'{v[:, 2].min():.3f} - {v[:, 2].max():.3f} |')
emit(f'\nResNet-9 w={args.width}, after {args.steps} training steps (batch 128, seed 0), X and dL/dO of one batch of 128; '
     f'torch {torch.__version__}; wall time {time.time() - T0:.0f} s (training {T_train:.0f} s).')
if args.out:
    with open(args.out, 'w') as fh:
        fh.write('Command: `/usr/bin/python3 ' + ' '.join(sys.argv) + '`\n\n' + '\n'.join(lines) + '\n')
