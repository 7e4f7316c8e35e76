"""Runs that differ only in their seed, as one group: the unit a report averages (mean, min–max).

Two runs are in one group when their resolved scenarios are equal once ``name``, ``seed`` and the
keys that only say where output goes (``output``, ``checkpoint``) are left out. A study's cell is
such a group; ``edgebed report`` finds them itself, so the runs of a seed sweep give one band.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from .runs import Run

IGNORED = ("name", "seed", "output", "checkpoint")


@dataclass(frozen=True)
class Group:
    id: str                       # unique among a report's groups
    label: str                    # legend and table label
    runs: tuple[tuple[int, Run], ...]   # (seed, run), in the order given

    @property
    def seeds(self) -> list[int]:
        return [s for s, _ in self.runs]


def key(scenario: dict) -> str:
    """What a run did, apart from its seed: the scenario without ``IGNORED`` keys, as canonical JSON."""
    return json.dumps({k: v for k, v in scenario.items() if k not in IGNORED}, sort_keys=True, default=str)


def _stem(names: list[str]) -> str:
    """The common part of a group's scenario names: ``quick-s1``, ``quick-s2`` → ``quick``."""
    if len(set(names)) == 1:
        return names[0]
    stem = os.path.commonprefix(names)
    return re.sub(r"[-_.]*s?$", "", stem) or names[0]


def group_runs(runs: list[Run]) -> list[Group]:
    """The runs in groups of equal setup (``key``), in the order each group's first run was given.

    A group's label is its runs' label (scenario name and algorithm) with the seed suffix of the
    names dropped; labels that would collide fall back to the run name (one run) or get ``#k``."""
    by_key: dict[str, list[Run]] = {}
    for r in runs:
        by_key.setdefault(key(r.scenario), []).append(r)
    groups = []
    for members in by_key.values():
        first = members[0]
        name = _stem([str(r.scenario.get("name", r.name)) for r in members])
        label = first.label.replace(str(first.scenario.get("name", first.name)), name, 1)
        groups.append((label, members))
    labels = [g[0] for g in groups]
    out = []
    for i, (label, members) in enumerate(groups):
        if labels.count(label) > 1:
            label = members[0].name if len(members) == 1 else f"{label} #{i + 1}"
        seeded = tuple((int(r.scenario.get("seed", 0) or 0), r) for r in members)
        out.append(Group(f"g{i}", label, seeded))
    return out
