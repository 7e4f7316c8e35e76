"""scenarios/README.md documents every key the schema accepts, and no key it doesn't."""
from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from edgebed.scenario import Scenario

pytestmark = pytest.mark.timeout(30)
ROOT = Path(__file__).resolve().parents[2]


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


def key_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every key of ``model`` as a dotted path; list entries as ``[]`` (workers.classes[].name); the
    keys of every algorithm under ``algorithm.``."""
    out = set()
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        subs, in_list = _models_in(field.annotation)
        for sub in subs:
            out |= key_paths(sub, f"{path}[]." if in_list else f"{path}.")
        if not subs:
            out.add(path)
    return out


def runtime_specs() -> dict[str, type[BaseModel]]:
    """Every registered runtime's own section (``Runtime.Spec``)."""
    from edgebed.emulator.runtimes import _KNOWN, get_runtime
    return {name: get_runtime(name).Spec for name in _KNOWN}


def all_keys() -> set[str]:
    keys = {k for k in key_paths(Scenario) if not k.startswith("runtime.") or k == "runtime.name"}
    for name, spec in runtime_specs().items():
        keys |= key_paths(spec, f"runtime.{name}.")
    return keys


def documented() -> set[str]:
    text = (ROOT / "scenarios" / "README.md").read_text()
    return set(re.findall(r"`([a-z_]+(?:\[\])?(?:\.[a-z_]+(?:\[\])?)*)`", text))


def test_every_key_the_schema_accepts_is_documented():
    missing = sorted(all_keys() - documented())
    assert not missing, f"document these keys in scenarios/README.md (full dotted path in backticks): {missing}"


def test_every_documented_key_path_exists():
    tops = set(Scenario.model_fields)
    paths = {d for d in documented() if "." in d and d.split(".")[0].rstrip("[]") in tops}
    unknown = sorted(paths - all_keys() - {"workers.classes[].think_time", "workers.classes[].uplink",
                                             "workers.classes[].downlink"})
    assert not unknown, f"scenarios/README.md names keys the schema does not accept: {unknown}"


def test_every_shipped_scenario_is_listed():
    text = (ROOT / "scenarios" / "README.md").read_text()
    missing = [p.name for p in (ROOT / "scenarios").glob("*.yaml") if f"`{p.name}`" not in text]
    assert not missing, f"list these in scenarios/README.md: {missing}"
