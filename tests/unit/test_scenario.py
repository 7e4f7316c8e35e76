"""Scenario validation: errors name the file, the key path and what to do."""
import pytest

from edgebed.scenario import ScenarioError, class_assignment, load_scenario, parse_scenario
from edgebed import units

BASE = {"name": "t", "workers": {"n": 10}, "stop": {"updates": 5}}


def test_units_parse_human_strings():
    assert units.parse_rate("10mbit") == 10e6
    assert units.parse_rate("512kbit") == 512e3
    assert units.parse_duration("20ms") == pytest.approx(0.02)
    assert units.parse_duration("10min") == 600
    assert units.parse_fraction("1%") == pytest.approx(0.01)


@pytest.mark.parametrize("bad,fn", [("10mbps!", units.parse_rate), ("fast", units.parse_duration),
                                    ("150%", units.parse_fraction), ("-1mbit", units.parse_rate)])
def test_units_reject_garbage(bad, fn):
    with pytest.raises(ValueError):
        fn(bad)


def test_bad_unit_names_key_path_and_example():
    data = {**BASE, "workers": {"n": 2, "classes": [{"name": "a", "share": 1, "uplink": {"rate": "10 furlongs"}}]}}
    with pytest.raises(ScenarioError) as e:
        parse_scenario(data, "x.yaml")
    msg = str(e.value)
    assert "x.yaml" in msg and "workers.classes.0.uplink.rate" in msg and "10mbit" in msg


def test_unknown_key_is_an_error():
    with pytest.raises(ScenarioError) as e:
        parse_scenario({**BASE, "algorithm": {"name": "asgd", "learning_rate": 0.1}}, "x.yaml")
    assert "algorithm.learning_rate" in str(e.value) and "unknown key" in str(e.value)


def test_shares_must_sum_to_one():
    data = {**BASE, "workers": {"n": 10, "classes": [{"name": "a", "share": "30%"}, {"name": "b", "share": "30%"}]}}
    with pytest.raises(ScenarioError) as e:
        parse_scenario(data, "x.yaml")
    assert "sum to 1" in str(e.value) and "a=0.3" in str(e.value)


def test_stop_needs_a_condition_and_algorithm_name_checked():
    with pytest.raises(ScenarioError, match="at least one"):
        parse_scenario({**BASE, "stop": {}})
    with pytest.raises(ScenarioError, match="algorithm.name"):
        parse_scenario({**BASE, "algorithm": {"name": "sgd-magic"}})


def test_overrides_apply_and_units_resolve(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: s\nworkers: {n: 4, classes: [{name: a, share: 1, uplink: {rate: 1mbit, delay: 20ms}}]}\n"
                 "stop: {updates: 10}\n")
    sc = load_scenario(p, ("algorithm.c=0.1", "workers.classes.0.uplink.delay=5ms"))
    assert sc.algorithm.c == pytest.approx(0.1)
    assert sc.workers.classes[0].uplink.delay == pytest.approx(0.005)
    assert sc.workers.classes[0].uplink.rate == 1e6


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load_scenario(tmp_path / "nope.yaml")
    p = tmp_path / "b.yaml"
    p.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(p)


def test_class_assignment_follows_shares():
    sc = parse_scenario({**BASE, "workers": {"n": 10, "classes": [
        {"name": "a", "share": 0.3}, {"name": "b", "share": 0.4}, {"name": "c", "share": 0.3}]}})
    a = class_assignment(sc)
    assert [a.count(i) for i in range(3)] == [3, 4, 3]
    assert sc.class_of(9).name == "c"


@pytest.mark.parametrize("n", [1, 2, 7, 33, 1000])
def test_class_of_is_the_assignments_class_for_every_device(n):
    sc = parse_scenario({**BASE, "workers": {"n": n, "classes": [
        {"name": "a", "share": 0.35}, {"name": "b", "share": 0.05}, {"name": "c", "share": 0.6}]}})
    names = [c.name for c in sc.workers.classes]
    assert [sc.class_of(d).name for d in range(n)] == [names[i] for i in class_assignment(sc)]
    with pytest.raises(IndexError):
        sc.class_of(n)


def test_shipped_scenarios_validate():
    from pathlib import Path
    root = Path(__file__).parents[2].joinpath("scenarios")
    for p in sorted([*root.glob("*.yaml"), *root.glob("zoo/*.yaml")]):
        load_scenario(p)


def test_resolved_scenarios_round_trip(tmp_path):
    """What a run writes as scenario.yaml loads back to the same scenario (resume and studies rely on it)."""
    from pathlib import Path
    from edgebed.scenario import dump_scenario
    for p in sorted(Path(__file__).parents[2].joinpath("scenarios").glob("*.yaml")):
        sc = load_scenario(p)
        dump_scenario(sc, tmp_path / "s.yaml")
        assert load_scenario(tmp_path / "s.yaml") == sc, p.name


def test_runtime_section_errors_name_the_key():
    from edgebed.emulator.runtimes import get_runtime
    sc = parse_scenario({**BASE, "runtime": {"name": "sim", "sim": {"bogus": 1}}}, "x.yaml")
    with pytest.raises(ScenarioError, match="runtime.sim.bogus: unknown key"):
        get_runtime("sim")(sc, "/nonexistent")
