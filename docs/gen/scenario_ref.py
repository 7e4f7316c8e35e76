"""The scenario reference, generated from the pydantic schema: every key with its type, unit and default.

Types, units and defaults come from the models (``edgebed/scenario.py``, each update rule's ``Params``,
each runtime's ``Spec``), so they can't drift from what ``edgebed validate`` accepts. A key's
description is the row of ``scenarios/README.md``'s key table that names it (the guide, which may describe
several keys in one row), or else its field's ``description`` in the schema. ``tests/unit/test_scenario_docs.py`` fails when a key has neither.
"""
from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "scenarios" / "README.md"


@dataclass
class Key:
    path: str                  # dotted, list entries as [] (workers.classes[].name)
    type: str                  # rendered type: `int ≥ 1`, "iid" | "by-label", duration, ...
    unit: str                  # bit/s, s, fraction, or ""
    default: str               # rendered default ("required" when there is none)
    description: str
    source: str                # "schema" or "scenarios/README.md"
    takers: tuple[str, ...] = ()   # algorithm keys: the algorithms that take it


# ---------------------------------------------------------------- walking the schema

def _models_in(annotation) -> tuple[list, bool]:
    """The pydantic models an annotation holds (directly, in Optional/list, every member of a union:
    the algorithm section), and whether in a list."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation], False
    found, in_list = [], False
    for arg in typing.get_args(annotation):
        models, _ = _models_in(arg)
        if models:
            found += models
            in_list = in_list or typing.get_origin(annotation) is list
    return found, in_list


def _fields(model: type[BaseModel], prefix: str = ""):
    """(dotted path, FieldInfo, owning model) for every leaf key of ``model``."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        subs, in_list = _models_in(field.annotation)
        for sub in subs:
            yield from _fields(sub, f"{path}[]." if in_list else f"{path}.")
        if not subs:
            yield path, field, model


def runtime_specs() -> dict[str, type[BaseModel]]:
    """Every registered runtime's own section (``Runtime.Spec``)."""
    from edgebed.emulator.runtimes import RUNTIMES, get_runtime
    return {name: get_runtime(name).Spec for name in RUNTIMES}


def leaf_fields():
    """Every key the scenario accepts: (path, field, model). The runtime sections are free-form in the
    Scenario model and validated by each runtime's ``Spec``: their keys are the Specs'."""
    from edgebed.scenario import Scenario
    for path, field, model in _fields(Scenario):
        if path.startswith("runtime.") and path != "runtime.name":
            continue
        yield path, field, model
    for name, spec in runtime_specs().items():
        yield from _fields(spec, f"runtime.{name}.")


def key_paths() -> set[str]:
    return {path for path, _, _ in leaf_fields()}


# ---------------------------------------------------------------- rendering one field

_UNITS = {"_rate_field": ("rate", "bit/s"), "_duration_field": ("duration", "s"),
          "parse_fraction": ("fraction", "0–1 (or %)")}


def _unit_of(field) -> tuple[str, str] | None:
    text = repr(field.annotation) + repr(field.metadata)
    for fn, unit in _UNITS.items():
        if fn in text:
            return unit
    return None


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " \\| ".join(f'`{a}`' for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        parts = [_type_name(a) for a in typing.get_args(tp) if a is not type(None)]
        return " \\| ".join(dict.fromkeys(parts))
    if origin is typing.Annotated:
        return _type_name(typing.get_args(tp)[0])
    if origin in (list, tuple):
        return f"list of {_type_name(typing.get_args(tp)[0])}" if typing.get_args(tp) else "list"
    if origin is dict:
        return "mapping"
    if tp is typing.Any:
        return "any"
    return getattr(tp, "__name__", str(tp))


def _bounds(field) -> str:
    out = []
    for m in field.metadata:
        for attr, sym in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("min_length", "length ≥")):
            v = getattr(m, attr, None)
            if v is not None:
                out.append(f"{sym} {v:,}" if isinstance(v, int) else f"{sym} {v}")
        pattern = getattr(m, "pattern", None)
        if pattern:
            out.append(f"matching `{pattern}`")
    return ", ".join(out)


def _nullable(tp) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)


def _type_of(field) -> tuple[str, str]:
    unit = _unit_of(field)
    tp = _type_name(field.annotation)
    if unit:
        tp = re.sub(r"\bfloat\b", unit[0], tp, count=1)
    if _nullable(field.annotation):
        tp += " \\| `null`"
    bounds = _bounds(field)
    return (f"{tp} ({bounds})" if bounds else tp), (unit[1] if unit else "")


def _default_of(field) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()
    else:
        value = field.default
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (list, dict)) and len(str(value)) > 40:
        return "see the schema"
    return f"`{value}`"


# ---------------------------------------------------------------- descriptions from the guide

def guide_rows(text: str | None = None) -> list[tuple[list[str], str]]:
    """The rows of scenarios/README.md's key table: (keys named in the key cell, meaning)."""
    text = GUIDE.read_text() if text is None else text
    rows = []
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) < 2:
            continue
        keys = re.findall(r"`([a-z_]+(?:\[\])?(?:\.[a-z_<>]+(?:\[\])?)*)`", cells[0])
        if keys:
            rows.append((keys, cells[1]))
    return rows


