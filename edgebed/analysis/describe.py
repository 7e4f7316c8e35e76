"""What a run was: its setup as a report shows it, from the resolved scenario and manifest.json.

Per run: seed, algorithm, α, batch, c, devices, crash probability, runtime, stop rule, host and
numerics fingerprint; per speed class: devices, compute slowdown, think time and link profiles. Class
order is always the scenario's (``class_order``), in every table and plot of a report.
"""
from __future__ import annotations

from typing import Optional

import pandas as pd

from .. import numerics
from ..rundir import read_json
from .runs import Run


def class_order(scenario: dict) -> list[str]:
    """The speed classes in the order the scenario lists them (``default`` for a one-class scenario)."""
    classes = (scenario.get("workers") or {}).get("classes") or []
    return [str(c.get("name")) for c in classes if isinstance(c, dict)] or ["default"]


def ordered(names, scenario_orders: list[list[str]]) -> list[str]:
    """``names`` in scenario order (the first run's, then the next's for classes it lacks), others after."""
    names = list(dict.fromkeys(names))
    order = list(dict.fromkeys(c for o in scenario_orders for c in o))
    return [c for c in order if c in names] + sorted(c for c in names if c not in order)


def devices_per_class(scenario: dict) -> dict[str, int]:
    """How many devices each class gets: n × share, by largest remainder (as the engine assigns them)."""
    workers = scenario.get("workers") or {}
    n = int(workers.get("n") or 0)
    classes = [c for c in workers.get("classes") or [] if isinstance(c, dict)] or [{"name": "default", "share": 1.0}]
    raw = [float(c.get("share", 0)) * n for c in classes]
    counts = [int(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: raw[i] - counts[i], reverse=True)[: n - sum(counts)]:
        counts[i] += 1
    return {str(c.get("name")): k for c, k in zip(classes, counts)}


def class_of_device(scenario: dict) -> dict[int, str]:
    """Device id → speed class: contiguous blocks in scenario order (``scenario.class_assignment``)."""
    out, d = {}, 0
    for k, count in devices_per_class(scenario).items():
        for _ in range(count):
            out[d] = k
            d += 1
    return out


def _link(link: dict) -> str:
    """``8 Mbit/s, 20 ms ± 5, 1 % loss``; ``unshaped`` when nothing is set."""
    link = link or {}
    parts = [] if link.get("rate") is None else [f"{float(link['rate']) / 1e6:g} Mbit/s"]
    if link.get("delay"):
        parts.append(f"{1e3 * float(link['delay']):g} ms" + (f" ± {1e3 * float(link['jitter']):g}"
                                                             if link.get("jitter") else ""))
    if link.get("loss"):
        parts.append(f"{100 * float(link['loss']):g} % loss")
    return ", ".join(parts) or "unshaped"


def class_table(scenario: dict) -> pd.DataFrame:
    """Per speed class, in scenario order: devices, share, compute slowdown, think time, links."""
    counts = devices_per_class(scenario)
    rows = []
    for c in (scenario.get("workers") or {}).get("classes") or [{"name": "default", "share": 1.0}]:
        think = c.get("think_time") or {}
        rows.append({"speed class": c.get("name"), "devices": counts.get(str(c.get("name")), 0),
                     "share (%)": f"{100 * float(c.get('share', 0)):g}",
                     "compute slowdown (×)": f"{float(c.get('slowdown', 1.0)):g}",
                     "think time (s)": f"{float(think.get('mean', 0.0)):g}"
                     + (f" ({think['dist']})" if think.get("dist") not in (None, "constant") else ""),
                     "uplink": _link(c.get("uplink")), "downlink": _link(c.get("downlink"))})
    return pd.DataFrame(rows)


def _host(manifest: dict) -> str:
    h = manifest.get("host") or {}
    if not h:
        return "not recorded"
    mem = h.get("memory_bytes")
    return (f"{h.get('hostname', '?')}: {h.get('cores', '?')} cores"
            + (f", {mem / 2**30:.0f} GiB" if mem else "") + f", Python {h.get('python', '?')}")


def setup_row(run: Run) -> dict:
    """One run's setup as display strings: what a reader needs to know to re-run it."""
    sc, algo = run.scenario, run.algorithm_params
    manifest = read_json(run.path, "manifest.json")
    stop = sc.get("stop") or {}
    stops = [f"{stop['updates']:,} updates" if stop.get("updates") else "",
             f"{100 * stop['target_accuracy']:g} % accuracy" if stop.get("target_accuracy") else "",
             f"{stop['wall_time']:g} s" if stop.get("wall_time") else ""]
    counts = devices_per_class(sc)
    return {"run": run.name, "seed": str(sc.get("seed", "?")), "algorithm": run.algorithm,
            "α (lr)": f"{algo['lr']:g}" if isinstance(algo.get("lr"), (int, float)) else "—",
            "batch": str(algo.get("batch_size", "—")),
            "c": f"{algo['c']:g}" if isinstance(algo.get("c"), (int, float)) else "—",
            "devices": " · ".join(f"{k} {v}" for k, v in counts.items()) if len(counts) > 1
            else str(sum(counts.values())),
            "crash p / push": f"{float((sc.get('failures') or {}).get('crash_probability', 0.0)):g}",
            "model · data": f"{(sc.get('model') or {}).get('name', '?')} · {(sc.get('dataset') or {}).get('name', '?')}"
            + (f" ({sc['dataset']['train_samples']:,})" if (sc.get("dataset") or {}).get("train_samples") else ""),
            "runtime": str((sc.get("runtime") or {}).get("name", "local")),
            "stop": " or ".join(s for s in stops if s) or "—",
            "eval every": f"{(sc.get('eval') or {}).get('every', '?'):,}" if isinstance(
                (sc.get("eval") or {}).get("every"), int) else "—",
            "started": str(manifest.get("started") or "—"),
            "host": _host(manifest),
            "numerics": numerics.describe(numerics.of_run(run.path))}


def setup_table(groups: list[tuple[str, list[Run]]]) -> pd.DataFrame:
    """One row per setting (``setup_row``), one column per group of runs (label, runs): a value the
    runs of a group share once, different ones (seeds, start times) joined with ``, ``. One run: the
    column is called ``value``."""
    cols = {}
    for label, runs in groups:
        rows = [setup_row(r) for r in runs]
        cols[label] = {k: ", ".join(dict.fromkeys(r[k] for r in rows)) for k in rows[0] if k != "run"}
    if len(groups) == 1 and len(groups[0][1]) == 1:
        cols = {"value": next(iter(cols.values()))}
    keys = list(next(iter(cols.values())))
    return pd.DataFrame({"setting": keys, **{label: [c[k] for k in keys] for label, c in cols.items()}})


def live_devices(events: pd.DataFrame, class_of: dict[int, str], order: Optional[list[str]] = None) -> pd.DataFrame:
    """Live devices per class after each event, against the applied update it happened at: a device is
    live from its ``hello`` until its first ``crash``, ``lost`` or ``exit`` before the run's ``stop``
    (devices leave after it because the run ended). Columns ``update``, one per class, ``total`` and
    ``event`` (what changed). Empty without hello events."""
    if events is None or events.empty:
        return pd.DataFrame()
    ev = events.sort_values(["update", "wall_time"], kind="stable")
    classes = order or list(dict.fromkeys(class_of.values()))
    live = {k: 0 for k in classes}
    state: dict[int, bool] = {}
    rows = []
    for e in ev.itertuples():
        if e.event == "stop":
            break
        d = int(e.device)
        k = class_of.get(d)
        if k is None:
            continue
        if e.event == "hello" and not state.get(d):
            state[d] = True
            live[k] = live.get(k, 0) + 1
        elif e.event in ("crash", "lost", "exit") and state.get(d):
            state[d] = False
            live[k] -= 1
        else:
            continue
        rows.append({"update": int(e.update), **live, "total": sum(live.values()), "event": e.event})
    return pd.DataFrame(rows)
