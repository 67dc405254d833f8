"""sdgp.torch.convert_model: gradients of converted layers and of a small converted network against
PyTorch autograd with the same masks applied by hand (sdgp.prune of dL/dO, checked against a numpy
oracle in test_python_prune.py, fed to torch's conv backward), n:m = 4:4 against plain PyTorch,
layers it cannot convert, state dicts, copies, bad input, and a short training run whose loss falls.
Run: SDGP_LIBRARY=build/libsdgp.so PYTHONPATH=python python3 tests/test_python_convert.py"""
import copy
import gzip
import io
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import sdgp
import sdgp.torch as st

from python_harness import check, finish  # noqa: E402 (tests/ is the script's directory)


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


class HandPruned(torch.autograd.Function):
    """The oracle: torch's conv whose data gradient uses sdgp.prune(dL/dO) (NCHW, channels = dim 1),
    its weight gradient the dense dL/dO. `step` and `layer` replay the converted layer's key."""

    @staticmethod
    def forward(ctx, x, w, b, conv, fn, nm, key):
        ctx.save_for_backward(x, w)
        ctx.conv, ctx.fn, ctx.nm, ctx.key, ctx.has_b = conv, fn, nm, key, b is not None
        ctx.block = getattr(conv, "mask_block", 1)
        return F.conv2d(x, w, b, conv.stride, conv.padding, 1, conv.groups)

    @staticmethod
    def backward(ctx, go):
        x, w = ctx.saved_tensors
        c = ctx.conv
        gp = sdgp.prune(go.contiguous(), ctx.fn, ctx.nm, dim=1, step=ctx.key[0], layer=ctx.key[1],
                        mask_block=ctx.block, mask_line=go.shape[3])  # blocks along rows of dL/dO
        gx = torch.nn.grad.conv2d_input(x.shape, w, gp, c.stride, c.padding, groups=c.groups)
        gw = torch.nn.grad.conv2d_weight(x, w.shape, go, c.stride, c.padding, groups=c.groups)
        gb = go.sum((0, 2, 3)) if ctx.has_b else None
        return gx, gw, gb, None, None, None, None


class OracleConv(nn.Conv2d):
    def setup(self, fn, nm, layer):
        self.fn, self.nm, self.layer, self.step = fn, nm, layer, 0
        return self

    def forward(self, x):
        y = HandPruned.apply(x, self.weight, self.bias, self, self.fn, self.nm, (self.step, self.layer))
        self.step += 1
        return y


def to_oracle(model, fn, nm):
    """A copy of a plain model whose convs (all but the first) prune by hand, layer index as convert_model."""
    o = copy.deepcopy(model)
    for i, mod in enumerate([m for m in o.modules() if isinstance(m, nn.Conv2d)]):
        if i > 0:
            mod.__class__ = OracleConv
            mod.setup(fn, nm, i)
    return o


torch.manual_seed(0)
torch.set_num_threads(2)

# ---- one layer: square and rectangular kernels, strides, 1x1, bias; each kernel choice ----
geoms = [  # cin, cout, k, stride, pad, bias, H, W, groups
    (8, 16, 3, 1, 1, False, 9, 9, 1), (6, 8, (3, 5), 2, 1, True, 11, 13, 1), (16, 32, 1, 2, 0, False, 8, 8, 1),
    (5, 16, 5, 2, 2, True, 10, 7, 1), (4, 8, (1, 3), 1, 0, False, 6, 6, 1), (3, 8, 3, 3, 2, False, 7, 8, 1),
    # grouped: RegNetX's group width 16; 8 inputs and 16 outputs per group, stride 2; 4 -> 8 per group, 1x1
    (32, 32, 3, 1, 1, False, 9, 9, 2), (32, 64, 3, 2, 1, True, 10, 9, 4), (16, 32, 1, 1, 0, False, 7, 6, 4)]
