"""Budget splits.

Per-level split of seed 000 (Ghazi et al., AAAI 2023): proof of Thm 3.1 sets
eps_i = gamma^|i - q| * eps / Z with Z = sum_i gamma^|i - q|; Sec. 4 "Implementation details"
uses gamma = 1/sqrt(2), w = 20, q = floor(log2 sqrt(w)) and does not measure levels i < q.
"""

from __future__ import annotations

import math

import numpy as np

DEFAULT_GAMMA = 1.0 / math.sqrt(2.0)


def start_level(w: int) -> int:
    """First measured level q = floor(log2 sqrt(w)) (seed 000, Sec. 4).

    Computed in exact integer arithmetic: the largest q with 4^q <= w.
    """
    if isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 1:
        raise ValueError(f"w must be an integer >= 1, got w={w!r}")
    q = 0
    while 4 ** (q + 1) <= int(w):
        q += 1
    return q


def level_budgets(
    epsilon: float, start: int, top: int, gamma: float = DEFAULT_GAMMA
) -> np.ndarray:
    """Per-level budgets eps_i for the measured levels ``start..top`` (inclusive).

    eps_i = eps * gamma^|i - start| / Z, Z = sum_{i=start}^{top} gamma^|i - start|, so the
    budgets sum to eps (basic composition, seed 000 proof of Thm 3.1).

    Returns
    -------
    ndarray of shape (top - start + 1,)
        ``out[k]`` is the budget of level ``start + k``.
    """
    eps = float(epsilon)
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"epsilon must be a finite number > 0, got epsilon={epsilon!r}")
    g = float(gamma)
    if not (g > 0 and math.isfinite(g)):
        raise ValueError(f"gamma must be a finite number > 0, got gamma={gamma!r}")
    if not (0 <= int(start) <= int(top)):
        raise ValueError(f"need 0 <= start <= top, got start={start!r}, top={top!r}")
    weights = g ** np.abs(np.arange(int(start), int(top) + 1) - int(start), dtype=float)
    out = eps * weights / weights.sum()
    # Conservative: rounding must never let the split exceed eps.
    excess = out.sum() - eps
    if excess > 0:
        out[-1] -= excess
    return out
