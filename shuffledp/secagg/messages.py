"""Byte messages of the secure-aggregation rounds, bound to everything a sum depends on.

Every message is a 48-byte header followed by its payload; all integers little-endian::

    offset size field
    0      4    magic        b"SAGG"
    4      1    version      2 (version 1 had no parameters in the header; it is refused)
    5      1    round        0 advertise keys, 1 share keys, 2 masked input, 3 unmasking
                             (client to server); 16 + round for the server's broadcasts;
                             32 for the server's hello (empty payload: the run's context)
    6      2    reserved     zero
    8      4    sender       client id, or 0xFFFFFFFF for the server
    12     4    length       payload bytes
    16     16   session      the run's 16-byte id (messages of another run are rejected)
    32     8    modulus      m of the sum
    40     4    vector       L, the length of every input vector
    44     4    threshold    t, the shares needed to reconstruct a secret

Bytes 16..47 are the run's :class:`Context`: every parameter the sum depends on. A party
checks the context of every message it receives against its own before it looks at the
payload, so a client started with ``--modulus 4294967295`` against a server of 4294967296
(or another threshold, or an input of another length) is refused in round 0, before any
input is used, and the refusal names the parameter, both values and the party: the server
rejects the client's message and records it (:attr:`SecAggServer.mismatched
<shuffledp.secagg.server.SecAggServer>`), the client refuses the server's hello or
broadcast. The packed context also replaces the bare session id in every key derivation,
commitment and AEAD's associated data (:mod:`.client`), so even a party that skipped the
header check could not combine messages of two parameter sets: the keys would differ.

:func:`parse` refuses a wrong magic, version, session, parameter or length, a non-zero
reserved field and a truncated or overlong buffer with :class:`MessageError` (the parameter
case with its subclass :class:`ParameterMismatch`), naming what is wrong.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = b"SAGG"
VERSION = 2
HEADER = struct.Struct("<4sBBHII16sQII")
CONTEXT = struct.Struct("<16sQII")
SERVER = 0xFFFFFFFF
MAX_PAYLOAD = 1 << 31
#: round byte of the server's hello (the run's context, empty payload)
HELLO = 32


class MessageError(ValueError):
    """A malformed, misdirected or replayed secure-aggregation message."""


class ParameterMismatch(MessageError):
    """A message of this session bound to another modulus, vector length or threshold.

    Attributes
    ----------
    field : str
        ``"modulus"``, ``"vector length"`` or ``"threshold"``.
    got : int
        The value in the message.
    want : int
        The receiving party's value.
    sender : int
        The sender field of the message (:data:`SERVER` for the server).
    """

    def __init__(self, field: str, got: int, want: int, sender: int) -> None:
        self.field, self.got, self.want, self.sender = field, got, want, sender
        who = "the server" if sender == SERVER else f"client {sender}"
        super().__init__(f"{who}'s message is bound to {field} {got}, this party's {field} "
                         f"is {want}")


@dataclass(frozen=True)
class Context:
    """What a run's sum depends on: its session id, modulus, vector length and threshold.

    Parameters
    ----------
    session : bytes
        16 random bytes drawn by the server.
    modulus : int
        m, 2 <= m <= 2^62.
    length : int
        L, the length of every input vector (0 <= L < 2^32).
    threshold : int
        t, the shares needed to reconstruct (1 <= t < 2^32).
    """

    session: bytes
    modulus: int
    length: int
    threshold: int

    def __post_init__(self) -> None:
        if not isinstance(self.session, (bytes, bytearray)) or len(self.session) != 16:
            raise ValueError(f"session must be 16 bytes, got {self.session!r:.60}")
        for name, top in (("modulus", 1 << 62), ("length", (1 << 32) - 1),
                          ("threshold", (1 << 32) - 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
                raise ValueError(f"{name} must be an integer in [0, {top}], got "
                                 f"{name}={value!r}")
        object.__setattr__(self, "session", bytes(self.session))

    def pack(self) -> bytes:
        """The 32 bytes the header carries (and key derivations bind)."""
        return CONTEXT.pack(self.session, self.modulus, self.length, self.threshold)

    @classmethod
    def unpack(cls, data: bytes) -> Context:
        return cls(*CONTEXT.unpack(bytes(data[:CONTEXT.size])))

    def differences(self, other: Context) -> list[tuple[str, int, int]]:
        """(field, other's value, this one's) for each parameter that differs."""
        return [(name, getattr(other, attr), getattr(self, attr))
                for name, attr in (("modulus", "modulus"), ("vector length", "length"),
                                   ("threshold", "threshold"))
                if getattr(other, attr) != getattr(self, attr)]


def _context(ctx: Context | bytes) -> bytes:
    if isinstance(ctx, Context):
        return ctx.pack()
    if isinstance(ctx, (bytes, bytearray)) and len(ctx) == CONTEXT.size:
        return bytes(ctx)
    raise MessageError(f"context must be a Context or its {CONTEXT.size} packed bytes, got "
                       f"{type(ctx).__name__}")


@dataclass(frozen=True)
class Message:
    """A parsed message: its round, sender and payload bytes.

    Attributes
    ----------
    round : int
        The round byte of the header (0-3 from a client, 16 + round or :data:`HELLO` from
        the server).
    sender : int
        The client id, or :data:`SERVER`.
    payload : bytes
        The bytes after the 48-byte header.
    """

    round: int
    sender: int
    payload: bytes


def frame(round_: int, sender: int, context: Context | bytes, payload: bytes) -> bytes:
    """Header (bound to ``context``) + payload.

    Parameters
    ----------
    round_ : int
        The round byte (see the module docstring).
    sender : int
        The sender's client id, or :data:`SERVER`.
    context : Context or bytes
        The run's context, or its 32 packed bytes.
    payload : bytes
        The message body, shorter than 2^31 bytes.

    Returns
    -------
    bytes
        The 48-byte header followed by ``payload``.

    Raises
    ------
    MessageError
        ``payload`` of 2^31 bytes or more, or ``context`` neither a :class:`Context` nor
        32 bytes.
    """
    if len(payload) >= MAX_PAYLOAD:
        raise MessageError(f"payload of {len(payload)} bytes exceeds 2^31")
    ctx = _context(context)
    return (HEADER.pack(MAGIC, VERSION, round_, 0, sender, len(payload), ctx[:16],
                        *CONTEXT.unpack(ctx)[1:]) + payload)


def context_of(data: bytes) -> Context:
    """The context in a message's header (checked for magic and version only).

    Parameters
    ----------
    data : bytes
        A framed message (at least its 48-byte header).

    Returns
    -------
    Context
        The session, modulus, vector length and threshold the header carries.

    Raises
    ------
    MessageError
        Shorter than the header, another magic or version, or a context out of range.
    """
    if len(data) < HEADER.size:
        raise MessageError(f"message of {len(data)} bytes is shorter than the "
                           f"{HEADER.size}-byte header")
    magic, version, *_ = HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise MessageError(f"not a version-{VERSION} secure-aggregation message (magic "
                           f"{magic!r}, version {version})")
    try:
        return Context.unpack(data[16:HEADER.size])
    except ValueError as e:
        raise MessageError(f"bad context in the header: {e}") from None


def hello(context: Context) -> bytes:
    """The server's hello: a header carrying the run's context, no payload.

    Parameters
    ----------
    context : Context
        The run's context.

    Returns
    -------
    bytes
        The 48-byte header with round byte :data:`HELLO` and sender :data:`SERVER`.

    Raises
    ------
    MessageError
        ``context`` is not a :class:`Context` (or its 32 packed bytes).
    """
    return frame(HELLO, SERVER, context, b"")


def parse(data: bytes, context: Context | bytes, *, round_: int) -> Message:
    """Check and split a message of round ``round_`` of the run ``context``.

    The context is checked before anything else of the message is used: another session
    raises :class:`MessageError`, the same session with another modulus, vector length or
    threshold raises :class:`ParameterMismatch` naming the field and both values.

    Parameters
    ----------
    data : bytes
        The received message.
    context : Context or bytes
        This party's context (or its 32 packed bytes).
    round_ : int
        The round byte expected.

    Returns
    -------
    Message
        The round, sender and payload.

    Raises
    ------
    ParameterMismatch
        Same session, another modulus, vector length or threshold.
    MessageError
        Truncated, wrong magic, version or reserved field, another session, another round,
        a payload length that differs from the header's, or a bad ``context``.
    """
    ctx = _context(context)
    if len(data) < HEADER.size:
        raise MessageError(f"message of {len(data)} bytes is shorter than the "
                           f"{HEADER.size}-byte header")
    magic, version, rnd, reserved, sender, length, sess, m, vlen, t = HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION or reserved:
        raise MessageError(f"bad header (magic {magic!r}, version {version}, reserved "
                           f"{reserved}; this party speaks version {VERSION})")
    if sess != ctx[:16]:
        raise MessageError("message of another session (replayed or misrouted)")
    mine = Context.unpack(ctx)
    for field, got, want in mine.differences(Context(sess, m, vlen, t)):
        raise ParameterMismatch(field, got, want, sender)
    if rnd != round_:
        raise MessageError(f"message of round {rnd} where round {round_} was expected")
    if len(data) != HEADER.size + length:
        raise MessageError(f"payload length {len(data) - HEADER.size} differs from the "
                           f"header's {length}")
    return Message(rnd, sender, bytes(data[HEADER.size:]))


__all__ = ["CONTEXT", "HEADER", "HELLO", "MAGIC", "Context", "Message", "MessageError",
           "ParameterMismatch", "SERVER", "VERSION", "context_of", "frame", "hello", "parse"]