for cin, cout, k, s, p, bias, H, W, groups in geoms:
    for fn, nm, kernel, block in (("magnitude", "2:4", "sparse", 1), ("rescaled", "2:4", "auto", 1),
                                  ("magnitude", "1:4", "dense", 1), ("mvue", "2:4", "sparse", 1),
                                  ("rescaled", "4:8", "sparse", 1), ("magnitude", "2:4", "sparse", 4),
                                  ("mvue", "2:4", "sparse", 3), ("random", "1:4", "dense", 2)):
        ref = nn.Sequential(nn.Identity(), nn.Conv2d(cin, cout, k, s, p, bias=bias, groups=groups))
        model = st.convert_model(copy.deepcopy(ref), prune=fn, nm=nm, first_layer=True, kernel=kernel,
                                 mask_block=block)
        oracle = to_oracle(nn.Sequential(nn.Conv2d(1, 1, 1), copy.deepcopy(ref[1])), fn, nm)[1]
        oracle.layer = 0  # convert_model numbers this conv 0 (it is the model's first)
        oracle.mask_block = block
        x = torch.randn(3, cin, H, W, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        for step in range(2):  # the second backward uses step 1 of the random key
            x.grad = x2.grad = None
            model.zero_grad()
            oracle.zero_grad()
            y, y2 = model(x), oracle(x2)
            G = torch.randn_like(y)
            y.backward(G)
            y2.backward(G)
        tag = "conv %s k=%s s=%d p=%d g=%d %s %s %s P=%d" % ((cin, cout), k, s, p, groups, fn, nm, kernel, block)
        check(torch.equal(y, y2), tag + ": forward is torch's")
        check(rel(x.grad, x2.grad) < 2e-5, tag + ": dL/dD rel. error %.2g" % rel(x.grad, x2.grad))
        check(rel(model[1].weight.grad, oracle.weight.grad) < 1e-5, tag + ": dL/dW")
        if bias:
            check(rel(model[1].bias.grad, oracle.bias.grad) < 1e-5, tag + ": dL/db")

# ---- NCHW and channels_last: the library reads dL/dO and writes dL/dD in place in both, so the data
# gradient is the same bits whatever the layouts of x and of dL/dO (mixed ones too) ----
CL, NCHW = torch.channels_last, torch.contiguous_format
for cin, cout, k, s, p, bias, H, W, groups in geoms:
    for fn, nm, kernel, block in (("rescaled", "2:4", "sparse", 1), ("mvue", "2:4", "sparse", 1),
                                  ("magnitude", "2:4", "sparse", 4), ("random", "1:4", "sparse", 2),
                                  ("rescaled", "2:4", "dense", 1), ("magnitude", "2:4", "dense", 4)):
        torch.manual_seed(7)
        plain = nn.Conv2d(cin, cout, k, s, p, bias=bias, groups=groups)
        X = torch.randn(3, cin, H, W)
        G = torch.randn_like(plain(X))
        grads = []
        for xf, gf in ((NCHW, NCHW), (CL, CL), (NCHW, CL), (CL, NCHW)):
            model = st.convert_model(nn.Sequential(copy.deepcopy(plain).to(memory_format=xf)), prune=fn, nm=nm,
                                     first_layer=True, kernel=kernel, mask_block=block)
            x = X.contiguous(memory_format=xf).clone().requires_grad_()
            model(x).backward(G.contiguous(memory_format=gf))
            grads.append(x.grad)
        tag = "layouts conv %s k=%s s=%d p=%d groups=%d %s %s %s P=%d" % ((cin, cout), k, s, p, groups, fn, nm, kernel, block)
        if kernel == "sparse":
            check(all(torch.equal(grads[0], g) for g in grads[1:]), tag + ": dL/dD bitwise equal in every layout")
        else:  # torch's dense kernel may sum in another order per layout; the pruned dL/dO is the same
            check(max(rel(g, grads[0]) for g in grads[1:]) < 1e-5, tag + ": dL/dD equal in every layout")

# ---- n:m = 4:4: exactly the plain layer's gradients (no pruning) ----
for kernel in ("sparse", "dense"):
    ref = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 8, 3))
    model = st.convert_model(copy.deepcopy(ref), prune="magnitude", nm="4:4", kernel=kernel)
    x = torch.randn(4, 3, 12, 12)
    model(x).square().sum().backward()
    ref(x).square().sum().backward()
    for (name, a), (_, b) in zip(model.named_parameters(), ref.named_parameters()):
        check(rel(a.grad, b.grad) < 1e-5, "4:4 %s: %s equals plain torch (rel. %.2g)" % (kernel, name, rel(a.grad, b.grad)))


