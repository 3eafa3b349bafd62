"""Secure aggregation against faulty and hostile clients: never a wrong sum.

Each fault is injected on a client's channel (``secure_sum(intercept=...)``). The regression
cases of the trust review (a flipped share bit gave a silently wrong sum; a repeated round-3
entry aborted the whole run with no culprit; a share list with a wrong recipient made an
honest peer refuse) fail on the server that used only the first t shares and checked only
the length of a share list.
"""

import itertools
import struct

import numpy as np
import pytest

from shuffledp.randomness import SecureRandom
from shuffledp.secagg import SecAggAborted, secure_sum, shamir
from shuffledp.secagg import messages as msg
from shuffledp.secagg.server import COMMIT_BYTES, REVEAL

M = 1 << 20
HDR = msg.HEADER.size


def _inputs(n, L=12, seed=0):
    g = np.random.default_rng(seed)
    return [g.integers(0, M, L) for _ in range(n)]


def _sum(X, ids):
    return (sum(X[i] for i in ids) % M).tolist()


def _on(round_, client, edit):
    """An intercept that applies ``edit(bytes) -> bytes`` to one client's message."""
    return lambda r, i, out: edit(out) if (r, i) == (round_, client) else out


def _flip_share(entry, bit=0):
    """Flip one bit of the share in the ``entry``-th item of a round-3 message."""
    def edit(out):
        b = bytearray(out)
        b[HDR + 4 + entry * REVEAL.size + 5 + bit // 8] ^= 1 << (bit % 8)
        return bytes(b)
    return edit


def _with_payload(out, payload):
    return msg.frame(out[5], struct.unpack_from("<I", out, 8)[0], out[16:48], payload)


@pytest.mark.parametrize("culprit", [0, 2, 5])
@pytest.mark.parametrize("entry", [0, 4])
def test_one_flipped_bit_in_one_round3_share_is_named_excluded_and_the_sum_is_right(culprit,
                                                                                  entry):
    """6 clients, threshold 5 (the review's case): the server used the first t shares and
    released a wrong sum with nothing rejected."""
    X = _inputs(6)
    r = secure_sum(X, M, threshold=5, intercept=_on(3, culprit, _flip_share(entry, bit=3)))
    assert r.total.tolist() == _sum(X, range(6))
    assert r.survivors == tuple(range(6))
    assert list(r.excluded) == [culprit]
    assert f"self-mask seed of client {entry}" in r.excluded[culprit]
    assert r.rejected == {"round 3: wrong Shamir share": 1}
    assert r.suspects == {}


def test_a_flipped_share_of_a_dropped_clients_mask_key_is_caught_too():
    X = _inputs(7)
    r = secure_sum(X, M, threshold=4, dropouts={2: {6}},
                   intercept=_on(3, 1, _flip_share(6, bit=100)))  # entry 6: s_sk of client 6
    assert r.total.tolist() == _sum(X, range(6))
    assert list(r.excluded) == [1] and "mask key of dropped client 6" in r.excluded[1]


def test_two_faulty_clients_on_different_secrets_are_both_excluded():
    X = _inputs(6)

    def both(r, i, out):
        if r == 3 and i == 1:
            return _flip_share(0)(out)
        if r == 3 and i == 4:
            return _flip_share(3)(out)
        return out
    r = secure_sum(X, M, threshold=5, intercept=both)
    assert r.total.tolist() == _sum(X, range(6))
    assert sorted(r.excluded) == [1, 4]


def test_fewer_than_t_correct_shares_of_a_secret_refuses():
    """Two wrong shares of one secret among 6 with t = 5: only 4 correct ones remain. (The
    two errors, 2^3 and 2^90 in size, cannot cancel in any Lagrange combination of these
    points; errors that do cancel give the committed secret, and then the sum is right.)"""
    X = _inputs(6)

    def both(r, i, out):
        if r == 3 and i in (0, 3):
            return _flip_share(2, bit=3 if i == 0 else 90)(out)
        return out
    with pytest.raises(SecAggAborted, match=r"self-mask seed of client 2 cannot be "
                                            r"recovered.*no sum is released"):
        secure_sum(X, M, threshold=5, intercept=both)


def test_a_repeated_round3_entry_rejects_that_sender_only():
    """The old server aborted the run with 'share points must be distinct', no culprit."""
    X = _inputs(6)

    def repeat_first(out):
        p = out[HDR:]
        k = struct.unpack_from("<I", p)[0]
        return _with_payload(out, struct.pack("<I", k + 1) + p[4:] + p[4:4 + REVEAL.size])
    r = secure_sum(X, M, threshold=5, intercept=_on(3, 2, repeat_first))
    assert r.total.tolist() == _sum(X, range(6))
    assert r.rejected == {"round 3: unmasking entries are not exactly one share per survivor "
                          "and dropped client": 1}


@pytest.mark.parametrize("edit", ["missing", "extra", "relabelled", "out_of_field"])
def test_malformed_unmasking_lists_are_rejected_and_the_sum_survives(edit):
    X = _inputs(6)

    def change(out):
        p = bytearray(out[HDR:])
        k = struct.unpack_from("<I", p)[0]
        if edit == "missing":
            return _with_payload(out, struct.pack("<I", k - 1) + bytes(p[4 + REVEAL.size:]))
        if edit == "extra":
            return _with_payload(out, struct.pack("<I", k + 1) + bytes(p[4:])
                                 + REVEAL.pack(9, 0, bytes(32)))
        if edit == "relabelled":
            p[4 + 4] = 1  # the first b-share claims to be an s_sk-share
            return _with_payload(out, bytes(p))
        p[4 + 5:4 + 37] = b"\xff" * 32  # >= P
        return _with_payload(out, bytes(p))
    r = secure_sum(X, M, threshold=5, intercept=_on(3, 4, change))
    assert r.total.tolist() == _sum(X, range(6))
    assert sum(r.rejected.values()) == 1 and list(r.rejected)[0].startswith("round 3: ")


def test_a_share_list_with_a_wrong_recipient_is_rejected():
    """The old server forwarded the other entries and skipped the wrong one: the peer left
    without a share then refused to unmask in round 3 (the sender was 'a survivor it never
    heard of'), so one hostile share list knocked an honest client out of the run."""
    X = _inputs(6)

    def misaddress(out):
        p = bytearray(out[HDR:])
        struct.pack_into("<I", p, COMMIT_BYTES + 4, 77)  # first recipient -> client 77
        return _with_payload(out, bytes(p))
    r = secure_sum(X, M, threshold=4, intercept=_on(1, 3, misaddress))
    assert r.rejected == {"round 1: share recipients are not exactly the other clients of "
                          "round 0": 1}
    assert r.survivors == (0, 1, 2, 4, 5)
    assert r.total.tolist() == _sum(X, r.survivors)


def test_a_message_on_another_clients_channel_or_with_copied_keys_is_rejected():
    X = _inputs(6)
    seen = {}

    def forge(r, i, out):
        seen[(r, i)] = out
        if (r, i) == (0, 4):  # client 4's channel carries client 0's advertisement
            return seen[(0, 0)]
        if (r, i) == (0, 5):  # client 5 advertises client 1's keys under its own id
            return _with_payload(out, seen[(0, 1)][HDR:])
        return out
    r = secure_sum(X, M, threshold=4, intercept=forge)
    assert r.rejected == {"round 0: sender field differs from the channel": 1,
                          "round 0: keys already advertised by another client": 1}
    assert r.survivors == (0, 1, 2, 3)
    assert r.total.tolist() == _sum(X, range(4))


def test_a_wrong_commitment_refuses_rather_than_guess():
    X = _inputs(6)

    def lie(out):
        b = bytearray(out)
        b[HDR] ^= 1
        return bytes(b)
    with pytest.raises(SecAggAborted, match="self-mask seed of client 3 cannot be recovered"):
        secure_sum(X, M, threshold=4, intercept=_on(1, 3, lie))


# ----------------------------------------------------------------------- Shamir decoding
PRIME = 13


def _poly_values(coeffs, xs, p=PRIME):
    return [sum(c * x**k for k, c in enumerate(coeffs)) % p for x in xs]


def test_parity_check_vanishes_on_codewords_and_has_soundness_exactly_1_over_p():
    """Over GF(13), k = 5 points, t = 3: for every g of degree < 2, sum c_i f(x_i) = 0 for
    every f of degree < 3; for a word off the code, exactly 13 of the 169 g pass (1/p)."""
    xs, t = [1, 2, 3, 5, 8], 3
    gs = list(itertools.product(range(PRIME), repeat=len(xs) - t))
    rng = np.random.default_rng(5)
    for _ in range(20):
        f = rng.integers(0, PRIME, t).tolist()
        ys = _poly_values(f, xs)
        for g in gs:
            c = shamir.parity_check(xs, list(g), PRIME)
            assert sum(a * b for a, b in zip(c, ys)) % PRIME == 0
        bad = list(ys)
        bad[int(rng.integers(len(xs)))] += int(rng.integers(1, PRIME))
        passing = sum(sum(a * b for a, b in zip(shamir.parity_check(xs, list(g), PRIME), bad))
                      % PRIME == 0 for g in gs)
        assert passing == PRIME


def test_robust_reconstruct_names_every_single_wrong_share_exactly():
    """GF(13), 6 shares, t = 4: every position, every wrong value; the secret comes back,
    the culprit is named with certainty."""
    xs = [1, 2, 3, 4, 5, 6]
    f = [7, 3, 11, 2]
    ys = _poly_values(f, xs)
    for pos, err in itertools.product(range(6), range(1, PRIME)):
        bad = list(ys)
        bad[pos] = (bad[pos] + err) % PRIME
        r = shamir.robust_reconstruct(list(zip(xs, bad)), 4, lambda s: s == 7, prime=PRIME)
        assert (r.secret, r.wrong, r.certain) == (7, (xs[pos],), True)


def test_robust_reconstruct_refuses_with_fewer_than_t_correct_shares():
    """In GF(2^255 - 19) with unrelated errors (in GF(13) a wrong combination hits the
    secret 1 time in 13, and the commitment cannot tell)."""
    rng = SecureRandom()
    secret = shamir.random_secret(rng)
    xs = [1, 2, 3, 4, 5]
    ys = shamir.share(secret, xs, 3, rng)
    for pos in itertools.combinations(range(5), 3):  # 3 wrong of 5, t = 3: 2 correct
        bad = [(y + shamir.random_secret(rng) if i in pos else y) for i, y in enumerate(ys)]
        with pytest.raises(shamir.ShareError, match="which cannot be told"):
            shamir.robust_reconstruct(list(zip(xs, bad)), 3, lambda s: s == secret)


def test_gao_decoding_corrects_up_to_half_the_redundancy_in_the_real_field():
    rng = SecureRandom()
    secret = shamir.random_secret(rng)
    xs = list(range(1, 31))
    ys = shamir.share(secret, xs, 20, rng)
    for pos in ([], [3], [0, 29], [5, 6, 7, 8, 9]):  # (30 - 20) / 2 = 5 errors at most
        bad = [(y + 12345 if i in pos else y) for i, y in enumerate(ys)]
        g = shamir.gao_decode(list(zip(xs, bad)), 20)
        assert g is not None and shamir._horner(g, 0, shamir.P) == secret
    bad = [(y + 1 if i < 6 else y) for i, y in enumerate(ys)]
    g = shamir.gao_decode(list(zip(xs, bad)), 20)  # 6 errors: beyond the radius
    assert g is None or shamir._horner(g, 0, shamir.P) != secret
