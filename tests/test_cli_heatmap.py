"""`shuffledp heatmap` end to end on tiny grids, and its bad-input behaviour."""

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from shuffledp.cli import main


def run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


@pytest.mark.parametrize("model", ["central", "shuffle"], ids=["central", "shuffle"])
def test_heatmap_end_to_end(tmp_path, model):
    out = tmp_path / "o"
    res = run(["heatmap", "--grid", "12x9", "--n", "60", "--epsilon", "2", "--model", model,
               "--B", "16", "--seed", "3", "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    est = np.load(out / "estimate.npy")
    assert est.dtype == np.float64 and est.shape == (9, 12)
    assert (est >= 0).all() and est.sum() == pytest.approx(1.0)
    rep = json.loads((out / "report.json").read_text())
    assert rep["model"] == model and rep["epsilon"] == 2.0
    assert rep["grid"] == {"width": 12, "height": 9} and rep["n_users"] == 60
    assert set(rep["metrics"]) >= {"ours", "laplace"}
    assert {"emd", "kl", "cc", "sim", "mse", "l1"} <= set(rep["metrics"]["ours"])
    assert rep["seconds"] > 0
    assert (out / "heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if model == "shuffle":
        p = rep["protocol"]
        assert {"B", "q", "r", "m", "messages_per_user", "bits_per_user", "bytes_per_user",
                "n_users", "n_dropped"} <= set(p)
        assert rep["delta"] == 1e-5
    else:
        assert rep["delta"] == 0.0
    # same seed, same estimate
    out2 = tmp_path / "o2"
    run(["heatmap", "--grid", "12x9", "--n", "60", "--epsilon", "2", "--model", model,
         "--B", "16", "--seed", "3", "--out", str(out2), "--quiet", "--no-metrics"])
    np.testing.assert_array_equal(est, np.load(out2 / "estimate.npy"))


def test_csv_input(tmp_path):
    csv = tmp_path / "u.csv"
    csv.write_text("user_id,x,y,weight\na,0.1,0.2,1\na,0.15,0.2,2\nb,0.8,0.9,1\n")
    res = run(["heatmap", "--input", str(csv), "--grid", "8", "--out", str(tmp_path / "o"),
               "--quiet", "--evaluate"])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "o" / "report.json").read_text())["n_users"] == 2


@pytest.mark.parametrize("content,msg", [
    ("user_id,x,y\na,1.2,0.5\n", "1.2"),
    ("user_id,x,y\na,nan,0.5\n", "nan"),
    ("user_id,x,y,weight\na,0.1,0.5,-1\n", "-1"),
    ("user_id,x,y,colour\na,0.1,0.5,red\n", "colour"),
    ("user_id,x,y,weight\na,0.1,0.5,0\n", "zero total weight"),
], ids=["x-out-of-range", "x-nan", "negative-weight", "unknown-column", "zero-total-weight"])
def test_bad_csv_is_a_clear_error(tmp_path, content, msg):
    csv = tmp_path / "bad.csv"
    csv.write_text(content)
    res = run(["heatmap", "--input", str(csv), "--grid", "8", "--out", str(tmp_path / "o")])
    assert res.exit_code != 0
    assert msg in res.output
    assert "Traceback" not in res.output


def test_malformed_snap_line_reports_line_number(tmp_path):
    snap = tmp_path / "s.txt"
    snap.write_text("1\t2010-01-01T00:00:00Z\t30.1\t-97.7\t11\n2\tnot enough fields\n")
    res = run(["heatmap", "--input", str(snap), "--format", "snap", "--bbox", "30,31,-98,-97",
               "--grid", "8", "--out", str(tmp_path / "o")])
    assert res.exit_code != 0 and "line 2" in res.output


@pytest.mark.parametrize("args,msg", [
    (["--epsilon", "0"], "--epsilon"),
    (["--epsilon", "-1"], "--epsilon"),
    (["--w", "0"], "--w"),
    (["--grid", "0x3"], "--grid"),
    (["--grid", "banana"], "--grid"),
    (["--model", "shuffle", "--delta", "1.5"], "--delta"),
    (["--model", "shuffle", "--B", "0"], "--B"),
], ids=["epsilon-zero", "epsilon-negative", "w-zero", "grid-zero-width", "grid-text",
        "delta-above-one", "B-zero"])
def test_bad_arguments_name_the_option(tmp_path, args, msg):
    res = run(["heatmap", "--out", str(tmp_path / "o"), "--grid", "8", *args])
    assert res.exit_code != 0
    assert msg in res.output
    assert "Traceback" not in res.output


def _ok(res):
    assert res.exit_code == 0, res.output
    return res


def test_default_noise_is_fresh_and_the_default_run_says_evaluation(tmp_path):
    """Regression: --seed defaulted to 0, so two default runs were bit-identical. The
    default run (built-in data) shows the true heatmap and a baseline: an evaluation, which
    its report and progress say, never a private release."""
    base = ["heatmap", "--grid", "12x9", "--n", "60", "--no-metrics"]
    outs = [tmp_path / "a", tmp_path / "b"]
    for o in outs:
        res = _ok(run([*base, "--out", str(o)]))
        assert "evaluation on built-in synthetic data, not a private release (all noise " \
               "from fresh OS entropy)" in res.output
        assert "private release:" not in res.output
    a, b = (np.load(o / "estimate.npy") for o in outs)
    # Equal only if the Laplace noise of every measured cell repeated: probability ~0.
    assert not np.array_equal(a, b)
    rep = json.loads((outs[0] / "report.json").read_text())
    assert rep["release"] == "evaluation, not a private release" and rep["seed"] is None
    assert rep["mode"] == "evaluation" and "not a private release" in rep["evaluation"]
    # the data set stays the built-in one
    assert rep["input"] == "synthetic_mixture(n_users=60, rng=0)"


def test_seeded_runs_are_marked_as_evaluation(tmp_path):
    res = _ok(run(["heatmap", "--grid", "8", "--n", "20", "--no-metrics", "--seed", "5",
                   "--out", str(tmp_path)]))
    assert "reproducible evaluation, not a private release" in res.output
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["release"] == "reproducible evaluation, not a private release"
    assert rep["seed"] == 5


@pytest.mark.parametrize("args,msg", [
    (["--grid", "65536"], "--grid 65536x65536"),
    (["--grid", "100000x100000"], "--grid 100000x100000"),
    (["--n", "1000000000"], "--n 1000000000"),
    (["--model", "shuffle", "--grid", "4096", "--n", "20"], "messages per user"),
], ids=["grid-65536", "grid-1e5-squared", "n-1e9", "shuffle-messages"])
def test_absurd_sizes_are_refused_before_allocating(tmp_path, args, msg):
    """Regression: these died with numpy MemoryError (or ran for hours)."""
    res = run(["heatmap", "--out", str(tmp_path / "o"), "--no-metrics", *args])
    assert res.exit_code == 1, res.output
    assert msg in res.output and "--allow-large" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "o").exists()