# ---- a small network, BatchNorm, residual, NCHW and channels_last ----
class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


def small_net(cin=1):
    return nn.Sequential(nn.Conv2d(cin, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), Block(32),
                         nn.Conv2d(32, 32, 1, 1, 0, bias=True), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def worst_after_steps(model, oracle, x, y, steps=2):
    """Two training steps' gradients of model and oracle on (x, y); the worst parameter's (rel error, name)."""
    for _ in range(steps):
        model.zero_grad()
        oracle.zero_grad()
        F.cross_entropy(model(x), y).backward()
        F.cross_entropy(oracle(x), y).backward()
    return max((rel(a.grad, b.grad), n) for (n, a), (_, b) in zip(model.named_parameters(), oracle.named_parameters()))


for fn, nm in (("magnitude", "2:4"), ("rescaled", "2:4"), ("random", "1:4")):
    for fmt in (torch.contiguous_format, torch.channels_last):
        torch.manual_seed(1)
        ref = small_net().to(memory_format=fmt)
        model = st.convert_model(copy.deepcopy(ref), prune=fn, nm=nm)
        oracle = to_oracle(ref, fn, nm)
        x = torch.randn(4, 1, 12, 12).contiguous(memory_format=fmt)
        tag = "net %s %s %s" % (fn, nm, "channels_last" if fmt == torch.channels_last else "NCHW")
        worst = worst_after_steps(model, oracle, x, torch.randint(0, 10, (4,)))
        check(worst[0] < 1e-4, tag + ": every parameter gradient as the oracle's (worst %.2g: %s)" % worst)
        rep = st.layer_report(model)
        check([r["converted"] for r in rep] == [False, True, True, True, True], tag + ": all but the first converted")
        check(all(r["kernel"] in ("sparse", "dense") and r["steps"] == 2 for r in rep[1:]),
              tag + ": auto chose a kernel per layer, 2 steps each")

# a grouped network (RegNetX's 1x1 -> grouped 3x3 of width 16 -> 1x1) in both layouts: channels_last
# grouped weights are OHWI with Cin/groups inputs, packed in place
for fmt in (torch.contiguous_format, torch.channels_last):
    torch.manual_seed(2)
    ref = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.ReLU(), nn.Conv2d(32, 32, 3, 2, 1, groups=2, bias=False),
                        nn.ReLU(), nn.Conv2d(32, 64, 1), nn.ReLU(), nn.Conv2d(64, 64, 3, 1, 1, groups=4),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).to(memory_format=fmt)
    model = st.convert_model(copy.deepcopy(ref), prune="magnitude", nm="2:4", kernel="sparse", strict=True)
    oracle = to_oracle(ref, "magnitude", "2:4")
    x = torch.randn(3, 3, 11, 10).contiguous(memory_format=fmt)
    tag = "grouped net %s" % ("channels_last" if fmt == torch.channels_last else "NCHW")
    worst = worst_after_steps(model, oracle, x, torch.randint(0, 10, (3,)))
    check(worst[0] < 1e-4, tag + ": every parameter gradient as the oracle's (worst %.2g: %s)" % worst)
    check([r["converted"] for r in st.layer_report(model)] == [False, True, True, True], tag + ": grouped layers converted")

