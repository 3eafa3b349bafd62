"""Add/remove neighbours in federated rounds: a public shard plan and the joining share's charge.

Under add/remove the number of users n is private, so nothing the noise depends on may be a
function of n. Two things in a federated round are, unless fixed in advance:

1. **The shard layout and each client's Polya shape.** :class:`ShardPlan` fixes both from
   public numbers declared before the data are seen: a bound ``max_users`` = N on the
   population, K = ceil(N / S_max) shards, the user with id i in shard i mod K, where a user's
   id is fixed by her own identity (her position in a public roster, or a hash of her
   account), not by the other users (so adding or removing one user never moves another user
   and never opens a shard), and one Polya shape 1 / n_min for every client with
   n_min = ceil((1 - dropout) floor(N / K)): ``dropout`` is the fraction of each shard's
   planned N / K users that may be missing or drop out. A round with more than N users is
   refused (the guarantee is stated for data sets of at most N users). A shard that ends
   with k < n_min survivors is *topped up* (below), not refused: a refusal decided on k
   would itself depend on how many users the shard holds.

2. **The number of noise shares.** Every client adds its own X - Y, X, Y ~ Polya(1/n_min, a)
   per cell, so the user who joins also adds a share, in *every* cell. With k >= n_min
   survivors the shard's noise is Polya(k/n_min, a) - Polya(k/n_min, a): discrete Laplace
   DL(a) plus independent extra noise, but the extra noise is not the same for the two
   neighbours (k - n_min shares against k + 1 - n_min), so "DL plus more noise is
   post-processing" does not apply across an add/remove pair: the two laws differ in the tail
   of every cell. Exactly: one cell, n_min = 18, eps = 1, shape 1 against 1 + 1/18 with the
   count shifted by one has delta(eps = 1) = 7.8e-3 (``tests/federated/test_add_remove.py``).

The charge. Let D (k >= n_min survivors in the user's shard; fewer: the top-up below) and
D' = D + one user (k + 1). Take the intermediate M'' = D's data with k + 1 shares. Then

* M(D'), M'' have the same noise law (k + 1 >= n_min shares, i.e. DL(a) plus one extra noise
  kernel) and data differing by the user's vector of l1 norm <= Delta: eps_noise-DP
  ([Bagdasaryan22]_ Thm 4.2 and post-processing), a = exp(-eps_noise / Delta);
* M(D), M'' have the same data and noise Polya(s, a) - Polya(s, a) against
  Polya(s + h, a) - Polya(s + h, a) in each of the d cells, s = k / n_min >= 1, h = 1 / n_min.
  Adding one more independent share to both is the same Markov kernel, so by the data
  processing inequality the pair at k + 1 is no harder than at k: the worst case is k = n_min,
  s = 1. That pair is a post-processing (X - Y) of two independent pairs
  Polya(1, a) vs Polya(1 + h, a), so its Renyi divergence of order alpha is at most
  2 d tau(alpha) with tau the larger of the two directions' divergences of that pair
  ([vEH14]_ Thm 9 data processing, Thm 28 additivity). tau is bounded twice, the smaller
  bound taken: (i) the series sum_k P(k)^(1-alpha) Q(k)^alpha, with the likelihood ratio
  Q(k) / P(k) = (1 - a)^h prod_{j <= k} (1 + h / j) and proven tail bounds (Wendel's
  inequality, [Wendel48]_); (ii) a closed form independent of a: Polya(r, a)
  is Poisson(lambda) with lambda ~ Gamma(r, a / (1 - a)) ([Bagdasaryan22]_ Def. 4.1), one
  kernel for both shapes, and the Renyi divergence of Gamma(1 + h) from Gamma(1) of one scale
  is (lnGamma(1 + alpha h) - alpha lnGamma(1 + h)) / (alpha - 1) (the other direction
  (lnGamma(1 + h - alpha h) + (alpha - 1) lnGamma(1 + h)) / (alpha - 1), alpha < 1 + 1/h).
  Renyi DP of order alpha converts to (eps_share, delta_1)
  ([CKS20]_ Prop. 12), minimised over a grid of orders.

Chaining the two steps (P_D(S) <= e^{eps_share} P''(S) + delta_1 <= e^{eps_noise + eps_share}
P_D'(S) + delta_1 and P_D'(S) <= e^{eps_noise} P''(S) <= e^{eps_noise + eps_share} P_D(S) +
e^{eps_noise} delta_1) makes the round (eps_noise + eps_share, e^{eps_noise} delta_1)-DP under
add/remove. :func:`add_remove_noise` calibrates eps_noise so that eps_noise + eps_share <= eps
and e^{eps_noise} delta_1 <= delta: the release states the epsilon it was asked for. Shards
hold disjoint users and their laws do not change when another shard gains a user (fixed
layout), so one shard's pair is the whole round's (parallel composition). The cost falls as
n_min grows: eps_share = 0.0095 for n_min = 9,000, d = 300 cells, a = e^{-1},
delta_1 = 1e-10, and 0.27 for n_min = 18, d = 1.

Short shards: the top-up. When a shard ends with k < n_min survivors, the party that
publishes adds n_min - k shares X - Y, X, Y ~ Polya(1/n_min, a), itself, to every cell of
the shard's sum before releasing it (one draw of Polya((n_min - k)/n_min, a) per variable:
Polya shapes with one a add up), so the published noise of every shard holds
max(k, n_min) shares, never fewer than n_min (= DL(a), [Bagdasaryan22]_ Thm 4.2). Then for
D (k survivors) and D' = D + one surviving user:

* k + 1 <= n_min: both releases hold exactly n_min shares (the joiner's share takes the place
  of one top-up share), so they differ only in the joiner's data over the same DL(a) noise:
  eps_noise-DP, no share charge;
* k >= n_min: no top-up on either side; the charge above (worst case k = n_min).

A joiner who drops out leaves the release's law unchanged, and a mixture over the dropouts
(independent of the data) is no harder than its components (joint convexity). So the round
is (eps_noise + eps_share, e^{eps_noise} delta_1)-DP under add/remove for every data set of at
most N users and every dropout pattern: the top-up removes the refusal instead of covering
it. With real secure aggregation one floor remains: SecAgg cannot unmask a shard with fewer
survivors than its threshold, and the plan sets that threshold to
:meth:`ShardPlan.secagg_threshold` of the shard's own clients (more than two thirds of them,
and the 2^-40 binomial quantile of its survivors at the planned dropout); a shard below it is
refused, and that refusal is *not* covered (it depends on the shard's size, as before, but
only through losing a third of its clients: e.g. n_min = 18, threshold 13 for a shard of 18
or 19 clients, a real dropout of 2%: refused with probability 9.7e-7 with 18 users and 5.2e-8
with 19, against 0.305 and 0.055 below 18).

Who sees what. The secure-aggregation server talks to every client, so it sees who takes
part, and it sees a shard's sum *before* the top-up: k survivors' shares, Polya(s, a) -
Polya(s, a) with s = k / n_min. For s >= 1 the protection against it is the zero-out one
(the data of a participant, eps_noise-DP). For a topped-up shard (s < 1) it is
:func:`server_view_epsilon`, eps_noise + Delta ln(n_min / k), pure: the ratio of consecutive
Polya(s, a) terms, a (j + s)/(j + 1), lies in [a s, a], hence so does that of the difference's
pmf at z + 1 and z (z >= 0; the law is symmetric), and a shift of the data by Delta in l1
costs at most Delta ln(1 / (a s)). SecAgg unmasks at least 2 survivors, so the worst case
is eps_noise + Delta ln(n_min / 2); for a shard of the planned size, eps_noise + Delta
ln(n_min / secagg_floor): + 0.025 Delta for shards of 10,000 at dropout 0.1. The add/remove
guarantee covers the published release, which must then not state n or any count derived
from it (survivors, clients per shard, whether or by how much a shard was topped up); the
command line omits them.

References
----------
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards sparse federated analytics", Def. 4.1, Thm
   4.2, Sec. 4 -- full entry in docs/references.md
.. [vEH14] van Erven and Harremoes (2014), "Renyi divergence and KL divergence", Thm 9 (data
   processing), Thm 28 (additivity) -- full entry in docs/references.md
.. [CKS20] Canonne et al. (2020), "The discrete Gaussian for DP", Prop. 12 (Renyi DP to approximate
   DP) -- full entry in docs/references.md
.. [Mironov17] Mironov (2017), "Renyi differential privacy", Prop. 1 (composition) -- full entry in
   docs/references.md
.. [Wendel48] Wendel (1948), "Note on the gamma function", Gamma(x + h) <= x^h Gamma(x) for x > 0,
   0 <= h <= 1 -- full entry in docs/references.md
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import gammaln
from scipy.stats import binom

from shuffledp import _validation as v
from shuffledp.accounting.budget import share_shape
from shuffledp.analyzers.federated.histogram import FederatedRefused

#: default delta spent on the joining user's own noise share, per release
DEFAULT_SHARE_DELTA = 1e-10
#: Renyi orders tried (log-spaced); every order gives a valid bound, the best is kept
_ALPHAS = tuple(float(x) for x in np.exp(np.linspace(math.log(1.05), math.log(1e6), 20)))
#: the series bound is skipped (the closed form alone is used) above this many terms
_MAX_TERMS = 1 << 18
#: above this many terms the series is used only where the closed form is infinite (as a
#: tends to 1 the series tends to the closed form: 3% apart at a = e^{-0.01})
_CHEAP_TERMS = 1 << 12
#: relative slack added to every computed divergence (covers floating-point rounding)
_SLACK = 1e-9


#: A shard whose clients drop independently at the planned rate keeps at least its secure
#: aggregation threshold with probability >= 1 - 2^-40 wherever the binomial quantile sets
#: that threshold (:meth:`ShardPlan.secagg_threshold`).
SECAGG_FLOOR_TAIL_BITS = 40


def _secagg_threshold(clients: int, dropout: float, n_min: int) -> int:
    """max(2, floor(2 c / 3) + 1, min(n_min, t*)); t* the largest t with
    P[Bin(c, 1 - dropout) < t] <= 2^-40 (c = ``clients``). A planning rule, not a privacy
    claim: the refusal below it is stated as not covered."""
    tail = -SECAGG_FLOOR_TAIL_BITS * math.log(2.0)
    lo, hi = 0, min(n_min, clients)  # P[X < 0] = 0 qualifies: the largest t that does
    while lo < hi:
        t = (lo + hi + 1) // 2
        if float(binom.logcdf(t - 1, clients, 1.0 - dropout)) <= tail:
            lo = t
        else:
            hi = t - 1
    return max(2, 2 * clients // 3 + 1, lo)


@dataclass(frozen=True)
class ShardPlan:
    """The public shard layout of an add/remove federated round.

    Attributes
    ----------
    max_users : int
        N: the bound on the population declared before the data (>= 2); a round with more
        users is refused.
    shard_size : int
        S_max: the most clients one secure-aggregation shard may hold (>= 2).
    dropout : float in [0, 1)
        Fraction of each shard's planned floor(N / K) users that may be missing or drop out.
    shards : int
        K = ceil(N / S_max) (derived).
    n_min : int
        ceil((1 - dropout) floor(N / K)): the survivors every shard's noise is planned for;
        each client's Polya shape is 1 / n_min; a shard with fewer survivors is topped up to
        n_min shares by the publisher (derived).
    secagg_floor : int
        :meth:`secagg_threshold` of a shard of the planned floor(N / K) clients (derived): at
        S = 10,000, dropout 0.1 it is 8,782 (SecAgg+ degree 46; ceil(n_min / 2) would need
        184).
    """

    max_users: int
    shard_size: int
    dropout: float = 0.0
    shards: int = field(init=False)
    n_min: int = field(init=False)
    secagg_floor: int = field(init=False)

    def __post_init__(self) -> None:
        N = v.count("max_users", self.max_users, 2)
        S = v.count("shard_size", self.shard_size, 2)
        f = v.interval("dropout", self.dropout, 0.0, 1.0, open_low=False)
        K = -(-N // S)
        n_min = max(1, math.ceil((1.0 - f) * (N // K) - 1e-9))
        floor = _secagg_threshold(N // K, f, n_min)
        for name, val in (("max_users", N), ("shard_size", S), ("dropout", f), ("shards", K),
                          ("n_min", n_min), ("secagg_floor", floor)):
            object.__setattr__(self, name, val)

    def assign(self, user_ids: Any, n: int) -> np.ndarray:
        """The shard (0..K-1) of each of n users: ``user_ids`` (default 0..n-1) mod K.

        A user's id must be fixed by her own identity (a public roster position, a hash of her
        account), never by the other users. Raises FederatedRefused when n > N, ValueError
        when an id is not a non-negative integer or repeats.
        """
        if n > self.max_users:
            raise FederatedRefused(f"the round has more users than max_users="
                                   f"{self.max_users} declared (the population bound is "
                                   "public); not released")
        ids = np.arange(n) if user_ids is None else np.asarray(user_ids)
        if ids.shape != (n,) or (n and not np.issubdtype(ids.dtype, np.integer)):
            raise ValueError(f"user_ids must be {n} integers (one per user), got shape "
                             f"{ids.shape}, dtype {ids.dtype}")
        if n and int(ids.min()) < 0:
            i = int(np.argmin(ids))
            raise ValueError(f"user_ids must be >= 0, got user_ids[{i}]={int(ids[i])}")
        if np.unique(ids).size != n:
            raise ValueError("user_ids must not repeat (one id per user)")
        return (ids % self.shards).astype(np.int64)

    def secagg_threshold(self, clients: int) -> int:
        """The fewest survivors real secure aggregation unmasks in a shard of ``clients``
        clients: max(2, floor(2 c / 3) + 1, min(n_min, t*)), t* the most survivors the shard
        keeps with probability >= 1 - 2^-40 when its clients drop independently at the
        planned rate (binomial). More than two thirds of the shard's own clients (the
        complete-graph protocol's threshold, whatever the shard's size), and no more than a
        planned dropout needs where the quantile decides; a shard below it is refused and
        that refusal is not covered (module docstring). A shard of one client is refused.
        """
        c = v.count("clients", clients, 1)
        return _secagg_threshold(c, self.dropout, self.n_min)

    def top_up(self, survivors: int) -> int:
        """The shares the publisher adds to a shard with ``survivors`` survivors:
        max(0, n_min - survivors) (module docstring)."""
        return max(0, self.n_min - v.count("survivors", survivors, 0))

    def to_dict(self) -> dict[str, Any]:
        return {"max_users": self.max_users, "shard_size": self.shard_size,
                "dropout": self.dropout, "shards": self.shards, "n_min": self.n_min}


def server_view_epsilon(survivors: int, n_min: int, noise_epsilon: float,
                        sensitivity: int) -> float:
    """Pure epsilon protecting a participant (zero-out) against the secure-aggregation server,
    which sees a shard's sum before the top-up: eps_noise + Delta ln(n_min / k) for k < n_min
    survivors, eps_noise for k >= n_min.

    Parameters
    ----------
    survivors : int
        k, the survivors whose shares the server's sum holds, >= 1.
    n_min : int
        The shares the noise is planned for (each client's Polya shape is 1 / n_min), >= 1.
    noise_epsilon : float
        eps_noise: n_min shares add up to DL(a), a = e^{-eps_noise / Delta}.
    sensitivity : int
        Delta, the l1 change of one participant's vector, >= 1.

    Returns
    -------
    float
        The bound (module docstring: the ratio of the difference's pmf at z + 1 and z lies
        in [a s, a] for z >= 0, s = k / n_min <= 1). Without the Polya tables' delta.

    Raises
    ------
    TypeError
        If a count is not an integer or ``noise_epsilon`` not a real number.
    ValueError
        If ``survivors`` < 1, ``n_min`` < 1, ``sensitivity`` < 1 or ``noise_epsilon`` <= 0.

    References
    ----------
    [Bagdasaryan22]_ Def. 4.1 (the Polya law), Thm 4.2 (n_min shares give DL(a)).
    """
    k = v.count("survivors", survivors, 1)
    n = v.count("n_min", n_min, 1)
    eps = v.positive("noise_epsilon", noise_epsilon)
    d = v.count("sensitivity", sensitivity, 1)
    return eps + d * math.log(n / k) if k < n else eps


# --------------------------------------------------------------- the share-count pair
def gamma_share_rdp(alpha: float, n_min: int) -> float:
    """Closed-form bound on the order-alpha Renyi divergence (both directions, the larger) of
    Polya(1, a) against Polya(1 + 1/n_min, a), for every a: that of Gamma(1) and Gamma(1 + h),
    h = 1/n_min, of one scale (module docstring); inf when alpha >= 1 + n_min.

    Parameters
    ----------
    alpha : float
        Renyi order, > 1.
    n_min : int
        Fewest clients whose shares make up the noise, >= 1.

    Returns
    -------
    float
        The bound (>= 0, with a floating-point slack), or ``inf``.

    Raises
    ------
    TypeError
        If ``alpha`` is not a real number or ``n_min`` not an integer.
    ValueError
        If ``alpha`` <= 1 or ``n_min`` < 1.

    References
    ----------
    [vEH14]_ Thm 9 (data processing: the Polya variables are a Poisson mixture of the Gamma
    ones); [Wendel48]_ (the Gamma-function ratio bound).
    """
    al = _alpha(alpha)
    h = 1.0 / v.count("n_min", n_min)
    up = (gammaln(1.0 + al * h) - al * gammaln(1.0 + h)) / (al - 1.0)
    z = 1.0 + h - al * h
    down = (gammaln(z) + (al - 1.0) * gammaln(1.0 + h)) / (al - 1.0) if z > 0 else math.inf
    return _slack(float(max(up, down, 0.0)))


@functools.lru_cache(maxsize=32)
def _log_ratio_bounds(a: float, h: float, K: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, up, ln P) with lo_k <= ln(Q(k) / P(k)) <= up_k for k = 0..K, P = Polya(1, a),
    Q = Polya(1 + h, a): rho_k = Q(k) / P(k) = (1 - a)^h prod_{j <= k} (1 + h / j) (the ratio
    of consecutive Polya terms), summed as logs; the floating-point error of the running sum
    (below k ulps of it) is covered by a relative pad of 2^-30 on each side."""
    j = np.arange(1, K + 1, dtype=np.float64)
    run = h * math.log1p(-a) + np.concatenate(([0.0], np.cumsum(np.log1p(h / j))))
    pad = 2.0**-30 * np.abs(run) + 1e-300
    log_p = math.log1p(-a) + np.arange(K + 1, dtype=np.float64) * math.log(a)
    return run - pad, run + pad, log_p


def _terms_needed(al: float, h: float, a: float) -> int:
    """Terms of the series kept at order alpha: past the bulk of P(k) rho_k^alpha (which
    peaks near alpha h / ln(1/a)) and far enough that the Q || P tail's geometric ratio
    a (1 + 1/(K + 2))^{alpha h} is at most sqrt(a)."""
    L = -math.log(a)
    ah = al * h
    K = math.ceil((45.0 + ah * math.log(2.0 + ah / L)) / L + 3.0 * ah / L) + 64
    if L < 100.0 * ah:
        K = max(K, math.ceil(1.0 / math.expm1(L / (2.0 * ah))))
    return K


def series_share_rdp(alpha: float, n_min: int, a: float) -> float:
    """Bound on the order-alpha Renyi divergence (both directions, the larger) of Polya(1, a)
    against Polya(1 + 1/n_min, a) by the series over the pmfs, with proven tail bounds;
    inf when it would need more than 2^18 terms (then use :func:`gamma_share_rdp`).

    Parameters
    ----------
    alpha : float
        Renyi order, > 1.
    n_min : int
        Fewest clients whose shares make up the noise, >= 1.
    a : float
        The Polya parameter, in (0, 1).

    Returns
    -------
    float
        The bound (>= 0, with a floating-point slack), or ``inf``.

    Raises
    ------
    TypeError
        If ``alpha`` or ``a`` is not a real number or ``n_min`` not an integer.
    ValueError
        If ``alpha`` <= 1, ``n_min`` < 1 or ``a`` is not in (0, 1).

    References
    ----------
    [Wendel48]_ (the tail bound rho_k <= C (k + 1)^h); [Bagdasaryan22]_ Sec. 4 (the Polya
    shares).
    """
    al = _alpha(alpha)
    h = 1.0 / v.count("n_min", n_min)
    a = v.probability("a", a)
    K = _terms_needed(al, h, a)
    if K > _MAX_TERMS:
        return math.inf
    return _series(al, h, a, K, _log_ratio_bounds(a, h, K))


def _series(al: float, h: float, a: float, K: int,
            table: tuple[np.ndarray, np.ndarray, np.ndarray]) -> float:
    """:func:`series_share_rdp` with the first K + 1 entries of a (lo, up, ln P) table."""
    lo, up, log_p = table[0][:K + 1], table[1][:K + 1], table[2][:K + 1]
    ah = al * h
    log_c = h * math.log1p(-a) - float(gammaln(1.0 + h))  # rho_k <= C (k + 1)^h (Wendel)
    log_q = math.log(a) + ah * math.log1p(1.0 / (K + 2))
    log_tail_qp = (math.log1p(-a) + (K + 1) * math.log(a) + al * log_c
                   + ah * math.log(K + 2) - math.log(-math.expm1(log_q)))
    log_tail_pq = (K + 1) * math.log(a) + (1.0 - al) * float(lo[-1])  # rho increases in k
    up_div = _renyi_sum(log_p, al * up, log_tail_qp, a ** (K + 1)) / (al - 1.0)
    down_div = _renyi_sum(log_p, (1.0 - al) * lo, log_tail_pq, a ** (K + 1)) / (al - 1.0)
    return _slack(float(max(up_div, down_div, 0.0)))


def _renyi_sum(log_p: np.ndarray, expo: np.ndarray, log_tail: float, p_tail: float) -> float:
    """An upper bound on ln(sum_k P(k) e^{expo_k} + tail), with sum_k P(k) = 1 - p_tail over the
    terms kept: through expm1 when the exponents are small (the sum is then 1 + tiny and is
    formed as 1 + sum P (e^x - 1), without cancellation), else by log-sum-exp."""
    if float(np.max(np.abs(expo))) < 1.0:
        terms = np.exp(log_p) * np.expm1(expo)
        err = 2.0**-40 * float(np.abs(terms).sum()) + 1e-300
        s = float(terms.sum()) - p_tail + math.exp(log_tail) + err
        return math.log1p(s) if s > -1.0 else -math.inf
    x = log_p + expo
    top = max(float(x.max()), log_tail)
    return top + math.log(float(np.exp(x - top).sum()) + math.exp(log_tail - top)) + 1e-12


def share_rdp(alpha: float, n_min: int, a: float) -> float:
    """The smaller of :func:`series_share_rdp` and :func:`gamma_share_rdp`: per cell and per
    Polya variable, an upper bound on both directions' order-alpha Renyi divergence between
    the noise of n_min and of n_min + 1 clients' shares.

    Parameters
    ----------
    alpha : float
        Renyi order, > 1.
    n_min : int
        Fewest clients whose shares make up the noise, >= 1.
    a : float
        The Polya parameter, in (0, 1).

    Returns
    -------
    float
        min(:func:`series_share_rdp`, :func:`gamma_share_rdp`).

    Raises
    ------
    TypeError
        If ``alpha`` or ``a`` is not a real number or ``n_min`` not an integer.
    ValueError
        If ``alpha`` <= 1, ``n_min`` < 1 or ``a`` is not in (0, 1).

    References
    ----------
    [vEH14]_ Thm 9; [Wendel48]_; [Bagdasaryan22]_ Sec. 4.
    """
    return min(series_share_rdp(alpha, n_min, a), gamma_share_rdp(alpha, n_min))


@functools.lru_cache(maxsize=512)
def joining_share_epsilon(n_min: int, a: float, dimension: int, delta: float
                          ) -> tuple[float, float]:
    """(eps_share, alpha): the shape pair of ``dimension`` cells, noise of n_min against
    n_min + 1 shares of X - Y, is (eps_share, delta)-indistinguishable in both directions.

    Renyi divergence 2 d tau(alpha) (two Polya variables per cell, d independent cells:
    additivity, as in the composition of [Mironov17]_ Prop. 1) converted by [CKS20]_
    Prop. 12: eps = rdp + (alpha ln(1 - 1/alpha) - ln(alpha - 1) - ln delta) / (alpha - 1),
    minimised over the orders (a log-spaced grid, then a golden-section search
    around its best point; every order gives a valid bound).
    """
    n_min = v.count("n_min", n_min)
    a = v.probability("a", a)
    d = v.count("dimension", dimension)
    delta = v.probability("delta", delta)
    h = share_shape(n_min)  # the shape the clients draw (the float 1 / n_min, rounded up)
    al_max = min(_ALPHAS[-1], 100.0 * n_min + 100.0)
    K_max = min(_terms_needed(al_max, h, a), _MAX_TERMS)
    if K_max > _CHEAP_TERMS and al_max < 1.0 + n_min:
        K_max = min(K_max, _CHEAP_TERMS)
    table = _log_ratio_bounds(a, h, K_max)
    best = [math.inf, math.nan]

    def f(log_al: float) -> float:
        al = math.exp(log_al)
        conv = (al * math.log1p(-1.0 / al) - math.log(al - 1.0) - math.log(delta)) / (al - 1.0)
        if conv >= best[0]:  # the divergence is >= 0: this order cannot do better
            return conv
        K = _terms_needed(al, h, a)
        tau = gamma_share_rdp(al, n_min)
        # the series is the a-dependent refinement: worth its cost while a is far from 1
        # (K small) or where the closed form is infinite (alpha >= 1 + n_min)
        if K <= K_max and (K <= _CHEAP_TERMS or math.isinf(tau)):
            tau = min(tau, _series(al, h, a, K, table))
        val = 2 * d * tau + conv
        if val < best[0]:
            best[:] = [val, al]
        return val

    grid = np.linspace(math.log(_ALPHAS[0]), math.log(al_max), len(_ALPHAS))
    vals = [f(x) for x in grid]
    i = int(np.argmin(vals))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    g = (math.sqrt(5.0) - 1.0) / 2.0
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = f(x1), f(x2)
    for _ in range(10):
        if f1 <= f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - g * (hi - lo)
            f1 = f(x1)
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + g * (hi - lo)
            f2 = f(x2)
    return float(best[0]), float(best[1])


@dataclass(frozen=True)
class AddRemoveNoise:
    """The noise of an add/remove federated release and its guarantee's parts.

    Attributes
    ----------
    epsilon, delta : float
        The release's target (the delta of the share-count pair, without the sampler's).
    l1_bound, n_min, dimension : int
        Delta, the public survivors per shard, the vector length d.
    noise_epsilon : float
        eps_noise: the discrete Laplace the survivors' shares add up to, a = e^{-eps_noise /
        Delta}.
    share_epsilon, share_delta, alpha : float
        (eps_share, delta_1) of the share-count pair and the Renyi order that gave it;
        eps_noise + eps_share <= epsilon and e^{eps_noise} delta_1 <= delta.
    """

    epsilon: float
    delta: float
    l1_bound: int
    n_min: int
    dimension: int
    noise_epsilon: float
    share_epsilon: float
    share_delta: float
    alpha: float

    @property
    def a(self) -> float:
        return math.exp(-self.noise_epsilon / self.l1_bound)

    @property
    def certified_delta(self) -> float:
        """e^{eps_noise} delta_1 (<= delta)."""
        return math.exp(self.noise_epsilon) * self.share_delta

    def server_view_epsilon(self, survivors: int) -> float:
        """:func:`server_view_epsilon` of a shard of ``survivors`` under this noise."""
        return server_view_epsilon(survivors, self.n_min, self.noise_epsilon, self.l1_bound)

    def to_dict(self) -> dict[str, Any]:
        return {"noise_epsilon": self.noise_epsilon, "share_epsilon": self.share_epsilon,
                "share_delta": self.share_delta, "share_renyi_order": self.alpha,
                "n_min": self.n_min}


@functools.lru_cache(maxsize=256)
def add_remove_noise(epsilon: float, delta: float, l1_bound: int, n_min: int,
                     dimension: int) -> AddRemoveNoise:
    """Calibrate an add/remove federated release to (epsilon, delta) (module docstring).

    An eps_noise close to the largest with eps_noise + eps_share(a(eps_noise)) <= epsilon
    (checked), delta_1 = delta e^{-epsilon}. eps_share falls as a moves away from 1, so
    x + eps_share(x) need not be monotone: the search keeps a checked feasible point.

    Raises
    ------
    FederatedRefused
        No eps_noise in (0, epsilon) pays for the joining user's share: n_min too small for
        the vector length and epsilon (raise max_users or shard_size, lower the dropout, or
        use neighbour "zero_out", where the participants are public).
    """
    eps = v.positive("epsilon", epsilon)
    delta = v.probability("delta", delta)
    bound = v.count("l1_bound", l1_bound)
    n_min = v.count("n_min", n_min)
    d = v.count("dimension", dimension)
    d1 = delta * math.exp(-eps)

    def share(x: float) -> tuple[float, float]:
        return joining_share_epsilon(n_min, math.exp(-x / bound), d, d1)

    def ok(x: float) -> bool:
        return x > 0 and x + share(x)[0] <= eps

    # a feasible point (the fixed point's first step, else a coarser one), then bisection
    # towards eps: any feasible point is sound, the search only buys accuracy
    lo = eps - share(eps)[0] * 1.01
    if not ok(lo):
        coarser = next((eps * f for f in (0.5, 0.25, 0.1, 0.03, 0.01) if ok(eps * f)), None)
        if coarser is None:
            s = share(eps * 0.01)[0]
            raise FederatedRefused(
                f"add/remove: the joining user's own noise share costs eps_share >= {s:.4g} "
                f"with n_min={n_min} survivors per shard over {d} cells, more than "
                f"epsilon={epsilon!r} can pay; raise max_users or shard_size (a larger "
                "n_min), lower the dropout, or use neighbour='zero_out' (participants public)")
        lo = coarser
    hi = eps
    for _ in range(7):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    e_share, alpha = share(lo)
    return AddRemoveNoise(epsilon=eps, delta=delta, l1_bound=bound, n_min=n_min, dimension=d,
                          noise_epsilon=lo, share_epsilon=e_share, share_delta=d1,
                          alpha=alpha)


def _alpha(alpha: float) -> float:
    al = v.real("alpha", alpha)
    if not al > 1.0:
        raise ValueError(f"alpha must be > 1, got alpha={alpha!r}")
    return al


def _slack(x: float) -> float:
    return x * (1.0 + _SLACK) + 1e-300 if math.isfinite(x) else x


__all__ = ["DEFAULT_SHARE_DELTA", "AddRemoveNoise", "ShardPlan", "add_remove_noise",
           "gamma_share_rdp", "joining_share_epsilon", "series_share_rdp",
           "server_view_epsilon", "share_rdp"]
