"""``shuffledp.sweep`` and ``shuffledp sweep``: tidy rows, resume, t-interval bands, bad input.

All sweeps run on a 16x12 grid with 10 users (a fraction of a second per run).
"""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import scipy.stats
from click.testing import CliRunner

from shuffledp import sweep as sw
from shuffledp.accounting.guarantee import Neighbour
from shuffledp.cli import main
from shuffledp.grid import Grid
from shuffledp.protocol.params import derive_params
from shuffledp.sweep import run as sweep_run

TINY = sw.SweepConfig(grid=Grid(16, 12), n=10, sigma=1.0)
ZERO_OUT = str(Neighbour.ZERO_OUT)


def _rows(out):
    with open(out / sw.CSV_NAME, newline="") as fh:
        return list(csv.DictReader(fh))


def test_rows_columns_and_count(tmp_path):
    recs = sw.run_sweep("B", ["1", 16], tmp_path, repeats=2, base=TINY, seed=5)
    # 2 B values x 2 repeats shuffle + 2 central repeats (central does not depend on B)
    assert len(recs) == 6
    rows = _rows(tmp_path)
    assert tuple(rows[0]) == sw.COLUMNS and len(rows) == 6
    for col in ("key", "model", "grid", "n", "epsilon", "delta", "B", "guarantee_epsilon",
                "guarantee_delta", "bits_per_user", "bytes_per_user", "seconds_mechanism",
                *sw.METRICS):
        assert col in sw.COLUMNS
    shuffle = [r for r in rows if r["model"] == "shuffle"]
    central = [r for r in rows if r["model"] == "central"]
    assert sorted(int(r["B"]) for r in shuffle) == [1, 1, 16, 16] and len(central) == 2
    for r in shuffle:  # bits and bytes are those of the protocol record, exactly
        # under the run's budget rule (the printed split: the sweep's smoothing is "none")
        assert r["budget_rule"] == "paper"
        p = derive_params(Grid(16, 12), 10, epsilon=5.0, delta=1e-5, B=int(r["B"]),
                          budget=r["budget_rule"])
        assert int(r["bits_per_user"]) == p.bits_per_user
        assert int(r["bytes_per_user"]) == p.bytes_per_user
        assert float(r["guarantee_epsilon"]) == 5.0 and float(r["guarantee_delta"]) == 1e-5
    for r in central:
        assert r["B"] == r["delta"] == r["bits_per_user"] == "" and r["guarantee_delta"] == "0.0"
    assert all(r["release"] == "reproducible evaluation, not a private release" for r in rows)
    lines = [json.loads(x) for x in (tmp_path / sw.JSONL_NAME).read_text().splitlines()]
    assert [x["key"] for x in lines] == [r["key"] for r in rows]
    assert all(0 <= x["emd"] and math.isfinite(x["kl"]) for x in lines)


def test_without_seed_runs_are_private_and_independent(tmp_path):
    recs = sw.run_sweep("epsilon", [2.0], tmp_path, repeats=2, base=TINY)
    assert {r.release for r in recs} == {"private"} and {r.seed for r in recs} == {None}
    shuffle = [r.emd for r in recs if r.model == "shuffle"]
    assert shuffle[0] != shuffle[1]  # fresh entropy: equal EMDs have probability ~0


def test_resume_skips_done_runs(tmp_path, monkeypatch):
    calls = []
    real = sw.run_one

    def counting(run, rng=None):
        calls.append(run.key)
        return real(run, rng)

    monkeypatch.setattr(sweep_run, "run_one", counting)
    sw.run_sweep("w", [4, 8], tmp_path, repeats=1, base=TINY, seed=1)
    assert len(calls) == 4
    calls.clear()
    recs = sw.run_sweep("w", [4, 8, 16], tmp_path, repeats=2, base=TINY, seed=1)
    # only w=16 repeat 0 and every repeat 1: 2 models x (1 + 3) runs
    assert len(calls) == len(recs) == 8 and not any("w=4|" in k and "repeat=0" in k
                                                    for k in calls)
    calls.clear()
    assert sw.run_sweep("w", [4, 8, 16], tmp_path, repeats=2, base=TINY, seed=1) == []
    assert calls == [] and len(_rows(tmp_path)) == 12
    keys = [r["key"] for r in _rows(tmp_path)]
    assert len(set(keys)) == len(keys)


