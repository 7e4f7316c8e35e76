"""The HTML report in a real browser: headless Chromium loads the page and every figure decodes."""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from edgebed.analysis.report import write_report
from edgebed.emulator.engine import Engine
from edgebed.scenario import parse_scenario
from tests.capabilities import require

SCENARIO = {
    "name": "browser-test", "seed": 4, "dataset": {"train_samples": 1000}, "model": {"name": "mlp"},
    "algorithm": {"name": "adacomp", "lr": 0.05, "c": 0.05},
    "workers": {"n": 4, "classes": [{"name": "fast", "share": 0.5}, {"name": "slow", "share": 0.5, "slowdown": 3}]},
    "stop": {"updates": 120}, "eval": {"every": 40, "test_samples": 200}, "runtime": {"name": "sim"},
}
# Opened beside report.html: loads it in a frame and writes, into its own DOM, each image's state.
PROBE = """<!doctype html><html><body><iframe id="r" src="report.html" width="1200" height="900"></iframe>
<pre id="out">pending</pre><script>
document.getElementById('r').addEventListener('load', () => {
  const d = document.getElementById('r').contentDocument;
  const imgs = Array.from(d.images).map(i => ({alt: i.alt, ok: i.complete && i.naturalWidth > 0,
                                              w: i.naturalWidth, h: i.naturalHeight}));
  document.getElementById('out').textContent = 'RESULT' + JSON.stringify(
      {title: d.title, images: imgs, tables: d.querySelectorAll('table').length}) + 'END';
});
</script></body></html>"""


def chromium() -> str:
    return shutil.which("chromium") or shutil.which("chromium-browser") or ""


@pytest.mark.timeout(180)
def test_every_figure_of_the_report_loads_in_headless_chromium(tmp_path):
    browser = chromium()
    require(bool(browser), "Chromium", "apt-get install chromium (make provision)")
    run = Engine(parse_scenario(SCENARIO), out=tmp_path / "runs").run().path
    res = write_report([run], tmp_path / "report")
    (res.out_dir / "probe.html").write_text(PROBE)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
             "--virtual-time-budget=15000", f"--user-data-dir={tmp_path / 'profile'}"]
    out = subprocess.run([browser, *flags, "--dump-dom", (res.out_dir / "probe.html").as_uri()],
                         capture_output=True, text=True, timeout=120)
    found = re.search(r"RESULT(.*?)END", out.stdout, re.S)
    assert found, f"the probe did not report (exit {out.returncode}); stderr:\n{out.stderr[-2000:]}"
    state = json.loads(found.group(1).replace("&quot;", '"'))
    assert state["title"] == f"edgebed report: {run.name}"
    assert len(state["images"]) == len(res.plots) >= 5
    broken = [i["alt"] for i in state["images"] if not i["ok"]]
    assert not broken, f"figures that did not load: {broken}"
    assert all(i["w"] >= 500 for i in state["images"])
    assert state["tables"] >= 2
    # A screenshot to look at (kept in the test's tmp dir): a full-width render of the page.
    shot = tmp_path / "report.png"
    subprocess.run([browser, *flags[:-2], f"--user-data-dir={tmp_path / 'profile2'}", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=1100,3000", res.html.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.stat().st_size > 50_000
