"""The server of secure aggregation ([Bonawitz17]_ Fig. 4, semi-honest, with dropouts).

The server relays keys and encrypted shares, collects masked inputs and, in the last round,
enough shares to remove the masks of exactly the clients whose masked input it holds:

* for every survivor u of round 2 (U3): t shares of its self-mask seed b_u give PRG(b_u);
* for every client v that shared keys but dropped before sending its masked input
  (U2 \\ U3): t shares of its s_sk give s_uv for every survivor u, and the pairwise masks
  sign(u, v) PRG(s_uv) that never cancelled.

Then sum_{u in U3} y_u - PRG(b_u) - sum_{v dropped} sign(u, v) PRG(s_uv) = sum_{u in U3} x_u
mod m. Each round needs at least t messages; with fewer the run aborts with
:class:`SecAggAborted` naming the round, never a wrong sum.

Faulty and hostile clients
--------------------------
Every message is checked before it is accepted, and a rejected message is counted by reason
(``rejected``) and its sender counts as dropped at that round:

* malformed, of another session or round, a sender field that differs from the channel it
  arrived on, a sender not in the previous round's set, a second message of one client;
* bound to another modulus, vector length or threshold than the server's (the header's
  :class:`~.messages.Context`): the client is named in :attr:`SecAggServer.mismatched`
  with the parameter and both values, before anything of its message is used;
* round 0: public keys already advertised by another client (a copy);
* round 1: a share list whose recipients are not exactly the other clients of round 0, each
  once, in order (a share withheld from one peer would make the pairwise masks asymmetric);
* round 2: a vector of the wrong length or with entries outside [0, m);
* round 3: an entry list that is not exactly one b-share per survivor and one s_sk-share per
  dropped client (a repeated, missing, extra or mislabelled entry), or a share >= P.

The server uses *every* share it holds, not the first t. All shares of one secret are
checked at once against the dual Reed-Solomon code (:class:`~.shamir.ShareChecker`, one
random parity check, soundness 1/P) and the secret against its commitment: H(b_u), sent by
u in round 1, or s_pk_v, advertised in round 0. A secret that fails goes to
:func:`~.shamir.robust_reconstruct`, which decodes or searches for t shares that verify;
holders whose shares are off the accepted polynomial are named in ``excluded`` (their
round-3 message is rejected and counted) when the naming is certain, in ``suspects``
otherwise. The sum is released only if every secret verified, so it is the right sum
whenever at least t holders of every secret sent correct shares; otherwise
:class:`SecAggAborted` names the secret and the suspects. A wrong sum is never released.

What a hostile client can still do (as in [Bonawitz17]_'s semi-honest protocol): choose its
own input freely (no range proof), and abort the run -- a share it encrypts wrongly makes
its recipients refuse, a wrong commitment makes its own seed unverifiable. Denial of service
is outside what this protocol prevents; a silently wrong sum is not.

References
----------
.. [Bonawitz17] Bonawitz et al. (2017), "Practical Secure Aggregation", Fig. 4 -- full entry in
   docs/references.md.
.. [Bell20] Bell, Bonawitz, Gascon, Lepoint, Raykova (2020), "Secure Single-Server Aggregation
   with (Poly)Logarithmic Overhead", Sec. 3 -- full entry in docs/references.md.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from shuffledp import _validation
from shuffledp.errors import Refused
from shuffledp.randomness import SecureRandom
from shuffledp.secagg import messages as msg
from shuffledp.secagg import shamir
from shuffledp.secagg.client import (
    SHARE_CT,
    commit_b,
    key_list,
    mask_seed,
    pair_sign,
    parse_bundle,
    raw_public,
    unmask_request,
)
from shuffledp.secagg.graph import CommunicationGraph
from shuffledp.secagg.prg import expand

COMMIT_BYTES = 32
REVEAL = struct.Struct("<IB32s")  # user, kind (0 b-share, 1 s_sk-share), share
MAX_CLIENTS = 1 << 16  # the most clients a run may have (bounds every message size below)


def message_limits(n_clients: int, vector_length: int) -> list[int]:
    """The largest client message (bytes) each round 0..3 allows, for reading untrusted
    input with a bound (a mailbox file, an HTTP body).

    Parameters
    ----------
    n_clients : int
        The number of clients of the run, 1 <= n_clients <= :data:`MAX_CLIENTS`.
    vector_length : int
        L, the length of every input vector (>= 0).

    Returns
    -------
    list of int
        Four byte counts: the bound of a client message in rounds 0, 1, 2 and 3.

    Raises
    ------
    TypeError
        An argument is not an integer.
    ValueError
        ``n_clients`` outside [1, MAX_CLIENTS] or ``vector_length`` < 0.
    """
    n_clients = _validation.bounded_count("n_clients", n_clients, 1, MAX_CLIENTS)
    vector_length = _validation.count("vector_length", vector_length, 0)
    h = msg.HEADER.size
    return [h + 64, h + COMMIT_BYTES + 4 + (n_clients - 1) * (4 + SHARE_CT),
            h + 8 * vector_length, h + 4 + REVEAL.size * n_clients]


ROUND_NAMES = ("advertise keys", "share keys", "masked input", "unmasking")


class SecAggAborted(Refused):
    """Fewer clients than the threshold answered a round: no sum is released."""


class SecAggServer:
    """The server's state machine: :meth:`receive` messages, then :meth:`close_round`.

    Parameters
    ----------
    n_clients : int
        n, the clients of the run (ids 0 .. n - 1).
    vector_length : int
        L, the length of every input vector.
    modulus : int
        m, 2 <= m <= 2^62: the sum is taken mod m.
    threshold : int
        t, the clients needed in every round and the shares needed per secret.
    session : bytes
        The run's 16 random bytes.
    graph : shuffledp.secagg.graph.CommunicationGraph, optional
        The run's graph (default complete: the full protocol). With a sparse graph (SecAgg+,
        [Bell20]_) the round-0 reply and the unmasking request are per client (its
        neighbours only), a round closes with at least ``graph.min_clients`` clients (not t),
        and each secret is rebuilt from t shares of its owner's neighbours: a secret whose
        owner has fewer than t neighbours left in the unmasking refuses the round
        (:class:`SecAggAborted`), never a wrong sum.

    Attributes
    ----------
    context : shuffledp.secagg.messages.Context
        The run's parameters, bound into every message.
    round : int
        The current round, 0..3 (4 once the sum is out).
    members : list of set of int
        U0 (all clients), then the clients whose message each closed round accepted.
    rejected : collections.Counter
        Rejected messages by reason.
    mismatched : dict
        Client -> why its message was bound to other parameters than the server's.
    excluded, suspects : dict
        Client -> why it was left out of the sum, or named as having sent wrong shares.
    total : numpy.ndarray or None
        The sum mod m once round 3 closed.
    unmask_runner : callable
        Runs the sparse unmasking's reconstruction jobs (default :func:`unmask_jobs` in this
        process; :func:`shuffledp.secagg.secure_sum` spreads them over its worker processes).

    Raises
    ------
    ValueError
        ``session`` not 16 bytes, or ``modulus``, ``vector_length`` or ``threshold`` out
        of range (from :class:`~shuffledp.secagg.messages.Context`).
    """

    def __init__(self, n_clients: int, vector_length: int, modulus: int, threshold: int,
                 session: bytes, graph: CommunicationGraph | None = None) -> None:
        self.n = int(n_clients)
        self.length = int(vector_length)
        self.m = int(modulus)
        self.t = int(threshold)
        self.context = msg.Context(bytes(session), self.m, self.length, self.t)
        #: the packed context: what every key derivation and commitment binds
        self.graph = graph
        self.sparse = graph is not None and not graph.complete
        self.bound = self.context.pack() + (graph.descriptor() if graph is not None else b"")
        self.session = self.context.session
        #: the fewest clients a round may end with
        self.min_round = graph.min_clients if self.sparse and graph is not None else self.t
        self._nb: dict[int, list[int]] = {}
        self._wanted_of: dict[int, list[tuple[int, int]]] = {}
        self.unmask_runner: Callable[..., tuple[np.ndarray, list]] = unmask_jobs
        self.round = 0
        self.rejected: Counter[str] = Counter()
        #: client -> why its message was refused for other parameters than the server's
        self.mismatched: dict[int, str] = {}
        self._inbox: dict[int, bytes] = {}
        self.members: list[set[int]] = [set(range(self.n))]  # U0 (all), U1, U2, U3, U4
        self._keys: dict[int, tuple[bytes, bytes]] = {}
        self._advertised: set[bytes] = set()  # round-0 public keys accepted so far
        self._wanted: list[tuple[int, int]] = []  # round 3: (user, 0 b | 1 s_sk), in order
        self._y: dict[int, np.ndarray] = {}
        self._commits: dict[int, bytes] = {}
        self._reveals: dict[int, bytes] = {}
        self.excluded: dict[int, str] = {}
        self.suspects: dict[int, str] = {}
        self.total: np.ndarray | None = None

    @property
    def answered(self) -> set[int]:
        """Clients whose message of the current round was accepted so far."""
        return set(self._inbox)

    def receive(self, data: bytes, channel: int | None = None) -> bool:
        """Accept one client message of the current round; False (and counted) if rejected.

        ``channel`` is the identity of the connection or mailbox file the message came
        through (an authenticated channel in a deployment); a message whose sender field
        names another client is rejected.
        """
        try:
            m = msg.parse(data, self.context, round_=self.round)
        except msg.ParameterMismatch as e:
            who = e.sender if channel is None else channel
            why = (f"client {who} runs {e.field} {e.got}, the server's {e.field} is {e.want}")
            self.mismatched.setdefault(who, why)
            self.rejected[f"round {self.round}: parameters differ from the server's: {why}"] += 1
            return False
        except msg.MessageError as e:
            self.rejected[f"round {self.round}: {type(e).__name__}"] += 1
            return False
        if channel is not None and m.sender != channel:
            self.rejected[f"round {self.round}: sender field differs from the channel"] += 1
            return False
        if m.sender not in self.members[-1]:
            self.rejected[f"round {self.round}: sender not in the previous round"] += 1
            return False
        if m.sender in self._inbox:
            self.rejected[f"round {self.round}: replayed (second message of a client)"] += 1
            return False
        reason = self._payload_error(m)
        if reason:
            self.rejected[f"round {self.round}: {reason}"] += 1
            return False
        self._inbox[m.sender] = m.payload
        if self.round == 0:
            self._advertised.update((m.payload[:32], m.payload[32:]))
        return True

    def _payload_error(self, m: msg.Message) -> str:
        """Why the payload is unacceptable ('' if it is acceptable)."""
        p = m.payload
        if self.round == 0:
            if len(p) != 64:
                return "malformed payload"
            if p[:32] in self._advertised or p[32:] in self._advertised or p[:32] == p[32:]:
                return "keys already advertised by another client"
            return ""
        if self.round == 1:
            if len(p) < COMMIT_BYTES + 4:
                return "malformed payload"
            try:
                entries = parse_bundle(p[COMMIT_BYTES:])
            except msg.MessageError:
                return "malformed payload"
            if self.sparse:
                want = [w for w in self.nbrs(m.sender) if w in self.members[1]]
                if [v for v, _ in entries] != want:
                    return "share recipients are not exactly its neighbours of round 0"
            elif [v for v, _ in entries] != sorted(self.members[1] - {m.sender}):
                return "share recipients are not exactly the other clients of round 0"
            return ""
        if self.round == 2:
            if len(p) != 8 * self.length:
                return "malformed payload"
            y = np.frombuffer(p, dtype="<i8")
            return "" if bool(((y >= 0) & (y < self.m)).all()) else "entry outside [0, m)"
        if len(p) < 4 or len(p) != 4 + REVEAL.size * struct.unpack_from("<I", p)[0]:
            return "malformed payload"
        got = [REVEAL.unpack_from(p, 4 + REVEAL.size * i)
               for i in range(struct.unpack_from("<I", p)[0])]
        wanted = self._wanted_of.get(m.sender, []) if self.sparse else self._wanted
        if [(v, kind) for v, kind, _ in got] != wanted:
            return "unmasking entries are not exactly one share per survivor and dropped client"
        if any(int.from_bytes(y, "little") >= shamir.P for _, _, y in got):
            return "share outside the field"
        return ""

    def nbrs(self, u: int) -> list[int]:
        """Client ``u``'s neighbours in the run's graph (sorted; cached)."""
        got = self._nb.get(u)
        if got is None:
            got = self._nb[u] = (self.graph.neighbours(u) if self.graph is not None
                                 else [w for w in range(self.n) if w != u])
        return got

    def hello(self) -> bytes:
        """The hello a client checks before round 0 (:meth:`SecAggClient.check_hello
        <shuffledp.secagg.client.SecAggClient.check_hello>`): the run's context."""
        return msg.hello(self.context)

    def _close(self) -> set[int]:
        got = set(self._inbox)
        if len(got) < self.min_round:
            what = (f"the graph's min_clients={self.min_round} (more dropouts than its "
                    "parameters tolerate)" if self.sparse else f"the threshold t={self.t}")
            raise SecAggAborted(f"round {self.round} ({ROUND_NAMES[self.round]}): "
                                f"{len(got)} clients answered, fewer than {what}; no sum is "
                                "released")
        self.members.append(got)
        return got

    def close_round(self) -> bytes | dict[int, bytes] | np.ndarray:
        """End the round: the broadcast (rounds 0, 2; per client with a sparse graph),
        per-client bundles (round 1) or the sum."""
        got = self._close()
        inbox, self._inbox = self._inbox, {}
        r = self.round
        self.round += 1
        if r == 0:
            self._keys = {u: (p[:32], p[32:]) for u, p in inbox.items()}
            if self.sparse:
                return {u: msg.frame(16, msg.SERVER, self.context, key_list(
                    {w: self._keys[w] for w in [u, *self.nbrs(u)] if w in self._keys}))
                        for u in got}
            return msg.frame(16, msg.SERVER, self.context, key_list(self._keys))
        if r == 1:
            self._commits = {u: p[:COMMIT_BYTES] for u, p in inbox.items()}
            bundles: dict[int, list[bytes]] = {v: [] for v in got}
            for u, p in inbox.items():
                for v, ct in parse_bundle(p[COMMIT_BYTES:]):
                    if v in bundles:
                        bundles[v].append(struct.pack("<I", u) + ct)
            return {v: msg.frame(17, msg.SERVER, self.context,
                                 struct.pack("<I", len(b)) + b"".join(b))
                    for v, b in bundles.items()}
        if r == 2:
            self._y = {u: np.frombuffer(p, dtype="<i8").astype(np.int64) for u, p in
                       inbox.items()}
            survivors = sorted(got)
            dropped = sorted(self.members[2] - got)
            self._wanted = [(v, 0) for v in survivors] + [(v, 1) for v in dropped]
            if self.sparse:
                out = {}
                for w in survivors:
                    held = [v for v in self.nbrs(w) if v in self.members[2]]
                    s_w = [v for v in held if v in got]
                    d_w = [v for v in held if v not in got]
                    self._wanted_of[w] = [(v, 0) for v in s_w] + [(v, 1) for v in d_w]
                    out[w] = msg.frame(18, msg.SERVER, self.context, struct.pack(
                        "<I", len(survivors)) + unmask_request(s_w, d_w))
                return out
            return msg.frame(18, msg.SERVER, self.context, unmask_request(survivors, dropped))
        self._reveals = inbox
        self.total = self._unmask_sparse() if self.sparse else self._unmask()
        return self.total

    def _unmask_sparse(self) -> np.ndarray:
        """Rebuild each survivor's b and each dropped client's s_sk from t of its
        neighbours' shares, and remove the masks (the jobs run in :attr:`unmask_runner`)."""
        shares: dict[int, dict[tuple[int, int], int]] = {}
        for w, p in self._reveals.items():
            count = struct.unpack_from("<I", p)[0]
            shares[w] = {(v, kind): int.from_bytes(y, "little") for v, kind, y in
                         (REVEAL.unpack_from(p, 4 + REVEAL.size * i) for i in range(count))}
        survivors = [v for v, kind in self._wanted if kind == 0]
        dropped = [v for v, kind in self._wanted if kind == 1]
        alive = set(survivors)
        jobs = []
        for v, kind in [(v, 0) for v in survivors] + [(v, 1) for v in dropped]:
            pts = [(w + 1, shares[w][(v, kind)]) for w in self.nbrs(v)
                   if w in shares and (v, kind) in shares[w]]
            what = (f"self-mask seed of client {v}" if kind == 0
                    else f"mask key of dropped client {v}")
            if len(pts) < self.t:
                raise SecAggAborted(
                    f"round 3 (unmasking): the {what} cannot be recovered: {len(pts)} of its "
                    f"neighbours answered, fewer than the threshold t={self.t}; no sum is "
                    "released")
            check = self._commits[v] if kind == 0 else self._keys[v][1]
            peers = ([] if kind == 0 else
                     [(u, self._keys[u][1]) for u in self.nbrs(v) if u in alive])
            jobs.append((v, kind, pts, check, peers))
        removed, results = self.unmask_runner(self.bound, self.length, self.m, self.t, jobs)
        wrong: dict[int, list[str]] = {}
        unsure: dict[int, list[str]] = {}
        for v, kind, error, bad, certain in results:
            what = (f"self-mask seed of client {v}" if kind == 0
                    else f"mask key of dropped client {v}")
            if error:
                raise SecAggAborted(f"round 3 (unmasking): the {what} cannot be recovered: "
                                    f"{error}; no sum is released")
            for x in bad:
                (wrong if certain else unsure).setdefault(x - 1, []).append(what)
        for w, whats in sorted(wrong.items()):
            self.excluded[w] = f"wrong Shamir share of the {', '.join(whats[:3])}"
            self.rejected["round 3: wrong Shamir share"] += 1
        for w, whats in sorted(unsure.items()):
            if w not in self.excluded:
                self.suspects[w] = f"share off the accepted polynomial ({whats[0]})"
        self.members[-1] = self.members[-1] - set(self.excluded)
        total = np.zeros(self.length, dtype=np.int64)
        for u in survivors:
            total = (total + self._y[u]) % self.m
        return (total - removed) % self.m

    def _unmask(self) -> np.ndarray:
        survivors = [v for v, kind in self._wanted if kind == 0]
        dropped = [v for v, kind in self._wanted if kind == 1]
        holders = sorted(self._reveals)
        xs = [w + 1 for w in holders]
        # validated in receive: every holder sent one share per survivor, then per dropped
        shares = {w: [int.from_bytes(p[9 + REVEAL.size * i:4 + REVEAL.size * (i + 1)],
                                     "little") for i in range(len(self._wanted))]
                  for w, p in self._reveals.items()}
        checker = shamir.ShareChecker(xs, self.t, SecureRandom())
        secrets: list[int] = []
        wrong: dict[int, list[str]] = {}
        unsure: dict[int, list[str]] = {}
        for j, (v, kind) in enumerate(self._wanted):
            ys = [shares[w][j] for w in holders]
            what = (f"self-mask seed of client {v}" if kind == 0
                    else f"mask key of dropped client {v}")
            verify = self._b_check(v) if kind == 0 else self._s_check(v)
            if checker.consistent(ys):
                secret = checker.secret(ys)
                if verify(secret):
                    secrets.append(secret)
                    continue
            try:
                rec = shamir.robust_reconstruct(list(zip(xs, ys)), self.t, verify)
            except shamir.ShareError as e:
                raise SecAggAborted(f"round 3 (unmasking): the {what} cannot be recovered: "
                                    f"{e}; no sum is released") from None
            secrets.append(rec.secret)
            for x in rec.wrong:
                (wrong if rec.certain else unsure).setdefault(x - 1, []).append(what)
        for w, whats in sorted(wrong.items()):
            self.excluded[w] = f"wrong Shamir share of the {', '.join(whats[:3])}"
            self.rejected["round 3: wrong Shamir share"] += 1
        for w, whats in sorted(unsure.items()):
            if w not in self.excluded:
                self.suspects[w] = f"share off the accepted polynomial ({whats[0]})"
        self.members[-1] = self.members[-1] - set(self.excluded)
        total = np.zeros(self.length, dtype=np.int64)
        for u, b in zip(survivors, secrets):
            total = (total + self._y[u]) % self.m
            total = (total - expand(b.to_bytes(32, "little"), self.length, self.m)) % self.m
        for v, s_sk in zip(dropped, secrets[len(survivors):]):
            key = X25519PrivateKey.from_private_bytes(s_sk.to_bytes(32, "little"))
            for u in survivors:
                p = expand(mask_seed(key, self._keys[u][1], self.bound, v, u), self.length,
                           self.m)
                total = (total - pair_sign(u, v) * p) % self.m
        return total

    def summary(self) -> dict:
        """The run's outcome for a report (JSON-ready): session, threshold, survivors (the
        clients whose input is in the sum), rejected messages by reason, excluded clients
        and suspects."""
        return {"session": self.context.session.hex(), "threshold": self.t,
                "modulus": self.m, "vector_length": self.length,
                "survivors": sorted(self.members[3]) if len(self.members) > 3 else [],
                "rejected": dict(self.rejected),
                "mismatched": {str(k): v for k, v in sorted(self.mismatched.items())},
                "excluded": {str(k): v for k, v in sorted(self.excluded.items())},
                "suspects": {str(k): v for k, v in sorted(self.suspects.items())}}

    def _b_check(self, u: int):
        want = self._commits[u]
        return lambda b: commit_b(b, self.bound, u) == want

    def _s_check(self, v: int):
        want = self._keys[v][1]

        def check(s_sk: int) -> bool:
            key = X25519PrivateKey.from_private_bytes(s_sk.to_bytes(32, "little"))
            return raw_public(key) == want
        return check


