"""Privacy loss distributions with a rigorous bound on their numerical error.

The accountant composes releases by convolving the privacy loss distributions (PLDs) of
their dominating pairs. A PLD here is a distribution on the grid ``h Z`` plus a mass at
+infinity; the hockey-stick divergence of the pair at epsilon is

    delta(eps) = inf + sum_{l h > eps} p_l (1 - e^{eps - l h}).

Composition multiplies characteristic functions, and doing that with a floating-point FFT
leaves an absolute error of about 1e-16 times the *largest* mass on every one of millions
of grid points: at 365 compositions of DL(0.5) the rounding puts 8e-13 of negative mass
on the grid, which is more than the whole hockey-stick divergence at delta = 1e-13. An
accountant that ignores this states epsilons that are too small (0.14 too small at
delta = 1e-14 in that example). This module never ignores it: every array carries a proven
bound on how far it is from the exact result, and every delta it answers is an upper bound
of the exact one.

What is exact, and what is bounded
----------------------------------
Each :class:`LossPMF` stands for an *exact* distribution p: the result, in exact
arithmetic, of the operations applied to the inputs (pessimistic discretisation, products,
tail moves). ``probs`` holds computed values p_hat, and for weights lambda >= 0 the record
keeps proven bounds

    E(lambda) >= sum_l |p_hat_l - p_l| e^{lambda l h},

so that the error of any tail sum above eps is at most ``E(lambda) e^{-lambda eps}``
for every lambda >= 0 at once: the smallest over the tracked lambdas is charged to delta.
It also keeps upper bounds on the exact moment generating function M(lambda) =
sum_l p_l e^{lambda l h} on a grid of lambdas of both signs; they multiply under
composition and give Chernoff bounds on the exact tails (used to truncate the support).

Tilted FFT. The error of an FFT convolution is absolute, relative to the l1 norms of the
inputs (:func:`fft_convolution_error`). Convolving the *tilted* arrays p_l e^{lambda0 l h}
(an exponential tilt commutes with convolution: (p e^{lambda0 .}) * (q e^{lambda0 .}) =
(p * q) e^{lambda0 .}) makes that error relative to the tilted masses, which is where the
hockey-stick divergence at eps lives when lambda0 is the Chernoff exponent of eps
([KJH20]_ use the plain transform; the tilt is the classical exponential change of measure
of saddle-point methods). A composed law stays in its tilt (mass = stored value times
e^{scale - lambda0 l h}) and is untilted only to answer a question, so the noise far below
the tilt's centre is never amplified into later products. Computed values are clipped to
the range the exact ones lie in -- [0, min over lambda of M(lambda) e^{-lambda l h}], the
Chernoff bounds -- which can only shrink the error. When both supports lie on a lattice
of the grid with a common stride (sensitivity-1 discrete Laplace, (eps, delta) pairs) the
product is computed on the lattice.

Grid. Losses are rounded up to multiples of the exact decimal behind the float ``h``
(1e-4 is 1/10000). A loss a hair (1e-12 relative) above a grid point -- the float 0.05 is
0.05000000000000000277 -- is put on that point and the hair is charged as an additive
``slack`` on every epsilon, instead of a whole grid step.

The FFT's own rounding is bounded with the standard error analysis of the Cooley-Tukey FFT
([Higham02]_ Thm 24.2: ||fl(FFT x) - FFT x||_2 <= log2(N) eta / (1 - log2(N) eta)
||FFT x||_2 with eta = u + gamma_4 (sqrt 2 + u)) carried through the two forward
transforms, the pointwise product and the inverse transform (:func:`fft_convolution_error`),
with a safety factor of 10 for numpy's mixed-radix real transforms (the tests measure the
actual error against exact integer convolutions and find it far below the bound). Direct
convolution of non-negative arrays (used for small sizes) has relative error gamma_m per
entry ([Higham02]_ Sec. 3.1).

Truncation. After each convolution the support is cut where a Chernoff bound on the *exact*
law leaves at most ``TAIL`` of mass: the upper tail goes to +infinity and the lower tail to
the lowest kept point. Both moves only increase losses, so the truncated exact law still
dominates ([MM18]_, [KJH20]_); the computed arrays drop both tails and the error bounds grow
by ``TAIL`` (at +infinity, and at the lowest point).

References
----------
.. [KOV15] Kairouz et al. (2015), "The Composition Theorem for Differential Privacy", Thm 2.1
   -- full entry in docs/references.md
.. [CKS20] Canonne et al. (2020), "The Discrete Gaussian for Differential Privacy" -- full
   entry in docs/references.md
.. [ZDW22] Zhu et al. (2022), "Optimal Accounting of Differential Privacy via Characteristic
   Function", Thm 10 -- full entry in docs/references.md
.. [KJH20] Koskela et al. (2020), "Computing Tight Differential Privacy Guarantees Using FFT" --
   full entry in docs/references.md
.. [DGKKM22] Doroshenko et al. (2022), "Connect the Dots", Alg. 1 -- full entry in
   docs/references.md
.. [MM18] Meiser and Mohammadi (2018), "Tight on Budget? Tight Bounds for r-Fold Approximate
   Differential ..." -- full entry in docs/references.md
.. [Higham02] N. J. Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed.,
   SIAM 2002, Sec. 3.1 (inner products), Lemma 3.5 (complex multiplication), Thm 24.2
   (the FFT).
.. [GLW21] S. Gopi, Y. T. Lee, L. Wutschitz, "Numerical Composition of Differential
   Privacy", NeurIPS 2021 (an accountant with stated eps/delta errors; here the error is
   bounded and charged instead).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction

import numpy as np

#: unit roundoff of IEEE double precision
U = 2.0 ** -53
#: mass a truncation may move (to +infinity or up to the cut), bounded by Chernoff
TAIL = 1e-30
#: direct (O(n m)) convolution when the product of the lengths is at most this
DIRECT_MAX = 4_000_000
#: largest grid (points) a composed law may span; beyond it the PLD is not computed
MAX_POINTS = 1 << 24
#: largest grid (points) one mechanism's law may span (about +-210 at h = 1e-4)
MAX_EVENT_POINTS = 1 << 22
#: safety factor on the Cooley-Tukey error bound (numpy's real transforms of power-of-two
#: length use radix-4 and radix-2 passes, not the textbook radix-2 butterfly)
FFT_SAFETY = 10.0
#: weights lambda >= 0 at which error bounds are tracked (plus every tilt used)
ERR_GRID = (0.0, 0.25, 1.0, 4.0)
#: weights at which upper bounds on the exact moment generating function are tracked
MGF_GRID = tuple(sorted({s * 2.0 ** j for j in range(-6, 5) for s in (-1.0, 1.0)}))


class NoPLD(ValueError):  # noqa: N818 (a reason, raised like a refusal)
    """A PLD that cannot be computed here (its reason names the cause)."""


# ----------------------------------------------------------------------------- log helpers
def _lse(*xs: float) -> float:
    """log(sum e^x) of a few numbers (-inf entries allowed)."""
    vals = [x for x in xs if x != -math.inf]
    if not vals:
        return -math.inf
    if any(x == math.inf for x in vals):
        return math.inf
    m = max(vals)
    return m + math.log(math.fsum(math.exp(x - m) for x in vals))


def _up(x: float, rel: float = 8 * U) -> float:
    """x rounded up by a relative margin (for bounds)."""
    return x * (1.0 + rel) if x > 0 else x


def _log_geometric(q: float, m0: int, m1: int) -> float:
    """log sum_{m=m0}^{m1} e^{q m} (m1 >= m0)."""
    count = m1 - m0 + 1
    if count <= 0:
        return -math.inf
    if q == 0.0:
        return math.log(count)
    if q > 0:
        return q * m1 + math.log(-math.expm1(-q * count)) - math.log(-math.expm1(-q))
    return q * m0 + math.log(-math.expm1(q * count)) - math.log(-math.expm1(q))


def fft_kappa(n: int) -> float:
    """Relative l2 error bound of one floating-point FFT of length n ([Higham02]_ Thm 24.2,
    twiddle factors accurate to u, times :data:`FFT_SAFETY`).

    Parameters
    ----------
    n : int
        Transform length (a power of 2).

    Returns
    -------
    float
        kappa(n), the relative l2 error bound of the computed transform.

    Raises
    ------
    ValueError
        ``n`` < 1 (the logarithm of the length is undefined).

    References
    ----------
    [Higham02]_ Thm 24.2.
    """
    gamma4 = 4 * U / (1 - 4 * U)
    eta = U + gamma4 * (math.sqrt(2.0) + U)
    k = max(1.0, math.log2(n)) * eta
    return FFT_SAFETY * k / (1.0 - k)


def fft_convolution_error(n: int, rho: float = 5 * U) -> float:
    """beta(n): ||fl(x * y) - x * y||_2 <= beta(n) ||x||_1 ||y||_1 for the FFT convolution
    of real arrays zero-padded to length n (two forward transforms, pointwise product,
    inverse transform), including a relative rounding ``rho`` of every input entry (the
    tilt).

    With X = F x: ||X||_2 = sqrt(n) ||x||_2 and ||X||_inf <= ||x||_1; the computed
    transforms are within kappa sqrt(n) ||x||_2; the complex product adds sqrt(2) gamma_2
    ([Higham02]_ Lemma 3.5); the inverse transform (1/n F*) maps l2 errors down by sqrt(n)
    and adds kappa ||z||_2 with ||z||_2 <= ||x||_1 ||y||_2 (Young). Every l2 norm of an
    input is bounded by its l1 norm. The total is doubled for the constants' slack.

    Parameters
    ----------
    n : int
        Padded length of the transforms.
    rho : float
        Relative rounding of every input entry.

    Returns
    -------
    float
        beta(n).

    Raises
    ------
    ValueError
        ``n`` < 1 (through :func:`fft_kappa`).

    References
    ----------
    [Higham02]_ Lemma 3.5 and Thm 24.2.
    """
    kap = fft_kappa(n)
    rn = math.sqrt(n)
    mult = math.sqrt(2.0) * 2 * U / (1 - 2 * U)
    spectral = 2 * kap + kap * kap * rn + mult * (1 + kap) * (1 + kap * rn)
    beta = (1 + kap) * spectral + kap * (1 + 2 * U) + 2 * U
    beta += 2 * rho + rho * rho  # the tilted inputs' own rounding
    return 2.0 * beta


# ----------------------------------------------------------------------------- the record
@dataclass(frozen=True, eq=False)
class LossPMF:
    """One direction of a discretised PLD: masses on ``(lower + i) h`` and at +infinity.

    The finite masses are stored *tilted*: mass_i = probs_i e^{scale - tilt (lower + i) h}
    (``tilt = scale = 0`` for a law that was never tilted). A law composed by tilted FFTs
    stays in its tilt, where its computed values are accurate relative to their largest
    one; untilting happens only when a divergence is asked for.

    Attributes
    ----------
    h : float
        Grid interval.
    lower : int
        Grid index of ``probs[0]``.
    probs : ndarray
        Computed tilted masses (non-negative, read-only).
    inf : float
        Computed mass at +infinity.
    inf_err : float
        Bound on |inf - exact inf|.
    log_err : Mapping
        lambda >= 0 -> log of a bound on sum_l |mass_hat_l - mass_l| e^{lambda l h}.
    log_mgf : Mapping
        lambda -> log of an upper bound on the exact sum_l mass_l e^{lambda l h}.
    tilt, scale : float
        The representation of the masses (above).
    err_entries : ndarray or None
        Per-entry error bounds of the (untilted) masses, when known (inputs).
    slack : float
        The exact losses exceed the grid's by at most this (>= 0): a loss within 1e-12
        (relative) above a grid point is put on it, and the difference is charged here
        (divergences are read at eps - slack, epsilons returned + slack).
    """

    h: float
    lower: int
    probs: np.ndarray
    inf: float
    inf_err: float
    log_err: Mapping[float, float]
    log_mgf: Mapping[float, float]
    tilt: float = 0.0
    scale: float = 0.0
    err_entries: np.ndarray | None = None
    slack: float = 0.0
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        p = np.ascontiguousarray(self.probs, dtype=np.float64)
        if p.ndim != 1 or p.size == 0:
            raise ValueError(f"probs must be a non-empty 1-D array, got shape {p.shape}")
        p.setflags(write=False)
        object.__setattr__(self, "probs", p)

    # ------------------------------------------------------------------ basic quantities
    @property
    def size(self) -> int:
        return int(self.probs.size)

    @property
    def upper(self) -> int:
        """Grid index of the last entry."""
        return self.lower + self.size - 1

    def log_norm(self, lam: float) -> float:
        """log of an upper bound on sum_l |mass_hat_l| e^{lam l h} (the computed masses)."""
        key = ("norm", lam)
        if key not in self._cache:
            if lam == self.tilt:  # the stored values are the tilted masses themselves
                s = float(np.sum(self.probs))
                val = math.log(_up(s, (self.size + 16) * U)) + self.scale if s > 0 else -math.inf
            else:
                val = _log_weighted(self.probs, self.lower, self.h, lam - self.tilt) + self.scale
            self._cache[key] = val
        return self._cache[key]

    def log_err_at(self, lam: float) -> float:
        """log E(lam) for lam >= 0: tracked; from the per-entry bounds of an input; or
        converted from a tracked weight over the support (sum |e_l| e^{lam l h} <=
        e^{(lam - l0) x} sum |e_l| e^{l0 l h}, x the end of the support maximising it)."""
        if lam in self.log_err:
            return self.log_err[lam]
        if self.err_entries is not None:
            key = ("err", lam)
            if key not in self._cache:
                self._cache[key] = _log_weighted(self.err_entries, self.lower, self.h, lam)
            return self._cache[key]
        best = math.inf
        for l0, le in self.log_err.items():
            if le == -math.inf:
                return -math.inf
            d = lam - l0
            best = min(best, le + max(d * self.lower * self.h, d * self.upper * self.h))
        return best

    def log_mgf_at(self, lam: float) -> float:
        """log of an upper bound on the exact moment generating function at ``lam``."""
        if lam in self.log_mgf:
            return self.log_mgf[lam]
        if lam >= 0:
            return _lse(self.log_norm(lam), self.log_err_at(lam))
        # negative weight: every weight is at most e^{lam lower h}
        return _lse(self.log_norm(lam), self.log_err_at(0.0) + lam * self.lower * self.h)

    def masses(self, start: int = 0) -> np.ndarray:
        """The computed untilted masses of entries start.. (inf where they overflow)."""
        idx = self.lower + np.arange(start, self.size)
        p = self.probs[start:]
        if self.tilt == 0.0 and self.scale == 0.0:
            return p
        with np.errstate(over="ignore", invalid="ignore"):
            m = p * np.exp(self.scale - self.tilt * self.h * idx)
        return np.where(p > 0, m, 0.0)

    def max_loss(self) -> float:
        nz = np.flatnonzero(self.probs > 0)
        return (self.lower + int(nz[-1])) * self.h if nz.size else self.lower * self.h

    # ------------------------------------------------------------------ hockey stick
    def _err_term(self, eps: float) -> float:
        """Bound on sum_{l h > eps} |mass_hat_l - mass_l| (min over the tracked weights:
        for lam >= 0 each such term is at most |e_l| e^{lam (l h - eps)})."""
        best = min((le - lam * eps for lam, le in self.log_err.items() if lam >= 0),
                   default=math.inf)
        return math.exp(best) if best < 700 else math.inf

    def _first_above(self, eps: float) -> int:
        """Position of the first entry whose loss is > eps (grid losses are (lower+i) h)."""
        i = max(0, math.floor(eps / self.h) - self.lower - 1)
        while i < self.size and (self.lower + i) * self.h <= eps:
            i += 1
        return i

    def delta(self, eps: float) -> float:
        """Upper bound on the exact hockey-stick divergence at ``eps``."""
        if self.slack:
            # exact losses <= grid losses + slack: H_exact(eps) <= H_grid(eps - slack)
            return self._delta_grid_law(eps - self.slack)
        return self._delta_grid_law(eps)

    def _delta_grid_law(self, eps: float) -> float:
        i0 = self._first_above(eps)
        m = self.masses(i0)
        losses = (self.lower + np.arange(i0, self.size)) * self.h
        est = self.inf + float(np.sum(m * -np.expm1(eps - losses)))
        tot = float(np.sum(m))
        span = abs(eps) + max(abs(self.lower), abs(self.upper)) * self.h
        rounding = (m.size + 16 + 4 * span) * U * (tot + self.inf)
        out = _up(est + rounding + self.inf_err + self._err_term(eps))
        return out if math.isfinite(out) else math.inf

    def delta_grid(self, j_top: int, offset: float = 0.0) -> np.ndarray:
        """Upper bounds on the grid law's delta at eps_j = j h - offset, j = 0..j_top, for
        0 <= offset < h (vectorised, same guarantees; without the slack, see
        :meth:`epsilon` and :meth:`PLD.delta_on_grid`).

        delta(eps_j) = inf + A_j - B_j with A_j the mass above eps_j and B_j the sum of
        mass_l e^{eps_j - l h} over the same losses (l > j, or l >= j when offset > 0). B
        comes from the decaying recurrence S_i = m_i + e^{-h} S_{i+1} (no overflow at any
        epsilon); the cancellation A - B is charged as rounding.
        """
        from scipy.signal import lfilter  # ~1 s to import: only when a curve is read

        j = np.arange(j_top + 1)
        eps = j * self.h - offset
        m = self.masses()
        n = m.size
        suffix_m = np.concatenate([np.cumsum(m[::-1])[::-1], [0.0]])
        S = np.concatenate([lfilter([1.0], [1.0, -math.exp(-self.h)], m[::-1])[::-1], [0.0]])
        first = j + (0 if offset > 0 else 1) - self.lower  # position of the first loss above
        pos = np.clip(first, 0, n)
        A = suffix_m[pos]
        # B = e^{eps_j - l_pos h} S_pos, l_pos = lower + pos >= j (+1): the factor is <= 1
        with np.errstate(under="ignore"):
            B = np.exp(eps - (self.lower + pos) * self.h) * S[pos]
        est = self.inf + A - B
        span = j * self.h + max(abs(self.lower), abs(self.upper)) * self.h
        rounding = (n + 16 + 4 * span) * U * 2 * (A + B + self.inf)
        out = np.maximum(est, 0.0) + rounding + self.inf_err + _err_terms(self, eps)
        return out * (1 + 16 * U)

    def epsilon(self, delta: float) -> float:
        """Smallest eps >= 0 (found exactly between grid points) whose :meth:`delta` bound
        is <= ``delta``; ``inf`` if none."""
        e = self._epsilon_grid_law(delta)
        if not self.slack or not math.isfinite(e):
            return e
        return math.nextafter(e + self.slack, math.inf)

    def _epsilon_grid_law(self, delta: float) -> float:
        d_at = self._delta_grid_law
        if self.inf + self.inf_err > delta:
            return math.inf
        if d_at(0.0) <= delta:
            return 0.0
        top = max(self.upper, 0)
        if d_at(top * self.h) > delta:
            # beyond the support only the infinity mass and the error bounds remain
            eps = top * self.h
            for _ in range(200):
                eps = eps * 1.1 + 0.1
                if d_at(eps) <= delta:
                    return eps
            return math.inf
        grid = self.delta_grid(top)
        ok = np.flatnonzero(grid <= delta)
        j = int(ok[0]) if ok.size else top
        while j < top and d_at(j * self.h) > delta:
            j += 1
        while j > 0 and d_at((j - 1) * self.h) <= delta:
            j -= 1
        if j == 0:
            return 0.0
        # between (j-1)h and j h: delta_hat(eps) = inf + A - e^{eps - left} C' with A, C'
        # over the losses >= j h, C' = sum mass_l e^{left - l h} (factors <= 1)
        left = (j - 1) * self.h
        i0 = self._first_above(left)
        m = self.masses(i0)
        idx = self.lower + np.arange(i0, self.size)
        A = float(np.sum(m))
        with np.errstate(under="ignore"):
            C = float(np.sum(m * np.exp(left - idx * self.h)))
        slack = d_at(left) - (self.inf + A - C)  # rounding + errors at the left end
        eps = j * self.h
        if C > 0:
            num = self.inf + A + max(slack, 0.0) - delta
            if num > 0:
                cand = min(max(left + math.log(num / C), left), eps)
                cand = math.nextafter(cand * (1 + 1e-12) + 1e-15, math.inf)
                if cand < eps and d_at(cand) <= delta:
                    eps = cand
        return eps


def _err_terms(pmf: LossPMF, eps: np.ndarray) -> np.ndarray:
    e = np.asarray(eps, dtype=np.float64)
    best = np.full(e.shape, np.inf)
    for lam, le in pmf.log_err.items():
        if lam >= 0:
            best = np.minimum(best, le - lam * e)
    with np.errstate(over="ignore"):
        return np.where(best < 700, np.exp(np.minimum(best, 700)), np.inf)


def _log_weighted(probs: np.ndarray, lower: int, h: float, lam: float) -> float:
    """log sum |probs_i| e^{lam (lower + i) h}, rounded up."""
    nz = np.flatnonzero(probs)
    if nz.size == 0:
        return -math.inf
    a = np.abs(probs[nz])
    n = a.size
    x = lam * h * (lower + nz)
    m = float(x[-1] if lam >= 0 else x[0])
    with np.errstate(under="ignore"):
        s = float(np.dot(a, np.exp(x - m)))
    # each term within u of itself, or below 2^-1074 when it underflows
    return m + math.log(_up(s, (n + 16) * U) + n * 5e-324)


# ----------------------------------------------------------------------------- builders
def grid_fraction(h: float) -> Fraction:
    """The exact grid interval behind the float ``h``: the shortest decimal that rounds to
    it (1e-4 is 1/10000). Losses are rounded up to multiples of this number; float
    arithmetic with ``h`` is within a relative u of it, which the rounding terms cover."""
    return Fraction(repr(float(h)))


#: a loss within this relative distance above a grid point is put on it (slack charged)
SNAP_RTOL = 1e-12


def _ceil_exact(nums: np.ndarray, scale: Fraction, h: float) -> tuple[np.ndarray, float]:
    """(idx, slack): idx = ceil(num * scale / h_q) for integers ``nums``, exactly, except
    that a value at most :data:`SNAP_RTOL` (relative) above an integer is put on that
    integer; slack bounds what that leaves out (in loss units, rounded up).

    The float quotient is within a few ulps of the exact one; only quotients within 1e-9 of
    an integer (where those ulps could cross it) are redone in exact rationals of the
    floats involved (``scale`` taken as the exact number it is, h_q =
    :func:`grid_fraction`). Snapping matters for decimal parameters: the float 0.05 is
    0.05000000000000000277, a hair above 500 grid steps of 1e-4.
    """
    nums = np.asarray(nums, dtype=np.int64)
    hq = grid_fraction(h)
    x = nums.astype(np.float64) * (float(scale) / h)
    out = np.ceil(x)
    near = np.abs(x - np.round(x)) <= 1e-9 * np.maximum(1.0, np.abs(x))
    res = out.astype(np.int64)
    slack = Fraction(0)
    if np.any(near):
        q0 = scale / hq
        for i in np.flatnonzero(near):
            q = q0 * int(nums[i])
            r = round(q)
            if 0 <= q - r <= SNAP_RTOL * max(1, abs(r)):
                res[i] = r
                slack = max(slack, (q - r) * hq)
            else:
                res[i] = -((-q.numerator) // q.denominator)
    return res, _up(float(slack), 4 * U) if slack else 0.0


def from_atoms(h: float, idx: np.ndarray, masses: np.ndarray, inf: float = 0.0, *,
               rel_err: float = 16 * U, abs_err: np.ndarray | float = 0.0,
               inf_err: float = 0.0, slack: float = 0.0) -> LossPMF:
    """A law with ``masses`` at grid indices ``idx`` (merged), each within
    ``rel_err * mass + abs_err`` of the exact value, plus ``inf`` at +infinity.

    Parameters
    ----------
    h : float
        Grid step of the losses.
    idx : ndarray of int
        Grid index of each atom (loss idx * h).
    masses : ndarray of float
        Mass of each atom (finite, >= 0).
    inf : float
        Mass at +infinity.
    rel_err, abs_err, inf_err : float
        Error of each mass (relative and absolute) and of ``inf``.
    slack : float
        Extra error charged to every delta.

    Returns
    -------
    LossPMF
        The law, with its error bound.

    Raises
    ------
    ValueError
        A mass is negative or not finite.
    NoPLD
        The atoms span more than :data:`MAX_EVENT_POINTS` grid points.

    References
    ----------
    [DGKKM22]_ (pessimistic discretisation: losses rounded up to the grid).
    """
    idx = np.asarray(idx, dtype=np.int64)
    m = np.asarray(masses, dtype=np.float64)
    if np.any(~np.isfinite(m)) or np.any(m < 0):
        raise ValueError("masses must be finite and non-negative")
    lo, hi = int(idx.min()), int(idx.max())
    if hi - lo + 1 > MAX_EVENT_POINTS:
        raise NoPLD(f"the pair's losses span [{lo * h:.6g}, {hi * h:.6g}]: {hi - lo + 1} grid "
                    f"points at discretization {h:g}, more than {MAX_EVENT_POINTS}")
    probs = np.bincount(idx - lo, weights=m, minlength=hi - lo + 1)
    err = np.bincount(idx - lo, weights=rel_err * m + abs_err,
                      minlength=hi - lo + 1).astype(float) * (1 + (m.size + 8) * U)
    out = _with_bounds(h, lo, probs, float(inf), float(inf_err), err)
    return replace(out, slack=float(slack)) if slack else out


def _with_bounds(h: float, lower: int, probs: np.ndarray, inf: float, inf_err: float,
                 err: np.ndarray) -> LossPMF:
    """A LossPMF whose per-entry error bounds ``err`` are known: tracked norms from them."""
    log_err = {lam: _log_weighted(err, lower, h, lam) for lam in ERR_GRID}
    tot = probs + err
    log_mgf = {lam: _log_weighted(tot, lower, h, lam) for lam in MGF_GRID}
    return LossPMF(h, lower, probs, inf, inf_err, log_err, log_mgf, err_entries=err)


def discrete_laplace(t: float, sensitivity: int, h: float) -> LossPMF:
    """Exact pair (DL(0), DL(Delta)) with P(Z = z) proportional to e^{-t |z|}, losses
    rounded up to the grid.

    With Z = clip(X, 0, Delta) (sufficient), the loss is t (Delta - 2 Z) and under DL(0)
    P(Z = 0) = 1/(1 + a), P(Z = z) = (1 - a) a^z / (1 + a) for 0 < z < Delta and
    P(Z = Delta) = a^Delta / (1 + a), a = e^{-t}.

    Parameters
    ----------
    t : float
        Parameter of the noise (> 0).
    sensitivity : int
        Shift Delta (>= 1).
    h : float
        Grid step.

    Returns
    -------
    LossPMF
        The pair's privacy loss law (it is symmetric).

    Raises
    ------
    NoPLD
        The losses span more than :data:`MAX_EVENT_POINTS` grid points.

    References
    ----------
    [DGKKM22]_ (losses rounded up to the grid); the pair is the one of
    :class:`~shuffledp.accounting.events.DiscreteLaplace`.
    """
    d = int(sensitivity)
    z = np.arange(d + 1)
    log1pa = math.log1p(math.exp(-t))
    logm = -t * z - log1pa
    if d > 1:
        logm[1:d] += math.log(-math.expm1(-t))
    masses = np.exp(logm)
    idx, slack = _ceil_exact(d - 2 * z, Fraction(t), h)
    return from_atoms(h, idx, masses, rel_err=32 * U, slack=slack)


def pure_pair(eps: float, delta: float, h: float) -> LossPMF:
    """The (eps, delta) pair of Kairouz-Oh-Viswanath: loss +inf w.p. delta, eps w.p.
    (1 - delta) e^eps/(1 + e^eps), -eps w.p. (1 - delta)/(1 + e^eps).

    Parameters
    ----------
    eps : float
        Epsilon (finite, >= 0; e^eps must not overflow).
    delta : float
        Delta, in [0, 1).
    h : float
        Grid step.

    Returns
    -------
    LossPMF
        The pair's privacy loss law.

    Raises
    ------
    ValueError
        A mass is not finite (e^eps overflows).
    NoPLD
        The losses span more than :data:`MAX_EVENT_POINTS` grid points.

    References
    ----------
    [KOV15]_ Thm 2.1.
    """
    hi = (1.0 - delta) / (1.0 + math.exp(-eps))
    lo = (1.0 - delta) * math.exp(-eps) / (1.0 + math.exp(-eps))
    idx, slack = _ceil_exact(np.array([1, -1]), Fraction(eps), h)
    return from_atoms(h, idx, np.array([hi, lo]), delta, rel_err=16 * U, inf_err=2 * U * delta,
                      slack=slack)


def discrete_gaussian(sigma: float, sensitivity: int, h: float) -> LossPMF:
    """Exact pair (N_Z(0, sigma^2), N_Z(Delta, sigma^2)): loss (Delta^2 - 2 Delta x) /
    (2 sigma^2). The support |x| <= T is kept with e^{-T^2/(2 sigma^2)} below 1e-40; the
    left-out tails (bounded, charged as error) go to +infinity and to the lowest kept loss.

    Parameters
    ----------
    sigma : float
        Scale of the discrete Gaussian (> 0).
    sensitivity : int
        Shift Delta (>= 1).
    h : float
        Grid step.

    Returns
    -------
    LossPMF
        The pair's privacy loss law.

    Raises
    ------
    NoPLD
        The kept support or the losses' span is too large for the grid.

    References
    ----------
    [CKS20]_ (the discrete Gaussian); [DGKKM22]_ (losses rounded up to the grid).
    """
    d = int(sensitivity)
    s2 = sigma * sigma
    T = int(math.ceil(sigma * math.sqrt(2 * math.log(1e40)))) + d + 1
    if 2 * T + d + 1 > MAX_POINTS:
        raise NoPLD(f"discrete Gaussian sigma={sigma:g}: support too large")
    x = np.arange(-T, T + d + 1)
    w = np.exp(-(x.astype(np.float64) ** 2) / (2 * s2))
    # normaliser: sum over Z; the kept part plus the tails outside [-T, T + d]
    tail_left = _gauss_tail(T + 1, s2)  # sum_{x <= -T-1} = sum_{x >= T+1}
    tail_right = _gauss_tail(T + d + 1, s2)
    Z = float(np.sum(w)) + tail_left + tail_right
    masses = w / Z
    # loss (d^2 - 2 d x) / (2 sigma^2), sigma^2 the exact square of the float sigma
    idx, slack = _ceil_exact(d * d - 2 * d * x, 1 / (2 * Fraction(sigma) ** 2), h)
    abs_err = np.zeros(x.size)
    # the right tail (most negative losses) moved to the lowest kept loss: error there
    lowest = int(np.argmin(idx))
    abs_err[lowest] += tail_right / Z * 2
    return from_atoms(h, idx, masses, 0.0, rel_err=(x.size + 64) * U, abs_err=abs_err,
                      inf_err=2 * tail_left / Z, slack=slack)


def _gauss_tail(m: int, s2: float) -> float:
    """Upper bound on sum_{x >= m} e^{-x^2 / (2 s2)} (m >= 1)."""
    first = math.exp(-(m * m) / (2 * s2))
    ratio = math.exp(-(2 * m + 1) / (2 * s2))
    return first / (1 - ratio) if ratio < 1 else math.inf


def lower_hull(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of a convex chain through some of the points (x, y), x increasing, below or
    through the others up to rounding: the lower convex hull, with a safety margin.

    A point is kept as a vertex only when it lies below the chord of its neighbours by more
    than the rounding error of the orientation test (with x known to a relative 4u), so
    the chain is *strictly* convex in exact arithmetic; nearly collinear points are passed
    over, which may put the chain a hair above one of them. Either way the chain is an
    upper estimate of every convex f with f(x_i) <= y_i: between two of its vertices v, w,
    f lies below its own chord, which lies below the chord of (x_v, y_v), (x_w, y_w).

    Parameters
    ----------
    x, y : ndarray of float
        The points, ``x`` increasing.

    Returns
    -------
    ndarray of int
        Indices of the chain's vertices (the first and last point included).

    Raises
    ------
    ValueError
        Not raised for valid input; arguments are not checked (an internal building
        block: the callers in :mod:`shuffledp.accounting.events` validate them).

    References
    ----------
    [DGKKM22]_ Alg. 1 (the convex chain the Connect-the-Dots PLD is built on).
    """
    out: list[int] = []
    for i in range(x.size):
        while len(out) >= 2:
            a, b = out[-2], out[-1]
            dxb, dyb = x[b] - x[a], y[b] - y[a]
            dxi, dyi = x[i] - x[a], y[i] - y[a]
            t1, t2 = dxb * dyi, dyb * dxi
            cross = t1 - t2  # > 0: b strictly below the chord a -> i
            tol = 16 * U * ((abs(x[a]) + abs(x[b]) + abs(x[i])) * (abs(dyi) + abs(dyb))
                            + abs(t1) + abs(t2))
            if cross <= tol:
                out.pop()
            else:
                break
        out.append(i)
    return np.array(out, dtype=np.int64)