def test_a_resumed_seeded_run_gets_the_same_noise(tmp_path):
    a = sw.run_sweep("B", [4], tmp_path / "a", repeats=1, base=TINY, seed=9)
    b = sw.run_sweep("B", [2, 4], tmp_path / "b", repeats=1, base=TINY, seed=9)
    same = {r.key: r.emd for r in b}
    assert all(same[r.key] == r.emd for r in a)


def test_a_foreign_csv_is_refused(tmp_path):
    (tmp_path / sw.CSV_NAME).write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not those of a sweep"):
        sw.run_sweep("B", [4], tmp_path, repeats=1, base=TINY)


@pytest.mark.parametrize("k", [2, 3, 7, 20])
def test_t_interval_matches_scipy(k):
    x = np.random.default_rng(k).normal(3.0, 2.0, size=k)
    mean, low, high = sw.t_interval(x)
    ref = scipy.stats.t.interval(0.95, df=k - 1, loc=x.mean(), scale=scipy.stats.sem(x))
    assert mean == pytest.approx(x.mean(), rel=1e-14)
    assert (low, high) == pytest.approx(ref, rel=1e-12)


def test_t_interval_by_hand():
    # df = 2: F(t) = 1/2 + t / (2 sqrt(2 + t^2)), so F(t) = 0.975 at t^2 = 2 c^2 / (1 - c^2)
    # with c = 0.95; samples 1, 2, 3: s = 1, sem = 1/sqrt(3)
    c = 0.95
    half = math.sqrt(2 * c * c / (1 - c * c)) / math.sqrt(3)
    mean, low, high = sw.t_interval([1.0, 2.0, 3.0])
    assert (mean, low, high) == pytest.approx((2.0, 2.0 - half, 2.0 + half), rel=1e-12)
    m1, lo1, hi1 = sw.t_interval([5.0])
    assert m1 == 5.0 and math.isnan(lo1) and math.isnan(hi1)


def test_summarise_groups_by_model_and_value(tmp_path):
    sw.run_sweep("B", [1, 16], tmp_path, repeats=3, base=TINY, seed=2)
    s = sw.summarise(sw.read_runs(tmp_path), "B", "emd")
    assert [x for x, *_ in s["shuffle"]] == [1, 16]
    assert [x for x, *_ in s["central"]] == [None]  # B = inf: one band
    rows = [r for r in sw.read_runs(tmp_path) if r["model"] == "shuffle" and r["B"] == 16]
    assert s["shuffle"][1][1:] == pytest.approx(sw.t_interval([r["emd"] for r in rows]))


@pytest.mark.parametrize("args,match", [
    (("gamma", [1]), "param must be one of"),
    (("dropout", [1.0]), "dropout must be in \\[0, 1\\), got 1.0"),
    (("B", []), "values must be a non-empty list, got \\[\\]"),
    (("B", ["a"]), "values must be numbers, got 'a'"),
    (("B", "16"), "values must be a list, got '16'"),
    (("B", [0]), "values must be an integer >= 1, got values=0"),
    (("epsilon", [-1.0]), "values must be a finite number > 0"),
    (("grid", ["8y"]), "bad grid '8y'"),
])
def test_bad_input_names_the_argument(args, match):
    with pytest.raises((ValueError, TypeError), match=match):
        sw.plan(*args, repeats=1)


@pytest.mark.parametrize("repeats", [0, -1, 1.5, True])
def test_bad_repeats(repeats):
    with pytest.raises((ValueError, TypeError), match=f"repeats.*got repeats={repeats!r}"):
        sw.plan("B", [1], repeats)


def invoke(*args):
    res = CliRunner().invoke(main, ["sweep", *map(str, args)])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    return res


@pytest.mark.parametrize("argv,hint", [
    (["--param", "gamma", "--values", "1"], "'--param'"),
    (["--param", "B", "--values", "1", "--models", "shuffle,oracle"],
     "--models: models must be one of"),
    (["--param", "B", "--values", ","], "values must be a non-empty list"),
    (["--param", "B", "--values", "1,x"], "values must be numbers, got 'x'"),
    (["--param", "B", "--values", "1", "--repeats", "0"], "'--repeats'"),
    (["--param", "n", "--values", "1"], "values must be an integer >= 2"),
    (["--figure", "12", "--values", "1"], "--figure 12 sets --values"),
    (["--full", "--param", "B", "--values", "1"], "--full only applies to a preset"),
    (["--values", "1"], "give --param and --values"),
], ids=["param", "models", "empty", "non-numeric", "repeats", "n", "preset", "full",
      "missing"])
