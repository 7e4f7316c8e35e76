"""Plot details a reader notices: the zoom to the band that matters, and a lone evaluation's point."""
import numpy as np
import pandas as pd
import pytest

from edgebed.advice import advice
from edgebed.analysis import plots
from edgebed.scenario import parse_scenario

pytestmark = pytest.mark.timeout(30)


def test_zoom_cuts_the_early_ramp_when_runs_differ_in_the_90s():
    ramp = [0.2, 0.6, 0.85, 0.91, 0.93, 0.95, 0.96, 0.97, 0.975, 0.978]
    other = [0.2, 0.5, 0.8, 0.90, 0.92, 0.935, 0.945, 0.95, 0.955, 0.96]
    lo, hi = plots.zoom([ramp, other], target=0.97)
    assert 0.75 < lo < 0.8 and 0.978 < hi < 1.0      # the last 75 % of each curve, not 0.2..1


def test_zoom_keeps_the_whole_axis_when_it_is_all_interesting():
    assert plots.zoom([[0.1, 0.3, 0.5, 0.7, 0.9]]) is None
    assert plots.zoom([[]]) is None


def test_a_one_evaluation_run_is_drawn_as_a_visible_marker(tmp_path):
    one = pd.DataFrame({"update": [100], "ingress_bytes": [10**6], "wall_time": [1.0],
                        "virtual_time": [np.nan], "accuracy": [0.8], "loss": [0.5], "push_bytes": [10**6]})
    path = plots.accuracy_vs_updates({"lone": one}, tmp_path / "u.png", target=0.97, formats=("svg",))
    svg = path.with_suffix(".svg").read_text()
    assert svg.count("<use ") >= 1          # the marker is drawn (matplotlib emits markers as <use>)


@pytest.mark.parametrize("change, expected", [
    ({"eval": {"every": 500}}, "eval.every: 500 is more than stop.updates (100)"),
    ({"failures": {"crash_probability": 0.5}}, "expected crashes for 4 devices"),
    ({"dataset": {"train_samples": 20}}, "fewer than algorithm.batch_size"),
])
def test_advice_warns_about_settings_that_cannot_give_what_is_asked(change, expected):
    data = {"name": "a", "workers": {"n": 4}, "stop": {"updates": 100}, "eval": {"every": 50}, **change}
    assert any(expected in w for w in advice(parse_scenario(data)))
    assert advice(parse_scenario({"name": "a", "workers": {"n": 4}, "stop": {"updates": 100},
                                  "eval": {"every": 50}})) == []


def _figures(monkeypatch):
    """The figures the plot functions save, kept for inspection."""
    from matplotlib.figure import Figure
    saved, original = [], Figure.savefig

    def keep(fig, *a, **k):
        saved.append(fig)
        return original(fig, *a, **k)
    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def test_the_axes_keep_every_point_the_zoom_is_a_panel_beside_them_and_legends_sit_off_the_data(tmp_path, monkeypatch):
    from edgebed.analysis import breakdown
    saved = _figures(monkeypatch)
    ramp = pd.DataFrame({"update": np.arange(1, 11) * 100, "accuracy": [0.2, 0.6, 0.85, 0.91, 0.93, 0.95,
                                                                         0.96, 0.97, 0.975, 0.978]})
    plots.plot_groups({"run": [ramp]}, "update", "accuracy", tmp_path / "a.png", "t", 0.97)
    fig = saved[-1]
    main, panel = fig.axes
    assert main.get_ylim()[0] <= 20 and main.get_ylim()[1] >= 97.8        # every point on the main axes
    assert 80 < panel.get_ylim()[0] < 85 and panel.get_position().x0 > main.get_position().x1   # beside, not over
    traffic = {"r": {"by_kind": {"push": {"in_bytes": 5e6, "out_bytes": 1e3}, "model": {"in_bytes": 1e3, "out_bytes": 9e6}},
                     "by_class": {"slow": {"in_bytes": 1e6, "out_bytes": 2e6}, "fast": {"in_bytes": 4e6, "out_bytes": 7e6}}}}
    breakdown.traffic(traffic, tmp_path / "t.png", order=["slow", "fast"])
    tfig = saved[-1]
    assert [t.get_text() for t in tfig.axes[0].get_xticklabels()] == ["slow", "fast"]   # scenario order
    for f in (fig, tfig):
        f.canvas.draw()
        r = f.canvas.get_renderer()
        legend = (f.legends or [a.get_legend() for a in f.axes if a.get_legend()])[0].get_window_extent(r)
        for ax in f.axes:
            assert not legend.overlaps(ax.get_window_extent(r)), "a legend covers the data"
