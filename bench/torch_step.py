"""PyTorch's training step on the same model, batch and thread count: the peer of `sdgp bench step`.

Prints one JSON object: {"ms": median step time, "rss_mb": peak RSS of this process,
"memory_format": ..., "torch": version}. Usage:
  torch_step.py --model resnet9 --width 1 --hwc 32,32,3 --batch 64 --threads 2 --steps 10
The step is the same as sdgp's: forward in training mode, cross-entropy with label smoothing 0.1,
backward, SGD with momentum 0.9 and weight decay 5e-4 (not on BatchNorm parameters).
Both memory formats are tried (channels_last and contiguous) and the faster one is reported,
so the comparison is against PyTorch at its best on this CPU.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from torch_models import ResNet9, SmallCNN, param_groups  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet9")
    ap.add_argument("--width", type=float, default=1.0)
    ap.add_argument("--hwc", default="32,32,3")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--formats", default="channels_last,contiguous")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    h, w, c = (int(v) for v in a.hwc.split(","))
    best = None
    for fmt_name in a.formats.split(","):
        fmt = torch.channels_last if fmt_name == "channels_last" else torch.contiguous_format
        model = ResNet9(c, 10, a.width) if a.model == "resnet9" else SmallCNN(c, 10, a.width)
        model = model.to(memory_format=fmt).train()
        opt = torch.optim.SGD(param_groups(model, 5e-4), lr=0.01, momentum=0.9)
        x = torch.randn(a.batch, c, h, w).to(memory_format=fmt)
        y = torch.randint(0, 10, (a.batch,))
        times = []
        for i in range(a.steps + 2):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
            loss.backward()
            opt.step()
            if i >= 2:  # two warm-up steps
                times.append(time.perf_counter() - t0)
        ms = 1e3 * statistics.median(times)
        if best is None or ms < best[0]:
            best = (ms, fmt_name)
        del model, opt, x
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"ms": best[0], "rss_mb": rss_mb, "memory_format": best[1], "torch": torch.__version__}))


if __name__ == "__main__":
    main()
