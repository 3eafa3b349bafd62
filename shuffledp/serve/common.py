"""What both services share: problem details, durable files, bounded bodies, rate limits, logs.

Needs the optional extra ``shuffledp[serve]`` (Starlette, uvicorn, httpx); nothing in the core
package imports this module.

- Every refusal is an RFC 9457 problem-details object ([RFC9457]_) served as
  ``application/problem+json`` with ``type`` = ``urn:shuffledp:problem:<reason>``, a
  ``title``, the HTTP ``status`` and a ``detail`` naming what was wrong, in the style of the
  DAP errors ([DAP]_ Sec. 3.2), which use ``urn:ietf:params:ppm:dap:error:<type>``. That
  includes the answers the HTTP layer gives before the application sees a request (a
  malformed request head, a connection refused or timed out: :mod:`shuffledp.serve.transport`)
  and an unexpected error (500, logged without the request's headers or body).
- :func:`durable_write` / :func:`create_durable`: temporary file, ``fsync``, rename (or link,
  which never replaces), ``fsync`` of the directory: once they return, the file survives a
  crash of the process or of the machine (on a file system that honours ``fsync``).
- :func:`read_body` reads a small request body up to a byte limit and within a deadline;
  :func:`receive_to_file` streams a large one to a file instead of memory, with the same
  limits, hashing it on the way (413 as soon as the declared or received length exceeds the
  limit, 408 past the deadline, 507 when the disk is full).
- :class:`TokenBuckets`: the per-client rate limit (429 with ``Retry-After``).
- :func:`guard`: the ASGI wrapper every service runs behind: the per-client rate limit, a
  structured access log (one JSON object per request; never a header value, a token, a
  credential or a body) and the last-resort 500 problem.

References
----------
.. [RFC9457] Nottingham et al. (2023), "Problem Details for HTTP APIs", Sec. 3 (members), 3.1.1
   (``type``) -- full entry in docs/references.md.
.. [RFC6585] M. Nottingham, R. Fielding, "Additional HTTP Status Codes", RFC 6585, 2012,
   Sec. 4 (429 Too Many Requests).
.. [RFC4918] L. Dusseault, "HTTP Extensions for Web Distributed Authoring and Versioning
   (WebDAV)", RFC 4918, 2007, Sec. 11.5 (507 Insufficient Storage).
.. [DAP] Geoghegan et al. (2025), "Distributed Aggregation Protocol", Sec. 3.2 (errors) -- full
   entry in docs/references.md.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import logging
import math
import os
import time
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any

from shuffledp.safe_io import write_atomic

PROBLEM_TYPE = "urn:shuffledp:problem:"
PROBLEM_MEDIA = "application/problem+json"

#: titles of the service-level refusals (the batch-level reasons are the shuffler's
#: :data:`shuffledp.protocol.shuffler.REJECT_REASONS`)
TITLES = {
    "unknown_round": "No such round on this server",
    "round_closed": "The round is closed",
    "closing": "The round is being closed",
    "too_few_batches": "Too few batches to close the round",
    "bad_report_id": "Report id must be 16 to 64 characters of [A-Za-z0-9_-]",
    "report_id_conflict": "Another batch was already accepted under this report id",
    "device_already_uploaded": "This device already holds a place in this round",
    "upload_in_progress": "This device has too many uploads in progress",
    "body_too_large": "Request body larger than this round allows",
    "request_timeout": "Request not received within the deadline",
    "unsupported_media_type": "Body must be application/octet-stream",
    "unauthorized": "Missing or wrong credential",
    "forbidden": "A client certificate is required",
    "rate_limited": "Too many requests from this client",
    "report_too_early": "The report's timestamp is in the future",
    "report_too_old": "The report's timestamp is older than the replay window",
    "outdated_config": "The batch was encrypted to another analyzer key",
    "digest_mismatch": "The body does not match its Content-Digest",
    "unavailable": "The service cannot accept this now",
    "insufficient_storage": "The server's disk is full; retry later",
    "storage_failure": "The batch could not be stored durably",
    "internal_error": "Unexpected server error",
    "malformed_request": "The HTTP request could not be parsed",
    "not_found": "No such resource",
    "method_not_allowed": "Method not allowed on this resource",
    "wrong_sender": "The sender in the message differs from the client id in the URL",
    "wrong_phase": "The server is not in this round",
    "rejected_message": "The message was rejected",
    "too_late": "The round's deadline has passed",
    "client_disconnected": "The client closed the connection before the body ended",
}

#: errno values that mean "no space": the disk or the quota is full (507, retryable)
NO_SPACE = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})
#: seconds a client is told to wait after a 507 (``Retry-After``)
STORAGE_RETRY_AFTER = 5

log = logging.getLogger("shuffledp.serve")
access_log = logging.getLogger("shuffledp.access")


def problem_body(status: int, reason: str, detail: str, title: str | None = None) -> bytes:
    """The JSON bytes of an RFC 9457 problem-details object ([RFC9457]_ Sec. 3).

    Parameters
    ----------
    status : int
        The HTTP status.
    reason : str
        The problem type's last part (``urn:...:error:<reason>``).
    detail : str
        What went wrong, for a person.
    title : str, optional
        Default: the reason's title in :data:`TITLES` (else the reason).

    Returns
    -------
    bytes
        ``{"type", "title", "status", "detail"}`` as JSON.

    Raises
    ------
    TypeError
        ``reason`` is not a string.
    """
    return json.dumps({"type": PROBLEM_TYPE + reason, "title": title or TITLES.get(reason, reason),
                       "status": status, "detail": detail}).encode()


def problem(status: int, reason: str, detail: str, title: str | None = None, *,
            headers: dict[str, str] | None = None, close: bool = False):
    """An RFC 9457 problem-details response (``application/problem+json``).

    Parameters
    ----------
    status : int
        The HTTP status.
    reason : str
        The problem type's last part (``urn:...:error:<reason>``).
    detail : str
        What went wrong, for a person.
    title : str, optional
        Default: the reason's title in :data:`TITLES` (else the reason).
    headers : dict, optional
        Extra response headers (``Retry-After``, ``WWW-Authenticate``).
    close : bool
        Ask for the connection to be closed after the answer (``Connection: close``): for a
        refusal sent before the request body was read, so the unread body cannot keep the
        connection busy.

    Returns
    -------
    starlette.responses.Response
        The answer, ``application/problem+json``.

    Raises
    ------
    TypeError
        ``reason`` is not a string.
    """
    from starlette.responses import Response

    extra = dict(headers or {})
    if close:
        extra["connection"] = "close"
    return Response(problem_body(status, reason, detail, title), status_code=status,
                    media_type=PROBLEM_MEDIA, headers=extra)


class ProblemError(Exception):
    """A refusal decided while handling a request: HTTP status, problem reason, detail and an
    optional ``Retry-After`` (seconds) for a refusal the client should retry."""

    def __init__(self, status: int, reason: str, detail: str,
                 retry_after: int | None = None) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail = status, reason, detail
        self.retry_after = retry_after

    def response(self, close: bool | None = None):
        """The problem response (``close`` defaults to True for 408 and 413, whose request
        body was not read to its end)."""
        headers = {"retry-after": str(self.retry_after)} if self.retry_after else None
        return problem(self.status, self.reason, self.detail, headers=headers,
                       close=self.status in (408, 413) if close is None else close)


#: the name the body readers raise (one class: every refusal carries a problem)
BodyError = ProblemError


def declared_length(request: Any, limit: int) -> int | None:
    """The request's ``Content-Length`` (None if absent); :class:`ProblemError` 400 if it is not a
    number, 413 if it exceeds ``limit``."""
    declared = request.headers.get("content-length")
    if declared is None:
        return None
    try:
        n = int(declared)
    except ValueError:
        raise ProblemError(400, "malformed_request", f"Content-Length {declared[:40]!r}") from None
    if n < 0:
        raise ProblemError(400, "malformed_request", f"Content-Length {n}")
    if n > limit:
        raise ProblemError(413, "body_too_large",
                        f"Content-Length {n} > {limit} bytes allowed for this round")
    return n


async def _stream(request: Any):
    """The request body's chunks; a client that goes away is a :class:`ProblemError` (its
    answer goes nowhere), not an unexpected error."""
    from starlette.requests import ClientDisconnect

    try:
        async for chunk in request.stream():
            yield chunk
    except ClientDisconnect:
        raise ProblemError(400, "client_disconnected", "the connection closed before the "
                           "body ended") from None


async def read_body(request: Any, limit: int, timeout: float) -> bytes:
    """The request body, at most ``limit`` bytes, received within ``timeout`` seconds.

    For small bodies (the secure-aggregation messages); a shuffler batch streams to disk
    (:func:`receive_to_file`). Raises :class:`ProblemError` (413 ``body_too_large`` as soon as
    the declared or received length exceeds the limit; 408 ``request_timeout`` past the
    deadline).

    Parameters
    ----------
    request : starlette.requests.Request
        The request whose body is read.
    limit : int
        The most bytes accepted.
    timeout : float
        Seconds for the whole body.

    Returns
    -------
    bytes
        The body.

    Raises
    ------
    ProblemError
        413 ``body_too_large``, 408 ``request_timeout``, 400 for a malformed
        ``Content-Length`` or ``client_disconnected``.
    """
    declared_length(request, limit)

    async def collect() -> bytes:
        buf = bytearray()
        async for chunk in _stream(request):
            buf += chunk
            if len(buf) > limit:
                raise ProblemError(413, "body_too_large",
                                f"more than {limit} bytes received (the limit of this round)")
        return bytes(buf)

    try:
        return await asyncio.wait_for(collect(), timeout)
    except TimeoutError:
        raise ProblemError(408, "request_timeout",
                        f"the body did not arrive within {timeout:g} s") from None


async def receive_to_file(request: Any, fd: int, limit: int, timeout: float) -> tuple[int, bytes]:
    """Stream the request body into the open file ``fd``; returns (bytes, SHA-256 digest).

    Memory stays at one received chunk (uvicorn's flow control pauses the socket above 64 KiB)
    whatever the body size or the number of concurrent uploads. Raises :class:`ProblemError`:
    413 past ``limit`` bytes, 408 past ``timeout`` seconds, 507 ``insufficient_storage`` when
    the disk is full (retryable), 500 ``storage_failure`` for another write error. The file
    is neither synced nor closed here.

    Parameters
    ----------
    request : starlette.requests.Request
        The request whose body is streamed.
    fd : int
        An open file descriptor, written from its current offset.
    limit : int
        The most bytes accepted.
    timeout : float
        Seconds for the whole body.

    Returns
    -------
    tuple of (int, bytes)
        The bytes written and their SHA-256 digest.

    Raises
    ------
    ProblemError
        413, 408, 507, 500 as above; 400 for a malformed ``Content-Length`` or a client
        that disconnected.
    """
    declared_length(request, limit)
    h = hashlib.sha256()
    n = 0

    async def collect() -> None:
        nonlocal n
        async for chunk in _stream(request):
            n += len(chunk)
            if n > limit:
                raise ProblemError(413, "body_too_large",
                                f"more than {limit} bytes received (the limit of this round)")
            h.update(chunk)
            view = memoryview(chunk)
            try:
                while view:
                    view = view[os.write(fd, view):]
            except OSError as e:
                raise storage_error(e) from None

    try:
        await asyncio.wait_for(collect(), timeout)
    except TimeoutError:
        raise ProblemError(408, "request_timeout",
                        f"the body did not arrive within {timeout:g} s") from None
    return n, h.digest()


def storage_error(e: OSError) -> ProblemError:
    """507 ``insufficient_storage`` (retryable, ``Retry-After``) for a full disk or quota,
    500 ``storage_failure`` for any other write error ([RFC4918]_ Sec. 11.5).

    Parameters
    ----------
    e : OSError
        The failed write's error.

    Returns
    -------
    ProblemError
        The problem to answer with (returned, not raised), with ``Retry-After``.

    Raises
    ------
    AttributeError
        ``e`` is not an OSError.
    """
    if e.errno is not None and e.errno in NO_SPACE:
        return ProblemError(507, "insufficient_storage",
                         f"the server's disk is full ({os.strerror(e.errno)}); nothing was "
                         f"stored, retry the same request later", STORAGE_RETRY_AFTER)
    return ProblemError(500, "storage_failure",
                     f"the batch could not be stored ({e.strerror or type(e).__name__}); "
                     "nothing was stored, retry the same request later", STORAGE_RETRY_AFTER)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def durable_write(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` so that it survives a crash once this returns.

    :func:`shuffledp.safe_io.write_atomic` with ``durable=True``: a fresh temporary file
    (``O_EXCL``) next to ``path``, fsynced, renamed over ``path``, then the directory fsynced
    (the rename itself is durable only after that). On any error the
    temporary file is removed and ``path`` is unchanged.

    Parameters
    ----------
    path : pathlib.Path
        The file to write or replace.
    data : bytes
        Its new contents.
    mode : int, optional
        The permission bits of a new file (default 0o644).

    Raises
    ------
    OSError
        The write, the sync or the rename failed (``path`` unchanged).
    """
    write_atomic(path, data, mode=mode, durable=True)


def create_durable(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Create ``path`` (never replacing an existing file) durably, with ``mode`` from the start.

    For keys and tokens: a temporary file created ``O_EXCL`` with ``mode`` (0600: never
    readable by others, not even for an instant), written and fsynced, then hard-linked to
    ``path`` (``FileExistsError`` if it exists: a key is never overwritten) and the directory
    fsynced. A crash leaves either no ``path`` or the complete file, never a short key.

    Parameters
    ----------
    path : pathlib.Path
        The file to create.
    data : bytes
        Its contents.
    mode : int, optional
        Its permission bits (default 0o600).

    Raises
    ------
    FileExistsError
        ``path`` exists (it is left as it was).
    OSError
        Another write, sync or link failure (no ``path`` is created).
    """
    folder = Path(path).parent
    tmp = folder / f".{Path(path).name}.{os.urandom(6).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        os.fchmod(fd, mode)
        _write_all(fd, data)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.link(tmp, path)
    finally:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)
    fsync_dir(folder)


def fsync_dir(folder: Path) -> None:
    """fsync a directory (makes a create, rename or unlink in it durable).

    Parameters
    ----------
    folder : pathlib.Path
        The directory.

    Raises
    ------
    OSError
        It cannot be opened or synced.
    """
    dfd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class TokenBuckets:
    """A token bucket per key (client address or device id): ``rate`` per second, ``burst`` at
    most.

    At most ``max_keys`` buckets are kept; when more keys are seen, the least recently used
    bucket is forgotten (it was refilled by then unless the table is flooded, and a flood of
    fresh keys then gets fresh buckets, each still bounded by ``burst``).

    Parameters
    ----------
    rate : float
        Tokens added per second, > 0.
    burst : float
        The most tokens a bucket holds, >= 1.
    max_keys : int, optional
        The most buckets kept (default 100,000).

    Raises
    ------
    ValueError
        ``rate`` not positive and finite, or ``burst`` < 1 or not finite.
    """

    def __init__(self, rate: float, burst: float, max_keys: int = 100_000) -> None:
        if not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"rate must be a positive number, got rate={rate!r}")
        if not (burst >= 1 and math.isfinite(burst)):
            raise ValueError(f"burst must be >= 1, got burst={burst!r}")
        self.rate, self.burst, self.max_keys = float(rate), float(burst), int(max_keys)
        self._b: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, key: str, cost: float = 1.0, now: float | None = None) -> float:
        """Spend ``cost`` tokens of ``key``'s bucket: 0.0 if allowed, else the seconds to wait."""
        now = time.monotonic() if now is None else now
        tokens, last = self._b.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        wait = 0.0
        if tokens >= cost:
            tokens -= cost
        else:
            wait = (cost - tokens) / self.rate
        self._b[key] = (tokens, now)
        while len(self._b) > self.max_keys:
            self._b.popitem(last=False)
        return wait


def client_host(scope: dict) -> str:
    """The peer address of the connection (not a forwarded header: see the README)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def guard(app: Any, *, rate: float | None = None, burst: float | None = None,
          counters: Counter | None = None):
    """Wrap an ASGI ``app``: per-client rate limit, access log, last-resort problem.

    Parameters
    ----------
    rate, burst : float, optional
        Requests per second and burst allowed per client address (429 ``rate_limited`` with
        ``Retry-After`` beyond); ``rate=None`` disables the limit, ``burst=None`` with a rate
        allows ``max(1, rate)`` (one second's worth).
    counters : collections.Counter, optional
        Counts refusals by reason (for the status resource and the benchmarks).

    Every request is logged to the ``shuffledp.access`` logger as one JSON object: time,
    client address, method, path, status, problem reason, device id (once authenticated),
    TLS version, bytes sent and duration. Header values (tokens, credentials), query
    strings and bodies are never logged.

    Returns
    -------
    callable
        The wrapped ASGI application.

    Raises
    ------
    ValueError
        ``rate`` not positive and finite, or ``burst`` < 1 (:class:`TokenBuckets`).
    """
    buckets = None
    if rate is not None:
        # a rate without a burst allows one second's worth (before: TypeError from None >= 1)
        burst = max(1.0, float(rate)) if burst is None else burst
        buckets = TokenBuckets(rate, burst)
    counters = counters if counters is not None else Counter()

    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        t0 = time.monotonic()
        info: dict[str, Any] = {"status": None, "bytes": 0, "problem": None, "ptype": False}
        buf = bytearray()

        async def send_and_record(message):
            if message["type"] == "http.response.start":
                info["status"] = message["status"]
                for k, v in message.get("headers", []):
                    if k.lower() == b"content-type" and v.startswith(PROBLEM_MEDIA.encode()):
                        info["ptype"] = True
            elif message["type"] == "http.response.body":
                body = message.get("body", b"")
                info["bytes"] += len(body)
                if info["ptype"] and len(buf) < 4096:
                    buf.extend(body[:4096])
            await send(message)

        host = client_host(scope)
        wait = buckets.take(host) if buckets is not None else 0.0
        try:
            if wait > 0:
                counters["rate_limited"] += 1
                resp = problem(429, "rate_limited",
                               f"more than {rate:g} requests per second (burst {burst:g}) "
                               f"from {host}; retry after {math.ceil(wait)} s",
                               headers={"retry-after": str(max(1, math.ceil(wait)))},
                               close=True)
                await resp(scope, receive, send_and_record)
            else:
                await app(scope, receive, send_and_record)
        except Exception:
            log.exception("unexpected error in %s %s", scope.get("method"), scope.get("path"))
            if info["status"] is None:
                resp = problem(500, "internal_error",
                               "unexpected server error (logged); retry later")
                await resp(scope, receive, send_and_record)
        finally:
            if info["ptype"]:
                try:
                    reason = json.loads(bytes(buf))["type"].rsplit(":", 1)[-1]
                except (ValueError, KeyError, TypeError, AttributeError):
                    reason = "unknown"
                info["problem"] = reason
                counters[reason] += 1
            if access_log.isEnabledFor(logging.INFO):
                state = scope.get("state") or {}
                tls = (scope.get("extensions") or {}).get("tls") or {}
                access_log.info(json.dumps({
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "client": host, "method": scope.get("method"), "path": scope.get("path"),
                    "status": info["status"], "problem": info["problem"],
                    "device": state.get("device"), "tls": tls.get("tls_version"),
                    "bytes": info["bytes"], "ms": round(1000 * (time.monotonic() - t0), 1)}))

    return wrapped


def exception_handlers() -> dict:
    """Starlette handlers turning its own 404 / 405 / unexpected errors into problems.

    Returns
    -------
    dict
        Status code -> async handler, for Starlette's ``exception_handlers=``.
    """

    async def not_found(request, exc):
        code = getattr(exc, "status_code", 404)
        reason = {404: "not_found", 405: "method_not_allowed"}.get(code, "unavailable")
        return problem(code, reason, f"{request.method} {request.url.path}")

    async def internal(request, exc):  # logged by :func:`guard`, which sees it re-raised
        return problem(500, "internal_error", "unexpected server error (logged); retry later")

    return {404: not_found, 405: not_found, 500: internal}


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (port 0 = any free port) -> (host, port); ValueError naming the value.

    Parameters
    ----------
    text : str
        ``HOST:PORT``; an IPv6 host may be bracketed (``[::1]:8443``).

    Returns
    -------
    tuple of (str, int)
        The host (brackets removed) and the port.

    Raises
    ------
    ValueError
        Not ``HOST:PORT`` with a port in 0..65535.
    """
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--listen must be HOST:PORT (PORT 0..65535), got {text!r}")
    return host.strip("[]"), int(port)


def retry_after(resp: Any, default: float) -> float:
    """Seconds from a response's ``Retry-After`` (delta-seconds form), else ``default``."""
    value = resp.headers.get("retry-after", "")
    try:
        return min(max(float(value), 0.0), 300.0)
    except ValueError:
        return default


__all__ = ["BodyError", "PROBLEM_MEDIA", "ProblemError", "PROBLEM_TYPE", "TITLES", "TokenBuckets",
           "create_durable", "durable_write", "exception_handlers", "fsync_dir", "guard",
           "parse_listen", "problem", "problem_body", "read_body", "receive_to_file",
           "storage_error"]
