"""Bits per user against B, next to [Ghazi23]_ Fig. 12 (App. F), for every wire layout.

320x240 grid, n = 50, eps = 5, delta = 1e-5, w = 20, replace-one. r is the App. F formula
(:func:`shuffledp.accounting.summation.shares_needed`) with our modulus (headroom) and the
split-and-mix part of delta. Columns (MB = 10^6 bytes per user):

* paper: r m ceil(log2(m q)) bits with the paper's own q = B n and its r (App. F text);
* ours: the same count with our q and r (``bits_per_user``);
* v2: bytes the byte-aligned v2 wire writes (``bytes_per_user``);
* packed: exact bit width ceil(log2 m) + share_bits (wire v3, ``packed_bytes_per_user``);
* coord-major: shares only, coordinate implied by position (wire v3 flags bit 1,
  ``coordinate_major_bytes_per_user``).

At B = 256 one user's batch is encoded and framed in every layout and its length checked
against the column. The paper's Fig. 12 is read off the text only: "approximately 10MB" at
B = 256.

Run: ``python bench/bits_per_user.py``

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
"""

from __future__ import annotations

import time

import numpy as np

from shuffledp import Grid
from shuffledp.accounting.summation import shares_needed
from shuffledp.encoders.encoder import encode_shares, frame_messages, messages
from shuffledp.protocol.packed import frame_user
from shuffledp.protocol.params import derive_params
from shuffledp.protocol.wire import pack_bits, unpack_bits
from shuffledp.randomness import SecureRandom
from shuffledp.users import UserDistributions

N, EPS, DELTA = 50, 5.0, 1e-5


def paper_mb(m: int, B: int) -> tuple[int, float]:
    """r and MB per user of the App. F text: q = B n, r m ceil(log2(m q)) bits."""
    q = B * N
    r = shares_needed(EPS, DELTA, m, q, N)
    return r, r * m * (m * q - 1).bit_length() / 8e6


def check_wire(p) -> str:
    """Frame one user's batch in every layout; lengths must equal the params' columns."""
    grid = p.grid
    pixels = np.arange(N) * 997 % (grid.width * grid.height)
    users = UserDistributions.from_pixels(grid, np.arange(N), pixels)
    t0 = time.perf_counter()
    sh = encode_shares(p, users, np.array([0]), rng=np.random.default_rng(1),
                       source=SecureRandom())[0]
    got = (len(frame_messages(p, messages(p, sh))), len(frame_user(p, sh, "packed")),
           len(frame_user(p, sh, "coordinate-major")))
    want = (p.bytes_per_user, p.packed_bytes_per_user, p.coordinate_major_bytes_per_user)
    assert got == want, (got, want)
    return f"framed lengths {got} bytes == columns ({time.perf_counter() - t0:.1f} s)"


def main() -> None:
    grid = Grid(320, 240)
    print(f"bits per user vs B: {grid.width}x{grid.height}, n={N}, eps={EPS}, delta={DELTA}, "
          "w=20 (MB = 1e6 bytes)")
    print(f"{'B':>5} {'r_pap':>5} {'paper':>6} {'q':>8} {'r':>3} {'bits':>4} {'ours':>6} "
          f"{'v2':>6} {'packed':>6} {'coord-major':>11} {'Fig.12':>6}")
    for k in range(11):
        B = 1 << k
        p = derive_params(grid, N, epsilon=EPS, delta=DELTA, B=B, dropout=0.0)  # as the paper
        rp, mbp = paper_mb(p.m, B)
        fig = "~10" if B == 256 else ""
        print(f"{B:>5} {rp:>5} {mbp:>6.2f} {p.q:>8} {p.r:>3} {p.record_bits:>4} "
              f"{p.bits_per_user / 8e6:>6.2f} {p.bytes_per_user / 1e6:>6.2f} "
              f"{p.packed_bytes_per_user / 1e6:>6.2f} "
              f"{p.coordinate_major_bytes_per_user / 1e6:>11.2f} {fig:>6}")
        if B == 256:
            last = p
    print("B=256:", check_wire(last))
    rec = np.random.default_rng(0).integers(0, 1 << last.record_bits, last.messages_per_user,
                                            dtype=np.uint64)
    t0 = time.perf_counter()
    body = pack_bits(rec, last.record_bits)
    t1 = time.perf_counter()
    assert np.array_equal(unpack_bits(body, last.record_bits, rec.size), rec)
    t2 = time.perf_counter()
    print(f"pack_bits / unpack_bits of {rec.size} {last.record_bits}-bit records: "
          f"{t1 - t0:.2f} s / {t2 - t1:.2f} s")


if __name__ == "__main__":
    main()
