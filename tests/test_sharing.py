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
@pytest.mark.parametrize("r,m", [(3, 33), (4, 33), (19, 200)])
def test_share_sums_adds_each_rows_shares_mod_q(q, r, m):
    # r = 4 and 19 draw three shares to a word where q^3 < 2^55 (q <= 309743 here):
    # m = 33 only short blocks, m = 200 whole ones and a short one
    g = np.random.default_rng(q % 1000)
    z = g.integers(-(2**40), 2**40, (5, m))
    acc = g.integers(0, q, m).astype(np.int64)
    want = (acc + z.sum(axis=0)) % q
    n = share_sums(z, q, r, SecureRandom.for_testing(1), acc)
    assert n == 5 * r * m
    np.testing.assert_array_equal(acc, want)


def test_share_sums_refuses_bad_arguments():
    acc = np.zeros(4, dtype=np.int64)
    with pytest.raises(ValueError, match="r must"):
        share_sums(np.zeros((1, 4), dtype=np.int64), 7, 1, SecureRandom(), acc)
    with pytest.raises(ValueError, match="shape"):
        share_sums(np.zeros((1, 5), dtype=np.int64), 7, 2, SecureRandom(), acc)
    with pytest.raises(ValueError, match="q"):
        share_sums(np.zeros((1, 4), dtype=np.int64), 1, 2, SecureRandom(), acc)


def _reference_shares(words_of_chunk, q, r, m, chunk, sums_size, fast):
    """The block draw of encoders.encoder written plainly: for every chunk of keystream
    words, blocks of 64 coordinates; a whole block takes word b 64 + i as share b of
    coordinate i, a word rejected by Lemire's test replaced by the next accepted word after
    the block; a short block (or any when the fast path is off) is drawn by sequential
    rejection; a block the chunk cannot finish is redrawn from the next chunk."""
    t = (1 << 32) % q
    out = np.zeros((r, m), dtype=np.int64)
    a = seq = chunks = patched = 0
    while a < m:
        chunks += 1
        w = [int(x) for x in words_of_chunk()]
        pos, a0 = 0, a
        while a < m and a - a0 + 64 <= sums_size:
            c = min(64, m - a)
            need = (r - 1) * c
            if fast and c == 64 and pos + need <= len(w):
                # rejected words replaced, in order, by the next accepted words after the block
                spare, ok = pos + need, True
                for b in range(r - 1):
                    for i in range(64):
                        x = w[pos + b * 64 + i]
                        if (x * q) & 0xFFFFFFFF < t:
                            patched += 1
                            while True:
                                if spare >= len(w):
                                    ok = False
                                    break
                                x = w[spare]
                                spare += 1
                                if (x * q) & 0xFFFFFFFF >= t:
                                    break
                        if ok:
                            out[b, a + i] = (x * q) >> 32
                if not ok:
                    break
                pos = spare
            else:
                seq += 1
                j, ok, vals = pos, True, np.zeros((r - 1, c), dtype=np.int64)
                for i in range(c):
                    b = 0
                    while b < r - 1:
                        if j >= len(w):
                            ok = False
                            break
                        p = w[j] * q
                        j += 1
                        if p & 0xFFFFFFFF >= t:
                            vals[b, i] = p >> 32
                            b += 1
                    if not ok:
                        break
                if not ok:
                    break
                out[: r - 1, a:a + c] = vals
                pos = j
            a += c
    return out, seq, chunks, patched


