"""Whole training steps of sdgp against PyTorch 1.13 (the oracle), run by ctest.

For each case: sdgp (tests/tools/golden_step.c) builds the model, takes one SGD step on a random
batch and dumps its initial weights, loss, every gradient, the dL/dO masks of pruned layers and
the updated weights and BatchNorm statistics. PyTorch replays the same step with the same
weights and batch, pruning dL/dO of the same layers by sdgp's own masks, and everything is
compared. Usage: golden_step.py BUILD_DIR
"""
import copy
import functools
import os
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import torch
import torch.nn.functional as F

from harness_golden import Cases, load  # noqa: E402 (tests/ is the script's directory)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from torch_models import ResNet9, SmallCNN, named_tensors, param_groups  # noqa: E402

BUILD = sys.argv[1]
DRIVER = os.path.join(BUILD, "tests", "sdgp_golden_step")
LR, MOMENTUM, WD, SMOOTH = 0.1, 0.9, 5e-4, 0.1
# Whole-step gradients pass through 8 ReLU/BatchNorm/max-pool layers: a value that rounds to the
# other side of a ReLU or max-pool boundary moves a little gradient, and BatchNorm's backward
# amplifies rounding. Typical errors are 3e-6; a wrong mask or kernel gives errors of order 1.
GRAD_TOL = 1e-3
SEEDS = 3  # a case passes when at least 2 of its 3 data seeds pass every check (see GRAD_TOL)
G = Cases(SEEDS)