def from_curve(delta_at: Callable[[float], float], h: float, eps_top: float, *,
               floor: float = 1e-15, label: str = "curve", max_points: int = 2_000_000,
               stride: int = 1) -> LossPMF:
    """Symmetric pessimistic PLD of a mirror-symmetric pair from upper estimates of its
    hockey-stick curve.

    ``delta_at(eps)`` returns an upper estimate of max(H_{e^eps}(P || Q), H_{e^eps}(Q || P))
    for eps >= 0 (the curve is non-increasing and its value at and beyond the largest
    finite loss ``eps_top`` is the pair's infinity mass). The grid is 0, h, 2h, ... up to
    the first point where the estimate is <= ``floor`` or the first point >= ``eps_top``,
    *where the estimate is still evaluated* (it is the infinity mass, not 0); the curve is
    flat from there on. Negative epsilons follow from H_{e^-e}(P||Q) = 1 - e^-e +
    e^-e H_{e^e}(Q||P), and (alpha, delta) = (0, 1) holds for every pair. The points become
    a running minimum (the curve is non-increasing) and a convex chain through some of them
    (:func:`lower_hull`), both still upper estimates of the convex curve; the PLD is the
    Connect-the-Dots distribution of the chain ([DGKKM22]_ Alg. 1): mass alpha_v (s_right -
    s_left) at a vertex alpha_v = e^{v h}, where s are the slopes of the chain in alpha,
    and 0 elsewhere. Its total mass is 1 and its second distribution's mass (1 - y_1) /
    alpha_1 <= 1, so it is the PLD of a pair, whose curve is the chain.

    With ``stride`` s > 1 the estimates are computed at every s-th grid point (and at the
    last) and the points between are read off the chord of their neighbours in alpha: a
    convex curve lies below its chords, so these are upper estimates too (the chain then
    costs a little curvature over s steps, for s times fewer evaluations).

    Error model: each computed mass is within 16 u alpha_v (|s_left| + |s_right|) of the
    exact one (the slopes are ratios of exact differences of the points with alpha
    differences from expm1, accurate to a few ulps).

    Parameters
    ----------
    delta_at : callable
        eps -> an upper estimate of the curve at eps >= 0.
    h : float
        Grid step.
    eps_top : float
        Upper bound on the finite losses.
    floor : float
        The curve is cut (flat) from the first point where it is <= ``floor``.
    label : str
        Names the pair in messages.
    max_points : int
        Most grid points evaluated.
    stride : int
        Evaluate every ``stride``-th grid point (chords in between).

    Returns
    -------
    LossPMF
        The symmetric pessimistic law.

    Raises
    ------
    ValueError
        An estimate is not a number in [0, 1].
    NoPLD
        The curve needs more than ``max_points`` grid points.

    References
    ----------
    [DGKKM22]_ Alg. 1.
    """
    top = max(1, math.ceil(eps_top / h - 1e-9))
    stride = max(1, int(stride))
    js: list[int] = []
    ds: list[float] = []
    j = 0
    while True:
        e = j * h
        d = float(delta_at(e))
        if not (math.isfinite(d) and d >= 0):
            raise ValueError(f"{label}: no certified divergence at eps={e:.6g} (got {d!r})")
        js.append(j)
        ds.append(min(d, 1.0))
        if d <= floor or j >= top:
            break
        j = min(j + stride, top)
        if j > max_points:
            raise NoPLD(f"{label}: the curve needs more than {max_points} grid points at "
                        f"discretization {h:g}")
    known = np.minimum.accumulate(np.array(ds))
    if stride > 1 and len(js) > 1:
        grid_j = np.arange(js[-1] + 1)
        # chords in alpha = e^{j h} between the evaluated points
        vals = np.interp(np.exp(grid_j * h), np.exp(np.array(js) * h), known)
        vals[js] = known
        vals = vals * (1 + 4 * U)  # the interpolation's rounding, upwards
    else:
        vals = known
    pos = np.minimum.accumulate(np.array(vals))
    K = pos.size - 1
    ks = np.arange(1, K + 1)[::-1]
    neg = -np.expm1(-ks * h) + np.exp(-ks * h) * pos[1:][::-1]
    y = np.minimum.accumulate(np.concatenate([[1.0], neg, pos]))
    grid = np.concatenate([[-K - 1], -ks, np.arange(K + 1)])  # -K-1 stands for alpha = 0
    alpha = np.exp(grid * h)
    alpha[0] = 0.0
    hull = lower_hull(alpha, y)
    xa, ya = alpha[hull], y[hull]
    dx = np.diff(xa)
    if hull.size > 2:
        dx[1:] = alpha[hull[1:-1]] * np.expm1((grid[hull[2:]] - grid[hull[1:-1]]) * h)
    slopes = np.diff(ya) / dx
    s_left = slopes
    s_right = np.concatenate([slopes[1:], [0.0]])
    verts = hull[1:]
    masses = np.maximum(xa[1:] * (s_right - s_left), 0.0)
    n = grid.size
    probs = np.zeros(n)
    probs[verts] = masses
    err = np.zeros(n)
    err[verts] = 16 * U * xa[1:] * (np.abs(s_left) + np.abs(s_right))
    inf = float(y[-1])
    # drop the alpha = 0 anchor (no mass there: it starts the first segment)
    return _with_bounds(h, -K, probs[1:], inf, 4 * U * inf, err[1:])


