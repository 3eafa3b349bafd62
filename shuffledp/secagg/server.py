"""The server of secure aggregation ([Bonawitz17]_ Fig. 4, semi-honest, with dropouts).

The server relays keys and encrypted shares, collects masked inputs and, in the last round,
enough shares to remove the masks of exactly the clients whose masked input it holds:

* for every survivor u of round 2 (U3): t shares of its self-mask seed b_u give PRG(b_u);
* for every client v that shared keys but dropped before sending its masked input
  (U2 \\ U3): t shares of its s_sk give s_uv for every survivor u, and the pairwise masks
  sign(u, v) PRG(s_uv) that never cancelled.

Then sum_{u in U3} y_u - PRG(b_u) - sum_{v dropped} sign(u, v) PRG(s_uv) = sum_{u in U3} x_u
mod m. Each round needs at least t messages; with fewer the run aborts with
:class:`SecAggAborted` naming the round, never a wrong sum. Malformed messages, messages of
another session or round, messages from clients that are not in the previous round's set
and second messages from one client (replays) are rejected and counted; their sender counts
as dropped at that round.

References
----------
.. [Bonawitz17] K. Bonawitz, V. Ivanov, B. Kreuter, A. Marcedone, H. B. McMahan, S. Patel,
   D. Ramage, A. Segal, K. Seth, "Practical Secure Aggregation for Privacy-Preserving
   Machine Learning", CCS 2017, Fig. 4.
"""

from __future__ import annotations

import struct
from collections import Counter

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from shuffledp.secagg import messages as msg
from shuffledp.secagg import shamir
from shuffledp.secagg.client import (
    SHARE_CT,
    key_list,
    mask_seed,
    pair_sign,
    parse_bundle,
    unmask_request,
)
from shuffledp.secagg.prg import expand

ROUND_NAMES = ("advertise keys", "share keys", "masked input", "unmasking")


class SecAggAborted(ValueError):
    """Fewer clients than the threshold answered a round: no sum is released."""


