"""Shuffled binary randomized response: its exact worst-case (epsilon, delta), over every data set.

Binary RR with parameter eps0 reports its bit with probability theta = e^{eps0}/(e^{eps0} + 1)
and the other bit otherwise. After shuffling, the analyst sees only K, the number of reports
equal to 0. Up to relabelling, a neighbouring pair is user 1 holding 0 (P) or 1 (Q), with m of
the other n - 1 users holding 0 and n - 1 - m holding 1. With
S_m = Bin(m, theta) + Bin(n - 1 - m, 1 - theta) the others' zeros,

    P_m(k) = theta s_m(k - 1) + (1 - theta) s_m(k),
    Q_m(k) = (1 - theta) s_m(k - 1) + theta s_m(k).

Relabelling 0 <-> 1 maps (P_m, Q_m) to (Q_{n-1-m}, P_{n-1-m}), so D(Q||P) over all m equals
D(P||Q) over all m, and the mechanism is (eps, delta)-DP exactly when

    max_m D_{e^eps}(P_m || Q_m) <= delta.

This module computes that maximum exactly: every m from 0 to n - 1, each s_m by an FFT
convolution of the two binomial pmfs on their central windows, in batches (n = 1e5 takes
about 20 s on one core: ``python bench/accounting_numerical.py``). The released epsilon is a grid
point (1 + rtol)^j at which every m was checked; one grid step below, the worst m is shown to
exceed delta. It is therefore the smallest epsilon of the grid that any analysis can certify
for shuffled binary RR, and far below the general eps0-LDP bound (18-19% at eps0 = 1):
binary RR is a concrete mechanism, not the worst case over all eps0-LDP randomizers.

Floating point: the truncated mass of the two windows is added to the upper estimate, and so
is an allowance for the FFT's absolute error (a few ulps of the largest pmf value per entry,
over the window).

References
----------
.. [Warner65] Warner (1965), "Randomized Response" -- full entry in docs/references.md
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from shuffledp.accounting.amplification._binary_core import (  # noqa: F401 (re-exported)
    _FFT_ULPS,
    _PMF_RTOL,
    MAX_N,
    _divergences,
    _rows,
    _worst,
)
from shuffledp.accounting.amplification._common import ShuffleBound, _iv_rtol, _iv_shuffle
from shuffledp.accounting.events import ShuffledKRR
from shuffledp.accounting.guarantee import Guarantee, Neighbour


def binary_rr_shuffle_exact(n: int, eps0: float, delta: float, *,
                            rtol: float = 1e-3,
                            progress: Callable[[int, int], object] | None = None
                            ) -> ShuffleBound:
    """Exact worst-case epsilon (on the grid (1 + rtol)^j) of n shuffled binary-RR reports.

    Parameters
    ----------
    n : int
        Users, 1 <= n <= :data:`MAX_N`.
    eps0 : float
        Binary RR's parameter, in (0, 700].
    delta : float
        In (0, 1).
    rtol : float, default 1e-3
        Grid resolution, in (0, 0.5].
    progress : callable, optional
        ``progress(done, total)`` during each check of every data set (n data sets, a few
        seconds each at n = 1e5; usually one or two checks): a progress bar's hook.

    Returns
    -------
    ShuffleBound
        ``method="binary-rr-exact"``: ``epsilon`` is certified for every data set;
        ``epsilon_lower`` (one grid step below, when the search saw it) is refuted by the
        data set with the worst m. ``valid=False`` with (eps0, 0) when nothing below eps0 is
        certified.

    Raises
    ------
    TypeError, ValueError
        ``n`` is not an integer in [1, 2^53], ``eps0`` not in (0, 700] or ``delta`` not in
        (0, 1), ``rtol`` is out of range, or ``n`` > :data:`MAX_N`.

    References
    ----------
    [Warner65]_ (randomized response); the exact worst case over every data set is this
    module's computation (module notes).
    """
    n, eps0, delta = _iv_shuffle(n, eps0, delta)
    if n > MAX_N:
        raise ValueError(f"n must be <= {MAX_N} for the exact binary-RR curve (one convolution "
                         f"per data set), got n={n}; use the general bound")
    rtol = _iv_rtol(rtol)
    h = math.log1p(rtol)
    ends = np.array([0, n - 1])

    def end_div(eps: float) -> float:
        # the worst data sets are at the ends (every other bit equal) in every case measured:
        # search there, then check the candidate against every m (and step up until it holds)
        return _worst(n, eps0, eps, ends)[1]

    j_hi = math.ceil(math.log(eps0) / h)
    j_lo = math.floor(math.log(1e-12) / h)
    if end_div(math.exp(j_lo * h)) <= delta:
        j_hi = j_lo
    while j_hi - j_lo > 1:
        mid = (j_lo + j_hi) // 2
        if end_div(math.exp(mid * h)) <= delta:
            j_hi = mid
        else:
            j_lo = mid
    j = j_hi
    notes = [f"every data set checked (m = 0..{n - 1} others holding the same bit as user 1); "
             f"binomial windows of +-9 sd, their left-out mass charged; grid rtol={rtol:g}"]
    eps_low = 0.0
    found: int | None = None
    while math.exp(j * h) < eps0:
        lo, up, arg = _worst(n, eps0, math.exp(j * h), progress=progress)
        if up <= delta:
            below = _worst(n, eps0, math.exp((j - 1) * h), ends)
            if below[0] > delta:
                eps_low = math.exp((j - 1) * h)
                notes.append(f"refuted one grid step below by m = {below[2]}")
            found = j
            break
        j += 1
    valid = found is not None
    eps_up, delta_out = (math.exp(found * h), delta) if found is not None else (eps0, 0.0)
    if not valid:
        notes.append(f"no epsilon below eps0 = {eps0:.6g} is certified at delta={delta:g}; "
                     f"falling back to the local guarantee ({eps0:.6g}, 0)")
    guarantee = Guarantee(
        notion="approximate", model="shuffle", epsilon=eps_up, delta=delta_out,
        neighbour=Neighbour.REPLACE_ONE,
        theorem="exact worst case over every data set of shuffled binary randomized response "
                "(shuffledp.accounting.amplification.binary_rr)",
        parameters={"n": n, "eps0": eps0, "k": 2, "method": "binary-rr-exact"},
        # composition: the stronger-clone pair (one pair for every data set), see events
        event=ShuffledKRR(n=n, k=2, eps0=eps0, epsilon=eps_up, delta=delta_out,
                          neighbour=Neighbour.REPLACE_ONE))
    return ShuffleBound(
        epsilon=eps_up, delta=delta_out, method="binary-rr-exact", n=n, eps0=eps0,
        epsilon_lower=min(eps_low, eps_up), tolerance=eps_up - min(eps_low, eps_up),
        valid=valid, guarantee=guarantee, notes=tuple(notes))


__all__ = ["MAX_N", "binary_rr_shuffle_exact"]
