"""Admission of devices to the shuffler: enrolment credentials and signed uploads.

Only enrolled devices upload, and each upload is signed by its device, so the service can
hold every device to one place per round (:mod:`shuffledp.serve.shuffler_service`) and a
party without a credential cannot take any place at all.

Enrolment. The operator runs ``shuffledp serve enrol`` against the service's data directory;
each device gets a credential file: its device id and the 32-byte key

    K_d = HMAC-SHA256(K_enrol, "shuffledp/3 device key" || 0x00 || device id)

where ``K_enrol`` (``DATA/devices/enrolment.key``, 0600) never leaves the service. The
service therefore stores no per-device secret: ``DATA/devices/registry.jsonl`` lists the
enrolled and revoked device ids (one JSON object per line, appended and fsynced; the service
reads it again when it changes, so enrolling or revoking needs no restart).

Signed upload. The device sends, with its batch ``B`` under report id ``rid`` of round ``R``:

- ``Content-Digest: sha-256=:<base64 SHA-256(B)>:`` ([RFC9530]_);
- ``Authorization: Shuffledp-Device id="<device id>", ts="<unix seconds>", mac="<hex>"``,
  with ``mac = HMAC-SHA256(K_d, M)`` over

  ``M = "shuffledp/3 upload" || 0x00 || R (16 bytes) || u16 len || device id || u16 len ||
  rid || ts (u64 big-endian) || u16 len || HPKE config id || SHA-256(B)``;

- optionally ``Shuffledp-Hpke-Config-Id: <id>`` (the analyzer key the batch was encrypted
  to, from ``GET /hpke_config``; covered by the MAC, empty if absent).

The service checks all of it from the headers *before* reading the body (401
``unauthorized`` with one message for every failure: unknown, revoked, wrong key or wrong
MAC), then checks the received body against the digest (400 ``digest_mismatch``). The
timestamp must lie within the replay window around the server's clock (400
``report_too_early`` / ``report_too_old``, after the MAC verified). A captured request
therefore cannot be replayed later than the window, cannot carry another body, another
report id or another round, and the report id cannot be taken over by another device.
The scheme name is case-insensitive ([RFC9110]_ Sec. 11.1), as is ``Bearer``.

Why a MAC and not a bearer token per device: the key never travels, so a TLS-terminating
proxy, a log or a captured request does not leak it, and the signature binds the credential
to this body, report id and round. Why not anonymous credentials (Privacy Pass,
[RFC9576]_): the shuffler already sees each device's network address, and it forgets which
device sent which batch when it mixes; what anonymous tokens would add is discussed in
``docs/threat_model.md``.

References
----------
.. [RFC2104] H. Krawczyk, M. Bellare, R. Canetti, "HMAC: Keyed-Hashing for Message
   Authentication", RFC 2104, 1997.
.. [RFC9530] R. Polli, L. Pardue, "Digest Fields", RFC 9530, 2024, Sec. 2 (Content-Digest).
.. [RFC9110] R. Fielding, M. Nottingham, J. Reschke, "HTTP Semantics", RFC 9110, 2022,
   Sec. 11 (HTTP authentication).
.. [RFC9576] A. Davidson, J. Iyengar, C. A. Wood, "The Privacy Pass Architecture", RFC 9576,
   2024.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shuffledp.safe_io import read_regular
from shuffledp.serve.common import create_durable, fsync_dir

DEVICE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
SCHEME = "Shuffledp-Device"
CREDENTIAL_FORMAT = "shuffledp-device-credential/1"
ENROLMENT_KEY_FORMAT = "shuffledp-enrolment-key/1"
KEY_LABEL = b"shuffledp/3 device key\x00"
UPLOAD_LABEL = b"shuffledp/3 upload\x00"
CONFIG_HEADER = "shuffledp-hpke-config-id"
KEY_BYTES = 32
#: default replay window (seconds either side of the server's clock)
REPLAY_WINDOW = 600.0
_CREDENTIAL_LIMIT = 4096


class AuthError(Exception):
    """An upload's credential refused: HTTP status, problem reason, detail."""

    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail = status, reason, detail


