"""A real (virtual-clock) run read back through the public API and turned into its HTML report."""
from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import edgebed
from edgebed import datadict
from edgebed.analysis.report import ReportError, write_report
from edgebed.emulator.engine import Engine
from edgebed.scenario import parse_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = {
    "name": "api-test", "seed": 3, "dataset": {"train_samples": 1500}, "model": {"name": "mlp"},
    "algorithm": {"name": "adacomp", "lr": 0.05, "c": 0.05},
    "workers": {"n": 6, "classes": [{"name": "fast", "share": 0.5},
                                     {"name": "slow", "share": 0.5, "slowdown": 3}]},
    "stop": {"updates": 240}, "eval": {"every": 60, "test_samples": 300}, "runtime": {"name": "sim"},
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return Engine(parse_scenario(SCENARIO), out=tmp_path_factory.mktemp("runs")).run().path


@pytest.mark.timeout(120)
def test_load_run_returns_every_table_with_run_id_and_units(run_dir):
    run = edgebed.load_run(run_dir)
    assert run.run_id == run_dir.name and run.status == "complete"
    assert run.scenario["name"] == "api-test" and run.manifest["runtime"] == "sim"
    assert len(run.updates) == 240 and list(run.evals["update"]) == [60, 120, 180, 240]
    assert {"start", "hello", "stop"} <= set(run.events["event"])
    for frame in (run.updates, run.evals, run.events, run.traffic, run.traffic_by_type):
        assert set(frame["run"]) == {run.run_id}
        assert set(frame.columns) - {"run"} <= set(frame.attrs["units"])
    assert run.evals.attrs["units"]["ingress_bytes"] == "B"
    # the traffic tables add up to what the PS counted
    assert run.traffic_by_type["in_bytes"].sum() == run.summary["ingress_bytes"]
    assert run.traffic["push_bytes"].sum() == run.summary["push_bytes"]
    assert set(run.traffic["speed_class"]) == {"fast", "slow"} and len(run.traffic) == 6


@pytest.mark.timeout(60)
def test_parquet_fields_carry_unit_and_meaning(run_dir):
    schema = pq.read_schema(next((run_dir / "evals").glob("part-*.parquet")))
    assert schema.field("accuracy").metadata[b"unit"] == b"fraction"
    assert b"cumulative" in schema.field("ingress_bytes").metadata[b"description"]


def test_the_data_dictionary_in_the_docs_is_current_and_complete():
    from edgebed.rundir import SCHEMAS
    assert (ROOT / "docs" / "data-dictionary.md").read_text() == datadict.markdown()
    for table, schema in SCHEMAS.items():
        assert set(schema.names) == set(datadict.COLUMNS[table]), table


@pytest.mark.timeout(120)
def test_the_html_report_is_one_file_with_every_figure_and_readable_tables(run_dir, tmp_path):
    res = write_report([run_dir], tmp_path / "rep", formats=("pdf",))
    page = res.html.read_text()
    assert page.count("data:image/svg+xml;base64,") == len(res.plots)
    assert {"accuracy_vs_updates", "accuracy_vs_ingress", "accuracy_vs_virtual_time", "staleness",
            "classes", "traffic"} <= set(res.plots)
    assert all(p.with_suffix(".pdf").read_bytes().startswith(b"%PDF") for p in res.plots.values())
    cells = re.findall(r"<td[^>]*>(.*?)</td>", page)
    assert cells and not {"nan", "NaN", "False", "True", "None"} & set(cells)
    assert not [c for c in cells if re.fullmatch(r"-?\d+\.\d{4,}", c)], "raw floats in a table"
    assert "ps_payload_in_mb" not in page and "<script" not in page   # no raw names, nothing to run


def test_a_baseline_that_is_not_a_given_run_is_an_error(run_dir, tmp_path):
    with pytest.raises(ReportError, match="baseline 'runs/other' is not one of the runs given"):
        write_report([run_dir], tmp_path / "rep", baseline="runs/other")
