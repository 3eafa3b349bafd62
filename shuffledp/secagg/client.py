"""The client of secure aggregation ([Bonawitz17]_ Fig. 4, the semi-honest protocol).

A client holds a vector x in Z_m^L and goes through four rounds, each turning the server's
last message into the client's next one (bytes in, bytes out, :mod:`.messages`):

0. advertise keys: two fresh X25519 key pairs, (c_pk, c_sk) for the share channel and
   (s_pk, s_sk) for the pairwise masks;
1. share keys: draw the self-mask seed b; Shamir-share s_sk and b (threshold t) among the
   clients U1 of round 0 and send each one its two shares, encrypted with ChaCha20-Poly1305
   under a key derived (HKDF-SHA256) from the X25519 agreement of the c keys; the message
   also carries the commitment H(b) = SHA-256(label || session || u || b) (:func:`commit_b`),
   against which the server checks the b it reconstructs in round 4 (s_sk is already
   committed to by s_pk). b is 255 uniform bits, so H(b) tells the server nothing about b
   (random-oracle model) while binding it: a wrong share cannot pass for a right one;
2. masked input: y = x + PRG(b) + sum_{v in U2, v != u} sign(u, v) PRG(s_uv) mod m, with
   s_uv derived from the agreement of the s keys (sign +1 when u < v, -1 otherwise, so each
   pair cancels in the sum) and U2 the clients whose shares it received;
3. unmasking: for every v in U2 reveal the b-share if the server says v survived round 2,
   the s_sk-share if it says v dropped. An honest client refuses a request that names a user
   in both lists, a user not in U2, fewer survivors than t, or omits the client itself:
   revealing both shares of one user would let the server unmask that user's input.

Binding. Every message carries the run's :class:`~.messages.Context` (session, modulus m,
vector length L, threshold t) and the client checks it on every server message before using
it: a server of other parameters is refused before the client's input enters anything
(:meth:`SecAggClient.check_hello` even before round 0). The packed context, not the bare
session id, enters every key derivation (:func:`derive`), the commitment to b and the share
encryption's associated data.

Sparse graph (SecAgg+, [Bell20]_): with a :class:`~.graph.CommunicationGraph` that is not
complete, the same four rounds run on the graph's edges only. The server's key list holds the
client's own keys and its neighbours' (the client refuses any other id); the client shares s_sk
and b among its neighbours (not itself) and needs at least t of them in rounds 1 and 2; it
masks against the neighbours whose shares it received; the unmasking request is addressed to
it alone (its neighbours' fates) and carries the number of survivors, which the client
refuses below the graph's ``min_clients`` (more dropouts than the parameters tolerate). The
graph's descriptor (n, k, min_clients, seed) is bound into every key derivation, so parties
of two graphs never agree a key. The client never takes a neighbour list from the server: it
computes its neighbourhood from the public seed.

Randomness: keys, seeds and Shamir coefficients come from :class:`shuffledp.randomness.SecureRandom`
(there is no seed parameter).

References
----------
.. [Bonawitz17] Bonawitz et al. (2017), "Practical Secure Aggregation", Fig. 4 -- full entry in
   docs/references.md.
.. [Bell20] Bell, Bonawitz, Gascon, Lepoint, Raykova (2020), "Secure Single-Server Aggregation
   with (Poly)Logarithmic Overhead", Sec. 3 -- full entry in docs/references.md.
"""

from __future__ import annotations

import struct

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from shuffledp.errors import Refused
from shuffledp.randomness import SecureRandom
from shuffledp.secagg import messages as msg
from shuffledp.secagg import shamir
from shuffledp.secagg.graph import CommunicationGraph
from shuffledp.secagg.prg import expand

KEY_BYTES = 32
_HINT = {"modulus": " (--modulus)", "threshold": " (--threshold)",
         "vector length": " (the length of --input)"}
SHARE_PLAIN = struct.Struct("<II32s32s")  # sender, receiver, s_sk share, b share
SHARE_CT = SHARE_PLAIN.size + 16


class SecAggRefused(Refused):
    """An honest client refuses a server request that would break its privacy."""


def derive(secret: bytes, label: bytes, session: bytes, a: int, b: int) -> bytes:
    """32-byte key from an X25519 agreement, bound to the run and the pair (a, b).

    ``session`` is the run's packed :class:`~.messages.Context` (session id, modulus, vector
    length, threshold), so parties of two parameter sets never derive the same key.
    """
    info = b"shuffledp secagg " + label + session + struct.pack("<II", a, b)
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