@dataclass(frozen=True)
class Credential:
    """A device's credential: its id and its 32-byte key (never printed).

    Parameters
    ----------
    device_id : str
        1 to 64 characters of ``[A-Za-z0-9_-]``.
    key : bytes
        K_d, the device's 32-byte HMAC key (:func:`device_key`).

    Raises
    ------
    ValueError
        A malformed ``device_id`` or a key that is not 32 bytes.
    """

    device_id: str
    key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.device_id, str) or not DEVICE_ID.fullmatch(self.device_id):
            raise ValueError(f"device_id must be 1 to 64 characters of [A-Za-z0-9_-], got "
                             f"device_id={str(self.device_id)[:80]!r}")
        if not isinstance(self.key, bytes) or len(self.key) != KEY_BYTES:
            raise ValueError(f"key must be {KEY_BYTES} bytes")

    def to_json(self) -> str:
        return json.dumps({"format": CREDENTIAL_FORMAT, "device": self.device_id,
                           "key": self.key.hex()}) + "\n"

    @classmethod
    def from_json(cls, text: str, what: str = "credential") -> Credential:
        """Parse a credential file; ValueError naming ``what`` and the problem."""
        try:
            d = json.loads(text)
        except ValueError:
            raise ValueError(f"{what}: not a device credential (not JSON)") from None
        if not isinstance(d, dict) or d.get("format") != CREDENTIAL_FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"{what}: not a device credential (format={got!r}, expected "
                             f"{CREDENTIAL_FORMAT!r}, written by `shuffledp serve enrol`)")
        try:
            key = bytes.fromhex(d["key"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{what}: key must be {2 * KEY_BYTES} hex digits") from None
        device = d.get("device")
        if not isinstance(device, str):
            raise ValueError(f"{what}: device must be a device id string, got "
                             f"device={str(device)[:80]!r}")
        try:
            return cls(device, key)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None

    @classmethod
    def load(cls, path: str | os.PathLike) -> Credential:
        """Read a credential file (a regular file of at most 4 KiB)."""
        text = read_regular(path, _CREDENTIAL_LIMIT, what="credential").decode(errors="replace")
        return cls.from_json(text, f"credential {os.fspath(path)}")


def device_key(enrolment_key: bytes, device_id: str) -> bytes:
    """K_d = HMAC-SHA256(K_enrol, label || device id) (module docstring; [RFC2104]_).

    Parameters
    ----------
    enrolment_key : bytes
        The service's enrolment key K_enrol.
    device_id : str
        The device's id.

    Returns
    -------
    bytes
        The device's 32-byte key.

    Raises
    ------
    TypeError
        ``enrolment_key`` is not bytes or ``device_id`` not a string.
    """
    if not isinstance(enrolment_key, (bytes, bytearray)) or not isinstance(device_id, str):
        raise TypeError(f"device_key needs bytes and a string, got "
                        f"{type(enrolment_key).__name__} and {type(device_id).__name__}")
    return hmac.new(enrolment_key, KEY_LABEL + device_id.encode(), hashlib.sha256).digest()


def _lp(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">H", len(raw)) + raw


def upload_message(round_id: bytes, device_id: str, report_id: str, timestamp: int,
                   config_id: str, body_digest: bytes) -> bytes:
    """The bytes a device MACs for one upload (module docstring, ``M``).

    Parameters
    ----------
    round_id : bytes
        The round's id.
    device_id, report_id : str
        The uploading device and the upload's report id.
    timestamp : int
        Unix seconds of the signature.
    config_id : str
        The HPKE config id the batch was encrypted to ("" for none).
    body_digest : bytes
        SHA-256 of the request body.

    Returns
    -------
    bytes
        The label, then the fields in this order, strings length-prefixed.

    Raises
    ------
    struct.error
        A string field longer than 65535 bytes, or a timestamp outside [0, 2^64).
    """
    return (UPLOAD_LABEL + bytes(round_id) + _lp(device_id) + _lp(report_id)
            + struct.pack(">Q", int(timestamp)) + _lp(config_id) + bytes(body_digest))


def content_digest(body: bytes) -> str:
    """The RFC 9530 ``Content-Digest`` value of ``body`` (SHA-256; [RFC9530]_ Sec. 2).

    Parameters
    ----------
    body : bytes
        The request body.

    Returns
    -------
    str
        ``sha-256=:<base64 digest>:``.

    Raises
    ------
    TypeError
        ``body`` is not bytes-like.
    """
    return f"sha-256=:{base64.b64encode(hashlib.sha256(body).digest()).decode()}:"


def parse_content_digest(value: str | None) -> bytes | None:
    """The SHA-256 of a ``Content-Digest`` header (None if absent or without sha-256).

    Parameters
    ----------
    value : str or None
        The header's value.

    Returns
    -------
    bytes or None
        The 32-byte digest, or None when the header is absent, has no ``sha-256`` member
        or that member is not 32 bytes of valid base64. Never raises for a malformed value.

    Raises
    ------
    AttributeError
        ``value`` is neither a string nor None.
    """
    if not value:
        return None
    for part in value.split(","):
        name, _, rest = part.strip().partition("=")
        if name.strip().lower() == "sha-256":
            rest = rest.strip()
            if len(rest) >= 2 and rest[0] == rest[-1] == ":":
                try:
                    raw = base64.b64decode(rest[1:-1], validate=True)
                except ValueError:
                    return None
                return raw if len(raw) == 32 else None
    return None


def sign_upload(credential: Credential, round_id: bytes, report_id: str, body: bytes, *,
                config_id: str = "", timestamp: int | None = None) -> dict[str, str]:
    """The request headers of a signed upload (``Authorization``, ``Content-Digest`` and, with
    ``config_id``, the HPKE config id).

    Parameters
    ----------
    credential : Credential
        The device's id and key.
    round_id : bytes
        The round's id.
    report_id : str
        The upload's report id.
    body : bytes
        The request body (the encoded batch).
    config_id : str, optional
        The HPKE config id the batch was encrypted to.
    timestamp : int, optional
        Unix seconds to sign (default: now).

    Returns
    -------
    dict of str to str
        ``authorization``, ``content-digest`` and, with ``config_id``, the config header.

    Raises
    ------
    struct.error
        A field too long for :func:`upload_message`.
    """
    ts = int(time.time()) if timestamp is None else int(timestamp)
    digest = hashlib.sha256(body).digest()
    mac = hmac.new(credential.key, upload_message(round_id, credential.device_id, report_id,
                                                  ts, config_id, digest),
                   hashlib.sha256).hexdigest()
    headers = {"authorization": f'{SCHEME} id="{credential.device_id}", ts="{ts}", mac="{mac}"',
               "content-digest": f"sha-256=:{base64.b64encode(digest).decode()}:"}
    if config_id:
        headers[CONFIG_HEADER] = config_id
    return headers


_PARAM = re.compile(r'\s*([A-Za-z]+)\s*=\s*"([^"]*)"\s*(?:,|$)')


def parse_authorization(value: str | None) -> tuple[str, int, bytes]:
    """(device id, timestamp, mac) of a ``Shuffledp-Device`` Authorization header; AuthError
    401 when it is missing or malformed.

    Parameters
    ----------
    value : str or None
        The ``Authorization`` header's value.

    Returns
    -------
    tuple of (str, int, bytes)
        The device id, the timestamp (unix seconds) and the 32-byte MAC.

    Raises
    ------
    AuthError
        401 ``unauthorized``: missing, another scheme, malformed parameters, a bad device
        id, timestamp or MAC.
    """
    if not value:
        raise AuthError(401, "unauthorized",
                        f"uploads need a device credential: Authorization: {SCHEME} id=..., "
                        "ts=..., mac=... (see `shuffledp serve enrol`)")
    scheme, _, rest = value.strip().partition(" ")
    if scheme.lower() != SCHEME.lower():
        raise AuthError(401, "unauthorized",
                        f"uploads need the {SCHEME} authorization scheme, got "
                        f"{scheme[:40]!r}")
    params: dict[str, str] = {}
    pos = 0
    rest = rest.strip()
    while pos < len(rest):
        m = _PARAM.match(rest, pos)
        if m is None:
            raise AuthError(401, "unauthorized", f"malformed {SCHEME} authorization parameters")
        params[m.group(1).lower()] = m.group(2)
        pos = m.end()
    dev, ts, mac = params.get("id", ""), params.get("ts", ""), params.get("mac", "")
    if not DEVICE_ID.fullmatch(dev):
        raise AuthError(401, "unauthorized",
                        f"device id must be 1 to 64 characters of [A-Za-z0-9_-], got {dev[:80]!r}")
    if not ts.isdigit() or len(ts) > 12:
        raise AuthError(401, "unauthorized", f"ts must be unix seconds, got {ts[:40]!r}")
    try:
        raw = bytes.fromhex(mac)
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise AuthError(401, "unauthorized", "mac must be 64 hex digits (HMAC-SHA256)")
    return dev, int(ts), raw


class DeviceRegistry:
    """The enrolment key and the enrolled / revoked device ids of one service (``DATA/devices``).

    Thread-safe; the registry file is read again (at most once a second) when its size or
    modification time changed, so ``shuffledp serve enrol`` / ``revoke`` take effect on a
    running service.

    Parameters
    ----------
    data_dir : str or os.PathLike
        The service's data directory; the registry lives in ``data_dir/devices`` (created,
        with a fresh enrolment key, if missing).

    Attributes
    ----------
    dir : pathlib.Path
        ``data_dir/devices``.
    path : pathlib.Path
        The append-only registry file (one JSON record per enrolment or revocation).

    Raises
    ------
    ValueError
        The enrolment key file is not an enrolment key.
    shuffledp.safe_io.UnsafeFileError
        The key file is not a regular file.
    """

    KEY_FILE = "enrolment.key"
    REGISTRY_FILE = "registry.jsonl"

    def __init__(self, data_dir: str | os.PathLike) -> None:
        self.dir = Path(data_dir) / "devices"
        self.dir.mkdir(parents=True, exist_ok=True)
        key_path = self.dir / self.KEY_FILE
        if not key_path.exists():
            text = json.dumps({"format": ENROLMENT_KEY_FORMAT, "key": os.urandom(32).hex()})
            try:
                create_durable(key_path, (text + "\n").encode())
            except FileExistsError:  # another process created it first
                pass
        raw = read_regular(key_path, 4096, what="enrolment key").decode(errors="replace")
        try:
            d = json.loads(raw)
            if d.get("format") != ENROLMENT_KEY_FORMAT:
                raise ValueError
            self._key = bytes.fromhex(d["key"])
            if len(self._key) != KEY_BYTES:
                raise ValueError
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ValueError(f"{key_path}: not an enrolment key ({ENROLMENT_KEY_FORMAT})"
                             ) from None
        self.path = self.dir / self.REGISTRY_FILE
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0
        self._active: set[str] = set()
        self._revoked: set[str] = set()
        self._reload(force=True)

    # ----- the registry file -----
    def _reload(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._checked < 1.0:
            return
        self._checked = now
        try:
            st = os.stat(self.path)
            stamp = (st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            stamp = (0, 0)
        if stamp == self._stamp:
            return
        active: set[str] = set()
        revoked: set[str] = set()
        if stamp != (0, 0):
            text = read_regular(self.path, 1 << 30, what="device registry").decode(
                errors="replace")
            for line in text.splitlines():
                try:
                    rec = json.loads(line)
                    dev, event = rec["device"], rec["event"]
                except (ValueError, KeyError, TypeError):
                    continue  # a line a crash cut short
                if event == "enrol":
                    active.add(dev)
                    revoked.discard(dev)
                elif event == "revoke":
                    active.discard(dev)
                    revoked.add(dev)
        self._active, self._revoked, self._stamp = active, revoked, stamp

    def _append(self, records: list[dict[str, Any]]) -> None:
        lines = "".join(json.dumps(r) + "\n" for r in records).encode()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND
                     | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":  # a line a crash cut short
                lines = b"\n" + lines
            view = memoryview(lines)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.dir)

    def enrol(self, device_ids: list[str]) -> list[Credential]:
        """Enrol devices (again: a revoked id becomes active); returns their credentials."""
        creds = [Credential(d, device_key(self._key, d)) for d in device_ids]
        t = int(time.time())
        with self._lock:
            self._append([{"device": c.device_id, "event": "enrol", "time": t} for c in creds])
            self._reload(force=True)
        return creds

    def revoke(self, device_ids: list[str]) -> None:
        """Revoke devices: their uploads are refused from now on (their accepted batches of
        an open round stay)."""
        for d in device_ids:
            if not DEVICE_ID.fullmatch(d):
                raise ValueError(f"device id must be 1 to 64 characters of [A-Za-z0-9_-], got "
                                 f"{d[:80]!r}")
        t = int(time.time())
        with self._lock:
            self._append([{"device": d, "event": "revoke", "time": t} for d in device_ids])
            self._reload(force=True)

    def enrolled(self) -> set[str]:
        """The device ids enrolled and not revoked."""
        with self._lock:
            self._reload()
            return set(self._active)

    def is_active(self, device_id: str) -> bool:
        with self._lock:
            self._reload()
            return device_id in self._active

    # ----- checking an upload -----
    def verify(self, headers: Any, *, round_id: bytes, report_id: str,
               config_id: str | None, window: float = REPLAY_WINDOW,
               now: float | None = None) -> tuple[str, bytes]:
        """Check an upload's credential from its headers; returns (device id, body SHA-256).

        ``config_id`` is this service's HPKE config id (None: not checked). Raises
        :class:`AuthError`.
        """
        dev, ts, mac = parse_authorization(headers.get("authorization"))
        digest = parse_content_digest(headers.get("content-digest"))
        if digest is None:
            raise AuthError(400, "malformed_request",
                            "a signed upload needs Content-Digest: sha-256=:<base64>: (RFC 9530)")
        sent_config = headers.get(CONFIG_HEADER, "")
        if len(sent_config) > 64:
            raise AuthError(400, "malformed_request", f"{CONFIG_HEADER} longer than 64 characters")
        want = hmac.new(device_key(self._key, dev),
                        upload_message(round_id, dev, report_id, ts, sent_config, digest),
                        hashlib.sha256).digest()
        if not (hmac.compare_digest(want, mac) and self.is_active(dev)):
            raise AuthError(401, "unauthorized",
                            f"credential check failed for device {dev!r} (not enrolled, "
                            "revoked, or a wrong key or signature)")
        now = time.time() if now is None else now
        if ts > now + window:
            raise AuthError(400, "report_too_early",
                            f"ts={ts} is {ts - now:.0f} s ahead of the server's clock (window "
                            f"{window:g} s); check the device's clock")
        if ts < now - window:
            raise AuthError(400, "report_too_old",
                            f"ts={ts} is {now - ts:.0f} s behind the server's clock (window "
                            f"{window:g} s); sign the request again")
        if config_id is not None and sent_config and sent_config != config_id:
            raise AuthError(400, "outdated_config",
                            f"the batch was encrypted to HPKE config {sent_config!r}; this "
                            f"round's is {config_id!r} (GET /hpke_config): encode it again")
        return dev, digest


__all__ = ["AuthError", "CONFIG_HEADER", "CREDENTIAL_FORMAT", "Credential", "DEVICE_ID",
           "DeviceRegistry", "REPLAY_WINDOW", "SCHEME", "content_digest", "device_key",
           "parse_authorization", "parse_content_digest", "sign_upload", "upload_message"]