def _reference_dice(words_of_chunk, q, r, m, sums_size):
    """The three-shares-to-a-word draw of encoders.encoder written plainly, with Python
    integers: a 64-bit word W (two keystream words, low first) is accepted when
    W q^3 mod 2^64 >= 2^64 mod q^3 and then gives the base-q digits of
    floor(W q^3 / 2^64), most significant first (Brackett-Rozinsky and Lemire, 2024);
    whole blocks of 64 coordinates take word g 64 + i for shares 3g..3g + 2 of
    coordinate i (digits past share r - 2 unused), a rejected word replaced by the next
    accepted word after the block; a short block takes accepted words in order,
    ceil((r - 1) / 3) a coordinate; a block the chunk cannot finish is redrawn from the
    next chunk."""
    rows, p3 = -(-(r - 1) // 3), q**3
    t = (1 << 64) % p3
    out = np.zeros((r, m), dtype=np.int64)
    a = seq = chunks = patched = 0

    def digits(x):
        d, rem = divmod(x * p3, 1 << 64)
        return (d // (q * q), d // q % q, d % q), rem >= t

    def accepted(w, j):
        """The digits of the first accepted word from w[j] and the position after it."""
        while j < len(w):
            dg, good = digits(w[j])
            j += 1
            if good:
                return dg, j
        return None, j

    while a < m:
        chunks += 1
        w32 = [int(x) for x in words_of_chunk()]
        w = [w32[2 * i] | w32[2 * i + 1] << 32 for i in range(len(w32) // 2)]
        pos, a0 = 0, a
        while a < m and a - a0 + 64 <= sums_size:
            c, need = min(64, m - a), rows * 64
            vals = np.zeros((3 * rows, c), dtype=np.int64)
            if c == 64 and pos + need <= len(w):  # rows in order; rejected words replaced
                j = pos + need
                for g in range(rows):
                    for i in range(64):
                        dg, good = digits(w[pos + g * 64 + i])
                        if not good:
                            patched += 1
                            dg, j = accepted(w, j)
                        if dg is None:
                            break
                        vals[3 * g: 3 * g + 3, i] = dg
                    if dg is None:
                        break
            else:  # coordinates in order, accepted words in order
                seq += 1
                j, dg = pos, ()
                for i in range(c):
                    for g in range(rows):
                        dg, j = accepted(w, j)
                        if dg is None:
                            break
                        vals[3 * g: 3 * g + 3, i] = dg
                    if dg is None:
                        break
            if dg is None:
                break  # the chunk ran out: this block is redrawn from the next one
            out[: r - 1, a:a + c] = vals[: r - 1]
            pos = j
            a += c
    return out, seq, chunks, patched


@pytest.mark.parametrize("q,r", [(161271, 19), (1000, 6), (7, 4), (300000, 19)])
def test_three_shares_to_a_word_follow_the_documented_draw(q, r):
    # The summed path (share_sums, encode_sums) with q^3 < 2^55: three shares to a 64-bit
    # word. q = 161,271 and 300,000 reject about 2e-4 and 1.5e-3 of the words (blocks
    # patched); q <= 1000 none in practice; r = 6 leaves one digit of every coordinate's
    # second word unused. The integer totals (before any reduction) are the reference's.
    from shuffledp.encoders.encoder import _share_rows, _ShareRun

    m = 64 * 300 + 17
    v = np.random.default_rng(q % 97).integers(-3 * q, 3 * q, m)
    run = _ShareRun(q, r, SecureRandom.for_testing(6), summed=True)
    assert run.dice
    acc = np.zeros(m, dtype=np.int64)
    _share_rows(v.astype(np.int64), r, run, None, acc)
    src = SecureRandom.for_testing(6)
    want, seq, chunks, patched = _reference_dice(lambda: src.uint32(run.raw.size), q, r, m,
                                                 run.sums.size)
    assert seq >= 1 and chunks >= 2 and (patched >= 1 or q <= 1000)
    s = want[: r - 1].sum(axis=0)
    np.testing.assert_array_equal(acc, s + np.mod(v - s, q))


def _exact_dice(w, q):
    """Lemire's method on [0, q^3) for the 64-bit word w, with Python integers: the base-q
    digits of floor(w q^3 / 2^64) and whether w is accepted."""
    d, rem = divmod(w * q**3, 1 << 64)
    return (d // (q * q), d // q % q, d % q), rem >= (1 << 64) % q**3


@pytest.mark.parametrize("q", [2, 3, 161271, 309743, int(2 ** (55 / 3))])
def test_three_digits_are_lemires_method_on_q_cubed(q):
    # the kernel's three multiply-shift steps give the digits and the acceptance of the
    # exact computation, on random words, the extreme words and, for odd q (q^3 invertible
    # mod 2^64), the words whose remainder w q^3 mod 2^64 is exactly the threshold
    # t = 2^64 mod q^3 (accepted) and t - 1 (rejected): the test's boundary
    from shuffledp.encoders.encoder import _dice3

    p3 = q**3
    t = (1 << 64) % p3
    words = [int(x) for x in np.random.default_rng(q).integers(0, 2**63, 2000, dtype=np.uint64)]
    words += [0, 1, 2**63, 2**64 - 2, 2**64 - 1]
    if q % 2:
        inv = pow(p3, -1, 1 << 64)
        at, below = t * inv % (1 << 64), (t - 1) * inv % (1 << 64)
        assert _exact_dice(at, q)[1] and not _exact_dice(below, q)[1]
        words += [at, below]
    for w in words:
        d0, d1, d2, rem = _dice3(np.uint64(w), np.uint64(q))
        digits, ok = _exact_dice(w, q)
        assert (int(d0), int(d1), int(d2)) == digits
        assert int(rem) == w * p3 % (1 << 64)
        assert (int(rem) >= t) == ok


def test_three_digits_are_uniform():
    # the digits of accepted words are uniform on [0, q) each (chi-square, fixed seed;
    # false-failure rate ALPHA per digit)
    from shuffledp.encoders.encoder import _dice3

    q = 161271
    w = SecureRandom.for_testing(8).uint32(2 * 60_000).view("<u8")
    d = np.array([_dice3(x, np.uint64(q))[:3] for x in w], dtype=np.int64)
    bins = 50
    edges = -(-np.arange(bins + 1) * q // bins)
    for j in range(3):
        obs = np.bincount(d[:, j] * bins // q, minlength=bins)
        assert stats.chisquare(obs, np.diff(edges) / q * d.shape[0]).pvalue > ALPHA


def test_three_shares_to_a_word_only_where_they_save_words():
    from shuffledp.encoders.encoder import _dice_plan

    assert _dice_plan(161271, 19)[0] and _dice_plan(7, 4)[0]
    assert not _dice_plan(161271, 5)[0]  # 4 shares: two 64-bit words either way
    assert not _dice_plan(2**18 + 3, 8)[0]  # 7 shares: 6 of 7 words is above 0.85
    q = int(2 ** (55 / 3))  # q^3 < 2^55 <= (q + 1)^3
    assert _dice_plan(q, 19)[0] and not _dice_plan(q + 1, 19)[0]


@pytest.mark.parametrize("q,r,min_seq,min_patched", [(161271, 19, 1, 2), (1000, 3, 1, 0),
                                                      (2**31 + 11, 4, 151, 0)])
def test_share_blocks_follow_the_documented_draw(q, r, min_seq, min_patched):
    # The stored shares, one keystream word each: q = 161271, r = 19: about 4% of the
    # blocks hold a rejected word (patched); q = 2^31 + 11 rejects half the words: the fast
    # path is off, every block sequential.
    from shuffledp.encoders.encoder import _ShareRun

    m = 64 * 300 + 17  # whole blocks over three buffers, and a short last one
    v = np.random.default_rng(q % 97).integers(0, q, m)
    got = share(v, q, r, SecureRandom.for_testing(4))
    run = _ShareRun(q, r, SecureRandom.for_testing(4))
    assert not run.dice
    size, sums_size, fast = run.buf.size, run.sums.size, run.fast
    src = SecureRandom.for_testing(4)
    want, seq, chunks, patched = _reference_shares(lambda: src.uint32(size), q, r, m, size,
                                                   sums_size, fast)
    # the sequential path, patched rejections and buffer ends are seen
    assert seq >= min_seq and patched >= min_patched and chunks >= 3
    np.testing.assert_array_equal(got[: r - 1].astype(np.int64), want[: r - 1])
    np.testing.assert_array_equal(reconstruct_shares(got, q), v)


@pytest.mark.parametrize("q,r", [(161271, 19), (1000, 3), (2**31 - 1, 4), (2**31 + 11, 4)])
def test_summed_shares_are_the_stored_shares_of_the_same_stream(q, r):
    # The sums path (no shares stored; 32-bit lanes while (r - 1)(q - 1) < 2^32, as for
    # q = 161271 and 1000) adds exactly the r shares the stored path draws from the same
    # words, rejections and buffer ends included: integer totals before any reduction.
    from shuffledp.encoders.encoder import _share_rows, _ShareRun

    m = 64 * 300 + 17
    v = np.random.default_rng(q % 89).integers(-3 * q, 3 * q, m)
    got = share(v, q, r, SecureRandom.for_testing(5))
    acc = np.zeros(m, dtype=np.int64)
    _share_rows(v.astype(np.int64), r, _ShareRun(q, r, SecureRandom.for_testing(5)), None, acc)
    np.testing.assert_array_equal(acc, got.astype(np.int64).sum(axis=0))


@pytest.mark.parametrize("q", [161271, 2**31 + 11])
def test_shares_are_uniform_on_both_paths(q):
    src = SecureRandom.for_testing(q % 1000)
    r, m = 19 if q < 2**20 else 3, 30_000
    s = share(np.zeros(m, dtype=np.int64), q, r, src)
    bins = 50
    for row in (0, r // 2, r - 2, r - 1):  # r - 1: the completing share, uniform too
        x = s[row].astype(np.int64)
        obs = np.bincount(x * bins // q, minlength=bins)
        edges = -(-np.arange(bins + 1) * q // bins)
        assert stats.chisquare(obs, np.diff(edges) / q * m).pvalue > ALPHA


def test_sharing_reduces_large_and_negative_values_exactly():
    v = np.array([-(2**62), 2**62 + 5, -1, 2**52, -(2**52) - 3, 2**53 + 1, 0], dtype=np.int64)
    for q in (7, 161271, 2**32 - 5, 2**32):
        s = share(v, q, 3, SecureRandom.for_testing(2))
        np.testing.assert_array_equal(reconstruct_shares(s, q), np.mod(v, q))
        acc = np.array([2**62, -5, 0, 1, 2, 3, 4], dtype=np.int64)
        want = (np.mod(acc, q) + np.mod(v, q)) % q
        share_sums(v[None, :], q, 3, SecureRandom.for_testing(3), acc)
        np.testing.assert_array_equal(acc, want)


def test_r_is_bounded():
    with pytest.raises(ValueError, match="r must"):
        share(np.zeros(3, dtype=np.int64), 7, 2**20 + 1)
    with pytest.raises(ValueError, match="r must"):
        share_sums(np.zeros((1, 3), dtype=np.int64), 7, 2**20 + 1, SecureRandom(),
                   np.zeros(3, dtype=np.int64))
