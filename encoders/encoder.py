"""The user side of the shuffle-model heatmap protocol ([Ghazi23]_ App. F, "Each user j").

For user j with distribution p_j over the leaf pixels:

1. y^j = [P_start p_j, ..., P_L p_j]: the user's mass in every cell of the measured levels
   (unscaled level counts, :func:`shuffledp.pyramid.level_counts` of p_j), computed sparsely.
2. z^j = round(B y^j) per level (:func:`shuffledp.encoders.rounding.scale_round`).
3. z'^j = z^j + X - Y with X, Y i.i.d. Polya(1/n_min, a_i) per coordinate of level i,
   a_i = exp(-eps_i / Delta_i) ([Bagdasaryan22]_ Thm 4.2; App. F slips fixed: calibrated to the
   scaled sensitivity, two-sided, over-provisioned for dropouts).
4. Split & Mix of the *noisy* z'^j into r additive shares over Z_q from the cryptographically
   secure :class:`~shuffledp.encoders.sharing.SecureRandom` (the App. F slip splits z^j).
5. Messages (a, w^b_a) for a in [0, m), b in [0, r): :func:`messages` packs them as
   ``(a << share_bits) | w``.

The deployment entry point :func:`encode_user` draws everything, the noise included, from the
cryptographically secure generator and refuses a seed. The research functions
(:func:`noisy_vectors`, :func:`encode_shares`) take ``rng`` for the noise (None = secure);
shares always come from the secure generator.

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
.. [Bagdasaryan22] E. Bagdasaryan, P. Kairouz, S. Mellem, A. Gascon, K. Bonawitz, D. Estrin,
   M. Gruteser, "Towards Sparse Federated Analytics: Location Heatmaps under Distributed
   Differential Privacy with Secure Aggregation", PoPETs 2022(4). arXiv:2111.02356.
"""

from __future__ import annotations

import numpy as np

from shuffledp.encoders.noise.polya import polya_difference
from shuffledp.encoders.rounding import level_entries
from shuffledp.encoders.sharing import share
from shuffledp.protocol.crypto import encrypt_records, encrypted_record_bytes
from shuffledp.protocol.params import ProtocolParams
from shuffledp.protocol.wire import KIND_USER, KIND_USER_ENC, Header, encode_batch
from shuffledp.randomness import RngLike, SecureRandom, noise_source
from shuffledp.users import UserDistributions


def _check(params: ProtocolParams) -> None:
    if not isinstance(params, ProtocolParams):
        raise TypeError(f"params must be a ProtocolParams, got {type(params).__name__}")
    params.check_supported()


