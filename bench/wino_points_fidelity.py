# Which Winograd domain can SDGP prune in? Gradient fidelity of N:M magnitude pruning of the transformed dL/dO
# in F(m x m, 3x3) domains for m = 2, 3, 4 and several sets of interpolation points, on real ResNet-9 gradients
# (Fashion-MNIST, the project's PyTorch twin, 400 training steps, one batch of 128: the protocol of
# bench/grad_fidelity.py), against the arithmetic each domain would save over oneDNN's dense F(4x4,3x3).
# The transforms are the Toom-Cook construction for the given points (and infinity); B^T is solved from the
# exactness identity and every unpruned transform is asserted equal to F.conv2d. A per-element scale of V does not
# change a magnitude mask (a group's values share their element), so only the points matter, not the scaling.
# Prints a markdown table: cosine of dL/dD against dense per 3x3 stride-1 layer (conv2 .. conv7).
# Usage, from the project's root: /usr/bin/python3 bench/wino_points_fidelity.py [width=0.25] [--out FILE]
import sys, time, gzip, numpy as np, torch, torch.nn.functional as F
sys.path.insert(0, 'python')
from torch_models import ResNet9
T0 = time.time()
torch.manual_seed(0); torch.set_num_threads(2)

def toom(m, pts, r=3):
    n = m + r - 1; assert len(pts) == n - 1
    AT = np.zeros((m, n)); G = np.zeros((n, r))
    for j, a in enumerate(pts):
        for i in range(m): AT[i, j] = a ** i
        f = np.prod([a - b for l, b in enumerate(pts) if l != j])
        for k in range(r): G[j, k] = a ** k / f
    AT[m - 1, n - 1] = 1; G[n - 1, r - 1] = 1
    # solve for BT: sum_j AT[i,j] G[j,k] BT[j,l] = [l == i+k]
    rows, rhs = [], []
    for i in range(m):
        for k in range(r):
            for l in range(n):
                row = np.zeros((n, n))
                for j in range(n): row[j, l] = AT[i, j] * G[j, k]
                rows.append(row.ravel()); rhs.append(1.0 if l == i + k else 0.0)
    sol, res, rk, _ = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)
    BT = sol.reshape(n, n)
    err = np.abs(np.array(rows) @ sol - rhs).max()
    assert err < 1e-9, (m, pts, err)
    return [torch.tensor(x, dtype=torch.float64) for x in (AT, G, BT)]

