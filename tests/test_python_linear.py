"""sdgp.torch on nn.Linear (SdgpLinear: SDGP's data gradient as a 1x1 convolution over the tokens) against
a hand-made PyTorch reference applying the same masks (sdgp.prune of dL/dY, then the dense product):
inputs (tokens, in) and (batch, seq, in), bias or not, 2:4 and 1:4, both kernels and "auto"; the
conversion rules (SDGP(modules=...), the classifier, channels m does not divide, MultiheadAttention's
out_proj, MVUE / sparse weights on a Linear), an nn.TransformerEncoderLayer training step, bf16
autocast, the rank-mixed seed, restore_model / state dicts / pickling, bad input.
Run: SDGP_LIBRARY=build/libsdgp.so PYTHONPATH=python python3 tests/test_python_linear.py, or pytest."""
import copy
import io
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import sdgp
import sdgp.torch as st

from python_harness import raises, run_tests
from test_python_sparsify import project_ref

torch.set_num_threads(2)
LIN = ("linear",)


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


# ---- the reference ----
class HandLinear(nn.Linear):
    """The oracle layer: forward F.linear; dL/dX = sdgp.prune(dL/dY) x W (the same key: seed, step,
    layer), dL/dW and dL/db of the unpruned dL/dY."""

    def setup(self, layer, cfg, seed_of=None, wcfg=None):
        self.layer, self.cfg, self.step, self.seed_of, self.wcfg = layer, cfg, 0, seed_of or (lambda s: s), wcfg
        return self

    def forward(self, x):
        w = self.weight
        sw = getattr(self, "sw", None)
        if sw is not None:  # W~ by hand, straight-through to W
            n, m = sw.n_m
            wt = project_ref(w[:, :, None, None], sw.method, n, m, sw.groups, self.beta)[0].reshape(w.shape)
            w = w + (wt - w).detach()
        y = _Hand.apply(x, w, self.bias, self, self.step)
        if x.requires_grad:
            self.step += 1
        return y


class _Hand(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, lin, step):
        ctx.save_for_backward(x, w)
        ctx.lin, ctx.step, ctx.has_b = lin, step, b is not None
        return F.linear(x, w, b)

    @staticmethod
    def backward(ctx, go):
        x, w = ctx.saved_tensors
        c, wc = ctx.lin.cfg, ctx.lin.wcfg
        g = go.reshape(-1, w.shape[0]).contiguous()
        # samples: sequences of x.shape[-2] tokens (x of 3+ dimensions), else rows
        seq = x.shape[-2] if x.dim() >= 3 else 1
        gd = g if c is None else sdgp.prune(g.reshape(-1, seq, w.shape[0]), c.prune, c.nm, dim=-1, seed=ctx.lin.seed_of(c.seed),
                                            step=ctx.step, layer=ctx.lin.layer, mask_block=c.mask_block,
                                            mask_line=seq).reshape(g.shape)
        gx = (gd @ w).reshape(x.shape)
        # MVUE: dL/dY pruned along the tokens (the row axis), its key's seed that of MVUEWeightGrad ^ "wgra"
        gr = g if wc is None else sdgp.prune(g, wc.prune, wc.nm, axis="row", seed=wc.seed ^ 0x77677261, step=ctx.step,
                                             layer=ctx.lin.layer)
        gw = gr.t() @ x.reshape(-1, w.shape[1])
        return gx, gw, (g.sum(0) if ctx.has_b else None), None, None


def mlp(bias=True, cin=24):
    return nn.Sequential(nn.Linear(cin, 32, bias=bias), nn.GELU(), nn.Linear(32, 16, bias=bias), nn.Tanh(),
                         nn.Linear(16, 8, bias=bias))


def hand(plain, cfg, names, seed_of=None, wcfg=None):
    """A copy of plain whose named linears run HandLinear, layer index = position among all its linears."""
    o = copy.deepcopy(plain)
    mods = dict(o.named_modules())
    lins = [n for n, m in o.named_modules() if isinstance(m, nn.Linear)]
    for n in names:
        mods[n].__class__ = HandLinear
        mods[n].setup(lins.index(n), cfg, seed_of, wcfg)
    return o


