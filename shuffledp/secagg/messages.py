"""Byte messages of the secure-aggregation rounds.

Every message is a 32-byte header followed by its payload; all integers little-endian::

    offset size field
    0      4    magic        b"SAGG"
    4      1    version      1
    5      1    round        0 advertise keys, 1 share keys, 2 masked input, 3 unmasking
                             (client to server); 16 + round for the server's broadcasts
    6      2    reserved     zero
    8      4    sender       client id, or 0xFFFFFFFF for the server
    12     4    length       payload bytes
    16     16   session      the run's 16-byte id (messages of another run are rejected)

:func:`parse` refuses a wrong magic, version, session or length, a non-zero reserved field
and a truncated or overlong buffer with :class:`MessageError`, naming what is wrong.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = b"SAGG"
VERSION = 1
HEADER = struct.Struct("<4sBBHII16s")
SERVER = 0xFFFFFFFF
MAX_PAYLOAD = 1 << 31


class MessageError(ValueError):
    """A malformed, misdirected or replayed secure-aggregation message."""


@dataclass(frozen=True)
class Message:
    """A parsed message: its round, sender and payload bytes."""

    round: int
    sender: int
    payload: bytes


def frame(round_: int, sender: int, session: bytes, payload: bytes) -> bytes:
    """Header + payload."""
    if len(payload) >= MAX_PAYLOAD:
        raise MessageError(f"payload of {len(payload)} bytes exceeds 2^31")
    return HEADER.pack(MAGIC, VERSION, round_, 0, sender, len(payload), session) + payload


def parse(data: bytes, session: bytes, *, round_: int) -> Message:
    """Check and split a message of round ``round_`` of this ``session``."""
    if len(data) < HEADER.size:
        raise MessageError(f"message of {len(data)} bytes is shorter than the 32-byte header")
    magic, version, rnd, reserved, sender, length, sess = HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION or reserved:
        raise MessageError(f"bad header (magic {magic!r}, version {version}, reserved "
                           f"{reserved})")
    if sess != session:
        raise MessageError("message of another session (replayed or misrouted)")
    if rnd != round_:
        raise MessageError(f"message of round {rnd} where round {round_} was expected")
    if len(data) != HEADER.size + length:
        raise MessageError(f"payload length {len(data) - HEADER.size} differs from the "
                           f"header's {length}")
    return Message(rnd, sender, bytes(data[HEADER.size:]))


__all__ = ["HEADER", "MAGIC", "Message", "MessageError", "SERVER", "VERSION", "frame", "parse"]
