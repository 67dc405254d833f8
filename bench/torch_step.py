"""PyTorch's training step on the same model, batch and thread count: the peer of `sdgp bench step`.

Prints one JSON object: {"ms": median step time, "rss_mb": peak RSS of this process,
"memory_format": ..., "torch": version}. Usage:
  torch_step.py --model resnet9 --width 1 --hwc 32,32,3 --batch 64 --threads 2 --steps 10
--model is a name of sdgp's model registry; make_model() builds its PyTorch twin (also the oracle
of tests/golden_zoo.py, so the benchmark's peer is the model that test checks).
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
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from torch_models import ResNet9, SmallCNN, resnet18, scaled_channels  # noqa: E402
from torch_models import param_groups as _named_param_groups  # noqa: E402


def _scaled_resnet(block, layers, in_ch, classes, width, imagenet_stem=False):
    """torchvision's ResNet with channels 64/128/256/512 (x expansion) scaled by width as sdgp scales
    them, and sdgp's small-image stem (3x3 stride-1 conv, no max pool) unless imagenet_stem. At width
    1 it is torchvision.models.resnet18/50 (with the stem change) module for module
    (tests/golden_zoo.py checks that); other widths reuse torchvision's blocks and _make_layer, so
    every module name matches torchvision's state_dict."""
    import torchvision.models.resnet as tvr

    class SmallStemResNet(tvr.ResNet):
        def __init__(self):
            nn.Module.__init__(self)
            self._norm_layer, self.dilation, self.groups, self.base_width = nn.BatchNorm2d, 1, 1, 64
            c = [scaled_channels(width, b) for b in (64, 128, 256, 512)]
            self.inplanes = c[0]
            self.conv1 = nn.Conv2d(in_ch, c[0], 7, 2, 3, bias=False) if imagenet_stem else nn.Conv2d(in_ch, c[0], 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(c[0])
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1) if imagenet_stem else nn.Identity()
            self.layer1 = self._make_layer(block, c[0], layers[0])
            self.layer2 = self._make_layer(block, c[1], layers[1], stride=2)
            self.layer3 = self._make_layer(block, c[2], layers[2], stride=2)
            self.layer4 = self._make_layer(block, c[3], layers[3], stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(c[3] * block.expansion, classes)

    return SmallStemResNet()


def torchvision_resnet(kind, in_ch, classes):
    """torchvision.models.resnet18 itself with the small-image stem (sdgp.models.resnet18, the model of
    python3 -m sdgp.bench), or resnet50 itself (its ImageNet stem; conv1 replaced only for another
    number of input channels)."""
    import torchvision

    if kind == "resnet18":
        return resnet18(classes, in_ch)
    m = torchvision.models.resnet50(num_classes=classes)
    if in_ch != 3:
        m.conv1 = nn.Conv2d(in_ch, 64, 7, 2, 3, bias=False)
    return m


def regnetx400mf(in_ch, classes, width):
    """torchvision's regnet_x_400mf (at width 1 the model itself, the stem conv taking in_ch channels);
    other widths: torchvision's RegNet with the same depths, widths x width rounded to multiples of the
    group width 16, as sdgp's builder."""
    import torchvision.models.regnet as tvg
    if width == 1.0:
        model = tvg.regnet_x_400mf(num_classes=classes)
    else:
        w = [max(16, int(round(width * b / 16.0)) * 16) for b in (32, 64, 160, 400)]
        params = tvg.BlockParams(depths=[1, 2, 7, 12], widths=w, group_widths=[16] * 4,
                                 bottleneck_multipliers=[1.0] * 4, strides=[2] * 4)
        model = tvg.RegNet(params, num_classes=classes, stem_width=max(16, int(round(width * 32 / 16.0)) * 16))
    if in_ch != 3:
        old = model.stem[0]
        model.stem[0] = nn.Conv2d(in_ch, old.out_channels, 3, 2, 1, bias=False)
    return model


def make_model(kind, in_ch, classes, width):
    """The PyTorch twin of sdgp's registry model `kind`."""
    if kind == "resnet9":
        return ResNet9(in_ch, classes, width)
    if kind == "smallcnn":
        return SmallCNN(in_ch, classes, width)
    if kind in ("resnet18", "resnet50"):
        if width == 1.0:
            return torchvision_resnet(kind, in_ch, classes)
        import torchvision.models.resnet as tvr
        if kind == "resnet18":
            return _scaled_resnet(tvr.BasicBlock, [2, 2, 2, 2], in_ch, classes, width)
        return _scaled_resnet(tvr.Bottleneck, [3, 4, 6, 3], in_ch, classes, width, imagenet_stem=True)
    if kind == "regnetx400mf":
        return regnetx400mf(in_ch, classes, width)
    raise ValueError(f"no PyTorch twin for model {kind!r}")


def param_groups(model, weight_decay):
    """Weight decay on conv and linear weights only, as sdgp (not on BatchNorm parameters, biases)."""
    if isinstance(model, (ResNet9, SmallCNN)):
        return _named_param_groups(model, weight_decay)
    modules = dict(model.named_modules())
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        owner, leaf = name.rsplit(".", 1)
        (decay if leaf == "weight" and isinstance(modules[owner], (nn.Conv2d, nn.Linear)) else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


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
        model = make_model(a.model, c, 10, a.width).to(memory_format=fmt).train()
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
