"""Hostile and careless scenario files (issue #36.5, #41.2): alias bombs, duplicate keys, non-finite
numbers, more devices than the host holds, and numbers without their unit are refused with a short,
clear message."""
import pytest

from edgebed.scenario import ScenarioError, load_scenario, parse_scenario

BASE = {"name": "t", "workers": {"n": 10}, "stop": {"updates": 5}}
pytestmark = pytest.mark.timeout(30)


def _bomb(levels: int) -> str:
    """A billion-laughs scenario: each level lists the one before nine times."""
    lines = ["name: bomb", "workers: {n: 2}", "stop: {updates: 5}", "eval:", "  every: 10",
             "  dense:", "    every: 5", "    l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels):
        lines.append(f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]")
    lines.append(f"    near: *l{levels - 1}")
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_quickly_with_a_short_message(tmp_path):
    p = tmp_path / "bomb.yaml"
    p.write_text(_bomb(9))   # 9^9 = 387 M strings once expanded
    assert p.stat().st_size < 1000
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    msg = str(e.value)
    assert len(msg) < 2000 and str(p) in msg and "alias" in msg


def test_a_few_aliases_still_load(tmp_path):
    p = tmp_path / "ok.yaml"
    p.write_text("name: ok\nworkers: {n: 2, classes: [{name: a, share: 0.5, uplink: &l {rate: 1mbit}},\n"
                 "  {name: b, share: 0.5, uplink: *l}]}\nstop: {updates: 5}\n")
    sc = load_scenario(p)
    assert sc.workers.classes[1].uplink.rate == 1e6


def test_error_text_is_capped():
    """Thousands of wrong values give a bounded message that says how many more there were."""
    data = {**BASE, "eval": {"every": 10, "dense": {"every": 5, "near": ["x" * 500] * 5000}}}
    with pytest.raises(ScenarioError) as e:
        parse_scenario(data, "x.yaml")
    msg = str(e.value)
    assert len(msg) < 5000 and "more" in msg and "x.yaml: eval.dense.near.0" in msg


def test_duplicate_key_is_an_error(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("name: dup\nworkers: {n: 2}\nstop:\n  updates: 5\n  updates: 500\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert "duplicate key 'updates'" in str(e.value) and "line 5" in str(e.value)


def test_merge_keys_are_not_duplicates(tmp_path):
    p = tmp_path / "merge.yaml"
    p.write_text("name: m\nworkers: {n: 2}\nstop: {updates: 5}\n"
                 "algorithm: {<<: {name: asgd, lr: 0.1}, lr: 0.2}\n")
    assert load_scenario(p).algorithm.lr == pytest.approx(0.2)


@pytest.mark.parametrize("text,key", [
    ("algorithm: {name: asgd, lr: 1e400}", "algorithm.lr"),
    ("algorithm: {name: asgd, lr: .nan}", "algorithm.lr"),
    ("stop: {wall_time: " + "9" * 400 + "s}", "stop.wall_time"),
    ("stop: {wall_time: " + "9" * 400 + "}", "stop.wall_time"),
    ("timing: {dilation: .inf}", "timing.dilation"),
])
def test_non_finite_numbers_are_refused(tmp_path, text, key):
    p = tmp_path / "inf.yaml"
    p.write_text("name: inf\nworkers: {n: 2}\n" + ("" if "stop" in text else "stop: {updates: 5}\n") + text + "\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert key in str(e.value) and "finite" in str(e.value)


def test_local_devices_bounded_by_host_memory():
    from edgebed.emulator.capacity import problems
    many = {**BASE, "dataset": {"samples_per_device": 100}, "runtime": {"name": "local"}}
    sc = parse_scenario({**many, "workers": {"n": 1_000_000}})
    out = problems(sc, memory=24 << 30, nproc=None)
    assert any("workers.n=1000000" in p and "lower workers.n to at most 6" in p for p in out), out
    assert parse_scenario({**many, "workers": {"n": 16}}).workers.n == 16
    assert problems(parse_scenario({**many, "workers": {"n": 16}}), memory=24 << 30, nproc=None) == []
    few = problems(parse_scenario({**many, "workers": {"n": 600}}), memory=24 << 30, nproc=500)
    assert any("ulimit -u" in p and "at most 484" in p for p in few), few


def test_validate_refuses_a_million_local_agents(tmp_path, capsys):
    from edgebed.cli import main
    p = tmp_path / "s.yaml"
    p.write_text("name: s\nworkers: {n: 4}\nstop: {updates: 5}\nruntime: {name: local}\n"
                 "dataset: {samples_per_device: 100}\n")
    assert main(["validate", "--json", str(p), "--set", "workers.n=1000000"]) == 2
    assert "one agent process per device" in capsys.readouterr().out


# --- #41.2: units are never guessed ---------------------------------------------------------------

@pytest.mark.parametrize("key,value,hint", [
    ("uplink: {rate: 10}", "rate", "10mbit"),
    ("uplink: {delay: 10}", "delay", "10ms"),
    ("downlink: {jitter: 2.5}", "jitter", "2.5ms"),
    ("think_time: 3", "think_time", "3s"),
])
def test_bare_number_for_a_unit_is_refused_with_the_likely_intent(tmp_path, key, value, hint):
    p = tmp_path / "s.yaml"
    p.write_text(f"name: s\nworkers: {{n: 2, classes: [{{name: a, share: 1, {key}}}]}}\nstop: {{updates: 5}}\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    msg = str(e.value)
    assert str(p) in msg and value in msg and "no unit" in msg and hint in msg, msg


def test_bare_zero_is_zero_in_any_unit(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: s\nworkers: {n: 2, classes: [{name: a, share: 1, uplink: {delay: 0}}]}\n"
                 "stop: {updates: 5}\n")
    assert load_scenario(p).workers.classes[0].uplink.delay == 0


def test_bare_number_in_set_names_the_override(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: s\nworkers: {n: 2, classes: [{name: a, share: 1}]}\nstop: {updates: 5}\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p, ("workers.classes.a.uplink.rate=10",))
    msg = str(e.value)
    assert msg.startswith("--set 'workers.classes.a.uplink.rate=10'") and "10mbit" in msg, msg


def test_recorded_scenarios_keep_loading_and_now_carry_units(tmp_path):
    """A run's scenario.yaml written before units were required (bare SI numbers) still loads for
    --resume; what is written now carries units, so it can be run again as a scenario file."""
    from edgebed.scenario import dump_scenario, load_resolved
    p = tmp_path / "old.yaml"
    p.write_text("name: s\nworkers: {n: 2, classes: [{name: a, share: 1.0, uplink: {rate: 1000000.0, "
                 "delay: 0.02}}]}\nstop: {updates: 5, wall_time: 60.0}\n")
    sc = load_resolved(p)
    assert sc.workers.classes[0].uplink.rate == 1e6 and sc.stop.wall_time == 60
    dump_scenario(sc, tmp_path / "new.yaml")
    text = (tmp_path / "new.yaml").read_text()
    assert "rate: 1000000bit" in text and "delay: 0.02s" in text
    assert load_scenario(tmp_path / "new.yaml") == sc


# --- #41.4: switching the algorithm says what it dropped -----------------------------------------

def test_switching_algorithm_names_the_dropped_keys(tmp_path, caplog):
    p = tmp_path / "s.yaml"
    p.write_text("name: s\nworkers: {n: 2}\nstop: {updates: 5}\nalgorithm: {name: adacomp, c: 0.05, lr: 0.1}\n")
    with caplog.at_level("WARNING", logger="edgebed"):
        sc = load_scenario(p, ("algorithm.name=asgd",))
    assert sc.algorithm.name == "asgd" and sc.algorithm.lr == pytest.approx(0.1)
    said = caplog.text
    assert "--set 'algorithm.name=asgd'" in said and "c=0.05" in said and "dropped" in said, said
