import numpy as np
import pytest

from shuffledp import Grid, UserDistributions


def test_grouping_normalisation_and_merge():
    g = Grid(4, 4)
    u = UserDistributions.from_points(
        g, np.array(["b", "a", "b", "b"]), np.array([0.1, 0.5, 0.1, 0.9]),
        np.array([0.1, 0.5, 0.1, 0.9]), np.array([1.0, 2.0, 1.0, 2.0]),
    )
    assert u.n_users == 2
    assert u.user_ids == ("b", "a")  # order of first appearance
    px, w = u.user(0)
    assert dict(zip(px.tolist(), w.tolist())) == {0: 0.5, 15: 0.5}  # duplicates merged
    np.testing.assert_allclose(u.aggregate().sum(), 2.0)
    sub = u.subset(np.array([1]))
    assert sub.user_ids == ("a",) and sub.n_users == 1


def test_zero_weight_user_and_negative_weight_rejected():
    g = Grid(2, 2)
    with pytest.raises(ValueError, match="user 'z' has zero total weight"):
        UserDistributions.from_points(g, np.array(["y", "z"]), np.array([0.1, 0.2]),
                                      np.array([0.1, 0.2]), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match=r"record 1 \(user 7\) has weight=-1.0"):
        UserDistributions.from_points(g, np.array([3, 7]), np.array([0.1, 0.2]),
                                      np.array([0.1, 0.2]), np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match="weight=nan"):
        UserDistributions.from_points(g, np.array([3]), np.array([0.1]),
                                      np.array([0.1]), np.array([np.nan]))
    with pytest.raises(ValueError, match="no records"):
        UserDistributions.from_points(g, np.array([]), np.array([]), np.array([]))
