"""python3 -m sdgp.bench: a PyTorch training step, plain vs converted by sdgp.torch.convert_model.

One JSON row per (model, n:m, mask block, wgrad) on stdout:
  {"model", "prune", "nm", "mask_block", "threads", "torch_ms", "converted_ms", "speedup", "sparse_layers", "wgrad",
   "wgrad_sdgp_layers", "channels_last", "kernel", "unpruned_layers", ...}
torch_ms and converted_ms are medians of --steps timed steps (forward, cross-entropy, backward,
SGD update) after --warmup steps (the converted model's first step includes its kernel
measurement, so warmup >= 1). The plain model and the converted ones (copies of the same
initial weights) take their steps round robin, so a drift of the machine's speed during the run
hits all of them alike. sparse_layers: converted layers that chose the sparse kernel / converted
layers. wgrad: convert_model's wgrad (--wgrad torch,auto compares SDGP alone with SDGP plus libsdgp's
dense dL/dW where faster, in one run); wgrad_sdgp_layers: layers whose dL/dW libsdgp computes.

--overhead: instead, the binding's overhead per converted layer (sdgp/_overhead.py): after --warmup
steps, --steps steps of each converted model with every backward of a converted layer timed, one row
per (model, n:m, layer), medians per backward call in ms:
  {"model", "prune", "nm", "mask_block", "threads", "batch", "channels_last", "layer", "kernel", "calls", "backward_ms",
   "c_ms", "overhead_ms", "overhead_pct", "sdgp_ms", "torch_ms", "layout_ms", "python_ms", "probe_ms"}
backward_ms: the autograd backward from entry to return; c_ms: inside compiled kernels (sdgp_ms,
libsdgp's prune/pack/sparse kernel, plus torch_ms, torch's convolution_backward); overhead_ms: the rest
(median of the per-call differences), of which layout_ms is the copies between torch's layouts and the
library's and python_ms the interpreter, ctypes and allocation; probe_ms: the timers' own share. Then a
summary row per (model, n:m) (layer "(all)": sums of the layers' medians, overhead_pct of the sums,
max_layer_pct, layers_over_goal against goal_pct, the issue's 2 %).
--methods plain,sdgp,all (the three methods, issues 55 and 56's goals): instead, per model, memory format
(--formats, default both) and n:m (default 2:4), plain PyTorch and the models converted by
sdgp.torch.sparsify_ with each method: "sdgp" SDGP(prune, nm, kernel) alone, "mvue"
MVUEWeightGrad(nm) alone, "weights" SparseWeights(method, nm, groups, kernel=--fwd-kernel) alone,
"all" the three together; every model of every format takes its steps round robin in one run, and a
row per converted model gives its speed against the plain model of its own format:
  {"mode": "methods", "model", "method", "format", "size", "nm", "batch", "threads", "torch_ms", "ms",
   "speedup", "groups", "fwd_kernel", "fwd_sparse_layers", "host", ...}
fwd_sparse_layers: layers whose forward runs a libsdgp sparse-weight kernel / layers with sparse
weights. --models vit: the ViT example's model (sdgp.models.ViT, width 192, 6 blocks, 28x28x1 inputs, 50
tokens an image), each method on its MLPs' nn.Linear layers (linear1, linear2 of every block). The host (CPU model, sdgp's ISA path, oneDNN's, the peer's torch.mm GFLOP/s and OPENBLAS_CORETYPE) heads
stderr's table and is in each row.
Progress goes to stderr.
"""
import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
from typing import Any, Dict, List

import torch
import torch.nn as nn

from . import _overhead
from . import models
from . import torch as sdgp_torch
from . import isa as _isa
from . import onednn_isa as _onednn_isa

MODELS = {"resnet18": lambda: models.resnet18(10, 3), "resnet9": lambda: models.resnet9(10, 3, 1.0),
          "vit": lambda: models.ViT(192, 6, 3)}  # the ViT example's model (width 192, 6 blocks) on 28x28x1
INPUTS = {"vit": (1, 28)}  # (channels, size) of a model whose input is fixed; the others: 3 x --size x --size
LINEAR_MODELS = {"vit"}  # models whose converted layers are their MLPs' nn.Linear (_method_config)
METHODS = ("plain", "sdgp", "mvue", "weights", "all")
FORMATS = {"nchw": torch.contiguous_format, "channels_last": torch.channels_last}


