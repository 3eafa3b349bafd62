"""bench/privacy_audit.py: its exact laws and its verdicts (the audit itself runs the CLI and
takes minutes; here its pieces run on small cases)."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import mpmath as mp
import pytest

PATH = Path(__file__).resolve().parents[1] / "bench" / "privacy_audit.py"


@pytest.fixture(scope="module")
def pa():
    spec = importlib.util.spec_from_file_location("privacy_audit", PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["privacy_audit"] = mod  # dataclasses resolve their module's annotations
    spec.loader.exec_module(mod)
    return mod


def test_the_audit_imports_nothing_it_audits():
    text = PATH.read_text()
    assert "from shuffledp" not in text and "import shuffledp" not in text


def test_discrete_laplace_divergence_closed_form(pa):
    a, eps = mp.mpf("0.6"), mp.mpf("0.4")
    for shift in (1, 3):
        p = {k: pa.dl_pmf(a, k) for k in range(-300, 300)}
        q = {k: pa.dl_pmf(a, k - shift) for k in range(-300, 300)}
        assert abs(pa.hockey_stick(p, q, eps) - pa.dl_shift_hockey_stick(a, shift, eps)) < 1e-50
    t = -mp.log(a)
    assert pa.dl_shift_hockey_stick(a, 2, 2 * t) == 0 < pa.dl_shift_hockey_stick(a, 2, 2 * t - 1e-9)


def test_split_and_mix_exact_distance(pa):
    assert pa.split_and_mix_sd(3, 3, 3) <= (3 / 9) ** 0.5
    assert pa.split_and_mix_sd(6, 2, 2) == pa.Fraction(11, 16)  # r = 2 does not hide


def test_privhist_coupling_and_query_sensitivity(pa):
    pairs, factor = pa.privhist_coupling_factor(max_items=4)
    assert pairs > 30 and factor == 1
    assert pa.privhist_query_sensitivity(max_items=4) == 1


def test_federated_shard_boundary_is_caught(pa):
    """10,000 -> 10,001 users with shards of 10,000 opens a second shard: the noise shape
    goes from 10000/9000 to that plus one, far from the claimed delta."""
    assert pa._federated_shape(10000, 10000, 0.1) == mp.mpf(10000) / 9000
    assert pa._federated_shape(10001, 10000, 0.1) == mp.mpf(10000) / 9000 + 1
    eps = mp.mpf("0.7683")
    lb, how = pa.federated_round_lower(10000, 10000, 0.1, mp.exp(-eps), eps, 60)
    assert lb > 0.05 and "10001" in how


def _central_report(parameter: float, epsilon: float = 1.0) -> dict:
    R = 1 << 20
    return {"guarantee": {
        "epsilon": epsilon, "delta": 0.0, "neighbour": "add/remove one user",
        "parameters": {"mechanism": "DPSparseEMDAgg", "resolution": R},
        "event": {"levels": [{"parameter": parameter / R}, {"parameter": parameter / R}]}}}


def test_verdicts_can_fail(pa):
    ok = _central_report(0.5)
    assert pa.classify(ok) == "heatmap_central"
    assert pa.audit_heatmap_central(ok, "ok").verdict == "sound"
    over = pa.audit_heatmap_central(_central_report(0.5 + 1e-6), "over")
    assert over.verdict == "UNSOUND" and over.lower > 0
    replace = _central_report(0.5)
    replace["guarantee"]["neighbour"] = "replace one user (n public)"
    assert pa.audit_heatmap_central(replace, "replace").verdict == "UNSOUND"  # 2R sensitivity


def test_hockey_stick_skips_points_missing_from_the_second_law(pa):
    """A window's edge: the shifted law is not listed there; reading it as 0 would count the
    first law's whole edge mass (a spurious lower bound)."""
    a, eps = mp.mpf("0.9"), mp.mpf(1)
    p = {k: pa.dl_pmf(a, k) for k in range(-5, 6)}
    q = {k + 1: pa.dl_pmf(a, k) for k in range(-5, 6)}
    assert pa.hockey_stick(p, q, eps) == 0  # DL(0.9) shifted by one is 0.105-DP


def test_federated_plan_matches_the_documented_rule(pa):
    assert pa.federated_plan(10_000, 10_000, 0.1) == (1, 9000)
    assert pa.federated_plan(10_001, 10_000, 0.1) == (2, 4500)
    assert pa.federated_plan(20, 20, 0.1) == (1, 18)
    assert pa.federated_plan(41, 20, 0.1) == (3, 12)
    assert pa.federated_plan(25_000, 10_000, 0.1) == (3, 7500)
    assert pa.federated_plan(10, 10, 0.1) == (1, 9)  # 0.9 * 10 is 9, not 9.000000000000002