def mask_seed(sk: X25519PrivateKey, pk: bytes, session: bytes, u: int, v: int) -> bytes:
    """The pairwise mask seed s_uv (symmetric in u, v; [Bonawitz17]_ Fig. 4, round 2).

    Parameters
    ----------
    sk : cryptography X25519PrivateKey
        This party's mask-agreement secret key (s_u^SK).
    pk : bytes
        The other party's 32-byte raw X25519 public key (s_v^PK).
    session : bytes
        The run's packed context (:meth:`~.messages.Context.pack`).
    u, v : int
        The two client ids (either order gives the same seed).

    Returns
    -------
    bytes
        The 32-byte seed, HKDF-SHA256 of the X25519 agreement bound to the run and the pair.

    Raises
    ------
    ValueError
        ``pk`` is not a valid 32-byte X25519 public key, or the agreement is all-zero (a
        low-order point).
    """
    shared = sk.exchange(X25519PublicKey.from_public_bytes(pk))
    return derive(shared, b"mask", session, min(u, v), max(u, v))


def commit_b(b: int, session: bytes, uid: int) -> bytes:
    """The commitment to client ``uid``'s self-mask seed b (32 bytes), bound to the run's
    packed context ``session``."""
    h = hashes.Hash(hashes.SHA256())
    h.update(b"shuffledp secagg b-commit" + session + struct.pack("<I", uid)
             + b.to_bytes(32, "little"))
    return h.finalize()


def pair_sign(u: int, v: int) -> int:
    """The sign client ``u`` gives the mask it shares with ``v``: +1 if u < v, else -1, so
    the pairwise masks cancel in the sum ([Bonawitz17]_ Fig. 4, round 2).

    Parameters
    ----------
    u, v : int
        Two distinct client ids.

    Returns
    -------
    int
        +1 or -1.

    Raises
    ------
    ValueError
        ``u == v`` (a client shares no mask with itself).
    """
    if u == v:
        raise ValueError(f"pair_sign needs two distinct clients, got u=v={u!r}")
    return 1 if u < v else -1


def _private_key(rng: SecureRandom) -> tuple[X25519PrivateKey, int]:
    x = shamir.random_secret(rng)
    return X25519PrivateKey.from_private_bytes(x.to_bytes(KEY_BYTES, "little")), x


def raw_public(key: X25519PrivateKey) -> bytes:
    """The 32 raw bytes of ``key``'s X25519 public key."""
    return key.public_key().public_bytes(serialization.Encoding.Raw,
                                         serialization.PublicFormat.Raw)


