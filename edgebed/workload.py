"""The workload a device trains: model factory, input spec, loss, metric and hints, one registry.

A scenario names a workload by a registry key (``cnn``, ``mlp``: the paper's networks, the registry's
first entries; then the zoo's ``resnet20``, ``mobilenet-small``, ``char-lstm``, edgebed/zoo/) or by an
import path ``module:attr`` (the Flower / Hydra habit), where ``attr`` is a ``Workload`` or a callable
returning an ``nn.Module`` (then the input spec defaults to 28×28 grey images in 10 classes), with
``model.args`` passed to the factory as keyword arguments. All resolve through ``resolve``; nothing
else in the package compares a model's name — it asks the workload (``channels_last``,
``num_classes``, ``input_shape``).
"""
from __future__ import annotations

import functools
import importlib
import inspect
import re
import sys
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

from . import usercode
from .usercode import UserCodeError

if TYPE_CHECKING:
    from torch import nn


def cross_entropy(logits, labels, reduction: str = "mean"):
    """The classification loss: softmax cross-entropy of logits [N, classes] against labels [N]."""
    import torch.nn.functional as F
    return F.cross_entropy(logits, labels, reduction=reduction)


def top1_correct(logits, labels) -> int:
    """The accuracy metric's count: samples whose largest logit is their label."""
    return int((logits.argmax(1) == labels).sum())


@dataclass(frozen=True)
class Workload:
    """What a device needs to build and train the same model as every other device.

    ``factory()`` returns a freshly initialised ``nn.Module`` (the caller seeds torch first);
    ``input_shape``: one sample's shape (C, H, W); ``num_classes``: labels are 0..num_classes-1;
    ``channels_last``: run the model and its batches in torch's channels_last memory format;
    ``step_time``: seconds per batch-10 gradient on the reference machine, if measured (timing.py);
    ``base_bytes``: a sim process without devices, if measured (emulator/capacity.py);
    ``loss(logits, labels, reduction)``: what devices differentiate and the evaluator reports;
    ``correct(logits, labels)``: how many samples count as right (accuracy = correct / N);
    ``input_dtype``: ``float32`` (images) or ``int64`` (token ids); ``shape_of(**args)``: the input shape
    the factory called with ``args`` expects (zoo models whose input size is an argument)."""
    name: str
    factory: Callable[[], "nn.Module"]
    input_shape: tuple = (1, 28, 28)
    num_classes: int = 10
    channels_last: bool = False
    step_time: float | None = None
    base_bytes: int | None = None
    loss: Callable = cross_entropy
    correct: Callable = top1_correct
    input_dtype: str = "float32"
    shape_of: Callable | None = None
    args: dict | None = field(default=None, compare=False, repr=False)   # model.args, for messages

    def with_args(self, args: dict | None) -> "Workload":
        """This workload with its factory called with ``args`` (the scenario's ``model.args``); a key
        its factory does not take is refused here, before anything is called."""
        if not args:
            return self
        _refuse_unknown(self, args)
        try:
            shape = self.shape_of(**args) if self.shape_of else self.input_shape
            classes = int(args.get("num_classes", args.get("vocab", self.num_classes)))
            shape = tuple(shape)
        except (TypeError, ValueError) as err:
            raise _failed(self, args, err, "its input spec (shape_of)") from None
        return replace(self, factory=functools.partial(self.factory, **args), input_shape=shape,
                       num_classes=classes, args=dict(args))

    def build(self) -> "nn.Module":
        """A fresh model from ``factory()`` (the caller seeds torch first, and picks the device): a
        factory that raises, or returns anything but an ``nn.Module``, is a ``UserCodeError`` naming
        the model and the ``model.args`` key at fault, never the user's traceback."""
        from torch import nn
        try:
            model = self.factory()
        except UserCodeError:
            raise
        except Exception as err:   # noqa: BLE001 — any failure of the user's factory is the answer
            raise _failed(self, self.args or {}, err, "its factory") from None
        if not isinstance(model, nn.Module):
            shown = repr(model)
            kind = type(model).__name__
            raise UserCodeError(f"model.name: model {self.name!r}{_where(self)} returned "
                                f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} ({shown if len(shown) <= 40 else shown[:37] + '...'}), "
                                "not a torch nn.Module: a model factory must return a freshly built "
                                "nn.Module (docs/your-own-model.md)")
        return model


