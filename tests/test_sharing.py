"""Additive sharing over Z_q ([Ghazi23]_ App. F Split & Mix) and the secure generator.

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
from scipy import stats

from shuffledp.encoders.encoder import reconstruct_shares, share, share_sums
from shuffledp.randomness import SecureRandom

# Statistical tests use SecureRandom.for_testing(seed): a fixed ChaCha20 key, so each test is
# deterministic; with a fresh key each would fail with probability ALPHA.
ALPHA = 1e-6


@given(
    st.lists(st.integers(min_value=-(2**40), max_value=2**40), min_size=1, max_size=40),
    st.integers(min_value=2, max_value=2**32),
    st.integers(min_value=2, max_value=9),
)
@settings(max_examples=200, deadline=None)
def test_shares_sum_back_to_the_noisy_vector(values, q, r):
    v = np.asarray(values, dtype=np.int64)
    s = share(v, q, r)
    assert s.shape == (r, v.size)
    assert s.max() < q
    np.testing.assert_array_equal(reconstruct_shares(s, q), np.mod(v, q))


def test_batched_sharing_sums_back():
    v = np.arange(-50, 50).reshape(4, 25)
    s = share(v, 1000, 5)
    assert s.shape == (4, 5, 25)
    np.testing.assert_array_equal(reconstruct_shares(s, 1000), np.mod(v, 1000))


@pytest.mark.parametrize("q", [2, 5, 6, 7, 16, 1000, 2**31 + 11, 2**32])
def test_below_is_uniform(q):
    src = SecureRandom.for_testing(q)
    size = 400_000
    x = src.below(q, size)
    assert x.max() < q
    bins = min(q, 50)
    obs = np.bincount((x * bins // q).astype(np.int64), minlength=bins)
    # expected counts of the equal-width bins [k q / bins, (k+1) q / bins)
    edges = -(-np.arange(bins + 1) * q // bins)
    exp = np.diff(edges) / q * size
    assert stats.chisquare(obs, exp).pvalue > ALPHA


@pytest.mark.parametrize("value", ["zeros", "max", "random"])
def test_any_r_minus_1_shares_uniform_and_independent_of_input(value):
    # q = 5, r = 3: for every pair of share rows, the joint distribution over Z_5^2 is
    # uniform (25 cells), whatever the shared vector is.
    q, r, m = 5, 3, 60_000
    src = SecureRandom.for_testing({"zeros": 1, "max": 2, "random": 3}[value])
    v = {
        "zeros": np.zeros(m, dtype=np.int64),
        "max": np.full(m, q - 1, dtype=np.int64),
        "random": np.random.default_rng(0).integers(0, q, m),
    }[value]
    s = share(v, q, r, src).astype(np.int64)
    for rows in itertools.combinations(range(r), r - 1):
        cell = s[rows[0]] * q + s[rows[1]]
        obs = np.bincount(cell, minlength=q * q)
        assert stats.chisquare(obs).pvalue > ALPHA
    # and the shares carry no information about the input: independence test between
    # (w1, w2) and v on the random input
    if value == "random":
        table = np.zeros((q * q, q))
        np.add.at(table, (s[0] * q + s[1], v), 1)
        assert stats.chi2_contingency(table).pvalue > ALPHA


def test_secure_random_is_not_seeded_and_test_stream_is():
    assert SecureRandom().bytes(32) != SecureRandom().bytes(32)
    a = SecureRandom.for_testing(5).bytes(64)
    assert a == SecureRandom.for_testing(5).bytes(64)


def test_below_any_bounds():
    src = SecureRandom.for_testing(9)
    b = np.array([1, 2, 3, 2**32, 17] * 1000)
    x = src.below_any(b)
    assert np.all(x < b)


def test_bad_arguments():
    with pytest.raises(ValueError, match="r must"):
        share(np.zeros(3, dtype=np.int64), 7, 1)
    with pytest.raises(ValueError, match="q must"):
        share(np.zeros(3, dtype=np.int64), 1, 3)
    with pytest.raises(ValueError, match="q must"):
        share(np.zeros(3, dtype=np.int64), 2**32 + 1, 3)
    with pytest.raises(TypeError, match="integers"):
        share(np.zeros(3), 7, 3)


def test_secure_random_rekeys_after_fork():
    import os

    src = SecureRandom()
    src.bytes(16)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: write its next 32 bytes and exit
        os.close(r)
        os.write(w, src.bytes(32))
        os._exit(0)
    os.close(w)
    child = b""
    while len(child) < 32:
        chunk = os.read(r, 32 - len(child))
        if not chunk:
            break
        child += chunk
    os.close(r)
    os.waitpid(pid, 0)
    assert len(child) == 32 and child != src.bytes(32)


def test_keystream_counter_starts_at_zero(monkeypatch):
    # Regression: a random 32-bit block counter could overflow before the 2^30-byte re-key.
    import shuffledp.randomness as randomness

    monkeypatch.setattr(randomness.os, "urandom", lambda n: b"\xff" * n)
    src = randomness.SecureRandom()
    assert len(src.bytes(1 << 20)) == 1 << 20


def test_fill_uint32_continues_the_same_keystream_as_uint32():
    a, b = SecureRandom.for_testing(9), SecureRandom.for_testing(9)
    want = a.uint32(5000)
    got = np.concatenate([b.fill_uint32(np.empty(k, dtype=np.uint32)) for k in (1, 999, 4000)])
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="uint32"):
        b.fill_uint32(np.empty(4, dtype=np.uint64))


@pytest.mark.parametrize("q", [2, 7, 1 << 16, 309743, 1 << 32])
def test_share_sums_adds_each_rows_shares_mod_q(q):
    g = np.random.default_rng(q % 1000)
    z = g.integers(-(2**40), 2**40, (5, 33))
    acc = g.integers(0, q, 33).astype(np.int64)
    want = (acc + z.sum(axis=0)) % q
    n = share_sums(z, q, 3, SecureRandom.for_testing(1), acc)
    assert n == 5 * 3 * 33
    np.testing.assert_array_equal(acc, want)


def test_share_sums_refuses_bad_arguments():
    acc = np.zeros(4, dtype=np.int64)
    with pytest.raises(ValueError, match="r must"):
        share_sums(np.zeros((1, 4), dtype=np.int64), 7, 1, SecureRandom(), acc)
    with pytest.raises(ValueError, match="shape"):
        share_sums(np.zeros((1, 5), dtype=np.int64), 7, 2, SecureRandom(), acc)
    with pytest.raises(ValueError, match="q"):
        share_sums(np.zeros((1, 4), dtype=np.int64), 1, 2, SecureRandom(), acc)