class SecAggClient:
    """One client's state machine (see the module docstring).

    Parameters
    ----------
    uid : int
        The client's id, 0 <= uid < 2^32 - 1 (its Shamir point is uid + 1).
    vector : array_like of int
        The input, entries in [0, modulus); its length is the run's vector length L.
    modulus : int
        m, 2 <= m <= 2^62.
    threshold : int
        t: shares needed to reconstruct; the client refuses to go on with fewer than t peers.
    session : bytes
        The run's 16-byte id.
    graph : CommunicationGraph, optional
        The run's graph (default: complete, the full protocol).
    """

    def __init__(self, uid: int, vector: np.ndarray, modulus: int, threshold: int,
                 session: bytes, graph: CommunicationGraph | None = None) -> None:
        self.uid = int(uid)
        self.x = np.asarray(vector, dtype=np.int64)
        self.m = int(modulus)
        self.t = int(threshold)
        self.context = msg.Context(bytes(session), self.m, int(self.x.size), self.t)
        #: the packed context: what every key derivation and commitment binds
        self.graph = graph
        self.sparse = graph is not None and not graph.complete
        self._nbrs = set(graph.neighbours(self.uid)) if self.sparse and graph else set()
        self.bound = self.context.pack() + (graph.descriptor() if graph is not None else b"")
        self.session = self.context.session
        self._rng = SecureRandom()
        self._c_sk, _ = _private_key(self._rng)
        self._s_sk, self._s_sk_int = _private_key(self._rng)
        self._b = shamir.random_secret(self._rng)
        self._keys: dict[int, tuple[bytes, bytes]] = {}
        self._held: dict[int, tuple[int, int]] = {}  # v -> (s_sk share of v, b share of v)
        self._c_shared: dict[int, bytes] = {}  # v -> X25519 agreement of the c keys

    def _parse(self, data: bytes, round_: int) -> msg.Message:
        """A server message of this run; a server of other parameters is refused."""
        try:
            return msg.parse(data, self.context, round_=round_)
        except msg.ParameterMismatch as e:
            raise SecAggRefused(
                f"client {self.uid}: the server runs {e.field} {e.got}, this client "
                f"{e.field} {e.want}{_HINT[e.field]}; refusing before its input is used"
            ) from None

    def check_hello(self, hello: bytes) -> None:
        """Refuse a server whose hello (:func:`~.messages.hello`) names other parameters.

        Raises
        ------
        SecAggRefused
            Another modulus, vector length or threshold (naming it and both values).
        MessageError
            Not a hello of this session.
        """
        self._parse(hello, msg.HELLO)

    # ------------------------------------------------------------------ round 0
    def advertise(self) -> bytes:
        return msg.frame(0, self.uid, self.context,
                         raw_public(self._c_sk) + raw_public(self._s_sk))

    # ------------------------------------------------------------------ round 1
    def share_keys(self, broadcast: bytes) -> bytes:
        m = self._parse(broadcast, 16)
        keys = parse_key_list(m.payload)
        mine = (raw_public(self._c_sk), raw_public(self._s_sk))
        if keys.get(self.uid) != mine:
            raise SecAggRefused(f"client {self.uid}: the key list omits or alters its own keys")
        if self.sparse:
            stray = set(keys) - self._nbrs - {self.uid}
            if stray:
                raise SecAggRefused(f"client {self.uid}: the key list names clients "
                                    f"{sorted(stray)[:5]} that are not its neighbours")
            if len(keys) - 1 < self.t:
                raise SecAggRefused(f"client {self.uid}: {len(keys) - 1} neighbours advertised "
                                    f"keys, fewer than the threshold t={self.t}")
        elif len(keys) < self.t:
            raise SecAggRefused(f"client {self.uid}: {len(keys)} clients advertised keys, "
                                f"fewer than the threshold t={self.t}")
        self._keys = keys
        ids = sorted(set(keys) - {self.uid}) if self.sparse else sorted(keys)
        xs = [v + 1 for v in ids]
        s_sh = shamir.share(self._s_sk_int, xs, self.t, self._rng)
        b_sh = shamir.share(self._b, xs, self.t, self._rng)
        out = [commit_b(self._b, self.bound, self.uid),
               struct.pack("<I", len(ids) if self.sparse else len(ids) - 1)]
        for v, s_v, b_v in zip(ids, s_sh, b_sh):
            if v == self.uid:
                self._held[v] = (s_v, b_v)
                continue
            shared = self._c_sk.exchange(X25519PublicKey.from_public_bytes(keys[v][0]))
            self._c_shared[v] = shared  # round 2 decrypts v's shares with the same agreement
            key = derive(shared, b"share", self.bound, self.uid, v)
            plain = SHARE_PLAIN.pack(self.uid, v, s_v.to_bytes(32, "little"),
                                     b_v.to_bytes(32, "little"))
            ct = ChaCha20Poly1305(key).encrypt(bytes(12), plain, self.bound)
            out.append(struct.pack("<I", v) + ct)
        return msg.frame(1, self.uid, self.context, b"".join(out))

    # ------------------------------------------------------------------ round 2
    def masked_input(self, bundle: bytes) -> bytes:
        m = self._parse(bundle, 17)
        for u, ct in parse_bundle(m.payload):
            if u not in self._keys or u == self.uid or u in self._held:
                raise SecAggRefused(f"client {self.uid}: unexpected or repeated share from {u}")
            shared = self._c_shared.get(u)
            if shared is None:
                shared = self._c_sk.exchange(X25519PublicKey.from_public_bytes(self._keys[u][0]))
            key = derive(shared, b"share", self.bound, u, self.uid)
            try:
                plain = ChaCha20Poly1305(key).decrypt(bytes(12), ct, self.bound)
            except InvalidTag:
                raise SecAggRefused(f"client {self.uid}: the share from {u} fails "
                                    "authentication") from None
            a, b, s_v, b_v = SHARE_PLAIN.unpack(plain)
            if (a, b) != (u, self.uid):
                raise SecAggRefused(f"client {self.uid}: share addressed {a}->{b}, "
                                    f"received from {u}")
            self._held[u] = (int.from_bytes(s_v, "little"), int.from_bytes(b_v, "little"))
        if len(self._held) < self.t:
            raise SecAggRefused(f"client {self.uid}: shares from {len(self._held)} "
                                f"{'neighbours' if self.sparse else 'clients'}, fewer than "
                                f"the threshold t={self.t}")
        y = (self.x + expand(self._b.to_bytes(32, "little"), self.x.size, self.m)) % self.m
        for v in self._held:
            if v == self.uid:
                continue
            p = expand(mask_seed(self._s_sk, self._keys[v][1], self.bound, self.uid, v),
                       self.x.size, self.m)
            y = (y + pair_sign(self.uid, v) * p) % self.m
        return msg.frame(2, self.uid, self.context, y.astype("<i8").tobytes())

    # ------------------------------------------------------------------ round 3
    def unmask(self, request: bytes) -> bytes:
        m = self._parse(request, 18)
        payload = m.payload
        if self.sparse:
            if len(payload) < 4:
                raise msg.MessageError("unmasking request shorter than its survivor count")
            count = struct.unpack_from("<I", payload)[0]
            if count < self.graph.min_clients:  # type: ignore[union-attr]
                raise SecAggRefused(
                    f"client {self.uid}: {count} survivors, fewer than the "
                    f"{self.graph.min_clients} the graph's parameters "  # type: ignore[union-attr]
                    "tolerate (more dropouts than planned)")
            payload = payload[4:]
        survivors, dropped = parse_unmask_request(payload)
        s, d = set(survivors), set(dropped)
        u2 = set(self._held)
        if s & d:
            raise SecAggRefused(f"client {self.uid}: asked for both shares of users "
                                f"{sorted(s & d)[:5]} (that would unmask their inputs)")
        if not (s | d) <= u2:
            raise SecAggRefused(f"client {self.uid}: users {sorted((s | d) - u2)[:5]} did not "
                                "share keys in round 1")
        if not self.sparse and (self.uid not in s or len(s) < self.t):
            raise SecAggRefused(f"client {self.uid}: {len(s)} survivors (threshold t={self.t})"
                                f"{'' if self.uid in s else ', the client itself missing'}")
        out = []
        for v in sorted(s):
            out.append(struct.pack("<IB", v, 0) + self._held[v][1].to_bytes(32, "little"))
        for v in sorted(d):
            out.append(struct.pack("<IB", v, 1) + self._held[v][0].to_bytes(32, "little"))
        return msg.frame(3, self.uid, self.context, struct.pack("<I", len(out)) + b"".join(out))