def _where(w: Workload) -> str:
    """" (factory module:qualname)" where the model's name is no import path and its factory is the
    user's (a ``Workload`` they made), so a message names the code; "" otherwise."""
    fn = w.factory
    while isinstance(fn, functools.partial):
        fn = fn.func
    module, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if ":" in w.name or not module or not qual or module.split(".")[0] == __package__:
        return ""
    return f" (factory {module}:{qual})"


def _refuse_unknown(w: Workload, args: dict) -> None:
    """A ``model.args`` key the factory's signature does not take, before it is called (a factory
    that takes ``**kwargs`` is asked by calling it: ``_failed`` names the key it refuses)."""
    try:
        params = inspect.signature(w.factory).parameters.values()
    except (TypeError, ValueError):   # no signature to read (a C callable)
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    takes = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = [k for k in args if k not in takes]
    if unknown:
        raise UserCodeError(f"{', '.join(f'model.args.{k}' for k in unknown)}: model {w.name!r}{_where(w)} "
                            f"takes no argument {', '.join(map(repr, unknown))} (it takes "
                            f"{', '.join(takes) or 'none'}): remove the key or correct its name")


def _failed(w: Workload, args: dict, err: Exception, part: str) -> UserCodeError:
    """The error for a factory (or its input spec, ``part``) that raised ``err``: the model, the
    ``model.args`` keys whose values the error mentions, the user's line, and what to check."""
    text = " ".join(str(err).split())
    text = f"{type(err).__name__}: {text if len(text) <= 300 else text[:297] + '...'}".rstrip(".")
    refused = re.search(r"unexpected keyword argument '(\w+)'", str(err))
    if isinstance(err, TypeError) and refused and refused.group(1) in args:
        key = refused.group(1)
        return UserCodeError(f"model.args.{key}: model {w.name!r}{_where(w)} takes no argument {key!r} "
                             f"({text}): remove the key or correct its name")
    keys = [k for k, v in args.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)
            and str(v) and re.search(rf"(?<![\w.-]){re.escape(str(v))}(?![\w.])", str(err))]
    head = ", ".join(f"model.args.{k}" for k in keys) or ("model.args" if args else "model.name")
    given = ", ".join(f"{k}: {v!r}" for k, v in args.items())
    todo = (f"check {head}" if keys else "check model.args against what the factory takes" if args
            else "fix the factory")
    return UserCodeError(f"{head}: model {w.name!r}{_where(w)} could not be built"
                         f"{f' with model.args {{{given}}}' if args else ''}: {part} raised {text}"
                         f"{_user_line(err)}; {todo}")


def _user_line(err: BaseException) -> str:
    """" (at file:line)": the last frame of ``err``'s traceback outside edgebed, installed packages and
    the standard library (the user's code), "" if none."""
    import traceback
    here = __file__.rsplit("/", 1)[0]
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        name = frame.filename
        if not (name.startswith(here) or "site-packages" in name or "dist-packages" in name or
                name.startswith("<") or usercode.in_stdlib_dir(name)):
            return f" (at {name}:{frame.lineno})"
    return ""


def sample_input(w: Workload, batch: int, input_shape: tuple | None = None, device=None):
    """A zero batch of ``batch`` inputs the workload takes (its dtype and shape, or ``input_shape``)."""
    import torch
    dtype = torch.int64 if w.input_dtype == "int64" else torch.float32
    return torch.zeros((batch, *(input_shape or w.input_shape)), dtype=dtype, device=device)