# wgrad: dL/dW (and dL/db) by libsdgp's dense kernels, forced or chosen per layer, in both layouts and
# with grouped and biased layers: the gradients stay the oracle's; the report names each layer's choice
for fmt in (torch.contiguous_format, torch.channels_last):
    for wgrad in ("sdgp", "auto"):
        torch.manual_seed(3)
        ref = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1, groups=2), nn.ReLU(),
                            nn.Conv2d(32, 32, 1, bias=False), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                            nn.Linear(32, 10)).to(memory_format=fmt)
        model = st.convert_model(copy.deepcopy(ref), prune="magnitude", nm="2:4", wgrad=wgrad, strict=True)
        oracle = to_oracle(ref, "magnitude", "2:4")
        x = torch.randn(3, 3, 10, 10).contiguous(memory_format=fmt)
        tag = "wgrad=%s %s" % (wgrad, "channels_last" if fmt == torch.channels_last else "NCHW")
        worst = worst_after_steps(model, oracle, x, torch.randint(0, 10, (3,)))
        check(worst[0] < 1e-4, tag + ": every parameter gradient as the oracle's (worst %.2g: %s)" % worst)
        rep = [r for r in st.layer_report(model) if r["converted"]]
        check(all(r["wgrad"] in ("torch", "sdgp") for r in rep) and (wgrad == "auto") == all(
            r["wgrad_times_ms"] is not None for r in rep), tag + ": each layer's choice and its measurement reported")
        check(wgrad == "auto" or all(r["wgrad"] == "sdgp" for r in rep), tag + ": sdgp forced on every layer")

# kernel="plain": the layer without SDGP, bitwise plain torch (one torch call for dL/dD, dL/dW, dL/db);
# "fastest": each layer keeps the fastest of sparse, dense and plain, and says whether it prunes
for fmt in (torch.contiguous_format, torch.channels_last):
    torch.manual_seed(4)
    ref = small_net().to(memory_format=fmt)
    x = torch.randn(4, 1, 12, 12).contiguous(memory_format=fmt)
    y = torch.randint(0, 10, (4,))
    model = st.convert_model(copy.deepcopy(ref), prune="magnitude", nm="2:4", kernel="plain")
    F.cross_entropy(model(x), y).backward()
    F.cross_entropy(ref(x), y).backward()
    check(all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), ref.parameters())),
          "kernel=plain equals plain torch bitwise")
    check(all(not r["pruned"] for r in st.layer_report(model) if r["converted"]), "kernel=plain: no layer pruned")
    model = st.convert_model(copy.deepcopy(ref), prune="magnitude", nm="2:4", kernel="fastest")
    for _ in range(2):
        F.cross_entropy(model(x), y).backward()
    rep = [r for r in st.layer_report(model) if r["converted"]]
    check(all(r["kernel"] in ("sparse", "dense", "plain") and r["pruned"] == (r["kernel"] != "plain") and
              set(r["times_ms"]) == {"sparse", "dense", "plain"} and r["steps"] == 2 for r in rep),
          "kernel=fastest: each layer chose among the three, timed all three: %s" % [r["kernel"] for r in rep])

# the pruning is real: 2:4 gradients differ from plain torch's
ref = small_net()
model = st.convert_model(copy.deepcopy(ref), prune="magnitude", nm="2:4")
x = torch.randn(4, 1, 12, 12)
model(x).sum().backward()
ref(x).sum().backward()
check(rel(model[0].weight.grad, ref[0].weight.grad) > 1e-3, "2:4 changes the gradients of earlier layers")

