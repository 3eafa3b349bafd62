"""Shuffled binary RR's exact worst case: against an enumeration of every data set, certified
and refuted at the grid boundary, and its place among the other bounds. Deterministic."""

import itertools
import math

import pytest
from exact_shuffle import exact_shuffle_divergence, krr_row

from shuffledp.accounting.amplification.binary_rr import _worst, binary_rr_shuffle_exact
from shuffledp.accounting.amplification.clones import shuffle_ldp, variation_ratio_numerical
from shuffledp.accounting.amplification.krr_lower import krr_lower_epsilon


def enumerated_worst(n, eps0, eps):
    """max over every data set of the others (and both directions) of the exact divergence
    of the shuffled histograms, enumerated outcome by outcome."""
    R0, R1 = krr_row(2, eps0, 0), krr_row(2, eps0, 1)
    return max(exact_shuffle_divergence(R0, R1, [krr_row(2, eps0, x) for x in vals], eps)
               for vals in itertools.combinations_with_replacement(range(2), n - 1))


@pytest.mark.parametrize("n,eps0,eps", [(1, 1.0, 0.3), (2, 1.0, 0.2), (5, 0.5, 0.1),
                                        (8, 2.0, 0.7), (12, 1.0, 0.05)])
def test_worst_case_matches_an_enumeration_of_every_data_set(n, eps0, eps):
    lo, up, _ = _worst(n, eps0, eps)
    ref = enumerated_worst(n, eps0, eps)
    assert lo <= ref * (1 + 1e-9) + 1e-15 and ref <= up * (1 + 1e-9) + 1e-15


def test_released_epsilon_is_certified_and_refuted_one_step_below():
    n, eps0, delta = 2000, 1.0, 1e-6
    b = binary_rr_shuffle_exact(n, eps0, delta)
    assert b.valid and b.method == "binary-rr-exact"
    assert _worst(n, eps0, b.epsilon)[1] <= delta
    assert _worst(n, eps0, b.epsilon_lower)[0] > delta
    assert b.epsilon <= b.epsilon_lower * 1.001 * (1 + 1e-12)
    # it is binary RR's exact curve: the one-data-set lower bound meets it, and it sits
    # well below the bound for every eps0-LDP randomizer
    assert b.epsilon_lower == pytest.approx(krr_lower_epsilon(n, eps0, delta, k=2)[0])
    assert b.epsilon < 0.9 * variation_ratio_numerical(n, eps0, delta).epsilon


def test_tightest_for_binary_rr_and_errors():
    b = shuffle_ldp(1000, 1.0, 1e-6, randomizer="krr", k=2)
    assert b.method == "binary-rr-exact" and b.guarantee.parameters["k"] == 2
    with pytest.raises(ValueError, match="needs randomizer='krr' and k=2"):
        shuffle_ldp(1000, 1.0, 1e-6, "binary-rr-exact", randomizer="krr", k=3)
    with pytest.raises(ValueError, match="n must be <= 200000 for the exact binary-RR curve"):
        binary_rr_shuffle_exact(300_000, 1.0, 1e-6)
    small = binary_rr_shuffle_exact(10, 1.0, 1e-6)  # nothing to amplify: the local guarantee
    assert not small.valid and small.epsilon == 1.0 and small.delta == 0.0
    assert math.isfinite(binary_rr_shuffle_exact(50, 3.0, 1e-3).epsilon)


def test_windowed_pmf_recurrence_matches_scipy_within_the_charged_error():
    """_rows builds each binomial row by the ratio recurrence anchored at the mode (
    3x faster); every entry must stay within the relative error _divergences charges."""
    import numpy as np
    from scipy.stats import binom

    from shuffledp.accounting.amplification.binary_rr import _PMF_RTOL, _rows

    for trials in (np.arange(0, 64), np.arange(199_936, 200_000)):
        for p in (0.7310585786300049, 0.2689414213699951, 0.999, 1e-6):
            pmf, _ = _rows(trials, p)
            mean, sd = trials * p, np.sqrt(trials * p * (1 - p))
            lo = np.clip(np.floor(mean - 9 * sd - 2), 0, None).astype(np.int64)
            k = lo[:, None] + np.arange(pmf.shape[1])[None, :]
            ref = binom.pmf(k, trials[:, None], p)
            assert np.all(np.abs(pmf - ref) <= _PMF_RTOL / 10 * ref + 1e-300)


def test_progress_follows_every_data_set():
    from shuffledp.accounting.amplification.binary_rr import binary_rr_shuffle_exact

    seen = []
    b = binary_rr_shuffle_exact(2000, 1.0, 1e-6, progress=lambda d, t: seen.append((d, t)))
    assert b.valid and seen and seen[-1] == (2000, 2000)
