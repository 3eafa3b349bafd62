"""Per-user communication of the shuffle protocol (Ghazi et al. App. F, Fig. 12): the count
from the formula, step by step, against the length of actually encoded batches in every
wire layout (docs/communication.md)."""

import math

import numpy as np
import pytest

from shuffledp import Grid
from shuffledp.accounting.summation import shares_needed
from shuffledp.encoders.encoder import encode_shares, frame_messages, messages, user_batch
from shuffledp.protocol.crypto import encrypted_record_bytes, generate_analyzer_key, public_bytes
from shuffledp.protocol.packed import frame_user
from shuffledp.protocol.params import communication_steps, derive_params
from shuffledp.protocol.wire import HEADER_SIZE
from shuffledp.randomness import SecureRandom
from shuffledp.users import UserDistributions

#: n = 50, 320 x 240, w = 20; replace-one, the relation of the table in docs/communication.md
FIG12 = dict(epsilon=5.0, delta=1e-5, B=256, dropout=0.0, neighbour="replace")


def _steps_from_formulas(p):
    """Each step recomputed from its definition, independently of communication_steps."""
    m = sum(p.grid.level_size(i) for i in range(p.start, p.top + 1))
    q0 = p.B * p.n
    r0 = shares_needed(p.epsilon, p.delta, m, q0, p.n)
    joint = math.ceil(math.log2(m * p.q))
    coord, share = math.ceil(math.log2(m)), math.ceil(math.log2(p.q))
    return [
        math.ceil(r0 * m * math.ceil(math.log2(m * q0)) / 8),
        math.ceil(r0 * m * joint / 8),
        math.ceil(p.r * m * joint / 8),
        HEADER_SIZE + math.ceil(p.r * m * (coord + share) / 8),
        HEADER_SIZE + p.r * m * math.ceil((coord + share) / 8),
        HEADER_SIZE + math.ceil(p.r * m * share / 8),
    ]


def test_fig12_steps_from_7_14_to_9_73_megabytes():
    """At Fig. 12's setting (B = 256) the chain reads 7.14 (the paper's own formula, not the
    text's "about 10 MB"), 8.06, 8.51 (our formula), 8.76 (bit-packed), 9.73 (byte-aligned
    wire) MB, and the coordinate-major layout 4.62 MB, below the paper's formula."""
    p = derive_params(Grid(320, 240), 50, **FIG12)
    steps = communication_steps(p)
    got = [s.bytes_per_user for s in steps]
    assert got == _steps_from_formulas(p)
    assert [round(b / 1e6, 2) for b in got] == [7.14, 8.06, 8.51, 8.76, 9.73, 4.62]
    # the default relation, zero-out (sensitivity B, not 2B): a smaller window, 34-bit records
    z = derive_params(Grid(320, 240), 50, **{**FIG12, "neighbour": "zero_out"})
    got_z = [s.bytes_per_user for s in communication_steps(z)]
    assert got_z == _steps_from_formulas(z)
    assert [round(b / 1e6, 2) for b in got_z] == [7.14, 7.83, 8.27, 8.51, 9.73, 4.38]
    # the attributes the rest of the library reports are the same numbers
    assert got[2] == math.ceil(p.bits_per_user / 8)
    assert got[3:] == [p.packed_bytes_per_user, p.bytes_per_user,
                       p.coordinate_major_bytes_per_user]
    # what changes at each step: q (12,800 -> 303,287), then r (18 -> 19)
    assert (steps[0].q, steps[1].q, steps[0].r, steps[2].r) == (12_800, p.q, 18, 19)
    assert shares_needed(p.epsilon, p.delta, p.m, p.q, p.n) == p.r == 19
    assert got[5] < got[0]  # the coordinate-major wire is below the paper's formula


def _batches(p):
    grid = p.grid
    users = UserDistributions.from_pixels(grid, np.arange(p.n),
                                          np.arange(p.n) * 97 % (grid.width * grid.height))
    sh = encode_shares(p, users, np.array([0]), rng=np.random.default_rng(1),
                       source=SecureRandom())[0]
    return (len(frame_messages(p, messages(p, sh))), len(frame_user(p, sh, "packed")),
            len(frame_user(p, sh, "coordinate-major")))


@pytest.mark.parametrize("B", [1, 256])
def test_encoded_batches_have_the_formula_lengths(B):
    """A real user's batch on a small grid (the same code path as Fig. 12's): the bytes the
    byte-aligned, bit-packed and coordinate-major wires write equal steps 4, 3 and 5; the
    encrypted batch (one HPKE message per share) is the header plus r m
    (4 + 32 + ceil(share_bits / 8) + 16) bytes."""
    p = derive_params(Grid(16, 12), 50, epsilon=5.0, delta=1e-5, B=B, dropout=0.0)
    steps = communication_steps(p)
    assert _batches(p) == (steps[4].bytes_per_user, steps[3].bytes_per_user,
                           steps[5].bytes_per_user)
    key = generate_analyzer_key()
    enc = user_batch(p, np.array([5, 6]), np.array([0.5, 0.5]),
                     analyzer_public=public_bytes(key.public_key()))
    per = encrypted_record_bytes(p)
    assert per == 4 + 32 + math.ceil(p.share_bits / 8) + 16
    assert len(enc) == HEADER_SIZE + p.messages_per_user * per


@pytest.mark.slow
def test_fig12_batch_on_the_wire():
    """One user's batch at Fig. 12's own setting (1.9 million messages, about 5 s)."""
    p = derive_params(Grid(320, 240), 50, **FIG12)
    assert _batches(p) == (9_728_634, 8_755_777, 4_621_135) == (
        p.bytes_per_user, p.packed_bytes_per_user, p.coordinate_major_bytes_per_user)
