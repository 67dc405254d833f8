"""Every layer of include/sdgp/nn.h and the dense oneDNN convolution of conv.h against PyTorch.

Run: /usr/bin/python3 tests/golden_layers.py <build-dir>   (loads <build-dir>/libsdgp.so)

Inputs are random (numpy, fixed seeds); the C side works on NHWC float32, PyTorch on NCHW, and
the PyTorch reference runs in float64 so the measured error is ours. A check passes when
max |ours - ref| / max |ref| <= 1e-4. Prints one line per check and "N passed, M failed"."""
import ctypes
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(2)
TOL = 1e-4

if len(sys.argv) != 2:
    sys.exit("usage: golden_layers.py <build-dir>")
lib = ctypes.CDLL(os.path.join(sys.argv[1], "libsdgp.so"))

f32p = np.ctypeslib.ndpointer(dtype=np.float32, flags="C_CONTIGUOUS")
u8p = np.ctypeslib.ndpointer(dtype=np.uint8, flags="C_CONTIGUOUS")
i32p = np.ctypeslib.ndpointer(dtype=np.int32, flags="C_CONTIGUOUS")
c_int, c_float, c_i64, c_size = ctypes.c_int, ctypes.c_float, ctypes.c_int64, ctypes.c_size_t
vp = ctypes.c_void_p


class Geom(ctypes.Structure):
    _fields_ = [(n, c_int) for n in ("B", "H", "W", "Cin", "Cout", "kh", "kw", "stride", "pad", "Ho", "Wo")]


class Error(ctypes.Structure):
    _fields_ = [("code", c_int), ("msg", ctypes.c_char * 512)]


def sig(name, res, *args):
    f = getattr(lib, name)
    f.restype, f.argtypes = res, list(args)
    return f


# f32p arguments that may be NULL are declared void* and passed through ptr().
def ptr(a):
    return None if a is None else a.ctypes.data_as(vp)


geom_init = sig("sdgp_conv_geom_init", c_int, ctypes.POINTER(Geom), *([c_int] * 9), ctypes.POINTER(Error))
conv_create = sig("sdgp_conv_create", c_int, ctypes.POINTER(vp), ctypes.POINTER(Geom), c_int, c_int, ctypes.POINTER(Error))
conv_destroy = sig("sdgp_conv_destroy", None, vp)
conv_forward = sig("sdgp_conv_forward", c_int, vp, f32p, f32p, f32p, vp, ctypes.POINTER(Error))
conv_bwd_data = sig("sdgp_conv_backward_data", c_int, vp, f32p, f32p, f32p, ctypes.POINTER(Error))
conv_bwd_w = sig("sdgp_conv_backward_weights", c_int, vp, f32p, vp, f32p, f32p, ctypes.POINTER(Error))
bn_train = sig("sdgp_batchnorm_forward_train", None, f32p, f32p, f32p, f32p, f32p, f32p, f32p, f32p, c_i64, c_int,
               c_float, c_float)
bn_eval = sig("sdgp_batchnorm_forward_eval", None, f32p, f32p, f32p, f32p, f32p, f32p, c_i64, c_int, c_float)
bn_bwd = sig("sdgp_batchnorm_backward", None, f32p, f32p, f32p, f32p, f32p, f32p, f32p, f32p, c_i64, c_int)
relu_fwd = sig("sdgp_relu_forward", None, f32p, f32p, c_size)
relu_bwd = sig("sdgp_relu_backward", None, f32p, f32p, f32p, c_size)
mp_fwd = sig("sdgp_maxpool2_forward", None, f32p, u8p, f32p, c_int, c_int, c_int, c_int)
mp_bwd = sig("sdgp_maxpool2_backward", None, f32p, f32p, u8p, c_int, c_int, c_int, c_int)
gmp_fwd = sig("sdgp_global_maxpool_forward", None, f32p, i32p, f32p, c_int, c_int, c_int)
gmp_bwd = sig("sdgp_global_maxpool_backward", None, f32p, f32p, i32p, c_int, c_int, c_int)
add_fwd = sig("sdgp_add_forward", None, f32p, f32p, f32p, c_size)
accumulate = sig("sdgp_accumulate", None, f32p, f32p, c_size)
scale_fwd = sig("sdgp_scale_forward", None, f32p, f32p, c_float, c_size)
lin_fwd = sig("sdgp_linear_forward", None, f32p, f32p, f32p, vp, c_int, c_int, c_int)
lin_bwd = sig("sdgp_linear_backward", None, vp, f32p, vp, f32p, f32p, f32p, c_int, c_int, c_int)
xent = sig("sdgp_softmax_xent", ctypes.c_double, vp, ctypes.POINTER(c_int), f32p, i32p, c_int, c_int, c_float)
sgd = sig("sdgp_sgd_update", None, f32p, f32p, f32p, c_size, c_float, c_float, c_float, c_int)