def project_weights(w, kind, group, n, m, scale=1.0):
    """The S-STE / SR-STE projection of docs/sparse-weights.md, written from the formulas (float64)."""
    if group == "cout":  # the tap rule along output channels: project the transposed tensor
        return project_weights(w.transpose(0, 1), kind, "tap", n, m, scale).transpose(0, 1).contiguous()
    O, I = w.shape[:2]
    w4 = w.double().reshape(O, I // m, m, -1)  # (out, group, unit, tap)
    if group == "tap":
        size = w4.abs()
    elif group == "kernel":
        size = w4.pow(2).sum(-1, keepdim=True).sqrt()
    else:  # block16 / block32: a unit's size over the B output channels of its block (the last: what remains)
        B = int(group[len("block"):])
        size = torch.cat([w4[o:o + B].pow(2).sum((0, 3), keepdim=True).sqrt().expand(min(B, O - o), -1, -1, 1)
                          for o in range(0, O, B)])
    ranked = size.sort(dim=2, descending=True).values
    t = ranked[:, :, n:n + 1] if n < m else torch.zeros_like(ranked[:, :, :1])
    keep = size > t  # random weights: no ties
    if kind == "srste":
        out = w4 * keep
    else:
        out = w4 * torch.clamp(1 - t / torch.where(size > 0, size, torch.ones_like(size)), min=0) * keep
    return (scale * out).reshape(w.shape).to(w.dtype)


def sparse_weights(model, cfg, init):
    """Makes model's products use sdgp's sparse weights (straight-through); returns the layers'
    (weight, projection, beta) for the SR-STE term, after checking sdgp's beta against ours."""
    kind, group = cfg.get("sparse-weights", "dense"), cfg.get("weight-groups", "tap")
    if kind == "dense":
        return []
    n, m = (int(v) for v in cfg.get("nm-weights", "2:4").split(":"))
    layers = [(f"conv{i}", cb) for i, cb in enumerate(model.convs) if i > 0 or cfg.get("sparse-weights-first") == "1"]
    if cfg.get("sparse-weights-classifier") == "1":
        layers.append(("linear", None))
    out = []
    for lname, cb in layers:
        w = model.linear.weight if cb is None else cb.conv.weight
        beta = 1.0
        if kind == "sste":
            s = project_weights(w.detach(), kind, group, n, m).double()
            beta = float((w.detach().double() * s).sum() / (s * s).sum())
            G.check(f"beta of {lname}", init(f"{lname}.sste_beta", (1,)), [beta], 1e-5)
        fn = functools.partial(lambda w, b: w + (project_weights(w.detach(), kind, group, n, m, b) - w).detach(), b=beta)
        if cb is None:
            model.linear.forward = lambda x, fn=fn: F.linear(x, fn(model.linear.weight), model.linear.bias)
        else:
            cb.weight_fn = fn
        out.append((w, fn))
    return out


def run_seed(name, seed, model_kind, width, hwc, batch, prune="none", nm="2:4", extra=None, env=None):
    H, W, C = hwc
    torch.manual_seed(0)
    # fixed data per case and seed (hash() is salted per process)
    rng = np.random.default_rng(zlib.crc32(name.encode()) + seed)
    x = rng.standard_normal((batch, H, W, C)).astype(np.float32)
    y = rng.integers(0, 10, batch).astype(np.int32)
    with tempfile.TemporaryDirectory() as d:
        x.tofile(os.path.join(d, "x.bin"))
        y.tofile(os.path.join(d, "y.bin"))
        cfg = {"model": model_kind, "width": width, "batch-size": batch, "seed": 7, "threads": 2,
               "height": H, "width-px": W, "channels": C, "classes": 10, "lr": LR, "momentum": MOMENTUM,
               "weight-decay": WD, "label-smoothing": SMOOTH, "prune": prune, "nm": nm}
        cfg.update(extra or {})
        with open(os.path.join(d, "config.txt"), "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in cfg.items())
        r = subprocess.run([DRIVER, d], capture_output=True, text=True, env={**os.environ, **(env or {})})
        if r.returncode != 0:
            G.problems.append(f"driver exit {r.returncode}: {r.stderr.strip()}")
            return
        model = ResNet9(C, 10, width) if model_kind == "resnet9" else SmallCNN(C, 10, width)
        model.train()  # fp32: PyTorch runs the same oneDNN kernels, so ReLU/max-pool decisions agree
        tensors = named_tensors(model)
        with torch.no_grad():
            for pname, t in tensors.items():
                t.copy_(torch.from_numpy(load(d, "init", pname, tuple(t.shape))))
        xt = torch.from_numpy(x.transpose(0, 3, 1, 2).copy())
        shapes = {}  # conv output shapes, from a dry run of a copy (running stats untouched)
        probe = copy.deepcopy(model)
        for i, cb in enumerate(probe.convs):
            cb.conv.register_forward_hook(lambda m, inp, out, k=i: shapes.__setitem__(k, tuple(out.shape)))
        with torch.no_grad():
            probe(xt)
        sparse = sparse_weights(model, cfg, lambda pname, shape: load(d, "init", pname, shape))
        # sdgp's masks as elementwise factors on dL/dO (NHWC dumps -> NCHW)
        for i, cb in enumerate(model.convs):
            path = os.path.join(d, "dzp", f"conv{i}.bin")
            if prune != "none" and os.path.exists(path):
                dz = np.fromfile(os.path.join(d, "dz", f"conv{i}.bin"), np.float32)
                dzp = np.fromfile(path, np.float32)
                factor = np.where(dz != 0, dzp / np.where(dz != 0, dz, 1), 0).astype(np.float32)
                b, c, ho, wo = shapes[i]
                n, m = (int(v) for v in nm.split(":"))
                kept = np.count_nonzero(dzp) / dzp.size
                G.check(f"{name}: conv{i} keeps at most {n}:{m}", [max(kept - n / m, 0.0)], [0.0], 0.0)
                f4 = factor.reshape(b, ho, wo, c).transpose(0, 3, 1, 2)
                cb.factor = torch.from_numpy(np.ascontiguousarray(f4))
        logits = model(xt)
        loss = F.cross_entropy(logits, torch.from_numpy(y.astype(np.int64)), label_smoothing=SMOOTH)
        loss.backward()
        if cfg.get("sparse-weights") == "srste":  # SR-STE's decay of the pruned weights
            lam = float(cfg.get("srste-lambda", "2e-4"))
            with torch.no_grad():
                for w, fn in sparse:
                    w.grad += lam * (w - fn(w))
        our_loss = float(open(os.path.join(d, "loss.txt")).read())
        G.check(f"{name}: logits", np.fromfile(os.path.join(d, "logits.bin"), np.float32).reshape(batch, 10),
              logits.detach().numpy(), 1e-4)
        G.check(f"{name}: loss", [our_loss], [loss.item()], 1e-5)
        worst = 0.0
        for pname, t in tensors.items():
            if t.grad is not None:
                worst = max(worst, G.check(f"{name}: grad {pname}", load(d, "grad", pname, tuple(t.shape)),
                                         t.grad.numpy(), GRAD_TOL))
        opt = torch.optim.SGD(param_groups(model, WD), lr=LR, momentum=MOMENTUM)
        opt.step()
        for pname, t in tensors.items():
            G.check(f"{name}: updated {pname}", load(d, "new", pname, tuple(t.shape)), t.detach().numpy(), 1e-4)
        print(f"{'ok' if not G.problems else '--'} {name} (data seed {seed}): loss {our_loss:.6f} vs {loss.item():.6f}, "
              f"worst grad rel err {worst:.2e}")


torch.set_num_threads(2)
run_case = functools.partial(G.run_case, run_seed)

run_case("smallcnn dense", "smallcnn", 1.0, (12, 12, 1), 8)
run_case("resnet9 w0.25 dense", "resnet9", 0.25, (16, 16, 3), 8)  # --conv-algo auto: Winograd at 16x16, 8x8
# sdgp's own Winograd kernels (forward, backward-data) on every machine, not only where oneDNN has none
run_case("resnet9 w0.25 dense, sdgp's Winograd", "resnet9", 0.25, (16, 16, 3), 8, env={"SDGP_WINOGRAD": "sdgp"})
run_case("resnet9 w0.25 dense, direct convs", "resnet9", 0.25, (16, 16, 3), 8, extra={"conv-algo": "direct"})
# small workspace limits split the Winograd passes: 12 MB chunks backward-weights (adding the
# chunks' gradients) at conv4-6; 7 MB slices forward/backward-data and runs backward-weights direct
run_case("resnet9 w0.25 dense, Winograd in 12 MB", "resnet9", 0.25, (16, 16, 3), 8, extra={"conv-workspace": "12"})
run_case("resnet9 w0.25 dense, Winograd in 7 MB", "resnet9", 0.25, (16, 16, 3), 8, extra={"conv-workspace": "7"})
run_case("resnet9 w0.25 1 channel odd size", "resnet9", 0.25, (19, 17, 1), 4)
# w1: its 5x5 stride-2 layer (128 input channels) by space-to-depth in all three passes where sdgp's
# Winograd is the default (AVX2 machines; test_conv_sdgp_wino.c checks the kernels on every machine)
run_case("resnet9 w1 dense", "resnet9", 1.0, (16, 16, 3), 4)
run_case("resnet9 magnitude 2:4 sparse", "resnet9", 0.25, (16, 16, 3), 8, "magnitude", "2:4", {"sparse-kernel": "on"})
run_case("resnet9 magnitude 2:4 dense kernel", "resnet9", 0.25, (16, 16, 3), 8, "magnitude", "2:4", {"sparse-kernel": "off"})
run_case("resnet9 rescaled 1:4 channel scope", "resnet9", 0.25, (16, 16, 3), 8, "rescaled", "1:4",
         {"rescale-scope": "channel", "sparse-kernel": "on"})
run_case("resnet9 mvue 2:4", "resnet9", 0.25, (16, 16, 3), 8, "mvue", "2:4", {"sparse-kernel": "on"})
run_case("resnet9 random 4:32 first layer too", "resnet9", 0.25, (16, 16, 3), 8, "random", "4:32",
         {"prune-first-layer": "1", "sparse-kernel": "on"})
# N:M sparse weights: the forward and the data gradient use W~, the gradient goes to W unchanged
run_case("resnet9 sste 2:4 tap groups", "resnet9", 0.25, (16, 16, 3), 8, extra={"sparse-weights": "sste"})
run_case("resnet9 sste 1:4 kernel groups, classifier too", "resnet9", 0.25, (16, 16, 3), 8,
         extra={"sparse-weights": "sste", "nm-weights": "1:4", "weight-groups": "kernel",
                "sparse-weights-classifier": "1"})
run_case("resnet9 srste 2:4 (lambda 0.01)", "resnet9", 0.25, (16, 16, 3), 8,
         extra={"sparse-weights": "srste", "srste-lambda": "0.01", "weight-groups": "kernel"})
run_case("resnet9 srste 2:4 block16 groups, classifier too (a block of 10)", "resnet9", 0.25, (16, 16, 3), 8,
         extra={"sparse-weights": "srste", "weight-groups": "block16", "sparse-weights-classifier": "1"})
run_case("resnet9 sste 2:4 block16 groups", "resnet9", 0.25, (16, 16, 3), 8,
         extra={"sparse-weights": "sste", "weight-groups": "block16"})
run_case("resnet9 sste 2:4 block32 groups, the sparse-weight forward kernel", "resnet9", 0.25, (16, 16, 3), 8,
         extra={"sparse-weights": "sste", "weight-groups": "block32", "sparse-kernel": "on"})
run_case("resnet9 sste 2:4 cout groups (along output channels)", "resnet9", 0.25, (16, 16, 3), 8,
         extra={"sparse-weights": "sste", "weight-groups": "cout"})
run_case("resnet9 sste 2:4 cout groups, the cout forward kernel", "resnet9", 0.25, (16, 16, 3), 8,
         extra={"sparse-weights": "sste", "weight-groups": "cout", "sparse-kernel": "on"})
run_case("resnet9 srste 2:4 cout groups", "resnet9", 0.25, (16, 16, 3), 8,
         extra={"sparse-weights": "srste", "srste-lambda": "0.01", "weight-groups": "cout"})
run_case("resnet9 sste 2:4 + SDGP magnitude 2:4 sparse kernel", "resnet9", 0.25, (16, 16, 3), 8, "magnitude", "2:4",
         {"sparse-weights": "sste", "sparse-kernel": "on"})
sys.exit(G.finish())
