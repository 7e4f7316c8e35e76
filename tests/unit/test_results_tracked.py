"""Committed study results are tracked: .gitignore must not hide benchmarks/results/studies/*/runs/."""
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(30)
def test_compact_study_runs_are_not_gitignored():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    inside = "benchmarks/results/studies/compression/runs/adacomp-c-0.01/seed-1/summary.json"
    top = "runs/quickstart-20261123-000000/summary.json"
    check = lambda p: subprocess.run(["git", "check-ignore", "-q", p], cwd=ROOT).returncode  # noqa: E731
    assert check(inside) == 1, f"{inside} is ignored: compact study results would never be committed"
    assert check(top) == 0, "the top-level runs/ directory (users' run directories) should stay ignored"
    tracked = subprocess.run(["git", "ls-files", "benchmarks/results/studies"], cwd=ROOT,
                             capture_output=True, text=True).stdout
    assert "/runs/adacomp-c-0.01/seed-1/summary.json" in tracked
