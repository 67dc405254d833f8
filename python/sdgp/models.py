"""Models in plain PyTorch (convert them with sdgp.torch.convert_model): the benchmark's and the example's,
and the PyTorch twins of sdgp's own models (src/model/model_build.c).

    resnet18(num_classes, in_channels)          torchvision's ResNet-18 for small images
    resnet9(num_classes, in_channels, width)    sdgp's ResNet-9 (a ResNet9)
    ViT(width, depth, heads, ...)               a small Vision Transformer (examples/vit_fashion_mnist.py)
    ResNet9, SmallCNN                           the twins; named_tensors() gives sdgp's parameter names

The twins are the only definition of these architectures in Python: the golden tests
(tests/golden_*.py) check them against sdgp's C models step for step, and bench/torch_step.py runs them
as the PyTorch peer of `sdgp bench step`. Those scripts import this file through python/torch_models.py,
which loads it without the package (they need torch only, not libsdgp). So this module imports torch
and nothing of sdgp.

Parameter names match sdgp's through named_tensors(): conv<i>.weight, bn<i>.weight/bias/running_mean/
running_var, linear.weight(/bias); e.g. a file written by `sdgp export` loads into ResNet9 by them.
A ConvBN can prune its output gradient for the data gradient only, by an elementwise factor handed over
from sdgp (pruned dL/dO = factor * dL/dO), which replays sdgp's masks exactly (the golden tests' hook).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ViT(nn.Module):
    """A small Vision Transformer: patch x patch patches embedded by a stride-patch conv, a class token and
    learned position embeddings, depth pre-norm nn.TransformerEncoderLayer blocks (MLP ratio 4, GELU), a
    LayerNorm and a linear head on the class token."""

    def __init__(self, width=192, depth=6, heads=3, patch=4, image=28, channels=1, classes=10, dropout=0.0):
        super().__init__()
        tokens = (image // patch) ** 2
        self.patch_embed = nn.Conv2d(channels, width, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, width))
        self.pos_embed = nn.Parameter(torch.randn(1, tokens + 1, width) * 0.02)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(width, heads, 4 * width, dropout, activation="gelu", batch_first=True,
                                       norm_first=True) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # B x tokens x width
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x[:, 0]))


def resnet18(num_classes=10, in_channels=3):
    """torchvision's ResNet-18 for small images: a 3x3 stride-1 stem and no max-pool (the usual
    CIFAR-size variant), in_channels input channels."""
    import torchvision  # Debian: python3-torchvision
    m = torchvision.models.resnet18(num_classes=num_classes)
    m.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    return m


def resnet9(num_classes=10, in_channels=3, width=1.0):
    """sdgp's ResNet-9 (ResNet9 below): 8 conv-BN-ReLU layers, the second 5x5 stride 2, two residual
    blocks, the last conv unpadded, global max-pool, linear x 0.2; channels 128/256/512 x width."""
    return ResNet9(in_channels, num_classes, width)


def scaled_channels(width, base):
    """sdgp's channel scaling: base x width rounded to a multiple of 32, at least 32."""
    c = int(round(width * base / 32.0)) * 32
    return max(c, 32)


class _PrunedConvFn(torch.autograd.Function):
    """conv2d whose backward prunes dL/dO for dL/dD only; dL/dW uses the dense dL/dO."""

    @staticmethod
    def forward(ctx, x, w, stride, pad, factor, groups=1):
        ctx.save_for_backward(x, w, factor)
        ctx.stride, ctx.pad, ctx.groups = stride, pad, groups
        return F.conv2d(x, w, None, stride, pad, 1, groups)

    @staticmethod
    def backward(ctx, go):
        x, w, factor = ctx.saved_tensors
        gx = None
        if ctx.needs_input_grad[0]:
            gx = torch.nn.grad.conv2d_input(x.shape, w, go * factor, ctx.stride, ctx.pad, groups=ctx.groups)
        gw = torch.nn.grad.conv2d_weight(x, w.shape, go, ctx.stride, ctx.pad, groups=ctx.groups)
        return gx, gw, None, None, None, None


