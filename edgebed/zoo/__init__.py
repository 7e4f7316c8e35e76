"""The model zoo: modern networks that run out of the box, each a ``Workload`` in the registry.

| name | model | input (args) |
|---|---|---|
| ``resnet20`` | ResNet for CIFAR (He et al. 2016, §4.2), BatchNorm; ``depth`` 6n+2 (8, 14, 20, 32, ...), ``width`` | ``in_channels`` × ``size`` × ``size`` images, default 3×32×32 |
| ``mobilenet-small`` | MobileNet-style depthwise-separable CNN (Howard et al. 2017), BatchNorm, ``width`` multiplier | as resnet20 |
| ``char-lstm`` | LEAF's Shakespeare model (Caldas et al. 2018): embedding 8, 2-layer LSTM 256, next character | ``seq_len`` token ids over ``vocab`` characters (80) |

Every argument is a ``model.args`` key of the scenario (``model: {name: resnet20, args: {depth: 8,
in_channels: 1, size: 28}}`` for Fashion-MNIST). torch is imported when a model is built, not here.
"""
from __future__ import annotations

from ..workload import Workload, register


def _resnet(**args):
    from .resnet import ResNet
    return ResNet(**{k: v for k, v in args.items() if k != "size"})


def _mobilenet(**args):
    from .mobilenet import MobileNetSmall
    return MobileNetSmall(**{k: v for k, v in args.items() if k != "size"})


def _char_lstm(**args):
    from .char_lstm import CharLSTM
    return CharLSTM(**{k: v for k, v in args.items() if k != "seq_len"})


def _image_shape(in_channels: int = 3, size: int = 32, **_) -> tuple:
    return (int(in_channels), int(size), int(size))


def _text_shape(seq_len: int = 80, **_) -> tuple:
    return (int(seq_len),)


ZOO = (
    Workload("resnet20", _resnet, input_shape=(3, 32, 32), shape_of=_image_shape),
    Workload("mobilenet-small", _mobilenet, input_shape=(3, 32, 32), shape_of=_image_shape),
    Workload("char-lstm", _char_lstm, input_shape=(80,), num_classes=80, input_dtype="int64",
             shape_of=_text_shape),
)
register(ZOO)   # when this package is imported before edgebed.workload (see workload._zoo)
