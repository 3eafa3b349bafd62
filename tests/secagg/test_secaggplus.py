"""SecAgg+ (sparse graph): parameters, graph, exact sums, refusals and what the server sees."""

import math
import os
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chi2, hypergeom

from shuffledp.secagg import (
    SecAggAborted,
    SecAggClient,
    SecAggRefused,
    SecAggServer,
    secure_sum,
    sparse_parameters,
)
from shuffledp.secagg import messages as msg
from shuffledp.secagg.client import mask_seed, pair_sign, parse_bundle
from shuffledp.secagg.graph import _permutation, graph_seed, harary_graph
from shuffledp.secagg.prg import expand
from shuffledp.secagg.workers import run_round

M = 1 << 32


def _bounds(n, k, t, delta, gamma):
    """The three bounds of the module docstring, recomputed with Fractions."""
    C, D = math.floor(gamma * n), math.floor(delta * n)
    B = C + D
    disc = (Fraction(0) if k > B else Fraction(n * (n - k - 1), 2)
            * Fraction(math.comb(n - k, B - k), math.comb(n, B)))
    tot = math.comb(n - 1, k)
    bad = Fraction(n * sum(math.comb(C, j) * math.comb(n - 1 - C, k - j)
                           for j in range(t, k + 1)), tot)
    low = Fraction(n * sum(math.comb(n - 1 - D, j) * math.comb(D, k - j) for j in range(t)),
                   tot)
    return disc, bad, low


@pytest.mark.parametrize("n,delta,gamma", [(1000, 0.1, 0.05), (3000, 0.05, 0.05),
                                           (500, 0.2, 0.1)])
def test_parameters_meet_the_bounds_and_are_minimal(n, delta, gamma):
    p = sparse_parameters(n, delta, gamma)
    assert not p.complete and p.k % 2 == 0 and p.min_clients == n - math.floor(delta * n)
    disc, bad, low = _bounds(n, p.k, p.threshold, delta, gamma)
    assert disc <= Fraction(1, 2 ** 41) and bad <= Fraction(1, 2 ** 41)
    assert low <= Fraction(1, 2 ** 20)
    # t is the smallest threshold meeting the security bound (or 2)
    if p.threshold > 2:
        assert _bounds(n, p.k, p.threshold - 1, delta, gamma)[1] > Fraction(1, 2 ** 41)
    # no smaller even k has a threshold meeting all three bounds
    km = p.k - 2
    if km >= 2:
        disc, _, _ = _bounds(n, km, 2, delta, gamma)
        feasible = [t for t in range(2, km + 1)
                    if disc <= Fraction(1, 2 ** 41)
                    and _bounds(n, km, t, delta, gamma)[1] <= Fraction(1, 2 ** 41)
                    and _bounds(n, km, t, delta, gamma)[2] <= Fraction(1, 2 ** 20)]
        assert not feasible
    # the hypergeometric tails agree with SciPy's
    C = math.floor(gamma * n)
    sf = n * hypergeom(n - 1, C, p.k).sf(p.threshold - 1)
    assert math.isclose(math.log2(sf), p.log2_corrupt_tail, abs_tol=1e-6)


def test_parameters_grow_logarithmically_and_fall_back_to_complete():
    ks = [sparse_parameters(n, 0.1, 0.05).k for n in (1000, 10_000)]
    assert ks[0] < ks[1] < 2 * ks[0]  # k = O(log n): 36 -> 42
    # n = 5, two dropouts: a 2-regular graph may lose both neighbours of a client
    small = sparse_parameters(5, 0.4, 0.0)
    assert small.complete and small.k == 4 and small.threshold == 3


def test_parameters_refuse_bad_input():
    with pytest.raises(ValueError, match="dropout"):
        sparse_parameters(100, 1.5)
    with pytest.raises(ValueError, match="dropout \\+ corrupt"):
        sparse_parameters(100, 0.6, 0.5)
    with pytest.raises(TypeError, match="n must be an integer"):
        sparse_parameters(100.5, 0.1)


