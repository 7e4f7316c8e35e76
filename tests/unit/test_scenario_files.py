"""Hostile scenario files are refused quickly, in a few lines, before anything starts: YAML alias bombs,
recursive aliases, duplicate keys, numbers that are not finite (in the file and in ``--set``), and more
devices than the runtime can hold on this host."""
from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest

from edgebed.cli import _validate_one
from edgebed.scenario import MAX_ERROR_LINES, ScenarioError, load_scenario, read_yaml

ROOT = Path(__file__).resolve().parents[2]
QUICK = ROOT / "scenarios" / "quickstart.yaml"


def bomb(tmp_path: Path, levels: int, where: str = "eval:\n  dense:\n    near: *a{top}\n") -> Path:
    """A few hundred bytes whose aliases expand to 10^levels entries (billion laughs)."""
    lines = ["name: bomb", "anchors:", "  a0: &a0 [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]"]
    lines += [f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n" + where.format(top=levels - 1))
    return path


@pytest.mark.timeout(30)
def test_an_alias_bomb_is_refused_in_one_line_without_building_it(tmp_path):
    path = bomb(tmp_path, 9)    # 10^9 entries if built: ~8 GB of Python lists, gigabytes of error text
    assert path.stat().st_size < 700
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    result = _validate_one(path, ())
    assert time.perf_counter() - t < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000   # KiB: nothing was built
    assert not result["ok"] and len(result["errors"]) == 1
    assert "aliases expand it to more than 100,000 entries" in result["errors"][0] and "line" in result["errors"][0]


def test_a_moderate_expansion_still_gives_a_short_error(tmp_path):
    """Below the bound (10^4 entries), validation's errors are capped, not one line per entry."""
    result = _validate_one(bomb(tmp_path, 4), ())
    assert not result["ok"]
    text = "\n".join(result["errors"])
    assert len(result["errors"]) <= MAX_ERROR_LINES + 1 and len(text) < 20_000


def test_anchors_and_aliases_of_normal_size_still_work(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(QUICK.read_text().replace("  n: 24\n", "  n: 24\n") +
                    "timing:\n  step_time: &t 10ms\n")
    assert load_scenario(path).name == "quickstart"


def test_a_recursive_alias_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("name: loop\nx: &a [1, *a]\n")
    with pytest.raises(ScenarioError, match="recursive"):
        read_yaml(path)


def test_a_key_given_twice_is_an_error_naming_both_lines(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("name: dup\nalgorithm:\n  name: adacomp\n  lr: 0.05\n  c: 0.01\n  lr: 0.5\n")
    with pytest.raises(ScenarioError) as err:
        read_yaml(path)
    assert "'lr' appears twice" in str(err.value) and "line 4" in str(err.value) and "line 6" in str(err.value)


@pytest.mark.parametrize("text, key", [("  lr: 1e400\n", "algorithm.lr"), ("  lr: .nan\n", "algorithm.lr"),
                                       ("  lr: -.inf\n", "algorithm.lr")])
def test_numbers_that_are_not_finite_are_refused_with_their_key(tmp_path, text, key):
    path = tmp_path / "inf.yaml"
    path.write_text(f"name: inf\nalgorithm:\n  name: asgd\n{text}workers:\n  n: 2\nstop:\n  updates: 10\n")
    with pytest.raises(ScenarioError, match=rf"{path}: {key}: .* is not a finite number"):
        load_scenario(path)   # YAML reads 1e400 as text, the schema as inf: refused either way


def test_a_400_digit_wall_time_is_refused_not_made_infinite(tmp_path):
    path = tmp_path / "long.yaml"
    path.write_text("name: long\nstop:\n  wall_time: " + "9" * 400 + "\n")
    with pytest.raises(ScenarioError, match="stop.wall_time: a 400-digit number is too large"):
        read_yaml(path)


def test_set_with_a_number_that_is_not_finite_names_the_override():
    with pytest.raises(ScenarioError) as err:
        load_scenario(QUICK, ("algorithm.lr=1e400",))
    assert "--set 'algorithm.lr=1e400'" in str(err.value) and "not a finite number" in str(err.value)


@pytest.mark.parametrize("runtime", ["local", "docker"])
def test_a_million_devices_on_a_process_per_device_runtime_are_refused_at_validate(runtime):
    result = _validate_one(QUICK, ("workers.n=1000000", f"runtime.name={runtime}"))
    assert not result["ok"]
    text = "\n".join(result["errors"])
    assert "workers.n=1,000,000" in text and "MiB each" in text and "lower workers.n to at most" in text
