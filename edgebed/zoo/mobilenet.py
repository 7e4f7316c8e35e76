"""A small MobileNet-style CNN (Howard et al. 2017) for 28–32 px images: a 3×3 stem, then depthwise
separable blocks (3×3 depthwise conv + BN + ReLU, 1×1 pointwise conv + BN + ReLU) with channels
64, 128, 128, 256, 256 × ``width`` (strides 1, 2, 1, 2, 1), global average pooling and a linear
classifier."""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F

PLAN = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1))


class Separable(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.dw = nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False)
        self.bn1 = nn.BatchNorm2d(cin)
        self.pw = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)

    def forward(self, x):
        return F.relu(self.bn2(self.pw(F.relu(self.bn1(self.dw(x))))))


class MobileNetSmall(nn.Module):
    """``width``: channel multiplier (1.0: 32-channel stem, 256 at the end); ``in_channels`` of the
    images; any image size (pooling is global)."""

    def __init__(self, width: float = 1.0, in_channels: int = 3, num_classes: int = 10):
        super().__init__()
        c = lambda k: max(8, int(k * width))  # noqa: E731
        self.stem = nn.Conv2d(in_channels, c(32), 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(c(32))
        layers, cin = [], c(32)
        for cout, stride in PLAN:
            layers.append(Separable(cin, c(cout), stride))
            cin = c(cout)
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.layers(F.relu(self.bn(self.stem(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