# ----------------------------------------------------------------------------- operations
def _split_cap_sum(l0: int, step: int, h: float, lam: float, log_q: float, j: int) -> float:
    """log of sum_{k < j} Qm e^{(1 + lam)(l0 + step k) h}: the clip bound of the low entries
    (an exact mass at loss l is at most Qm e^{l h}, Qm the second distribution's mass)."""
    if j <= 0:
        return -math.inf
    q = (1 + lam) * h
    return log_q + q * l0 + _log_geometric(q * step, 0, j - 1)


def _fft_part(l0: int, step: int, n: int, h: float, lam: float, lam0: float, shift: float,
              log_l2: float, j: int) -> float:
    """log of ||f||_2 sqrt(sum_{j <= k < n} e^{2 ((lam - lam0)(l0 + step k) h + shift)}): the
    FFT error of the tilted entries k >= j, untilted and weighted (Cauchy-Schwarz)."""
    if j >= n:
        return -math.inf
    q = 2 * (lam - lam0) * h
    g = q * l0 + _log_geometric(q * step, j, n - 1)
    return log_l2 + 0.5 * g + shift


def _stride(probs: np.ndarray) -> tuple[int, int]:
    """(g, r): every non-zero entry sits at an index = r (mod g), g as large as possible."""
    nz = np.flatnonzero(probs)
    if nz.size <= 1:
        return 0, int(nz[0]) if nz.size else 0
    g = int(np.gcd.reduce(np.diff(nz)))
    return g, int(nz[0] % g)


