# Gradient fidelity of N:M pruning of dL/dO on real ResNet-9 gradients (Fashion-MNIST, the project's PyTorch
# twin), for several pruning functions, each in the pixel domain and in the Winograd domain. Extends
# ../shared/tools/grad_fidelity.py (magnitude pruning only) with:
#   functions  magnitude, random, rescaled (scopes sample-channel and channel), mvue (exact, systematic sampling);
#              magnitude with masks shared by P pixels along W (P = 4, 16) or by P = 4 Winograd tiles, at 2:4
#              and 4:32 only; magnitude in the F(4x4,3x3) domain as a reference row
#   domains    per pixel (rows of dL/dO in NHWC, the paper) and F(2x2,3x3) (rows of V = B^T dO B along channels)
#   patterns   any n:m (--nm), groups of m consecutive channels of one row
# Prints, per 3x3 stride-1 layer (conv2..conv6), cosine / relative L2 error of dL/dD against dense (float64),
# then a min-max summary over the layers per (domain, function, n:m), as markdown.
# Random and MVUE cosines / errors of one sample are means over 3 seeds; "mvue mean of 8" prunes with 8 seeds
# and averages the pruned dL/dO (MVUE is unbiased, so its cosine should approach 1 as samples are added).
# Usage, from the project's root:
#   /usr/bin/python3 bench/grad_fidelity.py . [width=0.25] [train steps=400] [--nm 2:4,1:4,2:8,4:32] [--out FILE]
import os, sys, time, argparse, numpy as np, torch, torch.nn.functional as F
T0 = time.time()
ap = argparse.ArgumentParser(description='gradient fidelity of N:M pruning of dL/dO (see the header comment)')
ap.add_argument('root', nargs='?', default='.'); ap.add_argument('width', nargs='?', type=float, default=0.25)
ap.add_argument('steps', nargs='?', type=int, default=400)
ap.add_argument('--nm', default='2:4,1:4,2:8,4:32', help='comma-separated n:m patterns')
ap.add_argument('--out', default=None, help='also write the markdown to this file')
args = ap.parse_args()
NM = [tuple(int(v) for v in s.split(':')) for s in args.nm.split(',')]
assert all(0 < n < m for n, m in NM), 'n:m needs 0 < n < m'
sys.path.insert(0, args.root + '/python')
from torch_models import ResNet9
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nm_prune_ref import mag_rows, mag_block, random_rows, rescaled, mvue_plan, mvue_sample, self_test, cos_err, load, train_twin, capture_3x3  # noqa: E402
torch.manual_seed(0); torch.set_num_threads(1)
self_test()
BT = torch.tensor([[4,0,-5,0,1,0],[0,-4,-4,1,1,0],[0,4,-4,-1,1,0],[0,-2,-1,2,1,0],[0,2,-1,-2,1,0],[0,4,0,-5,0,1]], dtype=torch.float64)
G = torch.tensor([[1/4,0,0],[-1/6,-1/6,-1/6],[-1/6,1/6,-1/6],[1/24,1/12,1/6],[1/24,-1/12,1/6],[0,0,1]], dtype=torch.float64)
AT = torch.tensor([[1,1,1,1,1,0],[0,1,-1,2,-2,0],[0,1,1,4,4,0],[0,1,-1,8,-8,1]], dtype=torch.float64)

