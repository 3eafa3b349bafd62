"""PrivEMDItemWise ([Imola]_ Alg. 2): item-wise release under bounded d_EM-DP.

Every item of every user's dataset goes through an alpha0 d_X-DP item mechanism
(:mod:`shuffledp.encoders.metric.mechanisms`) and the outputs are released as a shuffled
multiset:

* ``model="local"``: each user shuffles her own m outputs (one uniformly random order per
  user); the release is an (n, m) array whose rows are the users' shuffled multisets;
* ``model="central"``: the server shuffles all m n outputs together (N = m n); the release
  is one array of length m n.

The guarantee is (alpha, delta')-bounded d_EM-DP of [Imola]_ Thm 4.4, computed by
:func:`shuffledp.accounting.metric.shuffle.emd_itemwise` with its validity condition
(Thm 4.3) and vacuity cap on delta'; a release whose bound is not valid is refused. The
composition baseline m alpha0 (basic composition over the m items, what the release would
get without the shuffle) is recorded beside it.

The shuffle uses :func:`shuffledp.randomness.secure_shuffle` (ChaCha20) unless a seed or a
numpy Generator is given for a research run, in which case the release carries the note
:data:`shuffledp.randomness.SEEDED_NOTE`.

References
----------
.. [Imola] Imola et al. (preprint), "Metric DP at the user-level" -- full entry in
   docs/references.md
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.guarantee import Guarantee
from shuffledp.accounting.metric.shuffle import (
    DEFAULT_MAX_DELTA_OUT,
    ItemwiseBound,
    emd_itemwise,
)
from shuffledp.encoders.metric.mechanisms import ItemMechanism
from shuffledp.randomness import (
    SEEDED_NOTE,
    RngLike,
    SecureRandom,
    as_generator,
    is_seeded,
    secure_shuffle,
)

MODELS = ("local", "central")


@dataclass(frozen=True)
class ItemwiseRelease:
    """Output of :func:`priv_emd_itemwise`.

    Attributes
    ----------
    outputs : ndarray of int64
        (n, m) rows of shuffled outputs (local) or the m n shuffled outputs (central).
    guarantee : Guarantee
        (alpha, delta')-bounded d_EM-DP, [Imola]_ Thm 4.4.
    bound : ItemwiseBound
        The accountant's record (alpha, delta', validity limit, composition alpha).
    composition_alpha : float
        m alpha0, the basic-composition baseline for the same item mechanism.
    mechanism : str
        Name of the item mechanism.
    """

    outputs: np.ndarray
    guarantee: Guarantee
    bound: ItemwiseBound
    composition_alpha: float
    mechanism: str
    notes: tuple[str, ...] = field(default=())

    def histogram(self, k: int) -> np.ndarray:
        """Normalised histogram of all released outputs over k output values."""
        flat = self.outputs.ravel()
        return np.bincount(flat, minlength=k) / flat.size

    def to_dict(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "model": self.guarantee.model,
                "shape": list(self.outputs.shape), "guarantee": self.guarantee.to_dict(),
                "bound": self.bound.to_dict(), "composition_alpha": self.composition_alpha,
                "notes": list(self.notes)}


def as_user_items(users: Any, k: int) -> np.ndarray:
    """(n, m) int64 array of item indices; every user must hold the same number m of items.

    Raises ValueError naming ``users`` for ragged input (bounded d_EM-DP needs equal sizes),
    items outside 0..k-1, or an empty input.

    Parameters
    ----------
    users : array_like, shape (n, m), or sequence of sequences
        Each user's item indices.
    k : int
        Domain size.

    Returns
    -------
    numpy.ndarray of int64, shape (n, m)
        The users' items.

    Raises
    ------
    TypeError
        If the items are not integers.
    ValueError
        For ragged input (bounded d_EM-DP needs equal sizes), an empty input, or items outside
        0..k-1.

    References
    ----------
    [Imola]_ Sec. 3 (bounded d_EM-DP: every user holds m items, m public).
    """
    if isinstance(users, np.ndarray):
        arr = users
    else:
        rows = [np.asarray(u) for u in users]
        sizes = {r.size for r in rows}
        if len(sizes) > 1:
            raise ValueError(f"users must all hold the same number of items (bounded d_EM-DP, "
                             f"m public), got sizes {sorted(sizes)[:5]}")
        arr = np.array(rows) if rows else np.empty((0, 0))
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"users must be a non-empty (n, m) array of item indices, got shape "
                         f"{arr.shape}")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"users must hold integer item indices, got dtype {arr.dtype}")
    bad = (arr < 0) | (arr >= k)
    if bad.any():
        i, j = (int(t) for t in np.argwhere(bad)[0])
        raise ValueError(f"users must hold items of the domain 0..{k - 1}; "
                         f"users[{i}, {j}]={int(arr[i, j])} is outside")
    return arr.astype(np.int64, copy=False)


def _shuffle(values: np.ndarray, rng: RngLike | SecureRandom) -> None:
    """Shuffle a 1-D array in place: secure unless ``rng`` is a seed or a Generator."""
    if rng is None or isinstance(rng, SecureRandom):
        secure_shuffle(values, rng)
    else:
        as_generator(rng).shuffle(values)


def priv_emd_itemwise(
    users: Any,
    mechanism: ItemMechanism,
    delta: float,
    model: str = "central",
    *,
    max_delta_out: float = DEFAULT_MAX_DELTA_OUT,
    rng: RngLike | SecureRandom = None,
) -> ItemwiseRelease:
    """PrivEMDItemWise ([Imola]_ Alg. 2) with the Thm 4.4 guarantee; vacuous bounds refused.

    Parameters
    ----------
    users : array_like, shape (n, m)
        Item indices of each user's dataset (all of size m).
    mechanism : ItemMechanism
        An alpha0 d_X-DP item mechanism on the items' metric space.
    delta : float
        delta of Thm 4.3 in (0, 1); the release is (alpha, delta e^h)-bounded d_EM-DP.
    model : {"local", "central"}
        Who shuffles (see module docstring).
    max_delta_out : float, default 1e-3
        Largest acceptable delta' (above it the bound is vacuous and the release refused).
    rng : None, SecureRandom, int or Generator
        None (default): secure generator for the item noise and the shuffle.

    Raises
    ------
    ValueError
        Bad input, or a bound that is not valid (the Thm 4.3 condition fails or delta' is
        vacuous); the message carries the accountant's notes.

    Returns
    -------
    ItemwiseRelease
        The shuffled item outputs (one array in the central model, one row per user in the
        local model) with the Thm 4.4 (alpha, delta') guarantee and bound.

    References
    ----------
    [Imola]_ Alg. 2, Thm 4.3, Thm 4.4.
    """
    if not isinstance(mechanism, ItemMechanism):
        raise TypeError(f"mechanism must be an ItemMechanism, got mechanism={mechanism!r:.60}")
    model = v.choice("model", model, MODELS)
    items = as_user_items(users, mechanism.space.k)
    n, m = items.shape
    seeded = is_seeded(rng)
    if rng is not None and not isinstance(rng, SecureRandom):
        # seeded: one research stream for the item noise and the shuffle, not two copies
        rng = as_generator(rng)
    bound = emd_itemwise(mechanism.alpha0, m, delta, model, n if model == "central" else None,
                         max_delta_out=max_delta_out)
    if not bound.valid:
        raise ValueError("PrivEMDItemWise refused: the Thm 4.4 bound is not valid for "
                         f"alpha0={mechanism.alpha0}, m={m}, n={n}, model={model}: "
                         + "; ".join(bound.notes))
    out = mechanism.sample(items.ravel(), rng=rng)
    if model == "central":
        _shuffle(out, rng)
    else:
        out = out.reshape(n, m)
        for row in out:
            _shuffle(row, rng)
    notes = (SEEDED_NOTE,) if seeded else ()
    if bound.guarantee is None:  # pragma: no cover - emd_itemwise always attaches one
        raise AssertionError("emd_itemwise returned a bound without a guarantee")
    g = dataclasses.replace(
        bound.guarantee,
        parameters={**bound.guarantee.parameters, "mechanism": mechanism.name,
                    "composition_alpha": bound.composition_alpha},
        notes=bound.guarantee.notes + notes,
    )
    return ItemwiseRelease(outputs=out, guarantee=g, bound=bound,
                           composition_alpha=bound.composition_alpha,
                           mechanism=mechanism.name, notes=notes)
