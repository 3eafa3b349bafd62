"""The user side of the shuffle-model heatmap protocol (seed 000, App. F, "Each user j").

For user j with distribution p_j over the leaf pixels:

1. y^j = [P_start p_j, ..., P_L p_j]: the user's mass in every cell of the measured levels
   (unscaled level counts, :func:`shuffledp.pyramid.level_counts` of p_j), computed sparsely.
2. z^j = round(B y^j) per level (:func:`shuffledp.encoders.rounding.scale_round`).
3. z'^j = z^j + X - Y with X, Y i.i.d. Polya(1/n_min, a_i) per coordinate of level i,
   a_i = exp(-eps_i / Delta_i) (seed 001, Thm 4.2; App. F slips fixed: calibrated to the
   scaled sensitivity, two-sided, over-provisioned for dropouts).
4. Split & Mix of the *noisy* z'^j into r additive shares over Z_q from the cryptographically
   secure :class:`~shuffledp.encoders.sharing.SecureRandom` (the App. F slip splits z^j).
5. Messages (a, w^b_a) for a in [0, m), b in [0, r): :func:`messages` packs them as
   ``(a << share_bits) | w``.

The Polya noise uses the caller's numpy ``rng`` (research reproducibility); shares never do.
"""

from __future__ import annotations

import numpy as np
from shuffledp.encoders.polya import polya_difference
from shuffledp.encoders.rounding import scale_round
from shuffledp.encoders.sharing import SecureRandom, share

from shuffledp._rng import RngLike, as_generator
from shuffledp.protocol_params import ProtocolParams
from shuffledp.users import UserDistributions


def _check(params: ProtocolParams) -> None:
    if not isinstance(params, ProtocolParams):
        raise TypeError(f"params must be a ProtocolParams, got {type(params).__name__}")


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
    grid = params.grid
    L = grid.depth
    uid = users.user_index()
    rows = users.pixels // grid.width
    cols = users.pixels % grid.width
    n_lev = params.top - params.start + 1
    k = uid.size
    # code = (user, level, cell) in lexicographic order
    lev = np.repeat(np.arange(n_lev, dtype=np.int64), k)
    shift = (L - (params.start + lev)).astype(np.int64)
    ncols = np.asarray([grid.level_shape(i)[1] for i in range(params.start, params.top + 1)])
    offs = np.asarray(params.level_offsets, dtype=np.int64)
    r_all = np.tile(rows, n_lev) >> shift
    c_all = np.tile(cols, n_lev) >> shift
    coord = offs[lev] + r_all * ncols[lev] + c_all
    m = params.m
    key = np.tile(uid, n_lev).astype(np.int64) * m + coord
    ukey, inv = np.unique(key, return_inverse=True)
    mass = np.bincount(inv.ravel(), weights=np.tile(users.weights, n_lev), minlength=ukey.size)
    u_of = ukey // m
    c_of = ukey % m
    level_of = np.searchsorted(offs, c_of, side="right") - 1
    groups = u_of * n_lev + level_of
    z = scale_round(mass, params.B, params.rounding, groups=groups)
    keep = z != 0
    return u_of[keep], c_of[keep], z[keep]


def noisy_vectors(
    params: ProtocolParams,
    users: UserDistributions,
    select: np.ndarray | None = None,
    rng: RngLike = None,
    *,
    noise: bool = True,
) -> np.ndarray:
    """Dense z'^j = z^j + (X - Y) for the selected users, shape (len(select), m), int64 (step 3).

    ``noise=False`` returns z^j (for tests and diagnostics only; not private).
    """
    _check(params)
    n_sel = users.n_users if select is None else len(select)
    u, c, z = rounded_levels(params, users, select)
    out = np.zeros((n_sel, params.m), dtype=np.int64)
    np.add.at(out, (u, c), z)
    if noise:
        g = as_generator(rng)
        a = params.coordinate_a()
        for j in range(n_sel):
            out[j] += polya_difference(params.polya_shape, a, params.m, g)
    return out


def encode_shares(
    params: ProtocolParams,
    users: UserDistributions,
    select: np.ndarray | None = None,
    rng: RngLike = None,
    source: SecureRandom | None = None,
) -> np.ndarray:
    """Steps 1-4 for the selected users: shares of shape (len(select), r, m), uint32.

    ``shares[j, b, a]`` is w^{b+1}_a of user j; message (a, shares[j, b, a]).
    """
    z = noisy_vectors(params, users, select, rng)
    return share(z, params.q, params.r, source if source is not None else SecureRandom())


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
    rng: RngLike = None,
    source: SecureRandom | None = None,
) -> np.ndarray:
    """One user's complete message vector (r*m packed messages) from (pixels, weights)."""
    _check(params)
    users = UserDistributions.from_pixels(
        params.grid, np.zeros(np.size(pixels), dtype=np.int64), pixels, weights
    )
    sh = encode_shares(params, users, None, rng, source)[0]
    return messages(params, sh)
