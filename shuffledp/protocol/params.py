"""The validated parameter record of the shuffle-model heatmap protocol ([Ghazi23]_ App. F).

One frozen :class:`ProtocolParams` fixes everything the three parties must agree on: the grid
and measured levels (same split as the central mechanism, [Ghazi23]_ proof of Thm 3.1), the
number of users n, the scaling factor B and rounding rule, the neighbour notion, the modulus
q, the number of shares per coordinate r, the per-level discrete Laplace parameters and the
Polya shape (over-provisioned for dropouts, [Bagdasaryan22]_ Sec. 4). The wire format carries
:attr:`ProtocolParams.digest`, so batches produced under other parameters are rejected.

Neighbour notion: the summation protocol behind App. F ([BBGN20]_) is private
under *replacement of one user's input with n public*; the scaled, rounded level vector then
has l1-sensitivity Delta_i = 2B (see :func:`shuffledp.encoders.encoder.scale_round`).

Message layout: a message (a, w) with coordinate a in [0, m) and share w in [0, q) is one
unsigned integer ``(a << share_bits) | w`` with ``share_bits = ceil(log2 q)``; it takes
``record_bytes`` = ceil((ceil(log2 m) + share_bits) / 8) bytes on the wire. The paper's count
(App. F "Communication") is ceil(log2(m q)) bits per message, reported as
:attr:`bits_per_user`; :attr:`bytes_per_user` is what :mod:`shuffledp.protocol.wire` actually
writes.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps"
   -- full entry in docs/references.md
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards Sparse Federated Analytics"
   -- full entry in docs/references.md
.. [BBGN20] Balle et al. (2020), "Private Summation in the Multi-Message Shuffle Model"
   -- full entry in docs/references.md
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
from shuffledp.accounting.budget import (
    BUDGET_RULES,
    DEFAULT_GAMMA,
    dl_parameter,
    share_shape,
    sum_up,
)
from shuffledp.accounting.guarantee import DEFAULT_NEIGHBOUR, Neighbour
from shuffledp.accounting.summation import (
    DEFAULT_DROPOUT,
    SummationParameters,
    check_rounding,
    check_scale,
    delta_split,
    shares_needed,
    summation_parameters,
)
from shuffledp.grid import Grid
from shuffledp.protocol.wire import ENC_OVERHEAD, HEADER_SIZE

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
        Reconstruct's top-w (also fixes the measured levels, :meth:`Grid.measured_levels`).
    summation : SummationParameters
        The accounting record (:func:`shuffledp.accounting.summation.summation_parameters`):
        the one home of n, epsilon, delta, B, rounding, neighbour (REPLACE_ONE or ZERO_OUT),
        dropout, the budget rule, n_min, q, r, decode_low, the per-level budgets and
        sensitivities, the wrap-around probability and the delta split. They read as
        properties of this record (``params.q``, ``params.level_epsilons``..., listed
        under "the accounting record's numbers" below; nothing else is forwarded). r must
        reach the split-and-mix requirement (:meth:`check_supported`); q must leave
        headroom for sums in [0, B n].
    round_id : bytes
        16 random bytes naming this run of the protocol (fresh from ``os.urandom`` unless
        given). Part of :attr:`digest`, hence of every wire header and of the HPKE info
        of every encrypted message: batches and messages of another run are rejected.
    """

    grid: Grid
    w: int
    summation: SummationParameters
    round_id: bytes = field(default_factory=lambda: os.urandom(ROUND_ID_BYTES))

    def __post_init__(self) -> None:
        if not isinstance(self.grid, Grid):
            raise TypeError(f"grid must be a shuffledp.Grid, got grid={self.grid!r}")
        w = v.count("w", self.w, 1)
        object.__setattr__(self, "w", w)
        if not isinstance(self.summation, SummationParameters):
            raise TypeError(f"summation must be a SummationParameters, got "
                            f"summation={type(self.summation).__name__}")
        start, top = self.grid.measured_levels(w)
        if tuple(self.summation.levels or ()) != tuple(range(start, top + 1)):
            raise ValueError(
                f"the accounting record measures levels {self.summation.levels}, the grid "
                f"{self.grid} with w={w} measures {start}..{top}"
            )
        n_lev = top - start + 1
        eps = v.interval("epsilon", self.epsilon, 0.0, math.inf)
        v.interval("delta", self.delta, 0.0, 1.0)
        v.choice("budget_rule", self.budget_rule, BUDGET_RULES)
        le = self.level_epsilons
        if len(le) != n_lev or not all(e > 0 and math.isfinite(e) for e in le):
            raise ValueError(f"level_epsilons must hold {n_lev} positive budgets, got {le!r}")
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
        v.count("r", self.r, 2)
        sens = self.level_sensitivities
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
        v.interval("wrap_probability", self.wrap_probability, 0.0, 1.0, open_low=False,
                   open_high=False)
        rid = self.round_id
        if not isinstance(rid, (bytes, bytearray)) or len(rid) != ROUND_ID_BYTES:
            raise ValueError(f"round_id must be {ROUND_ID_BYTES} bytes, got round_id={rid!r}")
        object.__setattr__(self, "round_id", bytes(rid))
        if self.record_bits > 64:
            raise ValueError(f"messages need {self.record_bits} bits > 64; lower q or the grid")
        self.check_supported()

    # ----- the accounting record's numbers (their one home is SummationParameters) -----
    @property
    def start(self) -> int:
        return int(self._levels()[0])

    @property
    def top(self) -> int:
        return int(self._levels()[-1])

    def _levels(self) -> tuple[int, ...]:
        levels = self.summation.levels
        if levels is None:  # __post_init__ refuses it; kept for objects built around it
            raise ValueError("the accounting record measures no levels: summation.levels=None")
        return levels

    @property
    def level_epsilons(self) -> tuple[float, ...]:
        return tuple(float(e) for e in self.summation.level_epsilons)

    @property
    def level_sensitivities(self) -> tuple[int, ...]:
        return tuple(int(x) for x in self.summation.level_sensitivities)

    @property
    def guarantee_delta_parts(self) -> Mapping[str, Any]:
        return MappingProxyType(dict(self.summation.delta_parts))

    @property
    def n(self) -> int:
        """Users the protocol is provisioned for (the noise and r are planned for them)."""
        return self.summation.n

    @property
    def epsilon(self) -> float:
        """Target epsilon of the release (the per-level budgets sum to at most this)."""
        return self.summation.epsilon

    @property
    def delta(self) -> float:
        """Target delta of the release (split as :attr:`guarantee_delta_parts`)."""
        return self.summation.delta

    @property
    def B(self) -> int:
        """Scaling factor B: level vectors are multiplied by B and rounded to integers."""
        return self.summation.B

    @property
    def rounding(self) -> str:
        """Rounding rule of the scaled level vectors
        (:func:`shuffledp.encoders.encoder.scale_round`)."""
        return self.summation.rounding

    @property
    def neighbour(self) -> Neighbour:
        """Neighbour notion of the guarantee (REPLACE_ONE or ZERO_OUT)."""
        return Neighbour.parse(self.summation.neighbour)

    @property
    def dropout(self) -> float:
        """Declared dropout fraction: the noise is over-provisioned for it."""
        return self.summation.dropout

    @property
    def n_min(self) -> int:
        """Fewest surviving users for which the guarantee holds; the analyzer refuses fewer."""
        return self.summation.n_min

    @property
    def q(self) -> int:
        """Modulus of the shares (sums are exact mod q)."""
        return self.summation.q

    @property
    def r(self) -> int:
        """Shares per coordinate (split-and-mix, :meth:`check_supported`)."""
        return self.summation.r

    @property
    def decode_low(self) -> int:
        """A sum s mod q decodes to ((s + decode_low) mod q) - decode_low."""
        return self.summation.decode_low

    @property
    def wrap_probability(self) -> float:
        """Achieved union bound on any coordinate's sum leaving the decoding window."""
        return self.summation.wrap_probability

    @property
    def wrap_target(self) -> float:
        """Requested bound on the wrap-around probability."""
        return self.summation.wrap_target

    @property
    def gamma(self) -> float:
        """Decay of the per-level budget split (eps_i proportional to gamma^|i - start|)."""
        return self.summation.gamma

    @property
    def budget_rule(self) -> str:
        """The rule of the per-level split, ``"auto"`` or ``"paper"``
        (:data:`~shuffledp.accounting.budget.BUDGET_RULES`)."""
        return self.summation.budget_rule

    def check_supported(self) -> None:
        """Re-check that the parameters support the guarantee they claim; raise otherwise.

        r must reach the split-and-mix requirement of [BBGN20]_ as used in [Ghazi23]_ App. F
        for (eps, delta_mix, m, q, n_min), where delta_mix is delta minus the noise sampler's
        part (:func:`shuffledp.accounting.summation.delta_split`). The encoder and the
        analyzer call this again before encoding or releasing, so a record edited after
        construction (or a params file edited by hand) cannot ship a guarantee it does not
        have.
        """

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
        # the guarantee the analyzer ships is the record's own: it must claim the record's
        # numbers, or a record edited after construction would ship a stale one
        g = self.summation.guarantee
        gp = g.parameters if g is not None else {}
        stale = (
            g is None or g.delta != self.delta or g.neighbour is not self.neighbour
            or g.epsilon < sum_up(self.level_epsilons) or g.epsilon > self.epsilon
            or list(gp.get("level_epsilons", ())) != list(self.level_epsilons)
            or list(gp.get("dl_parameters", ())) != list(self.level_a)
            # the noise numbers are the ones the budgets and n_min imply (checked here once;
            # the encoder reads them from the record)
            or self.level_a != tuple(dl_parameter(e, s) for e, s in
                                     zip(self.level_epsilons, self.level_sensitivities,
                                         strict=True))
            or self.polya_shape != share_shape(self.n_min)
            or any(gp.get(k) != getattr(self, k) for k in ("n", "n_min", "q", "B"))
            or not gp.get("r", math.inf) <= self.r  # more shares than derived only help
        )
        if stale:
            raise ValueError(
                "the accounting record's guarantee does not match its numbers (epsilon, "
                "delta, level budgets, a_i, Polya shape, n, n_min, q, r, B): the record was "
                "edited after "
                "it was derived; derive it again (derive_params / summation_parameters)")

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
        """Polya shape 1 / n_min per user ([Bagdasaryan22]_ Thm 4.2, dropout over-provisioning;
        :func:`~shuffledp.accounting.budget.share_shape`: rounded up where the float is below),
        as the accounting record holds it (:meth:`check_supported` re-derives it)."""
        return self.summation.polya_shape

    @property
    def level_a(self) -> tuple[float, ...]:
        """Discrete Laplace parameter a_i = exp(-eps_i / Delta_i) per measured level, rounded
        toward 1 where the float would lose more than eps_i
        (:func:`~shuffledp.accounting.budget.dl_parameter`), as the accounting record holds
        it (:meth:`check_supported` re-derives it)."""
        return tuple(self.summation.dl_parameters)

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
        """Bytes of one user's plaintext batch as written by :mod:`shuffledp.protocol.wire`."""

        return HEADER_SIZE + self.messages_per_user * self.record_bytes

    @property
    def encrypted_record_bytes(self) -> int:
        """Bytes of one encrypted message on the wire (wire format 4): the coordinate (4),
        the HPKE encapsulated key (32, X25519), the share (:attr:`share_bytes`) and the AEAD
        tag (16): ``ENC_OVERHEAD + share_bytes`` (:data:`shuffledp.protocol.wire.ENC_OVERHEAD`)."""
        return ENC_OVERHEAD + self.share_bytes

    @property
    def encrypted_bytes_per_user(self) -> int:
        """Bytes of one user's encrypted batch (the deployment path, wire format 4): the
        64-byte header and r m records of :attr:`encrypted_record_bytes` each. Every message
        carries its own HPKE encapsulation, so this is what a device uploads, not
        :attr:`bytes_per_user` (the plaintext simulation path)."""
        return HEADER_SIZE + self.messages_per_user * self.encrypted_record_bytes

    @property
    def packed_bytes_per_user(self) -> int:
        """Bytes of one user's bit-packed batch (wire kind 5, version 3): the 64-byte header
        and ceil(r m record_bits / 8) bytes of records at exactly ``record_bits`` bits each
        (:func:`shuffledp.protocol.wire.pack_bits`)."""

        return HEADER_SIZE + -(-self.messages_per_user * self.record_bits // 8)

    @property
    def coordinate_major_bytes_per_user(self) -> int:
        """Bytes of one user's coordinate-major bit-packed batch (wire kind 5, flags bit 1):
        the header and ceil(r m share_bits / 8) bytes, the coordinate implied by position
        (:mod:`shuffledp.protocol.packed`)."""

        return HEADER_SIZE + -(-self.messages_per_user * self.share_bits // 8)

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
            "gamma": repr(self.gamma),
            "budget_rule": self.budget_rule,
            "wrap_target": repr(self.wrap_target),
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
            "encrypted_record_bytes": self.encrypted_record_bytes,
            "encrypted_bytes_per_user": self.encrypted_bytes_per_user,
            "record_bits": self.record_bits,
            "packed_bytes_per_user": self.packed_bytes_per_user,
            "coordinate_major_bytes_per_user": self.coordinate_major_bytes_per_user,
            "level_epsilons": list(self.level_epsilons),
            "level_sensitivities": list(self.level_sensitivities),
            "level_a": list(self.level_a),
            "polya_shape": self.polya_shape,
            "decode_low": self.decode_low,
            "wrap_probability": self.wrap_probability,
            "digest": self.digest.hex(),
        }

    def to_json(self) -> str:
        """Serialise (for the CLI roles); :meth:`from_json` re-derives and compares."""
        d = self.canonical()
        d["wrap_probability"] = repr(self.wrap_probability)
        d["guarantee_delta_parts"] = {k: v for k, v in self.guarantee_delta_parts.items()}
        d["derived"] = self._derived()
        d["communication"] = self.communication()
        return json.dumps(d, sort_keys=True, indent=1)

    def communication(self) -> dict[str, Any]:
        """What one user's batch takes on the wire (informational in params.json): the
        paper's bit count, the plaintext batch (simulation path) and the encrypted batch
        (deployment path: every message carries its own HPKE encapsulation and AEAD tag)."""
        return {"messages_per_user": self.messages_per_user,
                "bits_per_user": self.bits_per_user,
                "bytes_per_user": self.bytes_per_user,
                "encrypted_record_bytes": self.encrypted_record_bytes,
                "encrypted_bytes_per_user": self.encrypted_bytes_per_user}

    def _derived(self) -> dict[str, Any]:
        """What a device implemented elsewhere needs besides the agreed fields: the number of
        coordinates m, the messages per user (r m) and the share width. (The digest is the
        first 16 bytes of SHA-256 of the canonical JSON of the agreed fields, sorted keys,
        separators "," and ":"; :attr:`digest`.)"""
        return {"m": self.m, "messages_per_user": self.messages_per_user,
                "share_bits": self.share_bits, "share_bytes": self.share_bytes}

    @classmethod
    def from_json(cls, text: str) -> ProtocolParams:
        """Rebuild from :meth:`to_json` by re-deriving the accounting record from the file's
        inputs (n, epsilon, delta, B, grid, w, gamma, budget_rule, rounding, neighbour,
        dropout, wrap_target) and comparing every agreed field with the file's.

        A file whose q, r, budgets, sensitivities or decoding window differ from what the
        accounting derives (hand-edited, or written by another version) is refused: a record
        never carries numbers its accounting does not support. A file without
        ``budget_rule`` (written before the rule was recorded) is refused as one without
        ``round_id`` is: its numbers are not re-derived under an assumed rule.
        """
        d = json.loads(text)
        if not isinstance(d, dict) or d.get("format") != FORMAT_NAME:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"not a {FORMAT_NAME} parameter file (format={got!r})")
        if "round_id" not in d:
            raise ValueError("parameter file has no round_id (written by an older version); "
                             "re-run setup")
        if "budget_rule" not in d:
            raise ValueError("parameter file has no budget_rule (written by an older version, "
                             "which split eps over the levels as printed, budget='paper'); "
                             "re-run setup")
        try:
            rid = bytes.fromhex(d["round_id"])
        except (TypeError, ValueError):
            raise ValueError(f"round_id must be {2 * ROUND_ID_BYTES} hex digits, got "
                             f"round_id={d['round_id']!r}") from None
        p = derive_params(
            Grid(*d["grid"]), d["n"], epsilon=float(d["epsilon"]), delta=float(d["delta"]),
            B=d["B"], w=d["w"], gamma=float(d["gamma"]), rounding=d["rounding"],
            dropout=float(d["dropout"]), wrap_target=float(d["wrap_target"]),
            neighbour=d["neighbour"], round_id=rid, budget=d["budget_rule"],
        )
        ours = p.canonical()
        if "derived" in d and d["derived"] != p._derived():
            raise ValueError(f"parameter file field derived={d['derived']!r} differs from "
                             f"{p._derived()!r} for the same inputs: the file was edited or "
                             "written by another version; re-run setup")
        informational = {"wrap_probability", "guarantee_delta_parts", "derived",
                         "communication"}
        for k in sorted((set(ours) | set(d)) - informational):
            if ours.get(k) != d.get(k):
                raise ValueError(
                    f"parameter file field {k}={d.get(k)!r} differs from the accounting's "
                    f"{k}={ours.get(k)!r} for the same inputs: the file was edited or written "
                    "by another version; re-run setup"
                )
        return p


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
    dropout: float = DEFAULT_DROPOUT,
    wrap_target: float = 1e-12,
    neighbour: Neighbour | str = DEFAULT_NEIGHBOUR,
    round_id: bytes | None = None,
    budget: str = "auto",
) -> ProtocolParams:
    """Derive the protocol record for n users from the summation accounting.

    Delegates every number to :func:`shuffledp.accounting.summation.summation_parameters`
    (q with headroom and the shifted decoding window, r from the App. F formula with that q
    and n_min users, per-level eps_i and Delta_i = 2B, Polya shape 1/n_min for the declared
    dropout fraction, wrap-around probability, the guarantee) and wraps it in a validated
    :class:`ProtocolParams` that holds that record (the measured levels come from
    :meth:`Grid.measured_levels`, as for the central mechanism). ``round_id``
    (16 bytes) names the run; by default a fresh one from ``os.urandom``, so two setups with
    the same numbers have different digests and cannot mix their batches.

    ``dropout`` is the declared dropout fraction in [0, 1), :data:`DEFAULT_DROPOUT` (0.05)
    unless given: the noise is planned for n_min = ceil((1 - dropout) n) users
    ([Bagdasaryan22]_ Sec. 4), and the analyzer refuses a round with fewer. With dropout 0
    a single lost or removed user makes the round unreleasable; the default's price is
    noise variance about 1 / (1 - dropout) times larger when all n users are present
    (+2.6% standard deviation at 0.05) and, near a threshold of the shares formula, one
    more share per coordinate. Pass ``dropout=0.0`` to plan for exactly n users.

    Parameters
    ----------
    grid : Grid
        The heatmap grid (its measured levels and pixel count).
    n : int
        Users the protocol is provisioned for, >= 2.
    epsilon, delta : float
        Target guarantee (epsilon > 0, delta in (0, 1)).
    B : int
        Scaling factor of the level vectors ([Ghazi23]_ App. F).
    w : int, default 20
        Reconstruct's top-w.
    gamma : float, optional
        Per-level budget decay (None: the central model's default).
    rounding : {"largest_remainder", "floor"}
        Rounding rule of the scaled level vectors.
    dropout : float, default DEFAULT_DROPOUT
        Declared dropout fraction in [0, 1).
    wrap_target : float, default 1e-12
        Largest acceptable probability that a sum wraps around the modulus.
    neighbour : Neighbour or {"zero_out", "replace"}, default DEFAULT_NEIGHBOUR (zero-out)
        Neighbour relation of the guarantee
        (:data:`~shuffledp.accounting.guarantee.DEFAULT_NEIGHBOUR` is the one default of the
        central, shuffle and federated releases; add/remove is refused: n is public in the
        shuffle protocol).
    round_id : bytes, optional
        16 bytes naming the run (default: fresh from ``os.urandom``).
    budget : {"auto", "paper"}, default "auto"
        The split of eps over the levels, the central release's rule and default
        (``central_heatmap(budget=...)``): ``"paper"`` as printed ([Ghazi23]_ Sec. 4),
        ``"auto"`` :func:`~shuffledp.accounting.budget.auto_level_budgets` from the grid's
        pixels and n (public under both relations the protocol supports). Recorded as
        :attr:`ProtocolParams.budget_rule`, part of :attr:`ProtocolParams.digest`.

    Returns
    -------
    ProtocolParams
        The validated protocol record.

    Raises
    ------
    ValueError
        If an argument is out of range (n, epsilon, delta, B, dropout, rounding, neighbour,
        round_id, budget), or the derived record is not supported (messages wider than 64 bits,
        no decoding window).
    TypeError
        If a count is not an integer.
    """

    if not isinstance(grid, Grid):
        raise TypeError(f"grid must be a shuffledp.Grid, got grid={grid!r}")
    g = DEFAULT_GAMMA if gamma is None else gamma
    check_scale(B)
    check_rounding(rounding)
    summ = summation_parameters(
        n=n, epsilon=epsilon, delta=delta, B=B, grid=grid, w=w, gamma=g, rounding=rounding,
        neighbour=Neighbour.parse(neighbour), dropout=dropout, wrap_target=wrap_target,
        decoding="shifted", budget=budget,
    )
    return ProtocolParams(
        grid=grid, w=int(w), summation=summ,
        round_id=os.urandom(ROUND_ID_BYTES) if round_id is None else round_id,
    )