def grads(model, x, steps=2):
    """The gradients (parameters and x) of `steps` steps of a fixed loss."""
    out = []
    for _ in range(steps):
        model.zero_grad()
        xx = x.clone().requires_grad_()
        y = model(xx)
        (y * torch.linspace(-1, 1, y.shape[-1])).pow(2).sum().backward()
        g = {n: p.grad.clone() for n, p in model.named_parameters()}
        g["x"] = xx.grad.clone()
        out.append((y.detach(), g))
    return out


def compare(plain, cfg, x, names, tol=2e-5):
    model = copy.deepcopy(plain)
    rep = st.sparsify_(model, cfg, strict=True)
    assert rep.converted == names, (rep.converted, names)
    a, b = grads(model, x), grads(hand(plain, cfg, names), x)
    worst = 0.0
    for (ya, ga), (yb, gb) in zip(a, b):
        assert torch.equal(ya, yb), "the forward is torch's F.linear, bitwise"
        for k in ga:
            worst = max(worst, rel(ga[k], gb[k]))
    assert worst < tol, "%s: rel %.2g" % (cfg, worst)
    return model, a, b


# ---- against the reference ----
def test_matches_hand_reference():
    for shape in ((37, 24), (3, 11, 24)):
        for bias in (True, False):
            for prune, nm, mb in (("magnitude", "2:4", 1), ("random", "1:4", 1), ("rescaled", "2:4", 1), ("mvue", "1:4", 1),
                                  ("rescaled", "2:4", 4), ("mvue", "2:4", 2)):
                for kernel in ("sparse", "dense"):
                    torch.manual_seed(len(shape) * 7 + bias)
                    plain = mlp(bias)
                    x = torch.randn(shape)
                    cfg = st.SDGP(prune=prune, nm=nm, kernel=kernel, seed=9, modules=LIN, classifier=True, mask_block=mb)
                    model, a, b = compare(plain, cfg, x, ["0", "2", "4"] if nm == "2:4" else ["0", "2", "4"])
                    assert [r["kernel"] for r in st.layer_report(model)] == [kernel] * 3
                    if kernel == "dense":  # the same torch products: bitwise
                        assert all(torch.equal(a[-1][1][k], b[-1][1][k]) for k in a[-1][1]), (prune, nm, shape)
    # the pruning is real: dL/dX differs from plain torch's
    torch.manual_seed(1)
    plain = mlp()
    model = copy.deepcopy(plain)
    st.sparsify_(model, st.SDGP(modules=LIN, classifier=True))
    x = torch.randn(16, 24)
    ga, gp = grads(model, x, 1)[0][1], grads(plain, x, 1)[0][1]
    assert rel(ga["x"], gp["x"]) > 1e-3
    assert rel(ga["4.weight"], gp["4.weight"]) < 1e-6  # the last layer's dL/dW: the exact dL/dY's


def test_mvue_weight_grad_matches_hand_reference():
    """MVUEWeightGrad on linear layers, with SDGP and alone (a dict), both kernels, 2-d and 3-d inputs."""
    for shape in ((40, 24), (4, 10, 24)):
        for kernel in ("sparse", "dense"):
            for with_sdgp in (True, False):
                torch.manual_seed(3)
                plain = mlp(True)
                x = torch.randn(shape)
                wc = st.MVUEWeightGrad(nm="2:4", kernel=kernel, seed=5)
                sd = st.SDGP(prune="rescaled", nm="2:4", kernel="sparse", seed=9, modules=LIN, classifier=True)
                cfg = [sd, wc] if with_sdgp else {n: wc for n in ("0", "2", "4")}
                model = copy.deepcopy(plain)
                rep = st.sparsify_(model, cfg, strict=True)
                assert rep.converted == ["0", "2", "4"], rep.converted
                a, b = grads(model, x), grads(hand(plain, sd if with_sdgp else None, ["0", "2", "4"], wcfg=wc), x)
                worst = max(rel(ga[k], gb[k]) for (_, ga), (_, gb) in zip(a, b) for k in ga)
                assert worst < 2e-5, (shape, kernel, with_sdgp, worst)
                rows = [r for r in st.layer_report(model) if r["type"] == "Linear"]
                want = ["sdgp", "mvue_wgrad"] if with_sdgp else ["mvue_wgrad"]
                assert all(r["methods"] == want and r["wgrad_kernel"] == kernel for r in rows), rows
                # the pruning is real: dL/dW differs from the exact one
                ge = grads(plain, x, 1)[0][1]
                assert rel(a[0][1]["0.weight"], ge["0.weight"]) > 1e-3
    # an input without gradient still gets MVUE's dL/dW (the first layer of a model)
    torch.manual_seed(4)
    plain = mlp(True)
    model = copy.deepcopy(plain)
    st.sparsify_(model, {"0": st.MVUEWeightGrad(nm="2:4", kernel="dense", seed=5)})
    x = torch.randn(40, 24)
    model(x).pow(2).sum().backward()
    ref = hand(plain, None, ["0"], wcfg=st.MVUEWeightGrad(nm="2:4", kernel="dense", seed=5))
    ref(x).pow(2).sum().backward()
    assert rel(model[0].weight.grad, ref[0].weight.grad) < 2e-5


