"""FreqEstLocal with GKRR and the user-level k-RR baseline: unbiasedness, guarantees, input.

Unbiasedness tests average R independent seeded runs and compare every coordinate of the
mean with the truth in units of its EXACT standard deviation (the covariance of the
debiased estimate computed from the mechanism's transition matrix, not estimated): a
coordinate fails beyond 4.5 sd. By the CLT (each mean pools R m n or R n independent
reports) the false-failure rate is at most k * 2 Phi(-4.5) = 12 * 6.8e-6 < 1e-4 per test;
with the fixed seeds the outcome is deterministic. The power test shows the same criterion
rejects the raw (undebiased) histogram.
"""

import numpy as np
import pytest

from shuffledp.accounting.guarantee import Neighbour
from shuffledp.accounting.metric.shuffle import emd_itemwise
from shuffledp.analyzers.metric.freq import freq_est_local, product_emd
from shuffledp.analyzers.metric.user_level import user_level_krr
from shuffledp.encoders.metric.mechanisms import GKRR, realised_alpha0
from shuffledp.encoders.metric.spaces import emd_histograms, product_space
from shuffledp.randomness import SEEDED_NOTE, SecureRandom

S, T, R_DIST = 3, 4, 0.25
K = S * T
Z = 4.5
RUNS = 200


def _users(n=20, m=1000, seed=0):
    g = np.random.default_rng(seed)
    p = g.dirichlet(np.ones(K))  # a skewed pooled histogram
    return g.choice(K, size=(n, m), p=p)


def _debias_matrix(mech):
    return np.array([mech.debias(e) for e in np.eye(K)])  # F = v B, B[y] = debias(e_y)


def _gkrr_sd(mech, users):
    """Exact sd of each coordinate of F = v B for one run."""
    A = mech.transition_matrix()
    c = np.bincount(users.ravel(), minlength=K)
    N = users.size
    cov_v = sum(c[x] * (np.diag(A[x]) - np.outer(A[x], A[x])) for x in range(K)) / N**2
    B = _debias_matrix(mech)
    return np.sqrt(np.diag(B.T @ cov_v @ B))


def _check_unbiased(estimates, truth, sd):
    z = (np.mean(estimates, axis=0) - truth) / (sd / np.sqrt(len(estimates)))
    return np.abs(z).max()


def test_gkrr_central_unbiased_and_test_has_power():
    users = _users(n=200, m=1000)
    truth = np.bincount(users.ravel(), minlength=K) / users.size
    rels = [freq_est_local(users, S, T, R_DIST, 1e-9, "central", alpha0=0.25, baseline=None,
                           rng=seed) for seed in range(40)]
    sd = _gkrr_sd(GKRR(S, T, R_DIST, 0.25), users)
    assert _check_unbiased([r.estimate for r in rels], truth, sd) < Z
    # power: the raw histogram of the outputs is biased and the same check rejects it
    assert _check_unbiased([r.histogram for r in rels], truth, sd) > Z
    assert all(abs(r.estimate.sum() - 1.0) < 1e-9 for r in rels)


def test_gkrr_local_unbiased():
    users = _users(n=10, m=1000, seed=1)
    truth = np.bincount(users.ravel(), minlength=K) / users.size
    est = [freq_est_local(users, S, T, R_DIST, 1e-9, "local", alpha0=0.02, baseline=None,
                          rng=seed).estimate for seed in range(RUNS)]
    sd = _gkrr_sd(GKRR(S, T, R_DIST, 0.02), users)
    assert _check_unbiased(est, truth, sd) < Z


def test_baseline_unbiased_exact_sd():
    users = _users(n=400, m=50, seed=2)
    truth = np.bincount(users.ravel(), minlength=K) / users.size
    eps = 2.0
    est = [user_level_krr(users, K, eps, rng=seed).estimate for seed in range(RUNS)]
    krr = GKRR(K, 1, 1.0, eps)
    A = krr.transition_matrix()
    n = users.shape[0]
    cov = np.zeros((K, K))
    for row in users:  # a user's report law: the mean of her items' k-RR rows
        a = A[row].mean(axis=0)
        cov += np.diag(a) - np.outer(a, a)
    p, _, q = krr.probabilities()
    sd = np.sqrt(np.diag(cov)) / n / (p - q)
    assert _check_unbiased(est, truth, sd) < Z
    # power: undebiased report frequencies are rejected
    raw = [user_level_krr(users, K, eps, rng=seed).reports / n for seed in range(20)]
    assert _check_unbiased(raw, truth, sd) > Z


