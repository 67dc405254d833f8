#!/usr/bin/env python3
"""torchvision's ResNet-18 (3x3 stem, no max-pool, 1 input channel) on Fashion-MNIST, trained with
SDGP (sdgp.torch.SDGP prunes each conv's dL/dO to N:M for its data gradient) or with all three methods
(with MVUEWeightGrad on the weight gradients and SparseWeights, S-STE N:M weights).

    PYTHONPATH=python python3 examples/torch_resnet18_fmnist.py --epochs 1
    PYTHONPATH=python python3 examples/torch_resnet18_fmnist.py --steps 50      # a quick smoke run
    PYTHONPATH=python python3 examples/torch_resnet18_fmnist.py --method plain  # plain PyTorch, to compare
    PYTHONPATH=python python3 examples/torch_resnet18_fmnist.py --method all    # the three methods

Data: the idx .gz files of /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist),
read with numpy. Needs python3-torchvision. One epoch is 469 steps of 128 images; on 2 cores a
step takes seconds, so a full epoch is tens of minutes.
"""
import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import sdgp.torch
from sdgp.models import resnet18


def load_idx(path):
    with gzip.open(path) as f:
        data = f.read()
    magic = int.from_bytes(data[:4], "big")
    ndim = magic & 0xFF
    if magic >> 8 != 0x08 or ndim < 1:  # 0x08: unsigned bytes
        raise ValueError("%s: not an idx file of unsigned bytes (magic %#x)" % (path, magic))
    shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_split(root, split):
    x = load_idx(os.path.join(root, "%s-images-idx3-ubyte.gz" % split))
    y = load_idx(os.path.join(root, "%s-labels-idx1-ubyte.gz" % split))
    # Fashion-MNIST's mean and std of the training pixels
    x = (torch.from_numpy(x.astype(np.float32)).unsqueeze(1) / 255.0 - 0.2860) / 0.3530
    return x, torch.from_numpy(y.astype(np.int64))


def augment(x, gen):
    """Random crop with 2-pixel zero padding and horizontal flips, per batch on the CPU."""
    B = x.shape[0]
    p = F.pad(x, (2, 2, 2, 2))
    dx, dy = torch.randint(0, 5, (2,), generator=gen).tolist()  # one offset per batch: cheap
    x = p[:, :, dy:dy + 28, dx:dx + 28]
    flip = torch.rand(B, generator=gen) < 0.5
    x = torch.where(flip[:, None, None, None], x.flip(3), x)
    return x.contiguous()


