"""One report.json schema: ``heatmap`` and ``analyze`` both start from
:meth:`HeatmapRelease.to_report` and add their own keys."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from shuffledp.analyzers.heatmap.release import HeatmapRelease
from shuffledp.cli import main
from shuffledp.grid import Grid

COMMON = {"model", "release", "epsilon", "delta", "neighbour", "grid", "guarantee",
          "parameters", "protocol"}


def run(*args) -> None:
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == 0, res.output


def heatmap_report(d, model: str) -> dict:
    run("heatmap", "--model", model, "--grid", 4, "--n", 20, "--epsilon", 2, "--B", 4,
        "--delta", 1e-3, "--seed", 1, "--no-metrics", "--quiet", "--out", d)
    return json.loads((d / "report.json").read_text())


def analyze_report(d) -> dict:
    sim = "--plaintext-simulation"
    run("setup", "--grid", 4, "--n", 3, "--epsilon", 2, "--delta", 1e-3, "--B", 4, "--out", d,
        sim, "--no-keys")
    (d / "u.csv").write_text("0.1,0.2\n0.6,0.7\n")
    for j in range(3):
        run("encode", "--params", d / "params.json", "--input", d / "u.csv", "--out",
            d / "b" / f"{j}.bin", sim)
    run("shuffle", "--params", d / "params.json", "--input", d / "b", "--out", d / "m.bin", sim)
    run("analyze", "--params", d / "params.json", "--input", d / "m.bin", "--out", d / "o", sim)
    return json.loads((d / "o" / "report.json").read_text())


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    d = tmp_path_factory.mktemp("reports")
    return {"heatmap-central": heatmap_report(d / "hc", "central"),
            "heatmap-shuffle": heatmap_report(d / "hs", "shuffle"),
            "analyze": analyze_report(d / "an")}


def test_heatmap_and_analyze_share_the_common_fields(reports):
    """Regression: analyze wrote the grid as "4x4" and no epsilon, delta or neighbour at the
    top level; heatmap wrote no parameters and no protocol for a central release."""
    for name, rep in reports.items():
        assert COMMON <= set(rep), (name, COMMON - set(rep))
        assert set(rep["grid"]) == {"width", "height"}, name
        assert rep["epsilon"] == rep["guarantee"]["epsilon"] == 2.0, name
        assert rep["delta"] == rep["guarantee"]["delta"], name
        assert rep["neighbour"] == rep["guarantee"]["neighbour"], name
        assert rep["model"] == rep["guarantee"]["model"], name
        assert isinstance(rep["parameters"], dict) and isinstance(rep["protocol"], dict), name
    assert reports["heatmap-central"]["protocol"] == {}
    for name in ("heatmap-shuffle", "analyze"):
        assert {"B", "q", "r", "m", "n_users", "n_dropped"} <= set(reports[name]["protocol"])
    # each command's own keys
    assert {"metrics", "baselines", "seed", "n_users"} <= set(reports["heatmap-central"])
    assert {"shuffler", "authenticated", "path", "round_id"} <= set(reports["analyze"])
    assert reports["heatmap-shuffle"]["release"] == HeatmapRelease.REPRODUCIBLE
    assert reports["analyze"]["release"] == HeatmapRelease.PRIVATE


def _release(parameters: dict) -> HeatmapRelease:
    from shuffledp.accounting.guarantee import Guarantee

    g = Guarantee(notion="pure", model="central", epsilon=1.0, theorem="test")
    est = np.full((2, 3), 1 / 6)
    return HeatmapRelease(Grid(3, 2), est, est, g, parameters)


@pytest.mark.parametrize("randomness,release", [
    ("seeded", HeatmapRelease.REPRODUCIBLE), ("secure", HeatmapRelease.PRIVATE),
    (None, HeatmapRelease.PRIVATE)], ids=["seeded", "secure", "unstated"])
def test_to_report_states_whether_the_release_is_private(randomness, release):
    params = {} if randomness is None else {"randomness": randomness}
    rep = _release(params).to_report()
    assert set(rep) == COMMON and rep["release"] == release
    assert rep["grid"] == {"width": 3, "height": 2} and rep["protocol"] == {}
    json.dumps(rep, allow_nan=False)  # plain JSON, no default hook needed