def _retilt(a: LossPMF, lam: float) -> tuple[np.ndarray, float, float]:
    """(t, s, rho): the masses of ``a`` tilted by e^{lam l h} as t_i e^{s} with the largest
    t_i = 1, and the relative rounding rho of the entries (4u, or 1024u when some entry
    goes through logarithms to avoid an overflowing factor)."""
    idx = a.lower + np.arange(a.size)
    x = (lam - a.tilt) * a.h * idx
    p = a.probs
    nz = p > 0
    if not np.any(nz):
        return np.zeros(a.size), a.scale, 4 * U
    with np.errstate(divide="ignore"):
        logw = np.where(nz, np.log(np.where(nz, p, 1.0)) + x, -np.inf)
    s = float(logw.max())
    expo = x - s
    big = expo > 700.0
    with np.errstate(over="ignore", under="ignore"):
        t = np.where(big, np.exp(np.minimum(logw - s, 0.0)), p * np.exp(np.minimum(expo, 700)))
    t = np.where(nz, t, 0.0)
    return t, s + a.scale, (1024 * U if np.any(big & nz) else 4 * U)


def convolve(a: LossPMF, b: LossPMF, tilt: float | None = None, *,
             tail: float = TAIL) -> LossPMF:
    """The law of the sum of independent losses (composition), with proven error bounds.

    Both operands are tilted by e^{tilt l h} (``tilt`` None: the operands' common tilt, or
    the larger) and normalised to a largest entry of 1; when both supports lie on lattices
    with a common stride g > 1 the product is computed on the lattice (the off-lattice
    entries are exactly 0). The product is direct when the lengths multiply to at most
    :data:`DIRECT_MAX` and an FFT otherwise; it stays in the tilt. Exact tilted masses lie
    in [0, cap_l], cap_l the smallest Chernoff bound M(lambda) e^{(tilt - lambda) l h}
    (lambda on the tracked grid and the tilt itself, and 1 for a mass); clipping to it can
    only reduce the error. The result is truncated where a Chernoff bound on the exact law
    leaves at most ``tail`` (see the module notes).

    Parameters
    ----------
    a, b : LossPMF
        The laws, on one grid.
    tilt : float, optional
        Exponential tilt lambda of the product.
    tail : float
        Mass a truncation may leave out (charged to the error).

    Returns
    -------
    LossPMF
        The law of the sum, with its error bound.

    Raises
    ------
    ValueError
        The laws are on different grids.
    NoPLD
        The result spans more grid points than the limit.

    References
    ----------
    [KJH20]_ (FFT composition); [Higham02]_ Thm 24.2 (its error); [ZDW22]_ Thm 10.
    """
    if a.h != b.h:
        raise ValueError(f"cannot compose PLDs on different grids: {a.h} and {b.h}")
    h = a.h
    n = a.size + b.size - 1
    lower = a.lower + b.lower
    if n > MAX_POINTS:
        raise NoPLD(f"the composition spans {n} grid points at discretization {h:g}, more "
                    f"than {MAX_POINTS}")
    lam0 = float(tilt) if tilt is not None else (a.tilt if a.tilt == b.tilt
                                                  else max(a.tilt, b.tilt))
    mgf_lams = sorted(set(MGF_GRID) | {lam0})
    log_mgf = {lam: a.log_mgf_at(lam) + b.log_mgf_at(lam) + 4 * U for lam in mgf_lams}
    log_q = log_mgf[-1.0]
    # error bounds tracked at 0 and around the tilt (others convert, see log_err_at); with
    # no tilt asked for, on the default grid too
    lams = sorted({0.0, lam0 / 2, lam0, 2 * lam0} | (set(ERR_GRID) if tilt is None else set()))
    prop = {}
    for lam in lams:
        ea, eb = a.log_err_at(lam), b.log_err_at(lam)
        na, nb = a.log_norm(lam), b.log_norm(lam)
        prop[lam] = _lse(ea + nb, na + eb, ea + eb)
    same = b is a
    ta, sa, rho_a = _retilt(a, lam0)
    tb, sb, rho_b = (ta, sa, rho_a) if same else _retilt(b, lam0)
    rho = max(rho_a, rho_b)
    shift = sa + sb
    # the common lattice of the supports
    ga, ra = _stride(ta)
    gb, rb = (ga, ra) if same else _stride(tb)
    g = math.gcd(ga, gb) if ga and gb else max(ga, gb, 1)
    g = max(g, 1)
    ca = ta[ra % g::g]
    cb = ca if same else tb[rb % g::g]
    r0 = ra % g + rb % g  # position (in the result) of the first lattice entry
    m_out = ca.size + cb.size - 1
    l0 = lower + r0
    log_ta, log_tb = _log_weighted(ta, 0, 1.0, 0.0), _log_weighted(tb, 0, 1.0, 0.0)
    if ca.size * cb.size <= DIRECT_MAX:
        z = np.convolve(ca, cb)
        m = min(ca.size, cb.size)
        gam = m * U / (1 - m * U) + 2 * rho + rho * rho
        log_conv = {lam: math.log(gam) + a.log_norm(lam) + b.log_norm(lam) + 8 * U
                    for lam in lams}
    else:
        N = 1 << max(1, (m_out - 1).bit_length())
        fa = np.fft.rfft(ca, N)
        fb = fa if same else np.fft.rfft(cb, N)
        z = np.fft.irfft(fa * fb, N)[:m_out]
        log_l2 = math.log(fft_convolution_error(N, rho)) + log_ta + log_tb
        cands = sorted({0, m_out} | {int(q) for q in np.linspace(0, m_out, 65)})
        log_conv = {}
        for lam in lams:
            log_conv[lam] = min(
                _lse(_split_cap_sum(l0, g, h, lam, log_q, j),
                     _fft_part(l0, g, m_out, h, lam, lam0, shift, log_l2, j))
                for j in cands)
    # caps of the exact tilted masses at the lattice points, in units of e^{shift}
    lines = [(lm, lam0 - lam) for lam, lm in log_mgf.items() if math.isfinite(lm)]
    lines.append((0.0, lam0))  # a mass is at most 1
    zc = _clip_to_caps(z, lines, l0, g, h, shift)
    c = np.zeros(n)
    c[r0:r0 + g * (m_out - 1) + 1:g] = zc
    log_err = {lam: _lse(prop[lam], log_conv[lam]) + 4 * U for lam in lams}
    inf = a.inf + b.inf * (1.0 - a.inf)
    inf_err = a.inf_err + b.inf_err + 4 * U * inf
    out = LossPMF(h, lower, c, inf, inf_err, log_err, log_mgf, tilt=lam0, scale=shift,
                  slack=_up(a.slack + b.slack))
    return _truncate(out, tail)