def _verifier(bound: bytes, v: int, kind: int, check: bytes) -> Callable[[int], bool]:
    """The commitment check of client v's b (kind 0) or s_sk (kind 1)."""
    if kind == 0:
        return lambda b: commit_b(b, bound, v) == check
    return lambda s_sk: raw_public(X25519PrivateKey.from_private_bytes(
        s_sk.to_bytes(32, "little"))) == check


def unmask_jobs(bound: bytes, length: int, modulus: int, threshold: int,
                jobs: list) -> tuple[np.ndarray, list]:
    """Rebuild secrets from their shares and total the masks they remove (sparse unmasking).

    Parameters
    ----------
    bound : bytes
        The run's packed context and graph descriptor (what the keys are bound to).
    length, modulus, threshold : int
        L, m and t of the run.
    jobs : list of (v, kind, points, check, peers)
        kind 0: client v's self-mask seed b, ``check`` its commitment; kind 1: dropped client
        v's mask key s_sk, ``check`` its public key s_pk and ``peers`` the (u, s_pk of u) of
        its surviving neighbours; ``points`` the shares (x, y) of v's neighbours.

    Returns
    -------
    removed : numpy.ndarray of int64
        sum of PRG(b_v) + sum_{v dropped, u} sign(u, v) PRG(s_uv) mod m over the jobs: what the
        server subtracts from the sum of the masked inputs.
    results : list of (v, kind, error, wrong, certain)
        Per job: '' or why the secret could not be rebuilt, the share points off the accepted
        polynomial and whether that naming is certain (:class:`shamir.Reconstruction`).

    Raises
    ------
    ValueError
        A malformed job (a share point repeated, a key that is not 32 bytes); the server
        builds the jobs from validated messages.
    """
    removed = np.zeros(length, dtype=np.int64)
    out: list[tuple[int, int, str, tuple[int, ...], bool]] = []
    for v, kind, pts, check, peers in jobs:
        verify = _verifier(bound, v, kind, check)
        try:
            rec = shamir.checked_reconstruct(pts, threshold, verify)
        except shamir.ShareError as e:
            out.append((v, kind, str(e), (), False))
            continue
        out.append((v, kind, "", rec.wrong, rec.certain))
        if kind == 0:
            removed = (removed + expand(rec.secret.to_bytes(32, "little"), length,
                                        modulus)) % modulus
        else:
            key = X25519PrivateKey.from_private_bytes(rec.secret.to_bytes(32, "little"))
            for u, pk in peers:
                p = expand(mask_seed(key, pk, bound, v, u), length, modulus)
                removed = (removed + pair_sign(u, v) * p) % modulus
    return removed, out


__all__ = ["MAX_CLIENTS", "ROUND_NAMES", "SecAggAborted", "SecAggServer", "message_limits",
           "unmask_jobs"]
