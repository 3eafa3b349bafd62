"""Secure aggregation (Bonawitz et al., CCS 2017): exact sums under dropouts in every round,
threshold refusals, Shamir exactness, mask uniformity, rejected messages, refused servers."""

import itertools
import os

import numpy as np
import pytest
from scipy.stats import chisquare

from shuffledp.secagg import (
    SecAggAborted,
    SecAggClient,
    SecAggRefused,
    SecAggServer,
    secure_sum,
    shamir,
)
from shuffledp.secagg import client as cl
from shuffledp.secagg import messages as msg
from shuffledp.secagg.prg import expand


def _inputs(n, L, m, seed=0):
    g = np.random.default_rng(seed)
    return [g.integers(0, m, L) for _ in range(n)]


@pytest.mark.parametrize("dropouts", [
    {}, {0: {1}}, {1: {2, 7}}, {2: {3}}, {3: {4, 5}},
    {0: {0}, 1: {1}, 2: {2}, 3: {3}},
])
@pytest.mark.parametrize("m", [2, 1000003, 2**62])
def test_sum_of_exactly_the_survivors(dropouts, m):
    X = _inputs(12, 40, m, seed=m % 97)
    r = secure_sum(X, m, threshold=6, dropouts=dropouts)
    gone_before_input = set().union(*[dropouts.get(k, set()) for k in (0, 1, 2)])
    assert set(r.survivors) == set(range(12)) - gone_before_input
    want = np.zeros(40, dtype=object)
    for i in r.survivors:
        want = want + X[i].astype(object)
    assert r.total.tolist() == [int(w % m) for w in want]
    assert r.rejected == {}


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_fewer_survivors_than_the_threshold_aborts(k):
    X = _inputs(9, 5, 101)
    with pytest.raises(SecAggAborted, match=f"round {k} .*fewer than the threshold t=7"):
        secure_sum(X, 101, threshold=7, dropouts={k: {0, 1, 2}})
    secure_sum(X, 101, threshold=7, dropouts={k: {0, 1}})  # exactly t: fine


def test_shamir_any_t_shares_reconstruct_and_t_minus_1_reveal_nothing(monkeypatch):
    """Over GF(7), t = 2 of n = 3: every pair of shares gives the secret; a single share
    takes every value equally often over the random coefficient, whatever the secret."""
    p, xs = 7, [1, 2, 3]
    for secret in range(p):
        table = {x: [] for x in xs}
        for a in range(p):
            monkeypatch.setattr(shamir, "random_secret", lambda rng, prime, a=a: a)
            sh = shamir.share(secret, xs, 2, None, prime=p)
            for pair in itertools.combinations(range(3), 2):
                assert shamir.reconstruct([(xs[i], sh[i]) for i in pair], prime=p) == secret
            for x, y in zip(xs, sh):
                table[x].append(y)
        assert all(sorted(v) == list(range(p)) for v in table.values())


def test_shamir_large_field_roundtrip():
    from shuffledp.randomness import SecureRandom

    rng = SecureRandom()
    s = shamir.random_secret(rng)
    xs = list(range(1, 11))
    sh = shamir.share(s, xs, 6, rng)
    assert shamir.reconstruct(list(zip(xs, sh))[3:9]) == s
    assert shamir.reconstruct(list(zip(xs, sh))[:5]) != s  # t - 1 shares: a wrong value