def _clip_to_caps(z: np.ndarray, lines: list[tuple[float, float]], l0: int, step: int,
                  h: float, shift: float) -> np.ndarray:
    """z clipped to [0, exp(min_k (off_k + slope_k l h) - shift)] at l = l0 + step i.

    The minimum of the lines is taken exactly on every stretch between 257 sample points
    where one line is smallest at both ends (a line below both there would be below at an
    end too), and over the two end lines on the other stretches (which can only leave the
    cap larger: still a valid clip)."""
    m = z.size
    xs = np.unique(np.linspace(0, m - 1, min(m, 257)).astype(np.int64))
    offs = np.array([o for o, _ in lines])
    slopes = np.array([sl for _, sl in lines])
    vals = offs[:, None] + slopes[:, None] * ((l0 + step * xs) * h)[None, :]
    arg = np.argmin(vals, axis=0)
    out = np.maximum(z, 0.0)
    for k in range(xs.size):
        i0 = xs[k]
        i1 = xs[k + 1] if k + 1 < xs.size else m
        if i1 <= i0:
            continue
        ks = {int(arg[k])} | ({int(arg[k + 1])} if k + 1 < xs.size else set())
        x = (l0 + step * np.arange(i0, i1)) * h
        logcap = np.min([offs[j] + slopes[j] * x for j in ks], axis=0) - shift
        with np.errstate(over="ignore", under="ignore"):
            cap = np.exp(np.minimum(logcap, 700.0))
        np.minimum(out[i0:i1], cap, out=out[i0:i1])
    return out


