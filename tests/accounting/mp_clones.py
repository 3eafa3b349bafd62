"""Independent high-precision reference for the clones reduction pair (not a test module).

The hockey-stick divergence D_{e^eps}(P || Q) of the pair

    P = (A + 1 - D, C - A + D)   versus   Q = (A + D, C - A + 1 - D),
    C ~ Bin(N - 1, e^{-alpha0}), A ~ Bin(C, 1/2), D ~ Bernoulli(1 / (1 + e^{alpha0 d}))

([FMT21]_ Lemma 3.3) is summed here term by term in mpmath: every
outcome (c, a) with a in 0..c+1, the positive part of P - e^eps Q, no closed form for the
optimal event and no incomplete beta. The values of C whose probability is below
``cut`` are left out and their exact total mass (1 minus the kept mass, at ``dps`` digits)
is charged to the upper end at the largest per-c divergence, that of c = 0 (the pair for
c > 0 is a post-processing of the pair for c = 0: add Bin(c, 1/2) to the first count).

Used by the accounting tests and by ``bench/accounting_numerical.py``.

References
----------
.. [FMT21] V. Feldman, A. McMillan, K. Talwar, "Hiding Among the Clones: A Simple and
   Nearly Optimal Analysis of Privacy Amplification by Shuffling", FOCS 2021.
"""

from __future__ import annotations

import mpmath as mp


def mp_divergence(n: int, eps0: float, eps: float, d: float = 1.0, *, dps: int = 50,
                  cut: float = 1e-32, reduction: str = "clones") -> tuple[mp.mpf, mp.mpf]:
    """Bracket (lower, upper) of D_{e^eps}(P || Q) at ``dps`` digits (floats taken exactly).

    ``reduction="variation-ratio"`` uses C ~ Bin(N - 1, 2 r) with r = alpha p / q,
    alpha = 1/(p + 1), p = e^{alpha0 d}, q = e^{alpha0} (the stronger-clone pair), written
    from those parameters rather than from the library's simplified expression.
    """
    with mp.workdps(dps):
        ad = mp.mpf(eps0) * mp.mpf(d)
        if reduction == "clones":
            p = mp.exp(-mp.mpf(eps0))
        else:
            pp, qq = mp.exp(ad), mp.exp(mp.mpf(eps0))
            p = 2 * (1 / (pp + 1)) * pp / qq
        beta = 1 / (1 + mp.exp(ad))
        rho = 1 / (1 + mp.exp(-ad))
        E = mp.exp(mp.mpf(eps))
        coef_prev = rho - E * beta  # multiplies b_c(a - 1)
        coef_here = beta - E * rho  # multiplies b_c(a)
        weights = _binomial_weights(n - 1, p)
        kept = [(c, w) for c, w in enumerate(weights) if w >= cut]
        core = mp.mpf(0)
        for c, w in kept:
            core += w * _per_c(c, coef_prev, coef_here)
        dropped = max(mp.mpf(0), 1 - mp.fsum(w for _, w in kept))
        slack = mp.mpf(10) ** (-(dps - 8))
        charge = dropped * max(mp.mpf(0), coef_prev)
        return max(mp.mpf(0), core - slack), core + charge + slack


def _binomial_weights(trials: int, p: mp.mpf) -> list[mp.mpf]:
    """P[Bin(trials, p) = c] for c = 0..trials (log-space start, exact recurrence)."""
    q = 1 - p
    if q == 0:
        return [mp.mpf(0)] * trials + [mp.mpf(1)]
    w = [q**trials]
    ratio = p / q
    for c in range(trials):
        w.append(w[-1] * ratio * (trials - c) / (c + 1))
    return w


def _per_c(c: int, coef_prev: mp.mpf, coef_here: mp.mpf) -> mp.mpf:
    """sum over a = 0..c+1 of max(0, P(a | c) - E Q(a | c))."""
    b = [mp.mpf(1) / mp.mpf(2) ** c]
    for a in range(c):
        b.append(b[-1] * (c - a) / (a + 1))
    total = mp.mpf(0)
    for a in range(c + 2):
        prev = b[a - 1] if a >= 1 else 0
        here = b[a] if a <= c else 0
        term = coef_prev * prev + coef_here * here
        if term > 0:
            total += term
    return total
