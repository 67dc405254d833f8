"""Models of the benchmark and the examples (plain PyTorch; convert them with sdgp.torch.convert_model)."""
import torch.nn as nn


def resnet18(num_classes=10, in_channels=3):
    """torchvision's ResNet-18 for small images: a 3x3 stride-1 stem and no max-pool (the usual
    CIFAR-size variant), in_channels input channels."""
    import torchvision  # Debian: python3-torchvision
    m = torchvision.models.resnet18(num_classes=num_classes)
    m.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    return m


def _conv_bn(cin, cout, k=3, stride=1, pad=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, pad, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class _Residual(nn.Module):
    def __init__(self, *layers):
        super().__init__()
        self.f = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.f(x)


class _Scale(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s

    def forward(self, x):
        return x * self.s


def resnet9(num_classes=10, in_channels=3, width=1.0):
    """sdgp's ResNet-9 (src/model/model_build.c, python/torch_models.py): 8 conv-BN-ReLU layers, the
    second 5x5 stride 2, two residual blocks, the last conv unpadded, global max-pool, linear x 0.2."""
    def ch(base):
        return max(int(round(width * base / 32.0)) * 32, 32)
    c1, c2, c3 = ch(128), ch(256), ch(512)
    return nn.Sequential(
        _conv_bn(in_channels, c1), _conv_bn(c1, c2, 5, 2, 2),
        _Residual(_conv_bn(c2, c2), _conv_bn(c2, c2)),
        _conv_bn(c2, c3), nn.MaxPool2d(2),
        _Residual(_conv_bn(c3, c3), _conv_bn(c3, c3)),
        _conv_bn(c3, c2, 3, 1, 0), nn.AdaptiveMaxPool2d(1), nn.Flatten(),
        nn.Linear(c2, num_classes, bias=False), _Scale(0.2))
