"""``shuffledp figure 3``: Fig. 3 of Ghazi et al. (AAAI 2023) in one command, for any
input, labelled as an evaluation (it shows the true heatmap)."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner
from PIL import Image

from shuffledp.accounting.guarantee import Neighbour
from shuffledp.cli import main


def _run(*args: str):
    return CliRunner().invoke(main, ["figure", *args], catch_exceptions=False)


def test_figure_3_rows_columns_and_label(tmp_path):
    r = _run("3", "--grid", "32", "--n", "200", "--epsilon", "1", "--epsilon", "5",
             "--seed", "3", "--quiet", "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["release"].startswith("evaluation, not a private release")
    assert rep["columns"] == ["true (no privacy)", "Laplace", "Laplace top 0.01%", "ours"]
    assert [row["epsilon"] for row in rep["rows"]] == [1.0, 5.0]
    for row in rep["rows"]:
        assert list(row["panels"]) == rep["columns"][1:]
        for panel in row["panels"].values():
            g = panel["guarantee"]
            assert g["epsilon"] == row["epsilon"] and g["neighbour"] == str(Neighbour.ADD_REMOVE)
            assert -1.0 <= panel["metrics"]["cc"] <= 1.0
    with Image.open(tmp_path / "figure3.png") as im:  # two rows of four panels, >= 256 px each
        w, h = im.size
    assert w >= 4 * 256 and h >= 2 * 256
    # the same seed draws the same figure
    r = _run("3", "--grid", "32", "--n", "200", "--epsilon", "1", "--epsilon", "5",
             "--seed", "3", "--quiet", "--out", str(tmp_path / "again"))
    again = json.loads((tmp_path / "again" / "report.json").read_text())
    assert again["rows"] == rep["rows"]


def test_figure_3_on_an_input_file(tmp_path):
    rng = np.random.default_rng(0)
    lines = ["user_id,x,y"] + [f"u{i % 60},{x:.4f},{y:.4f}"
                               for i, (x, y) in enumerate(rng.random((180, 2)))]
    f = tmp_path / "points.csv"
    f.write_text("\n".join(lines) + "\n")
    r = _run("3", "--input", str(f), "--grid", "16", "--epsilon", "2", "--top-percent", "1",
             "--quiet", "--out", str(tmp_path / "o"))
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert rep["n_users"] == 60 and rep["input"] == str(f)
    assert rep["columns"][2] == "Laplace top 1%" and rep["seed"] is None


def test_figure_refusals(tmp_path):
    r = CliRunner().invoke(main, ["figure", "4", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "Invalid value for 'NUMBER': '4'" in r.output
    r = CliRunner().invoke(main, ["figure", "3", "--bbox", "0,1,0,1", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--bbox" in r.output
    r = CliRunner().invoke(main, ["figure", "3", "--epsilon", "0", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--epsilon" in r.output
