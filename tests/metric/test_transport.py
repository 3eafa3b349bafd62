"""The one exact transport solver (shuffledp.encoders.metric.transport) against POT's ot.emd2."""

from __future__ import annotations

import numpy as np
import ot
import pytest

from shuffledp.encoders.metric.transport import GridL1, TreeMetric, transport_cost


def _masses(rng, k, zero_frac, integer):
    """A mass vector with some exact zeros; integer masses make ties in the plan."""
    a = rng.integers(0, 4, k).astype(float) if integer else rng.random(k)
    a[rng.random(k) < zero_frac] = 0.0
    if a.sum() == 0:
        a[rng.integers(k)] = 1.0
    return a / a.sum()


@pytest.mark.parametrize("seed", range(6))
def test_dense_cost_matches_pot_with_ties_and_zero_masses(seed):
    rng = np.random.default_rng(seed)
    for trial in range(40):
        k = int(rng.integers(1, 25))
        ties = trial % 2 == 0
        c = rng.random((k, k))
        if ties:  # few distinct costs and integer masses: many optimal plans
            c = np.round(3 * c)
        p = _masses(rng, k, 0.3, ties)
        q = _masses(rng, k, 0.3, ties)
        ref = ot.emd2(p, q, c, numItermax=10**7)
        assert transport_cost(p, q, c) == pytest.approx(ref, abs=1e-9)
        assert transport_cost(p, q, c, method="highs") == pytest.approx(ref, abs=1e-9)


def test_dense_metric_cost_matches_pot_on_a_larger_instance():
    rng = np.random.default_rng(7)
    x = rng.random((150, 2))
    c = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
    p, q = _masses(rng, 150, 0.2, False), _masses(rng, 150, 0.5, False)
    assert transport_cost(p, q, c) == pytest.approx(ot.emd2(p, q, c, numItermax=10**7),
                                                    abs=1e-9)


def _grid_cost(h, w):
    r, c = np.divmod(np.arange(h * w), w)
    return (np.abs(r[:, None] - r[None]) + np.abs(c[:, None] - c[None])).astype(float)


@pytest.mark.parametrize("shape", [(2, 2), (3, 5), (1, 7), (6, 1), (9, 8)])
def test_grid_l1_is_the_dense_l1_problem(shape):
    h, w = shape
    rng = np.random.default_rng(h * 10 + w)
    for integer in (False, True):
        p = _masses(rng, h * w, 0.4, integer).reshape(h, w)
        q = _masses(rng, h * w, 0.4, integer).reshape(h, w)
        ref = ot.emd2(p.ravel(), q.ravel(), _grid_cost(h, w), numItermax=10**7)
        for method in ("network_simplex", "highs"):
            got = transport_cost(p, q, GridL1(h, w), method=method)
            assert got == pytest.approx(ref, abs=1e-9)
            assert transport_cost(p.ravel(), q.ravel(), GridL1(h, w)) == pytest.approx(got)
        # dense path on the same cost matrix
        assert transport_cost(p.ravel(), q.ravel(), _grid_cost(h, w)) == pytest.approx(
            ref, abs=1e-9)


def test_tree_metric_is_the_dense_tree_distance():
    # leaves 0..3, inner nodes 4 (0, 1) and 5 (2, 3), root 6
    parent = np.array([4, 4, 5, 5, 6, 6, -1])
    length = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.25, 0.0])
    tree = TreeMetric(parent, length, 4)
    up = [[0, 4, 6], [1, 4, 6], [2, 5, 6], [3, 5, 6]]

    def dist(x, y):
        sx, sy = set(up[x]), set(up[y])
        return sum(length[z] for z in sx ^ sy)

    c = np.array([[dist(x, y) for y in range(4)] for x in range(4)])
    rng = np.random.default_rng(3)
    for _ in range(20):
        p, q = _masses(rng, 4, 0.3, False), _masses(rng, 4, 0.3, False)
        ref = ot.emd2(p, q, c)
        assert transport_cost(p, q, tree) == pytest.approx(ref, abs=1e-12)
        assert transport_cost(p, q, c) == pytest.approx(ref, abs=1e-12)