def test_baseline_krr_realised_epsilon_exact():
    for eps in (0.1, 1.0, 5.0):
        krr = GKRR(K, 1, 1.0, eps)
        a = realised_alpha0(krr)
        assert a <= eps and a > eps * (1 - 1e-6)


def test_guarantee_fields():
    users = _users()
    rel = freq_est_local(users, S, T, R_DIST, 1e-9, "central", alpha0=0.08, rng=3)
    ref = emd_itemwise(0.08, 1000, 1e-9, "central", 20)
    g = rel.guarantee
    assert g.notion == "metric_emd" and g.model == "central"
    assert g.neighbour is Neighbour.BOUNDED_EMD
    assert g.alpha == ref.alpha and g.delta == ref.delta_out
    assert SEEDED_NOTE in g.notes and SEEDED_NOTE in rel.notes
    b = rel.baseline.guarantee
    assert b.notion == "pure" and b.model == "local" and b.delta == 0.0
    assert b.neighbour is Neighbour.REPLACE_ONE
    assert rel.baseline.epsilon == pytest.approx(g.alpha * R_DIST)  # alpha = epsilon / r
    assert SEEDED_NOTE in b.notes
    d = rel.to_dict()
    assert d["guarantee"]["epsilon"] == g.alpha and d["baseline"]["epsilon"] == b.epsilon


def test_target_alpha_and_secure_default():
    users = _users()
    rel = freq_est_local(users, S, T, R_DIST, 1e-9, "central", target_alpha=3.0,
                         baseline_epsilon=0.5, rng=SecureRandom.for_testing(1))
    assert rel.guarantee.alpha <= 3.0 and rel.guarantee.alpha > 2.9
    assert rel.baseline.epsilon == 0.5 and rel.notes == ()
    assert SEEDED_NOTE not in rel.baseline.guarantee.notes


def test_product_emd_matches_transport_lp():
    space = product_space(S, T, R_DIST)
    g = np.random.default_rng(4)
    for _ in range(5):
        p, q = g.dirichlet(np.ones(K)), g.dirichlet(np.ones(K) * 0.3)
        assert product_emd(S, T, R_DIST, p, q) == pytest.approx(
            emd_histograms(space, p, q), abs=1e-9)


@pytest.mark.parametrize("kwargs,match", [
    ({"alpha0": 0.08, "target_alpha": 2.0}, "exactly one of alpha0 and target_alpha"),
    ({}, "exactly one of alpha0 and target_alpha"),
    ({"alpha0": -1.0}, "alpha0"),
    ({"alpha0": 0.08, "baseline_epsilon": 0.0}, "baseline_epsilon"),
])
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        freq_est_local(_users(), S, T, R_DIST, 1e-9, "central", rng=0, **kwargs)


def test_bad_input():
    users = _users()
    with pytest.raises(ValueError, match="delta"):
        freq_est_local(users, S, T, R_DIST, 1.5, "central", alpha0=0.08, rng=0)
    with pytest.raises(ValueError, match="model"):
        freq_est_local(users, S, T, R_DIST, 1e-9, "shuffle", alpha0=0.5, rng=0)
    with pytest.raises(ValueError, match="r must be"):
        freq_est_local(users, S, T, 0.0, 1e-9, "central", alpha0=0.08, rng=0)
    bad = users.copy()
    bad[3, 7] = K
    with pytest.raises(ValueError, match=r"users\[3, 7\]=12 is outside"):
        freq_est_local(bad, S, T, R_DIST, 1e-9, "central", alpha0=0.08, rng=0)
    with pytest.raises(ValueError, match="same number of items"):
        freq_est_local([[0, 1], [2]], S, T, R_DIST, 1e-9, "central", alpha0=0.08, rng=0)
    with pytest.raises(ValueError, match="refused"):  # vacuous local bound
        freq_est_local(users, S, T, R_DIST, 1e-9, "local", alpha0=0.5, rng=0)
    with pytest.raises(ValueError, match="epsilon"):
        user_level_krr(users, K, float("nan"), rng=0)
    with pytest.raises(ValueError, match="same total mass"):
        product_emd(S, T, R_DIST, np.ones(K) / K, np.ones(K))