def num_params(ref) -> int:
    """Trainable parameters of the workload (Θ's length), counted on torch's meta device."""
    from .models import model_layers
    return sum(layer.size for layer in model_layers(ref))


def input_problems(ref, input_shape: tuple, num_classes: int, where: str = "model.name") -> list[str]:
    """What stops workload ``ref`` from training on samples of ``input_shape`` with labels
    0..num_classes-1: its forward pass is tried on torch's meta device (no CPU kernel runs), and its
    output must be (batch, num_classes). Each problem says what, where and what to do."""
    import torch
    w = resolve(ref)
    shape = "×".join(map(str, input_shape))
    with torch.device("meta"):
        model = w.build()
        x = sample_input(w, 2, input_shape)
        try:
            out = model(x)
        except Exception as e:  # noqa: BLE001 — any failure of the user's forward is the answer
            return [f"{where}: model {w.name!r} cannot take the data set's samples ({shape}, "
                    f"{num_classes} classes): {type(e).__name__}: {str(e).rstrip('.')}. "
                    + (_shape_advice(w, ref, shape) or f"Make its first layer take {shape} inputs") +
                    ", or choose a data set whose samples are what it expects"]
    if tuple(out.shape) != (2, num_classes):
        return [f"{where}: model {w.name!r} gives outputs of shape {tuple(out.shape)[1:]} per sample "
                f"but the data set has {num_classes} classes: make its last layer output {num_classes} "
                f"logits"]
    return []


def _shape_advice(w: Workload, ref, shape: str) -> str:
    """For a workload whose input spec follows its arguments (``shape_of``): which ``model.args``
    set it, their values and the shape they give; "" for any other."""
    if w.shape_of is None:
        return ""
    params = inspect.signature(w.shape_of).parameters.values()
    names = [p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    args = (model_section(ref) or (None, {}))[1]
    given = {p.name: args.get(p.name, p.default) for p in params if p.name in names}
    spec = ", ".join(f"{k}: {v}" for k, v in given.items())
    keys = " and ".join(f"model.args.{k}" for k in names)
    return (f"With model.args {{{spec}}} it takes {'×'.join(map(str, w.input_shape))} samples: set {keys} "
            f"so that it takes {shape}")


def step_flops(ref, batch: int = 10, input_shape: tuple | None = None) -> int:
    """FLOPs of one SGD step (forward + backward) on a batch of ``batch`` inputs (of ``input_shape``,
    default the workload's), as torch's FlopCounterMode counts them (matmuls, convolutions), plus the gate matmuls of
    recurrent layers, which it does not count on the CPU; element-wise ops are not counted."""
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode
    from .models import build_model
    w = resolve(ref)
    model = build_model(w, 0)
    x = sample_input(w, batch, input_shape)
    if w.channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.zeros(batch, dtype=torch.int64)
    seen: list[tuple[str, torch.nn.Module, tuple]] = []
    hooks = [m.register_forward_hook(lambda mod, args, out, name=name: seen.append((name, mod, tuple(args[0].shape))))
             for name, m in model.named_modules() if isinstance(m, torch.nn.RNNBase)]
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(x), y).backward()
    for h in hooks:
        h.remove()
    counted = counter.get_flop_counts()
    extra = sum(_recurrent_flops(mod, shape) for name, mod, shape in seen
                if not sum(counted.get(f"{type(model).__name__}.{name}", {}).values()))
    return int(counter.get_total_flops()) + extra


def _recurrent_flops(rnn, shape: tuple) -> int:
    """FLOPs of one forward + backward pass of ``rnn`` (LSTM, GRU, RNN) on an input of ``shape``:
    torch's FlopCounterMode counts no fused recurrent kernel on the CPU. Per layer, direction and time
    step the gates' two matmuls, 2 · gates · hidden · (input + hidden); backward twice forward."""
    gates = {"LSTM": 4, "GRU": 3}.get(rnn.mode, 1)
    steps, batch = (shape[1], shape[0]) if rnn.batch_first else (shape[0], shape[1] if len(shape) > 2 else 1)
    dirs = 2 if rnn.bidirectional else 1
    h = rnn.hidden_size
    forward = sum(2 * gates * h * ((rnn.input_size if layer == 0 else h * dirs) + h) * dirs
                  for layer in range(rnn.num_layers)) * steps * batch
    return 3 * forward


