"""PrivEMDItemWise: release shape, multiset semantics, guarantee record, refusals."""

import numpy as np
import pytest

from shuffledp.accounting.metric.shuffle import emd_itemwise
from shuffledp.analyzers.metric.itemwise import priv_emd_itemwise
from shuffledp.encoders.metric.mechanisms import GKRR, ExponentialMechanism
from shuffledp.encoders.metric.spaces import grid_space
from shuffledp.randomness import SEEDED_NOTE, SecureRandom


def _users(n, m, k, seed=0):
    return np.random.default_rng(seed).integers(0, k, size=(n, m))


def test_central_release_and_guarantee():
    mech = GKRR(4, 4, 0.25, 1.0)
    users = _users(1000, 200, 16)
    rel = priv_emd_itemwise(users, mech, 1e-9, "central", rng=3)
    ref = emd_itemwise(1.0, 200, 1e-9, "central", 1000)
    assert rel.outputs.shape == (200_000,)
    assert rel.guarantee.alpha == ref.alpha and rel.guarantee.delta == ref.delta_out
    assert rel.guarantee.notion == "metric_emd" and rel.guarantee.neighbour.token == "bounded_emd"
    assert rel.composition_alpha == 200.0 and rel.guarantee.alpha < rel.composition_alpha
    assert SEEDED_NOTE in rel.guarantee.notes
    assert rel.guarantee.parameters["mechanism"] == "GKRR"
    # the multiset equals that of the unshuffled mechanism outputs with the same word stream
    raw = mech.sample(users.ravel(), rng=3)
    assert np.array_equal(np.sort(rel.outputs), np.sort(raw))
    assert not np.array_equal(rel.outputs, raw)  # shuffled (probability 1/(200000!) to fail)
    d = rel.to_dict()
    assert d["guarantee"]["epsilon"] == ref.alpha and d["composition_alpha"] == 200.0


def test_local_release_rows_are_user_multisets():
    mech = GKRR(2, 2, 0.5, 0.01)
    users = _users(3, 3000, 4, seed=1)
    rel = priv_emd_itemwise(users, mech, 1e-9, "local", rng=SecureRandom.for_testing(5))
    assert rel.outputs.shape == (3, 3000)
    assert rel.guarantee.model == "local" and rel.notes == ()
    assert rel.guarantee.alpha < rel.composition_alpha == 30.0


def test_local_vacuous_refused():
    mech = ExponentialMechanism(grid_space(3, 3), 0.5)
    with pytest.raises(ValueError, match="refused.*vacuous"):
        priv_emd_itemwise(_users(5, 1000, 9), mech, 1e-9, "local", rng=0)


def test_condition_failure_refused():
    mech = GKRR(2, 2, 0.5, 1.0)
    with pytest.raises(ValueError, match="Thm 4.3 condition fails"):
        priv_emd_itemwise(_users(2, 50, 4), mech, 1e-9, "central", rng=0)


def test_bad_users():
    mech = GKRR(2, 2, 0.5, 1.0)
    with pytest.raises(ValueError, match="same number of items"):
        priv_emd_itemwise([[0, 1], [1, 2, 3]], mech, 1e-9)
    with pytest.raises(ValueError, match=r"users\[0, 1\]=7 is outside"):
        priv_emd_itemwise([[0, 7]], mech, 1e-9)
    with pytest.raises(ValueError, match="model"):
        priv_emd_itemwise([[0, 1]], mech, 1e-9, "shuffle")
    with pytest.raises(TypeError, match="mechanism"):
        priv_emd_itemwise([[0, 1]], "gkrr", 1e-9)


def test_seeded_run_uses_one_stream():
    """Regression: the shuffle must not replay the noise stream (same seed twice)."""
    mech = GKRR(2, 2, 0.5, 1.0)
    users = np.zeros((1000, 200), dtype=np.int64)
    a = priv_emd_itemwise(users, mech, 1e-9, "central", rng=4).outputs
    b = priv_emd_itemwise(users, mech, 1e-9, "central", rng=4).outputs
    assert np.array_equal(a, b)  # reproducible
    g = np.random.default_rng(4)
    raw = mech.sample(users.ravel(), rng=g)
    g.shuffle(raw)
    assert np.array_equal(a, raw)
