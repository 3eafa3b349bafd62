"""Scale-and-round ([Ghazi23]_ App. F): sums and exact l1-sensitivities of both rules.

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shuffledp.encoders.encoder import scale_round, sensitivity


def _compositions(total: int, parts: int):
    for cut in itertools.combinations(range(total + parts - 1), parts - 1):
        prev, out = -1, []
        for c in cut:
            out.append(c - prev - 1)
            prev = c
        out.append(total + parts - 2 - prev)
        yield out


@given(
    st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=30),
    st.integers(min_value=1, max_value=4096),
)
@settings(max_examples=300, deadline=None)
def test_largest_remainder_sums_to_B_and_is_within_one(raw, B):
    v = np.asarray(raw)
    if v.sum() <= 0:
        v = v + 1.0
    v = v / v.sum()
    z = scale_round(v, B, "largest_remainder")
    assert z.sum() == B
    assert np.all(z >= 0)
    assert np.all(np.abs(z - B * v) < 1 + 1e-9)
    f = scale_round(v, B, "floor")
    assert np.all(f >= 0) and f.sum() <= B
    assert B - f.sum() <= np.count_nonzero(v) - 0  # at most one unit lost per occupied cell
    assert np.all((z == f) | (z == f + 1))


def test_groups_round_independently():
    v = np.array([0.5, 0.5, 1 / 3, 1 / 3, 1 / 3, 1.0])
    g = np.array([0, 0, 1, 1, 1, 2])
    z = scale_round(v, 7, "largest_remainder", groups=g)
    assert z[:2].sum() == 7 and z[2:5].sum() == 7 and z[5] == 7
    # ties go to the lower index
    assert z[:2].tolist() == [4, 3]
    assert z[2:5].tolist() == [3, 2, 2]


@pytest.mark.parametrize("rule", ["floor", "largest_remainder"])
@pytest.mark.parametrize("B", [1, 2, 3, 5, 8])
def test_exhaustive_sensitivity_is_exactly_B_and_2B(rule, B):
    # every distribution on 4 cells with masses in multiples of 1/6 (and of 1/7)
    cells = 4
    vecs = []
    for den in (6, 7):
        vecs += [np.asarray(c, float) / den for c in _compositions(den, cells)]
    Z = np.array([scale_round(v, B, rule) for v in vecs])
    add_remove = np.abs(Z).sum(axis=1).max()
    replace = np.abs(Z[:, None, :] - Z[None, :, :]).sum(axis=2).max()
    assert add_remove == B == sensitivity(B, "add_remove")
    assert replace == 2 * B == sensitivity(B, "replace")


def test_full_encoder_sensitivity_on_small_grid():
    # per measured level, the scaled rounded vector of any user has l1 norm <= B, and two
    # users at distinct leaves attain 2B at every level below their common ancestor.
    from shuffle_helpers import params_for

    from shuffledp import Grid, UserDistributions

    grid = Grid(6, 5)
    p = params_for(grid, n=2, B=5)
    from shuffledp.encoders.encoder import noisy_vectors

    rng = np.random.default_rng(3)
    users = UserDistributions.from_pixels(
        grid, np.repeat(np.arange(40), 3), rng.integers(0, grid.n_pixels, 120), rng.random(120)
    )
    z = noisy_vectors(p, users, noise=False)
    offs = list(p.level_offsets) + [p.m]
    for k in range(len(p.level_sizes)):
        block = z[:, offs[k] : offs[k + 1]]
        assert np.all(block.sum(axis=1) == p.B)
        diff = np.abs(block[:, None, :] - block[None, :, :]).sum(axis=2)
        assert diff.max() <= 2 * p.B == p.level_sensitivities[k]


def test_bad_inputs():
    with pytest.raises(ValueError, match="rounding"):
        scale_round(np.ones(2) / 2, 4, "ceil")
    with pytest.raises(TypeError, match="B"):
        scale_round(np.ones(2) / 2, 4.5, "floor")
    with pytest.raises(ValueError, match="B"):
        scale_round(np.ones(2) / 2, 0, "floor")
    with pytest.raises(ValueError):
        scale_round(np.array([-0.5, 1.5]), 4)