# ---- layers it cannot convert: a warning naming them, strict=True an error ----
odd = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Conv2d(8, 8, 3, groups=4), nn.Conv2d(8, 8, 3, dilation=2),
                    nn.Conv2d(8, 6, 3), nn.Conv2d(6, 8, 3, padding=1, padding_mode="reflect"),
                    nn.Conv2d(8, 8, 3, stride=(1, 2)), nn.Conv2d(8, 8, (3, 5), padding=(1, 2)),
                    nn.Conv2d(8, 8, 3, padding="same"), nn.Conv2d(8, 8, 2, padding="same"))
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    st.convert_model(copy.deepcopy(odd), nm="2:4")
msgs = [str(x.message) for x in w if issubclass(x.category, st.SdgpConversionWarning)]
check(len(msgs) == 1, "one warning for the unconvertible layers")
for part in ("1: groups=4 split out_channels=8 into 2 per group, not a multiple of m=4", "2: dilation",
             "3: out_channels=6", "4: padding_mode='reflect'", "5: stride (1, 2)",
             "6: padding (1, 2)", "8: padding='same' with a 2x2"):
    check(bool(msgs) and part in msgs[0], "the warning names %r: %s" % (part, msgs[0] if msgs else None))
conv_odd = copy.deepcopy(odd)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    st.convert_model(conv_odd, nm="2:4")
check([isinstance(m, st.SdgpConv2d) for m in conv_odd] == [False] * 7 + [True, False], "only the eligible converted")
try:
    st.convert_model(copy.deepcopy(odd), nm="2:4", strict=True)
    check(False, "strict=True raises")
except ValueError as e:
    check("groups=4" in str(e), "strict=True: a ValueError naming the layers")
x = torch.randn(2, 3, 16, 16, requires_grad=True)
conv_odd(x).sum().backward()  # the 'same' 3x3 layer runs SDGP, the others stay torch
check(x.grad is not None and torch.isfinite(x.grad).all(), "a partly converted model trains")

# ---- bad arguments and input: clear exceptions, never a crash ----
def raises(exc, fn, what, contains=None):
    try:
        fn()
    except exc as e:
        check(contains is None or contains in str(e), "%s: %r lacks %r" % (what, str(e), contains))
        return
    except Exception as e:  # noqa: BLE001
        check(False, "%s: raised %s(%s), expected %s" % (what, type(e).__name__, e, exc.__name__))
        return
    check(False, "%s: no exception" % what)


raises(ValueError, lambda: st.convert_model(small_net(), nm="2:5", strict=True), "strict, nm 2:5: 32 channels",
       "out_channels=32 is not a multiple of m=5")
raises(ValueError, lambda: st.convert_model(small_net(), nm="2/4"), "nm '2/4'", "2/4")
raises(ValueError, lambda: st.convert_model(small_net(), prune="magic"), "prune='magic'", "magic")
raises(ValueError, lambda: st.convert_model(small_net(), wgrad="fast"), "wgrad='fast'", "fast")
raises(ValueError, lambda: st.convert_model(small_net(), kernel="fast"), "kernel='fast'", "kernel")
raises(ValueError, lambda: st.convert_model(small_net(), mask_block=0), "mask_block=0", "mask_block")
raises(ValueError, lambda: st.convert_model(small_net(), mask_block=65), "mask_block=65", "mask_block")
raises(ValueError, lambda: st.convert_model(small_net(), prune="mvue-approx", mask_block=4), "mvue-approx with blocks",
       "mvue-approx")
raises(TypeError, lambda: st.convert_model("resnet"), "not a module", "nn.Module")
done = st.convert_model(small_net())
raises(ValueError, lambda: st.convert_model(done), "converting twice", "converted already")
one = st.convert_model(nn.Sequential(nn.Conv2d(4, 8, 3)), first_layer=True)
raises(TypeError, lambda: one(torch.randn(2, 4, 8, 8, dtype=torch.float64, requires_grad=True)), "float64 input",
       "torch.float64")
xh = torch.randn(2, 4, 8, 8).half().requires_grad_()
raises(TypeError, lambda: one.half()(xh), "half layer and input (as from a CUDA/AMP model)", "torch.float16")
with torch.no_grad():
    check(done.eval()(torch.randn(2, 1, 8, 8)).shape == (2, 10), "no_grad forward runs plain torch")

