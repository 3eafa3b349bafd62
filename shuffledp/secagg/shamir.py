"""t-out-of-n Shamir secret sharing over the prime field GF(2^255 - 19) ([Shamir79]_).

Secrets are integers below P = 2^255 - 19 (32-byte seeds and X25519 private keys are drawn
below P, :func:`random_secret`). A share is (x, y) with y = f(x) for a random polynomial f
of degree t - 1 with f(0) the secret and x a non-zero point (a client's id + 1); any t
shares give f(0) by Lagrange interpolation at 0, and any t - 1 shares are jointly uniform
whatever the secret (the tests check both exhaustively on a small field through the same
code, :func:`share` and :func:`reconstruct` take the prime as a parameter). Coefficients
come from the cryptographically secure generator (rejection sampling below P, no modulo
bias).

Robust reconstruction (:func:`robust_reconstruct`): a holder may reveal a wrong share (a
faulty or hostile client). Any t shares interpolate *some* polynomial, so taking the first t
and ignoring the rest ([Bonawitz17]_'s semi-honest server) turns one flipped bit into a wrong
secret and a silently wrong sum. Here every share is used:

1. interpolate from t shares and check that every other share lies on that polynomial and
   that f(0) passes the caller's ``verify`` (a commitment to the secret); if so, done;
2. otherwise decode the Reed-Solomon code the shares form ([Gao03]_): with k shares and
   threshold t, up to floor((k - t) / 2) wrong shares are corrected without any help;
3. otherwise search subsets that leave out 1, 2, ... shares, accepting a reconstruction only
   if ``verify`` passes. A subset that contains a wrong share reconstructs a wrong secret
   (f(0) = sum_i l_i y_i with every Lagrange coefficient l_i != 0, so an error e in one share
   moves f(0) by l_i e != 0), so with a binding commitment t correct shares suffice.

The holders whose shares are off the accepted polynomial are returned by name. When no
polynomial verifies, :class:`ShareError` says so and no secret is returned.

References
----------
.. [Shamir79] Shamir (1979), "How to Share a Secret" -- full entry in docs/references.md.
.. [Gao03] Gao (2003), "A New Algorithm for Decoding Reed-Solomon Codes", Sec. 2,
   Algorithm 1 -- full entry in docs/references.md.
.. [MacWilliams77] MacWilliams and Sloane (1977), "The Theory of Error-Correcting Codes",
   Ch. 10 Sec. 8 -- full entry in docs/references.md.
.. [Bonawitz17] Bonawitz et al. (2017), "Practical Secure Aggregation", Fig. 4 (round 4,
   "Unmasking") -- full entry in docs/references.md.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shuffledp.randomness import SecureRandom

P = 2**255 - 19
SECRET_BYTES = 32


def random_secret(rng: SecureRandom, prime: int = P) -> int:
    """A uniform integer in [0, prime) (rejection on whole random byte strings).

    Parameters
    ----------
    rng : shuffledp.randomness.SecureRandom
        The source of random bytes.
    prime : int, optional
        The field's modulus (default 2^255 - 19).

    Returns
    -------
    int
        Uniform on ``0 .. prime - 1``.

    Raises
    ------
    ValueError
        ``prime`` < 2 (it would never return).
    """
    if prime < 2:
        raise ValueError(f"prime must be >= 2, got prime={prime!r}")
    nbytes = (prime.bit_length() + 7) // 8
    mask = (1 << prime.bit_length()) - 1
    while True:
        x = int.from_bytes(rng.bytes(nbytes), "little") & mask
        if x < prime:
            return x


def share(secret: int, xs: Sequence[int], t: int, rng: SecureRandom,
          prime: int = P) -> list[int]:
    """Shares f(x) for x in ``xs`` of ``secret`` (0 <= secret < prime), threshold t.

    Parameters
    ----------
    secret : int
        f(0), 0 <= secret < prime.
    xs : sequence of int
        Distinct non-zero points (client ids + 1).
    t : int
        Threshold, 1 <= t <= len(xs): any t shares give the secret, fewer give nothing
        ([Shamir79]_).
    rng : shuffledp.randomness.SecureRandom
        Draws the t - 1 random coefficients.
    prime : int, optional
        The field's modulus (default 2^255 - 19).

    Returns
    -------
    list of int
        f(x) for each x of ``xs``, in order.

    Raises
    ------
    ValueError
        ``secret`` outside [0, prime), t outside [1, len(xs)], or repeated or zero points.
    """
    if not (0 <= secret < prime):
        raise ValueError(f"secret must be in [0, prime), got a value of {secret.bit_length()} "
                         "bits")
    if not (1 <= t <= len(xs)):
        raise ValueError(f"need 1 <= t <= len(xs), got t={t!r}, len(xs)={len(xs)}")
    if len(set(xs)) != len(xs) or any(x % prime == 0 for x in xs):
        raise ValueError("share points must be distinct and non-zero")
    coeffs = [secret] + [random_secret(rng, prime) for _ in range(t - 1)]
    out = []
    for x in xs:
        y = 0
        for c in reversed(coeffs):  # Horner
            y = (y * x + c) % prime
        out.append(y)
    return out


def lagrange_at_zero(xs: Sequence[int], prime: int = P) -> list[int]:
    """Coefficients l_i with f(0) = sum_i l_i f(x_i) for distinct non-zero xs.

    Parameters
    ----------
    xs : sequence of int
        Distinct non-zero points.
    prime : int, optional
        The field's modulus (default 2^255 - 19).

    Returns
    -------
    list of int
        The Lagrange weights at 0, in the order of ``xs``.

    Raises
    ------
    ValueError
        Repeated or zero points.
    """
    if len(set(xs)) != len(xs) or any(x % prime == 0 for x in xs):
        raise ValueError(f"share points must be distinct and non-zero, got {list(xs)[:10]}")
    out = []
    for i, xi in enumerate(xs):
        num, den = 1, 1
        for j, xj in enumerate(xs):
            if j != i:
                num = num * xj % prime
                den = den * (xj - xi) % prime
        out.append(num * pow(den, -1, prime) % prime)
    return out


def reconstruct(points: Sequence[tuple[int, int]], prime: int = P) -> int:
    """f(0) from shares (x, f(x)); the caller supplies at least t of them.

    Parameters
    ----------
    points : sequence of (int, int)
        Shares (x, f(x)) with distinct non-zero x. Not checked against each other: a wrong
        share gives a wrong secret (:func:`robust_reconstruct` detects that).
    prime : int, optional
        The field's modulus (default 2^255 - 19).

    Returns
    -------
    int
        f(0) of the polynomial of degree < len(points) through ``points``.

    Raises
    ------
    ValueError
        No share, or repeated or zero points.
    """
    if not points:
        raise ValueError("reconstruct needs at least one share, got none")
    xs = [x for x, _ in points]
    return sum(c * y for c, (_, y) in zip(lagrange_at_zero(xs, prime), points)) % prime


# ----------------------------------------------------------------------------- polynomials
# Coefficient lists, lowest degree first, entries in [0, prime); [] is the zero polynomial.
def _trim(a: list[int]) -> list[int]:
    while a and a[-1] == 0:
        a.pop()
    return a


def _sub(a: list[int], b: list[int], prime: int) -> list[int]:
    n = max(len(a), len(b))
    return _trim([((a[i] if i < len(a) else 0) - (b[i] if i < len(b) else 0)) % prime
                  for i in range(n)])


def _mul(a: list[int], b: list[int], prime: int) -> list[int]:
    if not a or not b:
        return []
    out = [0] * (len(a) + len(b) - 1)
    for i, ai in enumerate(a):
        if ai:
            for j, bj in enumerate(b):
                out[i + j] += ai * bj
    return _trim([c % prime for c in out])


def _divmod(a: list[int], b: list[int], prime: int) -> tuple[list[int], list[int]]:
    r = list(a)
    if len(r) < len(b):
        return [], r
    inv = pow(b[-1], -1, prime)
    q = [0] * (len(r) - len(b) + 1)
    for k in range(len(q) - 1, -1, -1):
        c = r[k + len(b) - 1] * inv % prime
        q[k] = c
        if c:
            for j, bj in enumerate(b):
                r[k + j] = (r[k + j] - c * bj) % prime
    return _trim(q), _trim(r[:len(b) - 1])


def _horner(a: Sequence[int], x: int, prime: int) -> int:
    y = 0
    for c in reversed(a):
        y = (y * x + c) % prime
    return y


def interpolate(points: Sequence[tuple[int, int]], prime: int = P) -> list[int]:
    """Coefficients (lowest degree first) of the polynomial of degree < len(points) through
    ``points`` (Newton's divided differences, O(k^2) field operations).

    Parameters
    ----------
    points : sequence of (int, int)
        (x, y) with distinct x modulo ``prime``.
    prime : int, optional
        The field's modulus (default 2^255 - 19).

    Returns
    -------
    list of int
        The coefficients, lowest degree first, trailing zeros removed ([] for the zero
        polynomial).

    Raises
    ------
    ValueError
        Repeated points.
    """
    xs = [x for x, _ in points]
    if len(set(x % prime for x in xs)) != len(xs):
        raise ValueError(f"interpolation points must be distinct, got {xs[:10]}")
    coef = [y % prime for _, y in points]
    k = len(points)
    for j in range(1, k):
        for i in range(k - 1, j - 1, -1):
            coef[i] = (coef[i] - coef[i - 1]) * pow(xs[i] - xs[i - j], -1, prime) % prime
    poly: list[int] = []
    for i in range(k - 1, -1, -1):  # Horner on the Newton form
        poly = _mul(poly, [(-xs[i]) % prime, 1], prime) if poly else []
        poly = _sub(poly, [(-coef[i]) % prime], prime)
    return poly


def gao_decode(points: Sequence[tuple[int, int]], t: int,
               prime: int = P) -> list[int] | None:
    """The polynomial of degree < t agreeing with all but at most floor((k - t) / 2) of the
    k points, or None if there is none ([Gao03]_ Algorithm 1: interpolate, partial extended
    Euclid on (prod (x - x_i), interpolant), one division).

    Parameters
    ----------
    points : sequence of (int, int)
        k shares (x, y) with distinct x.
    t : int
        The polynomial sought has degree < t.
    prime : int, optional
        The field's modulus (default 2^255 - 19).

    Returns
    -------
    list of int or None
        The coefficients, lowest degree first, or None when k < t or no polynomial of
        degree < t is within floor((k - t) / 2) errors of the points.

    Raises
    ------
    ValueError
        Repeated points.
    """
    k = len(points)
    if k < t:
        return None
    g0 = [1]
    for x, _ in points:
        g0 = _mul(g0, [(-x) % prime, 1], prime)
    g1 = interpolate(points, prime)
    stop = (k + t) // 2 if (k + t) % 2 == 0 else (k + t + 1) // 2  # deg g < (k + t) / 2
    r0, r1, v0, v1 = g0, g1, [], [1]
    while len(r1) - 1 >= stop:
        q, r = _divmod(r0, r1, prime)
        r0, r1 = r1, r
        v0, v1 = v1, _sub(v0, _mul(q, v1, prime), prime)
    if not v1:
        return None
    f, rem = _divmod(r1, v1, prime)
    if rem or len(f) > t:
        return None
    return f


def parity_check(xs: Sequence[int], g: Sequence[int], prime: int = P) -> list[int]:
    """c_i = g(x_i) / prod_{j != i} (x_i - x_j): sum_i c_i f(x_i) = 0 whenever
    deg f + deg g <= len(xs) - 2 (see :class:`ShareChecker`).

    Parameters
    ----------
    xs : sequence of int
        Distinct share points.
    g : sequence of int
        The coefficients of g, lowest degree first.
    prime : int, optional
        The field's modulus (default 2^255 - 19).

    Returns
    -------
    list of int
        c_i for each x_i, in the order of ``xs``.

    Raises
    ------
    ValueError
        Repeated points (no inverse of 0).
    """
    out = []
    for i, xi in enumerate(xs):
        den = 1
        for j, xj in enumerate(xs):
            if j != i:
                den = den * (xi - xj) % prime
        out.append(pow(den, -1, prime) * _horner(g, xi, prime) % prime)
    return out


class ShareChecker:
    """Fast check that shares held by one set of holders lie on one polynomial of degree < t.

    For points x_1..x_k, sum_i u_i h(x_i) = 0 for every polynomial h of degree <= k - 2,
    where u_i = 1 / prod_{j != i} (x_i - x_j) (the leading coefficient of the interpolant
    of h). So shares y_i = f(x_i) with deg f < t satisfy sum_i u_i g(x_i) y_i = 0 for every
    g of degree < k - t (the dual of the Reed-Solomon code; [MacWilliams77]_ Ch. 10 Sec. 8).
    With g drawn uniformly *after* the shares are fixed, shares that are not on one such
    polynomial pass with probability 1 / prime (the map g -> sum_i u_i g(x_i) y_i is a
    non-zero linear form). One check costs k multiplications; the coefficients
    c_i = u_i g(x_i) and the Lagrange weights at 0 of the first t points are computed once
    per holder set (O(k^2)).

    Parameters
    ----------
    xs : sequence of int
        The k distinct non-zero share points of the holders.
    t : int
        Threshold, t <= k.
    rng : shuffledp.randomness.SecureRandom
        Draws g (after the shares are fixed).
    prime : int, optional
        The field's modulus (default 2^255 - 19).

    Attributes
    ----------
    xs : tuple of int
        The share points.
    t : int
        The threshold.
    prime : int
        The field's modulus.
    lagrange0 : list of int
        Lagrange weights at 0 of the first t points.
    check : list of int
        c_i = u_i g(x_i), the random parity check.

    Raises
    ------
    ValueError
        Fewer than t points, or repeated or zero points.
    """

    def __init__(self, xs: Sequence[int], t: int, rng: SecureRandom, prime: int = P) -> None:
        self.xs = tuple(int(x) for x in xs)
        self.t = int(t)
        self.prime = prime
        k = len(self.xs)
        if k < t:
            raise ValueError(f"{k} share points, fewer than t={t}")
        self.lagrange0 = lagrange_at_zero(self.xs[:t], prime)
        self.check = parity_check(self.xs, [random_secret(rng, prime) for _ in range(k - t)],
                                  prime)

    def consistent(self, ys: Sequence[int]) -> bool:
        """Whether the shares (in the order of ``xs``) pass the random parity check."""
        return sum(c * y for c, y in zip(self.check, ys)) % self.prime == 0

    def secret(self, ys: Sequence[int]) -> int:
        """f(0) from the first t shares."""
        return sum(c * y for c, y in zip(self.lagrange0, ys)) % self.prime


class ShareError(ValueError):
    """No polynomial of degree < t through enough shares passes the secret's check."""


@dataclass(frozen=True)
class Reconstruction:
    """Output of :func:`robust_reconstruct`.

    Attributes
    ----------
    secret : int
        f(0) of the accepted polynomial (it passed ``verify``, so it is the committed secret
        whichever shares were wrong).
    wrong : tuple of int
        Share points x whose y is off the accepted polynomial.
    certain : bool
        True when the accepted polynomial agrees with A > (k + t - 2) / 2 of the k shares.
        Two distinct polynomials of degree < t that both pass through (0, secret) share at
        most t - 2 of the points, so then every other verified polynomial agrees with fewer
        shares, and if fewer than (k - t + 2) / 2 holders sent wrong shares the accepted one
        is the dealer's: ``wrong`` names exactly the faulty holders. Otherwise the secret is
        still right but a coalition of faulty holders could have framed honest ones, and
        ``wrong`` lists suspects only.
    method : str
        ``"consistent"`` (every share on one polynomial), ``"decoded"`` (Reed-Solomon
        decoding) or ``"search"`` (commitment-checked subsets).
    """

    secret: int
    wrong: tuple[int, ...]
    certain: bool
    method: str


SEARCH_BUDGET = 4096  # subsets tried by the commitment-checked search before refusing


def _accept(pts: list[tuple[int, int]], f: list[int], t: int, prime: int,
            method: str) -> Reconstruction:
    wrong = tuple(x for x, y in pts if _horner(f, x, prime) != y)
    agree = len(pts) - len(wrong)
    return Reconstruction(_horner(f, 0, prime), wrong, 2 * agree > len(pts) + t - 2, method)


def robust_reconstruct(points: Sequence[tuple[int, int]], t: int,
                       verify: Callable[[int], bool], *, prime: int = P,
                       budget: int = SEARCH_BUDGET) -> Reconstruction:
    """The secret behind ``points`` using every share, naming the wrong ones.

    Parameters
    ----------
    points : sequence of (x, y)
        Shares with distinct non-zero x (any order; processed sorted by x).
    t : int
        Threshold: the polynomial has degree < t.
    verify : callable int -> bool
        Checks a candidate secret against a binding commitment (a hash, or a public key
        derived from it). Only a candidate that passes is returned.
    budget : int
        Subsets the search of step 3 may try before giving up.

    Returns
    -------
    Reconstruction
        The verified secret, the points off the accepted polynomial and whether that
        naming is certain (see :class:`Reconstruction`).

    Raises
    ------
    ShareError
        Fewer than t shares, repeated points, or no polynomial through t of them verifies
        within the budget. It names nobody: the shares that disagree with some t others
        may be the right ones.
    """
    pts = sorted((int(x), int(y) % prime) for x, y in points)
    k = len(pts)
    if k < t:
        raise ShareError(f"{k} shares, fewer than t={t}")
    if len({x for x, _ in pts}) != k or any(x % prime == 0 for x, _ in pts):
        raise ShareError(f"share points must be distinct and non-zero, got "
                         f"{[x for x, _ in pts][:10]}")
    first = _accept(pts, interpolate(pts[:t], prime), t, prime, "search")
    first_ok = verify(first.secret)
    if first_ok and not first.wrong:
        return dataclasses.replace(first, method="consistent")
    if first_ok and first.certain:
        return first
    if k - t >= 2:
        g = gao_decode(pts, t, prime)
        if g is not None and verify(_horner(g, 0, prime)):
            return _accept(pts, g, t, prime, "decoded")
    best = first if first_ok else None
    subsets = itertools.chain.from_iterable(itertools.combinations(range(k), e)
                                            for e in range(1, k - t + 1))
    tried = 0
    for left_out in itertools.islice(subsets, budget):
        tried += 1
        skip = set(left_out)
        g = interpolate([pts[i] for i in range(k) if i not in skip][:t], prime)
        if not verify(_horner(g, 0, prime)):
            continue
        cand = _accept(pts, g, t, prime, "search")
        if cand.certain:
            return cand
        if best is None or len(cand.wrong) < len(best.wrong):
            best = cand
    if best is not None:
        return best
    raise ShareError(f"{k} shares (t={t}): no polynomial through t of them matches the "
                     f"secret's commitment (tried {tried} subsets); fewer than t shares are "
                     "right, or the commitment is, and which cannot be told")


_INVERSES: dict[int, int] = {}  # d -> 1/d mod P for the small differences of share points


def _inv_small(d: int) -> int:
    got = _INVERSES.get(d)
    if got is None:
        got = _INVERSES[d] = pow(d % P, -1, P)
    return got


def checked_reconstruct(points: Sequence[tuple[int, int]], t: int,
                        verify: Callable[[int], bool]) -> Reconstruction:
    """:func:`robust_reconstruct` over GF(2^255 - 19) with a fast path for the usual case.

    The fast path interpolates the first t shares (by x) in Newton form, with the inverses of
    the point differences cached (share points are client ids + 1, so the differences repeat
    across secrets), evaluates that polynomial at every other share point and at 0, and
    returns when every share agrees and ``verify`` accepts f(0): O(k t) field operations for
    k shares instead of the O(t^2) inversions of a general interpolation. Anything else (a
    share off the polynomial, a secret the commitment rejects) goes to
    :func:`robust_reconstruct`, which names the wrong shares.

    Parameters
    ----------
    points : sequence of (int, int)
        Shares (x, y) with distinct non-zero x.
    t : int
        Threshold.
    verify : callable int -> bool
        The commitment check of a candidate secret.

    Returns
    -------
    Reconstruction
        As :func:`robust_reconstruct` (method ``"consistent"`` on the fast path).

    Raises
    ------
    ShareError
        As :func:`robust_reconstruct`.
    """
    pts = sorted((int(x), int(y) % P) for x, y in points)
    if len(pts) < t or len({x for x, _ in pts}) != len(pts) or any(x % P == 0 for x, _ in pts):
        return robust_reconstruct(pts, t, verify)
    xs = [x for x, _ in pts[:t]]
    coef = [y for _, y in pts[:t]]
    for j in range(1, t):
        for i in range(t - 1, j - 1, -1):
            coef[i] = (coef[i] - coef[i - 1]) * _inv_small(xs[i] - xs[i - j]) % P

    def at(x: int) -> int:
        y = coef[-1]
        for i in range(t - 2, -1, -1):
            y = (y * (x - xs[i]) + coef[i]) % P
        return y

    if all(at(x) == y for x, y in pts[t:]):
        secret = at(0)
        if verify(secret):
            return Reconstruction(secret, (), True, "consistent")
    return robust_reconstruct(pts, t, verify)


__all__ = ["P", "SECRET_BYTES", "Reconstruction", "ShareChecker", "ShareError",
           "checked_reconstruct", "gao_decode",
           "interpolate", "parity_check", "lagrange_at_zero", "random_secret", "reconstruct",
           "robust_reconstruct", "share"]