def _paper_cnn():
    from .models import PaperCNN
    return PaperCNN()


def _paper_mlp():
    from .models import PaperMLP
    return PaperMLP()


# torch is imported when a model is built, not when a scenario is validated.
WORKLOADS: dict[str, Workload] = {
    # step_time: measured on the project's 2-core reference machine (timing.py); base_bytes: a sim
    # process without devices, measured (bench_scale, n = 200; emulator/capacity.py).
    "cnn": Workload("cnn", _paper_cnn, channels_last=True, step_time=2.6e-3, base_bytes=700 << 20),
    "mlp": Workload("mlp", _paper_mlp, step_time=0.4e-3, base_bytes=512 << 20),
}


def register(workloads) -> None:
    """Add ``workloads`` to the registry under their names (a name already there keeps its entry)."""
    for w in workloads:
        WORKLOADS.setdefault(w.name, w)


def _zoo() -> None:
    zoo = sys.modules.get(f"{__package__}.zoo")
    if zoo is not None and not hasattr(zoo, "ZOO"):
        return          # edgebed.zoo is being imported first and imported us: it registers itself
    from .zoo import ZOO
    register(ZOO)


_zoo()


def use_path(path: str | None) -> None:
    """Make a user's workload module importable here and in the processes this one starts: ``path``
    joins ``sys.path`` and ``PYTHONPATH`` (the scenario's ``model.path``, absolute)."""
    if not path:
        return
    import os
    import sys
    if path not in sys.path:
        sys.path.insert(0, path)
    parts = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if path not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([path, *filter(None, parts)])


def model_section(ref) -> "tuple[str, dict] | None":
    """(name, args) of a model section — a ``ModelSpec`` or a dict with ``name`` and ``args`` — or None
    for any other reference (a registry key, ``module:attr``, a ``Workload``)."""
    if isinstance(ref, dict):
        return ref.get("name"), ref.get("args") or {}
    if hasattr(ref, "args") and not isinstance(ref, Workload):
        return ref.name, ref.args or {}
    return None


def resolve(ref) -> Workload:
    """The workload ``ref`` names: a ``Workload`` itself, a registry key, ``module:attr``, or a model
    section (a ``ModelSpec`` or a dict with ``name`` and ``args``): that workload with its args."""
    if isinstance(ref, Workload):
        return ref
    if (section := model_section(ref)) is not None:
        return resolve(section[0]).with_args(section[1])
    ref = str(ref)
    if ref in WORKLOADS:
        return WORKLOADS[ref]
    if ":" not in ref:
        raise ValueError(f"unknown model {ref!r}: use one of {sorted(WORKLOADS)} or an import path "
                         f"'package.module:factory' (a Workload or a function returning an nn.Module)")
    module, _, attr = ref.partition(":")
    usercode.check_module(module, "model.name", ref, "a model")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        from .suggest import import_problem
        raise ValueError(import_problem(ref, module, attr, e)) from e
    except Exception as e:   # noqa: BLE001 — the user's module failed as it was imported
        text = " ".join(f"{type(e).__name__}: {e}".split())
        raise UserCodeError(f"model.name: importing {module} for model {ref!r} raised {text[:300]}"
                            f"{_user_line(e)}; fix the module") from None
    usercode.check_target(obj, "model.name", ref, "a model", "it returns a torch nn.Module, or name an "
                          "edgebed.workload.Workload", accept=lambda o: isinstance(o, Workload))
    return obj if isinstance(obj, Workload) else Workload(ref, obj)
