"""docs/extending.md's four worked examples run as the page shows them (issue 56): every fenced
Python block is taken out of the page — a block with a title is written to that file, the others of a
section are that section's script — and each section's script runs in a fresh interpreter."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "extending.md"
BLOCK = re.compile(r'^```python(?: title="([^"]+)")?\n(.*?)^```$', re.S | re.M)
SECTIONS = ["An update rule", "A runtime", "A data format", "A check on hostile input"]


def blocks() -> tuple[dict[str, str], dict[str, str]]:
    """({file name: code} of the titled blocks, {section: its untitled blocks, joined})."""
    files, scripts = {}, {}
    for part in re.split(r"^## ", PAGE.read_text(), flags=re.M)[1:]:
        title, _, body = part.partition("\n")
        for name, code in BLOCK.findall(body):
            if name:
                files[name] = code
            else:
                scripts[title] = scripts.get(title, "") + code
    return files, scripts


def test_the_page_has_the_four_guides_each_with_code():
    files, scripts = blocks()
    assert list(scripts) == SECTIONS and files.keys() == {"csvdigits.py"}


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("section", SECTIONS)
def test_each_guides_example_runs_as_shown(section, tmp_path):
    files, scripts = blocks()
    for name, code in files.items():
        (tmp_path / name).write_text(code)
    (tmp_path / "example.py").write_text(scripts[section])
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=170)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