results = [0, 0]


def check(name, ours, ref):
    ours = np.asarray(ours, dtype=np.float64)
    ref = ref.detach().double().numpy() if torch.is_tensor(ref) else np.asarray(ref, dtype=np.float64)
    if ours.shape != ref.shape:
        ok, err = False, float("nan")
    else:
        err = float(np.max(np.abs(ours - ref), initial=0.0) / max(np.max(np.abs(ref), initial=0.0), 1e-30))
        ok = err <= TOL  # NaN fails
    results[0 if ok else 1] += 1
    print(f"{'ok  ' if ok else 'FAIL'} {name}: rel err {err:.2e}")


rng = np.random.default_rng(1234)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def nchw(a):  # NHWC numpy -> NCHW float64 tensor
    return torch.from_numpy(a).double().permute(0, 3, 1, 2).contiguous()


def nhwc(t):  # NCHW tensor -> NHWC numpy
    return t.detach().permute(0, 2, 3, 1).numpy()


# ---------------- convolution ----------------
def conv_case(B, H, W, Cin, Cout, k, s, p, with_bias):
    tag = f"conv B={B} {H}x{W} {Cin}->{Cout} k{k} s{s} p{p} bias={with_bias}"
    g, err, c = Geom(), Error(), vp()
    if (geom_init(ctypes.byref(g), B, H, W, Cin, Cout, k, k, s, p, ctypes.byref(err)) != 0 or
            conv_create(ctypes.byref(c), ctypes.byref(g), with_bias, 0, ctypes.byref(err)) != 0):
        print(f"FAIL {tag}: create: {err.msg.decode()}")
        results[1] += 1
        return
    Ho, Wo = g.Ho, g.Wo
    x, w, dy = randn(B, H, W, Cin), randn(Cout, Cin, k, k) * 0.1, randn(B, Ho, Wo, Cout)
    b = randn(Cout) if with_bias else None
    y, dx, dw = np.empty((B, Ho, Wo, Cout), np.float32), np.empty_like(x), np.empty_like(w)
    db = np.empty(Cout, np.float32) if with_bias else None
    st = conv_forward(c, y, x, w, ptr(b), ctypes.byref(err))
    st |= conv_bwd_data(c, dx, dy, w, ctypes.byref(err))
    st |= conv_bwd_w(c, dw, ptr(db), x, dy, ctypes.byref(err))
    conv_destroy(c)
    if st != 0:
        print(f"FAIL {tag}: {err.msg.decode()}")
        results[1] += 1
        return
    tx = nchw(x).requires_grad_()
    tw = torch.from_numpy(w).double().requires_grad_()
    tb = torch.from_numpy(b).double().requires_grad_() if with_bias else None
    ty = F.conv2d(tx, tw, tb, stride=s, padding=p)
    ty.backward(nchw(dy))
    check(f"{tag} forward", y, nhwc(ty))
    check(f"{tag} backward-data", dx, nhwc(tx.grad))
    check(f"{tag} backward-weights", dw, tw.grad)
    if with_bias:
        check(f"{tag} dbias", db, tb.grad)


for shape in [(2, 8, 8, 16, 32, 1, 1, 0), (2, 9, 7, 16, 24, 3, 1, 1), (3, 11, 11, 8, 16, 5, 2, 2),
              (2, 7, 6, 12, 8, 3, 1, 0), (1, 6, 6, 3, 16, 3, 1, 1), (4, 16, 16, 64, 64, 3, 1, 1)]:
    for with_bias in (0, 1):
        conv_case(*shape, with_bias)