def test_harary_graph_is_k_regular_symmetric_and_a_function_of_the_seed():
    g = harary_graph(50, 6, bytes(range(32)), 45)
    nb = {u: set(g.neighbours(u)) for u in range(50)}
    assert all(len(s) == 6 and u not in s for u, s in nb.items())
    assert all(u in nb[w] for u, s in nb.items() for w in s)
    assert len(g.edges()) == 50 * 6 // 2
    assert harary_graph(50, 6, bytes(range(32)), 45).neighbours(7) == g.neighbours(7)
    assert harary_graph(50, 6, bytes(32), 45).neighbours(7) != g.neighbours(7) or \
        harary_graph(50, 6, bytes(32), 45).neighbours(8) != g.neighbours(8)
    with pytest.raises(ValueError, match="k must be even"):
        harary_graph(50, 5, bytes(32), 45)
    with pytest.raises(ValueError, match="seed must be 32 bytes"):
        harary_graph(50, 6, b"short", 45)


def test_ring_permutation_is_uniform():
    # 6 permutations of 3 elements, 6000 seeds: chi-square with 5 degrees of freedom;
    # false-failure rate 1e-6 (fixed seeds: deterministic)
    counts: dict[tuple, int] = {}
    for s in range(6000):
        p = tuple(_permutation(s.to_bytes(32, "little"), 3).tolist())
        counts[p] = counts.get(p, 0) + 1
    assert len(counts) == 6
    stat = sum((c - 1000) ** 2 / 1000 for c in counts.values())
    assert stat < chi2.isf(1e-6, 5)


def _run(n, graph, t, drops=None, L=3, tamper=None):
    """Drive clients and server of a sparse run round by round (as secure_sum does)."""
    g = np.random.default_rng(n)
    X = [g.integers(0, M, L) for _ in range(n)]
    session = os.urandom(16)
    server = SecAggServer(n, L, M, t, session, graph=graph)
    clients = {i: SecAggClient(i, X[i], M, t, session, graph=graph) for i in range(n)}
    drops = drops or {}
    incoming = {i: b"" for i in range(n)}
    sent = {}
    for r in range(4):
        asked = {i: b for i, b in incoming.items() if drops.get(i, 9) > r}
        for i, (status, out, _) in run_round(clients, r, asked).items():
            if status == "ok":
                sent[(r, i)] = out
                server.receive(tamper(r, i, out) if tamper else out, channel=i)
        reply = server.close_round()
        if isinstance(reply, dict):
            incoming = reply
        elif isinstance(reply, bytes):
            incoming = {i: reply for i in server.members[-1]}
    return X, clients, server, sent


def test_sparse_sum_is_exact_with_dropouts_below_the_threshold():
    graph = harary_graph(20, 6, bytes(range(32)), 15)
    X, _, server, _ = _run(20, graph, 3, drops={1: 1, 4: 2, 9: 2, 11: 3})
    survivors = sorted(server.members[3])
    assert survivors == [i for i in range(20) if i not in (1, 4, 9)]
    assert np.array_equal(server.total, sum(X[i] for i in survivors) % M)


@pytest.mark.parametrize("workers", [1, 2])
def test_secure_sum_sparse_is_exact(workers):
    g = np.random.default_rng(3)
    X = [g.integers(0, M, 4) for _ in range(100)]
    r = secure_sum(X, M, graph="sparse", dropouts={1: {3, 4}, 2: {5, 6, 7}, 3: {8, 9}},
                   workers=workers)
    assert r.graph == "sparse" and r.degree == 16 and r.threshold == 6 and r.min_clients == 90
    assert r.workers == workers
    assert set(r.survivors) == set(range(100)) - {3, 4, 5, 6, 7}
    assert np.array_equal(r.total, sum(X[i] for i in r.survivors) % M)
    assert r.bytes_up_per_client < 4000  # k = 16 neighbours, not 99