# ---------------------------------------------------------------------- payload codecs
def key_list(keys: dict[int, tuple[bytes, bytes]]) -> bytes:
    return struct.pack("<I", len(keys)) + b"".join(
        struct.pack("<I", u) + c + s for u, (c, s) in sorted(keys.items()))


def parse_key_list(payload: bytes) -> dict[int, tuple[bytes, bytes]]:
    n = _count(payload, 68)
    keys = {}
    for i in range(n):
        off = 4 + 68 * i
        u = struct.unpack_from("<I", payload, off)[0]
        if u in keys:
            raise msg.MessageError(f"key list names client {u} twice")
        keys[u] = (payload[off + 4:off + 36], payload[off + 36:off + 68])
    return keys


def parse_bundle(payload: bytes) -> list[tuple[int, bytes]]:
    n = _count(payload, 4 + SHARE_CT)
    return [(struct.unpack_from("<I", payload, 4 + i * (4 + SHARE_CT))[0],
             payload[8 + i * (4 + SHARE_CT):4 + (i + 1) * (4 + SHARE_CT)]) for i in range(n)]


def unmask_request(survivors: list[int], dropped: list[int]) -> bytes:
    return (struct.pack("<II", len(survivors), len(dropped))
            + b"".join(struct.pack("<I", u) for u in list(survivors) + list(dropped)))


def parse_unmask_request(payload: bytes) -> tuple[list[int], list[int]]:
    if len(payload) < 8:
        raise msg.MessageError("unmasking request shorter than its counts")
    a, b = struct.unpack_from("<II", payload)
    if len(payload) != 8 + 4 * (a + b):
        raise msg.MessageError(f"unmasking request of {len(payload)} bytes for {a} + {b} ids")
    ids = list(struct.unpack_from(f"<{a + b}I", payload, 8))
    return ids[:a], ids[a:]


def _count(payload: bytes, item: int) -> int:
    if len(payload) < 4:
        raise msg.MessageError("payload shorter than its 4-byte count")
    n = struct.unpack_from("<I", payload)[0]
    if len(payload) != 4 + n * item:
        raise msg.MessageError(f"payload of {len(payload)} bytes does not hold {n} items of "
                               f"{item} bytes")
    return n


__all__ = ["SecAggClient", "SecAggRefused", "mask_seed", "pair_sign"]
