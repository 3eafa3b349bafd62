"""t-out-of-n Shamir secret sharing over the prime field GF(2^255 - 19) ([Shamir79]_).

Secrets are integers below P = 2^255 - 19 (32-byte seeds and X25519 private keys are drawn
below P, :func:`random_secret`). A share is (x, y) with y = f(x) for a random polynomial f
of degree t - 1 with f(0) the secret and x a non-zero point (a client's id + 1); any t
shares give f(0) by Lagrange interpolation at 0, and any t - 1 shares are jointly uniform
whatever the secret (the tests check both exhaustively on a small field through the same
code, :func:`share` and :func:`reconstruct` take the prime as a parameter). Coefficients
come from the cryptographically secure generator (rejection sampling below P, no modulo
bias).

References
----------
.. [Shamir79] A. Shamir, "How to Share a Secret", Communications of the ACM 22(11), 1979.
"""

from __future__ import annotations

from collections.abc import Sequence

from shuffledp.crypto import SecureRandom

P = 2**255 - 19
SECRET_BYTES = 32


def random_secret(rng: SecureRandom, prime: int = P) -> int:
    """A uniform integer in [0, prime) (rejection on whole random byte strings)."""
    nbytes = (prime.bit_length() + 7) // 8
    mask = (1 << prime.bit_length()) - 1
    while True:
        x = int.from_bytes(rng.bytes(nbytes), "little") & mask
        if x < prime:
            return x


def share(secret: int, xs: Sequence[int], t: int, rng: SecureRandom,
          prime: int = P) -> list[int]:
    """Shares f(x) for x in ``xs`` of ``secret`` (0 <= secret < prime), threshold t.

    ``xs`` are distinct non-zero points (client ids + 1); 1 <= t <= len(xs).
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
    """Coefficients l_i with f(0) = sum_i l_i f(x_i) for distinct non-zero xs."""
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
    """f(0) from shares (x, f(x)); the caller supplies at least t of them."""
    if not points:
        raise ValueError("reconstruct needs at least one share, got none")
    xs = [x for x, _ in points]
    return sum(c * y for c, (_, y) in zip(lagrange_at_zero(xs, prime), points)) % prime


__all__ = ["P", "SECRET_BYTES", "lagrange_at_zero", "random_secret", "reconstruct", "share"]
