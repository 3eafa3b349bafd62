"""The shuffler of the shuffle-model heatmap protocol, and message encryption to the analyzer.

The shuffler (seed 000, App. F; DESIGN.md "Roles and trust") is trusted only to permute and
to forget who sent what. :class:`Shuffler`:

1. validates each user's batch (:mod:`shuffledp.wire` header, parameter digest, exact length,
   coordinate < m, and on plaintext batches share < q); a malformed batch is rejected and
   counted by reason, never forwarded;
2. drops a user whose batch is incomplete (not exactly r messages for every coordinate) as a
   whole: a partial batch would leave a share-sum that is not the user's noisy value;
3. strips sender identity (only the records are kept, in one pool);
4. applies a uniformly random permutation drawn from the cryptographically secure
   :class:`~shuffledp.encoders.sharing.SecureRandom` (Fisher-Yates with Lemire's unbiased
   bounded integers; never numpy's generator) and emits one mixed batch.

Deployment path: every message is encrypted to the analyzer's X25519 public key
(:func:`encrypt_records`, ECIES-style: a fresh ephemeral X25519 key per message, HKDF-SHA256,
ChaCha20-Poly1305 with the parameter digest and the coordinate as associated data). Two
ciphertexts of one user share nothing but the coordinate field (which every user fills the
same way), so the shuffler and the analyzer cannot link them; the shuffler checks only the
envelope. Simulation path (:func:`simulate_sums` in :mod:`shuffledp.protocol`) skips
encryption and the physical permutation; modular sums do not depend on order, so the sums
are exactly those of the deployment path for the same shares.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numba
import numpy as np
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from shuffledp.encoders.sharing import SecureRandom
from shuffledp.protocol_params import ProtocolParams
from shuffledp.wire import (
    ENC_OVERHEAD,
    HEADER_SIZE,
    KIND_MIXED,
    KIND_MIXED_ENC,
    KIND_USER,
    KIND_USER_ENC,
    Header,
    WireError,
    decode_batch,
    record_dtype,
    unpack_records,
)

REJECT_REASONS = (
    "malformed",  # header or length does not follow the wire format
    "wrong_digest",  # produced under other protocol parameters
    "wrong_kind",  # not a user batch, or encrypted when plaintext expected (or vice versa)
    "wrong_record_size",
    "coordinate_out_of_range",
    "share_out_of_range",
    "duplicate",  # the same user submitted twice
)


# --------------------------------------------------------------------------------------
# secure permutation
# --------------------------------------------------------------------------------------
@numba.njit(cache=True, nogil=True)
def _fisher_yates(idx, i, words):  # pragma: no cover - compiled
    """Continue Fisher-Yates on ``idx`` from position i downwards with random ``words``.

    j uniform in [0, i] by Lemire's method (rejection, unbiased). Returns the position
    reached (0 when done) so the caller can resupply words.
    """
    pos = 0
    mask = np.uint64(0xFFFFFFFF)
    nw = words.size
    while i > 0:
        bound = np.uint64(i + 1)
        while True:
            if pos >= nw:
                return i
            p = np.uint64(words[pos]) * bound
            pos += 1
            low = p & mask
            if low >= bound:
                break
            t = (np.uint64(1) << np.uint64(32)) % bound
            if low >= t:
                break
        j = np.int64(p >> np.uint64(32))
        tmp = idx[i]
        idx[i] = idx[j]
        idx[j] = tmp
        i -= 1
    return 0


def secure_shuffle(values: np.ndarray, source: SecureRandom | None = None) -> None:
    """Permute a 1D array in place, uniformly at random, from a cryptographically secure source.

    Fisher-Yates (Knuth, TAOCP 3.4.2, Alg. P) with j ~ U{0..i} drawn by Lemire's unbiased
    multiply-shift rejection from :class:`SecureRandom` (ChaCha20 keyed by os.urandom).
    """
    if values.ndim != 1:
        raise ValueError(f"values must be 1D, got shape {values.shape}")
    n = values.size
    if n > 1 << 32:
        raise ValueError(f"at most 2^32 elements can be shuffled, got {n}")
    src = source if source is not None else SecureRandom()
    i = n - 1
    while i > 0:
        i = int(_fisher_yates(values, i, src.uint32(i + 64)))


def secure_permutation(n: int, source: SecureRandom | None = None) -> np.ndarray:
    """A uniformly random permutation of 0..n-1 (int64) from the secure source."""
    p = np.arange(int(n), dtype=np.int64)
    secure_shuffle(p, source)
    return p


# --------------------------------------------------------------------------------------
# encryption to the analyzer (deployment path)
# --------------------------------------------------------------------------------------
_NONCE = bytes(12)
_INFO = b"shuffledp/1 message key"


def generate_analyzer_key() -> X25519PrivateKey:
    """A fresh X25519 key pair for the analyzer (keep the private key on the analyzer)."""
    return X25519PrivateKey.generate()


def public_bytes(key: X25519PublicKey | X25519PrivateKey) -> bytes:
    """Raw 32-byte public key."""
    pub = key.public_key() if isinstance(key, X25519PrivateKey) else key
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def private_bytes(key: X25519PrivateKey) -> bytes:
    """Raw 32-byte private key (store securely)."""
    return key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )


def _message_key(shared: bytes, eph_pub: bytes, recipient_pub: bytes) -> bytes:
    return HKDF(hashes.SHA256(), 32, salt=None, info=_INFO + eph_pub + recipient_pub).derive(
        shared
    )


def encrypted_record_bytes(params: ProtocolParams) -> int:
    """Bytes of one encrypted message: 4 (coordinate) + 32 (ephemeral key) + share + 16 (tag)."""
    return ENC_OVERHEAD + params.share_bytes


def encrypt_records(
    params: ProtocolParams, records: np.ndarray, analyzer_public: X25519PublicKey | bytes
) -> bytes:
    """Encrypt packed plaintext messages one by one (fresh ephemeral X25519 key per message).

    Returns the concatenated encrypted records (layout in :mod:`shuffledp.wire`).
    """
    pub = (
        X25519PublicKey.from_public_bytes(analyzer_public)
        if isinstance(analyzer_public, bytes)
        else analyzer_public
    )
    pub_raw = public_bytes(pub)
    rec = np.asarray(records)
    sb = np.uint64(params.share_bits)
    mask = (np.uint64(1) << sb) - np.uint64(1)
    r64 = rec.astype(np.uint64)
    coords = (r64 >> sb).astype("<u4")
    sbytes = params.share_bytes
    shares = (r64 & mask).astype("<u8").view(np.uint8).reshape(-1, 8)[:, :sbytes].tobytes()
    digest = params.digest
    out = bytearray()
    for a, w in zip(_chunks(coords.tobytes(), 4), _chunks(shares, sbytes), strict=True):
        eph = X25519PrivateKey.generate()
        eph_pub = public_bytes(eph)
        key = _message_key(eph.exchange(pub), eph_pub, pub_raw)
        ct = ChaCha20Poly1305(key).encrypt(_NONCE, w, digest + a)
        out += a + eph_pub + ct
    return bytes(out)


def _chunks(b: bytes, k: int):
    return (b[i : i + k] for i in range(0, len(b), k))


def decrypt_records(
    params: ProtocolParams, data: bytes | np.ndarray, analyzer_private: X25519PrivateKey
) -> tuple[np.ndarray, np.ndarray, int]:
    """Decrypt encrypted messages; returns (coordinates, shares, n_failed).

    A message whose tag does not verify (tampered, wrong key or moved to another coordinate)
    is counted in ``n_failed`` and dropped, never summed.
    """
    rb = encrypted_record_bytes(params)
    raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
    if len(raw) % rb:
        raise WireError(f"encrypted data is not a whole number of {rb}-byte records")
    pub_raw = public_bytes(analyzer_private)
    digest = params.digest
    k = len(raw) // rb
    coords = np.empty(k, dtype=np.int64)
    shares = np.empty(k, dtype=np.int64)
    failed = 0
    good = 0
    pb = params.share_bytes
    for i in range(k):
        rec = raw[i * rb : (i + 1) * rb]
        a, eph_pub, ct = rec[:4], rec[4:36], rec[36:]
        try:
            eph = X25519PublicKey.from_public_bytes(eph_pub)
            key = _message_key(analyzer_private.exchange(eph), eph_pub, pub_raw)
            w = ChaCha20Poly1305(key).decrypt(_NONCE, ct, digest + a)
        except Exception:  # InvalidTag, or an invalid point: a tampered message
            failed += 1
            continue
        coords[good] = int.from_bytes(a, "little")
        shares[good] = int.from_bytes(w[:pb], "little")
        good += 1
    return coords[:good], shares[:good], failed


# --------------------------------------------------------------------------------------
# the shuffler
# --------------------------------------------------------------------------------------
@dataclass
class ShuffleReport:
    """What the shuffler did: forwarded and dropped users, rejections by reason."""

    n_forwarded: int = 0
    n_incomplete: int = 0
    n_missing: int = 0
    rejected: Counter = field(default_factory=Counter)

    @property
    def n_rejected(self) -> int:
        return int(sum(self.rejected.values()))

    @property
    def n_dropped(self) -> int:
        """Users not forwarded: incomplete, rejected, or never submitted."""
        return self.n_incomplete + self.n_rejected + self.n_missing

    def to_dict(self) -> dict:
        return {
            "n_forwarded": self.n_forwarded,
            "n_dropped": self.n_dropped,
            "n_incomplete": self.n_incomplete,
            "n_missing": self.n_missing,
            "rejected": dict(self.rejected),
        }


class Shuffler:
    """Collect users' batches, validate, drop incomplete users, strip identity, mix.

    Parameters
    ----------
    params : ProtocolParams
    encrypted : bool
        Expect encrypted user batches (deployment path) instead of plaintext ones.
    source : SecureRandom, optional
        Cryptographically secure source for the permutation.
    """

    def __init__(
        self, params: ProtocolParams, *, encrypted: bool = False, source: SecureRandom | None = None
    ) -> None:
        if not isinstance(params, ProtocolParams):
            raise TypeError(f"params must be a ProtocolParams, got {type(params).__name__}")
        self.params = params
        self.encrypted = bool(encrypted)
        self.source = source if source is not None else SecureRandom()
        self.report = ShuffleReport()
        self._pool: list[np.ndarray] = []
        self._seen: set = set()
        self._rb = encrypted_record_bytes(params) if encrypted else params.record_bytes

    def _reject(self, reason: str) -> bool:
        self.report.rejected[reason] += 1
        return False

    def submit(self, data: bytes, sender: object = None) -> bool:
        """Validate one user's batch; keep its records if complete. Returns True if accepted.

        ``sender`` (any hashable, e.g. a connection id) only detects duplicate submissions; it
        is forgotten once the batch is pooled.
        """
        p = self.params
        if sender is not None:
            if sender in self._seen:
                return self._reject("duplicate")
            self._seen.add(sender)
        try:
            h = Header.unpack(bytes(data[:HEADER_SIZE]))
        except WireError:
            return self._reject("malformed")
        if h.digest != p.digest:
            return self._reject("wrong_digest")
        if h.kind != (KIND_USER_ENC if self.encrypted else KIND_USER) or h.n_users != 1:
            return self._reject("wrong_kind")
        if h.record_bytes != self._rb:
            return self._reject("wrong_record_size")
        try:
            _, rec = decode_batch(data)
        except WireError:
            return self._reject("malformed")
        if self.encrypted:
            coords = np.frombuffer(rec.tobytes(), dtype="<u4").reshape(-1, self._rb // 4)[:, 0] \
                if self._rb % 4 == 0 else \
                np.frombuffer(rec.tobytes(), dtype=np.uint8).reshape(-1, self._rb)[:, :4] \
                .copy().view("<u4").ravel()
            coords = coords.astype(np.int64)
            keep = np.array(rec, copy=True)
        else:
            v = unpack_records(rec, self._rb).astype(np.uint64)
            coords = (v >> np.uint64(p.share_bits)).astype(np.int64)
            shares = v & ((np.uint64(1) << np.uint64(p.share_bits)) - np.uint64(1))
            if shares.size and shares.max() >= p.q:
                return self._reject("share_out_of_range")
            keep = v
        if coords.size and coords.max() >= p.m:
            return self._reject("coordinate_out_of_range")
        if coords.size != p.r * p.m or np.any(np.bincount(coords, minlength=p.m) != p.r):
            self.report.n_incomplete += 1
            return False
        self._pool.append(keep)
        self.report.n_forwarded += 1
        return True

    def missing(self, k: int) -> None:
        """Record k users who were admitted but never sent a batch (dropouts)."""
        if int(k) < 0:
            raise ValueError(f"k must be >= 0, got k={k!r}")
        self.report.n_missing += int(k)

    def mix(self) -> tuple[Header, np.ndarray]:
        """Pool every accepted record, permute uniformly (secure source), return the mixed batch.

        The output carries no sender identity: only the records, the number of users forwarded
        and the number dropped. Plaintext records are returned as uint64 message integers
        (:func:`shuffledp.wire.encode_batch` packs them), encrypted ones as raw records.
        """
        if self._pool:
            pool = np.concatenate(self._pool)
        else:
            pool = np.empty(0, dtype=record_dtype(self._rb) if self.encrypted else np.uint64)
        self._pool = []
        self._seen = set()
        if self.encrypted:
            pool = pool[secure_permutation(pool.size, self.source)]
        else:
            secure_shuffle(pool, self.source)
        h = Header(
            KIND_MIXED_ENC if self.encrypted else KIND_MIXED,
            self._rb,
            self.params.digest,
            pool.size,
            self.report.n_forwarded,
            self.report.n_dropped,
        )
        return h, pool


def shuffle_batches(
    params: ProtocolParams,
    batches: Iterable[bytes],
    *,
    encrypted: bool = False,
    expected_users: int | None = None,
    source: SecureRandom | None = None,
) -> tuple[Header, np.ndarray, ShuffleReport]:
    """Run the shuffler over an iterable of user batches (bytes); returns (header, records, report).

    With ``expected_users``, users admitted but absent from ``batches`` count as dropped.
    """
    s = Shuffler(params, encrypted=encrypted, source=source)
    k = 0
    for k, data in enumerate(batches, start=1):
        s.submit(data, sender=k)
    if expected_users is not None:
        s.missing(max(0, int(expected_users) - k))
    h, rec = s.mix()
    return h, rec, s.report
