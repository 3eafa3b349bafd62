"""Maps drawn north up with axes and a stated orientation; every panel states its own
guarantee (the Laplace baseline's is not ours)."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from shuffledp.cli import main

pytest.importorskip("PIL")


def _rgb(path):
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGB")).astype(int)


def test_origin_lower_draws_the_last_row_on_top_and_states_it(tmp_path):
    """A map whose mass is in its last row (the northern edge of a SNAP box) is drawn with
    that mass at the top of the picture."""
    from shuffledp.analyzers.heatmap.render import _orientation_note, render_png

    north = np.zeros((8, 8))
    north[-1, :] = 1.0
    path = render_png(tmp_path / "n.png", [("north", north)], origin="lower", min_size=64,
                      extent=(-98.0, -97.0, 30.0, 31.0), axis_labels=("longitude", "latitude"))
    from shuffledp.analyzers.heatmap.render import COLORMAP

    def hot_rows(p):
        return np.where((_rgb(p) == COLORMAP[255]).all(axis=2))[0]

    def cold_rows(p):
        return np.where((_rgb(p) == COLORMAP[0]).all(axis=2))[0]

    hot, cold = hot_rows(path), cold_rows(path)
    assert hot.size and cold.size and hot.max() < cold.min()  # the north band is on top
    down = render_png(tmp_path / "s.png", [("north", north)], origin="upper", min_size=64)
    assert hot_rows(down).min() > cold_rows(down).max()  # image convention: at the bottom
    assert "north up" in _orientation_note("lower", ("longitude", "latitude"))
    assert "downward" in _orientation_note("upper", ("x", "y"))
    with pytest.raises(ValueError, match="extent"):
        render_png(tmp_path / "bad.png", [("a", north)], extent=(1.0, 0.0, 0.0, 1.0))


def test_heatmap_panels_state_each_guarantee_and_maps_are_north_up(tmp_path, monkeypatch):
    from shuffledp.analyzers.heatmap import render

    seen = {}
    real = render.render_png

    def spy(path, panels, **kw):
        seen.update(panels=panels, **kw)
        return real(path, panels, **kw)

    monkeypatch.setattr(render, "render_png", spy)
    res = CliRunner().invoke(main, ["heatmap", "--model", "shuffle", "--B", "4", "--n", "40",
                                    "--grid", "8", "--no-metrics", "--quiet", "--seed", "1",
                                    "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    titles = [t for t, _ in seen["panels"]]
    assert titles[0].splitlines()[1] == "no guarantee: the data itself"
    assert titles[1].splitlines()[1].startswith("central, pure eps-DP, eps=1, add_remove")
    assert titles[2].splitlines()[1].startswith("shuffle, (eps, delta)-DP, eps=1, d=1e-05")
    assert seen["origin"] == "lower" and seen["extent"] == (0.0, 1.0, 0.0, 1.0)
    assert not any("Laplace baseline: shuffle" in line for line in seen["caption"])


def test_snap_maps_have_longitude_and_latitude_axes():
    from shuffledp.cli.heatmap import _map_axes

    axes = _map_axes("snap", (30.0, 31.0, -98.0, -97.0))
    assert axes == {"origin": "lower", "extent": (-98.0, -97.0, 30.0, 31.0),
                    "axis_labels": ("longitude", "latitude")}
