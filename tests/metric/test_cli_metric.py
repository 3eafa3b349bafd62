"""``shuffledp metric freq|itemwise``: outputs, report, and the one-line error path."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from shuffledp.accounting.guarantee import Neighbour
from shuffledp.cli import main

K = 12


@pytest.fixture()
def data(tmp_path):
    g = np.random.default_rng(0)
    users = g.choice(K, size=(200, 1000), p=g.dirichlet(np.ones(K)))
    path = tmp_path / "items.csv"
    lines = ["user_id,item"] + [f"u{i},{x}" for i, row in enumerate(users) for x in row]
    path.write_text("\n".join(lines) + "\n")
    return path, users


def _run(*args):
    return CliRunner().invoke(main, ["metric", *map(str, args)])


def _common(path, out, *extra):
    return ("--input", path, "--s", 3, "--t", 4, "--r", 0.25, "--out", out, *extra)


def test_freq_writes_release_and_report(data, tmp_path):
    path, users = data
    out = tmp_path / "out"
    res = _run("freq", *_common(path, out, "--target-alpha", 10, "--seed", 1))
    assert res.exit_code == 0, res.output
    rel = json.loads((out / "release.json").read_text())
    rep = json.loads((out / "report.json").read_text())
    assert len(rel["estimate"]) == K and abs(sum(rel["estimate"]) - 1) < 1e-9
    assert rep["guarantee"]["notion"] == "metric_emd" and rep["guarantee"]["epsilon"] <= 10
    assert rep["baseline"]["guarantee"]["notion"] == "pure"
    assert rep["baseline"]["guarantee"]["epsilon"] == pytest.approx(
        rep["guarantee"]["epsilon"] * 0.25)
    assert rep["release"] == "reproducible evaluation" and (rep["n"], rep["m"]) == (200, 1000)
    # the reported error is the exact d_EM between the release and the input's histogram
    from shuffledp.analyzers.metric.freq import product_emd

    truth = np.bincount(users.ravel(), minlength=K) / users.size
    assert rep["errors"]["gkrr"]["emd"] == pytest.approx(
        product_emd(3, 4, 0.25, np.array(rel["estimate"]), truth))
    assert rep["errors"]["baseline"]["emd"] > 0


def test_itemwise_writes_outputs(data, tmp_path):
    path, users = data
    out = tmp_path / "out"
    res = _run("itemwise", *_common(path, out, "--alpha0", 0.2, "--seed", 2))
    assert res.exit_code == 0, res.output
    outputs = np.load(out / "outputs.npy")
    assert outputs.shape == (users.size,) and outputs.min() >= 0 and outputs.max() < K
    rep = json.loads((out / "report.json").read_text())
    assert rep["composition_alpha"] == pytest.approx(200.0)
    assert rep["guarantee"]["epsilon"] < rep["composition_alpha"]
    assert rep["errors"]["debiased"]["emd"] < rep["errors"]["histogram"]["emd"]


def _one_line_error(res, code):
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    lines = [ln for ln in res.output.splitlines() if ln.startswith("Error")]
    assert len(lines) == 1
    return lines[0]


def test_usage_errors_exit_2(data, tmp_path):
    path, _ = data
    out = tmp_path / "o"
    line = _one_line_error(_run("freq", *_common(path, out)), 2)
    assert "exactly one of --alpha0 and --target-alpha" in line
    line = _one_line_error(_run("freq", *_common(path, out, "--alpha0", 1, "--target-alpha",
                                                   2)), 2)
    assert "exactly one" in line
    line = _one_line_error(_run("freq", "--input", path, "--s", 3, "--t", 4, "--r", 1.5,
                                "--alpha0", 0.1, "--out", out), 2)
    assert "--r" in line and "1.5" in line
    line = _one_line_error(_run("itemwise", *_common(path, out, "--alpha0", -1)), 2)
    assert "--alpha0" in line


@pytest.mark.parametrize("content,match", [
    ("user_id,item\nu1,3\nu1,12\n", "line 3: item 12 is outside the domain 0..11"),
    ("u1,3\nu1,x\n", "line 2: item must be an integer, got 'x'"),
    ("u1,3,4\n", "line 1: expected 'user_id,item'"),
    ("u1,3\nu1,4\nu2,5\n", "same number of items"),
    ("user_id,item\n", "no 'user_id,item' lines"),
])
def test_bad_input_files_exit_1(tmp_path, content, match):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    line = _one_line_error(_run("freq", *_common(path, tmp_path / "o", "--alpha0", 0.1)), 1)
    assert match in line


def test_missing_file_exit_2_and_refusal_exit_1(data, tmp_path):
    """A path that is not a regular file (missing included) is a usage error (exit 2), as
    the README promises; a refused release is exit 1."""
    path, _ = data
    line = _one_line_error(_run("freq", *_common(tmp_path / "nope.csv", tmp_path / "o",
                                                   "--alpha0", 0.1)), 2)
    assert "--input" in line
    line = _one_line_error(_run("itemwise", *_common(path, tmp_path / "o", "--alpha0", 2,
                                                       "--model", "local")), 1)
    assert "refused" in line and "vacuous" in line


@pytest.fixture()
def points(tmp_path):
    g = np.random.default_rng(3)
    xy = np.clip(g.normal(0.3, 0.1, size=(400, 6, 2)), 0, 0.999)
    path = tmp_path / "points.csv"
    lines = ["user_id,x,y"] + [f"u{i},{x:.5f},{y:.5f}" for i, row in enumerate(xy)
                               for x, y in row]
    path.write_text("\n".join(lines) + "\n")
    return path, xy


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_linear_writes_release_and_report(points, tmp_path, noise):
    from shuffledp.encoders.metric.spaces import grid_space

    path, xy = points
    out = tmp_path / noise
    extra = ("--delta", 1e-6) if noise == "gaussian" else ()
    res = _run("linear", "--input", path, "--grid", 8, "--alpha", 3, "--noise", noise,
               "--model", "central", "--seed", 2, "--out", out, *extra)
    assert res.exit_code == 0, res.output
    rep = json.loads((out / "report.json").read_text())
    g = rep["guarantee"]
    assert (g["notion"], g["epsilon"]) == ("metric_emd", 3.0)
    assert g["neighbour"] == Neighbour.BOUNDED_EMD.value
    assert g["delta"] == (1e-6 if noise == "gaussian" else 0.0)
    assert rep["baseline"]["guarantee"]["neighbour"] == Neighbour.REPLACE_ONE.value
    # the truth, recomputed independently: cells of an 8 x 8 grid, distance to cell (4, 4)
    cells = (np.minimum((xy[..., 1] * 8).astype(int), 7) * 8
             + np.minimum((xy[..., 0] * 8).astype(int), 7))
    truth = grid_space(8, 8).distances[cells.ravel(), 36].mean()
    assert rep["truth"] == pytest.approx(truth, rel=1e-12)
    assert rep["errors"]["metric"] == pytest.approx(abs(rep["estimate"] - truth), abs=1e-12)


@pytest.mark.parametrize("extra,code,match", [
    (("--noise", "gaussian"), 2, "needs --delta"),
    (("--delta", 1e-6), 2, "gaussian only"),
    (("--city", "2,0.5"), 2, "X,Y"),
    (("--alpha", -1), 2, "alpha"),
])
def test_linear_bad_options(points, tmp_path, extra, code, match):
    path, _ = points
    args = ["linear", "--input", path, "--out", tmp_path / "o", "--alpha", 1]
    res = _run(*args, *extra)
    assert res.exit_code == code and match in res.output, res.output
    assert "Traceback" not in res.output


def test_linear_refuses_unequal_users(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("user_id,x,y\na,0.1,0.1\na,0.2,0.2\nb,0.3,0.3\n")
    res = _run("linear", "--input", path, "--alpha", 1, "--out", tmp_path / "o")
    assert res.exit_code == 1 and "same number of points" in res.output, res.output


def test_freq_default_releases_the_mechanism_the_public_rule_picks(data, tmp_path):
    """Local model: --mechanism auto picks GKRR or Hadamard response by a simulation on
    public synthetic data; report.json names the choice and release.json holds only it."""
    from shuffledp.analyzers.metric.freq import choose_freq_mechanism

    path, users = data
    out = tmp_path / "auto"
    res = _run("freq", *_common(path, out, "--model", "local", "--target-alpha", 10,
                                "--seed", 1))
    assert res.exit_code == 0, res.output
    rep = json.loads((out / "report.json").read_text())
    rel = json.loads((out / "release.json").read_text())
    want = choose_freq_mechanism(200, 1000, 3, 4, 0.25, 1e-9, "local", target_alpha=10)
    assert rep["choice"]["mechanism"] == want["choice"]
    assert set(rep["choice"]["predicted_emd"]) == {"gkrr", "hadamard"}
    assert {"gkrr", "hadamard", "baseline"} <= set(rep["errors"])
    notion = {"gkrr": "metric_emd", "hadamard": "pure"}[want["choice"]]
    assert rep["guarantee"]["notion"] == notion == rel["guarantee"]["notion"]
    assert "released" in res.output
    for mech, notion in (("gkrr", "metric_emd"), ("hadamard", "pure")):
        o = tmp_path / mech
        res = _run("freq", *_common(path, o, "--model", "local", "--target-alpha", 10,
                                    "--seed", 1, "--mechanism", mech))
        assert res.exit_code == 0, res.output
        assert json.loads((o / "report.json").read_text())["guarantee"]["notion"] == notion
    res = _run("freq", *_common(path, tmp_path / "c", "--target-alpha", 10, "--mechanism",
                                "hadamard"))
    assert res.exit_code == 2 and "--mechanism" in res.output