def test_share_charge_bounds_the_exact_round(pa):
    """One cell, n_min = 18, noise t = 1: the exact delta of the worst pair (shape 1 against
    1 + 1/18, the count shifted by one) is below the audit's own bound at t + 0.3, and the
    same pair far exceeds a claim that charges nothing for the share (eps = t)."""
    t = mp.mpf(1)
    h = mp.mpf(1) / 18
    w = pa._exact_width(t)
    bound, _ = pa.federated_round_upper(18, t, 1, t + mp.mpf("0.3"))
    lo, up = pa.exact_pair([(mp.mpf(1), 1 + h, 1)], mp.exp(-t), t + mp.mpf("0.3"), w)
    assert lo <= up <= bound < 1e-6
    assert pa.exact_pair([(mp.mpf(1), 1 + h, 1)], mp.exp(-t), t, w)[0] > 1e-3


def test_renyi_series_and_closed_form(pa):
    """The series (an upper bound on the exact divergence) is below the Gamma closed form
    (its a -> 1 limit) and within 1e-6 of a 40-digit term-by-term sum."""
    with mp.workdps(40):
        n_min, t, al = 18, mp.mpf(1), mp.mpf(5)
        h, a = mp.mpf(1) / n_min, mp.exp(-mp.mpf(1))

        def P(k):
            return (1 - a) * a**k

        def Q(k):
            return mp.gamma(k + 1 + h) / (mp.gamma(1 + h) * mp.factorial(k)) * (1 - a) ** (
                1 + h) * a**k

        more = mp.log(mp.nsum(lambda k: Q(k) ** al * P(k) ** (1 - al), [0, mp.inf])) / (al - 1)
        fewer = mp.log(mp.nsum(lambda k: P(k) ** al * Q(k) ** (1 - al), [0, mp.inf])) / (al - 1)
    for exact, flag in ((more, True), (fewer, False)):
        s = pa.polya_renyi_series(5.0, n_min, float(t), flag)
        assert exact <= s <= exact * (1 + 1e-6)
        assert s <= pa.polya_renyi_gamma(al, h, flag)


def _cli_report(tmp_path, name, *args):
    from click.testing import CliRunner

    from shuffledp.cli import main

    out = tmp_path / name
    res = CliRunner().invoke(main, ["federated", "--seed", "1", *map(str, args), "--out",
                                    str(out)])
    assert res.exit_code == 0, res.output
    return json.loads((out / "report.json").read_text())


def test_federated_add_remove_release_is_sound_and_the_old_noise_is_caught(pa, tmp_path):
    """A release on the public plan (19 users, max_users 20, one shard, n_min 18) is proven
    sound, its one-cell round also exactly; the same report with the old mechanism's noise
    (calibrated at the round's whole eps, nothing left for the joining share) is UNSOUND."""
    rep = _cli_report(tmp_path, "fed19", "--neighbour", "add_remove", "--n", 19,
                      "--max-users", 20, "--shard-size", 20, "--depth", 4, "--dropout-rate", 0)
    assert pa.classify(rep) == "federated"
    row, details = pa.audit_federated(rep, "fed19", {"n": 19})
    assert row.verdict == "sound" and row.neighbour == "add_remove"
    assert any("n_min=18" in d for d in details)
    assert any("exact delta in" in d for d in details)
    old = copy.deepcopy(rep)
    for r in old["rounds"]:
        r["noise_epsilon"] = r["epsilon"]
    bad, _ = pa.audit_federated(old, "old noise")
    assert bad.verdict == "UNSOUND" and bad.lower > 1e-3


def test_federated_old_layout_report_is_unsound(pa):
    """A report of the old layout (no max_users: shards and n_min followed n): 10,000 users
    in shards of 10,000 at the command's defaults, one round at eps = 1."""
    rep = {"users": 10000, "rounds": [{"epsilon": 1.0, "delta": 1e-28}],
           "guarantee": {
               "epsilon": 1.0, "delta": 1e-28, "neighbour": "add/remove one user",
               "model": "distributed",
               "parameters": {"users_per_query": 10000, "shard_size": 10000, "dropout": 0.1},
               "event": {"steps": [{"type": "polya_sum", "tv": 1e-30, "levels": [
                   {"parameter": 1.0, "sensitivity": 1, "dimension": 1}]}]}}}
    assert pa.classify(rep) == "federated"
    row, details = pa.audit_federated(rep, "old")
    assert row.verdict == "UNSOUND" and row.lower > 0.07  # 0.0726: the second shard
    assert "exceeds the round's claimed delta" in details[0]


def test_federated_zero_out_release_is_sound(pa, tmp_path):
    rep = _cli_report(tmp_path, "fz", "--n", 400, "--shard-size", 200, "--depth", 4,
                      "--neighbour", "zero_out")
    row, _ = pa.audit_federated(rep, "zero_out")
    assert row.neighbour == "zero_out" and row.verdict == "sound"
    over = copy.deepcopy(rep)
    over["guarantee"]["epsilon"] = 0.9  # claims less than its noise gives
    assert pa.audit_federated(over, "over")[0].verdict == "UNSOUND"
