"""bench/privacy_audit.py: its exact laws and its verdicts (the audit itself runs the CLI and
takes minutes; here its pieces run on small cases)."""

from __future__ import annotations

import importlib.util
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
