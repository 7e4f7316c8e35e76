"""The new compressors and encodings end to end on the virtual clock and on real local processes."""
import pytest

from edgebed.emulator.engine import Engine
from edgebed.models import build_model, num_params
from edgebed.rundir import read_json, read_table
from edgebed.scenario import parse_scenario

MLP = num_params(build_model("mlp", 0))

BASE = {
    "name": "compression-e2e", "seed": 2,
    "dataset": {"train_samples": 2000},
    "model": {"name": "mlp"},
    "algorithm": {"name": "adacomp", "lr": 0.05, "batch_size": 10, "c": 0.01},
    "workers": {"n": 4},
    "stop": {"updates": 400, "wall_time": "3min"},
    "eval": {"every": 200, "test_samples": 500},
}
EF_COMPACT = {"error_feedback": True, "momentum": 0.5, "encoding": "compact", "values": "f16",
              "zstd": True, "pull": "bf16", "pull_delta": True}
Q8 = {"error_feedback": True, "quantize": "q8", "encoding": "compact", "pull": "f16"}


def _run(tmp_path, runtime, compression):
    sc = parse_scenario({**BASE, "compression": compression, "runtime": {"name": runtime}})
    res = Engine(sc, tmp_path).run()
    return res, read_table(res.path, "updates"), read_table(res.path, "evals"), read_json(res.path, "traffic.json")


@pytest.mark.parametrize("runtime", ["sim", "local"])
def test_error_feedback_compact_pushes_and_delta_pulls(tmp_path, runtime):
    res, updates, evals, traffic = _run(tmp_path, runtime, EF_COMPACT)
    assert res.summary["status"] == "complete" and res.summary["updates"] == 400
    assert evals["accuracy"].iloc[-1] > 0.6   # it learns (10 classes: chance is 0.1)
    # an AdaComp c = 0.01 push of the MLP in v1 costs 8 B per entry; varint + f16 (+ zstd) far less
    per_entry = (updates["bytes_in"] / updates["entries"]).median()
    assert per_entry < 5.0
    # pulls: bf16 halves a full model, deltas since the last pull shrink it further
    model = traffic["by_kind"]["model"]
    assert model["out_bytes"] / model["out_msgs"] < 0.5 * 4 * MLP


@pytest.mark.parametrize("runtime", ["sim", "local"])
def test_q8_pushes_cost_about_a_byte_an_entry(tmp_path, runtime):
    res, updates, evals, traffic = _run(tmp_path, runtime, Q8)
    assert res.summary["status"] == "complete"
    assert evals["accuracy"].iloc[-1] > 0.6
    assert (updates["bytes_in"] / updates["entries"]).median() < 4.0   # ~1–2 B index + 1 B code + header


def test_default_compression_keeps_v1_bytes(tmp_path):
    res, updates, _, _ = _run(tmp_path, "sim", {})
    assert updates["bytes_in"].between(updates["entries"] * 8, updates["entries"] * 8 + 200).all()


def test_inconsistent_compression_is_refused_with_the_key():
    from edgebed.scenario import ScenarioError
    with pytest.raises(ScenarioError, match="compression: momentum .* needs error_feedback: true"):
        parse_scenario({**BASE, "compression": {"momentum": 0.9}})
    with pytest.raises(ScenarioError, match="set encoding: compact"):
        parse_scenario({**BASE, "compression": {"quantize": "q8"}})
    with pytest.raises(ScenarioError, match="not to easgd"):
        parse_scenario({**BASE, "algorithm": {"name": "easgd"}, "compression": {"error_feedback": True}})
