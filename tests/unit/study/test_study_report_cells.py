"""The study report keeps cells apart: one order of cells in every table, identical cells both visible
in the plots and named in a note (issue #56, point 2)."""
from __future__ import annotations

import numpy as np
import pandas as pd
from PIL import Image

from edgebed.study.report import write_study_report
from edgebed.study.runner import load_study, run_study
from tests.unit.study.fakes import COMPRESSION, FakeRunner, write_study

TWINS = dict(baseline="asgd", cells=[{"label": "asgd", "set": {"algorithm.name": "asgd"}},
                                     {"label": "asgd again", "set": {"algorithm.name": "asgd"}}])


def colour_pixels(img: np.ndarray, rgb: tuple, tol: float = 40.0) -> int:
    """Pixels of ``img`` (H×W×3, 0–255) within ``tol`` of ``rgb``."""
    return int((np.linalg.norm(img[..., :3].astype(float) - np.array(rgb, float), axis=-1) < tol).sum())


BLUE, ORANGE = (31, 119, 180), (255, 127, 14)   # matplotlib's C0 and C1: the first and second cell


def axes_part(png) -> np.ndarray:
    """The plot's upper half: the axes, without the legend below them (which names every cell)."""
    img = np.asarray(Image.open(png).convert("RGB"))
    return img[: img.shape[0] // 2]


def test_every_table_lists_the_cells_in_the_study_order(tmp_path):
    run_study(load_study(write_study(tmp_path, **COMPRESSION)), tmp_path / "out", FakeRunner())
    rep = write_study_report(tmp_path / "out" / "st")
    study_order = ["asgd", "adacomp", "comp-asgd"]   # not alphabetical
    assert list(pd.read_csv(rep.table_csv)["label"]) == study_order
    assert list(dict.fromkeys(pd.read_csv(rep.classes_csv)["cell"])) == study_order
    md = rep.markdown.read_text()
    per_class = md.split("## Applied updates per speed class")[1]
    rows = [line.split("|")[1].strip() for line in per_class.splitlines() if line.startswith("| ")][1:]
    assert list(dict.fromkeys(rows)) == study_order


def test_two_identical_cells_are_both_visible_and_named_in_a_note(tmp_path):
    run_study(load_study(write_study(tmp_path, **TWINS)), tmp_path / "out", FakeRunner())
    rep = write_study_report(tmp_path / "out" / "st")
    note = [n for n in rep.notes if n.startswith("asgd and asgd again have the same test accuracy")]
    assert note and "at every evaluation" in note[0]
    assert note[0] in rep.html.read_text() and note[0] in rep.markdown.read_text()
    for png in rep.plots.values():
        axes = axes_part(png)
        # the second cell is drawn over the first: the first must still show (it is wider, another style)
        assert colour_pixels(axes, BLUE) > 150, png.name
        assert colour_pixels(axes, ORANGE) > 150, png.name


def test_coincidences_find_the_point_where_two_cells_part():
    from edgebed.analysis.plots import coincidences
    x = np.arange(1, 11) * 100.0
    same = pd.DataFrame({"update": x, "accuracy": np.linspace(0.5, 0.9, 10)})
    late = same.assign(accuracy=np.where(x > 700, 0.4, same["accuracy"]))   # a crash after update 700
    other = same.assign(accuracy=same["accuracy"] - 0.1)
    got = coincidences({"a": [same], "b": [late], "c": [other], "d": [same.copy()]}, "update", "accuracy")
    assert got == [("a", "b", 700.0, False), ("a", "d", 1000.0, True), ("b", "d", 700.0, False)]


class CrashingRunner(FakeRunner):
    """A FakeRunner whose runs' summaries say failures.crash meant 1 crash per class and 1 happened
    in ``fast`` only."""

    def __call__(self, sc, out, progress):
        import json
        res = super().__call__(sc, out, progress)
        res.summary["crashes"] = {"form": "failures.crash", "unit": "updates",
                                  "intended": {"fast": 1, "slow": 1}, "realised": {"fast": 1, "slow": 0}}
        (res.path / "summary.json").write_text(json.dumps(res.summary))
        return res


def test_the_per_class_table_says_intended_and_realised_crashes(tmp_path):
    run_study(load_study(write_study(tmp_path, **TWINS)), tmp_path / "out", CrashingRunner())
    rep = write_study_report(tmp_path / "out" / "st")
    classes = pd.read_csv(rep.classes_csv)
    fast = classes[(classes.cell == "asgd") & (classes.speed_class == "fast")].iloc[0]
    slow = classes[(classes.cell == "asgd") & (classes.speed_class == "slow")].iloc[0]
    assert (fast.crash_intended, fast.crash_realised, slow.crash_intended, slow.crash_realised) == (1, 1, 1, 0)
    md = rep.markdown.read_text()
    assert "crashes intended → realised (mean over seeds)" in md and "| 1 → 0 |" in md