def test_sparse_weights_match_hand_reference():
    """SparseWeights (S-STE) on linear layers, with SDGP and alone (a dict), masks along in_features and
    along out_features ("cout"), 2-d and 3-d inputs: W~ in the forward, dL/dX of W~, W's gradient W~'s."""
    for shape in ((40, 24), (4, 10, 24)):
        for groups in ("tap", "cout"):
            for with_sdgp in (True, False):
                torch.manual_seed(6)
                plain = mlp(True)
                x = torch.randn(shape)
                sw = st.SparseWeights(method="sste", nm="2:4", groups=groups)
                sd = st.SDGP(prune="magnitude", nm="2:4", kernel="sparse", seed=9, modules=LIN, classifier=True)
                names = ["0", "2", "4"]
                model = copy.deepcopy(plain)
                rep = st.sparsify_(model, [sd, sw] if with_sdgp else {k: sw for k in names}, strict=True)
                assert rep.converted == names, rep.converted
                ref = hand(plain, sd if with_sdgp else None, names)
                for k in names:
                    ref[int(k)].sw, ref[int(k)].beta = sw, model[int(k)]._sdgp.sw_beta
                a, b = grads(model, x), grads(ref, x)
                worst = max(max(rel(ga[k], gb[k]) for k in ga) for (_, ga), (_, gb) in zip(a, b))
                worst = max(worst, max(rel(ya, yb) for (ya, _), (yb, _) in zip(a, b)))
                assert worst < 2e-5, (shape, groups, with_sdgp, worst)
                rows = [r for r in st.layer_report(model) if r["type"] == "Linear"]
                assert all("sparse_weights" in r["methods"] and r["weights_groups"] == groups for r in rows), rows
                assert "weights=sste 2:4 %s" % groups in repr(model[0])
    # the projection is real: the forward differs from the plain layer's
    assert rel(a[0][0], grads(plain, x, 1)[0][0]) > 1e-3


def test_sparse_weights_forward_kernels():
    """SparseWeights on linear layers with a forward kernel (block32, cout; kernel "on"): libsdgp's
    sparse-weight product on the tokens, against the hand reference's F.linear on W~ (rounding only), with
    and without gradients, 2-d and 3-d inputs and a token count with no divisor near 256."""
    torch.manual_seed(7)
    plain = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64), nn.Tanh(), nn.Linear(64, 8))
    names = ["0", "2"]
    for groups, kernel in (("block32", "direct"), ("cout", "cout")):
        for shape in ((3, 20, 64), (37, 64)):
            sw = st.SparseWeights(method="sste", nm="2:4", groups=groups, kernel="on")
            model = copy.deepcopy(plain)
            assert st.sparsify_(model, {k: sw for k in names}, strict=True).converted == names
            ref = hand(plain, None, names)
            for k in names:
                ref[int(k)].sw, ref[int(k)].beta = sw, model[int(k)]._sdgp.sw_beta
            x = torch.randn(shape)
            a, b = grads(model, x), grads(ref, x)
            worst = max(max(rel(ga[k], gb[k]) for k in ga) for (_, ga), (_, gb) in zip(a, b))
            worst = max(worst, max(rel(ya, yb) for (ya, _), (yb, _) in zip(a, b)))
            assert worst < 2e-5, (groups, shape, worst)
            rows = {r["name"]: r for r in st.layer_report(model)}
            assert all(rows[k]["fwd_kernel"] == kernel for k in names), rows
            with torch.no_grad():  # inference runs the same kernel
                assert rel(model(x), ref(x)) < 2e-5
    # "auto" times the kernel against torch's F.linear and keeps one; the result is right either way
    model = copy.deepcopy(plain)
    st.sparsify_(model, {k: st.SparseWeights(nm="2:4", groups="block32") for k in names})
    grads(model, torch.randn(4, 16, 64), 1)
    for r in st.layer_report(model)[:2]:
        assert r["fwd_kernel"] in ("direct", "dense") and set(r["fwd_times_ms"]) == {"dense", "direct"}, r


