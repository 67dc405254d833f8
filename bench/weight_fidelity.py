# Weight fidelity of N:M sparse weights (S-STE's soft threshold, SR-STE's hard mask) in several group forms, on
# the real weights of a trained ResNet-9 (an sdgp checkpoint) and real Fashion-MNIST activations: the question a
# sparse forward kernel asks before it is built (issue 16). A kernel is FMA-bound only when one mask is shared
# by a block of output channels (one loaded input value then feeds P FMAs), so the forms are:
#   tap        a mask per (output channel, tap) over m input channels (sdgp's --weight-groups tap)
#   cout       a mask per (input channel, tap) over m output channels: as fine as tap, along the other axis (a
#              direct kernel vectorised over pixels shares each loaded input vector by the kept output channels)
#   kernel     a mask per output channel for the whole kernel (--weight-groups kernel)
#   oc-block P a mask per (block of P output channels, tap), ranked by the L2 norm over the block
#   oc-kern. P a mask per block of P output channels for the whole kernel (L2 over the block and the taps)
# Block forms shrink each kept unit along its own direction, w (1 - t/||w||), as kernel groups do.
# Per conv layer (all but the first, as sdgp's default): cosine and relative L2 error of the layer's output
# conv(X, W~) against conv(X, W) on the checkpoint's own inputs (evaluation mode), W~ = beta S(W) with beta =
# <W,S>/<S,S> (S-STE) or M W (hard); then the whole network's test accuracy with every such layer projected at
# once, without retraining (a one-shot bound: S-STE trains with the projection, so its loss is smaller).
# Usage, from the project's root:
#   /usr/bin/python3 bench/weight_fidelity.py [--checkpoint FILE] [--nm 2:4] [--images 2000] [--out FILE]
import argparse, gzip, json, os, struct, sys
import numpy as np, torch, torch.nn.functional as F

ap = argparse.ArgumentParser(description='output fidelity of N:M sparse weights in several group forms')
ap.add_argument('--root', default='.')
ap.add_argument('--checkpoint', default='docs/results/table1-full/dense-s1/checkpoint.safetensors',
                help='an sdgp ResNet-9 checkpoint (default: the 15-epoch dense run of table1-full, seed 1)')
ap.add_argument('--data', default='/usr/share/datasets/fashion-mnist')
ap.add_argument('--nm', default='2:4'); ap.add_argument('--images', type=int, default=2000)
ap.add_argument('--out', default=None, help='also write the markdown to this file')
a = ap.parse_args()
sys.path.insert(0, os.path.join(a.root, 'python'))
from torch_models import ResNet9, named_tensors  # noqa: E402
N, M = (int(v) for v in a.nm.split(':'))
assert 0 < N < M, 'n:m needs 0 < n < m'
torch.set_num_threads(2)


def read_checkpoint(path):
    blob = open(path, 'rb').read()
    (n,) = struct.unpack('<Q', blob[:8])
    head = json.loads(blob[8:8 + n])
    meta = head.pop('__metadata__', {})
    body = 8 + n
    ts = {k: np.frombuffer(blob[body + v['data_offsets'][0]:body + v['data_offsets'][1]], np.float32).reshape(v['shape'])
          for k, v in head.items() if v['dtype'] == 'F32'}
    return meta, ts