def test_masks_uniform_and_pairwise_seeds_agree():
    m = 1000
    x = expand(bytes(range(32)), 200_000, m)
    assert x.min() >= 0 and x.max() < m
    # chi-square on 10 bins of width 100 (false-failure rate 1e-4)
    assert chisquare(np.bincount(x // 100, minlength=10)).pvalue > 1e-4
    assert np.array_equal(x, expand(bytes(range(32)), 200_000, m))  # deterministic
    sess = os.urandom(16)
    u, w = SecAggClient(3, [1], 10, 2, sess), SecAggClient(8, [1], 10, 2, sess)
    pu, pw = cl.raw_public(u._s_sk), cl.raw_public(w._s_sk)
    assert cl.mask_seed(u._s_sk, pw, sess, 3, 8) == cl.mask_seed(w._s_sk, pu, sess, 8, 3)


def _run_to_round(n, L, m, t, upto):
    """Drive n clients and a server by hand up to (not including) round ``upto``."""
    sess = os.urandom(16)
    X = _inputs(n, L, m)
    clients = [SecAggClient(i, X[i], m, t, sess) for i in range(n)]
    server = SecAggServer(n, L, m, t, sess)
    incoming = {}
    for r in range(upto):
        for c in clients:
            out = c.advertise() if r == 0 else [None, c.share_keys, c.masked_input,
                                                 c.unmask][r](incoming[c.uid])
            assert server.receive(out)
        reply = server.close_round()
        incoming = reply if r == 1 else {c.uid: reply for c in clients}
    return X, clients, server, incoming, sess


def test_malformed_replayed_and_foreign_messages_are_rejected_and_counted():
    X, clients, server, incoming, sess = _run_to_round(5, 8, 97, 3, 2)
    outs = [c.masked_input(incoming[c.uid]) for c in clients]
    assert server.receive(outs[0])
    assert not server.receive(outs[0])  # replay
    assert not server.receive(outs[1][:-3])  # truncated
    ctx, H = server.context, msg.HEADER.size
    other = msg.Context(os.urandom(16), 97, 8, 3)
    assert not server.receive(msg.frame(2, 1, other, outs[1][H:]))  # other session
    assert not server.receive(msg.frame(3, 1, ctx, outs[1][H:]))  # wrong round
    assert not server.receive(msg.frame(2, 77, ctx, outs[1][H:]))  # unknown sender
    bad = np.full(8, 97, dtype="<i8").tobytes()  # entries out of range
    assert not server.receive(msg.frame(2, 1, ctx, bad))
    for o in outs[1:]:
        assert server.receive(o)
    assert sum(server.rejected.values()) == 6
    req = server.close_round()
    for c in clients:
        server.receive(c.unmask(req))
    total = server.close_round()
    assert total.tolist() == (sum(X) % 97).tolist()


@pytest.mark.parametrize("survivors,dropped,match", [
    ([0, 1, 2, 3], [3], "both shares"),
    ([0, 1], [], "survivors"),
    ([1, 2, 3, 4], [], "itself missing"),
    ([0, 1, 2, 9], [], "did not share keys"),
])
def test_honest_client_refuses_a_deviating_server(survivors, dropped, match):
    X, clients, server, incoming, sess = _run_to_round(5, 4, 11, 3, 2)
    for c in clients:
        c.masked_input(incoming[c.uid])
    req = msg.frame(18, msg.SERVER, server.context, cl.unmask_request(survivors, dropped))
    with pytest.raises(SecAggRefused, match=match):
        clients[0].unmask(req)


def test_masked_input_hides_the_input():
    """A single masked vector is uniform on Z_m even for an all-zero input (chi-square,
    false-failure rate 1e-4), and differs from the input."""
    X, clients, server, incoming, sess = _run_to_round(4, 20_000, 50, 3, 2)
    clients[0].x = np.zeros(20_000, dtype=np.int64)
    y = np.frombuffer(clients[0].masked_input(incoming[0])[msg.HEADER.size:], dtype="<i8")
    assert chisquare(np.bincount(y, minlength=50)).pvalue > 1e-4


@pytest.mark.parametrize("kwargs,match", [
    ({"vectors": [np.array([1, 2]), np.array([1, 5])], "modulus": 5}, r"vectors\[1\]\[1\]=5"),
    ({"vectors": [np.array([1]), np.array([1, 2])]}, "one length"),
    ({"vectors": [np.array([1])]}, "at least 2 clients"),
    ({"modulus": 1}, "modulus"),
    ({"threshold": 5}, "threshold"),
    ({"dropouts": {4: {0}}}, "rounds 0..3"),
    ({"dropouts": {0: {9}}}, "outside"),
])
def test_bad_input(kwargs, match):
    args = {"vectors": [np.array([1, 2]), np.array([3, 4]), np.array([0, 0])], "modulus": 7}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        secure_sum(args.pop("vectors"), args.pop("modulus"), **args)