# ---------------- batchnorm ----------------
def bn_case(B, H, W, C):
    tag = f"batchnorm B={B} {H}x{W} C={C}"
    rows, mom, eps = B * H * W, 0.1, 1e-5
    x = randn(B, H, W, C) * 2 + 1
    gamma, beta, dy = randn(C), randn(C), randn(B, H, W, C)
    rm, rv = randn(C), np.abs(randn(C)) + 0.5
    bn = torch.nn.BatchNorm2d(C, eps=eps, momentum=mom).double()
    with torch.no_grad():
        bn.weight.copy_(torch.from_numpy(gamma)), bn.bias.copy_(torch.from_numpy(beta))
        bn.running_mean.copy_(torch.from_numpy(rm)), bn.running_var.copy_(torch.from_numpy(rv))
    y, mean, rstd = np.empty_like(x), np.empty(C, np.float32), np.empty(C, np.float32)
    rm_ours, rv_ours = rm.copy(), rv.copy()
    bn_train(y, mean, rstd, rm_ours, rv_ours, x, gamma, beta, rows, C, mom, eps)
    dx, dg, dbeta = np.empty_like(x), np.empty(C, np.float32), np.empty(C, np.float32)
    bn_bwd(dx, dg, dbeta, dy, x, mean, rstd, gamma, rows, C)
    tx = nchw(x).requires_grad_()
    ty = bn.train()(tx)
    ty.backward(nchw(dy))
    check(f"{tag} train forward", y, nhwc(ty))
    check(f"{tag} saved mean", mean, tx.detach().mean(dim=(0, 2, 3)))
    check(f"{tag} saved rstd", rstd, 1 / torch.sqrt(tx.detach().var(dim=(0, 2, 3), unbiased=False) + eps))
    check(f"{tag} running_mean", rm_ours, bn.running_mean)
    check(f"{tag} running_var", rv_ours, bn.running_var)
    check(f"{tag} dx", dx, nhwc(tx.grad))
    check(f"{tag} dgamma", dg, bn.weight.grad)
    check(f"{tag} dbeta", dbeta, bn.bias.grad)
    ye = np.empty_like(x)
    bn_eval(ye, x, gamma, beta, rm_ours, rv_ours, rows, C, eps)
    with torch.no_grad():
        check(f"{tag} eval forward", ye, nhwc(bn.eval()(nchw(x))))


for shape in [(4, 5, 7, 16), (1, 3, 3, 8), (8, 8, 8, 64), (2, 4, 4, 300)]:
    bn_case(*shape)

# ---------------- relu, add, accumulate, scale ----------------
x, dy = randn(3, 5, 7, 9), randn(3, 5, 7, 9)
y, dx = np.empty_like(x), np.empty_like(x)
relu_fwd(y, x, x.size)
relu_bwd(dx, dy, y, x.size)
tx = torch.from_numpy(x).double().requires_grad_()
ty = torch.relu(tx)
ty.backward(torch.from_numpy(dy).double())
check("relu forward", y, ty)
check("relu backward", dx, tx.grad)

a, b = randn(2, 4, 4, 8), randn(2, 4, 4, 8)
y = np.empty_like(a)
add_fwd(y, a, b, a.size)
check("residual add", y, torch.from_numpy(a).double() + torch.from_numpy(b).double())
acc = a.copy()
accumulate(acc, b, a.size)
check("accumulate", acc, torch.from_numpy(a).double() + torch.from_numpy(b).double())
scale_fwd(y, a, 0.2, a.size)
check("scale 0.2", y, 0.2 * torch.from_numpy(a).double())


