"""Errata of Imola, Roy Chowdhury and Chaudhuri, "Metric Differential Privacy at the
User-Level": Lemma 6.7's Laplace scale (exact pmf ratio at the sensitivity boundary of the
library's baseline) and the Sec. 4.2 example's numbers, recomputed with the accountant."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from shuffledp.accounting.metric.shuffle import emd_itemwise, emd_itemwise_alpha0
from shuffledp.analyzers.metric.linear import user_level_linear
from shuffledp.encoders.noise.laplace import discrete_laplace_pmf


def _sup_log_ratio(s: np.ndarray, s2: np.ndarray, rate: float, window: int) -> float:
    """sup over outputs of log P(y | s) / P(y | s2), i.i.d. DL(exp(-rate)) per coordinate,
    evaluated from the pmf on a window around each differing coordinate."""
    a = math.exp(-rate)
    total = 0.0
    for i in np.flatnonzero(s != s2):
        y = np.arange(min(s[i], s2[i]) - window, max(s[i], s2[i]) + window + 1)
        total += float((np.log(discrete_laplace_pmf(y - s[i], a))
                        - np.log(discrete_laplace_pmf(y - s2[i], a))).max())
    return total


def test_lemma_6_7_pmf_ratio_at_the_boundary_is_eps_not_two_eps():
    """Replacing one user's m items moves the pooled normalised histogram by 2/n in l1.
    The library's central baseline (user_level_linear, identity table) releases integer
    sums S = R * counts plus DL noise; at the worst pair the pmf ratio is exactly its
    effective epsilon (<= eps, > eps (1 - 1e-6)): eps-DP and no better. The text's
    Lap(1/(n eps)) on the normalised histogram is DL rate eps / (m R) on S: ratio 2 eps."""
    n, m, k, eps = 40, 3, 5, 0.8
    before = np.zeros((n, m), dtype=int)
    before[1:] = np.arange(n - 1)[:, None] % k
    after = before.copy()
    after[0] = k - 1  # user 0's whole dataset moves from item 0 to item k - 1
    rel = user_level_linear(before, k, np.eye(k), eps, "central", rng=0)
    R = rel.resolution
    s = R * np.bincount(before.ravel(), minlength=k)
    s2 = R * np.bincount(after.ravel(), minlength=k)
    np.testing.assert_array_equal(rel.noisy_sums.shape, (1, k))
    boundary = int(np.abs(s - s2).sum())
    assert boundary == 2 * m * R  # the pair attains the l1-sensitivity 2 m R
    # calibrated to it (with a relative 1e-14 of safety margin)
    assert rel.sensitivity == pytest.approx(boundary, rel=1e-12)
    assert rel.sensitivity >= boundary
    st, tt = rel.dl_parameter
    assert Fraction(boundary * st, tt) <= Fraction(eps)
    sup = _sup_log_ratio(s, s2, st / tt, 3 * 2 * m * R)
    assert sup <= eps * (1 + 1e-12)
    assert sup > eps * (1 - 1e-6)
    # the printed scale 1/(n eps) on K_G = counts / (n m): DL rate eps / (m R) on S
    sup_text = _sup_log_ratio(s, s2, eps / (m * R), 3 * 2 * m * R)
    assert sup_text == pytest.approx(2 * eps, rel=1e-6)


def test_sec_4_2_example_recomputed_with_the_accountant():
    """Sec. 4.2: n = 1e5 users, m = 1e3 points, alpha = 25, delta = 1e-12, central model,
    "alpha0 ~ 3.0". Thm 4.4 (w -> 0 limit): alpha = m alpha0 K / 2 with
    K = 8 sqrt(e^alpha0 ln(4m/delta)) / sqrt(mn) + 8 e^alpha0 / (mn); alpha0 = 3 gives 32.24,
    alpha0 = 2.7013 gives 25; the guarantee's delta is delta e^{h(mn; m, m)} = 9.36e-6."""
    m, n, delta = 1000, 10**5, 1e-12
    N = m * n

    def closed_form(a0: float) -> tuple[float, float]:
        k = 8 * math.sqrt(math.exp(a0) * math.log(4 * m / delta)) / math.sqrt(N) \
            + 8 * math.exp(a0) / N
        h = m * math.log1p(math.tanh(a0 / 2) * k)
        return m * a0 * k / 2, delta * math.exp(h)

    at3 = emd_itemwise(3.0, m, delta, "central", n)
    assert at3.alpha == pytest.approx(closed_form(3.0)[0], rel=1e-9)
    assert at3.alpha == pytest.approx(32.24, abs=0.01) and at3.alpha > 25
    inv = emd_itemwise_alpha0(25, m, delta, "central", n)
    assert inv.alpha0 == pytest.approx(2.7013, abs=1e-4)
    a, d = closed_form(inv.alpha0)
    assert inv.bound.alpha == pytest.approx(a, rel=1e-9) and a <= 25 * (1 + 1e-9)
    assert inv.bound.delta_out == pytest.approx(d, rel=1e-9)
    assert inv.bound.delta_out == pytest.approx(9.36e-6, rel=1e-3)  # not 1e-12
    assert inv.bound.guarantee.delta == inv.bound.delta_out
