#!/usr/bin/env python3
"""A small Vision Transformer on Fashion-MNIST, trained with SDGP on its linear layers: sdgp.torch.sparsify_
prunes the output gradient dL/dY of each converted nn.Linear to N:M along the output features before it
computes dL/dX.

    PYTHONPATH=python python3 examples/vit_fashion_mnist.py --epochs 10
    PYTHONPATH=python python3 examples/vit_fashion_mnist.py --steps 50            # a quick smoke run
    PYTHONPATH=python python3 examples/vit_fashion_mnist.py --method dense        # plain PyTorch, to compare

The model: 4x4 patches (49 tokens of 28x28 images) embedded by a 4x4 stride-4 conv, a class token and
learned position embeddings, --depth pre-norm nn.TransformerEncoderLayer blocks (--width, --heads, MLP
ratio 4, GELU), a LayerNorm and a linear head. What SDGP converts: each block's MLP (linear1,
linear2). The patch embedding reads the image (no data gradient to prune); nn.MultiheadAttention's
projections stay PyTorch's: its in-projection is a parameter, not a module, and its forward uses
out_proj's weight directly (never out_proj's forward). The head is the classifier (sparsify_ leaves it, as the paper does). Data: Debian's dataset-fashion-mnist,
read as examples/torch_resnet18_fmnist.py does. --log FILE writes one JSON line per epoch.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_resnet18_fmnist import augment, configs, evaluate, setup  # noqa: E402  (the same data, loop, configs)

import sdgp.torch  # noqa: E402
from sdgp.models import ViT  # noqa: E402  (the model, shared with python3 -m sdgp.bench)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="directory of the idx .gz files")
    ap.add_argument("--method", choices=("dense", "sdgp", "sdgp+mvue", "all"), default="sdgp",
                    help="plain PyTorch, SDGP on the MLPs' data gradients, with MVUE on their weight gradients too, "
                         "or also S-STE 2:4 weights (all)")
    ap.add_argument("--prune", default="rescaled", help="SDGP's pruning function (default rescaled)")
    ap.add_argument("--nm", default="2:4", help="N:M (default 2:4)")
    ap.add_argument("--mask-block", type=int, default=1,
                    help="P > 1: P consecutive tokens of an image share SDGP's masks (default 1: a mask per token)")
    ap.add_argument("--groups", default="tap", help="the S-STE weights' mask groups under --method all: tap (per "
                    "output feature), block16, block32 (the sparse forward kernels' forms) or cout (default tap)")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--steps", type=int, default=0, help="train this many steps instead of --epochs")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (AdamW, warm-up then cosine)")
    ap.add_argument("--width", type=int, default=192)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    ap.add_argument("--eval-images", type=int, default=10000, help="test images to evaluate on (default all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--log", default="", help="JSON lines: one object per epoch (and at the end)")
    a = ap.parse_args()
    gen, xtr, ytr, xte, yte = setup(a)
    model = ViT(a.width, a.depth, a.heads)
    cfg = configs(a.method, a.prune, a.nm, ("conv", "linear"), a.mask_block, a.groups)
    converted = []
    if cfg is not None:
        converted = sdgp.torch.sparsify_(model, cfg).converted
    per_epoch = len(xtr) // a.batch
    total = a.steps if a.steps > 0 else per_epoch * a.epochs
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n and "token" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embed" not in n and "token" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}], lr=a.lr)
    warm = max(1, min(total // 10, 2 * per_epoch))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, total - warm))))
    print("ViT (width %d, depth %d, %d heads, 49 tokens) on Fashion-MNIST: %s, %d converted layers, %d steps of %d images, "
          "%d threads" % (a.width, a.depth, a.heads, "plain PyTorch" if cfg is None else "%s %s %s%s%s" % (
                              a.method.upper(), a.prune, a.nm, " mask_block %d" % a.mask_block if a.mask_block > 1 else "",
                              " weights %s" % a.groups if a.method == "all" and a.groups != "tap" else ""),
                          len(converted), total, a.batch, torch.get_num_threads()), flush=True)
    log = open(a.log, "w") if a.log else None
    step, t0, seen, loss_sum, losses, train_s = 0, time.time(), 0, 0.0, 0, 0.0
    while step < total:
        perm = torch.randperm(len(xtr), generator=gen)
        for i in range(per_epoch):
            if step >= total:
                break
            idx = perm[i * a.batch:(i + 1) * a.batch]
            ts = time.time()
            loss = F.cross_entropy(model(augment(xtr[idx], gen)), ytr[idx], label_smoothing=0.1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            train_s += time.time() - ts
            step += 1
            seen += len(idx)
            loss_sum, losses = loss_sum + loss.item(), losses + 1
            if step % a.log_every == 0 or step == total:
                el = time.time() - t0
                print("step %d/%d  epoch %.2f  loss %.4f  %.1f img/s  %.0f s" %
                      (step, total, step / per_epoch, loss_sum / losses, seen / el, el), flush=True)
                loss_sum, losses = 0.0, 0
            if log and (step % per_epoch == 0 or step == total):
                acc = evaluate(model, xte, yte, 500)
                log.write(json.dumps({"step": step, "epoch": step / per_epoch, "test_acc": acc, "method": a.method,
                                      "nm": a.nm, "mask_block": a.mask_block, "seed": a.seed, "train_s": round(train_s, 3),
                                      "ms_per_step": round(1e3 * train_s / step, 3)}) + "\n")
                log.flush()
    acc = evaluate(model, xte, yte, 500)
    print("test accuracy: %.2f %% on %d images (%.0f s total, %.1f ms per training step)" %
          (100 * acc, len(xte), time.time() - t0, 1e3 * train_s / max(1, step)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
