"""The command line as a user meets it: help, version, output modes, validation messages, pipes."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgebed import cli

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[2]
GOOD = """
name: ok
workers: {n: 4}
stop: {updates: 100}
eval: {every: 50}
model: {name: mlp}
"""


def edgebed(*args, cwd=None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgebed.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=50, **kw)


def test_bare_edgebed_prints_help_and_version_prints_the_version():
    bare = edgebed()
    assert bare.returncode == 0 and "usage: edgebed" in bare.stdout and "validate" in bare.stdout
    ver = edgebed("--version")
    assert ver.returncode == 0 and ver.stdout.strip() == "edgebed 0.1.0"


def test_validate_takes_several_files_and_study_files(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    out = edgebed("validate", str(good), str(ROOT / "scenarios/quickstart.yaml"),
                  str(ROOT / "scenarios/studies/crashes-smoke.yaml"))
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if ": ok — " in line]   # each followed by its classes
    assert lines[0].startswith(f"{good}: ok — 4 devices")
    assert "quickstart.yaml: ok" in lines[1]
    assert "crashes-smoke.yaml: ok — study crashes-smoke: 3 cells" in lines[2]


def test_validate_errors_name_the_file_and_the_key_with_a_suggestion(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("model: {name: mlp}", "modle: {name: mlp}\nalgorithm: {name: adacom}"))
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    out = edgebed("validate", str(good), str(bad))
    assert out.returncode == 2
    assert f"error: {bad}: modle: unknown key; did you mean 'model'?" in out.stderr
    assert f"error: {bad}: algorithm.name:" in out.stderr and "did you mean 'adacomp'?" in out.stderr
    assert f"{good}: ok" in out.stdout          # the good file is still reported


def test_validate_json_reports_each_file(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(GOOD.replace("every: 50", "every: 500"))
    out = edgebed("validate", str(good), "--json")
    data = json.loads(out.stdout)
    assert data[0]["ok"] and data[0]["kind"] == "scenario"
    assert any("eval.every: 500 is more than stop.updates (100)" in w for w in data[0]["warnings"])


@pytest.mark.parametrize("content, expected", [
    ("name: x\n".encode("utf-16"), "is UTF-16 text, not a UTF-8 YAML scenario file"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00", "is binary, not a UTF-8 YAML scenario file"),
    (b"name: x\n  bad: : [\n", "not valid YAML: line 2"),
    (b"name: caf\xe9\n", "not UTF-8 text"),
])
def test_unreadable_files_get_an_error_naming_the_file(tmp_path, content, expected):
    f = tmp_path / "s.yaml"
    f.write_bytes(content)
    out = edgebed("validate", str(f))
    assert out.returncode == 2
    assert f"error: {f}: {expected}" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("override, expected", [
    ("workers.classes.5.share=0.1", "workers.classes has 2 entries; use an index (0..1) or a name (a, b)"),
    ("failures.lost.0=1", "failures.lost is not in the file"),
    ("workers.n.x=3", "workers.n is a value (4), not a section"),
    ("stop.updates=[", "the value is not valid YAML"),
    ("stop..updates=3", "empty key"),
])
def test_bad_set_paths_are_errors_not_tracebacks(tmp_path, override, expected):
    f = tmp_path / "s.yaml"
    f.write_text(GOOD.replace("workers: {n: 4}", "workers: {n: 4, classes: [{name: a, share: 0.5}, "
                                                 "{name: b, share: 0.5}]}"))
    out = edgebed("validate", str(f), "--set", override)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"error: --set {override!r}: {expected}" in out.stderr and f"(on {f})" in out.stderr   # the --set's fault


def test_set_addresses_a_class_by_name(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(GOOD.replace("workers: {n: 4}", "workers: {n: 4, classes: [{name: a, share: 0.5}, "
                                                 "{name: b, share: 0.5}]}"))
    out = edgebed("validate", str(f), "--json", "--set", "workers.classes.b.uplink.rate=2mbit")
    assert json.loads(out.stdout)[0]["ok"], out.stdout


def test_a_megabytes_rate_is_refused_with_both_spellings(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(GOOD.replace("workers: {n: 4}", "workers: {n: 4, classes: [{name: a, share: 1, "
                                                 "uplink: {rate: 10MBps}}]}"))
    out = edgebed("validate", str(f))
    assert out.returncode == 2
    assert "tc reads 'mbps' as bytes per second (80mbit)" in out.stderr
    assert "write 80mbit for tc's reading or 10mbit" in out.stderr


def test_report_into_a_closed_pipe_exits_quietly(tmp_path):
    # `edgebed runs | head -1` on many runs: the reader closes the pipe early.
    for i in range(300):
        run = tmp_path / "runs" / f"r{i:03d}-20260101-000000"
        run.mkdir(parents=True)
        (run / "scenario.yaml").write_text("name: r\nworkers: {n: 1}\n")
        (run / "summary.json").write_text('{"status": "complete", "updates": 5}')
    out = subprocess.run(f"{sys.executable} -m edgebed.cli runs {tmp_path / 'runs'} | head -1",
                         shell=True, capture_output=True, text=True, timeout=50)
    assert out.stdout.startswith("run") or out.stdout.lstrip().startswith("run")
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr


def test_runs_lists_run_directories_as_json(tmp_path):
    run = tmp_path / "runs" / "demo-20260101-000000"
    run.mkdir(parents=True)
    (run / "scenario.yaml").write_text("name: demo\nworkers: {n: 3}\nalgorithm: {name: asgd}\n")
    (run / "summary.json").write_text('{"status": "complete", "updates": 7, "final_accuracy": 0.5}')
    rows = json.loads(edgebed("runs", str(tmp_path / "runs"), "--json").stdout)
    assert rows == [{"run": "demo-20260101-000000", "status": "complete", "scenario": "demo",
                     "algorithm": "asgd", "c": None, "runtime": "local", "devices": 3, "updates": 7,
                     "final_accuracy": 0.5, "ingress_bytes": None, "started": None, "wall_time_s": None,
                     "path": str(run)}]
    assert edgebed("runs", str(tmp_path / "nope")).returncode == 2


def test_common_options_work_before_and_after_the_verb():
    p = cli.build_parser()
    a = p.parse_args(["-q", "runs"])
    b = p.parse_args(["runs", "-q", "--json"])
    assert a.quiet and not a.json and b.quiet and b.json
