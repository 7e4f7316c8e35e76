"""{{name}}'s model: a small BatchNorm CNN for 1×28×28 images in 10 classes, as an edgebed Workload.

Edit the network, keep ``workload``: the scenario names it as ``model: {name: "model:workload"}``, and
``edgebed validate`` builds it on torch's meta device against the data set's sample shape and classes.
"""
import torch
from torch import nn

from edgebed.workload import Workload


class SmallCNN(nn.Module):
    def __init__(self, width: int = 8, in_channels: int = 1, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
            nn.AdaptiveAvgPool2d(4))
        self.head = nn.Linear(2 * width * 16, num_classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def small_cnn(width: int = 8, in_channels: int = 1, num_classes: int = 10) -> nn.Module:
    """A freshly initialised network (edgebed seeds torch before it calls this)."""
    return SmallCNN(width, in_channels, num_classes)


# The workload: the factory and the input spec (one sample's shape, the number of classes).
workload = Workload("{{name}}-cnn", small_cnn, input_shape=(1, 28, 28), num_classes=10)
