"""Item mechanisms with exact alpha0 d_X-DP on a finite metric space, sampled exactly.

An item mechanism A maps an item x of a finite metric space (X, d_X) to an output y with
probability P(y | x); it is alpha0 d_X-DP when P(y | x) <= e^{alpha0 d_X(x, x')} P(y | x')
for all x, x', y ([Imola]_ Sec. 2, the item-level notion that PrivEMDItemWise lifts to the
user level).

Every mechanism here is given by *integer* weights W[x, y] >= 1 and is sampled exactly from
them: y is drawn with probability W[x, y] / T_x (T_x = sum_y W[x, y] < 2^63) by an
inverse-CDF search of a uniform integer u in [0, T_x), which is drawn by rejection from the
top bits of uniform 64-bit words of :func:`shuffledp.randomness.word_source` (the secure
generator by default). There are no floating-point artefacts in the output law: the
realised pmf *is* W / T, and the privacy ratio of that pmf is what the tests check exactly
(:func:`realised_alpha0`, in 60-digit arithmetic on every pair of a small domain).

The weights are roundings of exp(-c alpha0' d_X(x, y)) to integers of about 2^62 / k; the
design parameter alpha0' is alpha0 minus a margin that provably absorbs the rounding (see
:func:`_design_alpha0`), so the realised mechanism is alpha0 d_X-DP, and for the tight
mechanisms its realised parameter is within about 1e-9 relative of alpha0.

Mechanisms
----------
:class:`ExponentialMechanism`
    P(y | x) ~ exp(-alpha0 d_X(x, y) / 2): alpha0 d_X-DP on every finite metric space (the
    score changes by at most d_X(x, x') and so does the normaliser's log). On a row-regular
    space (every point sees the same multiset of distances) the normaliser does not depend
    on x, and the score -alpha0 d_X (no factor 1/2) is alpha0 d_X-DP and tight
    (``tight=True``); this is what GKRR is on B x C.
:class:`PlanarLaplace`
    Geo-indistinguishability ([ABCP13]_) on a grid of the unit square: a planar Laplace
    draw around the item's cell centre, clamped to the square and remapped to its cell;
    the cell pmf is computed by quadrature and rounded like the others.
:class:`GKRR`
    The generalised k-randomised response of [Imola]_ Sec. 6.2 (the display after Thm 6.5)
    on B x C: weights e^{alpha0} (y = x), e^{(1 - r) alpha0} (same cluster), 1 (other
    clusters), sampled in O(1) per item, with the closed-form unbiased debiasing of
    Alg. 4 (:meth:`GKRR.debias`).

References
----------
.. [Imola] Imola et al. (preprint), "Metric DP at the User-Level", Sec. 2, 6.2, Alg. 4
   -- full entry in docs/references.md
.. [ABCP13] Andres et al. (2013), "Geo-Indistinguishability" -- full entry in docs/references.md
.. [KOV16] Kairouz et al. (2016), "Discrete Distribution Estimation"
   -- full entry in docs/references.md
.. [MT07] McSherry, Talwar (2007), "Mechanism Design via DP" -- full entry in docs/references.md
.. [Lemire19] Lemire (2019), "Fast Random Integer Generation" -- full entry in docs/references.md
"""

from __future__ import annotations

import math

import mpmath
import numpy as np

from shuffledp import _validation as v
from shuffledp.encoders.metric.spaces import MetricSpace, grid_space, product_space
from shuffledp.randomness import RngLike, SecureRandom, WordSource, word_source

#: total weight of a row is below 2^62 (uniform integers by rejection from 64-bit words)
_ROW_BITS = 62
#: refuse a design whose smallest integer weight is below this (rounding would dominate)
_MIN_WEIGHT = 2.0**24
#: relative float error of exp and the product by the scale (a generous bound)
_FLOAT_REL = 2.0**-50
#: items per chunk when sampling
_CHUNK = 1 << 22


def _iv_alpha0(alpha0) -> float:
    a = v.positive("alpha0", alpha0)
    if a > 40:
        raise ValueError(f"alpha0 must be <= 40 (weights e^-alpha0 d underflow the integer "
                         f"design), got alpha0={alpha0!r}")
    return a


