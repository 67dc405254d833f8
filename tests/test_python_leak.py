"""sdgp's Python package does not leak: 1,000 small training steps of a converted layer (sparse
kernel, plans created and freed as the batch size changes), sdgp.prune calls and failing calls, with
the resident set size flat. A positive control first shows that the measurement sees a leak of the
size a lost buffer per step would cause.
Run: SDGP_LIBRARY=build/libsdgp.so PYTHONPATH=python python3 tests/test_python_leak.py"""
import gc
import os
import sys

import numpy as np
import torch
import torch.nn as nn

import sdgp
import sdgp.torch as st

from python_harness import check, finish  # noqa: E402 (tests/ is the script's directory)


def rss():
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


torch.manual_seed(0)
torch.set_num_threads(2)
# tiny but not trivial: a lost plan (packed weights, entries) or dD per step is >= 16 KiB
model = st.convert_model(nn.Sequential(nn.Conv2d(32, 32, 3, 1, 1), nn.ReLU(), nn.Conv2d(32, 32, 3, 1, 1)),
                         prune="rescaled", nm="2:4", kernel="sparse")
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
xs = {b: torch.randn(b, 32, 8, 8) for b in range(1, 7)}
a = np.random.default_rng(0).standard_normal((4, 8, 8, 32)).astype(np.float32)
bad = np.ones((2, 6), np.float32)


def step(i, keep=None):
    b = 2 if i % 10 else 1 + (i // 10) % 6  # every 10th step another batch size: plans come and go
    x = xs[b].clone().requires_grad_()
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    sdgp.prune(a, "mvue", "2:4", step=i)
    v, idx = sdgp.prune(torch.from_numpy(a), "rescaled", "1:4", compressed=True)
    try:
        sdgp.prune(bad)
    except ValueError:
        pass
    if keep is not None:
        keep.append(x.grad)  # the control: 8 KiB..48 KiB held per step


for i in range(100):  # warm up: allocator pools, OpenMP threads, plan cache full
    step(i)
base = rss()
kept = []
for i in range(200):
    step(i, kept)
control = rss() - base
held = sum(t.numel() * 4 for t in kept)
check(control > held // 2, "control: the RSS shows %d held bytes (grew %d)" % (held, control))
del kept
for i in range(100):
    step(i)
start = rss()
for i in range(1000):
    step(i)
grew = rss() - start
plans = sum(len(m._sdgp.plans) for m in model.modules() if isinstance(m, st.SdgpConv2d))
check(0 < plans <= st._PLAN_CACHE, "the plans stay within the cache (%d)" % plans)
# a lost 16 KiB per step would be 16 MB here; allow allocator noise
check(grew < 2 * 1024 * 1024, "1000 steps: RSS grew %d bytes" % grew)
print("RSS %.1f MB, +%.2f MB over 1000 steps (control: +%.1f MB for %.1f MB held)" %
      (start / 2 ** 20, grew / 2 ** 20, control / 2 ** 20, held / 2 ** 20))
finish()