def test_too_many_dropouts_among_a_clients_neighbours_refuse_the_round():
    graph = harary_graph(20, 4, bytes(range(32)), 10)
    u = 0
    nb = graph.neighbours(u)
    # u survives; 2 of its 4 neighbours drop before the unmasking: only 2 < t = 3 shares
    with pytest.raises(SecAggAborted, match=f"self-mask seed of client {u}.*2 of its "
                                            "neighbours answered, fewer than the threshold t=3"):
        _run(20, graph, 3, drops={nb[0]: 3, nb[1]: 3})


def test_more_dropouts_than_planned_refuse_the_round():
    g = np.random.default_rng(4)
    X = [g.integers(0, M, 2) for _ in range(100)]
    with pytest.raises(SecAggAborted, match="min_clients=90"):
        secure_sum(X, M, graph="sparse", dropouts={2: set(range(11))}, workers=1)


def test_client_refuses_an_unmasking_request_with_too_few_survivors():
    graph = harary_graph(20, 4, bytes(range(32)), 15)
    X, clients, server, sent = _run(20, graph, 3)
    c = clients[0]
    fresh = SecAggClient(0, X[0], M, 3, server.session, graph=graph)
    fresh._held = c._held  # a client past round 2
    req = msg.frame(18, msg.SERVER, server.context, (14).to_bytes(4, "little")
                    + (0).to_bytes(4, "little") * 2)
    with pytest.raises(SecAggRefused, match="14 survivors, fewer than the 15"):
        fresh.unmask(req)


def test_masks_cancel_only_on_the_graph_edges():
    graph = harary_graph(16, 4, bytes(range(32)), 12)
    X, clients, server, sent = _run(16, graph, 2)
    for u in range(16):
        c = clients[u]
        y = np.frombuffer(sent[(2, u)][msg.HEADER.size:], dtype="<i8").astype(np.int64)
        pad = (y - X[u] - expand(c._b.to_bytes(32, "little"), 3, M)) % M
        want = np.zeros(3, dtype=np.int64)
        for v in graph.neighbours(u):
            p = expand(mask_seed(c._s_sk, c._keys[v][1], c.bound, u, v), 3, M)
            want = (want + pair_sign(u, v) * p) % M
        assert np.array_equal(pad, want)  # exactly the k neighbours' masks, nothing else
        assert sorted(set(c._keys) - {u}) == graph.neighbours(u)
    # a set of clients closed under the graph (here: all) has its masks cancel; the sum of the
    # pads over any set S is the masks of the edges leaving S only
    S = {0, *graph.neighbours(0)}
    cut = {(a, b) for a in S for b in graph.neighbours(a) if b not in S}
    assert cut  # a proper subset leaves edges: its partial sum stays masked


def test_shares_go_to_neighbours_only_and_unmasking_needs_t_of_them():
    graph = harary_graph(16, 4, bytes(range(32)), 12)
    _, clients, server, sent = _run(16, graph, 3)
    for u in range(16):
        recipients = [v for v, _ in parse_bundle(sent[(1, u)][msg.HEADER.size + 32:])]
        assert recipients == graph.neighbours(u)
        # the round-3 reveals of u's neighbours, and nobody else's, name u
        for w in range(16):
            body = sent[(3, w)][msg.HEADER.size:]
            names = {int.from_bytes(body[4 + 37 * i:8 + 37 * i], "little")
                     for i in range(int.from_bytes(body[:4], "little"))}
            assert (u in names) == (u in graph.neighbours(w))


