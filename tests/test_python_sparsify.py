"""sdgp.torch.sparsify_: each method (SDGP, MVUE's weight gradient, S-STE / SR-STE weights) and their
combination against hand-made PyTorch references that apply the same masks (sdgp.prune for the
gradients, a torch projection written here for the weights), per-layer dicts, filter_fn, the report,
export_model / restore_model and state dicts, bf16 autocast, bad input.
Run: SDGP_LIBRARY=build/libsdgp.so PYTHONPATH=python python3 tests/test_python_sparsify.py, or pytest."""
import copy
import io
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import sdgp
import sdgp.torch as st

from python_harness import raises, run_tests

torch.set_num_threads(2)
WGRAD_SEED = 0x77677261


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


# ---- the references ----
def project_ref(w, method, n, m, groups, beta=None):
    """W~ of w (O, I, kh, kw) by hand (docs/sparse-weights.md): units, sizes, the n largest kept (ties:
    lower index), t the (n+1)-th size, S-STE's factor max(0, 1 - t / size), SR-STE's 1; beta for S-STE."""
    O, I, kh, kw = w.shape
    T = kh * kw
    w3 = w.detach().reshape(O, I, T).double()
    if groups == "tap":  # groups along I per (o, t): (O, T, I/m, m, 1)
        U = w3.permute(0, 2, 1).reshape(O, T, I // m, m, 1)
    elif groups == "kernel":  # per o, units = the taps of one input channel
        U = w3.reshape(O, I // m, m, T)
    elif groups == "cout":  # along O per (i, t)
        U = w3.permute(1, 2, 0).reshape(I, T, O // m, m, 1)
    else:  # blockB: per block of B output channels, units = an input channel's taps in the block
        B = int(groups[5:])
        assert O % B == 0
        U = w3.reshape(O // B, B, I, T).permute(0, 2, 1, 3).reshape(O // B, I // m, m, B * T)
    size = U.norm(dim=-1)
    order = torch.sort(size, dim=-1, descending=True, stable=True).indices
    keep = torch.zeros_like(size, dtype=torch.bool).scatter_(-1, order[..., :n], True)
    t = size.gather(-1, order[..., n:n + 1])
    fac = torch.where(keep, (1 - t / size.clamp_min(1e-300)).clamp_min(0) if method == "sste" else torch.ones_like(size),
                      torch.zeros_like(size))
    S = U * fac.unsqueeze(-1)
    mask = keep.unsqueeze(-1).expand_as(U)

    def back(V):
        if groups == "tap":
            V = V.reshape(O, T, I).permute(0, 2, 1)
        elif groups == "kernel":
            V = V.reshape(O, I, T)
        elif groups == "cout":
            V = V.reshape(I, T, O).permute(2, 0, 1)
        else:
            B = int(groups[5:])
            V = V.reshape(O // B, I, B, T).permute(0, 2, 1, 3).reshape(O, I, T)
        return V.reshape(O, I, kh, kw)

    S, M = back(S), back(mask.double())
    if method == "sste":
        if beta is None:
            beta = ((w.double() * S).sum() / (S * S).sum()).item() if (S != 0).any() else 1.0
        S = S * beta
    return S.float(), M.float(), beta


class HandConv(nn.Conv2d):
    """The oracle layer: forward with W~ (project_ref, straight-through to W, SR-STE's decay added),
    dL/dD from sdgp.prune(dL/dO) x W~ (SDGP), dL/dW from the row-pruned dL/dO (MVUE)."""

    def setup(self, layer, sdgp_cfg=None, mvue=None, weights=None, beta=None, rank_seed=None):
        self.layer, self.step, self.sd, self.mv, self.sw, self.beta = layer, 0, sdgp_cfg, mvue, weights, beta
        self.seed_of = rank_seed or (lambda s: s)
        return self

    def forward(self, x):
        w = self.weight
        if self.sw is not None:
            n, m = self.sw.n_m
            wt, M, self.beta = project_ref(w, self.sw.method, n, m, self.sw.groups, self.beta)
            lam = self.sw.srste_lambda if self.sw.method == "srste" else 0.0
            w = w + (wt - w).detach()  # straight-through
            if lam and w.requires_grad:
                w0 = self.weight.detach().clone()
                w.register_hook(lambda g: g + lam * (w0 - M * w0))
        y = _Hand.apply(x, w, self.bias, self, self.step)
        self.step += 1
        return y


class _Hand(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, conv, step):
        ctx.save_for_backward(x, w)
        ctx.conv, ctx.step, ctx.has_b = conv, step, b is not None
        return F.conv2d(x, w, b, conv.stride, conv.padding, 1, conv.groups)

    @staticmethod
    def backward(ctx, go):
        x, w = ctx.saved_tensors
        c = ctx.conv
        go = go.contiguous()
        gd = go
        if c.sd is not None:
            gd = sdgp.prune(go, c.sd.prune, c.sd.nm, dim=1, seed=c.seed_of(c.sd.seed), step=ctx.step, layer=c.layer)
        gw_in = go
        if c.mv is not None:
            nhwc = go.permute(0, 2, 3, 1).contiguous()
            gw_in = sdgp.prune(nhwc, c.mv.prune, c.mv.nm, axis="row", seed=c.seed_of(c.mv.seed ^ WGRAD_SEED),
                               step=ctx.step, layer=c.layer).permute(0, 3, 1, 2)
        gx = torch.nn.grad.conv2d_input(x.shape, w, gd, c.stride, c.padding, groups=c.groups)
        gw = torch.nn.grad.conv2d_weight(x, w.shape, gw_in, c.stride, c.padding, groups=c.groups)
        return gx, gw, (go.sum((0, 2, 3)) if ctx.has_b else None), None, None


def hand_model(plain, cfgs, first_layer=True, rank_seed=None):
    """A copy of plain whose convs (all, or all but the first) run HandConv with the configs."""
    o = copy.deepcopy(plain)
    by = {type(c).__name__: c for c in cfgs}
    for i, mod in enumerate([m for m in o.modules() if type(m) is nn.Conv2d]):
        if i > 0 or first_layer:
            mod.__class__ = HandConv
            mod.setup(i, by.get("SDGP"), by.get("MVUEWeightGrad"), by.get("SparseWeights"), rank_seed=rank_seed)
    return o


def net(cin=16, bias=False):
    return nn.Sequential(nn.Conv2d(cin, 32, 3, 1, 1, bias=bias), nn.BatchNorm2d(32), nn.ReLU(),
                         nn.Conv2d(32, 32, 3, 2, 1, bias=True), nn.ReLU(), nn.Conv2d(32, 64, 1, bias=False),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def grads_after(model, x, y, steps=2, opt=False):
    for _ in range(steps):
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def compare(cfgs, fmt=torch.contiguous_format, tol=2e-5, seed=0):
    torch.manual_seed(seed)
    plain = net().to(memory_format=fmt)
    model = copy.deepcopy(plain)
    rep = st.sparsify_(model, [dataclass_with_first(c) for c in cfgs], strict=True)
    oracle = hand_model(plain, cfgs)
    x = torch.randn(4, 16, 8, 8).contiguous(memory_format=fmt)
    y = torch.randint(0, 10, (4,))
    a, b = grads_after(model, x, y), grads_after(oracle, x, y)
    worst = max((rel(a[k], b[k]), k) for k in a)
    return worst, rep, model, oracle, (a, b)


def dataclass_with_first(c):
    import dataclasses
    return dataclasses.replace(c, first_layer=True)


# ---- each method against its reference ----
def test_mvue_weight_grad_matches_hand_reference():
    for kernel in ("sparse", "dense", "auto"):
        for fmt in (torch.contiguous_format, torch.channels_last):
            for fn, nm in (("mvue", "2:4"), ("mvue", "1:2"), ("magnitude", "2:8")):
                c = st.MVUEWeightGrad(nm=nm, prune=fn, kernel=kernel, seed=5)
                (worst, name), rep, model, _, (a, b) = compare([c], fmt)
                assert worst < 2e-5, "MVUE %s %s %s %s: %s rel %.2g" % (fn, nm, kernel, fmt, name, worst)
                kinds = {r["wgrad_kernel"] for r in st.layer_report(model) if r["converted"]}
                assert kinds <= {"sparse", "dense"} and (kernel == "auto" or kinds == {kernel}), kinds
    # the pruning is real: the weight gradient differs from the dense one
    torch.manual_seed(1)
    plain = net()
    model = copy.deepcopy(plain)
    st.sparsify_(model, st.MVUEWeightGrad(first_layer=True))
    x, y = torch.randn(4, 16, 8, 8), torch.randint(0, 10, (4,))
    a, b = grads_after(model, x, y, 1), grads_after(plain, x, y, 1)
    assert rel(a["0.weight"], b["0.weight"]) > 1e-3
    # dL/dD stays exact, so each layer's dL/dO is plain torch's: dL/db (its exact sum) too
    assert rel(a["3.bias"], b["3.bias"]) < 1e-5 and rel(a["8.weight"], b["8.weight"]) < 1e-5


def test_sparse_weights_match_hand_reference():
    for method in ("sste", "srste"):
        for groups in ("tap", "kernel", "cout", "block16", "block32"):
            for fmt in (torch.contiguous_format, torch.channels_last):
                c = st.SparseWeights(method=method, nm="2:4", groups=groups, srste_lambda=0.05)
                (worst, name), rep, model, oracle, _ = compare([c], fmt)
                tag = "%s %s %s" % (method, groups, fmt)
                assert worst < 2e-5, "%s: %s rel %.2g" % (tag, name, worst)
                # W~ itself: the hand projection's values and masks
                for (mn, mm), om in zip([(n, m) for n, m in model.named_modules() if isinstance(m, st.SdgpConv2d)],
                                        [m for m in oracle.modules() if isinstance(m, HandConv)]):
                    wt = st.sparse_weights(model)[mn + ".weight"]
                    ref, M, _ = project_ref(mm.weight, method, 2, 4, groups, mm._sdgp.sw_beta)
                    assert torch.equal(wt != 0, ref != 0), "%s %s: the masks" % (tag, mn)
                    assert rel(wt, ref) < 1e-6, "%s %s: W~ rel %.2g" % (tag, mn, rel(wt, ref))
                    assert M.sum().item() == M.numel() // 2, "%s: 2:4 keeps half" % tag


def test_all_three_methods_match_hand_reference():
    for fmt in (torch.contiguous_format, torch.channels_last):
        for sd, mv, sw in ((st.SDGP(prune="rescaled"), st.MVUEWeightGrad(), st.SparseWeights(method="sste")),
                           (st.SDGP(prune="random", nm="1:4", seed=3), st.MVUEWeightGrad(kernel="dense"),
                            st.SparseWeights(method="srste", groups="kernel"))):
            (worst, name), rep, model, _, _ = compare([sd, mv, sw], fmt)
            assert worst < 5e-5, "%s %s: %s rel %.2g" % (sd.prune, fmt, name, worst)
            assert rep.converted == ["0", "3", "5"], rep.converted
            assert all(r["methods"] == ["sdgp", "mvue_wgrad", "sparse_weights"] for r in st.layer_report(model))


def test_train_loss_falls_with_all_three():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    lab = torch.randint(0, 10, (512,), generator=g)
    img = torch.randn(512, 3, 12, 12, generator=g) * 0.5
    img[torch.arange(512), 0, lab, :] += 2.0
    model = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32),
                          nn.ReLU(), nn.Conv2d(32, 32, 3, 1, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(32, 10))
    st.sparsify_(model, [st.SDGP(), st.MVUEWeightGrad(), st.SparseWeights()])
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(40):
        i = (step * 64) % 512
        loss = F.cross_entropy(model(img[i:i + 64]), lab[i:i + 64])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.7 * first, (first, last)


# ---- the API: per-layer dicts, filter_fn, the report, convert_model, restore / export ----
def test_per_layer_dict_filter_and_report():
    torch.manual_seed(2)
    plain = net()
    model = copy.deepcopy(plain)
    cfg = {"3": st.SDGP(prune="magnitude", nm="1:4"), "5": [st.SDGP(prune="magnitude", nm="2:8"), st.MVUEWeightGrad()]}
    rep = st.sparsify_(model, cfg)
    assert rep.converted == ["3", "5"] and rep["0"].skipped == {"all": "not in the config dict"}
    assert "SDGP" in str(rep) and "not in the config dict" in str(rep)
    lr = {r["name"]: r for r in st.layer_report(model)}
    assert lr["3"]["nm"] == "1:4" and lr["5"]["nm"] == "2:8" and lr["5"]["methods"] == ["sdgp", "mvue_wgrad"]
    oracle = copy.deepcopy(plain)
    convs = [m for m in oracle.modules() if type(m) is nn.Conv2d]
    convs[1].__class__ = HandConv
    convs[1].setup(1, cfg["3"])
    convs[2].__class__ = HandConv
    convs[2].setup(2, cfg["5"][0], cfg["5"][1])
    x, y = torch.randn(4, 16, 8, 8), torch.randint(0, 10, (4,))
    a, b = grads_after(model, x, y), grads_after(oracle, x, y)
    assert max(rel(a[k], b[k]) for k in a) < 2e-5
    # filter_fn (torchao's signature): only the 1x1 conv
    m2 = copy.deepcopy(plain)
    rep = st.sparsify_(m2, st.SDGP(first_layer=True), filter_fn=lambda mod, name: mod.kernel_size == (1, 1))
    assert rep.converted == ["5"] and rep["3"].skipped == {"all": "filter_fn"}
    # the default skips the first conv, and says so
    rep = st.sparsify_(copy.deepcopy(plain), st.SDGP())
    assert rep.converted == ["3", "5"] and "first_layer" in rep["0"].skipped["all"]


def test_convert_model_is_sparsify_sdgp():
    torch.manual_seed(3)
    plain = net()
    a_m, b_m = copy.deepcopy(plain), copy.deepcopy(plain)
    st.convert_model(a_m, prune="magnitude", nm="2:4", kernel="sparse")
    st.sparsify_(b_m, st.SDGP(prune="magnitude", nm="2:4", kernel="sparse"))
    x, y = torch.randn(4, 16, 8, 8), torch.randint(0, 10, (4,))
    a, b = grads_after(a_m, x, y), grads_after(b_m, x, y)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_restore_export_and_state_dicts():
    torch.manual_seed(4)
    plain = net()
    model = copy.deepcopy(plain)
    # kernel="off": torch's forward on W~, so the exported model's output is bitwise the converted one's
    # (libsdgp's sparse forward differs by rounding: tests/test_python_sparse_fwd.py)
    st.sparsify_(model, [st.SDGP(), st.SparseWeights(method="sste", groups="block16", kernel="off")])
    assert list(model.state_dict()) == list(plain.state_dict())
    x, y = torch.randn(4, 16, 8, 8), torch.randint(0, 10, (4,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    model.eval()
    exported = st.export_model(model)
    assert not any(isinstance(m, st.SdgpConv2d) for m in exported.modules())
    with torch.no_grad():
        assert torch.equal(exported(x), model(x)), "the exported plain model computes the sparse forward"
    # its state dict (W~) loads into the plain architecture, which then computes the same
    buf = io.BytesIO()
    torch.save(exported.state_dict(), buf)
    buf.seek(0)
    fresh = net().eval()
    fresh.load_state_dict(torch.load(buf))
    with torch.no_grad():
        assert torch.equal(fresh(x), model(x))
    w5 = fresh[5].weight.reshape(64, 2, 16, 1)  # block16 2:4: whole input channels of 16 outputs zero
    assert ((w5.reshape(4, 16, 32).abs().sum(1) != 0).reshape(4, 8, 4).sum(-1) <= 2).all()
    # the converted model's own state dict is the dense W, loadable into the plain model
    fresh.load_state_dict(model.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), model.state_dict().values()))
    # restore_model: plain layers with the dense W
    st.restore_model(model)
    assert not any(isinstance(m, st.SdgpConv2d) for m in model.modules())
    with torch.no_grad():
        assert torch.equal(model(x), fresh(x))
    # pickling keeps beta and the configs
    m3 = copy.deepcopy(plain)
    st.sparsify_(m3, st.SparseWeights())
    buf = io.BytesIO()
    torch.save(m3, buf)
    buf.seek(0)
    m4 = torch.load(buf)
    assert m4[3]._sdgp.sw_beta == m3[3]._sdgp.sw_beta and m4[3]._sdgp.sw == m3[3]._sdgp.sw
    F.cross_entropy(m4(x), y).backward()


# ---- autocast ----
def test_autocast_bf16_matches_reference():
    torch.manual_seed(5)
    for fmt in (torch.contiguous_format, torch.channels_last):
        conv = nn.Conv2d(16, 32, 3, 1, 1, bias=True).to(memory_format=fmt)
        model = nn.Sequential(copy.deepcopy(conv))
        sd, mv = st.SDGP(prune="magnitude", kernel="sparse", first_layer=True), st.MVUEWeightGrad(first_layer=True)
        st.sparsify_(model, [sd, mv])
        x = torch.randn(4, 16, 9, 9).contiguous(memory_format=fmt).requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = model(x)
        assert y.dtype == torch.bfloat16
        G = torch.randn(y.shape).to(torch.bfloat16)
        y.backward(G)
        # reference: torch's bf16 forward of the casts; the float32 N:M products of the upcast tensors
        xb, wb = x.detach().to(torch.bfloat16), conv.weight.detach().to(torch.bfloat16)
        yr = F.conv2d(xb, wb, conv.bias.detach().to(torch.bfloat16), 1, 1)
        assert torch.equal(y, yr), "forward: torch's bf16 convolution"
        go = G.float().contiguous()
        gd = sdgp.prune(go, "magnitude", "2:4", dim=1, layer=0)
        gx = torch.nn.grad.conv2d_input(x.shape, wb.float(), gd, 1, 1)
        gr = sdgp.prune(go.permute(0, 2, 3, 1).contiguous(), "mvue", "2:4", axis="row", seed=WGRAD_SEED,
                        layer=0).permute(0, 3, 1, 2)
        gw = torch.nn.grad.conv2d_weight(xb.float(), conv.weight.shape, gr, 1, 1)
        assert x.grad.dtype == torch.float32 and model[0].weight.grad.dtype == torch.float32
        assert rel(x.grad, gx) < 1e-5, rel(x.grad, gx)
        assert rel(model[0].weight.grad, gw) < 1e-5, rel(model[0].weight.grad, gw)
        assert rel(model[0].bias.grad, go.sum((0, 2, 3))) < 1e-6
    # a whole network trains a step under autocast (torch 1.13: TypeError at the first backward before)
    model = net()
    st.sparsify_(model, [st.SDGP(), st.MVUEWeightGrad(), st.SparseWeights()])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(torch.randn(4, 16, 8, 8)), torch.randint(0, 10, (4,)))
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


# ---- bad input ----
def test_bad_input():
    raises(ValueError, lambda: st.SDGP(prune="magic"), "magic")
    raises(ValueError, lambda: st.MVUEWeightGrad(prune="sorted"), "sorted")
    raises(ValueError, lambda: st.SDGP(nm="2/4"), "2/4")
    raises(ValueError, lambda: st.SparseWeights(method="ste"), "method")
    raises(ValueError, lambda: st.SparseWeights(groups="row"), "groups")
    raises(ValueError, lambda: st.MVUEWeightGrad(kernel="fastest"), "kernel")
    raises(TypeError, lambda: st.sparsify_(net(), "sdgp"), "SDGP(...)")
    raises(ValueError, lambda: st.sparsify_(net(), [st.SDGP(), st.SDGP(nm="1:4")]), "two SDGP")
    raises(ValueError, lambda: st.sparsify_(net(), {"nope": st.SDGP()}), "'nope'")
    raises(TypeError, lambda: st.sparsify_(net(), {"8": st.SDGP()}), "Linear")
    # n:m that does not divide the channels: a named layer raises, naming it; a whole-model config
    # warns and reports, strict raises
    raises(ValueError, lambda: st.sparsify_(net(), {"3": st.SDGP(nm="2:5")}), "layer 3, SDGP: out_channels=32")
    raises(ValueError, lambda: st.sparsify_(net(cin=6), {"0": st.SparseWeights(nm="2:4")}), "6 input channels")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        rep = st.sparsify_(net(cin=6), st.SparseWeights(first_layer=True))
    assert rep.converted == ["3", "5"] and "6 input channels" in rep["0"].skipped["sparse_weights"]
    assert any(issubclass(x.category, st.SdgpConversionWarning) for x in w)
    raises(ValueError, lambda: st.sparsify_(net(cin=6), st.SparseWeights(first_layer=True), strict=True), "layer")
    # wrong dtypes: the weights at conversion, the input and the autocast dtype at the forward
    raises(TypeError, lambda: st.sparsify_(net().double(), {"3": st.SDGP()}), "torch.float64")
    model = net()
    st.sparsify_(model, st.SDGP())
    raises(TypeError, lambda: model[3](torch.randn(2, 32, 5, 5, dtype=torch.float64, requires_grad=True)),
           "torch.float64")
    raises(TypeError, lambda: model[3](torch.randn(2, 32, 5, 5, requires_grad=True).bfloat16()), "torch.bfloat16")
    raises(ValueError, lambda: st.sparsify_(model, st.SDGP()), "converted already")
    raises(ValueError, lambda: st.sparsify_(net(), st.MVUEWeightGrad(kernel="sparse", nm="2:3"), strict=True), "m dividing 8")


run_tests(globals())