def test_auto_kernel_and_report():
    torch.manual_seed(2)
    plain = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 10))
    cfg = st.SDGP(prune="magnitude", modules=("conv", "linear"))
    model = copy.deepcopy(plain)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the classifier is a reason, not a warning
        rep = st.sparsify_(model, cfg)
    assert rep.converted == ["0", "2"], rep.converted
    assert "classifier" in rep["4"].skipped["all"] and "conv and linear" in str(rep)
    x = torch.randn(2, 40, 64)
    a, b = grads(model, x), grads(hand(plain, cfg, ["0", "2"]), x)
    assert max(rel(a[1][1][k], b[1][1][k]) for k in a[1][1]) < 2e-5
    rows = st.layer_report(model)
    assert [r["name"] for r in rows] == ["0", "2", "4"] and [r["converted"] for r in rows] == [True, True, False]
    for r in rows[:2]:
        assert r["kernel"] in ("sparse", "dense") and set(r["times_ms"]) == {"sparse", "dense"}, r
        assert r["steps"] == 2 and r["type"] == "Linear"
    assert "classifier" in rows[2]["reason"]
    assert "SdgpLinear" in repr(model) and "kernel=" in repr(model[0])
    # kernel="fastest" may keep the unpruned product ("plain"); either way the gradients are right
    model = copy.deepcopy(plain)
    st.sparsify_(model, st.SDGP(prune="magnitude", modules=LIN, kernel="fastest"))
    grads(model, x, 1)
    assert all(set(r["times_ms"]) == {"sparse", "dense", "plain"} for r in st.layer_report(model) if r["converted"])


def test_conversion_rules():
    torch.manual_seed(3)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1), nn.Flatten(),
                        nn.Linear(16 * 16, 30), nn.ReLU(), nn.Linear(30, 12), nn.Linear(12, 10))
    # the default: convs only, the report does not list linear layers
    rep = st.sparsify_(copy.deepcopy(net), st.SDGP())
    assert rep.converted == ["1"] and [r.name for r in rep.layers] == ["0", "1"]
    assert "conv layers" in str(rep) and "linear" not in str(rep)
    # convs and linears: 30 channels stay plain (warned, reported), the classifier is a reason
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        m = copy.deepcopy(net)
        rep = st.sparsify_(m, st.SDGP(modules=("conv", "linear")))
    assert rep.converted == ["1", "5"], rep.converted
    assert "out_features=30 is not a multiple of m=4" in rep["3"].skipped["sdgp"]
    assert any(issubclass(x.category, st.SdgpConversionWarning) and "out_features=30" in str(x.message) for x in w)
    assert [r.index for r in rep.layers] == [0, 1, 2, 3, 4] and m[5]._sdgp.layer == 3
    assert isinstance(m[1], st.SdgpConv2d) and isinstance(m[5], st.SdgpLinear) and type(m[6]) is nn.Linear
    # linear only; MVUE and sparse weights in a list apply to the linears the SDGP config takes
    m = copy.deepcopy(net)
    rep = st.sparsify_(m, [st.SDGP(modules=LIN, nm="1:2", classifier=True), st.MVUEWeightGrad()])
    assert rep.converted == ["1", "3", "5", "6"], rep.converted
    assert rep["1"].methods.keys() == {"mvue_wgrad"} and "modules" in rep["1"].skipped["sdgp"]
    assert rep["3"].methods.keys() == {"sdgp", "mvue_wgrad"}, rep["3"].methods
    rep = st.sparsify_(copy.deepcopy(net), [st.SDGP(modules=LIN, nm="1:2"), st.SparseWeights()])
    assert rep["3"].methods.keys() == {"sdgp", "sparse_weights"} and "in_features=30" in rep["5"].skipped["sparse_weights"]
    x = torch.randn(2, 3, 4, 4)
    m(x).sum().backward()
    # filter_fn selects among them
    rep = st.sparsify_(copy.deepcopy(net), st.SDGP(modules=LIN, nm="1:2"), filter_fn=lambda mod, name: name != "5")
    assert rep.converted == ["3"] and rep["5"].skipped == {"all": "filter_fn"}
    # a dict: named linears convert (the classifier too) when the SDGP config takes linear layers
    m = copy.deepcopy(net)
    rep = st.sparsify_(m, {"6": st.SDGP(modules=LIN, nm="1:2"), "1": st.SDGP()})
    assert rep.converted == ["1", "6"] and rep["6"].index == 4
    raises(TypeError, lambda: st.sparsify_(copy.deepcopy(net), {"5": st.SDGP()}), "modules")
    raises(ValueError, lambda: st.sparsify_(copy.deepcopy(net), {"3": st.SDGP(modules=LIN)}), "out_features=30")
    raises(ValueError, lambda: st.sparsify_(copy.deepcopy(net), {"5": st.SparseWeights()}), "in_features=30")
    raises(ValueError, lambda: st.sparsify_(copy.deepcopy(net), st.SDGP(modules=LIN), strict=True), "out_features=30")
    # mask_block: linear layers share masks along their sequences (test_matches_hand_reference)
    rep = st.sparsify_(copy.deepcopy(net), st.SDGP(modules=("conv", "linear"), mask_block=2))
    assert rep.converted == ["1", "5"], rep.converted