def host() -> Dict[str, Any]:
    """What the figures were measured on: CPU model (with family / model, as a VM's name may say little),
    logical CPUs, sdgp's kernel path and oneDNN's, torch's version."""
    info = {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            fields = dict(line.split(":", 1) for line in f.read().split("\n\n")[0].splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        info["cpu"] = "%s (family %s, model %s)" % (fields.get("model name", "?"), fields.get("cpu family", "?"),
                                                    fields.get("model", "?"))
    except OSError:
        pass
    info.update(sdgp_isa=_isa(), onednn_isa=_onednn_isa(), torch=torch.__version__,
                openblas_coretype=os.environ.get("OPENBLAS_CORETYPE", ""), torch_mm_gflops=round(_mm_gflops(), 1))
    return info


def _mm_gflops(t: int = 6272, k: int = 192, n: int = 768) -> float:
    """The peer's GEMM speed: torch.mm of t x k by k x n (the ViT example's MLP at batch 128) on torch's
    threads, best of 5, GFLOP/s. torch runs nn.Linear on its BLAS (OpenBLAS here; OPENBLAS_CORETYPE can
    name a closer core type than OpenBLAS detects), so a ratio against a slow BLAS would flatter us."""
    a, b = torch.randn(t, k), torch.randn(k, n)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        a.mm(b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * t * k * n / best * 1e-9


class _Runner:
    """One model with its optimizer: step() runs a training step and returns its wall time (ms)."""

    def __init__(self, model, x, y):
        self.model, self.x, self.y = model, x, y
        self.opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        self.times = []

    def step(self):
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(self.model(self.x), self.y).backward()
        self.opt.step()
        return 1e3 * (time.perf_counter() - t0)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m sdgp.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet18,resnet9", help="comma list of: " + ", ".join(MODELS))
    ap.add_argument("--prune", default="rescaled", help="pruning function (default rescaled)")
    ap.add_argument("--nm", default=None, help="comma list of N:M (default 2:4,1:4,4:32; with --methods 2:4)")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    ap.add_argument("--size", type=int, default=32, help="image size: size x size x 3 (default 32)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per configuration (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2, at least 1)")
    ap.add_argument("--mask-block", default="1",
                    help="comma list of shared-mask block sizes P (convert_model's mask_block; default 1)")
    ap.add_argument("--kernel", default="auto", choices=["auto", "fastest", "sparse", "dense", "plain"],
                    help="convert_model's kernel choice (default auto; fastest: unpruned where that is faster)")
    ap.add_argument("--channels-last", action="store_true", help="run the models in channels_last memory format")
    ap.add_argument("--wgrad", default="torch",
                    help="comma list of convert_model's wgrad: torch (default), sdgp, auto; rows per value")
    ap.add_argument("--overhead", action="store_true",
                    help="per converted layer: backward wall time against the time inside compiled kernels")
    ap.add_argument("--methods", default=None,
                    help="comma list of " + ", ".join(METHODS) + ": plain PyTorch against sparsify_ with each "
                    "method (all: SDGP + MVUEWeightGrad + SparseWeights), all formats in one run")
    ap.add_argument("--formats", default=None,
                    help="with --methods: comma list of nchw, channels_last (default both; --channels-last: that one)")
    ap.add_argument("--weights", default="sste", choices=["sste", "srste"], help="SparseWeights' method (default sste)")
    ap.add_argument("--groups", default="block32", help="SparseWeights' groups (default block32: sparse forward kernels)")
    ap.add_argument("--fwd-kernel", default="auto", choices=["auto", "on", "off"],
                    help="SparseWeights' kernel: its forward on libsdgp's sparse-weight kernels (default auto)")
    a = ap.parse_args(argv)
    if a.nm is None:
        a.nm = "2:4" if a.methods else "2:4,1:4,4:32"
    names = a.models.split(",")
    for nme in names:
        if nme not in MODELS:
            ap.error("unknown model %r (expected %s)" % (nme, ", ".join(MODELS)))
    if a.threads < 1 or a.batch < 1 or a.steps < 1 or a.warmup < 1 or a.size < 1:
        ap.error("--threads, --batch, --size, --steps and --warmup must be >= 1")
    try:
        blocks = [int(p) for p in a.mask_block.split(",")]
    except ValueError:
        ap.error("--mask-block: %r is not a comma list of integers" % a.mask_block)
    wgrads = a.wgrad.split(",")
    for w in wgrads:
        if w not in ("torch", "sdgp", "auto"):
            ap.error("--wgrad: %r is not torch, sdgp or auto" % w)
    torch.set_num_threads(a.threads)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    h = host()
    print("sdgp.bench: %s, %d CPUs; torch %s, %d threads, torch.mm %.0f GFLOP/s%s, sdgp ISA %s, oneDNN %s; batch %d, "
          "%dx%d, %d+%d steps" % (h["cpu"], h["cpus"], torch.__version__, torch.get_num_threads(), h["torch_mm_gflops"],
                                  " (OPENBLAS_CORETYPE=%s)" % h["openblas_coretype"] if h["openblas_coretype"] else "",
                                  h["sdgp_isa"], h["onednn_isa"], a.batch, a.size, a.size, a.warmup, a.steps),
          file=sys.stderr)
    if a.methods is not None:
        if a.overhead:
            ap.error("--methods and --overhead are separate modes")
        return _methods(ap, a, names, h)
    for name in names:
        torch.manual_seed(0)
        base = MODELS[name]().to(memory_format=fmt)
        x = _input(name, a).contiguous(memory_format=fmt)
        y = torch.randint(0, 10, (a.batch,))
        runners = {}  # (n:m, mask block, wgrad) -> runner
        for nm in a.nm.split(","):
            for p in blocks:
                for w in wgrads:
                    try:  # strict: a benchmark of a model with layers left plain would mislead
                        model = sdgp_torch.convert_model(copy.deepcopy(base), prune=a.prune, nm=nm, kernel=a.kernel,
                                                         mask_block=p, strict=True, wgrad=w)
                    except (ValueError, TypeError) as e:
                        ap.error("%s: %s" % (name, e))
                    runners[(nm, p, w)] = _Runner(model, x, y)
        if a.overhead:
            _overhead_rows(name, runners, a)
            continue
        runners = {"plain": _Runner(copy.deepcopy(base), x, y), **runners}
        for r in runners.values():  # the converted models' first step measures their kernels
            for _ in range(a.warmup):
                r.step()
        # round robin, one step of each per round: a drift of the machine's speed hits all alike
        for i in range(a.steps):
            for r in runners.values():
                r.times.append(r.step())
        torch_ms = statistics.median(runners["plain"].times)
        print("  %s plain: %.1f ms" % (name, torch_ms), file=sys.stderr)
        for key, r in runners.items():
            if key == "plain":
                continue
            nm, p, w = key
            ms = statistics.median(r.times)
            rep = [row for row in sdgp_torch.layer_report(r.model) if row["converted"]]
            sparse = sum(row["kernel"] == "sparse" for row in rep)
            unpruned = sum(not row["pruned"] for row in rep)
            p = sorted({row["mask_block"] for row in rep})  # as the layers hold it, one value
            p = p[0] if len(p) == 1 else p
            wsd = sum(row["wgrad"] == "sdgp" for row in rep)
            print("  %s %s %s P=%s wgrad=%s: %.1f ms, sparse kernel on %d of %d layers (%d unpruned), dL/dW by libsdgp on %d"
                  % (name, a.prune, nm, p, w, ms, sparse, len(rep), unpruned, wsd), file=sys.stderr)
            print(json.dumps({"model": name, "prune": a.prune, "nm": nm, "mask_block": p, "threads": a.threads,
                              "batch": a.batch, "channels_last": a.channels_last,
                              "torch_ms": round(torch_ms, 2), "converted_ms": round(ms, 2),
                              "speedup": round(torch_ms / ms, 3), "sparse_layers": "%d/%d" % (sparse, len(rep)),
                              "wgrad": w, "wgrad_sdgp_layers": "%d/%d" % (wsd, len(rep)), "kernel": a.kernel,
                              "unpruned_layers": "%d/%d" % (unpruned, len(rep)),
                              "steps": a.steps}), flush=True)
        del runners
    return 0


def _input(name: str, a: argparse.Namespace) -> torch.Tensor:
    """A random batch for the model: batch x channels x size x size."""
    c, size = INPUTS.get(name, (3, a.size))
    return torch.randn(a.batch, c, size, size)


def _method_config(method: str, a: argparse.Namespace, nm: str, name: str, model: nn.Module) -> Any:
    """sparsify_'s config for a --methods name: a list for the conv models; for a transformer a dict naming its
    MLPs' nn.Linear layers (linear1, linear2 of each block), which MVUE or SparseWeights alone take only by name."""
    modules = ("linear",) if name in LINEAR_MODELS else ("conv",)
    sd = sdgp_torch.SDGP(prune=a.prune, nm=nm, kernel=a.kernel, wgrad=a.wgrad.split(",")[0], modules=modules)
    mv = sdgp_torch.MVUEWeightGrad(nm=nm)
    sw = sdgp_torch.SparseWeights(method=a.weights, nm=nm, groups=a.groups, kernel=a.fwd_kernel)
    cfg = {"sdgp": [sd], "mvue": [mv], "weights": [sw], "all": [sd, mv, sw]}[method]
    if name not in LINEAR_MODELS:
        return cfg
    return {n: cfg for n, mod in model.named_modules() if isinstance(mod, nn.Linear) and n.endswith(("linear1", "linear2"))}


def _methods(ap: argparse.ArgumentParser, a: argparse.Namespace, names: List[str], h: Dict[str, Any]) -> int:
    """--methods: plain against each method, every format, one round robin per model."""
    methods = a.methods.split(",")
    for mt in methods:
        if mt not in METHODS:
            ap.error("--methods: %r is not one of %s" % (mt, ", ".join(METHODS)))
    fmts = (a.formats or ("channels_last" if a.channels_last else "nchw,channels_last")).split(",")
    for f in fmts:
        if f not in FORMATS:
            ap.error("--formats: %r is not nchw or channels_last" % f)
    nms = a.nm.split(",")
    for name in names:
        runners = {}  # (format, method, n:m) -> runner; "plain" once per format
        for f in fmts:
            torch.manual_seed(0)
            base = MODELS[name]().to(memory_format=FORMATS[f])
            x = _input(name, a).contiguous(memory_format=FORMATS[f])
            y = torch.randint(0, 10, (a.batch,))
            runners[(f, "plain", "")] = _Runner(copy.deepcopy(base), x, y)
            for nm in nms:
                for mt in methods:
                    if mt == "plain":
                        continue
                    model = copy.deepcopy(base)
                    try:  # strict: a benchmark of a model with layers left plain would mislead
                        sdgp_torch.sparsify_(model, _method_config(mt, a, nm, name, model), strict=True)
                    except (ValueError, TypeError) as e:
                        ap.error("%s, %s: %s" % (name, mt, e))
                    runners[(f, mt, nm)] = _Runner(model, x, y)
        for r in runners.values():  # the converted models' first step measures their kernels
            for _ in range(a.warmup):
                r.step()
        for _ in range(a.steps):  # round robin over every model of every format
            for r in runners.values():
                r.times.append(r.step())
        print("  %s, %dx%d, batch %d, %d threads, medians of %d steps (ms), speed-up over plain PyTorch:" % (
            name, a.size, a.size, a.batch, a.threads, a.steps), file=sys.stderr)
        for f in fmts:
            torch_ms = statistics.median(runners[(f, "plain", "")].times)
            line = ["%-13s plain %7.1f" % (f, torch_ms)]
            for (f2, mt, nm), r in runners.items():
                if f2 != f or mt == "plain":
                    continue
                ms = statistics.median(r.times)
                rep = [row for row in sdgp_torch.layer_report(r.model) if row["converted"]]
                sw = [row for row in rep if "fwd_kernel" in row]
                fwd_sparse = sum(row["fwd_kernel"] not in ("dense", "off") for row in sw)
                line.append("%s %s %7.1f %.3fx" % (mt, nm, ms, torch_ms / ms))
                print(json.dumps({"mode": "methods", "model": name, "method": mt, "format": f, "size": a.size,
                                  "nm": nm, "batch": a.batch, "threads": a.threads, "torch_ms": round(torch_ms, 2),
                                  "ms": round(ms, 2), "speedup": round(torch_ms / ms, 3), "prune": a.prune,
                                  "kernel": a.kernel, "weights": a.weights, "groups": a.groups,
                                  "fwd_kernel": a.fwd_kernel, "fwd_sparse_layers": "%d/%d" % (fwd_sparse, len(sw)),
                                  "layers": len(rep), "steps": a.steps, "host": h}), flush=True)
            print("    " + " | ".join(line), file=sys.stderr)
        del runners
    return 0


def _overhead_rows(name, runners, a):
    """--overhead: each converted model alone (no plain peer to compare with), warmup then timed steps."""
    for (nm, p, _), r in runners.items():
        for _ in range(a.warmup):  # not timed: with --kernel auto the first step measures both kernels
            r.step()
        with _overhead.OverheadProbe() as probe:
            for _ in range(a.steps):
                r.step()
        rows = probe.rows(model=name, prune=a.prune, nm=nm, mask_block=p, threads=a.threads, batch=a.batch,
                          channels_last=a.channels_last)
        s = rows[-1]
        print("  %s %s %s P=%d: backward %.2f ms over %d layers, overhead %.3f ms (%.2f %%, layout %.3f ms, python "
              "%.3f ms), largest layer %.2f %%" % (name, a.prune, nm, p, s["backward_ms"], s["layers"], s["overhead_ms"],
                                                   s["overhead_pct"], s["layout_ms"], s["python_ms"],
                                                   s["max_layer_pct"]), file=sys.stderr)
        for row in rows:
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    sys.exit(main())
