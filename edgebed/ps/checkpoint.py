"""PS checkpoint: Θ, version, traffic counters, rule state and device sequence numbers in one file.

``save`` writes ``<dir>/ps.npz`` (numpy arrays + one JSON blob, no pickle) to a temporary name,
fsyncs it and ``os.replace``s it, so a kill at any moment leaves either the previous or the new
checkpoint, never a torn one. ``restore`` loads it into a fresh ``ParameterServer``.

What a restart keeps and loses (by design, kept simple):
- kept: Θ, version i, the rule's state (AdaComp's per-parameter counters), every device's highest
  applied push ``seq`` (so a replay across the restart is still acknowledged, not applied), frozen
  devices, crash-draw streams, traffic counters, error counts.
- lost: sessions (every device must say hello again — the agent does so with attempt+1), pull
  snapshots (devices pull again after re-hello), and the updates applied after the checkpoint: Θ
  goes back to version i, so up to k−1 updates are recomputed; their rows written before the kill stay
  in ``updates/`` (the resume event says which update indices repeat).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from ..atomic import replacing

FILE = "ps.npz"


@dataclass
class Checkpoint:
    version: int
    theta: np.ndarray
    rule_state: dict[str, np.ndarray]
    meta: dict = field(default_factory=dict)   # devices, meter, errors, written_unix, extra


def save(ps, directory: str | Path, extra: Optional[dict] = None) -> Path:
    """Write the PS state atomically to ``directory/ps.npz``; called on the PS thread at version i.

    Costs one copy of Θ plus the rule state to disk (~1.7 MB for the CNN with AdaComp)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = ps.state()
    # the keys in the order format 1 always had them
    meta = {"format": 1, "version": state["version"], "written_unix": time.time(), **state, "extra": extra or {}}
    arrays = {"theta": ps.theta, "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)}
    arrays.update({f"rule.{k}": v for k, v in ps.rule.state_dict().items()})
    final = directory / FILE
    with replacing(final, durable=True) as tmp:   # the rename itself survives a power cut
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
    return final


def load(directory: str | Path) -> Checkpoint:
    path = Path(directory) / FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: no checkpoint (the run needs `checkpoint: {{every: k}}` to be resumable)")
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(bytes(z["meta"]).decode())
        rule_state = {k[5:]: z[k].copy() for k in z.files if k.startswith("rule.")}
        theta = z["theta"].copy()
    return Checkpoint(meta["version"], theta, rule_state, meta)


def restore(ps, ckpt: Checkpoint) -> None:
    """Put a checkpoint into a freshly built PS (same model and rule); sessions start empty."""
    ps.restore(ckpt.meta, ckpt.theta, ckpt.rule_state)