def _truncate(c: LossPMF, tail: float) -> LossPMF:
    """Cut the support where the exact law's Chernoff tails are <= tail (module notes)."""
    h, lower, n = c.h, c.lower, c.size
    log_tail = math.log(tail)
    # upper: P(L >= x) <= M(lam) e^{-lam x}; the smallest x with the bound <= tail
    x_up = min(((lm - log_tail) / lam for lam, lm in c.log_mgf.items() if lam > 0),
               default=math.inf)
    # lower: P(L <= x) <= M(lam) e^{-lam x} for lam < 0
    x_lo = max(((log_tail - lm) / -lam for lam, lm in c.log_mgf.items() if lam < 0),
               default=-math.inf)
    hi = n - 1
    if math.isfinite(x_up):
        hi = min(hi, math.ceil(x_up / h) - 1 - lower)  # P(L >= (hi + 1 + lower) h) <= tail
    lo = 0
    if math.isfinite(x_lo):
        lo = max(lo, math.floor(x_lo / h) + 1 - lower)  # P(L <= (lo - 1 + lower) h) <= tail
    hi = max(hi, 0)
    lo = min(lo, hi)
    if lo == 0 and hi == n - 1:
        return c
    inf, inf_err = c.inf, c.inf_err
    log_err, log_mgf = dict(c.log_err), dict(c.log_mgf)
    if hi < n - 1:
        # the exact mass above the cut (<= tail, Chernoff) goes to +infinity; the computed
        # array just drops it, so the infinity mass's error grows by at most tail
        inf_err = inf_err + tail
    if lo > 0:
        at = (lower + lo) * h
        # the exact mass moved (<= tail) sits at the new lowest point; nothing is added to
        # the computed array, so the error there grows by at most tail
        log_err = {lam: _lse(le, log_tail + lam * at) for lam, le in log_err.items()}
        log_mgf = {lam: (_lse(lm, log_tail + lam * at) if lam > 0 else lm)
                   for lam, lm in log_mgf.items()}
    return LossPMF(h, lower + lo, c.probs[lo:hi + 1], inf, inf_err, log_err, log_mgf,
                   tilt=c.tilt, scale=c.scale, slack=c.slack)


