"""sdgp.torch's SparseWeights layers on libsdgp's sparse-weight kernels (sdgp/_sparse_fwd.py): the forward
(direct and Winograd kernels for block masks, the cout kernel) and the Winograd data gradient (wdata),
against a hand-made PyTorch reference on the same W~ (F.conv2d and autograd, W's gradient straight
through W~), both memory formats, strides, 1x1 / 5x5 kernels, bias; kernel "auto" / "on" / "off" and
what layer_report says; inference (no_grad); all three methods with and without the sparse forward;
copies; layers the kernels cannot take; bad input.
Run: SDGP_LIBRARY=build/libsdgp.so PYTHONPATH=python python3 tests/test_python_sparse_fwd.py, or pytest."""
import copy
import pickle

import torch
import torch.nn as nn
import torch.nn.functional as F

import sdgp.torch as st

from python_harness import raises, run_tests

torch.set_num_threads(2)
FORMATS = (torch.contiguous_format, torch.channels_last)
# fp32 rounding: the direct and cout kernels sum in another order than torch's (about 1e-6 relative);
# Winograd F(4x4, 3x3)'s transforms round more (their matrices hold 4, 5, 8 and 1/6)
TOL = {"direct": 1e-5, "cout": 1e-5, "wino": 1e-4, "wdata": 1e-4, "dense": 0.0}


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def layer(cin=32, cout=64, k=3, stride=1, pad=1, bias=True, groups="block32", kernel="on", fmt=torch.contiguous_format,
          method="sste", seed=0):
    """A converted conv (the second of a two-layer net: the first stays plain) and its net."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(3, cin, 3, padding=1), nn.Conv2d(cin, cout, k, stride, pad, bias=bias))
    net = net.to(memory_format=fmt)
    st.sparsify_(net, st.SparseWeights(method=method, nm="2:4", groups=groups, kernel=kernel), strict=True)
    return net, net[1]


def reference(conv, x, wt):
    """y = conv(x, W~) by torch, and the gradients of x, W (straight through W~) and b for sum(y * r)."""
    xr = x.detach().clone().requires_grad_()
    wr = wt.detach().clone().requires_grad_()
    br = None if conv.bias is None else conv.bias.detach().clone().requires_grad_()
    y = F.conv2d(xr, wr, br, conv.stride, conv.padding)
    return y, xr, wr, br


def check_layer(impl, groups, fmt, k, stride, pad, bias=True):
    net, conv = layer(k=k, stride=stride, pad=pad, bias=bias, groups=groups, fmt=fmt)
    conv._sdgp.fwd.choice = impl  # force one kernel (kernel="on" would take the one with the fewest multiplies)
    x = torch.randn(5, 32, 9, 9).contiguous(memory_format=fmt).requires_grad_()
    y = conv(x)
    wt = st.sparse_weights(net)["1.weight"]
    yr, xr, wr, br = reference(conv, x, wt)
    what = "%s %s %s %dx%d/%d pad %d" % (impl, groups, fmt, k, k, stride, pad)
    assert y.shape == yr.shape and y.dtype == torch.float32, what
    assert rel(y, yr) <= TOL[impl], "%s: forward %.2e" % (what, rel(y, yr))
    assert y.is_contiguous(memory_format=fmt), "%s: the output keeps the input's memory format" % what
    r = torch.randn_like(yr)
    (y * r).sum().backward()
    (yr * r).sum().backward()
    assert rel(x.grad, xr.grad) <= 1e-5, "%s: dL/dX %.2e" % (what, rel(x.grad, xr.grad))
    # S-STE: dL/dW = dL/dW~ (straight through), torch's, so only the forward's rounding differs
    assert rel(conv.weight.grad, wr.grad) <= 1e-5, "%s: dL/dW %.2e" % (what, rel(conv.weight.grad, wr.grad))
    if bias:
        assert rel(conv.bias.grad, br.grad) <= 1e-5, "%s: dL/db" % what
    assert conv._sdgp.fwd.plans, "%s: the libsdgp plan ran" % what


def test_block_kernels_match_reference():
    for fmt in FORMATS:
        for groups in ("block16", "block32"):
            for k, stride, pad in ((3, 1, 1), (3, 2, 1), (1, 1, 0), (1, 2, 0), (5, 1, 2), (3, 1, 0)):
                check_layer("direct", groups, fmt, k, stride, pad, bias=(k != 1))
            check_layer("wino", groups, fmt, 3, 1, 1)
            check_layer("wino", groups, fmt, 3, 1, 2, bias=False)


def test_cout_kernel_matches_reference():
    for fmt in FORMATS:
        for k, stride, pad in ((3, 1, 1), (3, 2, 1), (1, 2, 0), (5, 1, 2)):
            check_layer("cout", "cout", fmt, k, stride, pad)


def test_on_takes_fewest_multiplies_and_off_is_torch():
    x = torch.randn(2, 32, 8, 8)
    for groups, k, stride, want in (("block32", 3, 1, "wino"), ("block32", 3, 2, "direct"), ("cout", 3, 1, "cout")):
        net, conv = layer(k=k, stride=stride, groups=groups)
        conv(x)
        row = st.layer_report(net)[1]
        assert row["fwd_kernel"] == want and row["fwd_times_ms"] is None, row
    net, conv = layer(kernel="off")
    y = conv(x)
    wt = st.sparse_weights(net)["1.weight"]
    assert torch.equal(y, F.conv2d(x, wt, conv.bias, 1, 1)), "off: torch's product, bitwise"
    row = st.layer_report(net)[1]
    assert row["fwd_kernel"] == "dense" and not conv._sdgp.fwd.plans, row


def test_auto_measures_keeps_the_fastest():
    for fmt in FORMATS:
        net, conv = layer(fmt=fmt, kernel="auto")
        assert st.layer_report(net)[1]["fwd_kernel"] == "auto", "undecided before the first forward"
        x = torch.randn(4, 32, 8, 8).contiguous(memory_format=fmt).requires_grad_()
        y = conv(x)
        row = st.layer_report(net)[1]
        t = row["fwd_times_ms"]
        assert set(t) == {"dense", "direct", "wino"} and row["fwd_kernel"] == min(t, key=t.get), row
        wt = st.sparse_weights(net)["1.weight"]
        assert rel(y, F.conv2d(x, wt, conv.bias, 1, 1)) <= TOL[row["fwd_kernel"]], "auto's output"
        y.sum().backward()  # the measuring forward's output trains like any other
        assert x.grad is not None and conv.weight.grad is not None
        kept = {key[0] for key in conv._sdgp.fwd.plans}
        assert kept <= {row["fwd_kernel"]}, "only the chosen kernel keeps a plan: %s" % kept
        y2 = conv(torch.randn(3, 32, 8, 8).contiguous(memory_format=fmt))  # another batch: the same choice
        assert st.layer_report(net)[1]["fwd_kernel"] == row["fwd_kernel"] and y2.shape[0] == 3


def test_inference_uses_the_sparse_kernel():
    net, conv = layer(groups="block32")
    x = torch.randn(3, 32, 7, 7)
    with torch.no_grad():
        y = conv(x)
    assert conv._sdgp.fwd.choice == "wino" and conv._sdgp.fwd.plans, "no_grad: the sparse kernel ran"
    wt = st.sparse_weights(net)["1.weight"]
    assert rel(y, F.conv2d(x, wt, conv.bias, 1, 1)) <= TOL["wino"] and not y.requires_grad


def test_wdata_for_sparse_weights_alone():
    for fmt in FORMATS:
        net, conv = layer(groups="block32", fmt=fmt, bias=False)
        conv._sdgp.fwd.choice = "direct"
        x = torch.randn(4, 32, 8, 8).contiguous(memory_format=fmt).requires_grad_()
        y = conv(x)
        wt = st.sparse_weights(net)["1.weight"]
        yr, xr, wr, _ = reference(conv, x, wt)
        r = torch.randn_like(yr)
        (y * r).sum().backward()
        (yr * r).sum().backward()
        row = st.layer_report(net)[1]
        assert row["weights_dgrad"] == "wdata", row
        assert rel(x.grad, xr.grad) <= TOL["wdata"], "wdata dL/dX %.2e" % rel(x.grad, xr.grad)
        assert x.grad.is_contiguous(memory_format=fmt), "dL/dX in x's memory format"
        assert rel(conv.weight.grad, wr.grad) <= 1e-5
    # with SDGP on the layer the data gradient is SDGP's
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.Conv2d(32, 32, 3, padding=1))
    st.sparsify_(net, [st.SDGP(), st.SparseWeights(groups="block32", kernel="on")])
    net(torch.randn(2, 3, 6, 6)).sum().backward()
    row = st.layer_report(net)[1]
    assert row["weights_dgrad"] == "sdgp" and row["fwd_kernel"] == "wino", row
    # a stride-2 layer has no wdata: torch's
    net, conv = layer(stride=2, groups="block32")
    x = torch.randn(2, 32, 8, 8, requires_grad=True)
    conv(x).sum().backward()
    assert st.layer_report(net)[1]["weights_dgrad"] == "dense"


def test_all_three_sparse_forward_against_dense_forward():
    """The three methods with the sparse forward against the same with torch's forward: the same masks
    (keyed, not sampled from the output), so the steps agree to rounding."""
    for fmt in FORMATS:
        torch.manual_seed(3)
        base = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
                             nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(), nn.Conv2d(64, 64, 1), nn.AdaptiveAvgPool2d(1),
                             nn.Flatten(), nn.Linear(64, 10)).to(memory_format=fmt)
        x = torch.randn(8, 3, 12, 12).contiguous(memory_format=fmt)
        y = torch.randint(0, 10, (8,))
        out = {}
        for kernel in ("on", "off"):
            model = copy.deepcopy(base)
            st.sparsify_(model, [st.SDGP(prune="mvue", nm="2:4"), st.MVUEWeightGrad(nm="2:4"),
                                 st.SparseWeights(method="sste", nm="2:4", groups="block32", kernel=kernel)])
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
            losses = []
            for _ in range(3):
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            out[kernel] = (losses, [p.detach().clone() for p in model.parameters()])
            rows = [r for r in st.layer_report(model) if r["converted"]]
            want = {"on": {"wino", "direct"}, "off": {"dense"}}[kernel]
            assert {r["fwd_kernel"] for r in rows} <= want, rows
        (la, pa), (lb, pb) = out["on"], out["off"]
        assert all(abs(a - b) <= 1e-4 * abs(b) for a, b in zip(la, lb)), (la, lb)
        assert max(rel(a, b) for a, b in zip(pa, pb)) <= 1e-3, "parameters after 3 steps"


def test_copies_keep_choices_not_plans():
    net, conv = layer()
    conv(torch.randn(2, 32, 6, 6))
    for c in (copy.deepcopy(net), pickle.loads(pickle.dumps(net))):
        f = c[1]._sdgp.fwd
        assert f.choice == "wino" and not f.plans and f is not conv._sdgp.fwd
        assert c[1](torch.randn(2, 32, 6, 6)).shape == (2, 64, 6, 6)
    st.restore_model(net)
    assert type(net[1]) is nn.Conv2d


def test_layers_the_kernels_cannot_take():
    # groups tap / kernel: no sparse kernel; a grouped conv; autocast: torch's bfloat16 product
    for groups in ("tap", "kernel"):
        net, conv = layer(groups=groups, kernel="auto")
        conv(torch.randn(2, 32, 6, 6))
        row = st.layer_report(net)[1]
        assert row["fwd_kernel"] == "dense" and "no sparse forward kernel" in row["fwd_reason"], row
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.Conv2d(32, 64, 3, padding=1, groups=2))
    st.sparsify_(net, st.SparseWeights(groups="block16", kernel="on"))
    net(torch.randn(2, 3, 6, 6))
    row = st.layer_report(net)[1]
    assert row["fwd_kernel"] == "dense" and "grouped" in row["fwd_reason"], row
    net, conv = layer(kernel="on")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = conv(torch.randn(2, 32, 6, 6, requires_grad=True))
    assert y.dtype == torch.bfloat16 and conv._sdgp.fwd.choice is None, "autocast: torch's bf16 conv, no choice yet"


def test_bad_input():
    raises(ValueError, lambda: st.SparseWeights(kernel="fast"), "kernel")
    raises(ValueError, lambda: st.SparseWeights(kernel="on", groups="tap"), "groups='tap'")
    raises(ValueError, lambda: st.SparseWeights(kernel="on", groups="kernel", nm="2:4"), "sparse forward kernel")
    net, conv = layer(kernel="on")
    raises(TypeError, lambda: conv(torch.randn(2, 32, 6, 6, dtype=torch.float64)), "torch.float64")


run_tests(globals())
