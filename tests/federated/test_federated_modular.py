"""Privacy of modular clipping ([Bagdasaryan22]_ Alg. 1): the released residue
(x + Z) mod m, Z the shard's discrete Laplace noise (sum of the clients' Polya differences),
is eps-DP for every modulus, by exact computation of its pmf; at the boundary: the bound
is attained (up to 1e-9) for a large modulus and a wrap-around only lowers the loss.

References
----------
.. [Bagdasaryan22] E. Bagdasaryan et al., "Towards Sparse Federated Analytics: Location
   Heatmaps under Distributed Differential Privacy with Secure Aggregation", PoPETs 2022,
   Alg. 1, Thm 4.2.
"""

import mpmath
import numpy as np
import pytest

from shuffledp.encoders.federated import noise_parameters
from shuffledp.encoders.noise.polya import polya_difference_sum_pmf


def _residue_pmf(x: int, m: int, a: mpmath.mpf) -> list:
    """P[(x + Z) mod m = r], Z ~ DL(a), r = 0..m-1, summed in closed form over the wraps:
    sum_k a^|r - x + k m| for all integers k (two geometric series)."""
    out = []
    c = (1 - a) / (1 + a)
    for r in range(m):
        d = (r - x) % m                    # 0 <= d < m: distances d + k m and m - d + k m
        up = a ** d / (1 - a ** m)         # z = d, d + m, d + 2m, ...
        down = a ** (m - d) / (1 - a ** m)  # z = d - m, d - 2m, ...
        out.append(c * (up + down))
    return out


def _excess(eps: float, nb: str, m: int) -> float:
    """(max over residues of |log P_x / P_x'|) - eps_a at 60 digits, for the float a the
    sampler actually uses and eps_a = -Delta ln a its exact loss without clipping."""
    delta, a_float = noise_parameters(eps, nb)
    with mpmath.workdps(60):
        a = mpmath.mpf(a_float)
        eps_a = -delta * mpmath.log(a)
        assert abs(eps_a - eps) < 1e-15 * eps  # a = e^{-eps/Delta} rounded to a double
        p = _residue_pmf(0, m, a)
        q = _residue_pmf(delta, m, a)      # the neighbour moves one entry by Delta
        assert abs(mpmath.fsum(p) - 1) < mpmath.mpf(10) ** -40
        return float(max(abs(mpmath.log(u / w)) for u, w in zip(p, q)) - eps_a)


@pytest.mark.parametrize("nb", ["add_remove", "replace"])
@pytest.mark.parametrize("eps", [0.5, 1.0])
def test_modular_clipping_is_eps_dp_and_tight_for_a_large_modulus(eps, nb):
    excess = _excess(eps, nb, 512)         # a^512 < 1e-50: no effective wrap
    assert excess <= 1e-40                 # 60-digit arithmetic
    assert excess > -1e-9                  # fails just below eps: the bound is attained


@pytest.mark.parametrize("m", [2, 3, 4, 8, 16, 64])
def test_wrap_around_never_increases_the_loss(m):
    """Every modulus, including ones far smaller than the noise: loss <= eps, and strictly
    below eps once the wrap is visible (clipping is post-processing of the sum)."""
    excess = _excess(1.0, "add_remove", m)
    assert excess <= 1e-40
    if m <= 8:
        assert excess < -1e-4


def test_closed_form_matches_the_clients_polya_sum_folded_mod_m():
    """The residue pmf above equals the exact law of the S clients' Polya differences
    (explicit convolution) folded mod m: the test's reference is not circular."""
    S, m = 6, 16
    _, a = noise_parameters(1.0, "add_remove")
    k, pmf = polya_difference_sum_pmf(S, 1.0 / S, a, 200)
    folded = np.zeros(m)
    np.add.at(folded, (k + 3) % m, pmf)    # x = 3
    with mpmath.workdps(30):
        ref = [float(p) for p in _residue_pmf(3, m, mpmath.mpf(a))]
    np.testing.assert_allclose(folded, ref, rtol=1e-9)