@dataclass(frozen=True)
class CommunicationStep:
    """One user's communication under one way of counting or laying out her messages.

    Attributes
    ----------
    label : str
        What this step counts.
    q : int
        The modulus of the shares.
    r : int
        Shares per coordinate.
    messages : int
        Messages per user, r m.
    bits_per_message : int
        Bits each message takes.
    header_bytes : int
        Bytes of the batch header (0 for the paper's count).
    """

    label: str
    q: int
    r: int
    messages: int
    bits_per_message: int
    header_bytes: int

    @property
    def bytes_per_user(self) -> int:
        """header_bytes + ceil(messages x bits_per_message / 8)."""
        return self.header_bytes + -(-self.messages * self.bits_per_message // 8)


def communication_steps(params: ProtocolParams) -> tuple[CommunicationStep, ...]:
    """From [Ghazi23]_'s App. F count to the bytes each wire layout writes, one change at a time.

    With m coordinates, n users, scale B:

    0. the App. F count as printed: q0 = B n, r0 = ``shares_needed(eps, delta, m, q0, n)``,
       r0 m ceil(log2(m q0)) bits (Fig. 12's formula; 7.14 MB at its setting, B = 256);
    1. the modulus with headroom, q = n B + 2t + 1 (errata row 3): ceil(log2(m q)) bits;
    2. r recomputed with that q, the n_min users of the dropout plan and the delta left to
       split-and-mix (errata row 8): :attr:`ProtocolParams.bits_per_user`;
    3. coordinate and share in separate fields, ceil(log2 m) + ceil(log2 q) bits, and the
       64-byte header: the bit-packed wire (:attr:`ProtocolParams.packed_bytes_per_user`);
    4. each record rounded up to whole bytes: the byte-aligned wire (version 2,
       :attr:`ProtocolParams.bytes_per_user`);
    5. (not a step of the chain but the layout that removes the coordinate) the shares
       alone, the coordinate implied by the position: the coordinate-major bit-packed wire
       (:attr:`ProtocolParams.coordinate_major_bytes_per_user`).

    Parameters
    ----------
    params : ProtocolParams
        The run's parameters.

    Returns
    -------
    tuple of CommunicationStep
        The six entries above, in order.

    Raises
    ------
    ValueError
        If B n is below 2 or the paper's r cannot be computed (from
        :func:`~shuffledp.accounting.summation.shares_needed`).

    References
    ----------
    [Ghazi23]_ App. F ("Communication", Fig. 12); [BBGN20]_ Cor. 6 (r).
    """
    p = params
    m, k = p.m, p.messages_per_user
    q0 = p.B * p.n
    r0 = shares_needed(p.epsilon, p.delta, m, q0, p.n)
    return (
        CommunicationStep("App. F as printed: q = B n, its r, ceil(log2(m q)) bits", q0, r0,
                          r0 * m, int(m * q0 - 1).bit_length(), 0),
        CommunicationStep("modulus with headroom (q = n B + 2t + 1)", p.q, r0, r0 * m,
                          p.bits_per_message, 0),
        CommunicationStep("r recomputed (that q, n_min users, split-and-mix's delta)", p.q,
                          p.r, k, p.bits_per_message, 0),
        CommunicationStep("coordinate and share in separate fields + header (bit-packed)",
                          p.q, p.r, k, p.record_bits, HEADER_SIZE),
        CommunicationStep("records in whole bytes (byte-aligned wire, version 2)", p.q, p.r, k,
                          8 * p.record_bytes, HEADER_SIZE),
        CommunicationStep("shares only, coordinate implied by position (coordinate-major)",
                          p.q, p.r, k, p.share_bits, HEADER_SIZE),
    )
