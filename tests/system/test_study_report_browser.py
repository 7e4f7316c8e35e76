"""The study report with two identical cells, in a real browser: headless Chromium renders the page,
and in the screenshot both cells' curves show in every plot (issue #56: one drawn over the other hid it)."""
from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import pytest
from PIL import Image

from edgebed.study.report import write_study_report
from edgebed.study.runner import load_study, run_study
from tests.capabilities import require
from tests.system.test_report_browser import chromium
from tests.unit.study.fakes import FakeRunner, write_study
from tests.unit.study.test_study_report_cells import BLUE, ORANGE, TWINS, colour_pixels

WIDTH = 1100
# Opened beside report.html: loads it in a frame as wide as the screenshot, and writes each figure's
# place on the page into its own DOM.
PROBE = f"""<!doctype html><html><body style="margin:0"><iframe id="r" src="report.html" width="{WIDTH}"
height="3000" style="border:0"></iframe><pre id="out">pending</pre><script>
document.getElementById('r').addEventListener('load', () => {{
  const d = document.getElementById('r').contentDocument;
  const imgs = Array.from(d.images).map(i => {{ const b = i.getBoundingClientRect();
    return {{alt: i.alt, ok: i.complete && i.naturalWidth > 0, x: b.left, y: b.top, w: b.width, h: b.height}}; }});
  document.getElementById('out').textContent = 'RESULT' + JSON.stringify({{images: imgs}}) + 'END';
}});
</script></body></html>"""


@pytest.mark.timeout(180)
def test_two_identical_cells_both_show_in_the_screenshot_of_the_study_report(tmp_path):
    browser = chromium()
    require(bool(browser), "Chromium", "apt-get install chromium (make provision)")
    run_study(load_study(write_study(tmp_path, **TWINS)), tmp_path / "out", FakeRunner())
    rep = write_study_report(tmp_path / "out" / "st")
    (rep.out_dir / "probe.html").write_text(PROBE)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
             "--force-device-scale-factor=1", "--hide-scrollbars", "--virtual-time-budget=15000"]
    out = subprocess.run([browser, *flags, f"--user-data-dir={tmp_path / 'p1'}", "--dump-dom",
                          (rep.out_dir / "probe.html").as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r"RESULT(.*?)END", out.stdout, re.S)
    assert found, f"the probe did not report (exit {out.returncode}); stderr:\n{out.stderr[-2000:]}"
    images = json.loads(found.group(1).replace("&quot;", '"'))["images"]
    assert len(images) == len(rep.plots) == 2 and all(i["ok"] for i in images), images
    shot = tmp_path / "study.png"   # kept in the test's tmp dir, to look at
    subprocess.run([browser, *flags, f"--user-data-dir={tmp_path / 'p2'}", f"--screenshot={shot}",
                    f"--window-size={WIDTH},3000", rep.html.as_uri()], capture_output=True, timeout=120)
    page = np.asarray(Image.open(shot).convert("RGB"))
    for i in images:
        assert i["y"] + i["h"] <= page.shape[0], f"{i['alt']} lies below the screenshot: {i}"
        x0, y0 = int(i["x"]), int(i["y"])
        axes = page[y0:y0 + int(i["h"]) // 2, x0:x0 + int(i["w"])]   # the upper half: axes, not legend
        assert colour_pixels(axes, BLUE) > 100, f"the first cell is hidden in {i['alt']}"
        assert colour_pixels(axes, ORANGE) > 100, f"the second cell is hidden in {i['alt']}"
    assert "asgd and asgd again have the same test accuracy" in rep.html.read_text()