# ---------------- pooling ----------------
def maxpool_case(B, H, W, C):
    tag = f"maxpool2 B={B} {H}x{W} C={C}"
    x, dy = randn(B, H, W, C), randn(B, H // 2, W // 2, C)
    y, arg, dx = np.empty_like(dy), np.empty(dy.shape, np.uint8), np.empty_like(x)
    mp_fwd(y, arg, x, B, H, W, C)
    mp_bwd(dx, dy, arg, B, H, W, C)
    tx = nchw(x).requires_grad_()
    ty = F.max_pool2d(tx, 2, 2)
    ty.backward(nchw(dy))
    check(f"{tag} forward", y, nhwc(ty))
    check(f"{tag} backward", dx, nhwc(tx.grad))


for shape in [(2, 8, 8, 16), (1, 7, 5, 3), (3, 9, 9, 32)]:
    maxpool_case(*shape)


def gmp_case(B, H, W, C):
    tag = f"global maxpool B={B} {H}x{W} C={C}"
    x, dy = randn(B, H, W, C), randn(B, C)
    y, arg, dx = np.empty_like(dy), np.empty(dy.shape, np.int32), np.empty_like(x)
    gmp_fwd(y, arg, x, B, H * W, C)
    gmp_bwd(dx, dy, arg, B, H * W, C)
    tx = nchw(x).requires_grad_()
    ty = F.adaptive_max_pool2d(tx, 1).flatten(1)
    ty.backward(torch.from_numpy(dy).double())
    check(f"{tag} forward", y, ty)
    check(f"{tag} backward", dx, nhwc(tx.grad))


for shape in [(4, 4, 4, 16), (1, 3, 5, 7), (2, 1, 1, 9)]:
    gmp_case(*shape)


# ---------------- linear ----------------
def linear_case(B, fin, fout, with_bias):
    tag = f"linear B={B} {fin}->{fout} bias={with_bias}"
    x, w, dy = randn(B, fin), randn(fout, fin), randn(B, fout)
    b = randn(fout) if with_bias else None
    y, dx, dw = np.empty((B, fout), np.float32), np.empty_like(x), np.empty_like(w)
    db = np.empty(fout, np.float32) if with_bias else None
    lin_fwd(y, x, w, ptr(b), B, fin, fout)
    lin_bwd(ptr(dx), dw, ptr(db), dy, x, w, B, fin, fout)
    tx = torch.from_numpy(x).double().requires_grad_()
    tw = torch.from_numpy(w).double().requires_grad_()
    tb = torch.from_numpy(b).double().requires_grad_() if with_bias else None
    ty = F.linear(tx, tw, tb)
    ty.backward(torch.from_numpy(dy).double())
    check(f"{tag} forward", y, ty)
    check(f"{tag} dx", dx, tx.grad)
    check(f"{tag} dw", dw, tw.grad)
    if with_bias:
        check(f"{tag} db", db, tb.grad)


for shape in [(16, 256, 10), (1, 7, 3), (33, 20, 5)]:
    for with_bias in (0, 1):
        linear_case(*shape, with_bias)


# ---------------- softmax cross-entropy ----------------
def xent_case(B, K, s):
    tag = f"softmax_xent B={B} K={K} smoothing={s}"
    z = randn(B, K) * 4 + 20
    labels = rng.integers(0, K, B).astype(np.int32)
    dz, correct = np.empty_like(z), c_int(-1)
    loss = xent(ptr(dz), ctypes.byref(correct), z, labels, B, K, s)
    tz = torch.from_numpy(z).double().requires_grad_()
    tloss = F.cross_entropy(tz, torch.from_numpy(labels).long(), label_smoothing=float(np.float32(s)))
    tloss.backward()
    check(f"{tag} loss", [loss], [tloss.item()])
    check(f"{tag} dlogits", dz, tz.grad)
    ref_correct = int((tz.detach().argmax(dim=1).numpy() == labels).sum())
    check(f"{tag} correct count", [correct.value], [ref_correct])


for B, K in [(64, 10), (1, 10), (7, 3)]:
    for s in (0.1, 0.0):
        xent_case(B, K, s)


# ---------------- SGD ----------------
def sgd_case(nesterov, wd):
    tag = f"sgd momentum 0.9 nesterov={nesterov} wd={wd}"
    w0 = randn(1000)
    grads = [randn(1000) for _ in range(3)]
    lrs = [0.5, 0.25, 0.1]  # the rate changes between steps, as under a schedule
    w, v = w0.copy(), np.zeros_like(w0)
    tw = torch.nn.Parameter(torch.from_numpy(w0.copy()).double())
    opt = torch.optim.SGD([tw], lr=lrs[0], momentum=0.9, weight_decay=wd, nesterov=bool(nesterov))
    for step, (g, lr) in enumerate(zip(grads, lrs)):
        sgd(w, v, g, w.size, lr, 0.9, wd, nesterov)
        for group in opt.param_groups:
            group["lr"] = lr
        tw.grad = torch.from_numpy(g).double()
        opt.step()
        check(f"{tag} step {step + 1} weights", w, tw)
        check(f"{tag} step {step + 1} momentum", v, opt.state[tw]["momentum_buffer"])


for nesterov in (0, 1):
    for wd in (0.0, 5e-4):
        sgd_case(nesterov, wd)

print(f"{results[0]} passed, {results[1]} failed")
sys.exit(1 if results[1] else 0)
