"""How-to pages lead with the task (issue 56): your-own-model.md opens with its worked example and
holds no measurement table; the zoo's measured runs and costs are on the performance page."""
from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_your_own_model_leads_with_its_worked_example_and_its_measurements_live_on_performance():
    page = (DOCS / "your-own-model.md").read_text()
    sections = re.findall(r"^## (.+)$", page, flags=re.M)
    assert sections[0] == "A worked example"
    assert "zoo numbers: begin" not in page and "updates per CPU-s" not in page
    perf = (DOCS / "performance.md").read_text()
    assert "zoo numbers: begin" in perf and "## The zoo's committed runs" in perf
    assert "performance.md#the-zoos-committed-runs" in page


def test_the_quickstart_starts_from_edgebed_new():
    page = (DOCS / "quickstart.md").read_text()
    first_command = re.search(r"^edgebed \w+.*$", page.split("## Start a project", 1)[1], flags=re.M).group(0)
    assert first_command.startswith("edgebed new ")
    assert page.index("## Start a project") < page.index("## Five minutes")
