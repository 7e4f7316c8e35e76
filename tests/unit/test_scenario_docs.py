"""The scenario reference (generated from the schema by docs/gen/scenario_ref.py) documents every key the
schema accepts, and scenarios/README.md names no key the schema doesn't."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from edgebed.scenario import Scenario

pytestmark = pytest.mark.timeout(30)
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "gen"))
import scenario_ref  # noqa: E402


def documented() -> set[str]:
    text = (ROOT / "scenarios" / "README.md").read_text()
    return set(re.findall(r"`([a-z_]+(?:\[\])?(?:\.[a-z_]+(?:\[\])?)*)`", text))


def test_every_key_the_schema_accepts_has_a_description():
    missing = sorted(k.path for k in scenario_ref.keys() if not k.description)
    assert not missing, ("describe these scenario keys: a row in scenarios/README.md's key table (full dotted "
                         f"path in backticks) or the field's description= in the schema: {missing}")


def test_the_reference_page_lists_every_key_with_its_type_and_default():
    page = scenario_ref.page()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([^`]+)` \|.*$", page, re.M)}
    missing = sorted(scenario_ref.key_paths() - set(rows))
    assert not missing, f"the generated scenario reference lacks: {missing}"
    # type, unit and default come from the schema itself
    assert re.search(r"\| int \(≥ 1, ≤ 1,000,000\) \| — \| required \|", rows["workers.n"]), rows["workers.n"]
    assert "| duration | s | `60.0` |" in rows["failures.lost_after"], rows["failures.lost_after"]
    assert "| rate \\| `null` | bit/s | `null` |" in rows["workers.classes[].uplink.rate"]
    assert "`adacomp`" in rows["algorithm.name"] and "`easgd`" in rows["algorithm.name"]
    assert "*comp-asgd, adacomp*" in rows["algorithm.c"], rows["algorithm.c"]


def test_every_documented_key_path_exists():
    tops = set(Scenario.model_fields)
    paths = {d for d in documented() if "." in d and d.split(".")[0].rstrip("[]") in tops}
    unknown = sorted(paths - scenario_ref.key_paths() - {"workers.classes[].think_time",
                                                         "workers.classes[].uplink", "workers.classes[].downlink"})
    assert not unknown, f"scenarios/README.md names keys the schema does not accept: {unknown}"


def test_every_shipped_scenario_is_listed():
    text = (ROOT / "scenarios" / "README.md").read_text()
    shipped = [*(ROOT / "scenarios").glob("*.yaml"), *(ROOT / "scenarios").glob("zoo/*.yaml")]
    missing = [p.relative_to(ROOT / "scenarios").as_posix() for p in shipped
               if f"`{p.relative_to(ROOT / 'scenarios').as_posix()}`" not in text]
    assert not missing, f"list these in scenarios/README.md: {missing}"


def test_a_key_without_a_description_fails_the_reference(monkeypatch):
    """Without scenarios/README.md's rows, the keys whose fields carry no description are caught: the
    check above can fail, and the docs build (which calls page()) refuses."""
    monkeypatch.setattr(scenario_ref, "guide_rows", lambda text=None: [])
    undescribed = [k.path for k in scenario_ref.keys() if not k.description]
    assert "workers.n" in undescribed                      # a field without description=
    assert "failures.lost_after" not in undescribed        # one with it
    with pytest.raises(ValueError, match="workers.n"):
        scenario_ref.page()


def test_each_stop_key_is_described_by_its_own_meaning():
    """The stop keys shared one row whose text ("I; stop at this test accuracy; …") read wrong for each
    key (issue #41.4)."""
    desc = {k.path: k.description for k in scenario_ref.keys() if k.path.startswith("stop.")}
    assert "applied updates" in desc["stop.updates"] and "accuracy" not in desc["stop.updates"], desc
    assert "accuracy" in desc["stop.target_accuracy"] and "limit" in desc["stop.wall_time"], desc


def test_the_reference_says_a_rate_or_duration_needs_its_unit():
    assert "a bare number is refused" in scenario_ref.page()
