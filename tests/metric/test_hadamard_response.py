"""Hadamard response, the one-report user-level baseline: exact law, exact privacy ratio,
exact unbiasedness of the closed-form estimator.

References
----------
.. [ASZ19] J. Acharya, Z. Sun, H. Zhang, "Hadamard Response: Estimating Distributions
   Privately, Efficiently, and with Little Communication", AISTATS 2019.
"""

import math

import numpy as np
import pytest
from scipy.stats import chisquare

from shuffledp.accounting.guarantee import Neighbour
from shuffledp.analyzers.metric.freq import freq_est_local
from shuffledp.analyzers.metric.hadamard_response import (
    hadamard_sample,
    hadamard_weights,
    user_level_hadamard,
)


def _members(K, k):
    """C_x by brute force from the Sylvester matrix H_K (entries (-1)^popcount(a & b))."""
    H = np.array([[(-1) ** bin(a & b).count("1") for b in range(K)] for a in range(K)])
    return H[1:k + 1] == 1


@pytest.mark.parametrize("k", [2, 5, 16])
def test_sets_are_halves_meeting_in_quarters(k):
    K = 1 << k.bit_length()
    C = _members(K, k)
    assert (C.sum(axis=1) == K // 2).all()
    inter = C.astype(int) @ C.T.astype(int)
    assert (inter[~np.eye(k, dtype=bool)] == K // 4).all()


@pytest.mark.parametrize("x", [0, 4, 14])
def test_sampler_law(x):
    """Chi-square of 160k reports against w_in/T on C_x, w_out/T off it (false failure 1e-4)."""
    K, eps = 16, 1.0
    w_in, w_out = hadamard_weights(eps)
    C = _members(K, 15)[x]
    p = np.where(C, w_in, w_out) / (K // 2 * (w_in + w_out))
    y = hadamard_sample(np.full(160_000, x), K, eps, rng=x + 1)
    assert chisquare(np.bincount(y, minlength=K), p * y.size).pvalue > 1e-4


def test_privacy_ratio_is_exactly_the_realised_epsilon():
    for eps in (0.05, 1.0, 7.0):
        w_in, w_out = hadamard_weights(eps)
        realised = math.log(w_in / w_out)
        assert realised <= eps and eps - realised < 1e-6
        # every output has probability w_in/T or w_out/T under every input: ratio <= w_in/w_out
        # and it is attained (y in C_x minus C_x' exists)
        C = _members(8, 7)
        assert (C[0] & ~C[1]).any()


def test_estimator_is_exactly_unbiased():
    """E[estimate] from the exact law of the reports equals the users' mean histogram."""
    k, K, eps = 6, 8, 0.7
    g = np.random.default_rng(0)
    users = g.integers(0, k, size=(40, 3))
    w_in, w_out = hadamard_weights(eps)
    C = _members(K, k)
    P = np.where(C, w_in, w_out) / (K // 2 * (w_in + w_out))  # P[x, y]
    # expected report histogram: each user samples one of her items uniformly
    expected_counts = sum(P[row].mean(axis=0) for row in users)
    p = w_in / (w_in + w_out)
    f = C.astype(float) @ expected_counts / users.shape[0]
    est = (f - 0.5) / (p - 0.5)
    est += (1 - est.sum()) / k
    truth = np.bincount(users.ravel(), minlength=k) / users.size
    np.testing.assert_allclose(est, truth, atol=1e-12)


def test_user_level_release_and_freq_est_local_option():
    g = np.random.default_rng(1)
    users = g.choice(12, size=(40_000, 4), p=g.dirichlet(np.ones(12)))
    rel = user_level_hadamard(users, 12, 2.0, rng=3)
    truth = np.bincount(users.ravel(), minlength=12) / users.size
    assert rel.estimate.sum() == pytest.approx(1.0, abs=1e-12)
    # per-coordinate sd <= 1/(2 sqrt(n) (p - 1/2)) = 0.0033 plus sampling; 6 sd: false < 1e-6
    assert np.abs(rel.estimate - truth).max() < 0.03
    assert rel.guarantee.neighbour is Neighbour.REPLACE_ONE and rel.guarantee.epsilon <= 2.0
    fr = freq_est_local(users[:2000, :4].repeat(200, axis=1)[:, :800] % 12, 3, 4, 0.25, 1e-9,
                        "central", alpha0=0.5, baseline="hadamard", rng=4)
    assert fr.baseline.guarantee.theorem.startswith("user-level Hadamard")
    with pytest.raises(ValueError, match="baseline"):
        freq_est_local(users[:10], 3, 4, 0.25, 1e-9, "central", alpha0=0.5, baseline="rr")


def test_bad_input():
    with pytest.raises(ValueError, match="epsilon"):
        user_level_hadamard(np.zeros((2, 2), int), 4, 0.0)
    with pytest.raises(ValueError, match="k must be"):
        user_level_hadamard(np.zeros((2, 2), int), 1, 1.0)