def self_compose(a: LossPMF, k: int, tilt: float | None = None, *,
                 tail: float = TAIL) -> LossPMF:
    """k-fold composition by repeated squaring (each product bounded as in
    :func:`convolve`).

    Parameters
    ----------
    a : LossPMF
        The law.
    k : int
        Number of compositions (>= 1).
    tilt : float, optional
        Exponential tilt of the products.
    tail : float
        Mass each truncation may leave out.

    Returns
    -------
    LossPMF
        The law of the sum of k independent copies.

    Raises
    ------
    ValueError
        ``k`` < 1.
    NoPLD
        A product spans more grid points than the limit.

    References
    ----------
    [KJH20]_; [ZDW22]_ Thm 10.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got k={k!r}")
    result: LossPMF | None = None
    base = a
    while True:
        if k & 1:
            result = base if result is None else convolve(result, base, tilt, tail=tail)
        k >>= 1
        if not k:
            break
        base = convolve(base, base, tilt, tail=tail)
    assert result is not None
    return result


def mix_infinity(a: LossPMF, tau: float) -> LossPMF:
    """The law of ((1 - tau) P + tau [top], (1 - tau) Q + tau [bottom]) (disjoint atoms):
    finite masses scaled by (1 - tau), tau more at +infinity.

    Parameters
    ----------
    a : LossPMF
        The law of the pair (P, Q).
    tau : float
        Weight of the disjoint atoms, in [0, 1].

    Returns
    -------
    LossPMF
        The mixed law.

    Raises
    ------
    ValueError
        Not raised for valid input; arguments are not checked (an internal building
        block: the callers in :mod:`shuffledp.accounting.events` validate them).

    References
    ----------
    [KOV15]_ Thm 2.1 (the mass at infinity of an (eps, delta) pair).
    """
    if tau <= 0:
        return a
    s = 1.0 - tau
    ls = math.log(s) if s > 0 else -math.inf
    log_err = {lam: _lse(le + ls, math.log(2 * U) + a.log_norm(lam) + ls)
               for lam, le in a.log_err.items()}
    log_mgf = {lam: lm + ls + 2 * U for lam, lm in a.log_mgf.items()}
    err = None if a.err_entries is None else a.err_entries * s * (1 + 2 * U) + \
        2 * U * a.masses() * s
    inf = a.inf * s + tau
    return LossPMF(a.h, a.lower, a.probs * s, min(inf, 1.0), a.inf_err * s + 4 * U * inf,
                   log_err, log_mgf, tilt=a.tilt, scale=a.scale, err_entries=err,
                   slack=a.slack)


# ----------------------------------------------------------------------------- a PLD
@dataclass(frozen=True, eq=False)
class PLD:
    """A PLD in both directions (``add`` is None for a symmetric pair).

    Attributes
    ----------
    remove : LossPMF
        The law of the loss ln(P/Q) under P.
    add : LossPMF or None
        The other direction's, or None when the pair is symmetric.
    """

    remove: LossPMF
    add: LossPMF | None = None

    @property
    def directions(self) -> tuple[LossPMF, ...]:
        return (self.remove,) if self.add is None else (self.remove, self.add)

    @property
    def h(self) -> float:
        return self.remove.h

    def compose(self, other: PLD, tilt: float | None = None) -> PLD:
        if self.add is None and other.add is None:
            return PLD(convolve(self.remove, other.remove, tilt))
        return PLD(convolve(self.remove, other.remove, tilt),
                   convolve(self.add or self.remove, other.add or other.remove, tilt))

    def self_compose(self, k: int, tilt: float | None = None) -> PLD:
        if k == 1:
            return self
        return PLD(self_compose(self.remove, k, tilt),
                   None if self.add is None else self_compose(self.add, k, tilt))

    def with_infinity(self, tau: float) -> PLD:
        return PLD(mix_infinity(self.remove, tau),
                   None if self.add is None else mix_infinity(self.add, tau))

    def delta(self, eps: float) -> float:
        """Upper bound on the exact hockey-stick divergence at eps >= 0 (both directions)."""
        return min(1.0, max(d.delta(eps) for d in self.directions))

    def epsilon(self, delta: float) -> float:
        return max(d.epsilon(delta) for d in self.directions)

    def delta_on_grid(self, j_top: int) -> np.ndarray:
        """Upper bounds on delta(j h), j = 0..j_top (vectorised). With a slack s, delta(j h)
        <= the grid law's bound at j h - s, read as (j - q) h - r with s = q h + r."""
        out = np.zeros(j_top + 1)
        for d in self.directions:
            q, r = divmod(d.slack, self.h) if d.slack else (0.0, 0.0)
            q = int(q)
            g = d.delta_grid(j_top, r)
            if q:
                head = [d._delta_grid_law((j - q) * self.h - r)
                        for j in range(min(q, j_top + 1))]
                g = np.concatenate([head, g[:max(0, j_top + 1 - q)]])
            out = np.maximum(out, g)
        return np.minimum(out, 1.0)

    def error_at(self, eps: float) -> float:
        """The numerical-error part charged in :meth:`delta` at eps."""
        return max(d._err_term(eps - d.slack) + d.inf_err for d in self.directions)

    def infinity_mass(self) -> float:
        return max(d.inf + d.inf_err for d in self.directions)

    def max_loss(self) -> float:
        return max(d.max_loss() for d in self.directions)

    def log_mgf(self, lam: float) -> float:
        return max(d.log_mgf_at(lam) for d in self.directions)