def test_allow_large_overrides_the_refusal(tmp_path, monkeypatch):
    from shuffledp.cli import common as cli_common

    monkeypatch.setattr(cli_common, "MAX_MEMORY_BYTES", 1)
    args = ["heatmap", "--grid", "8", "--n", "20", "--no-metrics", "--quiet",
            "--out", str(tmp_path)]
    res = run(args)
    assert res.exit_code == 1 and "refusing" in res.output
    _ok(run([*args, "--allow-large"]))


def test_csv_field_over_the_csv_module_limit(tmp_path):
    """Regression: a field over 131,072 characters raised _csv.Error with a traceback."""
    csv = tmp_path / "long.csv"
    csv.write_text("user_id,x,y\n" + "a" * 200_000 + ",0.1,0.2\n")
    res = run(["heatmap", "--input", str(csv), "--grid", "8", "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and f"--input {csv}" in res.output
    assert "field larger than field limit" in res.output


def test_outputs_replace_a_fifo_instead_of_blocking(tmp_path):
    """Regression: np.save(out/estimate.npy) blocked forever on a FIFO planted there."""
    import os
    import signal

    out = tmp_path / "o"
    out.mkdir()
    os.mkfifo(out / "estimate.npy")

    def boom(signum, frame):
        raise TimeoutError("heatmap blocked on a FIFO")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(20)
    try:
        res = run(["heatmap", "--grid", "8", "--n", "20", "--no-metrics", "--quiet",
                   "--out", str(out), "--force"])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert res.exit_code == 0, res.output
    assert np.load(out / "estimate.npy").shape == (8, 8)
    assert sorted(p.name for p in out.iterdir()) == ["estimate.npy", "heatmap.png",
                                                     "report.json"]


def test_heatmap_report_states_the_neighbour_relation(tmp_path):
    import json

    from click.testing import CliRunner

    from shuffledp.cli import main

    runner = CliRunner()
    zero_out = "zero out one user's contribution (n public)"
    for model, nb, text in [("central", None, zero_out), ("shuffle", None, zero_out),
                            ("central", "add_remove", "add/remove one user"),
                            ("central", "replace", "replace one user (n public)"),
                            ("shuffle", "zero_out", "zero out one user's contribution (n public)")]:
        out = tmp_path / f"{model}-{nb}"
        args = ["heatmap", "--grid", "16", "--n", "20", "--model", model, "--B", "16",
                "--no-metrics", "--quiet", "--seed", "1", "--out", str(out)]
        if nb:
            args += ["--neighbour", nb]
        res = runner.invoke(main, args)
        assert res.exit_code == 0, res.output
        report = json.loads((out / "report.json").read_text())
        assert report["guarantee"]["neighbour"] == text
    res = runner.invoke(main, ["heatmap", "--model", "shuffle", "--neighbour", "add_remove",
                               "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "--neighbour" in res.output


@pytest.mark.parametrize("metric_set", ["fast", "full", "none"])
def test_metric_sets(tmp_path, metric_set):
    """fast: exact EMD for ours and Laplace only (the top-t% baselines get None); full: for
    every heatmap; none: no metrics."""
    out = tmp_path / "o"
    res = run(["heatmap", "--grid", "12", "--n", "40", "--seed", "2", "--out", str(out),
               "--quiet", "--metrics", metric_set])
    assert res.exit_code == 0, res.output
    rep = json.loads((out / "report.json").read_text())
    assert rep["metric_set"] == metric_set
    m = rep["metrics"]
    if metric_set == "none":
        assert m == {}
        return
    assert set(m) == {"ours", "laplace", "laplace_top_1%", "laplace_top_0.1%"}
    assert isinstance(m["ours"]["emd"], float) and isinstance(m["laplace"]["emd"], float)
    top_emd = [m[k]["emd"] for k in ("laplace_top_1%", "laplace_top_0.1%")]
    assert all(e is None for e in top_emd) if metric_set == "fast" else all(
        isinstance(e, float) for e in top_emd)


def test_figure_has_header_and_colour_bar(tmp_path):
    """The PNG carries a caption (guarantee, data) above the panels and a colour bar."""
    from PIL import Image

    from shuffledp.analyzers.heatmap.render import render_png

    h = np.random.default_rng(0).random((16, 16))
    plain = Image.open(render_png(tmp_path / "a.png", [("x", h)]))
    rich = Image.open(render_png(tmp_path / "b.png", [("x", h)], caption=["l1", "l2"],
                                 colorbar=True))
    assert rich.height > plain.height and rich.width > plain.width


def test_default_data_is_the_documented_size():
    from shuffledp.cli import heatmap as cli

    assert cli.SYNTHETIC_USERS == 2000


def test_heatmap_floor_rounding_reaches_the_protocol(tmp_path):
    out = tmp_path / "o"
    res = run(["heatmap", "--grid", "8", "--n", "20", "--model", "shuffle", "--B", "4",
               "--rounding", "floor", "--seed", "1", "--no-metrics", "--quiet", "--out",
               str(out)])
    assert res.exit_code == 0, res.output
    rep = json.loads((out / "report.json").read_text())
    assert "floor" in json.dumps(rep["parameters"]) + json.dumps(rep["protocol"])


def _png_width(path) -> int:
    from PIL import Image

    with Image.open(path) as im:
        return im.size[0]


def _keys(obj) -> set[str]:
    """Every key of a JSON document, at any depth."""
    if isinstance(obj, dict):
        return set(obj).union(*(_keys(v) for v in obj.values()))
    if isinstance(obj, list):
        return set().union(*(_keys(v) for v in obj))
    return set()


EVALUATION_ONLY = {"n_users", "n_points", "metrics", "metrics_on", "baselines", "seconds",
                   "seconds_mechanism", "evaluation"}


def test_a_charged_release_writes_only_what_was_charged(tmp_path):
    """Regression: a --budget-ledger run charged the estimate but its heatmap.png showed the
    exact heatmap and the Laplace baseline (a second release on the same users) and its
    report held n_users and n_points, which add/remove treats as private."""
    from shuffledp.accounting.ledger import BudgetLedger

    led = tmp_path / "ledger.json"
    res = _ok(run(["heatmap", "--grid", "16", "--n", "37", "--epsilon", "1", "--out",
                   str(tmp_path / "r"), "--budget-ledger", str(led), "--budget-epsilon", "3",
                   "--budget-delta", "1e-6"]))
    assert not re.search(r"(?<![\w.])37(?![\w.])", res.output)  # n is not printed either
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    assert rep["release"] == "private" and rep["mode"] == "release"
    assert not _keys(rep) & EVALUATION_ONLY, _keys(rep) & EVALUATION_ONLY
    assert "37" not in json.dumps(rep["input"])
    # the receipt names the ledger entry that paid for it
    (charge,) = BudgetLedger.open(led).releases
    assert rep["budget_ledger"]["entry"] == 1 and charge["event"] == rep["guarantee"]["event"]
    # one panel (the estimate) against the evaluation's three (truth, baseline, ours)
    _ok(run(["heatmap", "--grid", "16", "--n", "37", "--no-metrics", "--quiet", "--out",
             str(tmp_path / "e")]))
    assert 2 * _png_width(tmp_path / "r" / "heatmap.png") < \
        _png_width(tmp_path / "e" / "heatmap.png")
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [
        "estimate.npy", "heatmap.png", "report.json"]


def test_real_data_is_a_private_release_unless_evaluate(tmp_path):
    csv = tmp_path / "u.csv"
    csv.write_text("user_id,x,y\n" + "".join(f"u{i},0.{i % 9 + 1},0.5\n" for i in range(23)))
    res = _ok(run(["heatmap", "--input", str(csv), "--grid", "8", "--out", str(tmp_path / "p")]))
    assert "private release (all noise from fresh OS entropy)" in res.output
    assert not re.search(r"(?<![\w.])23(?![\w.])", res.output)
    rep = json.loads((tmp_path / "p" / "report.json").read_text())
    assert (rep["release"], rep["mode"], rep["input"]) == ("private", "release", str(csv))
    assert not _keys(rep) & EVALUATION_ONLY
    rep = json.loads((tmp_path / "p" / "report.json").read_text())
    _ok(run(["heatmap", "--input", str(csv), "--grid", "8", "--evaluate", "--no-metrics",
             "--out", str(tmp_path / "e")]))
    rep = json.loads((tmp_path / "e" / "report.json").read_text())
    assert rep["release"] == "evaluation, not a private release" and rep["n_users"] == 23


def test_release_on_builtin_data_and_a_seeded_release(tmp_path):
    _ok(run(["heatmap", "--grid", "8", "--n", "20", "--release", "--quiet", "--out",
             str(tmp_path / "r")]))
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    assert rep["release"] == "private" and rep["input"] == \
        "built-in synthetic mixture (data seed 0)"
    _ok(run(["heatmap", "--grid", "8", "--n", "20", "--release", "--seed", "4", "--quiet",
             "--out", str(tmp_path / "s")]))
    rep = json.loads((tmp_path / "s" / "report.json").read_text())
    assert rep["release"] == "reproducible evaluation, not a private release"
    assert not _keys(rep) & EVALUATION_ONLY


@pytest.mark.parametrize("args,msg", [
    (["--evaluate", "--budget-ledger", "L"], "--evaluate --budget-ledger L: an evaluation"),
    (["--seed", "1", "--budget-ledger", "L"], "--seed 1 --budget-ledger L: seeded noise"),
    (["--release", "--metrics", "full"], "--metrics full: metrics and baselines compare"),
    (["--release", "--top-percent", "5"], "--top-percent 5: metrics and baselines"),
    (["--budget-ledger", "L", "--metrics", "fast"], "private release (--budget-ledger)"),
], ids=["evaluate-ledger", "seed-ledger", "release-metrics", "release-top", "ledger-metrics"])
def test_evaluation_and_a_charged_release_do_not_mix(tmp_path, args, msg):
    args = [str(tmp_path / a) if a == "L" else a for a in args]
    msg = msg.replace(" L", f" {tmp_path / 'L'}")
    res = run(["heatmap", "--grid", "8", "--n", "20", "--out", str(tmp_path / "o"),
               "--budget-epsilon" if "--budget-ledger" in args else "--quiet", *(
                   ["5", "--budget-delta", "1e-6"] if "--budget-ledger" in args else []),
               *args])
    assert res.exit_code == 2 and msg in res.output, res.output
    assert not (tmp_path / "o").exists() and not (tmp_path / "L").exists()


@pytest.mark.parametrize("smoothing,rule", [("none", "paper"), ("auto", "auto")])
def test_heatmap_uses_one_budget_rule_for_the_central_and_shuffle_models(tmp_path, smoothing,
                                                                          rule):
    """--smoothing none is Alg. 1-2 as printed (the printed budget split) in both models,
    otherwise both take the default "auto" split: at 100 users on 8x8 with eps = 2
    (eps n / N = 3.1) the two rules give the leaf level different budgets."""
    splits = {}
    for model in ("central", "shuffle"):
        out = tmp_path / model
        res = run(["heatmap", "--grid", "8", "--n", "100", "--epsilon", "2", "--model", model,
                   "--B", "64", "--neighbour", "zero_out", "--smoothing", smoothing,
                   "--seed", "1", "--no-metrics", "--quiet", "--out", str(out)])
        assert res.exit_code == 0, res.output
        par = json.loads((out / "report.json").read_text())["parameters"]
        assert par["budget_rule"] == rule, model
        splits[model] = par["level_epsilons"]
    np.testing.assert_allclose(splits["shuffle"], splits["central"], rtol=1e-15)
    assert (splits["central"][-1] > 1.8) == (rule == "auto")  # auto: 0.97 eps on the leaf
