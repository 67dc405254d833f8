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
Progress goes to stderr.
"""
import argparse
import copy
import json
import statistics
import sys
import time

import torch
import torch.nn as nn

from . import _overhead
from . import models
from . import torch as sdgp_torch
from . import isa as _isa

MODELS = {"resnet18": lambda: models.resnet18(10, 3), "resnet9": lambda: models.resnet9(10, 3, 1.0)}


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
    ap.add_argument("--nm", default="2:4,1:4,4:32", help="comma list of N:M (default 2:4,1:4,4:32)")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--batch", type=int, default=32, help="batch size (default 32), images 32x32x3")
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
    a = ap.parse_args(argv)
    names = a.models.split(",")
    for nme in names:
        if nme not in MODELS:
            ap.error("unknown model %r (expected %s)" % (nme, ", ".join(MODELS)))
    if a.threads < 1 or a.batch < 1 or a.steps < 1 or a.warmup < 1:
        ap.error("--threads, --batch, --steps and --warmup must be >= 1")
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
    print("sdgp.bench: torch %s, %d threads, sdgp ISA %s, batch %d, %d+%d steps" %
          (torch.__version__, torch.get_num_threads(), _isa(), a.batch, a.warmup, a.steps), file=sys.stderr)
    for name in names:
        torch.manual_seed(0)
        base = MODELS[name]().to(memory_format=fmt)
        x = torch.randn(a.batch, 3, 32, 32).contiguous(memory_format=fmt)
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