class ConvBN(nn.Module):
    def __init__(self, cin, cout, k=3, stride=1, pad=1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, pad, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)
        self.factor = None  # NCHW tensor: prune dL/dO by this elementwise factor
        self.weight_fn = None  # the products use weight_fn(weight) (sparse weights; the STE is its own)

    def forward(self, x):
        w = self.conv.weight if self.weight_fn is None else self.weight_fn(self.conv.weight)
        if self.factor is None:
            z = self.conv(x) if self.weight_fn is None else F.conv2d(x, w, None, self.conv.stride, self.conv.padding)
        else:
            z = _PrunedConvFn.apply(x, w, self.conv.stride, self.conv.padding, self.factor)
        return F.relu(self.bn(z))


class Residual(nn.Module):
    def __init__(self, *layers):
        super().__init__()
        self.f = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.f(x)


class ResNet9(nn.Module):
    """sdgp's ResNet-9 (KakaoBrain / ffcv, with a width multiplier). .convs lists the ConvBN layers in
    sdgp's order (conv<i>)."""

    def __init__(self, in_ch=3, classes=10, width=1.0, scale=0.2):
        super().__init__()
        c1, c2, c3 = (scaled_channels(width, b) for b in (128, 256, 512))
        self.convs = [ConvBN(in_ch, c1), ConvBN(c1, c2, 5, 2, 2), ConvBN(c2, c2), ConvBN(c2, c2),
                      ConvBN(c2, c3), ConvBN(c3, c3), ConvBN(c3, c3), ConvBN(c3, c2, 3, 1, 0)]
        cv = self.convs
        self.body = nn.Sequential(cv[0], cv[1], Residual(cv[2], cv[3]), cv[4], nn.MaxPool2d(2),
                                  Residual(cv[5], cv[6]), cv[7], nn.AdaptiveMaxPool2d(1), nn.Flatten())
        self.linear = nn.Linear(c2, classes, bias=False)
        self.scale = scale

    def forward(self, x):
        return self.linear(self.body(x)) * self.scale


class SmallCNN(nn.Module):
    """sdgp's small CNN: two conv-BN-ReLU layers with max-pools, global max-pool, linear."""

    def __init__(self, in_ch=1, classes=10, width=1.0):
        super().__init__()
        c1, c2 = scaled_channels(width, 32), scaled_channels(width, 64)
        self.convs = [ConvBN(in_ch, c1), ConvBN(c1, c2)]
        self.body = nn.Sequential(self.convs[0], nn.MaxPool2d(2), self.convs[1], nn.MaxPool2d(2),
                                  nn.AdaptiveMaxPool2d(1), nn.Flatten())
        self.linear = nn.Linear(c2, classes, bias=True)

    def forward(self, x):
        return self.linear(self.body(x))


def named_tensors(model):
    """sdgp's parameter names -> the torch tensors (parameters and BatchNorm buffers) of a ResNet9 or
    SmallCNN."""
    out = {}
    for i, cb in enumerate(model.convs):
        out[f"conv{i}.weight"] = cb.conv.weight
        out[f"bn{i}.weight"] = cb.bn.weight
        out[f"bn{i}.bias"] = cb.bn.bias
        out[f"bn{i}.running_mean"] = cb.bn.running_mean
        out[f"bn{i}.running_var"] = cb.bn.running_var
    out["linear.weight"] = model.linear.weight
    if model.linear.bias is not None:
        out["linear.bias"] = model.linear.bias
    return out


def param_groups(model, weight_decay):
    """Weight decay on conv and linear weights only, as sdgp (not on BatchNorm parameters)."""
    decay, no_decay = [], []
    for name, t in named_tensors(model).items():
        if not t.requires_grad:
            continue
        (decay if name.endswith(".weight") and not name.startswith("bn") else no_decay).append(t)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
