"""The scenario's algorithm section: each algorithm's own keys (a union on ``name``), overrides that
switch the algorithm, clear errors, and the Welcome's unchanged flat form."""
from __future__ import annotations

import pytest

from edgebed.emulator.welcome import welcome_config
from edgebed.algorithms import FLAT_KEYS, flat
from edgebed.ps.rules import RULES
from edgebed.scenario import ScenarioError, load_scenario, parse_scenario

pytestmark = pytest.mark.timeout(30)
BASE = {"name": "s", "workers": {"n": 2}, "stop": {"updates": 10}}


def algo(section=None, overrides=()):
    data = {**BASE, **({"algorithm": section} if section is not None else {})}
    return parse_scenario(data, "x.yaml", tuple(overrides)).algorithm


def test_each_algorithm_holds_only_its_own_keys():
    assert algo().model_dump() == {"name": "adacomp", "lr": 0.1, "batch_size": 10, "c": 0.01}
    assert algo({"lr": 0.05}).name == "adacomp"            # the name still defaults to adacomp
    assert algo({"name": "asgd"}).model_dump() == {"name": "asgd", "lr": 0.1, "batch_size": 10}
    assert algo({"name": "dynamic-averaging"}).model_dump() == {
        "name": "dynamic-averaging", "lr": 0.1, "batch_size": 10, "local_steps": 10, "delta": 1.0}
    assert algo({"name": "easgd", "moving_rate": 0.3}).describe() == \
        "α=0.1, b=10, moving rate=0.3, loss threshold=5.0"
    assert algo({"name": "comp-asgd", "c": "5%"}).ratio == pytest.approx(0.05)
    assert algo({"name": "model-averaging"}).ratio == 1.0   # sends every entry


@pytest.mark.parametrize("section, message", [
    ({"name": "sgd-magic"}, "x.yaml: algorithm.name: 'sgd-magic' is not one of asgd, comp-asgd, adacomp, "
                            "model-averaging, dynamic-averaging, easgd"),
    ({"name": "adacomps"}, "did you mean 'adacomp'?"),
    ({"name": "asgd", "c": 0.1}, "x.yaml: algorithm.c: a parameter of comp-asgd and adacomp, not of asgd; "
                                 "remove it or set algorithm.name to comp-asgd"),
    ({"name": "asgd", "learning_rate": 0.1}, "algorithm.learning_rate: unknown key; the keys here are "
                                             "name, lr, batch_size"),
    ({"name": "adacomp", "c": 0}, "algorithm.c: c must be > 0"),
    ({"name": "comp-asgd", "c": 2}, "algorithm.c: 2 is outside [0, 1]"),
])
def test_errors_say_what_where_and_what_to_do(section, message):
    with pytest.raises(ScenarioError) as e:
        algo(section)
    assert message in str(e.value)
    assert str(e.value).count("\n") == 0   # one problem, one line (no pydantic union noise)


def test_an_override_that_switches_the_algorithm_drops_the_previous_ones_keys():
    adacomp = {"name": "adacomp", "lr": 0.01, "c": 0.01}
    # a study cell {algorithm.name: asgd} on an AdaComp base: the base's c goes, α stays
    assert algo(adacomp, ["algorithm.name=asgd"]).model_dump() == {"name": "asgd", "lr": 0.01, "batch_size": 10}
    # name and c together, as a cell sets them (the union is resolved after every override)
    assert algo({"name": "asgd"}, ["algorithm.name=comp-asgd", "algorithm.c=0.1"]).c == 0.1
    assert algo(adacomp, ["algorithm.name=comp-asgd"]).c == 0.01      # a key both take stays
    assert algo(adacomp, ["algorithm.name=model-averaging", "algorithm.local_steps=5"]).local_steps == 5
    # a key set after the switch must be the new algorithm's
    with pytest.raises(ScenarioError, match="algorithm.c: a parameter of comp-asgd and adacomp, not of asgd"):
        algo(adacomp, ["algorithm.name=asgd", "algorithm.c=0.1"])
    with pytest.raises(ScenarioError, match="algorithm.c: a parameter of"):
        algo({"name": "asgd"}, ["algorithm.c=0.1"])
    # the same name again switches nothing: a wrong key in the file is still reported
    with pytest.raises(ScenarioError, match="algorithm.c: a parameter of"):
        algo({"name": "asgd", "c": 0.1}, ["algorithm.name=asgd"])


def test_cli_set_switches_a_shipped_scenario(tmp_path):
    sc = load_scenario("scenarios/quickstart.yaml", ("algorithm.name=easgd", "algorithm.moving_rate=0.2"))
    assert sc.algorithm.model_dump() == {"name": "easgd", "lr": 0.05, "batch_size": 10, "moving_rate": 0.2,
                                         "loss_threshold": 5.0, "period": None}


def test_the_flat_form_of_older_runs_reads_as_its_algorithms_keys():
    """scenario.yaml of runs made before the union holds every algorithm's keys (FLAT_KEYS)."""
    old = {"name": "asgd", "lr": 0.05, "batch_size": 10, "c": 0.3, "local_steps": 10, "delta": 1.0,
           "moving_rate": 0.1, "loss_threshold": 5.0}
    assert algo(old).model_dump() == {"name": "asgd", "lr": 0.05, "batch_size": 10}
    assert algo({**old, "name": "easgd"}).model_dump() == {"name": "easgd", "lr": 0.05, "batch_size": 10,
                                                           "moving_rate": 0.1, "loss_threshold": 5.0, "period": None}
    partial = {k: v for k, v in old.items() if k != "delta"}   # not the recorded form: the keys are checked
    with pytest.raises(ScenarioError, match="algorithm.c: a parameter of"):
        algo(partial)


@pytest.mark.parametrize("name", sorted(RULES))
def test_welcome_carries_the_flat_form_as_before(name):
    """The Welcome's bytes cross the emulated link: its algorithm stays the flat form, every key of
    FLAT_KEYS with the other algorithms' at their defaults (so sim tables stay bit-identical)."""
    sc = parse_scenario({**BASE, "algorithm": {"name": name, "lr": 0.05}})
    sent = welcome_config(sc, 0, RULES[name].compressor, {}).algorithm
    assert list(sent) == list(FLAT_KEYS)
    assert sent == {"name": name, "lr": 0.05, "batch_size": 10, "c": 0.01, "local_steps": 10, "delta": 1.0,
                    "moving_rate": 0.1, "loss_threshold": 5.0}
    assert flat(sc.algorithm) == sent
    assert set(FLAT_KEYS) <= {k for rule in RULES.values() for k in rule.Params.model_fields}