def test_cli_bad_input_is_one_line(tmp_path, argv, hint):
    res = invoke(*argv, "--out", tmp_path / "o")
    assert res.exit_code == 2, res.output
    errors = [x for x in res.output.splitlines() if x.startswith("Error:")]
    assert len(errors) == 1 and hint in errors[0], res.output
    assert not (tmp_path / "o").exists()


def test_cli_writes_rows_and_resumes(tmp_path):
    argv = ["--param", "B", "--values", "1,4", "--repeats", 2, "--grid", "16x12", "--n", 10,
            "--seed", 3, "--no-plot", "--quiet", "--out", tmp_path]
    res = invoke(*argv)
    assert res.exit_code == 0, res.output
    assert "6 runs written" in res.output and "(0 already there, skipped)" in res.output
    res = invoke(*argv)
    assert "0 runs written" in res.output and "(6 already there, skipped)" in res.output
    assert len(_rows(tmp_path)) == 6
    assert not list(tmp_path.glob("*.png"))


def test_cli_plots(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    res = invoke("--param", "B", "--values", "1,4", "--repeats", 2, "--grid", "16x12",
                 "--n", 10, "--quiet", "--out", tmp_path)
    assert res.exit_code == 0, res.output
    for name in ("bits_per_user.png", "metrics.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_without_matplotlib_says_how_to_install(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    res = invoke("--param", "grid", "--values", "8x6,16x12", "--repeats", 1, "--n", 10,
                 "--quiet", "--out", tmp_path)
    assert res.exit_code == 0, res.output
    assert 'pip install "shuffledp[plot]"' in res.stderr
    assert len(_rows(tmp_path)) == 4 and not list(tmp_path.glob("*.png"))


@pytest.mark.parametrize("argv,hint", [
    (["--param", "B", "--values", "4", "--grid", "100000x100000"],
     "refusing --grid 100000x100000"),
    (["--param", "epsilon", "--values", "1e-300", "--grid", "8"],
     "no shuffle protocol for --grid 8x8 --n 50 --epsilon 1e-300"),
], ids=["large", "no-protocol"])
def test_cli_refuses_before_running_anything(tmp_path, argv, hint):
    res = invoke(*argv, "--quiet", "--out", tmp_path / "o")
    assert res.exit_code == 1, res.output
    assert res.output.strip().splitlines() == [res.output.strip()] and hint in res.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("field,value,match", [
    ("n", 1, "n must be an integer >= 2, got n=1"),
    ("delta", 1.0, "delta must be in \\(0, 1\\), got delta=1.0"),
    ("sigma", -0.5, "sigma must be a finite number >= 0, got sigma=-0.5"),
    ("grid", "8x8", "grid must be a Grid, got grid='8x8'"),
    ("rounding", "ceil", "rounding must be one of"),
    ("neighbour", "bounded_emd", "neighbour must be one of"),
    ("neighbour", "sideways", "neighbour"),
    ("sigma_scales", "yes", "sigma_scales must be a bool"),
])
def test_config_checks_its_fields(field, value, match):
    with pytest.raises((ValueError, TypeError), match=match):
        sw.SweepConfig(**{field: value})


def test_a_run_killed_mid_write_is_run_again(tmp_path, monkeypatch):
    """A CSV row cut short (no newline) does not count as done; its JSON line, already
    written, is replaced by the rerun's."""
    sw.run_sweep("B", [4], tmp_path, repeats=2, base=TINY, seed=4)
    path = tmp_path / sw.CSV_NAME
    lines = path.read_text().splitlines(keepends=True)
    assert len(lines) == 5  # header + 4 runs
    path.write_text("".join(lines[:-1]) + lines[-1][:40])
    calls = []
    real = sw.run_one
    monkeypatch.setattr(sweep_run, "run_one", lambda run, rng=None: calls.append(run) or real(run,
    rng))
    sw.run_sweep("B", [4], tmp_path, repeats=2, base=TINY, seed=4)
    assert len(calls) == 1 and calls[0].key == lines[-1].split(",")[0]
    rows = _rows(tmp_path)
    assert len(rows) == 4 and len({r["key"] for r in rows}) == 4
    assert len((tmp_path / sw.JSONL_NAME).read_text().splitlines()) == 5
    assert sorted(r["key"] for r in sw.read_runs(tmp_path)) == sorted(r["key"] for r in rows)


def test_sweeps_of_different_parameters_share_a_directory(tmp_path):
    sw.run_sweep("B", [4], tmp_path, repeats=1, base=TINY, seed=6)
    recs = sw.run_sweep("epsilon", [5.0], tmp_path, repeats=1, base=TINY, seed=6)
    assert {r.model for r in recs} == {"shuffle", "central"}
    s = sw.summarise(sw.read_runs(tmp_path), "epsilon", "emd")
    assert [x for x, *_ in s["central"]] == [5.0] and [x for x, *_ in s["shuffle"]] == [5.0]


def test_dropout_sweep_plans_noise_for_the_survivors(tmp_path):
    recs = sw.run_sweep("dropout", [0, 0.3], tmp_path, repeats=1, base=TINY, seed=8)
    shuffle = {r.dropout: r for r in recs if r.model == "shuffle"}
    assert set(shuffle) == {0.0, 0.3}
    for d, r in shuffle.items():
        p = derive_params(Grid(16, 12), 10, epsilon=5.0, delta=1e-5, B=256, dropout=d,
                          budget=r.budget_rule)
        assert r.bits_per_user == p.bits_per_user and r.guarantee_epsilon == 5.0
    # the noise is planned for 7 survivors: more shares or a wider modulus than for 10
    assert shuffle[0.3].bits_per_user >= shuffle[0.0].bits_per_user
    assert "|dropout=0.3|" in shuffle[0.3].key and "|dropout=" not in shuffle[0.0].key
    central = [r for r in recs if r.model == "central"]
    assert len(central) == 1 and central[0].dropout is None  # shared by both points


def test_dropout_users_really_drop(monkeypatch):
    import shuffledp.protocol.runner as protocol

    seen = {}
    real = protocol.shuffle_heatmap

    def spy(users, **kw):
        seen.update(kw)
        return real(users, **kw)

    monkeypatch.setattr(protocol, "shuffle_heatmap", spy)
    run = sw.Run(sw.SweepConfig(grid=Grid(16, 12), n=10, dropout=0.35), "shuffle", "dropout", 0)
    sw.run_one(run, rng=1)
    assert seen["dropout"] == 0.35 and seen["simulate_dropouts"] == 3


def test_central_baselines_as_models(tmp_path):
    models = ("central", "laplace", "top_1%", "top_0.1%", "top_0.01%")
    base = sw.SweepConfig(grid=Grid(16, 12), n=10, sigma=1.0, neighbour="add_remove")
    recs = sw.run_sweep("epsilon", [1.0, 4.0], tmp_path, repeats=1, base=base, seed=2,
                        models=models)
    assert sorted({r.model for r in recs}) == sorted(models) and len(recs) == 10
    for r in recs:
        assert r.B is None and r.delta is None and r.bits_per_user is None
        assert r.guarantee_epsilon == r.epsilon and r.guarantee_delta == 0.0
    # like for like: the central release under the baselines' relation
    assert {r.neighbour for r in recs} == {str(Neighbour.ADD_REMOVE)}
    with pytest.raises(ValueError, match="models must be one of .*got models='oracle'"):
        sw.plan("epsilon", [1.0], 1, TINY, models=("central", "oracle"))
    # a baseline beside a replace-one (or zero-out) release is refused, naming the fix
    for nb in ("replace", "zero_out"):
        with pytest.raises(ValueError, match="add/remove only.*not be like for like"):
            sw.plan("epsilon", [1.0], 1, sw.SweepConfig(neighbour=nb),
                    models=("central", "laplace"))
    assert sw.plan("epsilon", [1.0], 1, TINY, models=("laplace",))  # baselines alone: fine


def test_every_preset_runs_its_models_under_one_stated_relation():
    """Fig. 1/2: central and baselines add/remove; Fig. 12/13: shuffle and central zero-out;
    the paper's settings (Sec. 4, App. E.1, App. F)."""
    p = sw.PRESETS
    assert p["1"]["values"] == [0.1, 0.5, 1, 2, 5, 10] and p["1"]["n"] == 200
    assert p["1"]["full_grid"] == "256x256" and p["1"]["full_repeats"] == 60
    assert p["2"]["values"] == [50, 100, 200, 300, 400, 500] and p["2"]["epsilon"] == 10.0
    assert p["2-grid"]["values"] == ["64x64", "128x128", "256x256"]
    assert p["2-grid"]["epsilon"] == 10.0 and p["13"]["full_grid"] == "320x240"
    for name, fig in p.items():
        models = fig.get("models", sw.DEFAULT_MODELS)
        base = sw.SweepConfig(grid=Grid(16, 12), n=10, neighbour=fig["neighbour"])
        runs = sw.plan(fig["param"], fig["values"][:1], 1, base, models)  # not refused
        assert {r.config.neighbour for r in runs} == {fig["neighbour"]}, name
        if any(m in sw.config.BASELINES for m in models):
            assert fig["neighbour"] == "add_remove", name


def test_sigma_scales_with_the_grid_in_the_presets(tmp_path):
    base = sw.SweepConfig(grid=Grid(16, 12), n=10, sigma=2.0, sigma_scales=True,
                          neighbour="add_remove")
    recs = sw.run_sweep("grid", ["16x12", "32x24"], tmp_path, repeats=1, base=base, seed=1,
                        models=("central",))
    assert sorted(r.sigma for r in recs) == [2.0 * 16 / 256, 2.0 * 32 / 256]
    assert all("sigma_scales" in r.key for r in recs)
    assert "sigma_scales" not in sw.plan("n", [10], 1, TINY, ("central",))[0].key
    assert "SIGMA" not in sw.SIGMA_NOTE and "2 px at 256x256" in sw.SIGMA_NOTE


def test_cli_figure_1_runs_the_central_models(tmp_path):
    res = invoke("--figure", 1, "--grid", "16x12", "--n", 10, "--repeats", 1, "--no-plot",
                 "--seed", 1, "--out", tmp_path)
    assert res.exit_code == 0, res.output
    assert "neighbour relation: add_remove for ['central']" in res.output
    assert "sigma = 2 px at 256x256" in res.output
    rows = _rows(tmp_path)
    assert {r["model"] for r in rows} == {"central", "laplace", "top_1%", "top_0.1%",
                                          "top_0.01%"}
    assert {r["neighbour"] for r in rows} == {str(Neighbour.ADD_REMOVE)}
    assert sorted({float(r["epsilon"]) for r in rows}) == [0.1, 0.5, 1.0, 2.0, 5.0, 10.0]
    res = invoke("--figure", 2, "--grid", "16x12", "--repeats", 1, "--no-plot", "--quiet",
                 "--seed", 1, "--models", "central", "--out", tmp_path / "f2")
    assert res.exit_code == 0, res.output
    rows = _rows(tmp_path / "f2")
    assert sorted({int(r["n"]) for r in rows}) == [50, 100, 200, 300, 400, 500]
    assert {float(r["epsilon"]) for r in rows} == {10.0} and {r["model"] for r in rows} == {
        "central"}
    res = invoke("--figure", "1", "--neighbour", "replace", "--grid", "16x12", "--n", 10,
                 "--repeats", 1, "--no-plot", "--quiet", "--out", tmp_path / "bad")
    assert res.exit_code == 2 and "like for like" in res.output


def _write_users(path, n_users, points=3, seed=3):
    rng = np.random.default_rng(seed)
    lines = ["user_id,x,y"]
    for u in range(n_users):
        lines += [f"u{u},{rng.uniform(0.2, 0.5):.4f},{rng.uniform(0.1, 0.6):.4f}"
                  for _ in range(points)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_input_file_users_are_subsampled_reproducibly(tmp_path):
    path = _write_users(tmp_path / "u.csv", 40)
    base = sw.SweepConfig(grid=Grid(16, 12), n=10, sigma=1.0, input=str(path))
    recs = sw.run_sweep("n", [10, 40], tmp_path / "o", repeats=1, base=base, seed=1,
                        models=("central",))
    assert [r.n for r in recs] == [10, 40] and {r.input for r in recs} == {str(path)}
    assert all(f"input={path}:csv:None" in r.key for r in recs)
    table = sw.load_input(str(path))
    a = sw.subsample_users(table, 10, 2023)
    b = sw.subsample_users(table, 10, 2023)
    assert a.n_users == 10 and np.array_equal(a.user, b.user)
    assert sw.subsample_users(table, 40, 2023) is table
    assert not np.array_equal(sw.subsample_users(table, 10, 1).user, a.user)
    with pytest.raises(ValueError, match="n must be at most the input's 40 users, got n=41"):
        sw.subsample_users(table, 41, 0)
    with pytest.raises(ValueError, match="bbox is required with input_format='snap'"):
        sw.SweepConfig(input=str(path), input_format="snap")


def test_cli_input(tmp_path):
    path = _write_users(tmp_path / "u.csv", 30)
    res = invoke("--input", path, "--param", "epsilon", "--values", "2,5", "--repeats", 1,
                 "--grid", "16x12", "--quiet", "--no-plot", "--out", tmp_path / "o")
    assert res.exit_code == 0, res.output
    rows = _rows(tmp_path / "o")
    assert {int(r["n"]) for r in rows} == {30} and {r["input"] for r in rows} == {str(path)}
    res = invoke("--input", path, "--param", "n", "--values", "10,31", "--grid", "16x12",
                 "--quiet", "--out", tmp_path / "o2")
    assert res.exit_code == 2 and "has 30 users, fewer than n=31" in res.output
    assert not (tmp_path / "o2").exists()
    res = invoke("--input", path, "--format", "snap", "--param", "B", "--values", "4",
                 "--out", tmp_path / "o3")
    assert res.exit_code == 2 and "--bbox" in res.output
    bad = tmp_path / "bad.csv"
    bad.write_text("user_id,x,y\nu1,2.0,0.5\n")
    res = invoke("--input", bad, "--param", "B", "--values", "4", "--out", tmp_path / "o4")
    assert res.exit_code == 1 and f"--input {bad}" in res.output and "Traceback" not in res.output


def test_cli_input_snap_checkins(tmp_path):
    rng = np.random.default_rng(5)
    lines = [f"{u}\t2010-10-{1 + i:02d}T00:00:00Z\t{30 + rng.uniform(0, 1):.5f}\t"
             f"{-98 + rng.uniform(0, 1):.5f}\t{u * 10 + i}"
             for u in range(25) for i in range(3)]
    lines.append("99\t2010-10-01T00:00:00Z\t45.0\t-120.0\t1")  # outside the box: dropped
    path = tmp_path / "checkins.txt"
    path.write_text("\n".join(lines) + "\n")
    res = invoke("--input", path, "--format", "snap", "--bbox", "30,31,-98,-97", "--param", "B",
                 "--values", "4", "--repeats", 1, "--grid", "16x12", "--quiet", "--no-plot",
                 "--seed", 3, "--out", tmp_path / "o")
    assert res.exit_code == 0, res.output
    rows = _rows(tmp_path / "o")
    assert {int(r["n"]) for r in rows} == {25}  # the user outside the box is not counted
    assert {r["model"] for r in rows} == {"shuffle", "central"}
    res = invoke("--input", path, "--param", "B", "--values", "4", "--bbox", "30,31,-98,-97",
                 "--out", tmp_path / "o2")
    assert res.exit_code == 2 and "--bbox" in res.output


def test_floor_rounding_and_skipped_emd_in_the_key_and_rows(tmp_path):
    """--rounding floor changes the resume key (the default's keys stay as they were) and
    reaches the protocol; emd=False records NaN and the summaries skip it."""
    import dataclasses

    floor = dataclasses.replace(TINY, rounding="floor", emd=False)
    (run_d,) = sw.plan("B", [4], 1, TINY, ["shuffle"])
    (run_f,) = sw.plan("B", [4], 1, floor, ["shuffle"])
    assert "rounding" not in run_d.key and "rounding=floor" in run_f.key
    rec = sw.run_one(run_f, rng=3)
    assert math.isnan(rec.emd) and math.isfinite(rec.kl)
    sw.append_record(tmp_path, rec)
    assert sw.summarise(sw.read_runs(tmp_path), "B", "emd") == {}
    assert sw.summarise(sw.read_runs(tmp_path), "B", "kl")["shuffle"][0][0] == 4


def test_cli_figure_13_uses_floor_rounding(tmp_path):
    res = invoke("--figure", 13, "--grid", "16x12", "--n", 10, "--repeats", 1, "--no-plot",
                 "--quiet", "--seed", 1, "--out", tmp_path)
    assert res.exit_code == 0, res.output
    rows = _rows(tmp_path)
    keys = [r["key"] for r in rows if r["model"] == "shuffle"]
    assert keys and all("rounding=floor" in k for k in keys)
    # shuffle and its B = inf limit under one relation (like for like)
    assert {r["neighbour"] for r in rows} == {ZERO_OUT}


def test_cli_figure_1_smooths_the_central_release(tmp_path):
    res = invoke("--figure", 1, "--grid", "16x12", "--n", 10, "--repeats", 1, "--no-plot",
                 "--quiet", "--seed", 1, "--models", "central,laplace", "--out", tmp_path)
    assert res.exit_code == 0, res.output
    rows = _rows(tmp_path)
    assert all(("smoothing=auto" in r["key"]) == (r["model"] == "central") for r in rows)


def test_density_smoothing_is_a_sweep_option_of_its_own(monkeypatch):
    """--smoothing density smooths with the pyramid density (auto: the count posterior), under
    its own run key, so the two never resume into each other."""
    from shuffledp.analyzers.heatmap.release import HeatmapRelease

    methods = []
    real = HeatmapRelease.smoothed

    def spy(self, *a, **kw):
        methods.append(kw.get("method"))
        return real(self, *a, **kw)

    monkeypatch.setattr(HeatmapRelease, "smoothed", spy)
    keys = {}
    for smoothing in ("auto", "density"):
        cfg = sw.SweepConfig(grid=Grid(8, 8), n=50, epsilon=2.0, smoothing=smoothing)
        run = sw.Run(cfg, "central", "n", 0)
        sw.run_one(run, rng=1)
        keys[smoothing] = run.key
    assert methods == ["posterior", "density"]
    assert "smoothing=density" in keys["density"] and "smoothing=auto" in keys["auto"]
    with pytest.raises(ValueError, match="smoothing"):
        sw.SweepConfig(grid=Grid(8, 8), n=50, smoothing="blur")


@pytest.mark.parametrize("smoothing,rule", [("none", "paper"), ("auto", "auto")])
def test_both_models_of_a_sweep_take_the_budget_rule_of_its_smoothing(monkeypatch, smoothing,
                                                                      rule):
    """Like for like, and as `shuffledp heatmap` does: --smoothing none runs Alg. 1-2 with the
    printed split in both models, auto the default split of both; the run's plaintext size is
    derived again under the rule it used (wire_bytes)."""
    import shuffledp.protocol.runner as protocol

    seen = {}
    real_shuffle, real_central = protocol.shuffle_heatmap, sweep_run.central_heatmap

    def spy_shuffle(users, **kw):
        seen["shuffle"] = kw["budget"]
        return real_shuffle(users, **kw)

    def spy_central(users, *a, **kw):
        seen["central"] = kw["budget"]
        return real_central(users, *a, **kw)

    monkeypatch.setattr(protocol, "shuffle_heatmap", spy_shuffle)
    monkeypatch.setattr(sweep_run, "central_heatmap", spy_central)
    # eps n / N = 2 * 300 / 64 = 9.4: the two rules give other splits here
    cfg = sw.SweepConfig(grid=Grid(8, 8), n=300, epsilon=2.0, B=64, smoothing=smoothing)
    rec = sw.run_one(sw.Run(cfg, "shuffle", "B", 0), rng=1)
    central = sw.run_one(sw.Run(cfg, "central", "B", 0), rng=1)
    assert seen == {"shuffle": rule, "central": rule}
    assert rec.budget_rule == central.budget_rule == rule  # the runs.csv column
    base = sw.run_one(sw.Run(cfg, "laplace", "B", 0), rng=1)
    assert base.budget_rule is None
    from dataclasses import asdict

    from shuffledp.sweep.plot import _WIRE_CACHE, wire_bytes

    _WIRE_CACHE.clear()
    row = {k: (str(v) if k == "grid" else v) for k, v in asdict(rec).items()}
    got = wire_bytes(row)
    want = derive_params(Grid(8, 8), 300, epsilon=2.0, delta=cfg.delta, B=64, w=cfg.w,
                         dropout=cfg.dropout, budget=rule)
    assert got is not None and got["encrypted_bytes_per_user"] == want.encrypted_bytes_per_user
    # a record from before the column (no budget_rule): found by its sizes
    _WIRE_CACHE.clear()
    row.pop("budget_rule")
    assert wire_bytes(row) == got
