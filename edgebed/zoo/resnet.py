"""ResNet for 32×32 images (He et al. 2016, §4.2): a 3×3 conv, three stages of n basic blocks with
``width``, 2·``width``, 4·``width`` channels (stride 2 between stages), global average pooling and a
linear classifier; depth = 6n + 2 (ResNet-20: n = 3, 0.27 M parameters at width 16). Every conv is
followed by BatchNorm; a block that changes shape has a 1×1 conv + BN shortcut (option B)."""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.short(x))


class ResNet(nn.Module):
    """``depth`` = 6n + 2 layers; ``width``: channels of the first stage; ``in_channels`` of the
    images (1: Fashion-MNIST, 3: CIFAR); any image size (pooling is global)."""

    def __init__(self, depth: int = 20, width: int = 16, in_channels: int = 3, num_classes: int = 10):
        super().__init__()
        if depth < 8 or (depth - 2) % 6:
            raise ValueError(f"model.args.depth {depth}: a CIFAR ResNet has depth 6n + 2 (8, 14, 20, 32, 44, 56)")
        n = (depth - 2) // 6
        self.conv = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(width)
        blocks, cin = [], width
        for stage, cout in enumerate((width, 2 * width, 4 * width)):
            for i in range(n):
                blocks.append(Block(cin, cout, 2 if stage and not i else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.blocks(F.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
