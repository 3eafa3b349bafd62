"""PrivEMDLinear ([Imola]_ Alg. 1, Thm 4.1, Lemma 4.2): linear queries under d_EM-DP.

A linear query of a user's dataset K = (x_1, ..., x_m) over a finite metric space
(X, d_X) is q_f(K) = (1/m) sum_j f(x_j), with f: X -> R^d given as a value table
(shape (k,) or (k, d)). When f is l-Lipschitz from d_X to the l1 norm,
||q_f(K) - q_f(K')||_1 <= l d_EM(K~, K~') ([Imola]_ Thm 4.1), and Laplace noise of scale
l / alpha per coordinate (the l1 instance of Alg. 1: the multidimensional Laplace
mechanism) makes the release alpha d_EM-DP (Lemma 4.2). In the central model the server
releases the mean over n users of equal size m; one user moves it by at most l d_EM / n, so
the scale is l / (n alpha) (omega = 1 / (alpha n), [Imola]_ Sec. 6.1.2).

Exact noise on an integer grid
------------------------------
Floating-point Laplace noise leaks through its low-order bits ([Mironov12]_), so the
release is computed on integers: the table is scaled by a power of two R and rounded,
F = round(R f), and the integer sums S(K) = sum_j F(x_j) (one user's m items, or all n m
items in the central model) receive exact discrete Laplace noise DL(exp(-s/t)) per
coordinate ([CKS20]_ Alg. 2, :func:`shuffledp.encoders.noise.laplace.discrete_laplace_for`). The
release is (S + Z) / (m R) (local, per user) or (S + Z) / (n m R) (central).

Sensitivity (derived from Thm 4.1 applied to F). Let L_F = max_{x != x'}
||F(x) - F(x')||_1 / d_X(x, x') (computed exactly from the table, rounded up), about R l.
Changing one user's m items from K to K' changes S by m (q_F(K) - q_F(K')), so
||S(K) - S(K')||_1 <= m L_F d_EM(K~, K~') in both models (in the central model the other
users' items cancel). DL noise with s/t <= alpha / Delta, Delta = m max(L_F, R l_declared),
gives output ratios <= exp(||Delta S||_1 s/t) <= exp(alpha d_EM(K~, K~')): (alpha, 0)-bounded
d_EM-DP, local or central. In q units the noise scale is t / (s m R) ~ l / alpha (local) and
t / (s n m R) ~ l / (n alpha) (central). The query answered is that of the rounded table
F / R, within 1 / (2R) of f per coordinate; the default R makes this at most 1/128 of the
noise scale and the rounding's inflation of the noise at most 2^-10 relative.

Unlike Lemma 4.2's local claim (unbounded: any dataset sizes) the local release here is
stated for bounded data only: its lattice 1 / (m R) reveals m. For datasets of private size
use the bounded reduction of [Imola]_ Sec. 5 first.

References
----------
.. [Imola] Imola et al. (preprint), "Metric DP at the user-level" -- full entry in
   docs/references.md
.. [CKS20] Canonne et al. (2020), "The discrete Gaussian for DP" -- full entry in
   docs/references.md
.. [Mironov12] Mironov (2012), "Least significant bits for DP" -- full entry in docs/references.md
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, cast

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.guarantee import Guarantee, Neighbour
from shuffledp.accounting.zcdp import metric_gaussian_sigma2
from shuffledp.analyzers.metric.itemwise import as_user_items
from shuffledp.encoders.metric.spaces import MetricSpace
from shuffledp.encoders.noise.gaussian import discrete_gaussian_exact
from shuffledp.encoders.noise.laplace import discrete_laplace_for, dl_rational
from shuffledp.randomness import SEEDED_NOTE, RngLike, SecureRandom, is_seeded

THEOREM = ("Imola et al., Alg. 1 + Thm 4.1 + Lemma 4.2 (l1 norm: multidimensional Laplace), "
           "exact discrete Laplace on the grid 1/R")
THEOREM_GAUSSIAN = ("Imola et al., Alg. 1 + Thm 4.1 with the l2 norm (Sec. 4 remark, Lemma 6.2, "
                    "Sec. 6.1.2); exact discrete Gaussian, Canonne-Kamath-Steinke Thm 14 + "
                    "Cor. 13, sup over d_EM in (0, 1]")
#: default resolution: quantisation error 1/(2R) at most 1/QUANT_MARGIN of the noise scale
QUANT_MARGIN = 128
#: integer sums must stay below this
_INT_LIMIT = 1 << 62
#: rows of the Lipschitz computation per chunk
_ROWS = 256
#: relative margin that rounds the float Lipschitz ratio up
_UP = 1.0 + 2.0**-48


@dataclass(frozen=True)
class LinearRelease:
    """Output of :func:`priv_emd_linear`.

    Attributes
    ----------
    values : ndarray, shape (n, d) (local) or (1, d) (central)
        The released noisy answers.
    estimate : ndarray, shape (d,)
        Mean of the users' answers (local) or the central answer.
    noisy_sums : ndarray of int64
        The integer release S + Z (``values`` is it divided by m R, resp. n m R).
    resolution : int
        R, the power of two scaling f.
    sensitivity : float
        Delta = m max(L_F, R l) in integer units (see the module docstring).
    dl_parameter : tuple of int
        (s, t) of the DL noise, s / t <= alpha / Delta ((0, 1) for the Gaussian variant).
    lipschitz : float
        l used for the calibration (the declared one, or the exact one of the table).
    noise_scale : float
        Laplace-equivalent scale of the noise of one value in q units: t / (s m R) (local),
        t / (s n m R) (central).
    quantisation_error : float
        max |F / R - f| over the table (at most 1 / (2R)).
    guarantee : Guarantee
        (alpha, 0)-bounded d_EM-DP in the given model.
    notes : tuple of str
    noise : str
        "laplace" or "gaussian".
    sigma2 : Fraction or None
        sigma^2 of the discrete Gaussian (integer units), for the Gaussian variant.
    """

    values: np.ndarray
    estimate: np.ndarray
    noisy_sums: np.ndarray
    resolution: int
    sensitivity: float
    dl_parameter: tuple[int, int]
    lipschitz: float
    noise_scale: float
    quantisation_error: float
    guarantee: Guarantee
    notes: tuple[str, ...] = field(default=())
    noise: str = "laplace"
    sigma2: Fraction | None = None

    @property
    def noise_sd(self) -> float:
        """Standard deviation of one value's noise per coordinate: exact for DL; for the
        discrete Gaussian sigma (its variance is at most sigma^2, [CKS20]_ Prop. 19)."""
        if self.noise == "gaussian":
            return self.noise_scale
        s, t = self.dl_parameter
        if s == 0:
            return 0.0
        a = math.exp(-s / t)
        return math.sqrt(2 * a) / (1 - a) * self.noise_scale * s / t

    def to_dict(self) -> dict[str, Any]:
        return {"estimate": self.estimate, "shape": list(self.values.shape),
                "resolution": self.resolution, "sensitivity": self.sensitivity,
                "dl_parameter": list(self.dl_parameter), "lipschitz": self.lipschitz,
                "noise_scale": self.noise_scale, "noise_sd": self.noise_sd,
                "quantisation_error": self.quantisation_error, "noise": self.noise,
                "sigma2": None if self.sigma2 is None else str(self.sigma2),
                "guarantee": self.guarantee.to_dict(), "notes": list(self.notes)}


def _as_table(f: Any, k: int) -> np.ndarray:
    """f as a finite float64 (k, d) table."""
    try:
        tab = np.array(f, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"f must be a numeric table of shape ({k},) or ({k}, d), "
                        f"got f={f!r:.60}") from exc
    if tab.ndim == 1:
        tab = tab[:, None]
    if tab.ndim != 2 or tab.shape[0] != k or tab.shape[1] == 0:
        raise ValueError(f"f must have shape ({k},) or ({k}, d) (one value per point of the "
                         f"domain), got shape {np.shape(f)}")
    if not np.all(np.isfinite(tab)):
        i = int(np.argwhere(~np.isfinite(tab))[0, 0])
        raise ValueError(f"f must be finite; f[{i}]={tab[i].tolist()!r}")
    return tab


def lipschitz_constant(space: MetricSpace, table: Any,
                       norm: int = 1) -> tuple[float, tuple[int, int]]:
    """max_{x != x'} ||table[x] - table[x']||_p / d_X(x, x') (rounded up) and its argmax.

    ``norm`` p is 1 (Laplace variant) or 2 (Gaussian variant).

    Integer tables (exact differences below 2^53) give the exact ratio rounded up by a
    relative 2^-48; float tables the float ratio rounded up the same way.

    Parameters
    ----------
    space : MetricSpace
        The items' metric space (k points).
    table : array_like, shape (k,) or (k, d)
        f's value at each point, finite.
    norm : {1, 2}
        The norm p of the differences.

    Returns
    -------
    tuple
        (L, (x, x')): the constant, rounded up, and a pair attaining it.

    Raises
    ------
    TypeError
        If ``table`` is not numeric.
    ValueError
        If ``table`` has the wrong shape or non-finite entries, or ``norm`` is not 1 or 2.

    References
    ----------
    [Imola]_ Thm 4.1 (the query's sensitivity is the Lipschitz constant of f).
    """
    tab = _as_table(table, space.k)
    norm = int(v.choice("norm", str(norm), ("1", "2")))  # "1" is the l1 norm too, not l2
    d = np.asarray(space.distances)
    best, arg = 0.0, (0, 0)
    for lo in range(0, space.k, _ROWS):
        gap = np.abs(tab[lo:lo + _ROWS, None, :] - tab[None, :, :])
        diff = gap.sum(axis=2) if norm == 1 else np.sqrt((gap * gap).sum(axis=2))
        dd = d[lo:lo + _ROWS]
        ratio = np.divide(diff, dd, out=np.zeros_like(diff), where=dd > 0)
        i, j = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        if ratio[i, j] > best:
            best, arg = float(ratio[i, j]), (lo + int(i), int(j))
    return best * _UP, arg


def default_resolution(noise_scale: float, lipschitz: float = 0.0,
                       min_distance: float = 1.0) -> int:
    """The smallest power of two R with 1/(2R) <= noise_scale / QUANT_MARGIN and
    1 / (R l d_min) <= 2^-10 (rounding f inflates its Lipschitz constant by at most
    1 / d_min, i.e. the noise by 1 / (R l d_min) relative); 2^30 for a constant query.

    Parameters
    ----------
    noise_scale : float
        The noise scale in the query's units; <= 0 for a constant query.
    lipschitz : float, default 0
        The Lipschitz constant l of f (0: no second condition).
    min_distance : float, default 1
        d_min, the smallest distance between two points.

    Returns
    -------
    int
        R, a power of two.

    Raises
    ------
    ValueError
        If the arguments make the required R infinite or NaN (from :func:`math.log2`); the
        values are not otherwise checked.

    References
    ----------
    [Imola]_ Alg. 1 (PrivEMDLinear); the rounding to multiples of 1/R lets the noise be the
    exact integer sampler of [CKS20]_ instead of the floating-point Laplace [Mironov12]_
    attacks.
    """
    if noise_scale <= 0:
        return 1 << 30
    need = QUANT_MARGIN / (2.0 * noise_scale)
    if lipschitz > 0:
        need = max(need, 2.0**10 / (lipschitz * min_distance))
    return 1 << max(0, math.ceil(math.log2(need)))


def priv_emd_linear(
    users: Any,
    space: MetricSpace,
    f: Any,
    alpha: float,
    model: str = "central",
    *,
    lipschitz: float | None = None,
    resolution: int | None = None,
    noise: str = "laplace",
    delta: float | None = None,
    rng: RngLike | SecureRandom = None,
) -> LinearRelease:
    """PrivEMDLinear with exact integer noise: (alpha, 0)- or (alpha, delta)-bounded d_EM-DP.

    Parameters
    ----------
    users : array_like, shape (n, m)
        Item indices of each user's dataset (all of size m, bounded setting).
    space : MetricSpace
        The item domain (metric bounded by 1).
    f : array_like, shape (k,) or (k, d)
        The query's values on the domain.
    alpha : float
        d_EM-DP parameter.
    model : {"central", "local"}, default "central" (as ``shuffledp metric linear``)
        Local: every user releases her own noisy q_f(K_i) (scale l / alpha). Central: the
        server releases the noisy mean of the n users' answers (scale l / (n alpha)).
    lipschitz : float, optional
        Declared Lipschitz constant l of f (d_X to l1 for Laplace, to l2 for Gaussian). It
        must be at least the table's own constant (checked exactly); the noise is calibrated
        to it. Default: the table's.
    resolution : int, optional
        R, a power of two; default :func:`default_resolution` of the noise scale.
    noise : {"laplace", "gaussian"}
        "laplace": Alg. 1 with the l1 norm, exact discrete Laplace, pure (alpha, 0).
        "gaussian": the l2 instance of Alg. 1 ([Imola]_ Sec. 4 remark, Lemma 6.2, central
        Sec. 6.1.2): exact discrete Gaussian ([CKS20]_ Alg. 3) with sigma^2 the smallest
        meeting (alpha, delta) through zCDP ([CKS20]_ Thm 14, Cor. 13) for every d_EM
        distance in (0, 1] (:func:`shuffledp.accounting.zcdp.metric_gaussian_sigma2`).
    delta : float, optional
        Required with ``noise="gaussian"`` (in (0, 1)); refused with "laplace".
    rng : None, SecureRandom, int or Generator
        None: the secure generator (a private release); a seed: research run (marked).

    Raises
    ------
    ValueError
        Bad input, f not ``lipschitz``-Lipschitz, or integer sums / noise that would not
        fit the exact integer arithmetic (lower ``resolution``).

    Returns
    -------
    LinearRelease
        The noisy query values with the (alpha, 0)- or (alpha, delta)-bounded d_EM-DP
        guarantee, the resolution, sensitivity, noise parameters and error scales.

    References
    ----------
    [Imola]_ Alg. 1, Thm 4.1, Lemma 4.2; [CKS20]_ Thm 14, Cor. 13 (the discrete Gaussian
    variant); [Mironov12]_ (why the noise is exact).
    """
    if not isinstance(space, MetricSpace):
        raise TypeError(f"space must be a MetricSpace, got space={space!r:.60}")
    alpha = v.positive("alpha", alpha)
    model = v.choice("model", model, ("local", "central"))
    noise = v.choice("noise", noise, ("laplace", "gaussian"))
    if noise == "gaussian":
        if delta is None:
            raise ValueError("noise='gaussian' needs delta in (0, 1), got delta=None")
        delta = v.probability("delta", delta)
    elif delta is not None:
        raise ValueError(f"noise='laplace' is pure (delta = 0); got delta={delta!r}")
    norm = 2 if noise == "gaussian" else 1
    items = as_user_items(users, space.k)
    n, m = items.shape
    tab = _as_table(f, space.k)
    l_f, (x1, x2) = lipschitz_constant(space, tab, norm)
    if lipschitz is not None:
        lipschitz = v.real("lipschitz", lipschitz)
        if lipschitz < 0 or l_f > lipschitz * _UP:
            raise ValueError(
                f"f must be lipschitz-Lipschitz, got lipschitz={lipschitz!r} but "
                f"||f({x1}) - f({x2})||_{norm} / d_X = {l_f:.6g}")
    ell = l_f if lipschitz is None else lipschitz
    divisor = m * (n if model == "central" else 1)
    scale = ell / (alpha * (n if model == "central" else 1))
    if resolution is None:
        R = default_resolution(scale, ell, space.min_distance)
    else:
        R = v.count("resolution", resolution)
        if R & (R - 1):
            raise ValueError(f"resolution must be a power of two, got resolution={resolution!r}")
    F = np.round(tab * R)
    if np.abs(F).max() * items.size >= _INT_LIMIT:
        raise ValueError(f"resolution={R} makes the integer sums overflow (max |f| R n m >= "
                         "2^62); lower resolution")
    F = F.astype(np.int64)
    L_F, _ = lipschitz_constant(space, F, norm)
    sens = m * max(L_F, R * ell * _UP)
    sums = _sums(items, F, model)
    s, t, sigma2 = 0, 1, None
    if sens == 0:  # a constant query: nothing to hide
        noisy, scale_q = sums, 0.0
    elif noise == "laplace":
        s, t = dl_rational(alpha, sens)
        noisy = sums + discrete_laplace_for(alpha, sens, sums.size, rng).reshape(sums.shape)
        scale_q = t / s / divisor / R
    else:
        # noise == "gaussian": delta was checked to be a probability above
        sigma2 = metric_gaussian_sigma2(alpha, cast(float, delta), sens)
        z = discrete_gaussian_exact(sigma2, sums.size, rng).reshape(sums.shape)
        noisy, scale_q = sums + z, math.sqrt(sigma2) / divisor / R
    values = noisy / (divisor * R)
    notes = (SEEDED_NOTE,) if is_seeded(rng) else ()
    theorem = THEOREM if noise == "laplace" else THEOREM_GAUSSIAN
    g = Guarantee(notion="metric_emd", model=model, epsilon=alpha,
                  delta=0.0 if delta is None else delta,
                  neighbour=Neighbour.BOUNDED_EMD, theorem=theorem,
                  parameters={"n": n, "m": m, "d": tab.shape[1], "lipschitz": ell,
                              "norm": norm, "resolution": R, "sensitivity": sens,
                              "sigma2": None if sigma2 is None else str(sigma2)},
                  notes=("bounded data: m public (the output lattice reveals m)",) + notes)
    return LinearRelease(values=values, estimate=values.mean(axis=0), noisy_sums=noisy,
                         resolution=R, sensitivity=float(sens), dl_parameter=(int(s), int(t)),
                         lipschitz=float(ell), noise_scale=float(scale_q),
                         quantisation_error=float(np.abs(F / R - tab).max()), guarantee=g,
                         notes=notes, noise=noise, sigma2=sigma2)


def user_level_linear(users: Any, k: int, f: Any, epsilon: float, model: str = "central", *,
                      rng: RngLike | SecureRandom = None) -> LinearRelease:
    """The user-level epsilon-DP baseline of the same linear query (bounded, replace-one).

    It is :func:`priv_emd_linear` over the discrete metric on the k items (every two
    distinct items at distance 1): there the Lipschitz constant of f is its l1 range
    max ||f(x) - f(x')||_1, and any two datasets of size m are at d_EM <= 1, so the
    (epsilon, 0)-bounded d_EM-DP release is epsilon-DP against replacing a user's whole
    dataset. Exact discrete Laplace noise as in :func:`priv_emd_linear`.

    Parameters
    ----------
    users : array_like, shape (n, m)
        Item indices 0..k-1 of each user's dataset.
    k : int
        Domain size, >= 2.
    f : array_like, shape (k,) or (k, d)
        The linear query's values.
    epsilon : float
        The user-level budget, > 0.
    model : {"central", "local"}, default "central" (as ``shuffledp metric linear``)
        Who adds the noise.
    rng : None, SecureRandom, int or Generator
        ``None``: secure noise. A seed or Generator: reproducible evaluation.

    Returns
    -------
    LinearRelease
        As :func:`priv_emd_linear`, with a pure replace-one guarantee.

    Raises
    ------
    TypeError
        If ``k`` is not an integer, ``f`` or ``users`` not numeric/integer.
    ValueError
        On bad input as in :func:`priv_emd_linear`.

    References
    ----------
    [Imola]_ Sec. 6 (the user-level baselines).
    """
    k = v.count("k", k, 2)
    discrete = MetricSpace(np.ones((k, k)) - np.eye(k), name=f"discrete {k}", scale=1.0)
    rel = priv_emd_linear(users, discrete, f, epsilon, model, rng=rng)
    g = rel.guarantee
    baseline = Guarantee(notion="pure", model=model, epsilon=g.epsilon, delta=0.0,
                         neighbour=Neighbour.REPLACE_ONE,
                         theorem="user-level Laplace on the linear query (sensitivity: the "
                                 "l1 range of f), exact discrete Laplace",
                         parameters=dict(g.parameters), notes=g.notes)
    return replace(rel, guarantee=baseline)


def _sums(items: np.ndarray, F: np.ndarray, model: str) -> np.ndarray:
    """Integer sums of F over each user's items (n, d), or over all items (1, d)."""
    per_user = F[items].sum(axis=1)  # (n, d), exact int64
    return per_user.sum(axis=0, keepdims=True) if model == "central" else per_user


def query_value(users: Any, space: MetricSpace, f: Any) -> np.ndarray:
    """The non-private answer: mean over all users' items of f (float64, shape (d,)).

    Parameters
    ----------
    users : array_like, shape (n, m)
        Item indices of each user's dataset.
    space : MetricSpace
        The items' metric space (k points).
    f : array_like, shape (k,) or (k, d)
        The query's values.

    Returns
    -------
    numpy.ndarray, shape (d,)
        The mean of f over all users' items.

    Raises
    ------
    TypeError
        If ``users`` does not hold integers or ``f`` is not numeric.
    ValueError
        If ``users`` is ragged, empty or outside 0..k-1, or ``f`` has the wrong shape or
        non-finite values.

    References
    ----------
    [Imola]_ Alg. 1 (the linear query PrivEMDLinear answers).
    """
    items = as_user_items(users, space.k)
    return _as_table(f, space.k)[items.ravel()].mean(axis=0)


__all__ = ["LinearRelease", "default_resolution", "lipschitz_constant", "priv_emd_linear",
           "query_value", "user_level_linear"]