class SecAggServer:
    """The server's state machine: :meth:`receive` messages, then :meth:`close_round`."""

    def __init__(self, n_clients: int, vector_length: int, modulus: int, threshold: int,
                 session: bytes) -> None:
        self.n = int(n_clients)
        self.length = int(vector_length)
        self.m = int(modulus)
        self.t = int(threshold)
        self.session = session
        self.round = 0
        self.rejected: Counter[str] = Counter()
        self._inbox: dict[int, bytes] = {}
        self.members: list[set[int]] = [set(range(self.n))]  # U0 (all), U1, U2, U3, U4
        self._keys: dict[int, tuple[bytes, bytes]] = {}
        self._shares: dict[int, bytes] = {}
        self._y: dict[int, np.ndarray] = {}
        self._reveals: dict[int, bytes] = {}
        self.total: np.ndarray | None = None

    @property
    def answered(self) -> set[int]:
        """Clients whose message of the current round was accepted so far."""
        return set(self._inbox)

    def receive(self, data: bytes) -> bool:
        """Accept one client message of the current round; False (and counted) if rejected."""
        try:
            m = msg.parse(data, self.session, round_=self.round)
        except msg.MessageError as e:
            self.rejected[f"round {self.round}: {type(e).__name__}"] += 1
            return False
        if m.sender not in self.members[-1]:
            self.rejected[f"round {self.round}: sender not in the previous round"] += 1
            return False
        if m.sender in self._inbox:
            self.rejected[f"round {self.round}: replayed (second message of a client)"] += 1
            return False
        if not self._valid_payload(m):
            self.rejected[f"round {self.round}: malformed payload"] += 1
            return False
        self._inbox[m.sender] = m.payload
        return True

    def _valid_payload(self, m: msg.Message) -> bool:
        p = m.payload
        if self.round == 0:
            return len(p) == 64
        if self.round == 1:
            if len(p) < 4:
                return False
            k = struct.unpack_from("<I", p)[0]
            return len(p) == 4 + k * (4 + SHARE_CT) and k == len(self.members[1]) - 1
        if self.round == 2:
            if len(p) != 8 * self.length:
                return False
            y = np.frombuffer(p, dtype="<i8")
            return bool(((y >= 0) & (y < self.m)).all())
        return len(p) >= 4 and len(p) == 4 + 37 * struct.unpack_from("<I", p)[0]

    def _close(self) -> set[int]:
        got = set(self._inbox)
        if len(got) < self.t:
            raise SecAggAborted(f"round {self.round} ({ROUND_NAMES[self.round]}): "
                                f"{len(got)} clients answered, fewer than the threshold "
                                f"t={self.t}; no sum is released")
        self.members.append(got)
        return got

    def close_round(self) -> bytes | dict[int, bytes] | np.ndarray:
        """End the round: the broadcast (rounds 0, 2), per-client bundles (round 1) or the sum."""
        got = self._close()
        inbox, self._inbox = self._inbox, {}
        r = self.round
        self.round += 1
        if r == 0:
            self._keys = {u: (p[:32], p[32:]) for u, p in inbox.items()}
            return msg.frame(16, msg.SERVER, self.session, key_list(self._keys))
        if r == 1:
            bundles: dict[int, list[bytes]] = {v: [] for v in got}
            for u, p in inbox.items():
                for v, ct in parse_bundle(p):
                    if v in bundles and v != u:
                        bundles[v].append(struct.pack("<I", u) + ct)
            return {v: msg.frame(17, msg.SERVER, self.session,
                                 struct.pack("<I", len(b)) + b"".join(b))
                    for v, b in bundles.items()}
        if r == 2:
            self._y = {u: np.frombuffer(p, dtype="<i8").astype(np.int64) for u, p in
                       inbox.items()}
            survivors = sorted(got)
            dropped = sorted(self.members[2] - got)
            return msg.frame(18, msg.SERVER, self.session, unmask_request(survivors, dropped))
        self._reveals = inbox
        self.total = self._unmask()
        return self.total

    def _unmask(self) -> np.ndarray:
        survivors = sorted(self.members[3])
        dropped = sorted(self.members[2] - self.members[3])
        b_pts: dict[int, list[tuple[int, int]]] = {u: [] for u in survivors}
        s_pts: dict[int, list[tuple[int, int]]] = {v: [] for v in dropped}
        for w, p in self._reveals.items():
            k = struct.unpack_from("<I", p)[0]
            for i in range(k):
                v, kind = struct.unpack_from("<IB", p, 4 + 37 * i)
                y = int.from_bytes(p[9 + 37 * i:41 + 37 * i], "little")
                target = b_pts if kind == 0 else s_pts
                if v in target:
                    target[v].append((w + 1, y))
        total = np.zeros(self.length, dtype=np.int64)
        cache: dict[tuple[int, ...], list[int]] = {}
        for u in survivors:
            total = (total + self._y[u]) % self.m
            b = _reconstruct(b_pts[u], self.t, f"self-mask seed of client {u}", cache)
            total = (total - expand(b.to_bytes(32, "little"), self.length, self.m)) % self.m
        for v in dropped:
            s_sk = _reconstruct(s_pts[v], self.t, f"mask key of dropped client {v}", cache)
            key = X25519PrivateKey.from_private_bytes(s_sk.to_bytes(32, "little"))
            for u in survivors:
                p = expand(mask_seed(key, self._keys[u][1], self.session, v, u), self.length,
                           self.m)
                total = (total - pair_sign(u, v) * p) % self.m
        return total


def _reconstruct(points: list[tuple[int, int]], t: int, what: str,
                 cache: dict[tuple[int, ...], list[int]]) -> int:
    """f(0) from the first t shares; the Lagrange coefficients of a set of share holders
    are computed once (O(t^2)) and reused for every secret they hold shares of (O(t))."""
    if len(points) < t:
        raise SecAggAborted(f"{len(points)} shares of the {what}, fewer than t={t}")
    xs = tuple(x for x, _ in points[:t])
    if xs not in cache:
        cache[xs] = shamir.lagrange_at_zero(xs)
    return sum(c * y for c, (_, y) in zip(cache[xs], points[:t])) % shamir.P


__all__ = ["ROUND_NAMES", "SecAggAborted", "SecAggServer"]
