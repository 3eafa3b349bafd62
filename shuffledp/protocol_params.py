"""The validated parameter record of the shuffle-model heatmap protocol ([Ghazi23]_ App. F).

One frozen :class:`ProtocolParams` fixes everything the three parties must agree on: the grid
and measured levels (same split as the central mechanism, [Ghazi23]_ proof of Thm 3.1), the
number of users n, the scaling factor B and rounding rule, the neighbour notion, the modulus
q, the number of shares per coordinate r, the per-level discrete Laplace parameters and the
Polya shape (over-provisioned for dropouts, [Bagdasaryan22]_ Sec. 4). The wire format carries
:attr:`ProtocolParams.digest`, so batches produced under other parameters are rejected.

Neighbour notion: the summation protocol behind App. F ([BBGN20]_) is private
under *replacement of one user's input with n public*; the scaled, rounded level vector then
has l1-sensitivity Delta_i = 2B (see :mod:`shuffledp.encoders.rounding`).

Message layout: a message (a, w) with coordinate a in [0, m) and share w in [0, q) is one
unsigned integer ``(a << share_bits) | w`` with ``share_bits = ceil(log2 q)``; it takes
``record_bytes`` = ceil((ceil(log2 m) + share_bits) / 8) bytes on the wire. The paper's count
(App. F "Communication") is ceil(log2(m q)) bits per message, reported as
:attr:`bits_per_user`; :attr:`bytes_per_user` is what :mod:`shuffledp.wire` actually writes.

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
.. [Bagdasaryan22] E. Bagdasaryan, P. Kairouz, S. Mellem, A. Gascon, K. Bonawitz, D. Estrin,
   M. Gruteser, "Towards Sparse Federated Analytics: Location Heatmaps under Distributed
   Differential Privacy with Secure Aggregation", PoPETs 2022(4). arXiv:2111.02356.
.. [BBGN20] B. Balle, J. Bell, A. Gascon, K. Nissim, "Private Summation in the Multi-Message
   Shuffle Model", CCS 2020. arXiv:2002.00817.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.guarantee import Neighbour
from shuffledp.encoders.rounding import check_rounding, check_scale
from shuffledp.grid import Grid

FORMAT_NAME = "shuffledp-heatmap-shuffle/1"
NEIGHBOURS = (Neighbour.REPLACE_ONE, Neighbour.ZERO_OUT)
ROUND_ID_BYTES = 16


@dataclass(frozen=True)
class ProtocolParams:
    """Everything encoder, shuffler and analyzer must agree on ([Ghazi23]_ App. F).

    Attributes
    ----------
    grid : Grid
    w : int
        Reconstruct's top-w (also fixes the start level).
    start, top : int
        Measured levels start..top (top = grid.depth).
    level_epsilons : tuple of float
        eps_i per measured level (index k is level start + k), summing to epsilon.
    n : int
        Number of users the protocol is provisioned for (n >= 2, public).
    epsilon, delta : float
        Target (eps, delta) of the release; delta in (0, 1).
    B : int
        Scaling factor.
    rounding : {"floor", "largest_remainder"}
    neighbour : Neighbour
        REPLACE_ONE (Delta_i = 2B) or ZERO_OUT (Delta_i = B); n public in both.
    dropout : float
        Declared dropout fraction in [0, 1).
    n_min : int
        Fewest contributing users for which the noise still sums to (at least) discrete
        Laplace: the Polya shape is 1 / n_min ([Bagdasaryan22]_ Sec. 4, dropouts).
    q : int
        Modulus, with headroom: every true sum lies in [0, B n] and decodes exactly.
    r : int
        Shares per coordinate: at least the split-and-mix requirement
        (:func:`shuffledp.accounting.summation.shares_needed`) for (eps, delta_mix, m, q,
        n_min); a record with fewer shares is refused.
    level_sensitivities : tuple of int
        Delta_i of the scaled, rounded level vector (2B under replacement).
    decode_low : int
        Centred decoding: a sum s mod q decodes to ((s + decode_low) mod q) - decode_low, so
        the window is [-decode_low, q - 1 - decode_low].
    wrap_probability : float
        Probability that the noise pushes at least one coordinate out of the decoding window.
    guarantee_delta_parts : Mapping
        How delta is spent (e.g. split-and-mix hiding), for the report.
    round_id : bytes
        16 random bytes naming this run of the protocol (fresh from ``os.urandom`` unless
        given). Part of :attr:`digest`, hence of every wire header and of the associated data
        of every encrypted message: batches and messages of another run are rejected.
    summation : Any
        The accounting record this was built from (``None`` when given explicitly).
    """

    grid: Grid
    w: int
    start: int
    top: int
    level_epsilons: tuple
    n: int
    epsilon: float
    delta: float
    B: int
    rounding: str
    neighbour: str
    dropout: float
    n_min: int
    q: int
    r: int
    level_sensitivities: tuple
    decode_low: int
    wrap_probability: float = 0.0
    guarantee_delta_parts: Mapping[str, Any] = field(default_factory=dict)
    round_id: bytes = field(default_factory=lambda: os.urandom(ROUND_ID_BYTES))
    summation: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.grid, Grid):
            raise TypeError(f"grid must be a shuffledp.Grid, got grid={self.grid!r}")
        v.count("w", self.w, 1)
        start = v.count("start", self.start, 0)
        top = v.count("top", self.top, start)
        if top != self.grid.depth:
            raise ValueError(f"top must be the leaf level {self.grid.depth}, got top={top}")
        n_lev = top - start + 1
        eps = v.interval("epsilon", self.epsilon, 0.0, math.inf)
        delta = v.interval("delta", self.delta, 0.0, 1.0)
        le = tuple(float(e) for e in self.level_epsilons)
        if len(le) != n_lev or not all(e > 0 and math.isfinite(e) for e in le):
            raise ValueError(
                f"level_epsilons must hold {n_lev} positive budgets, got {self.level_epsilons!r}"
            )
        if sum(le) > eps * (1 + 1e-12):
            raise ValueError(f"level_epsilons sum to {sum(le)!r} > epsilon={eps!r}")
        n = v.count("n", self.n, 2)
        B = check_scale(self.B)
        check_rounding(self.rounding)
        nb = Neighbour.parse(self.neighbour)
        if nb not in NEIGHBOURS:
            raise ValueError(
                f"neighbour must be one of {[x.token for x in NEIGHBOURS]}, got "
                f"neighbour={nb.token!r}"
            )
        object.__setattr__(self, "neighbour", nb)
        d = v.interval("dropout", self.dropout, 0.0, 1.0, open_low=False)
        n_min = v.count("n_min", self.n_min, 1)
        if n_min > n:
            raise ValueError(f"n_min must be <= n={n}, got n_min={n_min}")
        if n_min < math.ceil((1.0 - d) * n - 1e-9):
            raise ValueError(
                f"n_min={n_min} is below the (1 - dropout) n = {(1 - d) * n:g} users the "
                "declared dropout fraction promises"
            )
        q = v.count("q", self.q, 2)
        if q > 1 << 32:
            raise ValueError(f"q must be <= 2^32, got q={q}; lower B or n")
        r = v.count("r", self.r, 2)
        sens = tuple(int(s) for s in self.level_sensitivities)
        if len(sens) != n_lev or min(sens) < 1:
            raise ValueError(f"level_sensitivities must hold {n_lev} integers >= 1, got {sens!r}")
        if min(sens) < nb.level_sensitivity(B):
            raise ValueError(
                f"under {nb.token} the scaled level vector has sensitivity "
                f"{nb.level_sensitivity(B)}, got level_sensitivities={sens!r}"
            )
        low = v.count("decode_low", self.decode_low, 0)
        # Headroom: every true sum in [0, B n] must lie inside the window with room to spare.
        if q - 1 - low < B * n or low < 1:
            raise ValueError(
                f"q={q} with decode_low={low} has no headroom for sums in [0, B n = {B * n}]: "
                f"need decode_low >= 1 and q - 1 - decode_low > B n; increase q"
            )
        wp = v.interval("wrap_probability", self.wrap_probability, 0.0, 1.0, open_low=False,
                   open_high=False)
        for name, value in (("start", start), ("top", top), ("n", n), ("B", B), ("q", q),
                            ("r", r), ("n_min", n_min), ("decode_low", low)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "w", int(self.w))
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", delta)
        object.__setattr__(self, "dropout", d)
        object.__setattr__(self, "level_epsilons", le)
        object.__setattr__(self, "level_sensitivities", sens)
        object.__setattr__(self, "wrap_probability", wp)
        object.__setattr__(
            self, "guarantee_delta_parts", MappingProxyType(dict(self.guarantee_delta_parts))
        )
        rid = self.round_id
        if not isinstance(rid, (bytes, bytearray)) or len(rid) != ROUND_ID_BYTES:
            raise ValueError(f"round_id must be {ROUND_ID_BYTES} bytes, got round_id={rid!r}")
        object.__setattr__(self, "round_id", bytes(rid))
        if self.record_bits > 64:
            raise ValueError(f"messages need {self.record_bits} bits > 64; lower q or the grid")
        self.check_supported()

    def check_supported(self) -> None:
        """Re-check that the parameters support the guarantee they claim; raise otherwise.

        r must reach the split-and-mix requirement of [BBGN20]_ as used in [Ghazi23]_ App. F
        for (eps, delta_mix, m, q, n_min), where delta_mix is delta minus the noise sampler's
        part (:func:`shuffledp.accounting.summation.delta_split`). The encoder and the
        analyzer call this again before encoding or releasing, so a record edited after
        construction (or a params file edited by hand) cannot ship a guarantee it does not
        have.
        """
        from shuffledp.accounting.summation import delta_split, shares_needed

        delta_mix, _ = delta_split(self.epsilon, self.delta, self.n, self.m)
        need = shares_needed(self.epsilon, delta_mix, self.m, self.q, self.n_min)
        if self.r < need:
            raise ValueError(
                f"r={self.r} shares per coordinate are below the split-and-mix requirement "
                f"r >= {need} for epsilon={self.epsilon!r}, delta={self.delta!r}, m={self.m}, "
                f"q={self.q}, n_min={self.n_min}; the (epsilon, delta) guarantee would not hold"
            )
        for e, s in zip(self.level_epsilons, self.level_sensitivities, strict=True):
            if not (e > 0 and s >= self.neighbour.level_sensitivity(self.B)):
                raise ValueError(f"level budget {e!r} / sensitivity {s!r} do not support the "
                                 f"guarantee under {self.neighbour.token}")

    # ----- geometry of the message vector -----
    @property
    def level_sizes(self) -> tuple[int, ...]:
        return tuple(self.grid.level_size(i) for i in range(self.start, self.top + 1))

    @property
    def level_offsets(self) -> tuple[int, ...]:
        """Offset of each measured level in the flat coordinate vector (level-major)."""
        return tuple(int(x) for x in np.r_[0, np.cumsum(self.level_sizes)[:-1]])

    @property
    def m(self) -> int:
        """Number of coordinates sent: sum of the measured level sizes."""
        return int(sum(self.level_sizes))

    @property
    def polya_shape(self) -> float:
        """Polya shape 1 / n_min per user ([Bagdasaryan22]_ Thm 4.2, dropout over-provisioning)."""
        return 1.0 / self.n_min

    @property
    def level_a(self) -> tuple[float, ...]:
        """Discrete Laplace parameter a_i = exp(-eps_i / Delta_i) per measured level."""
        return tuple(
            math.exp(-e / s)
            for e, s in zip(self.level_epsilons, self.level_sensitivities, strict=True)
        )

    def coordinate_a(self) -> np.ndarray:
        """a_i repeated over the coordinates of level i (length m)."""
        return np.repeat(np.asarray(self.level_a), self.level_sizes)

    # ----- communication -----
    @property
    def share_bits(self) -> int:
        return int(self.q - 1).bit_length()

    @property
    def coordinate_bits(self) -> int:
        return max(1, int(self.m - 1).bit_length())

    @property
    def record_bits(self) -> int:
        return self.coordinate_bits + self.share_bits

    @property
    def record_bytes(self) -> int:
        """Bytes per plaintext message on the wire: ceil(record_bits / 8), 1..8."""
        return -(-self.record_bits // 8)

    @property
    def share_bytes(self) -> int:
        """Bytes of a share inside an encrypted message: ceil(share_bits / 8)."""
        return -(-self.share_bits // 8)

    @property
    def messages_per_user(self) -> int:
        return self.r * self.m

    @property
    def bits_per_message(self) -> int:
        """ceil(log2(m q)) ([Ghazi23]_ App. F "Communication")."""
        return int(self.m * self.q - 1).bit_length()

    @property
    def bits_per_user(self) -> int:
        """r m ceil(log2(m q)) ([Ghazi23]_ App. F "Communication", Fig. 12)."""
        return self.messages_per_user * self.bits_per_message

    @property
    def bytes_per_user(self) -> int:
        """Bytes of one user's plaintext batch as written by :mod:`shuffledp.wire`."""
        from shuffledp.wire import HEADER_SIZE

        return HEADER_SIZE + self.messages_per_user * self.record_bytes

    # ----- identity -----
    def canonical(self) -> dict[str, Any]:
        """The fields every party must agree on, JSON-ready (input of :attr:`digest`)."""
        return {
            "format": FORMAT_NAME,
            "grid": [self.grid.width, self.grid.height],
            "w": self.w,
            "levels": [self.start, self.top],
            "level_epsilons": [repr(e) for e in self.level_epsilons],
            "level_sensitivities": list(self.level_sensitivities),
            "n": self.n,
            "n_min": self.n_min,
            "epsilon": repr(self.epsilon),
            "delta": repr(self.delta),
            "B": self.B,
            "rounding": self.rounding,
            "neighbour": self.neighbour.token,
            "dropout": repr(self.dropout),
            "q": self.q,
            "r": self.r,
            "decode_low": self.decode_low,
            "round_id": self.round_id.hex(),
        }

    @property
    def digest(self) -> bytes:
        """First 16 bytes of SHA-256 of the canonical JSON; carried in every wire header."""
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).digest()[:16]

    def figures(self) -> dict[str, Any]:
        """Protocol figures for a release's ``protocol`` mapping and report.json."""
        return {
            "B": self.B,
            "q": self.q,
            "r": self.r,
            "m": self.m,
            "n": self.n,
            "n_min": self.n_min,
            "rounding": self.rounding,
            "neighbour": str(self.neighbour),
            "dropout": self.dropout,
            "messages_per_user": self.messages_per_user,
            "bits_per_message": self.bits_per_message,
            "bits_per_user": self.bits_per_user,
            "record_bytes": self.record_bytes,
            "bytes_per_user": self.bytes_per_user,
            "level_epsilons": list(self.level_epsilons),
            "level_sensitivities": list(self.level_sensitivities),
            "level_a": list(self.level_a),
            "polya_shape": self.polya_shape,
            "decode_low": self.decode_low,
            "wrap_probability": self.wrap_probability,
            "digest": self.digest.hex(),
        }

    def to_json(self) -> str:
        """Serialise (for the CLI roles); :meth:`from_json` rebuilds and re-validates."""
        d = self.canonical()
        d["wrap_probability"] = repr(self.wrap_probability)
        d["guarantee_delta_parts"] = {k: v for k, v in self.guarantee_delta_parts.items()}
        return json.dumps(d, sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str) -> ProtocolParams:
        """Rebuild from :meth:`to_json`; re-attaches the accounting record if it re-derives."""
        d = json.loads(text)
        if d.get("format") != FORMAT_NAME:
            raise ValueError(f"not a {FORMAT_NAME} parameter file (format={d.get('format')!r})")
        p = cls._from_dict(d)
        try:
            again = derive_params(p.grid, p.n, epsilon=p.epsilon, delta=p.delta, B=p.B, w=p.w,
                                  rounding=p.rounding, dropout=p.dropout,
                                  neighbour=p.neighbour, round_id=p.round_id)
        except (ValueError, TypeError):
            return p
        if again == p:
            object.__setattr__(p, "summation", again.summation)
        return p

    @classmethod
    def _from_dict(cls, d: dict) -> ProtocolParams:
        if "round_id" not in d:
            raise ValueError("parameter file has no round_id (written by an older version); "
                             "re-run setup")
        try:
            rid = bytes.fromhex(d["round_id"])
        except (TypeError, ValueError):
            raise ValueError(f"round_id must be {2 * ROUND_ID_BYTES} hex digits, got "
                             f"round_id={d['round_id']!r}") from None
        return cls(
            grid=Grid(*d["grid"]),
            w=d["w"],
            start=d["levels"][0],
            top=d["levels"][1],
            level_epsilons=tuple(float(e) for e in d["level_epsilons"]),
            n=d["n"],
            epsilon=float(d["epsilon"]),
            delta=float(d["delta"]),
            B=d["B"],
            rounding=d["rounding"],
            neighbour=d["neighbour"],
            dropout=float(d["dropout"]),
            n_min=d["n_min"],
            q=d["q"],
            r=d["r"],
            level_sensitivities=tuple(d["level_sensitivities"]),
            decode_low=d["decode_low"],
            wrap_probability=float(d.get("wrap_probability", 0.0)),
            guarantee_delta_parts=d.get("guarantee_delta_parts", {}),
            round_id=rid,
        )