def test_structured_metrics_take_signed_masses_as_the_kr_norm():
    # a signed p with the same total as q: the cost of moving (p - q)+ onto (p - q)-
    p = np.array([0.7, -0.2, 0.5])
    q = np.array([0.0, 0.5, 0.5])
    d = p - q
    assert transport_cost(p, q, GridL1(1, 3)) == pytest.approx(
        transport_cost(np.maximum(d, 0), np.maximum(-d, 0), _grid_cost(1, 3)))


def test_zero_distance_and_single_point_supports():
    c = _grid_cost(2, 3)
    p = np.array([0.0, 0.25, 0.0, 0.75, 0.0, 0.0])
    assert transport_cost(p, p, c) == 0.0
    assert transport_cost(p, p, GridL1(2, 3)) == 0.0
    one = np.array([0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    assert transport_cost(one, p, c) == pytest.approx(0.25 * 1 + 0.75 * 3)
    assert transport_cost(p, one, c) == pytest.approx(0.25 * 1 + 0.75 * 3)


def test_errors_name_the_argument():
    c = _grid_cost(2, 2)
    with pytest.raises(ValueError, match="method"):
        transport_cost([1, 0, 0, 0], [0, 1, 0, 0], c, method="sinkhorn")
    with pytest.raises(ValueError, match="same total mass"):
        transport_cost([1, 0, 0, 0], [0, 2, 0, 0], c)
    with pytest.raises(ValueError, match="p must be >= 0"):
        transport_cost([1.5, -0.5, 0, 0], [0, 1, 0, 0], c)
    with pytest.raises(ValueError, match="q must hold one mass per point"):
        transport_cost([1, 0, 0, 0], [1, 0, 0], c)
    with pytest.raises(ValueError, match="cost must be a square"):
        transport_cost([1, 0], [0, 1], np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"cost must be finite and >= 0, got cost\[0, 1\]=-1.0"):
        transport_cost([1, 0], [0, 1], np.array([[0, -1.0], [1, 0]]))
    with pytest.raises(ValueError, match=r"got cost\[1, 0\]=nan"):
        transport_cost([1, 0], [0, 1], np.array([[0, 1.0], [np.nan, 0]]))
    with pytest.raises(ValueError, match=r"got cost\[1, 1\]=inf"):
        transport_cost([1, 0], [0, 1], np.array([[0, 1.0], [1, np.inf]]))
    with pytest.raises(ValueError, match="GridL1 width"):
        GridL1(2, 0)
    with pytest.raises(ValueError, match="parent"):
        TreeMetric(np.array([0, -1]), np.array([1.0, 0.0]), 1)


# ----------------------------------------------------------------------------- solver dispatch
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

import shuffledp.encoders.metric.transport as tr  # noqa: E402

SOLVERS = ("auto", "network_simplex", "pot", "highs")


@pytest.mark.parametrize("seed", range(4))
def test_every_method_gives_the_same_dense_optimum_below_and_above_pot_min_arcs(seed):
    """Sizes on both sides of POT_MIN_ARCS, with ties and zero masses: the four solvers agree
    to 1e-9 relative, and 'auto' is POT's value where POT runs."""
    rng = np.random.default_rng(100 + seed)
    for k in (3, 12, 19, 21, 45, 90):
        ties = k % 2 == 1
        c = rng.random((k, k))
        if ties:
            c = np.round(4 * c)
        p, q = _masses(rng, k, 0.25, ties), _masses(rng, k, 0.25, ties)
        got = {m: transport_cost(p, q, c, method=m) for m in SOLVERS}
        ref = got["network_simplex"]
        for m in SOLVERS:
            assert got[m] == pytest.approx(ref, rel=1e-9, abs=1e-12), (k, m)
        assert got["auto"] == pytest.approx(ot.emd2(p, q, c, numItermax=10**7), rel=1e-12,
                                            abs=1e-15)


def _sparse_grid_pair(rng, h, w, n_points, overlap, integer):
    """Masses on few cells: ``n_points`` random cells each, sharing about ``overlap`` of
    them; integer masses make ties (equal costs, several optimal plans, cells with p = q)."""
    k = h * w
    cells_p = rng.choice(k, n_points, replace=False)
    shared = cells_p[: int(overlap * n_points)]
    cells_q = np.concatenate([shared, rng.choice(k, n_points - shared.size, replace=False)])
    p, q = np.zeros(k), np.zeros(k)
    if integer:
        np.add.at(p, cells_p, rng.integers(1, 4, cells_p.size))
        np.add.at(q, cells_q, rng.integers(1, 4, cells_q.size))
    else:
        np.add.at(p, cells_p, rng.random(cells_p.size))
        np.add.at(q, cells_q, rng.random(cells_q.size))
    return (p / p.sum()).reshape(h, w), (q / q.sum()).reshape(h, w)


@pytest.mark.parametrize("seed", range(5))
def test_grid_support_transport_equals_the_grid_flow(seed):
    """The transport problem between the supports of (p - q)+ and (p - q)- (POT, or ours
    below POT_MIN_ARCS) equals the grid flow's optimum to 1e-9 relative, on sparse inputs
    with unequal supports, shared cells and ties, and on dense inputs."""
    rng = np.random.default_rng(200 + seed)
    for h, w in ((7, 9), (16, 16), (40, 31)):
        for n_points, overlap, integer in ((3, 0.0, True), (15, 0.5, True), (40, 0.2, False),
                                           (h * w // 2, 0.5, True), (h * w, 1.0, False)):
            n_points = min(n_points, h * w)
            p, q = _sparse_grid_pair(rng, h, w, n_points, overlap, integer)
            flow = transport_cost(p, q, GridL1(h, w), method="network_simplex")
            for m in ("auto", "pot"):
                got = transport_cost(p, q, GridL1(h, w), method=m)
                assert got == pytest.approx(flow, rel=1e-9, abs=1e-12), (h, w, n_points, m)
            if h * w <= 256:
                assert transport_cost(p, q, GridL1(h, w), method="highs") == pytest.approx(
                    flow, rel=1e-9, abs=1e-12)


def test_grid_support_transport_with_unequal_support_sizes_and_a_point_mass():
    rng = np.random.default_rng(5)
    h, w = 30, 20
    p = np.zeros(h * w)
    p[rng.integers(h * w)] = 1.0               # one cell against many
    q = _masses(rng, h * w, 0.9, True)
    for a, b in ((p, q), (q, p)):
        flow = transport_cost(a, b, GridL1(h, w), method="network_simplex")
        assert transport_cost(a, b, GridL1(h, w)) == pytest.approx(flow, rel=1e-12)
        assert transport_cost(a, b, GridL1(h, w), method="pot") == pytest.approx(flow,
                                                                                 rel=1e-12)
    r, c = np.divmod(np.arange(h * w), w)
    r0, c0 = np.divmod(int(np.argmax(p)), w)
    assert transport_cost(p, q, GridL1(h, w)) == pytest.approx(
        float(q @ (np.abs(r - r0) + np.abs(c - c0))), rel=1e-12)


def test_auto_takes_the_support_transport_on_sparse_and_the_grid_flow_on_dense(monkeypatch):
    """The switch of 'auto' is the one documented: sparse supplies go to the transport
    problem between the supports, dense ones to the grid flow."""
    calls = []
    real = tr._l1_costs
    monkeypatch.setattr(tr, "_l1_costs", lambda *a: calls.append(a) or real(*a))
    rng = np.random.default_rng(9)
    h = w = 48
    p, q = _sparse_grid_pair(rng, h, w, 60, 0.3, False)
    assert 60 * 60 <= tr.SUPPORT_ARCS_FACTOR * (h * w) ** 1.5
    transport_cost(p, q, GridL1(h, w))
    assert len(calls) == 1
    p, q = _masses(rng, h * w, 0.0, False), _masses(rng, h * w, 0.0, False)
    pos, neg = np.count_nonzero(p > q), np.count_nonzero(p < q)
    assert pos * neg > tr.SUPPORT_ARCS_FACTOR * (h * w) ** 1.5
    transport_cost(p, q, GridL1(h, w))
    assert len(calls) == 1
    # and 'pot' solves the dense one on the supports too (below SUPPORT_MAX_ARCS)
    assert transport_cost(p, q, GridL1(h, w), method="pot") == pytest.approx(
        transport_cost(p, q, GridL1(h, w)), rel=1e-9)
    assert len(calls) == 2


def test_pot_stopping_before_the_optimum_is_never_returned(monkeypatch):
    """POT's pivot limit reached: 'auto' returns our network simplex's exact value, 'pot'
    raises naming numItermax; neither returns POT's inexact plan."""
    rng = np.random.default_rng(11)
    k = 60
    c = rng.random((k, k))
    p, q = _masses(rng, k, 0.0, False), _masses(rng, k, 0.0, False)
    exact = transport_cost(p, q, c, method="network_simplex")
    monkeypatch.setattr(tr, "_pot_max_iter", lambda n_nodes: 3)
    with pytest.warns(UserWarning, match="numItermax"):
        inexact = ot.emd2(p, q, c, numItermax=3)
    assert abs(inexact - exact) > 1e-3 * exact   # what a silent POT value would have been
    with pytest.warns(UserWarning):
        assert transport_cost(p, q, c) == pytest.approx(exact, rel=1e-12)
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="numItermax=3"):
        transport_cost(p, q, c, method="pot")
    # the grid's support transport falls back the same way
    pg, qg = _sparse_grid_pair(rng, 20, 20, 40, 0.0, False)
    flow = transport_cost(pg, qg, GridL1(20, 20), method="network_simplex")
    with pytest.warns(UserWarning):
        assert transport_cost(pg, qg, GridL1(20, 20)) == pytest.approx(flow, rel=1e-12)


def test_pot_on_a_grid_above_support_max_arcs_is_refused(monkeypatch):
    rng = np.random.default_rng(12)
    p, q = _masses(rng, 100, 0.0, False), _masses(rng, 100, 0.0, False)
    monkeypatch.setattr(tr, "SUPPORT_MAX_ARCS", 100)
    with pytest.raises(ValueError, match="method='pot'.*SUPPORT_MAX_ARCS=100"):
        transport_cost(p, q, GridL1(10, 10), method="pot")
    # 'auto' is not refused: it takes the grid flow
    assert transport_cost(p, q, GridL1(10, 10)) == pytest.approx(
        transport_cost(p, q, GridL1(10, 10), method="network_simplex"), rel=1e-12)


def test_solves_in_threads_give_the_serial_results():
    """Both solvers release the GIL (numba nogil, POT's C++ call): callers run them in a
    thread pool; the values must not depend on it."""
    rng = np.random.default_rng(13)
    cases = []
    for i in range(6):
        if i % 2:
            p, q = _sparse_grid_pair(rng, 32, 32, 80, 0.2, False)
            cases.append((p, q, GridL1(32, 32)))
        else:
            k = 120
            x = rng.random((k, 2))
            cases.append((_masses(rng, k, 0.1, False), _masses(rng, k, 0.1, False),
                          np.abs(x[:, None] - x[None]).sum(-1)))
    serial = [transport_cost(*c) for c in cases]
    with ThreadPoolExecutor(2) as pool:
        threaded = list(pool.map(lambda c: transport_cost(*c), cases))
    assert threaded == serial


@pytest.mark.parametrize("shape", [(2, 2), (2, 5), (5, 2), (3, 3), (4, 7), (8, 5), (16, 17)])
def test_grid_starting_tree_is_a_feasible_spanning_tree(shape):
    """The centre comb: one root, every other cell joined to its parent by its pred arc in
    the direction dirn says, non-negative flows whose net outflow is the supply."""
    h, w = shape
    rng = np.random.default_rng(h * 100 + w)
    d = rng.random(h * w) - 0.5
    d -= d.mean()
    parent, pred, dirn, flow = tr._grid_comb(d, h, w)
    tail, head = tr._grid_arcs(h, w)
    assert np.count_nonzero(parent < 0) == 1 and parent[(h // 2) * w + w // 2] == -1
    for x in np.flatnonzero(parent >= 0):
        e = pred[x]
        assert {tail[e], head[e]} == {x, parent[x]}
        assert (tail[e] == x) == (dirn[x] == 1)
        y, steps = x, 0                      # the parent pointers reach the root
        while parent[y] >= 0 and steps <= h * w:
            y, steps = parent[y], steps + 1
        assert parent[y] == -1
    assert np.all(flow >= 0)
    net = np.bincount(tail, flow, h * w) - np.bincount(head, flow, h * w)
    np.testing.assert_allclose(net, d, atol=1e-12)


@pytest.mark.parametrize("diff_factor", [0.0, 1.0])
def test_both_support_formulations_equal_the_grid_flow(monkeypatch, diff_factor):
    """SUPPORT_DIFF_FACTOR = 0: always the supports of p and q; = 1: always those of
    (p - q)+ and (p - q)-. Both give the grid flow's optimum to 1e-9 relative, with shared
    cells, cells where p = q and integer ties."""
    monkeypatch.setattr(tr, "SUPPORT_DIFF_FACTOR", diff_factor)
    rng = np.random.default_rng(21)
    for h, w in ((12, 10), (25, 25)):
        for n_points, overlap, integer in ((20, 0.0, False), (40, 0.6, True), (60, 0.9, True)):
            p, q = _sparse_grid_pair(rng, h, w, n_points, overlap, integer)
            a, b = p.ravel(), q.ravel()
            src, dst, _, _ = tr._grid_supports(a, b)
            if diff_factor == 0.0:
                assert set(src) == set(np.flatnonzero(a)) and set(dst) == set(np.flatnonzero(b))
            else:
                assert set(src) == set(np.flatnonzero(a > b))
            flow = transport_cost(p, q, GridL1(h, w), method="network_simplex")
            for m in ("auto", "pot"):
                assert transport_cost(p, q, GridL1(h, w), method=m) == pytest.approx(
                    flow, rel=1e-9, abs=1e-12)


def test_grid_supports_take_the_difference_only_when_much_smaller():
    rng = np.random.default_rng(22)
    # independent sparse maps: the supports of p and q (the problem POT users pose)
    p, q = _sparse_grid_pair(rng, 30, 30, 100, 0.1, False)
    src, dst, ma, mb = tr._grid_supports(p.ravel(), q.ravel())
    assert src.size == np.count_nonzero(p) and dst.size == np.count_nonzero(q)
    assert ma.sum() == pytest.approx(mb.sum(), rel=1e-15)
    # q = p moved on a few cells: the difference's supports, a much smaller problem
    q2 = p.copy().ravel()
    nz = np.flatnonzero(q2)
    q2[nz[:5]] = 0.0
    q2[rng.choice(np.flatnonzero(q2 == 0), 5, replace=False)] = p.ravel()[nz[:5]]
    src, dst, _, _ = tr._grid_supports(p.ravel(), q2)
    assert src.size <= 5 and dst.size <= 5
    assert transport_cost(p, q2.reshape(p.shape), GridL1(30, 30)) == pytest.approx(
        transport_cost(p, q2.reshape(p.shape), GridL1(30, 30), method="network_simplex"),
        rel=1e-12)


def test_pot_gets_balanced_masses_whatever_their_totals():
    """POT checks the totals to 1.5e-6 and the balance to 1e-8 in absolute terms: totals far
    from 1, or 2e-6 apart near 1 (within MASS_TOL of each other for a total of 1e4), are
    normalised first; the value is scaled back."""
    rng = np.random.default_rng(31)
    k = 30
    c = rng.random((k, k))
    p, q = _masses(rng, k, 0.0, False), _masses(rng, k, 0.0, False)
    exact = transport_cost(p, q, c, method="network_simplex")
    for scale in (1e-9, 1e4, 1e9):
        assert transport_cost(scale * p, scale * q, c, method="pot") == pytest.approx(
            scale * exact, rel=1e-12)
    # both totals within 1e-6 of 1 but 1.8e-6 apart: POT alone would refuse (AssertionError)
    val, why = tr._pot_transport(p * (1 + 0.9e-6), q * (1 - 0.9e-6), c)
    assert why == "" and val == pytest.approx(exact * (1 + 0.9e-6), rel=1e-12)
    # a 1e4-mass pair off by 1e-9 relative: the difference's supports carry mass ~1
    h = w = 12
    pg, qg = _sparse_grid_pair(rng, h, w, 30, 0.9, False)
    big_p, big_q = 1e4 * pg, 1e4 * qg * (1 + 5e-10)
    flow = transport_cost(big_p, big_q, GridL1(h, w), method="network_simplex")
    assert transport_cost(big_p, big_q, GridL1(h, w), method="pot") == pytest.approx(
        flow, rel=1e-6)


def _check_spanning_tree(parent, pred, dirn, flow, d, h, w):
    """One root (the centre cell), every other cell joined to its parent by its pred arc in
    the direction dirn says, non-negative flows whose net outflow is the supply."""
    tail, head = tr._grid_arcs(h, w)
    assert np.count_nonzero(parent < 0) == 1 and parent[(h // 2) * w + w // 2] == -1
    for x in np.flatnonzero(parent >= 0):
        e = pred[x]
        assert {tail[e], head[e]} == {x, parent[x]}
        assert (tail[e] == x) == (dirn[x] == 1)
        y, steps = x, 0                      # the parent pointers reach the root
        while parent[y] >= 0 and steps <= h * w:
            y, steps = parent[y], steps + 1
        assert parent[y] == -1
    assert np.all(flow >= 0)
    assert np.count_nonzero(flow) <= h * w - 1     # only tree arcs carry flow
    net = np.bincount(tail, flow, h * w) - np.bincount(head, flow, h * w)
    np.testing.assert_allclose(net, d, atol=1e-12)


@pytest.mark.parametrize("shape", [(2, 2), (2, 5), (5, 2), (3, 3), (4, 7), (9, 6), (17, 16)])
def test_lifted_tree_is_a_feasible_spanning_tree(shape):
    """The multiscale start: the tree of the 2x2-block grid (its comb, and its optimal tree)
    lifted to the cells is a spanning tree carrying the flow of the supplies."""
    h, w = shape
    hc, wc = (h + 1) // 2, (w + 1) // 2
    rng = np.random.default_rng(h * 100 + w)
    d = rng.random(h * w) - 0.5
    d -= d.mean()
    dc = np.zeros((2 * hc, 2 * wc))
    dc[:h, :w] = d.reshape(h, w)
    dc = dc.reshape(hc, 2, wc, 2).sum(axis=(1, 3)).ravel()
    trees = [tr._grid_comb(dc, hc, wc)[0]]
    if hc > 1 and wc > 1:
        trees.append(tr._grid_network_simplex(dc, hc, wc)[1])
    for coarse in trees:
        _check_spanning_tree(*tr._lift_tree(coarse.astype(np.int64), d, h, w), d, h, w)


@pytest.mark.parametrize("shape", [(2, 2), (2, 5), (7, 3), (8, 8), (13, 10), (33, 40)])
def test_multiscale_grid_flow_matches_pot(monkeypatch, shape):
    """The grid flow started from the lifted tree of every coarser level (down to 1 x k
    grids) reaches POT's optimum on the dense l1 cost matrix, on sparse, dense and tied
    supplies; the start changes the pivots, never the optimum."""
    monkeypatch.setattr(tr, "MULTISCALE_MIN_SIDE", 2)
    h, w = shape
    rng = np.random.default_rng(h * 1000 + w)
    cost = _grid_cost(h, w)
    for zero_frac, integer in ((0.0, False), (0.7, False), (0.3, True)):
        p = _masses(rng, h * w, zero_frac, integer)
        q = _masses(rng, h * w, zero_frac, integer)
        ref = ot.emd2(p, q, cost, numItermax=10**8)
        got = transport_cost(p.reshape(h, w), q.reshape(h, w), GridL1(h, w),
                             method="network_simplex")
        assert got == pytest.approx(ref, rel=1e-9, abs=1e-12)


def test_default_multiscale_grid_flow_on_smooth_maps_matches_pot():
    """At the package's own MULTISCALE_MIN_SIDE, a 40x40 pair of smooth maps (every cell
    non-zero, like filtered heatmaps) is solved from the lifted 20x20 tree; 'auto' takes the
    grid flow there and agrees with POT on the supports of (p - q)+ and (p - q)- to 1e-9."""
    h = w = 40
    assert min(h, w) >= tr.MULTISCALE_MIN_SIDE > min(h, w) // 2
    r, c = np.divmod(np.arange(h * w), w)
    rng = np.random.default_rng(40)
    maps = []
    for _ in range(2):
        centres = rng.random((3, 2)) * [h, w]
        m = sum(np.exp(-((r - y) ** 2 + (c - x) ** 2) / 30.0) for y, x in centres) + 1e-3
        maps.append(m / m.sum())
    p, q = maps
    d = p - q
    pos, neg = np.flatnonzero(d > 0), np.flatnonzero(d < 0)
    cost = _grid_cost(h, w)[np.ix_(pos, neg)]
    ref = ot.emd2(d[pos], -d[neg] * (d[pos].sum() / -d[neg].sum()), cost, numItermax=10**8)
    assert pos.size * neg.size > tr.SUPPORT_ARCS_FACTOR * (h * w) ** 1.5   # the grid side
    got = transport_cost(p.reshape(h, w), q.reshape(h, w), GridL1(h, w))
    assert got == pytest.approx(ref, rel=1e-9)
