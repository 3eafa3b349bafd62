"""What both services share: problem details, durable files, bounded bodies, the listener.

Needs the optional extra ``shuffledp[serve]`` (Starlette, uvicorn, httpx); nothing in the core
package imports this module.

- Every refusal is an RFC 9457 problem-details object ([RFC9457]_) served as
  ``application/problem+json`` with ``type`` = ``urn:shuffledp:problem:<reason>``, a
  ``title``, the HTTP ``status`` and a ``detail`` naming what was wrong, in the style of the
  DAP errors ([DAP]_ Sec. 3.2), which use ``urn:ietf:params:ppm:dap:error:<type>``.
- :func:`durable_write`: temporary file, ``fsync``, rename, ``fsync`` of the directory: once
  it returns, the file survives a crash of the process or of the machine (on a file system
  that honours ``fsync``).
- :func:`read_body`: reads a request body up to a byte limit and within a deadline, so an
  oversize body is refused (413) before it is buffered and a client that trickles its body
  cannot hold a connection forever (408).
- :func:`serve`: binds the listening socket first (port 0 picks a free port), writes
  ``listen.json`` (the URL) atomically into the data directory, then runs uvicorn on it.

References
----------
.. [RFC9457] M. Nottingham, E. Wilde, S. Dalal, "Problem Details for HTTP APIs", RFC 9457,
   2023, Sec. 3 (members), 3.1.1 (``type``).
.. [DAP] T. Geoghegan, C. Patton, B. Pitman, E. Rescorla, C. A. Wood, "Distributed
   Aggregation Protocol for Privacy Preserving Measurement", draft-ietf-ppm-dap-16, 2025,
   Sec. 3.2 (errors), 4.5.1 (HPKE configuration), 4.5.2 (upload request).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
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
    "bad_report_id": "Report id must be 16 to 64 characters of [A-Za-z0-9_-]",
    "report_id_conflict": "Another batch was already accepted under this report id",
    "body_too_large": "Request body larger than this round allows",
    "request_timeout": "Request body not received within the deadline",
    "unsupported_media_type": "Body must be application/octet-stream",
    "unauthorized": "Missing or wrong bearer token",
    "unavailable": "The service cannot accept this now",
    "storage_failure": "The batch could not be stored durably",
    "not_found": "No such resource",
    "wrong_sender": "The sender in the message differs from the client id in the URL",
    "wrong_phase": "The server is not in this round",
    "rejected_message": "The message was rejected",
    "too_late": "The round's deadline has passed",
}


def problem(status: int, reason: str, detail: str, title: str | None = None):
    """An RFC 9457 problem-details response (``application/problem+json``)."""
    from starlette.responses import Response

    body = {"type": PROBLEM_TYPE + reason, "title": title or TITLES.get(reason, reason),
            "status": status, "detail": detail}
    return Response(json.dumps(body), status_code=status, media_type=PROBLEM_MEDIA)


class BodyError(Exception):
    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail = status, reason, detail


async def read_body(request: Any, limit: int, timeout: float) -> bytes:
    """The request body, at most ``limit`` bytes, received within ``timeout`` seconds.

    Raises :class:`BodyError` (413 ``body_too_large`` as soon as the declared or received
    length exceeds the limit; 408 ``request_timeout`` past the deadline).
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            n = int(declared)
        except ValueError:
            raise BodyError(400, "malformed", f"Content-Length {declared!r}") from None
        if n > limit:
            raise BodyError(413, "body_too_large",
                            f"Content-Length {n} > {limit} bytes allowed for this round")

    async def collect() -> bytes:
        buf = bytearray()
        async for chunk in request.stream():
            buf += chunk
            if len(buf) > limit:
                raise BodyError(413, "body_too_large",
                                f"more than {limit} bytes received (the limit of this round)")
        return bytes(buf)

    try:
        return await asyncio.wait_for(collect(), timeout)
    except TimeoutError:
        raise BodyError(408, "request_timeout",
                        f"the body did not arrive within {timeout:g} s") from None


def durable_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that it survives a crash once this returns.

    A fresh temporary file (``O_EXCL``) next to ``path``, fsynced, renamed over ``path``, then
    the directory fsynced (the rename itself is durable only after that).
    """
    folder = path.parent
    tmp = folder / f".{path.name}.{os.urandom(6).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(folder)


def fsync_dir(folder: Path) -> None:
    dfd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (port 0 = any free port) -> (host, port); ValueError naming the value."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--listen must be HOST:PORT (PORT 0..65535), got {text!r}")
    return host.strip("[]"), int(port)


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def serve(app: Any, listen: str, data_dir: Path, *, limit_concurrency: int = 2048,
          keep_alive: float = 5.0, announce=print) -> None:
    """Bind ``listen``, write ``data_dir/listen.json`` ({"url": ...}), run uvicorn until
    SIGINT/SIGTERM."""
    import uvicorn


    host, port = parse_listen(listen)
    sock = bind(host, port)
    real = sock.getsockname()[1]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{real}"
    config = uvicorn.Config(app, log_level="warning", timeout_keep_alive=keep_alive,
                            limit_concurrency=limit_concurrency, access_log=False,
                            timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    if hasattr(app, "state"):  # lets an app end the service (one secure-aggregation run)
        app.state.uvicorn_server = server
    write_atomic(data_dir / "listen.json", (json.dumps({"url": url, "pid": os.getpid()})
                                            + "\n").encode())
    announce(f"listening on {url}")
    server.run(sockets=[sock])