def wino_conv(x, k, prune=None):
    """correlation of x (B,C,H,W) with k (O,C,3,3), stride 1, pad 1, via F(4x4,3x3); prune(V) acts on (36, tiles, C) along C."""
    B, C, H, W = x.shape; O = k.shape[0]
    th, tw = -(-H // 4), -(-W // 4)
    xp = F.pad(x, (1, 1 + tw * 4 - W, 1, 1 + th * 4 - H))
    d = xp.unfold(2, 6, 4).unfold(3, 6, 4)                      # B,C,th,tw,6,6
    V = torch.einsum('ij,bctwjk,lk->bctwil', BT, d, BT)         # B^T d B
    V = V.permute(4, 5, 0, 2, 3, 1).reshape(36, B * th * tw, C)
    if prune is not None: V = prune(V)
    U = torch.einsum('ij,ocjk,lk->ocil', G, k, G).permute(2, 3, 1, 0).reshape(36, C, O)
    M = torch.bmm(V, U).reshape(6, 6, B, th, tw, O)
    Y = torch.einsum('ij,jkbtwo,lk->btwoil', AT, M, AT)          # B,th,tw,O,4,4
    return Y.permute(0, 3, 1, 4, 2, 5).reshape(B, O, th * 4, tw * 4)[:, :, :H, :W]

BT2 = torch.tensor([[1,0,-1,0],[0,1,1,0],[0,-1,1,0],[0,1,0,-1]], dtype=torch.float64)
G2 = torch.tensor([[1,0,0],[.5,.5,.5],[.5,-.5,.5],[0,0,1]], dtype=torch.float64)
AT2 = torch.tensor([[1,1,1,0],[0,1,-1,-1]], dtype=torch.float64)
def wino2_V(x):
    """the F(2x2,3x3) input transform: V = B^T d B of every 4x4 tile d of x (B,C,H,W), as (16, B*T, C), tiles b-major."""
    B, C, H, W = x.shape
    th, tw = -(-H // 2), -(-W // 2)
    xp = F.pad(x, (1, 1 + tw * 2 - W, 1, 1 + th * 2 - H))
    d = xp.unfold(2, 4, 2).unfold(3, 4, 2)
    return torch.einsum('ij,bctwjk,lk->bctwil', BT2, d, BT2).permute(4, 5, 0, 2, 3, 1).reshape(16, B * th * tw, C)

def wino2_out(V, k, B, H, W):
    """the rest of F(2x2,3x3): elementwise products with U = G k G^T (a batched matmul over C), output transform."""
    C, O = k.shape[1], k.shape[0]; th, tw = -(-H // 2), -(-W // 2)
    U = torch.einsum('ij,ocjk,lk->ocil', G2, k, G2).permute(2, 3, 1, 0).reshape(16, C, O)
    M = torch.bmm(V, U).reshape(4, 4, B, th, tw, O)
    Y = torch.einsum('ij,jkbtwo,lk->btwoil', AT2, M, AT2)
    return Y.permute(0, 3, 1, 4, 2, 5).reshape(B, O, th * 2, tw * 2)[:, :, :H, :W]

def wino2_conv(x, k, prune=None):
    """as wino_conv via F(2x2,3x3); prune(V) acts on V (16, B*T, C), tiles b-major (T = th*tw tiles per image)."""
    V = wino2_V(x)
    if prune is not None: V = prune(V)
    return wino2_out(V, k, x.shape[0], x.shape[2], x.shape[3])


x, y = load('/usr/share/datasets/fashion-mnist')
model = train_twin(ResNet9(in_ch=1, width=args.width), x, y, args.steps)
T_train = time.time() - T0
outs = capture_3x3(model, x, y)  # dO and W of every 3x3 stride-1 pad-1 conv on one batch

lines = []
def emit(s=''): print(s, flush=True); lines.append(s)
emit('## Layers\n')
emit('| layer | conv (Cin -> Cout) | H x W | dL/dO (B, C, H, W) | F(2x2,3x3) tiles / image | F(2x2,3x3) V (16, B x T, C) |')
emit('|---|---|---|---|---|---|')
for name, (mod, X, out) in outs.items():
    B, C, H, W = out.shape; T = -(-H // 2) * -(-W // 2)
    emit(f'| {name} | {mod.in_channels} -> {mod.out_channels} | {H} x {W} | {tuple(out.shape)} | {T} | (16, {B * T}, {C}) |')
    assert all(C % m == 0 for n, m in NM), f'{name}: {C} channels not divisible by every m'
emit()

SEEDS1, SEEDS8 = 3, 8
def rows_for(n, m):
    """(function label, kind) rows evaluated at n:m; kinds: det = deterministic, rnd = mean over SEEDS1 seeds."""
    r = [('magnitude', 'det')]
    if (n, m) in [(2, 4), (4, 32)]: r += [('magnitude P=4', 'det'), ('magnitude P=16', 'det')]
    r += [('random', 'rnd'), ('rescaled sample-channel', 'det'), ('rescaled channel', 'det'), ('mvue 1 sample', 'rnd'), ('mvue mean of 8', 'det')]
    return r

res = {}  # (domain, function, n:m) -> {layer: (cos, relL2)}
for li, (name, (mod, X, out)) in enumerate(outs.items()):
    t0 = time.time()
    g = out.grad.double(); w = mod.weight.detach().double()
    B, C, H, W = g.shape; T = -(-H // 2) * -(-W // 2)
    kt = w.flip(2, 3).transpose(0, 1).contiguous()              # bwd-data kernel: (Cin, Cout, 3, 3)
    dense = F.conv2d(g, kt, padding=1)
    e2 = (wino2_conv(g, kt) - dense).abs().max() / dense.abs().max()
    e4 = (wino_conv(g, kt) - dense).abs().max() / dense.abs().max()
    assert e2 < 1e-10, f'{name}: F(2x2,3x3) without pruning differs from F.conv2d by {e2:.3g} (max-abs relative)'
    assert e4 < 1e-10, f'{name}: F(4x4,3x3) without pruning differs from F.conv2d by {e4:.3g} (max-abs relative)'
    emit(f'{name}: unpruned F(2x2,3x3) vs F.conv2d max |diff| / max |dense| = {e2:.2e}, F(4x4,3x3) {e4:.2e} (asserted < 1e-10)  ')
    gn = g.permute(0, 2, 3, 1).contiguous()                      # NHWC: rows = pixels, blocks along W
    V4 = wino2_V(g).reshape(16, B, T, C)                         # Winograd rows, (element, image, tile, channel)
    # domains: (name, channels-last 4-D tensor to prune, pruned tensor -> dL/dD, sample-channel scope dims)
    domains = [('pixel', gn, lambda X: F.conv2d(X.permute(0, 3, 1, 2), kt, padding=1), (1, 2)),
               ('F(2x2,3x3)', V4, lambda X: wino2_out(X.reshape(16, B * T, C), kt, B, H, W), (2,))]
    for n, m in NM:
        nm = f'{n}:{m}'
        for dom, X0, finish, scdims in domains:
            def put(fun, v): res.setdefault((dom, fun, nm), {})[name] = v
            put('magnitude', cos_err(finish(mag_rows(X0, n, m)), dense))
            if (n, m) in [(2, 4), (4, 32)]:
                if dom == 'pixel':   # X (B,H,W,C): P pixels along W share a mask (P=16 > W: the whole row)
                    put('magnitude P=4', cos_err(finish(mag_block(X0, n, m, 4)), dense))
                    put('magnitude P=16', cos_err(finish(mag_block(X0, n, m, 16)), dense))
                else:                # V (16, B*T, C): blocks of 4 consecutive tiles (b-major, as the shared tool)
                    put('magnitude P=4', cos_err(finish(mag_block(X0.reshape(16, B * T, C), n, m, 4)), dense))
            ce = [cos_err(finish(random_rows(X0, n, m, torch.Generator().manual_seed(100 * li + s))), dense) for s in range(SEEDS1)]
            put('random', tuple(np.mean(ce, 0)))
            put('rescaled sample-channel', cos_err(finish(rescaled(X0, n, m, scdims)), dense))
            put('rescaled channel', cos_err(finish(rescaled(X0, n, m, (0, 1, 2))), dense))
            # MVUE: 8 draws (seeds 0..7) of one plan; the single-sample numbers are the mean over draws 0..2; dL/dD is
            # linear in the pruned tensor, so "mean of 8" is the dL/dD of the mean of the 8 pruned tensors
            pl, acc, ce = mvue_plan(X0, n, m), None, []
            for s in range(SEEDS8):
                Y = mvue_sample(pl, torch.Generator().manual_seed(100 * li + 10 + s))
                if s < SEEDS1: ce.append(cos_err(finish(Y), dense))
                acc = Y if acc is None else acc.add_(Y)
            del pl
            put('mvue 1 sample', tuple(np.mean(ce, 0)))
            put('mvue mean of 8', cos_err(finish(acc / SEEDS8), dense))
        res.setdefault(('F(4x4,3x3)', 'magnitude', nm), {})[name] = cos_err(wino_conv(g, kt, lambda V: mag_rows(V, n, m)), dense)
    print(f'  ({name}: {time.time() - t0:.1f} s)', file=sys.stderr, flush=True)

layers = list(outs)
DOMS = ['pixel', 'F(2x2,3x3)', 'F(4x4,3x3)']
funs = []
for n, m in NM:
    for f, _ in rows_for(n, m):
        if f not in funs: funs.append(f)
cols = [(d, f'{n}:{m}') for n, m in NM for d in DOMS[:2]]
emit('\n## Per layer: cosine / relative L2 error of dL/dD against dense\n')
emit('Random and "mvue 1 sample": mean over 3 seeds. "mvue mean of 8": the dL/dD of the mean of 8 pruned dL/dO.')
emit()
for name in layers:
    emit(f'### {name}\n')
    emit('| function | ' + ' | '.join(f'{d} {nm}' for d, nm in cols) + ' |')
    emit('|---|' + '---|' * len(cols))
    for f in funs:
        cells = [('%.3f / %.3f' % res[(d, f, nm)][name]) if (d, f, nm) in res else '' for d, nm in cols]
        emit(f'| {f} | ' + ' | '.join(cells) + ' |')
    emit()
    emit('Reference, magnitude in the F(4x4,3x3) domain: ' + ', '.join(f'{n}:{m} ' + '%.3f / %.3f' % res[('F(4x4,3x3)', 'magnitude', f'{n}:{m}')][name] for n, m in NM) + '.')
    emit()
emit(f'## Summary: min - max over {", ".join(layers)}\n')
emit('| domain | function | n:m | cosine | rel L2 |')
emit('|---|---|---|---|---|')
for n, m in NM:
    nm = f'{n}:{m}'
    for d in DOMS:
        for f in funs:
            if (d, f, nm) not in res: continue
            v = np.array([res[(d, f, nm)][l] for l in layers])
            emit(f'| {d} | {f} | {nm} | {v[:, 0].min():.3f} - {v[:, 0].max():.3f} | {v[:, 1].min():.3f} - {v[:, 1].max():.3f} |')
wall = time.time() - T0
emit(f'\nResNet-9 w={args.width}, after {args.steps} training steps (batch 128, seed 0), dL/dO of one batch of 128; '
     f'torch {torch.__version__}, 1 thread; wall time {wall:.0f} s (training {T_train:.0f} s).')
if args.out:
    with open(args.out, 'w') as fh:
        fh.write('Command: `/usr/bin/python3 ' + ' '.join(sys.argv) + '`\n\n' + '\n'.join(lines) + '\n')
