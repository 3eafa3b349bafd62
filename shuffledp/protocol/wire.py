"""Binary wire format of the shuffle-model heatmap protocol.

Every batch (one user's messages, or the shuffler's mixed output) is a 64-byte header
followed by packed fixed-size records; a mixed batch ends with a 32-byte tag. All integers
are little-endian.

Header (64 bytes)::

    offset size field
    0      4    magic            b"SDPW"
    4      2    version          uint16: 5 for kind 1 (canonical record order; version 2
                                 of kind 1 allowed any order and is refused), 2 for kind 2,
                                 3 for the bit-packed kinds 5-6, 4 for the encrypted kinds
                                 3-4 (HPKE records; version 2 of kinds 3-4 held the earlier
                                 ECIES records and is refused)
    6      1    kind             uint8: 1 user batch, 2 mixed batch,
                                        3 encrypted user batch, 4 encrypted mixed batch,
                                        5 bit-packed user batch, 6 bit-packed mixed batch
    7      1    record_bytes     uint8: bytes per record (1..8 plaintext, 53..56 encrypted);
                                 for kinds 5-6 the record width in BITS (1..64)
    8      16   digest           ProtocolParams.digest (first 16 bytes of SHA-256; it covers
                                 the round id, so batches of another run are rejected)
    24     8    n_records        uint64
    32     8    n_users          uint64: 1 for a user batch, users forwarded for a mixed batch
    40     8    n_dropped        uint64: users the shuffler dropped or rejected (mixed batch)
    48     1    flags            uint8: bit 0 set when the tag of a mixed batch is keyed;
                                 bit 1 (bit-packed kinds only): coordinate-major layout;
                                 bit 2 (encrypted user batches only): bytes 49..56 hold
                                 the analyzer key id
    49     15   reserved         zero (a non-zero byte is malformed), but bytes 49..56 are
                                 the 8-byte id of the analyzer public key the messages are
                                 sealed to when flags bit 2 is set
                                 (:func:`shuffledp.protocol.crypto.analyzer_key_id`)

Plaintext record (``record_bytes`` = ceil((ceil(log2 m) + share_bits) / 8), 1..8): the
low ``record_bytes`` bytes, little-endian, of the unsigned integer ``(a << share_bits) | w``
with coordinate a in [0, m) and share w in [0, q), share_bits = ceil(log2 q)
(:class:`~shuffledp.protocol.params.ProtocolParams`). E.g. 36-bit messages take 5 bytes.
:func:`_pack_records` / :func:`unpack_records` convert between integers and records.

Canonical user batches (kind 1, version 5). A plaintext user batch holds its records in
ascending numeric order: coordinate 0's r records first, then coordinate 1's, ..., each
coordinate's r shares ascending (:func:`frame_shares`). The order carries nothing: the
batch is identified with its user at the shuffler anyway, which permutes every record. It
makes the batch a function of the multiset of its records, so the shuffler can take a
replay's fingerprint over the bytes as received (a reordered copy is not canonical and is
refused as ``non_canonical``; an exact copy has the same fingerprint) and checks the order
in the same linear pass as the ranges. Mixed batches (kind 2) are in the shuffler's random
order.

Bit-packed records (version 3, kinds 5 and 6): the same unsigned integers
``(a << share_bits) | w`` at exactly b = ceil(log2 m) + share_bits bits each (b in the
``record_bytes`` header byte), concatenated least significant bit first: bit j of record i
is bit ``i b + j`` of the body, and bit k of the body is bit ``k mod 8`` of byte
``k // 8``. The body is ceil(n_records b / 8) bytes; the padding bits of the last byte
must be zero. :func:`pack_bits` / :func:`unpack_bits` convert (vectorised). A reader of
this module accepts versions 2 and 3.

Coordinate-major layout (bit-packed kinds with flags bit 1): the records hold the shares
w alone, at share_bits bits each, grouped by coordinate in increasing order; the coordinate
of record i is i // k with k = r in a user batch and k = n_users r in a mixed batch (every
user sends exactly r shares per coordinate, so the coordinate is implied by the position).
The analyzer's view is the same labelled multiset as with explicit coordinates (the order
inside a coordinate's block is a uniform permutation, independent of the data).

Encrypted record (version 4; ``record_bytes`` = 4 + 32 + s + 16, s = ceil(share_bits / 8))::

    0   4   coordinate a (uint32, in the clear: every user sends exactly r per coordinate)
    4   32  HPKE enc: the ephemeral X25519 public key (fresh per message)
    36  s+16  HPKE ciphertext of the share (s bytes LE) + Poly1305 tag

Bytes 4.. are exactly the output of an RFC 9180 single-shot ``Seal`` in base mode with
suite DHKEM(X25519, HKDF-SHA256) / HKDF-SHA256 / ChaCha20-Poly1305 (0x0020, 0x0001,
0x0003), ``info`` = b"shuffledp/3 hpke message" || 0x00 || digest || round id || a (the 4
bytes above) and an empty ``aad`` (:func:`shuffledp.protocol.crypto.message_info`). The overhead
per message is 52 bytes (coordinate 4, enc 32, tag 16) on top of the s-byte share.

Mixed-batch tag (32 bytes after the records, kinds 2 and 4 only): HMAC-SHA256 of the
header and the records under a key the shuffler shares with the analyzer (flags bit 0 set),
or, without such a key, plain SHA-256 of the same bytes (flags bit 0 clear). The keyed tag
authenticates the header counts and every record against anyone but the shuffler and the
analyzer; the unkeyed one only detects accidental corruption (anyone can recompute it).

Integrity, per path. Encrypted messages are authenticated one by one (AEAD), bound to the
run and the coordinate; the shuffler cannot check them (it has no key), the analyzer does.
Plaintext user batches carry NO integrity protection: a flipped share bit is a valid share.
The plaintext path is a simulation aid (the shuffler sees every share) and must not be
deployed.

A batch whose length is not exactly 64 + n_records * record_bytes (bit-packed kinds:
64 + ceil(n_records b / 8)) (+ 32 for a mixed batch) is malformed. Reading and writing work
in chunks (:func:`iter_records`, :class:`BatchWriter`).

Checking a header against the run. A header that parses is checked against the run's
:class:`~shuffledp.protocol.params.ProtocolParams` and the kind the reader expects by one
function, :func:`header_mismatch` (:func:`check_header` raises it); every reader (the
shuffler, the analyzer's input loop, the bit-packed rounds, the ``analyze`` command) uses it,
so a batch is judged by the same rules and named by the same reasons everywhere
(:data:`HEADER_REASONS`, a subset of the shuffler's
:data:`~shuffledp.protocol.shuffler.REJECT_REASONS`), in this order:

``wrong_digest``
    the digest differs: other parameters, or another run (the digest covers the round id);
``wrong_kind``
    another kind (user / mixed, plaintext / encrypted / bit-packed), another bit-packed
    layout, or a user batch whose header does not say n_users = 1, n_dropped = 0;
``wrong_record_size``
    ``record_bytes`` differs from what the parameters give for the kind (plaintext:
    ceil(record_bits / 8); encrypted: 4 + 32 + ceil(share_bits / 8) + 16; bit-packed: record_bits,
    or share_bits in the coordinate-major layout);
``incomplete``
    n_records is not r m (a user batch) or r m n_users (a mixed batch);
``over_capacity``
    a mixed batch of more than the n users the parameters provision for.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import IO, TYPE_CHECKING

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

if TYPE_CHECKING:  # params imports this module (HEADER_SIZE): annotations only
    from shuffledp.protocol.params import ProtocolParams

MAGIC = b"SDPW"
VERSION = 2
#: format version of the plaintext user batch (kind 1): records in canonical order
VERSION_CANONICAL = 5
#: format version of the bit-packed kinds (5, 6); readers accept VERSION and VERSION_PACKED
VERSION_PACKED = 3
#: format version of the encrypted kinds (3, 4): HPKE records (RFC 9180)
VERSION_HPKE = 4
READ_VERSIONS = (VERSION, VERSION_PACKED, VERSION_HPKE, VERSION_CANONICAL)
HEADER_SIZE = 64
TAG_SIZE = 32
FLAG_KEYED = 1
FLAG_COORD_MAJOR = 2
FLAG_KEY_ID = 4
KEY_ID_SIZE = 8
KIND_USER = 1
KIND_MIXED = 2
KIND_USER_ENC = 3
KIND_MIXED_ENC = 4
KIND_USER_PACKED = 5
KIND_MIXED_PACKED = 6
KINDS = (KIND_USER, KIND_MIXED, KIND_USER_ENC, KIND_MIXED_ENC, KIND_USER_PACKED,
         KIND_MIXED_PACKED)
MIXED_KINDS = (KIND_MIXED, KIND_MIXED_ENC, KIND_MIXED_PACKED)
PACKED_KINDS = (KIND_USER_PACKED, KIND_MIXED_PACKED)
ENC_OVERHEAD = 4 + 32 + 16
_HEADER = struct.Struct("<4sHBB16sQQQB15s")
assert _HEADER.size == HEADER_SIZE


#: what each kind is, in messages
KIND_NAMES = {
    KIND_USER: "a plaintext user batch", KIND_MIXED: "a plaintext mixed batch",
    KIND_USER_ENC: "an encrypted user batch", KIND_MIXED_ENC: "an encrypted mixed batch",
    KIND_USER_PACKED: "a bit-packed user batch", KIND_MIXED_PACKED: "a bit-packed mixed batch",
}
ENCRYPTED_KINDS = (KIND_USER_ENC, KIND_MIXED_ENC)
#: why a well-formed header does not fit the run, in the order :func:`header_mismatch`
#: checks (the names of :data:`shuffledp.protocol.shuffler.REJECT_REASONS`)
HEADER_REASONS = ("wrong_digest", "wrong_kind", "wrong_record_size", "incomplete",
                  "over_capacity")


class WireError(ValueError):
    """A batch that does not follow the wire format (malformed header, length, digest...)."""


class HeaderMismatch(WireError):
    """A well-formed header that does not fit the run; ``reason`` is one of
    :data:`HEADER_REASONS` and the message starts with it (``"wrong_digest: ..."``)."""

    def __init__(self, reason: str, detail: str) -> None:
        if reason not in HEADER_REASONS:
            raise ValueError(f"reason must be one of {HEADER_REASONS}, got reason={reason!r}")
        self.reason = reason
        super().__init__(f"{reason}: {detail}")


@dataclass(frozen=True)
class Header:
    """The 64-byte batch header (see module docstring).

    Parameters
    ----------
    kind : int
        Batch kind, one of :data:`KINDS` (user/mixed, plaintext/encrypted/bit-packed).
    record_bytes : int
        Size of one record: bytes, or bits for the bit-packed kinds.
    digest : bytes
        The 16-byte digest of the run's :class:`ProtocolParams` (round id included).
    n_records : int
        Number of records after the header.
    n_users : int, default 1
        Users whose records the batch holds (1 for a user batch).
    n_dropped : int, default 0
        Users who dropped out (0 for a user batch).
    version : int, optional
        Wire format version; None: the version the kind is written with.
    flags : int, default 0
        ``FLAG_KEYED`` (mixed batch tagged under a MAC key) and/or ``FLAG_COORD_MAJOR``;
        ``FLAG_KEY_ID`` is set from ``key_id``.
    key_id : bytes, default b""
        An encrypted user batch's analyzer key id (:data:`KEY_ID_SIZE` bytes, in the
        reserved bytes with flags bit 2), or empty.

    Raises
    ------
    ValueError
        If a field is out of range (unknown kind, wrong version for the kind, record size,
        digest length, negative count, flags the kind does not take).
    """

    kind: int
    record_bytes: int
    digest: bytes
    n_records: int
    n_users: int = 1
    n_dropped: int = 0
    version: int | None = None
    flags: int = 0
    key_id: bytes = b""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got kind={self.kind!r}")
        want = (VERSION_PACKED if self.kind in PACKED_KINDS
                else VERSION_HPKE if self.kind in (KIND_USER_ENC, KIND_MIXED_ENC)
                else VERSION_CANONICAL if self.kind == KIND_USER else VERSION)
        if self.version is None:
            object.__setattr__(self, "version", want)
        if self.version != want:
            raise ValueError(f"kind {self.kind} is written with version {want}, got "
                             f"version={self.version!r}")
        top = 64 if self.kind in PACKED_KINDS else 255
        if not (1 <= int(self.record_bytes) <= top):
            raise ValueError(f"record_bytes must be in 1..{top} for kind {self.kind}, got "
                             f"record_bytes={self.record_bytes!r}")
        if not isinstance(self.digest, bytes) or len(self.digest) != 16:
            raise ValueError(f"digest must be 16 bytes, got {self.digest!r}")
        for name in ("n_records", "n_users", "n_dropped"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {name}={v!r}")
            object.__setattr__(self, name, int(v))
        kid = self.key_id
        if not isinstance(kid, bytes) or len(kid) not in (0, KEY_ID_SIZE):
            raise ValueError(f"key_id must be empty or {KEY_ID_SIZE} bytes, got key_id={kid!r}")
        if kid and self.kind != KIND_USER_ENC:
            raise ValueError(f"only an encrypted user batch (kind {KIND_USER_ENC}) names its "
                             f"analyzer key, got a key_id on kind {self.kind}")
        f = self.flags
        if isinstance(f, int) and f & FLAG_KEY_ID and not kid:
            raise ValueError(f"flags bit {FLAG_KEY_ID} says the header names a key, but "
                             "key_id is empty")
        if kid and isinstance(f, int):
            f = f | FLAG_KEY_ID
            object.__setattr__(self, "flags", f)
        if (not isinstance(f, int) or f & ~(FLAG_KEYED | FLAG_COORD_MAJOR | FLAG_KEY_ID) or f < 0
                or (f & FLAG_KEYED and self.kind not in MIXED_KINDS)
                or (f & FLAG_COORD_MAJOR and self.kind not in PACKED_KINDS)):
            raise ValueError(f"flags must be 0, or {FLAG_KEYED} on a mixed batch, plus "
                             f"{FLAG_COORD_MAJOR} on a bit-packed batch ({FLAG_KEY_ID} with a "
                             f"key_id), got flags={f!r} on kind {self.kind}")

    @property
    def mixed(self) -> bool:
        return self.kind in MIXED_KINDS

    @property
    def keyed(self) -> bool:
        """True when the mixed batch's tag is an HMAC (see module docstring)."""
        return bool(self.flags & FLAG_KEYED)

    @property
    def coordinate_major(self) -> bool:
        """True when records are shares in coordinate-major order (see module docstring)."""
        return bool(self.flags & FLAG_COORD_MAJOR)

    @property
    def trailer_bytes(self) -> int:
        """Bytes after the records: the 32-byte tag of a mixed batch, else 0."""
        return TAG_SIZE if self.mixed else 0

    @property
    def total_bytes(self) -> int:
        """Exact length of the whole batch."""
        return HEADER_SIZE + self.body_bytes + self.trailer_bytes

    @property
    def encrypted(self) -> bool:
        return self.kind in (KIND_USER_ENC, KIND_MIXED_ENC)

    @property
    def packed(self) -> bool:
        """True for the bit-packed kinds (``record_bytes`` then holds the width in bits)."""
        return self.kind in PACKED_KINDS

    @property
    def body_bytes(self) -> int:
        if self.packed:
            return -(-self.n_records * self.record_bytes // 8)
        return self.n_records * self.record_bytes

    def pack(self) -> bytes:
        return _HEADER.pack(
            MAGIC, self.version, self.kind, self.record_bytes, self.digest,
            self.n_records, self.n_users, self.n_dropped, self.flags,
            self.key_id + bytes(15 - len(self.key_id)),
        )

    @classmethod
    def unpack(cls, data: bytes) -> Header:
        """Parse and validate a header; raises :class:`WireError`."""
        if len(data) < HEADER_SIZE:
            raise WireError(f"batch shorter than the {HEADER_SIZE}-byte header ({len(data)} bytes)")
        magic, version, kind, rb, digest, nrec, nusers, ndrop, flags, reserved = _HEADER.unpack(
            data[:HEADER_SIZE]
        )
        if magic != MAGIC:
            raise WireError(f"bad magic {magic!r} (expected {MAGIC!r})")
        if version not in READ_VERSIONS:
            raise WireError(f"unsupported format version {version} (this reader: "
                            f"{' or '.join(map(str, READ_VERSIONS))})")
        kid = b""
        if isinstance(flags, int) and flags & FLAG_KEY_ID:
            kid, reserved = reserved[:KEY_ID_SIZE], reserved[KEY_ID_SIZE:]
        if any(reserved):
            raise WireError(f"reserved header bytes {49 + len(kid)}..63 must be zero")
        try:
            return cls(kind, rb, digest, nrec, nusers, ndrop, version, flags, kid)
        except ValueError as e:
            raise WireError(str(e)) from None


def _expected_record_size(params: ProtocolParams, kind: int, flags: int = 0) -> int:
    """``record_bytes`` of a batch of ``kind`` under ``params``: bytes per record, or bits for
    the bit-packed kinds (share_bits alone when ``flags`` has :data:`FLAG_COORD_MAJOR`)."""
    if kind in PACKED_KINDS:
        return params.share_bits if flags & FLAG_COORD_MAJOR else params.record_bits
    if kind in ENCRYPTED_KINDS:  # coordinate + X25519 enc + share + Poly1305 tag
        return ENC_OVERHEAD + params.share_bytes
    return params.record_bytes


def _kind_detail(want: int, got: int) -> str:
    detail = f"expected {KIND_NAMES[want]} (kind {want}), got {KIND_NAMES[got]} (kind {got})"
    if got in ENCRYPTED_KINDS and want not in ENCRYPTED_KINDS:
        detail += "; the batch is encrypted: pass the analyzer's key"
    elif want in ENCRYPTED_KINDS and got not in ENCRYPTED_KINDS:
        detail += ("; plaintext batches are a simulation aid, the deployment path expects "
                   "encrypted messages")
    return detail


def header_mismatch(params: ProtocolParams, header: Header, kind: int, *,
                    layout_flags: int | None = None) -> HeaderMismatch | None:
    """Why ``header`` does not fit the run of ``params`` as a batch of ``kind``, or None.

    Parameters
    ----------
    params : ProtocolParams
        The run's parameters (digest, r, m, n and the record sizes).
    header : Header
        A header that parsed (:meth:`Header.unpack`).
    kind : int
        The kind the reader expects (one of :data:`KINDS`).
    layout_flags : int, optional
        For a bit-packed kind: the layout the reader expects, ``FLAG_COORD_MAJOR`` or 0;
        None accepts either (the record size then follows the header's layout).

    Returns
    -------
    HeaderMismatch or None
        The first failed check of the module docstring's list (its ``reason`` one of
        :data:`HEADER_REASONS`), not raised: the shuffler counts it, a reader raises it
        (:func:`check_header`).

    Raises
    ------
    ValueError
        If ``kind`` is not one of :data:`KINDS`.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got kind={kind!r}")
    h = header
    if h.digest != params.digest:
        return HeaderMismatch("wrong_digest", "the batch was produced under other protocol "
                                              "parameters or in another run (digest differs; "
                                              "each setup draws a fresh round id)")
    if h.kind != kind:
        return HeaderMismatch("wrong_kind", _kind_detail(kind, h.kind))
    if not h.mixed and (h.n_users, h.n_dropped) != (1, 0):
        return HeaderMismatch("wrong_kind", f"a user batch says n_users = 1, n_dropped = 0, "
                                            f"got {h.n_users}, {h.n_dropped}")
    layout = h.flags & FLAG_COORD_MAJOR
    if layout_flags is not None and layout != layout_flags:
        name = {0: "packed", FLAG_COORD_MAJOR: "coordinate-major"}
        return HeaderMismatch("wrong_kind", f"expected the {name[layout_flags]} layout, got "
                                            f"the {name[layout]} layout")
    rb = _expected_record_size(params, kind, layout)
    if h.record_bytes != rb:
        unit = "bits" if h.packed else "bytes"
        return HeaderMismatch("wrong_record_size", f"records of {h.record_bytes} {unit}, "
                                                   f"expected {rb}")
    users = h.n_users if h.mixed else 1
    if h.n_records != params.messages_per_user * users:
        return HeaderMismatch(
            "incomplete", f"header counts disagree: n_records = {h.n_records} but r m n_users"
                          f" = {params.messages_per_user} x {users} = "
                          f"{params.messages_per_user * users}")
    if h.n_users > params.n:
        return HeaderMismatch("over_capacity", f"{h.n_users} users, more than the n = "
                                               f"{params.n} the parameters provision for")
    return None


def check_header(params: ProtocolParams, header: Header, kind: int, *,
                 layout_flags: int | None = None) -> Header:
    """``header`` if it fits the run as a batch of ``kind``.

    Parameters
    ----------
    params : ProtocolParams
        The run's parameters.
    header : Header
        A parsed header.
    kind : int
        The kind the reader expects (one of :data:`KINDS`).
    layout_flags : int, optional
        The bit-packed layout expected (``FLAG_COORD_MAJOR`` or 0); None accepts either.

    Returns
    -------
    Header
        ``header`` itself.

    Raises
    ------
    HeaderMismatch
        The first failed check of :func:`header_mismatch`.
    ValueError
        If ``kind`` is not one of :data:`KINDS`.
    """
    bad = header_mismatch(params, header, kind, layout_flags=layout_flags)
    if bad is not None:
        raise bad
    return header


@intrinsic
def _unaligned_u64(typingctx, body, b):  # pragma: no cover - compiled
    """One unaligned 8-byte load from byte ``b`` of a C-contiguous uint8 array, in the
    machine's byte order (no bounds check: the caller keeps ``b + 8 <= body.size``)."""
    if not (isinstance(body, types.Array) and body.dtype == types.uint8
            and body.layout == "C" and isinstance(b, types.Integer)):
        return None
    sig = types.uint64(body, b)

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        ptr = builder.bitcast(builder.gep(data, [args[1]]), ir.IntType(64).as_pointer())
        return builder.load(ptr, align=1)

    return sig, codegen


@intrinsic
def _unaligned_store_u64(typingctx, out, b, v):  # pragma: no cover - compiled
    """One unaligned 8-byte store of the uint64 ``v`` at byte ``b`` of a C-contiguous uint8
    array, in the machine's byte order (no bounds check: the caller keeps ``b + 8 <=
    out.size``)."""
    if not (isinstance(out, types.Array) and out.dtype == types.uint8 and out.layout == "C"
            and isinstance(b, types.Integer) and v == types.uint64):
        return None
    sig = types.void(out, b, v)

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        ptr = builder.bitcast(builder.gep(data, [args[1]]), ir.IntType(64).as_pointer())
        builder.store(args[2], ptr, align=1)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _load_at(typingctx, addr, nbytes):  # pragma: no cover - compiled
    """One unaligned load of ``nbytes`` (a literal 1 or 8) bytes from the absolute address
    ``addr`` (an integer), zero-extended to a uint64, in the machine's byte order. For
    kernels that read several arrays the caller keeps alive (their ``ctypes.data`` plus
    offsets) without copying them into one; the caller keeps every read inside them."""
    if not (isinstance(addr, types.Integer) and isinstance(nbytes, types.IntegerLiteral)
            and nbytes.literal_value in (1, 8)):
        return None
    width = 8 * nbytes.literal_value
    sig = types.uint64(addr, nbytes)

    def codegen(context, builder, signature, args):
        ity = ir.IntType(width)
        ptr = builder.inttoptr(args[0], ity.as_pointer())
        val = builder.load(ptr, align=1)
        return val if width == 64 else builder.zext(val, ir.IntType(64))

    return sig, codegen


@intrinsic
def _prefetch_write(typingctx, out, b):  # pragma: no cover - compiled
    """A hint that byte ``b`` of the C-contiguous uint8 array ``out`` will be written soon
    (``llvm.prefetch``, write, high locality): no effect on the results, never faults."""
    if not (isinstance(out, types.Array) and out.dtype == types.uint8 and out.layout == "C"
            and isinstance(b, types.Integer)):
        return None
    sig = types.void(out, b)

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        ptr = builder.gep(data, [args[1]])
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        builder.call(fn, [ptr, ir.Constant(i32, 1), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


_LITTLE = sys.byteorder == "little"


@numba.njit(cache=True, nogil=True, inline="always")
def _record_from(addr, end, rb, keep):  # pragma: no cover - compiled
    """The ``rb``-byte little-endian record at absolute address ``addr`` as a uint64, read
    as 8 bytes and masked with ``keep`` when 8 bytes lie below ``end`` (the end of the
    array it is in), else byte by byte."""
    if addr + np.uint64(8) <= end and _LITTLE:
        return _load_at(addr, 8) & keep
    v = np.uint64(0)
    for c in range(rb):
        v |= _load_at(addr + np.uint64(c), 1) << np.uint64(8 * c)
    return v


if sys.byteorder == "little":
    @numba.njit(cache=True, nogil=True, inline="always")
    def _store8(out, b, v):  # pragma: no cover - compiled
        """Write the uint64 ``v`` little-endian to bytes b..b+7 of ``out`` (C-contiguous
        uint8; ``b`` a uint64): one unaligned store (eight byte stores were not merged)."""
        _unaligned_store_u64(out, b, v)
else:  # pragma: no cover - big-endian hosts
    @numba.njit(cache=True, nogil=True, inline="always")
    def _store8(out, b, v):
        """Write the uint64 ``v`` little-endian to bytes b..b+7 of ``out``: byte stores."""
        for c in range(8):
            out[b + np.uint64(c)] = np.uint8((v >> np.uint64(8 * c)) & np.uint64(0xFF))


if sys.byteorder == "little":
    @numba.njit(cache=True, nogil=True, inline="always")
    def _load8(body, b):  # pragma: no cover - compiled
        """The 8 bytes of ``body`` (C-contiguous uint8) from byte ``b`` (a uint64) as a
        little-endian uint64: one unaligned load. (Eight byte loads merged by the compiler
        were narrowed to a 4-byte and a 1-byte load plus a shift and an or when the caller
        masks the value to 5 bytes; one load and the mask are about 5% faster in the
        analyzer's loop.)"""
        return _unaligned_u64(body, b)
else:  # pragma: no cover - big-endian hosts
    @numba.njit(cache=True, nogil=True, inline="always")
    def _load8(body, b):
        """The 8 bytes of ``body`` (uint8) from byte ``b`` (a uint64) as a little-endian
        uint64: byte loads on unsigned indices."""
        return (np.uint64(body[b]) | (np.uint64(body[b + np.uint64(1)]) << np.uint64(8))
                | (np.uint64(body[b + np.uint64(2)]) << np.uint64(16))
                | (np.uint64(body[b + np.uint64(3)]) << np.uint64(24))
                | (np.uint64(body[b + np.uint64(4)]) << np.uint64(32))
                | (np.uint64(body[b + np.uint64(5)]) << np.uint64(40))
                | (np.uint64(body[b + np.uint64(6)]) << np.uint64(48))
                | (np.uint64(body[b + np.uint64(7)]) << np.uint64(56)))


@numba.njit(cache=True, nogil=True, inline="always")
def _record_at(body, i, rb, keep, n_fast):  # pragma: no cover - compiled
    """Record i of ``body`` (uint8, ``rb``-byte little-endian records) as a uint64.

    Records below ``n_fast`` (:func:`_fast_records`) are read as 8 bytes and masked with
    ``keep`` (:func:`_keep_mask`; unsigned indices, so the compiler merges the byte loads),
    the last few byte by byte.
    """
    if i < n_fast:
        return _load8(body, np.uint64(i) * np.uint64(rb)) & keep
    v = np.uint64(0)
    for c in range(rb):
        v |= np.uint64(body[i * rb + c]) << np.uint64(c << 3)
    return v


@numba.njit(cache=True, nogil=True, inline="always")
def _fast_records(nbytes, rb):  # pragma: no cover - compiled
    """How many leading ``rb``-byte records of ``nbytes`` bytes have 8 bytes from their start."""
    n = nbytes // rb
    return min(n, (nbytes - 8) // rb + 1) if nbytes >= 8 else 0


@numba.njit(cache=True, nogil=True, inline="always")
def _keep_mask(rb):  # pragma: no cover - compiled
    """The low ``rb`` bytes of a uint64 (1 <= rb <= 8)."""
    if rb >= 8:
        return np.uint64(0xFFFFFFFFFFFFFFFF)
    return (np.uint64(1) << np.uint64(8 * rb)) - np.uint64(1)


def _record_dtype(record_bytes: int) -> np.dtype:
    """numpy dtype of a raw record: little-endian uint32/uint64, else ``record_bytes`` raw bytes."""
    if record_bytes == 4:
        return np.dtype("<u4")
    if record_bytes == 8:
        return np.dtype("<u8")
    return np.dtype((np.void, record_bytes))


def _pack_records(values: np.ndarray, record_bytes: int) -> np.ndarray:
    """Integers -> raw records (low ``record_bytes`` bytes, little-endian), vectorised.

    Raises ValueError if a value does not fit in ``record_bytes`` bytes.
    """
    v = np.asarray(values)
    if not (1 <= record_bytes <= 8):
        raise ValueError(f"plaintext records have 1..8 bytes, got record_bytes={record_bytes}")
    if v.dtype.kind not in "ui":
        raise TypeError(f"values must be integers, got dtype {v.dtype}")
    v = v.astype("<u8", copy=False).ravel()
    if record_bytes < 8 and v.size and int(v.max()) >> (8 * record_bytes):
        raise ValueError(f"a value does not fit in {record_bytes} bytes")
    if record_bytes in (4, 8):
        return v.astype(_record_dtype(record_bytes))
    raw = np.ascontiguousarray(v.view(np.uint8).reshape(-1, 8)[:, :record_bytes])
    return raw.view(_record_dtype(record_bytes)).ravel()


def unpack_records(records: np.ndarray, record_bytes: int) -> np.ndarray:
    """Raw records -> unsigned integers (uint32 for 4-byte records, else uint64), vectorised.

    Parameters
    ----------
    records : numpy.ndarray
        Raw little-endian records (as read from a batch).
    record_bytes : int
        Bytes per record, 1..8.

    Returns
    -------
    numpy.ndarray
        One unsigned integer per record (uint32 if ``record_bytes`` is 4, else uint64).

    Raises
    ------
    ValueError
        If ``record_bytes`` is not in 1..8.
    """
    r = np.asarray(records)
    if record_bytes in (4, 8):
        return r.view(_record_dtype(record_bytes)).astype(
            np.uint32 if record_bytes == 4 else np.uint64, copy=False)
    if not (1 <= record_bytes <= 8):
        raise ValueError(f"plaintext records have 1..8 bytes, got record_bytes={record_bytes}")
    raw = np.frombuffer(r.tobytes() if not r.flags.c_contiguous else r.data, dtype=np.uint8)
    raw = raw.reshape(-1, record_bytes)
    wide = np.zeros((raw.shape[0], 8), dtype=np.uint8)
    wide[:, :record_bytes] = raw
    return wide.view("<u8").ravel().astype(np.uint64, copy=False)


def _check_bits(bits: int) -> int:
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not 1 <= bits <= 64:
        raise ValueError(f"bits must be an integer in 1..64, got bits={bits!r}")
    return int(bits)


def pack_bits(values: np.ndarray, bits: int) -> bytes:
    """Unsigned integers -> ceil(len(values) bits / 8) bytes, ``bits`` bits each, LSB first.

    Vectorised (numpy unpackbits/packbits on the little-endian bytes); padding bits of the
    last byte are zero.

    Parameters
    ----------
    values : numpy.ndarray
        Non-negative integers.
    bits : int
        Bits per value, 1..64.

    Returns
    -------
    bytes
        ceil(len(values) * bits / 8) bytes.

    Raises
    ------
    TypeError
        If ``values`` is not an integer array.
    ValueError
        If ``bits`` is not in 1..64, a value is negative or needs more than ``bits`` bits.
    """
    bits = _check_bits(bits)
    v = np.asarray(values)
    if v.dtype.kind not in "ui":
        raise TypeError(f"values must be integers, got dtype {v.dtype}")
    if v.dtype.kind == "i" and v.size and int(v.min()) < 0:
        raise ValueError(f"values must be >= 0, got a value {int(v.min())}")
    v = np.ascontiguousarray(v.ravel(), dtype="<u8")
    if bits < 64 and v.size and int(v.max()) >> bits:
        raise ValueError(f"a value does not fit in {bits} bits, got max={int(v.max())}")
    # 64 bits of every value, LSB first; keep the low `bits` of each row
    mat = np.unpackbits(v.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
    return np.packbits(mat[:, :bits].ravel(), bitorder="little").tobytes()


def unpack_bits(data: bytes | memoryview | np.ndarray, bits: int, count: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`: ``count`` values from exactly ceil(count bits / 8) bytes.

    Parameters
    ----------
    data : bytes, memoryview or numpy.ndarray
        The packed bytes.
    bits : int
        Bits per value, 1..64.
    count : int
        Number of values, >= 0.

    Returns
    -------
    numpy.ndarray
        ``count`` uint64 values.

    Raises
    ------
    ValueError
        If ``bits`` is not in 1..64 or ``count`` is not an integer >= 0.
    WireError
        If ``data`` has another length or a non-zero padding bit.
    """
    bits = _check_bits(bits)
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
        raise ValueError(f"count must be an integer >= 0, got count={count!r}")
    raw = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) \
        else data.view(np.uint8).ravel()
    need = -(-int(count) * bits // 8)
    if raw.size != need:
        raise WireError(f"{count} records of {bits} bits take {need} bytes, got {raw.size}")
    flat = np.unpackbits(raw, bitorder="little")
    if flat[count * bits:].any():
        raise WireError("non-zero padding bits after the last bit-packed record")
    mat = np.zeros((int(count), 64), dtype=np.uint8)
    mat[:, :bits] = flat[: count * bits].reshape(-1, bits)
    return np.packbits(mat, axis=1, bitorder="little").view("<u8").ravel().astype(np.uint64)


def _body(records: np.ndarray | bytes | memoryview, record_bytes: int,
          packed: bool = False) -> bytes | memoryview:
    if isinstance(records, np.ndarray):
        if records.dtype.kind in "ui":
            if packed:
                return pack_bits(records, record_bytes)
            return _pack_records(records, record_bytes).tobytes()
        return records.tobytes()
    if isinstance(records, memoryview):  # raw bytes, written without a copy
        return records.cast("B") if records.format != "B" or records.ndim != 1 else records
    return bytes(records)


def sorting_network(n: int) -> np.ndarray:
    """The comparators of Batcher's odd-even merge sort on n inputs.

    Applying, for each comparator (i, j) in turn, min to position i and max to position j
    sorts any n values ascending. Built for the next power of two; comparators that touch
    an index >= n are dropped (those inputs may be taken as +inf, which no comparator moves).

    Parameters
    ----------
    n : int
        Number of inputs, >= 1.

    Returns
    -------
    numpy.ndarray
        Shape (k, 2), int64, the comparators (i, j) with i < j < n in the order to apply them.

    Raises
    ------
    ValueError
        If ``n`` is not an integer >= 1.

    References
    ----------
    Batcher (1968), "Sorting networks and their applications"; Knuth (1998), "The Art of
    Computer Programming, Vol. 3", Sec. 5.3.4 (and its 0-1 principle).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got n={n!r}")
    size = 1
    while size < n:
        size *= 2
    pairs = []
    p = 1
    while p < size:
        k = p
        while k >= 1:
            for j in range(k % p, size - k, 2 * k):
                for i in range(min(k, size - j - k)):
                    a, b = i + j, i + j + k
                    if a // (2 * p) == b // (2 * p) and b < n:
                        pairs.append((a, b))
            k //= 2
        p *= 2
    return np.array(pairs, dtype=np.int64).reshape(-1, 2)


#: coordinates sorted and written per block of :func:`_write_canonical` (in cache)
_CANON_BLOCK = 256


@numba.njit(cache=True, nogil=True)
def _write_canonical(shares, share_bits, rb, net, out):  # pragma: no cover - compiled
    """out[HEADER_SIZE:] = the records (a << share_bits) | w in canonical order: coordinate
    a = 0, 1, ... in turn, each coordinate's r shares w = shares[:, a] ascending (the records
    in ascending numeric order); ``rb`` bytes little-endian each. A block of coordinates at a
    time is copied out, sorted by the comparator network ``net`` (:func:`sorting_network`;
    each comparator is a min / max over the block, which the compiler vectorises) and
    written. Returns the largest share (the caller checks it is < q)."""
    r, m = shares.shape
    bl = _CANON_BLOCK
    work = np.empty((r, bl), dtype=np.uint32)
    top = np.uint32(0)
    end = np.uint64(out.size)
    urb = np.uint64(rb)
    sb = np.uint64(share_bits)
    ff = np.uint64(0xFF)
    for c0 in range(0, m, bl):
        w = min(bl, m - c0)
        for j in range(r):
            src = shares[j]
            dst = work[j]
            for i in range(w):
                dst[i] = src[c0 + i]
        for t in range(net.shape[0]):
            lo = work[net[t, 0]]
            hi = work[net[t, 1]]
            for i in range(w):
                x = lo[i]
                y = hi[i]
                lo[i] = min(x, y)
                hi[i] = max(x, y)
        last = work[r - 1]
        for i in range(w):
            top = max(top, last[i])
        pos = np.uint64(HEADER_SIZE) + np.uint64(c0) * np.uint64(r) * urb
        for i in range(w):
            hi_bits = np.uint64(c0 + i) << sb
            for j in range(r):
                v = hi_bits | np.uint64(work[j, i])
                if pos + np.uint64(8) <= end:  # 8 bytes; the next record rewrites the extra
                    _store8(out, pos, v)
                else:
                    for c in range(rb):
                        out[pos + np.uint64(c)] = np.uint8((v >> np.uint64(8 * c)) & ff)
                pos += urb
    return top


#: the largest r whose batches are sorted by a comparator network (:func:`_write_canonical`)
_NETWORK_MAX_R = 256
_NETWORKS: dict[int, np.ndarray] = {}


def _network(r: int) -> np.ndarray:
    net = _NETWORKS.get(r)
    if net is None:
        net = _NETWORKS[r] = sorting_network(r)
    return net


def frame_shares(params: ProtocolParams, shares: np.ndarray) -> bytes:
    """One user's plaintext batch (kind 1) straight from its shares, in canonical order.

    The same bytes as ``encode_batch(Header(KIND_USER, ...), np.sort(messages(params,
    shares)))`` (:func:`shuffledp.encoders.encoder.frame_messages`): the records
    ``(a << share_bits) | w``, ``record_bytes`` bytes little-endian each, in ascending
    numeric order (coordinate-major, each coordinate's r shares ascending; see "Canonical user
    batches" in the module docstring), without the intermediate message array.

    Parameters
    ----------
    params : ProtocolParams
        The protocol record.
    shares : numpy.ndarray
        Shape (r, m), unsigned integers < q (:func:`~shuffledp.encoders.encoder.encode_shares`).

    Returns
    -------
    bytes
        The user batch: header, then r m records.

    Raises
    ------
    ValueError
        If ``shares`` has another shape, is not integer or holds a share >= q.
    """
    return framed_shares(params, shares).tobytes()


def framed_shares(params: ProtocolParams, shares: np.ndarray,
                  out: np.ndarray | None = None) -> np.ndarray:
    """:func:`frame_shares` as a uint8 array, without the copy into ``bytes``.

    Its ``.data`` is what :meth:`~shuffledp.protocol.shuffler.Shuffler.submit` takes.

    Parameters
    ----------
    params : ProtocolParams
        The protocol record.
    shares : numpy.ndarray
        Shape (r, m), unsigned integers < q.
    out : numpy.ndarray, optional
        Written into when it is a contiguous uint8 array of the batch's length (a buffer
        reused from batch to batch); else a new array is made.

    Returns
    -------
    numpy.ndarray
        The user batch's bytes (uint8): header, then r m records in canonical order.

    Raises
    ------
    ValueError
        If ``shares`` has another shape, is not integer or holds a share >= q.
    """
    s = np.asarray(shares)
    if s.shape != (params.r, params.m):
        raise ValueError(f"shares must have shape (r, m) = {(params.r, params.m)}, got "
                         f"shares.shape={s.shape}")
    if s.dtype.kind not in "ui":
        raise ValueError(f"shares must be integers, got shares.dtype={s.dtype}")
    if s.dtype != np.uint32 and s.size and (int(s.min()) < 0 or int(s.max()) >= params.q):
        bad = int(s.min()) if int(s.min()) < 0 else int(s.max())
        raise ValueError(f"shares must be in [0, q = {params.q}), got a share {bad}")
    h = Header(KIND_USER, params.record_bytes, params.digest, params.messages_per_user)
    if (not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.shape != (h.total_bytes,)
            or not out.flags.c_contiguous):
        out = np.empty(h.total_bytes, dtype=np.uint8)
    if params.r <= _NETWORK_MAX_R:
        top = int(_write_canonical(np.ascontiguousarray(s, dtype=np.uint32), params.share_bits,
                                   params.record_bytes, _network(params.r), out))
        if top >= params.q:  # uint32 shares are checked here, in the same pass
            raise ValueError(f"shares must be in [0, q = {params.q}), got a share {top}")
    else:  # a long network: sort the message integers instead
        a = np.arange(params.m, dtype=np.uint64) << np.uint64(params.share_bits)
        rec = np.sort((a[None, :] | s.astype(np.uint64)).reshape(-1))
        out[HEADER_SIZE:] = _pack_records(rec, params.record_bytes).reshape(-1).view(np.uint8)
    out[:HEADER_SIZE] = np.frombuffer(h.pack(), dtype=np.uint8)
    return out


def _check_mac_key(mac_key: bytes | None) -> bytes | None:
    if mac_key is None:
        return None
    if not isinstance(mac_key, (bytes, bytearray)):
        raise TypeError(f"mac_key must be bytes, got {type(mac_key).__name__}")
    if len(mac_key) < 16:
        raise ValueError(f"mac_key must hold at least 16 bytes, got {len(mac_key)}")
    return bytes(mac_key)


def _tagger(mac_key: bytes | None):
    """Running tag of a mixed batch: HMAC-SHA256 under ``mac_key``, or SHA-256 without one."""
    key = _check_mac_key(mac_key)
    return hmac.new(key, digestmod=hashlib.sha256) if key is not None else hashlib.sha256()


def _with_tag_flag(header: Header, mac_key: bytes | None) -> Header:
    """The header a writer emits: flags bit 0 set on a mixed batch iff a MAC key is used."""
    if not header.mixed:
        if mac_key is not None:
            raise ValueError("only mixed batches carry a tag; got a mac_key for a user batch")
        return header
    keep = header.flags & FLAG_COORD_MAJOR
    return replace(header, flags=keep | (FLAG_KEYED if mac_key is not None else 0))


def _check_tag_mode(header: Header, mac_key: bytes | None) -> None:
    if header.keyed and mac_key is None:
        raise WireError("the mixed batch is authenticated with a shuffler-analyzer MAC key; "
                        "pass mac_key to verify it")
    if header.mixed and not header.keyed and mac_key is not None:
        raise WireError("the mixed batch carries no keyed tag but a mac_key was given: "
                        "refusing an unauthenticated batch")


def encode_batch(
    header: Header, records: np.ndarray | bytes, mac_key: bytes | None = None
) -> bytes:
    """A whole batch as bytes (header + records [+ tag]); integer arrays are packed.

    A mixed batch gets its 32-byte tag (keyed with ``mac_key`` when given, which also sets
    flags bit 0 of the header).

    Parameters
    ----------
    header : Header
        The batch's header (its counts and record size).
    records : numpy.ndarray or bytes
        Integer records (packed here), raw records or raw bytes.
    mac_key : bytes, optional
        Shuffler-analyzer MAC key (>= 16 bytes) for a mixed batch's tag.

    Returns
    -------
    bytes
        Header, records and, for a mixed batch, the 32-byte tag.

    Raises
    ------
    TypeError
        If ``mac_key`` is not bytes.
    ValueError
        If the records do not match the header's count, a value does not fit a record,
        ``mac_key`` is shorter than 16 bytes or is given for a user batch.
    """
    header = _with_tag_flag(header, mac_key)
    body = _body(records, header.record_bytes, header.packed)
    if len(body) != header.body_bytes:
        unit = "bits" if header.packed else "bytes"
        raise ValueError(
            f"records hold {len(body)} bytes, header promises {header.n_records} x "
            f"{header.record_bytes} {unit} = {header.body_bytes} bytes"
        )
    head = header.pack()
    if not header.mixed:
        return head + body
    t = _tagger(mac_key)
    t.update(head)
    t.update(body)
    return head + body + t.digest()


def decode_batch(
    data: bytes | memoryview, mac_key: bytes | None = None
) -> tuple[Header, np.ndarray]:
    """Parse a whole batch from bytes; raises :class:`WireError` on a wrong length or tag.

    The tag of a mixed batch is verified (HMAC under ``mac_key`` if the header says keyed;
    a keyed batch without ``mac_key``, or an unkeyed one with it, is refused).

    Parameters
    ----------
    data : bytes or memoryview
        A whole batch.
    mac_key : bytes, optional
        The shuffler-analyzer MAC key of a keyed mixed batch.

    Returns
    -------
    tuple of (Header, numpy.ndarray)
        The header and its records (raw records; uint64 values for the bit-packed kinds).

    Raises
    ------
    WireError
        If the header does not parse, the length differs from the header's, the tag mode
        does not match ``mac_key`` or the tag does not verify.
    """
    h = Header.unpack(bytes(data[:HEADER_SIZE]))
    if len(data) != h.total_bytes:
        raise WireError(
            f"batch has {len(data)} bytes, header promises {HEADER_SIZE} + {h.body_bytes} "
            f"({h.n_records} x {h.record_bytes} {'bits' if h.packed else 'bytes'})"
            f"{' + 32 (tag)' if h.mixed else ''} = {h.total_bytes}"
        )
    end = HEADER_SIZE + h.body_bytes
    if h.mixed:
        _check_tag_mode(h, mac_key)
        t = _tagger(mac_key)
        t.update(bytes(data[:end]))
        if not hmac.compare_digest(t.digest(), bytes(data[end:])):
            raise WireError("mixed batch tag does not verify (altered after the shuffler)")
    if h.packed:
        return h, unpack_bits(memoryview(data)[HEADER_SIZE:end], h.record_bytes, h.n_records)
    rec = np.frombuffer(data, dtype=_record_dtype(h.record_bytes), offset=HEADER_SIZE,
                        count=h.n_records)
    return h, rec


def read_header(f: IO[bytes]) -> Header:
    """Read and validate the header of an open binary file.

    Parameters
    ----------
    f : binary file
        Positioned at the start of a batch.

    Returns
    -------
    Header
        The parsed header (the file is left at the first record).

    Raises
    ------
    WireError
        If the file holds fewer than 64 bytes or the header does not parse.
    """
    return Header.unpack(f.read(HEADER_SIZE))


def iter_records(
    f: IO[bytes], header: Header, chunk_records: int = 1 << 22, mac_key: bytes | None = None
) -> Iterator[np.ndarray]:
    """Yield the records after ``header`` in chunks of at most ``chunk_records``.

    Raw records for kinds 1-4; uint64 integers for the bit-packed kinds (chunks of a
    multiple of 8 records, so every chunk is whole bytes).

    On a mixed batch the tag is verified after the last record (with ``mac_key`` if the
    header says keyed): a consumer must not act on the records before the iterator is
    exhausted. Raises :class:`WireError` if the file ends early, holds trailing bytes or the
    tag does not verify.

    Parameters
    ----------
    f : binary file
        Positioned after the header (:func:`read_header`).
    header : Header
        The batch's header.
    chunk_records : int, default 2**22
        Most records per chunk, >= 1.
    mac_key : bytes, optional
        The shuffler-analyzer MAC key of a keyed mixed batch.

    Yields
    ------
    numpy.ndarray
        Chunks of records.

    Raises
    ------
    ValueError
        If ``chunk_records`` is not an integer >= 1.
    WireError
        As above, or if the tag mode does not match ``mac_key``.
    """
    if isinstance(chunk_records, bool) or not isinstance(chunk_records, int) or chunk_records < 1:
        raise ValueError(f"chunk_records must be an integer >= 1, got {chunk_records!r}")
    t = None
    if header.mixed:
        _check_tag_mode(header, mac_key)
        t = _tagger(mac_key)
        t.update(header.pack())
    left = header.n_records
    if header.packed:  # whole bytes per chunk: a multiple of 8 records (bits * 8 / 8)
        chunk_records = max(8, chunk_records - chunk_records % 8)
    while left:
        k = min(left, chunk_records)
        size = -(-k * header.record_bytes // 8) if header.packed else k * header.record_bytes
        buf = f.read(size)
        if len(buf) != size:
            raise WireError(
                f"batch truncated: expected {header.n_records} records "
                f"({header.body_bytes} body bytes), the file ends early"
            )
        if t is not None:
            t.update(buf)
        if header.packed:
            yield unpack_bits(buf, header.record_bytes, k)
        else:
            yield np.frombuffer(buf, dtype=_record_dtype(header.record_bytes))
        left -= k
    if t is not None:
        tag = f.read(TAG_SIZE)
        if len(tag) != TAG_SIZE:
            raise WireError("mixed batch truncated: the 32-byte tag is missing")
        if not hmac.compare_digest(t.digest(), tag):
            raise WireError("mixed batch tag does not verify (altered after the shuffler)")
    if f.read(1):
        raise WireError("trailing bytes after the last record")


class BatchWriter:
    """Write a batch in chunks: header first, then :meth:`write` calls; checks the count on close.

    A mixed batch gets its tag on :meth:`close` (HMAC under ``mac_key`` when given). Usable
    as a context manager over an open binary file.

    Parameters
    ----------
    f : binary file
        Open for writing; the header is written at once.
    header : Header
        The batch's header (the count :meth:`close` checks).
    mac_key : bytes, optional
        Shuffler-analyzer MAC key (>= 16 bytes) for a mixed batch's tag.

    Attributes
    ----------
    header : Header
        The header as written (flags bit 0 set when keyed).
    """

    def __init__(self, f: IO[bytes], header: Header, mac_key: bytes | None = None) -> None:
        self._f = f
        self.header = _with_tag_flag(header, mac_key)
        self._written = 0
        self._pending = np.zeros(0, dtype=np.uint64)  # bit-packed: < 8 records not yet written
        head = self.header.pack()
        self._tag = None
        if self.header.mixed:
            self._tag = _tagger(mac_key)
            self._tag.update(head)
        f.write(head)

    def _emit(self, body: bytes | memoryview) -> None:
        if self._tag is not None:
            self._tag.update(body)
        self._f.write(body)

    def _write_packed(self, records: np.ndarray | bytes | memoryview) -> None:
        v = np.asarray(records)
        if v.dtype.kind not in "ui":
            raise TypeError(f"a bit-packed batch takes integer records, got dtype {v.dtype}")
        self._written += v.size
        if self._written > self.header.n_records:
            raise ValueError(f"more than the {self.header.n_records} records the header promises")
        allv = np.concatenate([self._pending, v.ravel().astype(np.uint64)])
        cut = allv.size - allv.size % 8
        self._emit(pack_bits(allv[:cut], self.header.record_bytes))
        self._pending = allv[cut:]

    def write(self, records: np.ndarray | bytes | memoryview) -> None:
        """Append records: integers (packed here), raw records, or raw bytes (a C-contiguous
        memoryview is written without a copy).

        A bit-packed batch takes integer arrays only (any sizes; whole groups of 8 records
        are written at once, the rest on :meth:`close`).
        """
        if self.header.packed:
            self._write_packed(records)
            return
        body = _body(records, self.header.record_bytes)
        if len(body) % self.header.record_bytes:
            raise ValueError(f"not a whole number of {self.header.record_bytes}-byte records")
        self._written += len(body) // self.header.record_bytes
        if self._written > self.header.n_records:
            raise ValueError(f"more than the {self.header.n_records} records the header promises")
        self._emit(body)

    def close(self) -> None:
        """Check the count and write the tag of a mixed batch."""
        if self._written != self.header.n_records:
            raise ValueError(
                f"wrote {self._written} records, header promises {self.header.n_records}"
            )
        if self._pending.size:
            self._emit(pack_bits(self._pending, self.header.record_bytes))
            self._pending = self._pending[:0]
        if self._tag is not None:
            self._f.write(self._tag.digest())
            self._tag = None

    def __enter__(self) -> BatchWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