def project(w, form, P, soft):
    """W~ of w (O, C, kh, kw), n:m along C (cout: along O)."""
    if form == 'cout':
        return project(w.transpose(0, 1), 'tap', 1, soft).transpose(0, 1)
    O, C, kh, kw = w.shape
    if form in ('tap', 'kernel'):
        P = 1
    u = w.reshape(O // P, P, C // M, M, kh * kw)           # (blocks, P, groups, m, taps)
    if form in ('tap', 'oc-block'):
        size = u.pow(2).sum(1).sqrt()                       # per (block, group, i, tap)
        size = size.unsqueeze(1)
    else:
        size = u.pow(2).sum((1, 4), keepdim=True).sqrt()  # (blocks, 1, groups, m, 1)
    order = size.argsort(dim=3, descending=True)
    keep = torch.zeros_like(size, dtype=torch.bool).scatter(3, order[:, :, :, :N], True)
    t = size.gather(3, order[:, :, :, N:N + 1])             # the (n+1)-th largest
    f = keep.to(w.dtype)
    if soft:  # shrink each kept unit towards 0 along its own direction (tap, P = 1: the scalar soft threshold)
        f = f * (1 - t / size.clamp_min(1e-30)).clamp_min(0)
    s = (u * f).reshape(O, C, kh, kw)
    if soft:
        s = s * ((w * s).sum() / (s * s).sum().clamp_min(1e-30))  # beta, per tensor
    return s


def idx(name):
    with gzip.open(os.path.join(a.data, name)) as f:
        raw = f.read()
    dims = raw[3]
    shape = struct.unpack('>' + 'I' * dims, raw[4:4 + 4 * dims])
    return np.frombuffer(raw[4 + 4 * dims:], np.uint8).reshape(shape)


meta, ts = read_checkpoint(os.path.join(a.root, a.checkpoint))
width = float(meta.get('cfg.width', '0.25'))
norm = [float.fromhex(v) for v in meta['normalisation'].split()]  # 4 means, then 4 stds (hex floats)
mean, std = norm[0], norm[4]
model = ResNet9(1, 10, width).double().eval()
with torch.no_grad():
    for k, t in named_tensors(model).items():
        t.copy_(torch.from_numpy(ts[k].astype(np.float64)))
x = torch.from_numpy((idx('t10k-images-idx3-ubyte.gz')[:a.images, None].astype(np.float64) / 255 - mean) / std)
y = torch.from_numpy(idx('t10k-labels-idx1-ubyte.gz')[:a.images].astype(np.int64))

inputs = {}
hooks = [cb.conv.register_forward_hook(lambda mod, inp, out, i=i: inputs.__setitem__(i, inp[0].detach()))
         for i, cb in enumerate(model.convs)]
with torch.no_grad():
    base_acc = (model(x).argmax(1) == y).double().mean().item() * 100
for h in hooks:
    h.remove()
layers = [i for i, cb in enumerate(model.convs) if i > 0 and cb.conv.in_channels % M == 0 and cb.conv.out_channels % M == 0]
forms = [('tap', 1), ('cout', 1), ('kernel', 1), ('oc-block', 4), ('oc-block', 16), ('oc-kernel', 4), ('oc-kernel', 16)]
lines = []


def emit(s=''):
    print(s, flush=True)
    lines.append(s)


emit(f'# Weight fidelity, {N}:{M} along input channels (cout: along output channels): {a.checkpoint} (ResNet-9 w={width}, dense accuracy on '
     f'{a.images} test images {base_acc:.2f} %)')
emit()
emit('| form | P | kind | output cosine per layer (' + ', '.join(f'conv{i}' for i in layers) + ') | rel. L2 error, min-max '
     '| one-shot accuracy |')
emit('|---|---|---|---|---|---|')
for form, P in forms:
    for soft in (True, False):
        cos, err = [], []
        saved = {i: model.convs[i].conv.weight.detach().clone() for i in layers}
        with torch.no_grad():
            for i in layers:
                conv = model.convs[i].conv
                w = saved[i]
                wt = project(w, form, P, soft)
                y0 = F.conv2d(inputs[i], w, None, conv.stride, conv.padding)
                y1 = F.conv2d(inputs[i], wt, None, conv.stride, conv.padding)
                cos.append(F.cosine_similarity(y0.flatten(), y1.flatten(), dim=0).item())
                err.append(((y1 - y0).norm() / y0.norm()).item())
                conv.weight.copy_(wt)
            acc = (model(x).argmax(1) == y).double().mean().item() * 100
            for i in layers:
                model.convs[i].conv.weight.copy_(saved[i])
        emit(f'| {form} | {P} | {"S-STE" if soft else "hard"} | ' + ' '.join(f'{c:.3f}' for c in cos) +
             f' | {min(err):.3f}-{max(err):.3f} | {acc:.2f} % |')
if a.out:
    with open(a.out, 'w') as f:
        f.write('\n'.join(lines) + '\n')