def evaluate(model, x, y, batch):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            correct += (model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return correct / len(x)


def configs(method, prune, nm, modules=("conv",), mask_block=1, groups="tap"):
    """sparsify_'s configs of a --method: None for plain PyTorch ("plain" or "dense"), SDGP alone ("sdgp"), with
    MVUE's weight gradient ("sdgp+mvue"), or all three with S-STE weights ("all"). groups: the S-STE masks' (tap:
    per output channel or feature along the inputs; block16 / block32: shared by 16 / 32 outputs, which libsdgp's
    sparse forward kernels skip; cout: along the outputs)."""
    if method in ("plain", "dense"):
        return None
    sd = sdgp.torch.SDGP(prune=prune, nm=nm, modules=modules, mask_block=mask_block)
    if method == "sdgp":
        return sd
    both = [sd, sdgp.torch.MVUEWeightGrad(nm=nm)]  # both gradients
    return both if method == "sdgp+mvue" else both + [sdgp.torch.SparseWeights(method="sste", nm=nm, groups=groups)]


def setup(a):
    """The flags every example shares (--threads, --seed, --data, --eval-images): threads and seeds set, the
    augmentation's generator, the training split and the evaluated part of the test split. A missing data
    directory ends the program with a message."""
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    try:
        xtr, ytr = load_split(a.data, "train")
        xte, yte = load_split(a.data, "t10k")
    except OSError as e:
        sys.exit("cannot read Fashion-MNIST: %s (install dataset-fashion-mnist or pass --data)" % e)
    return gen, xtr, ytr, xte[:a.eval_images], yte[:a.eval_images]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="directory of the idx .gz files")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0, help="train this many steps instead of --epochs")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05, help="peak learning rate (SGD Nesterov, linear warm-up and decay)")
    ap.add_argument("--prune", default="rescaled", help="pruning function (default rescaled)")
    ap.add_argument("--nm", default="2:4", help="N:M (default 2:4)")
    ap.add_argument("--method", choices=("plain", "sdgp", "all"), default="sdgp",
                    help="plain PyTorch, SDGP alone, or all three methods (default sdgp)")
    ap.add_argument("--no-sdgp", action="store_true", help="the same as --method plain")
    ap.add_argument("--groups", default="block32", help="SparseWeights' groups under --method all (default block32)")
    ap.add_argument("--channels-last", action="store_true", help="the model and its inputs in channels_last")
    ap.add_argument("--log", help="append a JSON line per evaluation (the end of the run) to this file")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    ap.add_argument("--eval-images", type=int, default=10000, help="test images to evaluate on (default all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=20)
    a = ap.parse_args()
    if a.no_sdgp:
        a.method = "plain"
    gen, xtr, ytr, xte, yte = setup(a)
    model = resnet18(num_classes=10, in_channels=1)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    cfg = configs(a.method, a.prune, a.nm, groups=a.groups)
    if cfg is not None:
        sdgp.torch.sparsify_(model, cfg)
    per_epoch = len(xtr) // a.batch
    total = a.steps if a.steps > 0 else per_epoch * a.epochs
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    warm = max(1, total // 4)  # linear warm-up to the peak over a quarter of the run, then linear decay to 0
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm))))
    print("ResNet-18 on Fashion-MNIST: %s, %d steps of %d images, %d threads" %
          ("plain PyTorch" if a.method == "plain" else "%s %s %s" % ("SDGP" if a.method == "sdgp" else
                                                                      "all three (+ MVUE, S-STE %s)" % a.groups, a.prune, a.nm),
           total, a.batch, torch.get_num_threads()),
          flush=True)
    step, t0, seen, loss_sum, losses = 0, time.time(), 0, 0.0, 0
    while step < total:
        perm = torch.randperm(len(xtr), generator=gen)
        for i in range(per_epoch):
            if step >= total:
                break
            idx = perm[i * a.batch:(i + 1) * a.batch]
            loss = F.cross_entropy(model(augment(xtr[idx], gen).to(memory_format=fmt)), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            seen += len(idx)
            loss_sum, losses = loss_sum + loss.item(), losses + 1
            if step % a.log_every == 0 or step == total:
                el = time.time() - t0
                print("step %d/%d  epoch %.2f  loss %.4f  %.1f img/s  %.0f s" %
                      (step, total, step / per_epoch, loss_sum / losses, seen / el, el), flush=True)
                loss_sum, losses = 0.0, 0
    if a.method != "plain":
        rep = [r for r in sdgp.torch.layer_report(model) if r["converted"]]
        print("sparse kernel on %d of %d converted conv layers (dense on the rest: measured faster there)" %
              (sum(r["kernel"] == "sparse" for r in rep), len(rep)))
    acc = evaluate(model, xte.to(memory_format=fmt), yte, 500)
    el = time.time() - t0
    print("test accuracy: %.2f %% on %d images (%.0f s total)" % (100 * acc, len(xte), el), flush=True)
    if a.log:
        with open(a.log, "a") as log:
            log.write(json.dumps({"method": a.method, "prune": a.prune, "nm": a.nm, "groups": a.groups, "seed": a.seed,
                                  "steps": step, "epochs": step / per_epoch, "batch": a.batch, "test_acc": acc,
                                  "eval_images": len(xte), "seconds": el, "img_per_s": seen / el,
                                  "channels_last": a.channels_last}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
