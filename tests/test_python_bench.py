"""python3 -m sdgp.bench (both modes, a few steps: behaviour, never speed) and the one definition of the
models: sdgp.models and python/torch_models.py (the golden tests' and bench/'s import of it).
--overhead: one row per converted layer of each model, all of them, the medians consistent
(0 <= c_ms <= backward_ms, the kernels' calls seen), a summary row; the probe skips a layer's auto
measurement and, once closed, leaves no wrapper behind (the normal path has no timer).
Run: PYTHONPATH=python python3 tests/test_python_bench.py"""
import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys

import torch
import torch.nn as nn

import sdgp.torch as st
from sdgp import _lib, _overhead, bench, models

from python_harness import check, finish  # noqa: E402 (tests/ is the script's directory)

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
HAS_TORCHVISION = importlib.util.find_spec("torchvision") is not None  # resnet18 needs it


def run_bench(*args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = bench.main(list(args))
    return rc, [json.loads(line) for line in out.getvalue().splitlines()]


def converted_names(name):
    model = st.convert_model(bench.MODELS[name](), nm="2:4")
    return [r["name"] for r in st.layer_report(model) if r["converted"]]


def check_overhead_rows(rows, name, kernel, steps, what):
    layers, summary = rows[:-1], rows[-1]
    check([r["layer"] for r in layers] == converted_names(name),
          "%s: a row per converted layer, in the model's order: %s" % (what, [r["layer"] for r in layers]))
    check(summary["layer"] == "(all)" and summary["layers"] == len(layers), "%s: the summary row" % what)
    for r in layers:
        w = "%s %s" % (what, r["layer"])
        check(r["model"] == name and r["nm"] == "2:4" and r["kernel"] == kernel and r["calls"] == steps,
              "%s: model, nm, kernel, one call per step: %s" % (w, r))
        check(0 < r["c_ms"] <= r["backward_ms"], "%s: 0 < c_ms <= backward_ms: %s" % (w, r))
        check(0 <= r["overhead_ms"] <= r["backward_ms"] and 0 <= r["overhead_pct"] <= 100,
              "%s: overhead within the backward: %s" % (w, r))
        # every path prunes in libsdgp and computes dL/dW in torch; the library reads the NCHW dL/dO and
        # writes the NCHW dL/dD in place: no layout copy is left
        check(r["sdgp_ms"] > 0 and r["torch_ms"] > 0 and r["layout_ms"] == 0, "%s: each part timed: %s" % (w, r))
        check(0 <= r["probe_ms"] < r["backward_ms"], "%s: probe_ms: %s" % (w, r))
    total = sum(r["backward_ms"] for r in layers)
    check(abs(summary["backward_ms"] - total) <= 1e-3 * len(layers) + 1e-6 * total,
          "%s: the summary sums the layers: %s vs %s" % (what, summary["backward_ms"], total))
    check(summary["c_ms"] <= summary["backward_ms"] and summary["goal_pct"] == 2.0,
          "%s: summary c_ms <= backward_ms, goal: %s" % (what, summary))


def test_overhead_mode():
    swapped = [(_lib, "prune"), (_lib, "sparse_bwd_pack_strided"), (_lib, "sparse_bwd_data"), (st, "_conv_backward"),
               (st, "_relayout")]
    before = [getattr(m, a) for m, a in swapped] + [st._SdgpConvFn.__dict__["backward"]]
    names = "resnet9,resnet18" if HAS_TORCHVISION else "resnet9"
    for kernel in ("sparse", "dense"):
        rc, rows = run_bench("--overhead", "--models", names, "--nm", "2:4", "--kernel", kernel, "--batch", "2",
                             "--steps", "2", "--warmup", "1", "--threads", "1")
        check(rc == 0, "--overhead --kernel %s: exit status %s" % (kernel, rc))
        for name in names.split(","):
            mine = [r for r in rows if r["model"] == name]
            check(len(mine) > 1, "--overhead --kernel %s: rows of %s" % (kernel, name))
            if len(mine) > 1:
                check_overhead_rows(mine, name, kernel, 2, "--overhead %s %s" % (kernel, name))
    after = [getattr(m, a) for m, a in swapped] + [st._SdgpConvFn.__dict__["backward"]]
    check(all(a is b for a, b in zip(before, after)), "the probe restored every function it swapped")
    check(st._conv_backward is torch.ops.aten.convolution_backward, "no wrapper around torch's kernel")


def test_probe_skips_measurement():
    """kernel="auto": the first backward runs both kernels three times; the probe leaves it out."""
    torch.manual_seed(0)
    net = st.convert_model(nn.Sequential(nn.Conv2d(4, 8, 3, 1, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, 1, 1)), nm="2:4")
    x = torch.randn(2, 4, 6, 6)
    with _overhead.OverheadProbe() as probe:
        for _ in range(3):
            net(x).sum().backward()
    rows = probe.rows(model="small")
    check([r["layer"] for r in rows] == ["2", "(all)"], "auto: the converted layer and the summary: %s" % rows)
    check(rows[0]["calls"] == 2 and rows[0]["kernel"] in ("sparse", "dense"),
          "auto: the measuring backward is not counted: %s" % rows[0])
    check(probe.wrap_ns > 0, "the probe measured its own cost: %s ns" % probe.wrap_ns)


def test_step_mode():
    rc, rows = run_bench("--models", "resnet9", "--nm", "2:4", "--mask-block", "1,4", "--batch", "2", "--steps", "1",
                         "--warmup", "1", "--threads", "1")
    check(rc == 0 and len(rows) == 2, "plain vs converted at two mask blocks: two rows: %s" % rows)
    for r, p in zip(rows, (1, 4)):
        check(r["model"] == "resnet9" and r["nm"] == "2:4" and r["torch_ms"] > 0 and r["converted_ms"] > 0 and
              r["sparse_layers"].endswith("/7"), "plain vs converted row: %s" % r)
        check(r["mask_block"] == p, "the row's layers hold mask_block %d: %s" % (p, r))
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            bench.main(["--mask-block", "x"])
            check(False, "--mask-block x is refused")
        except SystemExit as e:
            check(e.code == 2, "--mask-block x: exit status 2, got %s" % e.code)


def test_methods_mode():
    """--methods: a row per method and format against the plain model of its format, the host in each."""
    rc, rows = run_bench("--methods", "plain,sdgp,all", "--models", "resnet9", "--batch", "2", "--size", "16",
                         "--steps", "1", "--warmup", "1", "--threads", "1")
    check(rc == 0 and [(r["method"], r["format"]) for r in rows] == [
        ("sdgp", "nchw"), ("all", "nchw"), ("sdgp", "channels_last"), ("all", "channels_last")],
        "--methods: sdgp and all per format: %s" % rows)
    for r in rows:
        check(r["mode"] == "methods" and r["nm"] == "2:4" and r["size"] == 16 and r["torch_ms"] > 0 and r["ms"] > 0
              and r["host"]["sdgp_isa"] and r["host"]["cpu"], "--methods row: %s" % r)
        check(r["fwd_sparse_layers"].endswith("/7" if r["method"] == "all" else "/0"),
              "--methods: the sparse-weight layers counted: %s" % r)
    # the ViT: every method on its 12 MLP linears (MVUE and the weights alone too, by name)
    rc, rows = run_bench("--methods", "plain,mvue,weights,all", "--models", "vit", "--batch", "2", "--formats", "nchw",
                         "--steps", "1", "--warmup", "1", "--threads", "1")
    check(rc == 0 and [r["method"] for r in rows] == ["mvue", "weights", "all"], "--models vit: %s" % rows)
    for r in rows:
        check(r["layers"] == 12 and r["fwd_sparse_layers"].endswith("/0" if r["method"] == "mvue" else "/12"),
              "--models vit: the MLPs' 12 linears converted: %s" % r)
    with contextlib.redirect_stderr(io.StringIO()):
        for bad in (["--methods", "plain,fast"], ["--methods", "sdgp", "--formats", "nhwc"]):
            try:
                bench.main(bad)
                check(False, "%s is refused" % bad)
            except SystemExit as e:
                check(e.code == 2, "%s: exit status 2, got %s" % (bad, e.code))


def test_one_model_definition():
    """sdgp.models.resnet9 is the golden tests' twin, and torch_models (their import) is sdgp/models.py
    run without the package: it must not load libsdgp."""
    torch.manual_seed(1)
    a = models.resnet9(10, 1, 0.25)
    check(type(a) is models.ResNet9, "resnet9() builds the twin ResNet9")
    code = ("import sys, json, torch; sys.path.insert(0, %r); import torch_models as tm; torch.manual_seed(1); "
            "m = tm.ResNet9(1, 10, 0.25); maps = open('/proc/self/maps').read(); "
            "print(json.dumps({'sdgp': [n for n in sys.modules if n.split('.')[0] == 'sdgp'], "
            "'lib': 'libsdgp' in maps, 'keys': list(m.state_dict()), "
            "'sums': [float(t.double().sum()) for t in m.state_dict().values()], 'mod': tm.ResNet9.__module__}))"
            % PYTHON_DIR)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    check(p.returncode == 0, "torch_models in a fresh process: %s" % p.stderr[-2000:])
    if p.returncode == 0:
        got = json.loads(p.stdout)
        check(got["sdgp"] == [] and not got["lib"],
              "torch_models loads neither the package nor libsdgp: %s" % got["sdgp"])
        sd = a.state_dict()
        check(got["keys"] == list(sd), "the twin's state_dict keys are sdgp.models'")
        check(got["sums"] == [float(t.double().sum()) for t in sd.values()], "the same initialisation")
        check(got["mod"] == "torch_models", "the twin's classes belong to torch_models")
    check(list(models.named_tensors(a))[:2] == ["conv0.weight", "bn0.weight"], "named_tensors: sdgp's names")


test_overhead_mode()
test_probe_skips_measurement()
test_step_mode()
test_methods_mode()
test_one_model_definition()
finish()