def test_transformer_encoder_layer():
    torch.manual_seed(4)
    plain = nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, batch_first=True)
    model = copy.deepcopy(plain)
    cfg = st.SDGP(prune="magnitude", modules=LIN, classifier=True)  # linear2 is this model's last nn.Linear
    rep = st.sparsify_(model, cfg)
    print(rep)
    assert rep.converted == ["linear1", "linear2"], rep.converted
    assert "never calls its forward" in rep["self_attn.out_proj"].skipped["all"]
    assert type(model.self_attn.out_proj) is nn.modules.linear.NonDynamicallyQuantizableLinear
    # without classifier=True, linear2 is taken for the classifier
    rep2 = st.sparsify_(copy.deepcopy(plain), st.SDGP(modules=LIN))
    assert rep2.converted == ["linear1"] and "classifier" in rep2["linear2"].skipped["all"]
    # a step against the reference (the out_proj index 0 keeps the keys of linear1 / linear2 at 1, 2)
    x = torch.randn(3, 10, 64)
    a, b = grads(model, x), grads(hand(plain, cfg, ["linear1", "linear2"]), x)
    assert max(rel(a[1][1][k], b[1][1][k]) for k in a[1][1]) < 5e-5
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    w0 = model.linear1.weight.detach().clone()
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters()) and not torch.equal(w0, model.linear1.weight)
    # the dense fast path of inference (no grad) still runs on the converted layer's parameters
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(x), st.restore_model(copy.deepcopy(model))(x))