def test_malformed_message_is_rejected_and_counted_and_the_sum_stays_exact():
    g = np.random.default_rng(5)
    X = [g.integers(0, M, 3) for _ in range(60)]

    def cut(r, i, out):
        return out[:-3] if (r, i) == (2, 7) else out
    r = secure_sum(X, M, graph="sparse", intercept=cut, workers=1)
    assert r.rejected == {"round 2: MessageError": 1}
    assert 7 not in r.survivors and len(r.survivors) == 59
    assert np.array_equal(r.total, sum(X[i] for i in r.survivors) % M)


def test_graph_comes_from_a_public_seed_bound_into_the_keys():
    ctx = msg.Context(bytes(16), M, 3, 6).pack()
    assert graph_seed(ctx, 100, 16, 90) != graph_seed(ctx, 100, 16, 89)
    g1 = harary_graph(16, 4, bytes(range(32)), 12)
    g2 = harary_graph(16, 4, bytes(32), 12)
    session = os.urandom(16)
    server = SecAggServer(16, 3, M, 2, session, graph=g1)
    clients = {i: SecAggClient(i, np.zeros(3, dtype=np.int64), M, 2, session,
                               graph=g1 if i else g2) for i in range(16)}
    for i, c in clients.items():
        server.receive(c.advertise(), channel=i)
    reply = server.close_round()
    # client 0 computed another graph from another seed: the server's list of g1-neighbours
    # names clients it does not know as neighbours (or its keys no longer agree)
    if set(g1.neighbours(0)) != set(g2.neighbours(0)):
        with pytest.raises(SecAggRefused, match="not its neighbours"):
            clients[0].share_keys(reply[0])
    assert clients[1].bound != clients[0].bound  # the seed is bound into every derivation


def test_graph_seed_is_public_and_keys_stay_secure():
    g = np.random.default_rng(6)
    X = [g.integers(0, M, 2) for _ in range(40)]
    seed = bytes(range(32))
    a = secure_sum(X, M, graph="sparse", graph_seed=seed, workers=1)
    b = secure_sum(X, M, graph="sparse", graph_seed=seed, workers=1)
    assert np.array_equal(a.total, b.total)
    c1 = SecAggClient(0, X[0], M, 2, bytes(16), graph=harary_graph(40, 6, seed, 36))
    c2 = SecAggClient(0, X[0], M, 2, bytes(16), graph=harary_graph(40, 6, seed, 36))
    assert c1.advertise() != c2.advertise()  # keys from the secure source, never the seed


def test_secure_sum_refuses_bad_graph_options():
    X = [np.zeros(2, dtype=np.int64)] * 10
    with pytest.raises(ValueError, match="graph must be one of"):
        secure_sum(X, M, graph="ring")
    with pytest.raises(ValueError, match="threshold=5"):
        secure_sum(X, M, graph="sparse", threshold=5)
    with pytest.raises(ValueError, match="dropout=0.1"):
        secure_sum(X, M, dropout=0.1)
    with pytest.raises(ValueError, match="graph_seed must be 32 bytes"):
        secure_sum(X, M, graph="sparse", graph_seed=b"x")
    with pytest.raises(TypeError, match="workers"):
        secure_sum(X, M, workers=1.5)


def test_federated_sum_gives_the_same_release_on_both_graphs():
    from shuffledp.protocol.federated import federated_sum

    g = np.random.default_rng(8)
    vecs = [np.bincount([int(c)], minlength=5) for c in g.integers(0, 5, 80)]
    out = {agg: federated_sum(vecs, 1, 1.0, shard_size=40, dropout=0.1, neighbour="zero_out",
                              dropped=np.r_[np.zeros(78, bool), True, True],
                              aggregation=agg, rng=3)
           for agg in ("secagg", "secagg_complete", "plain")}
    assert np.array_equal(out["secagg"].counts, out["plain"].counts)
    assert np.array_equal(out["secagg_complete"].counts, out["plain"].counts)
    shards = out["secagg"].shards
    assert {s["secagg_graph"] for s in shards} == {"sparse"}
    assert all(s["secagg_degree"] < 39 for s in shards)
