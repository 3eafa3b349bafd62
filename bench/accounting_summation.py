"""App. F summation parameters: q, r and bits per user against B (cf. [Ghazi23]_ Fig. 12).

Run: python bench/accounting_summation.py

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
"""

from __future__ import annotations

from shuffledp.accounting.summation import summation_parameters


def main() -> None:
    print("320x240 grid, n = 50, eps = 5, delta = 1e-5, w = 20, replace one user")
    print(f"{'B':>8} {'q':>14} {'t':>12} {'r':>3} {'msgs/user':>10} {'bits/msg':>8} "
          f"{'MB/user':>9} {'qBn (App.F)':>12}")
    for B in (10, 100, 1000, 10**4, 10**5, 10**6):
        p = summation_parameters(n=50, epsilon=5.0, delta=1e-5, B=B, grid="320x240")
        print(f"{B:>8} {p.q:>14} {p.headroom:>12} {p.r:>3} {p.messages_per_user:>10} "
              f"{p.bits_per_message:>8} {p.bits_per_user / 8e6:>9.2f} {50 * B:>12}")
    print()
    print("n = 1e5, eps = 1, delta = 1e-6, B = 1000, 256x256, dropout 0 / 5% / 20%")
    for d in (0.0, 0.05, 0.2):
        p = summation_parameters(n=10**5, epsilon=1.0, delta=1e-6, B=1000, grid="256x256",
                                 dropout=d)
        print(f"dropout={d:<5} n_min={p.n_min:<7} q={p.q:<12} r={p.r} "
              f"bits/user={p.bits_per_user} wrap<={p.wrap_probability:.2g}")


if __name__ == "__main__":
    main()