def rounded_levels(
    params: ProtocolParams, users: UserDistributions, select: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sparse z^j = round(B y^j) of many users at once (steps 1-2).

    Returns
    -------
    user, coordinate, value : ndarray of int64
        One entry per (user, occupied measured cell); ``user`` indexes ``select`` (or all
        users), ``coordinate`` is the flat index in [0, m), ``value`` >= 0. Per user and
        level the values sum to B (largest remainder) or at most B (floor).
    """
    _check(params)
    if users.grid != params.grid:
        raise ValueError(f"users are on grid {users.grid}, params on grid {params.grid}")
    if select is not None:
        users = users.subset(np.asarray(select, dtype=np.int64))
    return level_entries(users, params.start, params.B, params.rounding)


def noisy_vectors(
    params: ProtocolParams,
    users: UserDistributions,
    select: np.ndarray | None = None,
    rng: RngLike | SecureRandom = None,
    *,
    noise: bool = True,
) -> np.ndarray:
    """Dense z'^j = z^j + (X - Y) for the selected users, shape (len(select), m), int64 (step 3).

    The Polya noise comes from the exact table sampler
    (:func:`shuffledp.encoders.noise.polya.polya_difference`): ``rng=None`` or a SecureRandom draws
    it from the cryptographically secure generator; a seed or Generator makes a reproducible
    research run. ``noise=False`` returns z^j (for tests and diagnostics only; not private).
    """
    _check(params)
    n_sel = users.n_users if select is None else len(select)
    u, c, z = rounded_levels(params, users, select)
    out = np.zeros((n_sel, params.m), dtype=np.int64)
    np.add.at(out, (u, c), z)
    if noise:
        src = noise_source(rng)
        a = params.coordinate_a()
        for j in range(n_sel):
            out[j] += polya_difference(params.polya_shape, a, params.m, src)
    return out


def encode_shares(
    params: ProtocolParams,
    users: UserDistributions,
    select: np.ndarray | None = None,
    rng: RngLike | SecureRandom = None,
    source: SecureRandom | None = None,
) -> np.ndarray:
    """Steps 1-4 for the selected users: shares of shape (len(select), r, m), uint32.

    ``shares[j, b, a]`` is w^{b+1}_a of user j; message (a, shares[j, b, a]). Shares always
    come from ``source`` (a SecureRandom); the noise from ``rng`` (see :func:`noisy_vectors`).
    """
    src = source if source is not None else SecureRandom()
    z = noisy_vectors(params, users, select, src if rng is None else rng)
    return share(z, params.q, params.r, src)


def messages(params: ProtocolParams, shares: np.ndarray) -> np.ndarray:
    """Pack one user's shares (r, m) into r*m messages ``(a << share_bits) | w`` (step 5).

    Order is coordinate-major within each share row; the shuffler permutes anyway. Returns
    uint32 when messages fit in 32 bits, else uint64 (the wire packs them into
    ``params.record_bytes`` bytes each).
    """
    _check(params)
    s = np.asarray(shares)
    if s.shape != (params.r, params.m):
        raise ValueError(f"shares must have shape (r, m) = {(params.r, params.m)}, got {s.shape}")
    dt = np.uint32 if params.record_bits <= 32 else np.uint64
    coord = np.arange(params.m, dtype=dt) << dt(params.share_bits)
    return (coord[None, :] | s.astype(dt)).ravel()


def encode_user(
    params: ProtocolParams,
    pixels: np.ndarray,
    weights: np.ndarray,
    *,
    source: SecureRandom | None = None,
    rng: object = None,
) -> np.ndarray:
    """One user's complete message vector (r*m packed messages) from (pixels, weights).

    Deployment path: the Polya noise and the shares are drawn from the cryptographically
    secure generator (``source``, a fresh SecureRandom by default). A seed is refused:
    ``rng`` exists only to reject it with a clear message.
    """
    if rng is not None:
        raise ValueError(
            f"encode_user is the deployment path and draws all randomness from the secure "
            f"generator; it refuses a seed, got rng={rng!r} (use noisy_vectors/encode_shares "
            "for reproducible research runs)"
        )
    if source is not None and not isinstance(source, SecureRandom):
        raise TypeError(f"source must be a SecureRandom, got source={source!r}")
    _check(params)
    users = UserDistributions.from_pixels(
        params.grid, np.zeros(np.size(pixels), dtype=np.int64), pixels, weights
    )
    src = source if source is not None else SecureRandom()
    sh = encode_shares(params, users, None, src, src)[0]
    return messages(params, sh)


def frame_messages(
    params: ProtocolParams, records: np.ndarray, analyzer_public: bytes | None = None
) -> bytes:
    """One user's packed messages as a wire batch (header + records).

    With ``analyzer_public`` (the analyzer's raw 32-byte X25519 key) every message is
    encrypted to the analyzer (deployment path); without it the batch is plaintext, a
    simulation aid only (whoever relays it reads every share).
    """

    if analyzer_public is None:
        h = Header(KIND_USER, params.record_bytes, params.digest, records.size)
        return encode_batch(h, records)
    body = encrypt_records(params, records, analyzer_public)
    h = Header(KIND_USER_ENC, encrypted_record_bytes(params), params.digest, records.size)
    return encode_batch(h, body)


def user_batch(
    params: ProtocolParams,
    pixels: np.ndarray,
    weights: np.ndarray,
    *,
    analyzer_public: bytes | None = None,
    source: SecureRandom | None = None,
) -> bytes:
    """The device's whole job: (pixels, weights) -> wire-ready bytes for the shuffler.

    :func:`encode_user` (secure randomness only, no seed) then :func:`frame_messages`;
    pass the analyzer's public key to encrypt every message (the deployment path).
    """
    return frame_messages(params, encode_user(params, pixels, weights, source=source),
                          analyzer_public)