def _one_line(text: str) -> str:
    """One line, links reduced to their text (the guide's links are relative to scenarios/)."""
    return re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", " ".join(text.split()))


def algorithm_params() -> dict[str, type[BaseModel]]:
    """Each algorithm's own parameter model, by name, read off the scenario's ``algorithm`` union (so
    this does not depend on where the rule registry lives)."""
    from edgebed.scenario import Scenario
    models, _ = _models_in(Scenario.model_fields["algorithm"].annotation)
    out = {}
    for model in models:
        (name,) = typing.get_args(model.model_fields["name"].annotation) or (model.__name__,)
        out[name] = model
    return out


def keys() -> list[Key]:
    """Every key, in the schema's order, with type, unit, default and description."""
    rules = algorithm_params()
    guide = {}
    for names, meaning in guide_rows():
        for n in names:
            guide.setdefault(n, meaning)
    out: dict[str, Key] = {}
    for path, field, model in leaf_fields():
        tp, unit = _type_of(field)
        default = _default_of(field)
        if path in guide:
            desc, source = _one_line(guide[path]), "scenarios/README.md"
        elif field.description:
            desc, source = _one_line(field.description), "schema"
        else:
            desc, source = "", ""
        takers: tuple[str, ...] = ()
        if path.startswith("algorithm.") and path != "algorithm.name":
            name = path.split(".", 1)[1]
            takers = tuple(n for n, cls in rules.items() if name in cls.model_fields)
            defaults = {_default_of(rules[n].model_fields[name]) for n in takers}
            if len(defaults) > 1:
                default = "; ".join(f"{n}: {_default_of(rules[n].model_fields[name])}" for n in takers)
        if path == "algorithm.name":     # one Literal per rule: the union's names, the section's default
            from edgebed.scenario import Scenario
            tp = " \\| ".join(f"`{n}`" for n in rules)
            section = Scenario.model_fields["algorithm"]
            value = section.default_factory() if section.default_factory else section.default
            default = f"`{value.name}`" if isinstance(value, BaseModel) else _default_of(section)
        if path in out:          # an algorithm key several rules take: once, with every taker
            continue
        out[path] = Key(path, tp, unit, default, desc, source, takers)
    return list(out.values())


_SECTIONS = [
    ("", "Top level"), ("dataset", "Data"), ("model", "Model"), ("algorithm", "Algorithm (update rule)"),
    ("compression", "Compression and wire encodings"), ("workers", "Devices and their links"),
    ("failures", "Failures"), ("stop", "Stop rule"), ("eval", "Evaluation"),
    ("checkpoint", "Checkpoints"), ("security", "Security"), ("timing", "Timing and fidelity"),
    ("runtime", "Runtime"),
]


def page() -> str:
    """The Markdown of docs/scenario-reference.md; refuses (and so fails the docs build) while a key has
    no description."""
    ks = keys()
    missing = [k.path for k in ks if not k.description]
    if missing:
        raise ValueError(f"scenario keys without a description: {missing}. Add a row to scenarios/README.md's "
                         "key table (full dotted path in backticks) or description= to the field")
    by_section: dict[str, list[Key]] = {}
    for k in ks:
        top = k.path.split(".")[0].rstrip("[]") if "." in k.path else ""
        by_section.setdefault(top, []).append(k)
    lines = [
        "# Scenario reference",
        "",
        "Every key a scenario file accepts, **generated from the schema** at build time "
        "(`docs/gen/scenario_ref.py`): types, units and defaults are read from the pydantic models "
        "(`edgebed/scenario.py`, each update rule's `Params` in `edgebed/ps/rules/`, each runtime's "
        "`Spec`), descriptions from the key table of `scenarios/README.md` or, for a key it "
        "does not name, from the field's `description`. A key without either fails `tests/unit/test_scenario_docs.py`.",
        "",
        "Units in YAML are human strings, converted on validation: **rates** in bits per second as tc "
        "reads them (`10mbit`, `512kibit`; `bps`-style spellings are refused because tc reads them as "
        "bytes), **durations** in seconds (`20ms`, `1.5s`, `10min`), **fractions** as `0.3` or `30%`. "
        "A rate or duration needs its unit: a bare number is refused with the likely intent "
        "(`rate: 10` → did you mean `10mbit`?), never guessed; only `0` needs none. "
        "Unknown keys are errors. Precedence: defaults → file → `--set key.path=value` "
        "(list entries by index or name: `workers.classes.slow.uplink.rate=2mbit`). "
        "Check a file with `edgebed validate FILE`. How to write one: [Quickstart](quickstart.md) and "
        "the shipped `scenarios/`.",
        "",
    ]
    seen = set()
    for top, title in _SECTIONS + [(t, t) for t in by_section if t not in {s for s, _ in _SECTIONS}]:
        if top not in by_section or top in seen:
            continue
        seen.add(top)
        lines += [f"## {title}", "", "| key | type | unit | default | description |", "|---|---|---|---|---|"]
        previous = None
        for k in by_section[top]:
            desc = k.description.replace("|", "\\|")
            desc, previous = ("as above" if desc == previous else desc), desc
            if k.takers:
                desc = f"*{', '.join(k.takers)}*: {desc}"
            lines.append(f"| `{k.path}` | {k.type} | {k.unit or '—'} | {k.default} | {desc} |")
        lines.append("")
    return "\n".join(lines)