def chernoff_tilt(log_mgf: Callable[[float], float], *, eps: float | None = None,
                  log_delta: float | None = None) -> float:
    """The weight lambda > 0 of the best Chernoff bound: for a target ``eps``,
    argmin log M(lambda) - lambda eps; for a target delta, argmin (log M(lambda) -
    log delta) / lambda (the eps it certifies). Powers of 2 in [1/64, 16], then a
    golden-section search within a factor 2 of the best (any tilt is valid; a good one keeps
    the charged error small).

    Parameters
    ----------
    log_mgf : callable
        lambda -> log M(lambda), the log moment generating function of the loss.
    eps, log_delta : float, optional
        The target: exactly one of epsilon or log delta.

    Returns
    -------
    float
        The tilt lambda.

    Raises
    ------
    Exception
        Only what ``log_mgf`` raises (a non-finite value of it is skipped, and 1.0 is
        returned when every value is).

    References
    ----------
    [MM18]_ (Chernoff bounds on composed privacy losses).
    """

    def f(lam: float) -> float:
        lm = log_mgf(lam)
        if not math.isfinite(lm):
            return math.inf
        return lm - lam * eps if eps is not None else (lm - (log_delta or 0.0)) / lam

    coarse = [2.0 ** j for j in range(-6, 5)]
    vals = [f(x) for x in coarse]
    k = int(np.argmin(vals))
    if not math.isfinite(vals[k]):
        return 1.0
    lo, hi = math.log(coarse[k] / 2), math.log(coarse[k] * 2)
    g = (math.sqrt(5) - 1) / 2
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = f(math.exp(x1)), f(math.exp(x2))
    for _ in range(12):
        if f1 <= f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - g * (hi - lo)
            f1 = f(math.exp(x1))
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + g * (hi - lo)
            f2 = f(math.exp(x2))
    best = min([(vals[k], coarse[k]), (f1, math.exp(x1)), (f2, math.exp(x2))])
    return float(best[1])


__all__ = ["DIRECT_MAX", "ERR_GRID", "MAX_POINTS", "MGF_GRID", "PLD", "TAIL", "LossPMF",
           "NoPLD", "chernoff_tilt", "convolve", "discrete_gaussian", "discrete_laplace",
           "fft_convolution_error", "fft_kappa", "from_atoms", "from_curve", "lower_hull",
           "mix_infinity", "pure_pair", "self_compose"]
