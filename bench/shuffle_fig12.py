"""Fig. 12 of [Ghazi23]_ (App. F): communication per user against the scaling factor B.

320x240 grid, n = 50, eps = 5, delta = 1e-5, w = 20 (measured levels start..L). For every
B in {1, 2, 4, ..., 1024} prints q, r, m, messages per user, the paper's count
r m ceil(log2(m q)) bits, and the bytes our wire format actually writes per user.

Run: ``python bench/shuffle_fig12.py``

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
"""

from __future__ import annotations

from shuffledp import Grid
from shuffledp.protocol.params import derive_params


def main() -> None:
    grid = Grid(320, 240)
    print("Fig. 12: 320x240, n=50, eps=5, delta=1e-5 (replace-one, Delta_i = 2B)")
    print(f"{'B':>5} {'q':>9} {'r':>3} {'m':>7} {'msgs/user':>10} {'bits/msg':>8} "
          f"{'paper MB/user':>13} {'wire MB/user':>12} {'wrap prob':>9}")
    for k in range(11):
        B = 1 << k
        p = derive_params(grid, 50, epsilon=5.0, delta=1e-5, B=B, dropout=0.0)  # paper: no dropout
        print(f"{B:>5} {p.q:>9} {p.r:>3} {p.m:>7} {p.messages_per_user:>10} "
              f"{p.bits_per_message:>8} {p.bits_per_user / 8e6:>13.2f} "
              f"{p.bytes_per_user / 1e6:>12.2f} {p.wrap_probability:>9.1e}")


if __name__ == "__main__":
    main()