def wconv(x, k, AT, G, BT, prune=None, P=1):
    m, n = AT.shape; B, C, H, W = x.shape; O = k.shape[0]
    th, tw = -(-H // m), -(-W // m)
    xp = F.pad(x, (1, 1 + tw * m - W + (n - m - 2), 1, 1 + th * m - H + (n - m - 2)))
    d = xp.unfold(2, n, m).unfold(3, n, m)
    V = torch.einsum('ij,bctwjk,lk->bctwil', BT, d, BT).permute(4, 5, 0, 2, 3, 1).reshape(n * n, B * th * tw, C)
    if prune is not None: V = prune(V)
    U = torch.einsum('ij,ocjk,lk->ocil', G, k, G).permute(2, 3, 1, 0).reshape(n * n, C, O)
    M = torch.bmm(V, U).reshape(n, n, B, th, tw, O)
    Y = torch.einsum('ij,jkbtwo,lk->btwoil', AT, M, AT)
    return Y.permute(0, 3, 1, 4, 2, 5).reshape(B, O, th * m, tw * m)[:, :, :H, :W]

def mag(X, n, m, P=1):
    s = X.shape; C = s[-1]
    if P > 1:
        R = s[-2]; Xb = X.reshape(*s[:-2], R // P, P, C // m, m)
        sc = Xb.abs().sum(-3, keepdim=True).expand_as(Xb)
        idx = sc.topk(n, -1).indices
        mask = torch.zeros_like(Xb).scatter_(-1, idx, 1.0)
        return (Xb * mask).reshape(s)
    Xg = X.reshape(*s[:-1], C // m, m)
    idx = Xg.abs().topk(n, -1).indices
    return (Xg * torch.zeros_like(Xg).scatter_(-1, idx, 1.0)).reshape(s)

def cos(a, b): a, b = a.flatten(), b.flatten(); return (a @ b / (a.norm() * b.norm())).item()

def load(d):
    im = gzip.open(d + '/train-images-idx3-ubyte.gz').read(); lb = gzip.open(d + '/train-labels-idx1-ubyte.gz').read()
    x = torch.from_numpy(np.frombuffer(im, np.uint8, offset=16).reshape(-1, 1, 28, 28).astype(np.float32) / 255.0)
    return (x - 0.286) / 0.353, torch.from_numpy(np.frombuffer(lb, np.uint8, offset=8).astype(np.int64))
x, y = load('/usr/share/datasets/fashion-mnist')
args = [a for a in sys.argv[1:] if not a.startswith('--out')]
OUT = next((a.split('=', 1)[1] for a in sys.argv[1:] if a.startswith('--out=')), None)
WIDTH = float(args[0]) if args else 0.25
model = ResNet9(in_ch=1, width=WIDTH)
opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9, nesterov=True, weight_decay=5e-4)
for s in range(400):
    i = torch.randint(0, len(x), (128,))
    opt.zero_grad(); F.cross_entropy(model(x[i]), y[i], label_smoothing=0.1).backward(); opt.step()
outs = {}
def keep(name):
    def hook(mod, inp, out): out.retain_grad(); outs[name] = (mod, out)
    return hook
for j, cb in enumerate(model.convs):
    c = cb.conv
    if c.kernel_size == (3, 3) and c.stride == (1, 1) and j > 0: c.register_forward_hook(keep(f'conv{j}'))
i = torch.arange(128)
F.cross_entropy(model(x[i]), y[i], label_smoothing=0.1).backward()
CFG = [('F2 {0,1,-1}', 2, [0, 1, -1]),
       ('F3 {0,1,-1,2}', 3, [0, 1, -1, 2]), ('F3 {0,1,-1,1/2}', 3, [0, 1, -1, .5]), ('F3 {0,1,-1,-2}', 3, [0, 1, -1, -2]),
       ('F4 {0,+-1,+-2}', 4, [0, 1, -1, 2, -2]), ('F4 {0,+-1,+-1/2}', 4, [0, 1, -1, .5, -.5]), ('F4 {0,+-1,2,1/2}', 4, [0, 1, -1, 2, .5])]
lines = []
def emit(t=''): print(t, flush=True); lines.append(t)
emit('| domain (points) | n:m | mask block P | GEMM multiplies vs oneDNN F(4x4,3x3) dense | ' + ' | '.join(outs) + ' | min - max |')
emit('|---|---|---|---|' + '---|' * (len(outs) + 1))
for label, m, pts in CFG:
    AT, G, BT = toom(m, pts)
    for (nn, mm, P) in [(2, 4, 1), (2, 4, 4), (4, 32, 1)]:
        cs = []
        for name, (mod, out) in outs.items():
            g = out.grad.double(); w = mod.weight.detach().double()
            kt = w.flip(2, 3).transpose(0, 1).contiguous()
            dense = F.conv2d(g, kt, padding=1)
            e = (wconv(g, kt, AT, G, BT) - dense).abs().max() / dense.abs().max(); assert e < 1e-9, (label, name, e)
            cs.append(cos(wconv(g, kt, AT, G, BT, lambda V: mag(V, nn, mm, P)), dense))
        # multiplies of the GEMM stage per output pixel: (m+2)^2 / m^2 per (Cin, Cout) pair, times n/m kept;
        # oneDNN's dense F(4x4,3x3): 36 / 16
        ratio = (m + 2) ** 2 / m ** 2 * nn / mm / (36 / 16)
        emit(f'| {label} | {nn}:{mm} | {P} | {ratio:.2f} ({1 / ratio:.2f}x fewer) | ' + ' | '.join(f'{c:.3f}' for c in cs)
             + f' | {min(cs):.3f} - {max(cs):.3f} |')
emit(f'\nResNet-9 w={WIDTH}, after 400 training steps (batch 128, seed 0), dL/dO of one batch of 128, magnitude pruning '
     f'(P > 1: P consecutive tiles share the mask of their summed |V|); torch {torch.__version__}; {time.time() - T0:.0f} s.')
if OUT:
    with open(OUT, 'w') as fh:
        fh.write('Command: `/usr/bin/python3 bench/wino_points_fidelity.py ' + ' '.join(sys.argv[1:]) + '`\n\n' + '\n'.join(lines) + '\n')