def derive_params(
    grid: Grid,
    n: int,
    *,
    epsilon: float,
    delta: float,
    B: int,
    w: int = 20,
    gamma: float | None = None,
    rounding: str = "largest_remainder",
    dropout: float = 0.0,
    wrap_target: float = 1e-12,
    neighbour: Neighbour | str = Neighbour.REPLACE_ONE,
    round_id: bytes | None = None,
) -> ProtocolParams:
    """Derive the protocol record for n users from the summation accounting.

    Delegates every number to :func:`shuffledp.accounting.summation.summation_parameters`
    (q with headroom and the shifted decoding window, r from the App. F formula with that q
    and n_min users, per-level eps_i and Delta_i = 2B, Polya shape 1/n_min for the declared
    dropout fraction, wrap-around probability, the guarantee) and wraps it in a validated
    :class:`ProtocolParams`, checking that the measured levels and budgets are those of the
    central mechanism (:func:`shuffledp.analyzers.central.measured_levels`). ``round_id``
    (16 bytes) names the run; by default a fresh one from ``os.urandom``, so two setups with
    the same numbers have different digests and cannot mix their batches.
    """
    from shuffledp.accounting.budget import DEFAULT_GAMMA, level_budgets
    from shuffledp.accounting.summation import summation_parameters
    from shuffledp.analyzers.central import measured_levels

    if not isinstance(grid, Grid):
        raise TypeError(f"grid must be a shuffledp.Grid, got grid={grid!r}")
    g = DEFAULT_GAMMA if gamma is None else gamma
    check_scale(B)
    check_rounding(rounding)
    summ = summation_parameters(
        n=n, epsilon=epsilon, delta=delta, B=B, grid=grid, w=w, gamma=g, rounding=rounding,
        neighbour=Neighbour.parse(neighbour), dropout=dropout, wrap_target=wrap_target,
        decoding="shifted",
    )
    start, top = measured_levels(grid, w)
    if summ.levels != tuple(range(start, top + 1)):
        raise ValueError(
            f"accounting measured levels {summ.levels} differ from the central mechanism's "
            f"{start}..{top}"
        )
    central = level_budgets(float(epsilon), start, top, float(g))
    if not np.allclose(central, summ.level_epsilons, rtol=1e-12, atol=0):
        raise ValueError("accounting level budgets differ from the central mechanism's split")
    return ProtocolParams(
        grid=grid, w=int(w), start=start, top=top, level_epsilons=summ.level_epsilons,
        n=summ.n, epsilon=summ.epsilon, delta=summ.delta, B=summ.B, rounding=summ.rounding,
        neighbour=summ.neighbour, dropout=summ.dropout, n_min=summ.n_min, q=summ.q, r=summ.r,
        level_sensitivities=summ.level_sensitivities, decode_low=summ.decode_low,
        wrap_probability=summ.wrap_probability, guarantee_delta_parts=summ.delta_parts,
        round_id=os.urandom(ROUND_ID_BYTES) if round_id is None else round_id,
        summation=summ,
    )