def _design_alpha0(alpha0: float, c: float, k_out: int, d_min: float) -> tuple[float, float]:
    """(alpha0', scale M) so that rounded weights floor(M e^{-c alpha0' d}) are alpha0 d_X-DP.

    Each weight and each row total is within a relative error rho = 1/W_min + 2^-50 of its
    ideal value, so a realised log-ratio exceeds the ideal one (<= alpha0' d_X(x, x')) by at
    most 4 rho / (1 - rho) <= 5 rho. With alpha0' = alpha0 - 5 rho / d_min, alpha0' d + 5 rho
    <= alpha0 d for every d >= d_min, the smallest distance between two points.
    """
    M = float(2**_ROW_BITS // k_out)
    w_min = math.floor(M * math.exp(-c * alpha0))
    if w_min < _MIN_WEIGHT:
        raise ValueError(f"alpha0={alpha0} is too large for k={k_out} outputs (smallest "
                         f"weight e^-alpha0 would be {w_min} < 2^24); lower alpha0")
    rho = 1.0 / w_min + _FLOAT_REL
    return alpha0 - 5.0 * rho / d_min, M


class ItemMechanism:
    """A finite mechanism given by integer weights W[x, y]; pmf W[x, y] / T_x.

    Subclasses set ``space``, ``alpha0`` and implement :meth:`weights`.

    Attributes
    ----------
    space : MetricSpace
        The item domain (inputs are indices 0..k-1).
    alpha0 : float
        The mechanism is alpha0 d_X-DP for one item ([Imola]_ Sec. 2).
    name : str
        A label for reports.
    """

    space: MetricSpace
    alpha0: float
    name: str = "item mechanism"

    def weights(self) -> np.ndarray:
        """Integer weights, shape (k, k_out), dtype uint64; row sums < 2^62."""
        raise NotImplementedError

    @property
    def k_out(self) -> int:
        return self.space.k

    def pmf(self, x: int) -> np.ndarray:
        """P(. | x) as float64 (the exact law is weights()[x] / its sum)."""
        x = v.bounded_count("x", x, 0, self.space.k - 1)
        w = self.weights()[x].astype(np.float64)
        return w / w.sum()

    def transition_matrix(self) -> np.ndarray:
        """A[x, y] = P(y | x), float64, shape (k, k_out)."""
        w = self.weights().astype(np.float64)
        return w / w.sum(axis=1, keepdims=True)

    def sample(self, items, rng: RngLike | SecureRandom = None) -> np.ndarray:
        """One output per item (int64), drawn exactly from the integer weights.

        Parameters
        ----------
        items : array_like of int
            Item indices in 0..k-1.
        rng : None, SecureRandom, int or Generator
            None: the cryptographically secure generator (a private release). A seed or a
            Generator: reproducible research runs only.
        """
        x = self.space.items("items", items)
        words = word_source(rng)
        cum = np.cumsum(self.weights(), axis=1, dtype=np.uint64)
        shifts = np.array([_shift(T) for T in cum[:, -1]], dtype=np.uint64)
        out = np.empty(x.size, dtype=np.int64)
        for lo in range(0, x.size, _CHUNK):
            xs = x[lo:lo + _CHUNK]
            u = uniform_below(cum[xs, -1], shifts[xs], words)
            out[lo:lo + _CHUNK] = _search_rows(cum, xs, u)
        return out


def rr_weights(epsilon: float, unit: int = 1 << 24) -> tuple[int, int]:
    """(w_in, w_out) = (floor(unit e^eps), unit), floor taken in 50-digit arithmetic.

    The integer weights of a randomised response whose two output probabilities are in
    ratio w_in / w_out: its realised epsilon ln(w_in / w_out) is <= eps and within
    1 / unit of it.

    Parameters
    ----------
    epsilon : float
        The randomised response's epsilon, > 0.
    unit : int
        The weight of the "other" output (the resolution), >= 1.

    Returns
    -------
    (int, int)
        ``(w_in, w_out)``.

    Raises
    ------
    ValueError
        If ``epsilon`` is not a finite positive number or ``unit`` < 1.
    TypeError
        If ``unit`` is not an integer.

    References
    ----------
    [KOV16]_ (k-randomised response, output probabilities in ratio e^eps).
    """
    unit = v.count("unit", unit)
    eps = v.positive("epsilon", epsilon)
    with mpmath.workdps(50):
        return int(mpmath.floor(unit * mpmath.e ** mpmath.mpf(eps))), unit


def one_item_per_user(items: np.ndarray, words: WordSource) -> np.ndarray:
    """One of each user's m items, uniformly (exact integer sampling), shape (n,).

    Parameters
    ----------
    items : ndarray, shape (n, m)
        Each row holds one user's m >= 1 items.
    words : callable
        A word source (:func:`shuffledp.randomness.word_source`).

    Returns
    -------
    ndarray, shape (n,)
        The chosen item of each user (dtype of ``items``).

    Raises
    ------
    ValueError
        If ``items`` is not 2D with at least one column.

    References
    ----------
    [Imola]_ Sec. 6 (the user-level baselines report one sampled item per user).
    """
    items = np.asarray(items)
    if items.ndim != 2 or items.shape[1] < 1:
        raise ValueError(f"items must have shape (n, m) with m >= 1, got shape {items.shape}")
    n, m = items.shape
    pick = uniform_below(np.full(n, m, dtype=np.uint64),
                         np.full(n, _shift(m), dtype=np.uint64), words)
    return items[np.arange(n), pick.astype(np.int64)]


def _shift(total: int) -> int:
    """64 - bit length of total - 1: word >> shift is uniform on [0, 2^b) with 2^b >= total."""
    return 64 - (int(total) - 1).bit_length()


def uniform_below(totals: np.ndarray, shifts: np.ndarray, words: WordSource) -> np.ndarray:
    """u[i] uniform on {0, ..., totals[i] - 1} (uint64), exactly: top bits plus rejection.

    ``shifts[i] = _shift(totals[i])``: u = word >> shift is uniform on [0, 2^b) with
    b = bit length of totals[i] - 1, and is accepted when below totals[i] (probability
    > 1/2); rejected entries are redrawn from fresh words.

    Parameters
    ----------
    totals : ndarray of uint64
        The bounds, each >= 1.
    shifts : ndarray of uint64
        ``_shift(total)`` of each bound (precomputed by the callers, same shape).
    words : callable
        A word source (:func:`shuffledp.randomness.word_source`).

    Returns
    -------
    ndarray of uint64, shape of ``totals``

    Raises
    ------
    ValueError
        If a total is 0 (no value to draw: the rejection loop would never end) or the
        shapes of ``totals`` and ``shifts`` differ.

    References
    ----------
    Rejection sampling of uniform integers without modulo bias, as in [Lemire19]_.
    """
    t = np.asarray(totals, dtype=np.uint64)
    sh = np.asarray(shifts, dtype=np.uint64)
    if t.shape != sh.shape:
        raise ValueError(f"totals and shifts must have one shape, got {t.shape} and {sh.shape}")
    if t.size and int(t.min()) < 1:
        raise ValueError("totals must be >= 1 (a draw from an empty range never ends)")
    t, sh = t.ravel(), sh.ravel()
    out = np.empty(t.size, dtype=np.uint64)
    todo = np.arange(t.size)
    while todo.size:
        w = np.asarray(words(todo.size), dtype=np.uint64)
        s = sh[todo]
        u = np.where(s >= 64, np.uint64(0), w >> np.minimum(s, np.uint64(63)))
        ok = u < t[todo]
        out[todo[ok]] = u[ok]
        todo = todo[~ok]
    return out


def _search_rows(cum: np.ndarray, rows: np.ndarray, u: np.ndarray) -> np.ndarray:
    """y with cum[row, y - 1] <= u < cum[row, y] (vectorised binary search per row)."""
    lo = np.zeros(rows.size, dtype=np.int64)
    hi = np.full(rows.size, cum.shape[1] - 1, dtype=np.int64)
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = (lo + hi) >> 1
        right = cum[rows, mid] <= u
        lo = np.where(active & right, mid + 1, lo)
        hi = np.where(active & ~right, mid, hi)


class ExponentialMechanism(ItemMechanism):
    """P(y | x) ~ exp(-c alpha0 d_X(x, y)) over the domain itself, alpha0 d_X-DP ([MT07]_).

    Parameters
    ----------
    space : MetricSpace
    alpha0 : float
        Item-level d_X-DP parameter, in (0, 40].
    tight : bool, default False
        False: c = 1/2, valid on every metric space (score sensitivity d_X(x, x') and the
        normaliser's log changes by at most alpha0 d_X(x, x') / 2). True: c = 1, allowed
        only on a row-regular space (``space.row_regular``), where the normaliser is the
        same for every x and the ratio is exp(alpha0 (d(x', y) - d(x, y))) <=
        exp(alpha0 d(x, x')) by the triangle inequality, with equality at y = x.
    """

    def __init__(self, space: MetricSpace, alpha0: float, *, tight: bool = False) -> None:
        if not isinstance(space, MetricSpace):
            raise TypeError(f"space must be a MetricSpace, got space={space!r:.60}")
        self.space = space
        self.alpha0 = _iv_alpha0(alpha0)
        if tight and not space.row_regular:
            raise ValueError(f"tight=True needs a row-regular space (every point sees the same "
                             f"distances), got {space.name}; use tight=False (score / 2)")
        self.c = 1.0 if tight else 0.5
        self.name = f"exponential mechanism (score -{'' if tight else '1/2 '}alpha0 d_X)"
        self.alpha0_design, M = _design_alpha0(self.alpha0, self.c, space.k, space.min_distance)
        d = np.asarray(space.distances)
        self._w = np.floor(M * np.exp(-self.c * self.alpha0_design * d)).astype(np.uint64)
        self._w.setflags(write=False)

    def weights(self) -> np.ndarray:
        return self._w


class GKRR(ItemMechanism):
    """Generalised k-RR on B x C ([Imola]_ Sec. 6.2, display after Thm 6.5; [KOV16]_).

    P(y | (b, c)) is proportional to e^{alpha0} for y = (b, c), e^{(1 - r) alpha0} for
    y = (b, c'), c' != c, and 1 for y = (b', c'), b' != b. On the product space with
    d = 0 / r / 1 this is the tight exponential mechanism, so it is alpha0 d_X-DP with
    equality between two items of one cluster (ratio e^{r alpha0}) and two clusters
    (e^{alpha0}). Items are indexed b t + c.

    Parameters
    ----------
    s, t : int
        Number of clusters |B| and items per cluster |C| (k = s t >= 2).
    r : float
        Within-cluster distance, in (0, 1].
    alpha0 : float
        Item-level d_X-DP parameter.
    """

    def __init__(self, s: int, t: int, r: float, alpha0: float) -> None:
        self.space = product_space(s, t, r)
        self.s, self.t, self.r = self.space_params = (int(s), int(t), float(r))
        self.alpha0 = _iv_alpha0(alpha0)
        self.name = "GKRR"
        k = self.s * self.t
        d_min = self.r if self.t > 1 else 1.0
        self.alpha0_design, M = _design_alpha0(self.alpha0, 1.0, k, d_min)
        a = self.alpha0_design
        # scale so that the row total is just below 2^62: the rejection step of
        # uniform_below then accepts almost always (M only grows, so the rounding margin
        # of _design_alpha0, computed for the smaller scale, still holds)
        z = 1.0 + (self.t - 1) * math.exp(-self.r * a) + (k - self.t) * math.exp(-a)
        M = max(M, math.floor(2.0**_ROW_BITS / z * (1.0 - 1e-9)))
        # weights of y = x, same cluster, other cluster (ideal ratios e^{r a}, e^{a})
        self.w_same = int(M)
        self.w_cluster = int(math.floor(M * math.exp(-self.r * a)))
        self.w_other = int(math.floor(M * math.exp(-a)))
        self.total = self.w_same + (self.t - 1) * self.w_cluster + (k - self.t) * self.w_other

    def weights(self) -> np.ndarray:
        k, t = self.space.k, self.t
        cl = np.arange(k) // t
        w = np.where(cl[:, None] == cl[None, :], self.w_cluster, self.w_other).astype(np.uint64)
        np.fill_diagonal(w, self.w_same)
        return w

    def probabilities(self) -> tuple[float, float, float]:
        """(P(y = x), P(y = one given same-cluster item), P(y = one given other item))."""
        T = self.total
        return self.w_same / T, self.w_cluster / T, self.w_other / T

    def sample(self, items, rng: RngLike | SecureRandom = None) -> np.ndarray:
        """Exact O(1)-per-item inverse CDF over the three weight classes (see class doc)."""
        x = self.space.items("items", items)
        words = word_source(rng)
        out = np.empty(x.size, dtype=np.int64)
        for lo in range(0, x.size, _CHUNK):
            out[lo:lo + _CHUNK] = self._sample_chunk(x[lo:lo + _CHUNK], words)
        return out

    def _sample_chunk(self, x: np.ndarray, words: WordSource) -> np.ndarray:
        t = self.t
        n = x.size
        u = uniform_below(np.full(n, self.total, dtype=np.uint64),
                          np.full(n, _shift(self.total), dtype=np.uint64), words).astype(np.int64)
        b, c = np.divmod(x, t)
        j1 = u - self.w_same  # >= 0: not kept
        j2 = j1 - (t - 1) * self.w_cluster  # >= 0: other cluster
        jc = np.maximum(j1, 0) // self.w_cluster  # same-cluster index among the t - 1 others
        y_cluster = b * t + jc + (jc >= c)
        jo = np.maximum(j2, 0) // self.w_other  # index among the (s - 1) t other items
        bo, co = np.divmod(jo, t)
        y_other = (bo + (bo >= b)) * t + co
        return np.where(j1 < 0, x, np.where(j2 < 0, y_cluster, y_other))

    def debias(self, frequencies) -> np.ndarray:
        """Unbiased estimate F with F A = v, in closed form (no matrix inverse; Alg. 4).

        A = a I + b (I_s (x) J_t) + c J_k with a = p_same - p_cluster, b = p_cluster -
        p_other, c = p_other (exact rationals of the integer weights). Then sum(F) = sum(v),
        the cluster sums are S_F = (S_v - c t sum(F)) / (a + b t), and
        F = (v - b S_F[cluster] - c sum(F)) / a.

        Parameters
        ----------
        frequencies : array_like, shape (k,)
            v, the normalised histogram of the outputs.
        """
        vv = np.asarray(frequencies, dtype=np.float64)
        if vv.shape != (self.space.k,) or not np.all(np.isfinite(vv)):
            raise ValueError(f"frequencies must be a finite vector of shape ({self.space.k},), "
                             f"got shape {vv.shape}")
        T, t = self.total, self.t
        a = (self.w_same - self.w_cluster) / T
        b = (self.w_cluster - self.w_other) / T
        c = self.w_other / T
        total = vv.sum()
        sv = vv.reshape(self.s, t).sum(axis=1)
        sf = (sv - c * t * total) / (a + b * t)
        return (vv - b * np.repeat(sf, t) - c * total) / a


# ----------------------------------------------------------------------------- exact check
def realised_alpha0(mech: ItemMechanism, *, max_k: int = 64, dps: int = 60) -> mpmath.mpf:
    """max over x != x', y of ln(P(y|x) / P(y|x')) / d_X(x, x') for the realised integer pmf.

    Computed in ``dps``-digit arithmetic from the integer weights (the exact output law of
    :meth:`ItemMechanism.sample`) and the float64 distances taken as exact; the mechanism
    is alpha0 d_X-DP exactly when this is <= alpha0. Every pair of the domain is visited,
    so the domain is limited to ``max_k`` points.

    Parameters
    ----------
    mech : ItemMechanism
        The mechanism to check.
    max_k : int
        Largest domain accepted.
    dps : int
        Decimal digits of the arithmetic.

    Returns
    -------
    mpmath.mpf
        The realised alpha0 (0 for a constant mechanism).

    Raises
    ------
    ValueError
        If the domain has more than ``max_k`` points.

    References
    ----------
    [Imola]_ Sec. 2 (the item-level alpha0 d_X-DP notion checked here).
    """
    k = mech.space.k
    if k > max_k:
        raise ValueError(f"realised_alpha0 visits every pair: k={k} exceeds max_k={max_k}")
    W = mech.weights()
    d = np.asarray(mech.space.distances)
    with mpmath.workdps(dps):
        logw = [[mpmath.log(int(W[x, y])) for y in range(W.shape[1])] for x in range(k)]
        logt = [mpmath.log(int(sum(int(w) for w in W[x]))) for x in range(k)]
        best = mpmath.mpf(0)
        for x in range(k):
            for x2 in range(k):
                if x == x2:
                    continue
                worst = max(logw[x][y] - logw[x2][y] for y in range(W.shape[1]))
                best = max(best, (worst - logt[x] + logt[x2]) / mpmath.mpf(float(d[x, x2])))
        return +best


# ----------------------------------------------------------------------------- planar Laplace
#: Gauss-Legendre nodes per smooth angular piece of the cell integrals
_GL_NODES = 48
#: equal sub-pieces of every smooth angular piece (composite Gauss-Legendre)
_GL_PIECES = 8
#: largest grid (cells) of :class:`PlanarLaplace`: its privacy check is O(k^3) (~10 s at 1024)
_PLANAR_MAX_CELLS = 1024


def _gamma2_cdf(t: np.ndarray, eps: float) -> np.ndarray:
    """P(R <= t) for the planar Laplace radius R ~ Gamma(2, 1/eps) (t may be inf)."""
    et = eps * np.clip(np.nan_to_num(t, nan=0.0, posinf=1e12, neginf=0.0), 0.0, 1e12)
    return -np.expm1(-et) - et * np.exp(-et)


def _gamma2_sf(t: np.ndarray, eps: float) -> np.ndarray:
    """P(R > t) = e^{-eps t} (1 + eps t), accurate where the cdf is close to 1."""
    et = eps * np.clip(np.nan_to_num(t, nan=0.0, posinf=1e12, neginf=0.0), 0.0, 1e12)
    return np.exp(-et) * (1.0 + et)


def _radial_mass(t_in: np.ndarray, t_out: np.ndarray, eps: float) -> np.ndarray:
    """P(t_in < R <= t_out), as a difference of cdfs near the source and of survival
    functions far from it (no cancellation of two numbers close to 1)."""
    near = eps * np.clip(np.nan_to_num(t_in, nan=0.0, posinf=1e12), 0.0, 1e12) < 1.0
    return np.where(near, _gamma2_cdf(t_out, eps) - _gamma2_cdf(t_in, eps),
                    _gamma2_sf(t_in, eps) - _gamma2_sf(t_out, eps))


def _ray_slab(c: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Entry/exit distances of rays from 0 with direction cosine c through [lo, hi]."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a, b = lo / c, hi / c
    t0, t1 = np.minimum(a, b), np.maximum(a, b)
    inside = (lo <= 0) & (0 <= hi)
    zero = c == 0
    t0 = np.where(zero, np.where(inside, -np.inf, np.inf), t0)
    t1 = np.where(zero, np.where(inside, np.inf, -np.inf), t1)
    return np.nan_to_num(t0, nan=-np.inf), np.nan_to_num(t1, nan=np.inf)


def _rectangle_probabilities(Y0: np.ndarray, Y1: np.ndarray, X0: np.ndarray, X1: np.ndarray,
                             eps: float) -> np.ndarray:
    """Planar Laplace mass (centred at 0, cell units) of the rectangles [X0, X1] x [Y0, Y1]
    (bounds may be infinite), elementwise.

    In polar coordinates, P = (1/2pi) int (G(t_out) - G(t_in)) dtheta, with G the
    Gamma(2, 1/eps) cdf of the radius and [t_in, t_out] the part of the ray inside the
    rectangle. Between the angles of the corners and the axes the integrand is analytic, so
    Gauss-Legendre on each piece is accurate to about 1e-15.
    """
    corners = [np.arctan2(Y, X) for Y in (Y0, Y1) for X in (X0, X1)]
    axes = np.broadcast_to(np.arange(5).reshape((5,) + (1,) * Y0.ndim) * np.pi / 2,
                           (5,) + Y0.shape)
    breaks = np.concatenate([np.mod(np.stack(corners), 2 * np.pi), axes], axis=0)
    breaks = np.sort(np.nan_to_num(breaks, nan=0.0), axis=0)
    nodes, wts = np.polynomial.legendre.leggauss(_GL_NODES)
    # each smooth piece is cut into _GL_PIECES equal parts: near an axis the radial mass of a
    # half-infinite strip varies on an angular scale ~ eps * distance, small for small eps
    sub = (np.arange(_GL_PIECES)[:, None] + (nodes[None, :] + 1) / 2).ravel() / _GL_PIECES
    wsub = np.tile(wts, _GL_PIECES) / _GL_PIECES
    total = np.zeros(Y0.shape)
    for i in range(breaks.shape[0] - 1):
        a, b = breaks[i], breaks[i + 1]
        half = (b - a) / 2
        for z, wz in zip(2 * sub - 1, wsub):
            th = a + half * (z + 1)
            ct, st = np.cos(th), np.sin(th)
            tx0, tx1 = _ray_slab(ct, X0, X1)
            ty0, ty1 = _ray_slab(st, Y0, Y1)
            t_in = np.maximum(np.maximum(tx0, ty0), 0.0)
            t_out = np.minimum(tx1, ty1)
            val = np.where(t_out > t_in, _radial_mass(t_in, t_out, eps), 0.0)
            total += wz * half * val
    return total / (2 * np.pi)


def _axis_intervals(n: int) -> tuple[np.ndarray, np.ndarray]:
    """For source index s and target index t along one axis of n cells: ids of the relative
    interval [lo, hi] of cell t seen from the centre of s, and the table of those intervals.

    The interval is (t - s - 1/2, t - s + 1/2), with the first cell open to -inf and the last
    to +inf (the clamp): it depends on t - s and on whether t is first or last only.
    """
    s, t = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    off = (t - s).astype(float)
    lo = np.where(t == 0, -np.inf, off - 0.5)
    hi = np.where(t == n - 1, np.inf, off + 0.5)
    pairs = np.stack([lo.ravel(), hi.ravel()], axis=1)
    table, ids = np.unique(pairs, axis=0, return_inverse=True)
    return ids.reshape(n, n), table


def planar_laplace_cell_probabilities(height: int, width: int, eps: float) -> np.ndarray:
    """P[x, y]: a planar Laplace draw around the centre of cell x, clamped to the grid, lands
    in cell y (cell units, density eps^2/(2 pi) e^{-eps ||z||}; [ABCP13]_).

    Clamping to the grid sends everything beyond the border into the border cells, so a
    border cell is a rectangle open to infinity on its outer side. The relative rectangle of y
    seen from x depends only on the row and column offsets and on whether y is on a border,
    so the quadrature (:func:`_rectangle_probabilities`) runs once per distinct rectangle --
    at most 9 (2h - 1)(2w - 1) of them instead of (hw)^2 -- and is scattered back.

    Parameters
    ----------
    height, width : int
        The grid, >= 1 each.
    eps : float
        The planar Laplace parameter in cell units, > 0.

    Returns
    -------
    ndarray of float64, shape (h w, h w)
        Row x is the output law of cell x (rows sum to 1 up to the quadrature error).

    Raises
    ------
    ValueError
        If a size is < 1 or ``eps`` is not a finite positive number.
    TypeError
        If a size is not an integer.

    References
    ----------
    [ABCP13]_ (planar Laplace, its density and the remapping to a grid).
    """
    h, w = v.count("height", height), v.count("width", width)
    eps = v.positive("eps", eps)
    rid, rtab = _axis_intervals(h)  # (h, h) ids into rtab (Y intervals)
    cid, ctab = _axis_intervals(w)
    ri, ci = np.meshgrid(np.arange(rtab.shape[0]), np.arange(ctab.shape[0]), indexing="ij")
    mass = _rectangle_probabilities(rtab[ri, 0], rtab[ri, 1], ctab[ci, 0], ctab[ci, 1], eps)
    # P[(r_s, c_s), (r_t, c_t)] = mass[rid[r_s, r_t], cid[c_s, c_t]]
    P = mass[rid[:, None, :, None], cid[None, :, None, :]]
    return P.reshape(h * w, h * w)


class PlanarLaplace(ItemMechanism):
    """Planar Laplace (geo-indistinguishability, [ABCP13]_) on a grid, remapped to cells.

    An item is a cell of a ``height`` x ``width`` grid of the unit square with d_X the
    Euclidean distance between centres divided by the diameter D (``grid_space(h, w)``).
    The output is the cell containing the clamped draw c_x + Z, Z with density proportional
    to exp(-eps ||z||) in cell units. The continuous mechanism is eps-geo-indistinguishable,
    so its post-processing is (eps D) d_X-DP: eps = alpha0' / D.

    The cell probabilities are computed by quadrature
    (:func:`planar_laplace_cell_probabilities`, relative error far below 1e-9; grids up to 1024
    cells, e.g. 32 x 32) and rounded to integer weights; alpha0' = alpha0 (1 - 1e-6) - 5 rho /
    d_min absorbs the rounding (rho as in :func:`_design_alpha0`) and the quadrature. The
    constructor then measures the realised parameter of the integer pmf in float64 and refuses
    the design if it exceeds alpha0; :func:`realised_alpha0` checks it exactly. A single
    Gauss-Legendre rule per smooth angular piece was not accurate enough for small eps, where
    the mass spreads into the unbounded border cells (a 16 x 16 grid at alpha0 = 0.5 realised
    0.536 and was refused); each piece is now cut into _GL_PIECES parts, and the cells agree
    with scipy's adaptive quadrature to 1e-7.

    Parameters
    ----------
    height, width : int
        The grid (at most 1024 cells).
    alpha0 : float
        The target alpha0 > 0 of the item mechanism.

    Raises
    ------
    ValueError
        If the grid has more than 1024 cells, ``alpha0`` is invalid, or ``alpha0`` is too
        large for the grid (the smallest cell weight would fall below 2^24).
    """

    def __init__(self, height: int, width: int, alpha0: float) -> None:

        self.space = grid_space(height, width, "l2")
        self.alpha0 = _iv_alpha0(alpha0)
        k = self.space.k
        if k > _PLANAR_MAX_CELLS:
            raise ValueError(f"PlanarLaplace checks its k x k table's privacy ratio over every "
                             f"pair (O(k^3)); k = height * width = {k} exceeds "
                             f"{_PLANAR_MAX_CELLS}")
        diam = self.space.scale
        M = float(2**_ROW_BITS // k)
        probs = planar_laplace_cell_probabilities(height, width, self.alpha0 / diam)
        w_min = math.floor(M * probs.min())
        if w_min < _MIN_WEIGHT:
            raise ValueError(f"alpha0={alpha0} is too large for a {height}x{width} grid (the "
                             f"smallest cell weight would be {w_min} < 2^24); lower alpha0")
        rho = 1.0 / w_min + _FLOAT_REL
        self.alpha0_design = self.alpha0 * (1 - 1e-6) - 5.0 * rho / self.space.min_distance
        probs = planar_laplace_cell_probabilities(height, width, self.alpha0_design / diam)
        self._w = np.floor(M * probs).astype(np.uint64)
        self._w.setflags(write=False)
        self.name = f"planar Laplace on {height}x{width} (remapped)"
        got = self.float_alpha0()
        if got > self.alpha0:  # pragma: no cover - the margin makes this unreachable
            raise ValueError(f"the rounded planar Laplace realises alpha0={got!r} > "
                             f"alpha0={alpha0!r}")

    def weights(self) -> np.ndarray:
        return self._w

    def float_alpha0(self) -> float:
        """max ln(P(y|x)/P(y|x')) / d_X(x, x') of the integer pmf, in float64."""
        logp = np.log(self._w.astype(float)) - np.log(self._w.astype(float).sum(axis=1))[:, None]
        d = np.asarray(self.space.distances)
        best = 0.0
        for x in range(self.space.k):
            gap = (logp[x][None, :] - logp).max(axis=1)
            ratio = np.divide(gap, d[x], out=np.zeros_like(gap), where=d[x] > 0)
            best = max(best, float(ratio.max()))
        return best