def test_autocast_bf16():
    torch.manual_seed(5)
    lin = nn.Linear(24, 32)
    model = nn.Sequential(copy.deepcopy(lin))
    st.sparsify_(model, {"0": st.SDGP(prune="magnitude", kernel="sparse", modules=LIN)})
    x = torch.randn(2, 7, 24, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = model(x)
    assert y.dtype == torch.bfloat16
    G = torch.randn(y.shape).to(torch.bfloat16)
    y.backward(G)
    xb, wb = x.detach().to(torch.bfloat16), lin.weight.detach().to(torch.bfloat16)
    assert torch.equal(y, F.linear(xb, wb, lin.bias.detach().to(torch.bfloat16))), "torch's bf16 forward"
    g = G.float().reshape(-1, 32)
    gx = (sdgp.prune(g, "magnitude", "2:4", layer=0) @ wb.float()).reshape(x.shape)
    gw = g.t() @ xb.float().reshape(-1, 24)
    assert x.grad.dtype == torch.float32 and model[0].weight.grad.dtype == torch.float32
    assert rel(x.grad, gx) < 1e-5 and rel(model[0].weight.grad, gw) < 1e-5 and rel(model[0].bias.grad, g.sum(0)) < 1e-6
    # a bf16 input gets a bf16 gradient
    xl = x.detach().bfloat16().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(xl).float().sum().backward()
    assert xl.grad.dtype == torch.bfloat16


def test_rank_mixed_seed():
    torch.manual_seed(6)
    plain = mlp()
    cfg = st.SDGP(prune="random", seed=11, modules=LIN, kernel="sparse")
    saved = st._rank_world
    st._rank_world = lambda: (3, 1)  # rank 3 (world 1: no collective for the kernel choice)
    try:
        model = copy.deepcopy(plain)
        st.sparsify_(model, cfg)
        x = torch.randn(20, 24)
        a = grads(model, x)
    finally:
        st._rank_world = saved
    b = grads(hand(plain, cfg, ["0", "2"], seed_of=lambda s: st.rank_seed(s, 3)), x)
    c = grads(hand(plain, cfg, ["0", "2"]), x)
    assert max(rel(a[1][1][k], b[1][1][k]) for k in a[1][1]) < 2e-5
    assert rel(a[1][1]["x"], c[1][1]["x"]) > 1e-3, "rank 3 draws other masks than rank 0"


def test_restore_and_state_dicts():
    torch.manual_seed(7)
    plain = nn.Sequential(mlp(), nn.modules.linear.NonDynamicallyQuantizableLinear(8, 8))
    model = copy.deepcopy(plain)
    rep = st.sparsify_(model, {"0.0": st.SDGP(modules=LIN), "0.2": st.SDGP(modules=LIN), "1": st.SDGP(modules=LIN)})
    assert rep.converted == ["0.0", "0.2", "1"]
    assert list(model.state_dict()) == list(plain.state_dict())
    x = torch.randn(5, 24)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        model(x.requires_grad_()).pow(2).sum().backward()
        opt.step()
    # the state dict loads into the plain model and back
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    fresh = copy.deepcopy(plain)
    fresh.load_state_dict(torch.load(buf))
    with torch.no_grad():
        assert torch.equal(fresh(x), model(x))
    model.load_state_dict(plain.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), plain.state_dict().values()))
    # pickling the converted model keeps the conversion (the plans are rebuilt)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    m2 = torch.load(buf)
    assert isinstance(m2[0][0], st.SdgpLinear) and m2[0][0]._sdgp.step == 2
    m2(x.requires_grad_()).sum().backward()
    # restore_model: the plain classes again, NonDynamicallyQuantizableLinear included
    st.restore_model(model)
    assert [type(m) for m in model.modules() if isinstance(m, nn.Linear)] == \
        [nn.Linear] * 3 + [nn.modules.linear.NonDynamicallyQuantizableLinear]
    assert st.layer_report(model) == []
    with torch.no_grad():
        assert torch.equal(model(x), plain(x))
    assert not any(isinstance(m, st.SdgpLinear) for m in st.export_model(m2).modules())


# ---- bad input ----
def test_bad_input():
    raises(ValueError, lambda: st.SDGP(modules=("conv", "lin")), "modules")
    raises(ValueError, lambda: st.SDGP(modules=()), "modules")
    raises(ValueError, lambda: st.SDGP(modules=("linear", "linear")), "modules")
    raises(TypeError, lambda: st.SDGP(classifier=1), "classifier")
    assert st.SDGP(modules=["linear"]).modules == ("linear",) and st.SDGP(modules="linear").modules == ("linear",)
    raises(TypeError, lambda: st.sparsify_(mlp().double(), {"0": st.SDGP(modules=LIN)}), "torch.float64")
    mha = nn.Sequential(nn.MultiheadAttention(16, 2), nn.Linear(16, 16))
    raises(ValueError, lambda: st.sparsify_(mha, {"0.out_proj": st.SDGP(modules=LIN)}), "never calls its forward")

    class MyLinear(nn.Linear):
        pass
    raises(TypeError, lambda: st.sparsify_(nn.Sequential(MyLinear(8, 8)), {"0": st.SDGP(modules=LIN)}), "subclass")
    model = mlp()
    st.sparsify_(model, st.SDGP(modules=LIN))
    raises(TypeError, lambda: model[0](torch.randn(3, 24, dtype=torch.float64, requires_grad=True)), "torch.float64")
    raises(TypeError, lambda: model[0](torch.randn(3, 24).bfloat16().requires_grad_()), "torch.bfloat16")
    raises(ValueError, lambda: st.sparsify_(model, st.SDGP(modules=LIN)), "converted already")
    # no gradient for x: plain torch (the weights' gradient still flows); empty batches work
    y = model(torch.randn(4, 24))
    y.sum().backward()
    assert model[0].weight.grad is not None
    x0 = torch.randn(0, 24, requires_grad=True)
    model(x0).sum().backward()
    assert x0.grad.shape == (0, 24)
    # a 1-D input (one token)
    x1 = torch.randn(24, requires_grad=True)
    model(x1).sum().backward()
    assert x1.grad.shape == (24,)


run_tests(globals())