# ---- state dicts, copies, restore ----
torch.manual_seed(3)
plain = small_net()
conv = st.convert_model(copy.deepcopy(plain))
check(list(conv.state_dict()) == list(plain.state_dict()), "state dict: the plain model's names")
buf = io.BytesIO()
torch.save(conv.state_dict(), buf)
buf.seek(0)
fresh = small_net()
fresh.load_state_dict(torch.load(buf))  # strict: same keys, same shapes
check(all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), plain.state_dict().values())),
      "a converted model's state dict loads into plain PyTorch")
conv2 = st.convert_model(small_net())
conv2.load_state_dict(plain.state_dict())
x = torch.randn(3, 1, 10, 10)
conv2.eval()
plain.eval()
check(torch.equal(conv2(x), plain(x)), "a plain state dict loads into a converted model")
conv.train()
conv(torch.randn(2, 1, 8, 8, requires_grad=True)).sum().backward()  # plans exist now
dup = copy.deepcopy(conv)
check(all(not m._sdgp.plans for m in dup.modules() if isinstance(m, st.SdgpConv2d)), "deepcopy shares no C plan")
dup(torch.randn(2, 1, 8, 8, requires_grad=True)).sum().backward()
buf = io.BytesIO()
torch.save(conv, buf)  # the whole module, pickled
buf.seek(0)
loaded = torch.load(buf)
loaded(torch.randn(2, 1, 8, 8, requires_grad=True)).sum().backward()
check(isinstance(loaded[3], st.SdgpConv2d), "a pickled converted model loads and trains")
st.restore_model(conv)
check(not any(isinstance(m, st.SdgpConv2d) for m in conv.modules()) and type(conv[3]) is nn.Conv2d,
      "restore_model gives plain nn.Conv2d back")
opt_params = list(plain.parameters())
st.convert_model(plain)
check([id(p) for p in plain.parameters()] == [id(p) for p in opt_params], "conversion keeps the Parameter objects")


# ---- a short training run on Fashion-MNIST (synthetic data if absent): the loss falls ----
def fashion_mnist(n):
    d = "/usr/share/datasets/fashion-mnist"
    try:
        with gzip.open(os.path.join(d, "train-images-idx3-ubyte.gz")) as f:
            img = np.frombuffer(f.read(), np.uint8, offset=16)[: n * 784].reshape(n, 1, 28, 28)
        with gzip.open(os.path.join(d, "train-labels-idx1-ubyte.gz")) as f:
            lab = np.frombuffer(f.read(), np.uint8, offset=8)[:n]
        return torch.from_numpy(img.astype(np.float32) / 255.0 - 0.29), torch.from_numpy(lab.astype(np.int64)), "fmnist"
    except OSError:
        g = torch.Generator().manual_seed(0)
        lab = torch.randint(0, 10, (n,), generator=g)
        img = torch.randn(n, 1, 28, 28, generator=g) * 0.5
        img[torch.arange(n), 0, lab * 2, :] += 2.0  # a learnable pattern: a bright row per class
        return img, lab, "synthetic"


torch.manual_seed(0)
imgs, labs, source = fashion_mnist(2048)
model = st.convert_model(small_net(), prune="rescaled", nm="2:4")
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
losses = []
for step in range(48):
    i = (step * 64) % 2048
    loss = F.cross_entropy(model(imgs[i:i + 64]), labs[i:i + 64])
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
first, last = sum(losses[:6]) / 6, sum(losses[-6:]) / 6
check(all(np.isfinite(losses)) and last < 0.6 * first, "training (%s): loss %.3f -> %.3f" % (source, first, last))
print("training (%s, rescaled 2:4): loss %.3f -> %.3f over 48 steps" % (source, first, last))

finish()
