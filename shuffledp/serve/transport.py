"""Connections of the services: admitted at accept time, bounded in number and in time, TLS 1.3.

uvicorn parses HTTP; this module decides which TCP connections it gets and for how long, so
that idle or slow clients cannot exhaust the server ([Slowloris]_):

- **Admission at accept time, with eviction of waiting connections.** Every accepted TCP
  connection is counted (before any TLS handshake or byte) per client address and in total.
  A new connection beyond ``max_per_client`` for its address, or beyond ``max_connections``
  in total, first *evicts* a connection (of that address, then of anyone) that is only
  waiting -- in its TLS handshake, before its first request, between requests, or in a
  request head that has not completed -- and whose client has sent nothing the server has
  not read yet (peeked on the socket); it is refused only when none is waiting (503 problem,
  then closed). The victim is the oldest connection quiet for half a second, else the
  newest, so a burst of reconnections evicts itself rather than the client that connected
  just before it. A connection serving a request (body being received or the application
  answering) is never evicted. So sockets held open without a request cannot deny service:
  each new client takes the place of an idle one, and one address holds at most
  ``max_per_client`` of them.
- **Deadlines** (checked twice a second over all connections): the TLS handshake and each
  request head must complete within ``header_timeout`` (from the accept, or from the
  head's first byte); a request body within ``body_timeout`` of its head (the application
  answers 408 first when it reads the body; this also ends a body it never reads); an idle
  keep-alive connection is closed after ``idle_timeout``. A head or body deadline answers
  408 (problem details) when the connection can still carry it, then closes.
- **Bounded memory**: a request head is at most ``max_head`` bytes (h11's incomplete-event
  limit, 400 beyond); uvicorn pauses the socket once 64 KiB of body are buffered, so each
  connection holds at most that much until the application reads.
- **TLS 1.3 only** when a certificate is given (:func:`server_tls_context`); with a client
  CA, clients *may* present a certificate (``CERT_OPTIONAL``: devices do not need one), an
  invalid one fails the handshake, and the verified certificate reaches the application as
  the ASGI TLS extension (``scope["extensions"]["tls"]["client_cert"]``), where a resource
  can require it (the shuffler's close and mixed-batch fetch do).

The accept-time bookkeeping runs in the protocol factory uvicorn calls for each connection
(:class:`_Gate`); it holds the uvicorn HTTP/1.1 protocol and forwards to it, so uvicorn's own
request handling is unchanged. A malformed request head is answered with a problem (uvicorn
answers plain text). :func:`serve` binds the socket, writes ``listen.json`` and runs uvicorn
with all of this.

References
----------
.. [Slowloris] R. Hansen, "Slowloris HTTP DoS", 2009; the attack class and the deadlines
   against it are described in CVE-2007-6750 and in the Apache ``mod_reqtimeout`` manual.
.. [RFC8446] E. Rescorla, "The Transport Layer Security (TLS) Protocol Version 1.3",
   RFC 8446, 2018, Sec. 4.3.2 (certificate request), 4.4.2 (client certificate).
.. [RFC9110] R. Fielding, M. Nottingham, J. Reschke, "HTTP Semantics", RFC 9110, 2022,
   Sec. 15.5.9 (408), 15.6.4 (503).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from shuffledp.safe_io import write_atomic
from shuffledp.serve.common import PROBLEM_MEDIA, guard, problem_body

SWEEP_SECONDS = 0.5
#: bytes read from a socket at once: a connection's transient buffers stay near this
READ_SIZE = 64 * 1024
#: seconds a connection must have been quiet to be evicted first (see ConnectionTable._evict)
GRACE = 0.5


@dataclass(frozen=True)
class ConnectionPolicy:
    """Limits of a service's connections (see the module docstring).

    Parameters
    ----------
    max_connections : int
        Open connections in total (all clients).
    max_per_client : int
        Open connections per client address.
    header_timeout : float
        Seconds for the TLS handshake and for each request head.
    body_timeout : float
        Seconds for a request body, from the end of its head.
    idle_timeout : float
        Seconds an idle keep-alive connection is kept.
    max_head : int
        Bytes of a request head (request line and headers).
    """

    max_connections: int = 1024
    max_per_client: int = 32
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    idle_timeout: float = 5.0
    max_head: int = 16384

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_per_client", "max_head"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {name}={v!r}")
        for name in ("header_timeout", "body_timeout", "idle_timeout"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e6:
                raise ValueError(f"{name} must be a positive number of seconds, got "
                                 f"{name}={v!r}")
        if self.max_per_client > self.max_connections:
            raise ValueError(f"max_per_client={self.max_per_client} exceeds "
                             f"max_connections={self.max_connections}")


def raw_problem(status: int, reason: str, detail: str) -> bytes:
    """A complete HTTP/1.1 problem response that closes the connection (written below h11).

    Parameters
    ----------
    status : int
        An HTTP status code.
    reason : str
        The problem type's last part.
    detail : str
        What went wrong, for a person.

    Returns
    -------
    bytes
        Status line, headers (``connection: close``) and the problem-details body.

    Raises
    ------
    ValueError
        ``status`` is not an HTTP status code.
    """
    body = problem_body(status, reason, detail)
    head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
            f"content-type: {PROBLEM_MEDIA}\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n")
    return head.encode() + body


class ConnectionTable:
    """Every open connection of one server, oldest first, in total and per client address.

    Parameters
    ----------
    policy : ConnectionPolicy
        The limits and deadlines applied.

    Attributes
    ----------
    policy : ConnectionPolicy
        As given.
    all : collections.OrderedDict
        Every open connection, oldest first.
    by_host : dict
        Client address -> its open connections, oldest first.
    counts : collections.Counter
        Connection events (accepted, evicted_idle, header_timeout, refused_per_client, ...).
    """

    def __init__(self, policy: ConnectionPolicy) -> None:
        self.policy = policy
        self.all: OrderedDict[_Gate, None] = OrderedDict()
        self.by_host: dict[str, OrderedDict[_Gate, None]] = {}
        self.counts: Counter = Counter()
        self._sweeper: asyncio.Task | None = None

    def admit(self, gate: _Gate) -> bool:
        """Register ``gate``, evicting a waiting connection if a limit is reached."""
        p = self.policy
        mine = self.by_host.get(gate.host)
        if mine is not None and len(mine) >= p.max_per_client and not self._evict(mine):
            self.counts["refused_per_client"] += 1
            return False
        if len(self.all) >= p.max_connections and not self._evict(self.all):
            self.counts["refused_total"] += 1
            return False
        self.all[gate] = None
        self.by_host.setdefault(gate.host, OrderedDict())[gate] = None
        self.counts["accepted"] += 1
        return True

    def _evict(self, conns: OrderedDict) -> bool:
        """Close one waiting connection of ``conns`` (oldest first); False if none waits.

        A connection whose client has sent bytes the server has not read yet (a request
        head in the socket buffer) is not waiting: it is never evicted for being quiet.
        Among the waiting ones, the oldest that has been quiet for ``GRACE`` seconds goes;
        if all are younger (a burst of new connections), the newest goes instead, so that a
        burst consumes itself rather than the client that connected just before it.
        """
        now = time.monotonic()
        young = None
        for g in conns:
            if not g.waiting() or g.has_unread_bytes():
                continue
            if now - max(g.opened, g.last_byte) >= GRACE:
                g.drop("evicted_idle")
                return True
            young = g
        if young is not None:
            young.drop("evicted_idle")
            return True
        return False

    def remove(self, gate: _Gate) -> None:
        self.all.pop(gate, None)
        mine = self.by_host.get(gate.host)
        if mine is not None:
            mine.pop(gate, None)
            if not mine:
                del self.by_host[gate.host]

    def ensure_sweeper(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = loop.create_task(self._sweep())

    async def _sweep(self) -> None:
        while self.all:
            await asyncio.sleep(SWEEP_SECONDS)
            now = time.monotonic()
            for g in list(self.all):
                g.check(now)


class _H11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, with a problem for a malformed head and the TLS extension."""

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        sslobj = transport.get_extra_info("ssl_object")
        if sslobj is not None:
            info = {"tls_version": sslobj.version(), "cipher_suite": (sslobj.cipher() or
                                                                      (None,))[0],
                    "client_cert": sslobj.getpeercert() or None}
            inner = self.app

            async def app(scope, receive, send):
                scope.setdefault("extensions", {})["tls"] = info
                await inner(scope, receive, send)

            self.app = app

    def send_400_response(self, msg: str) -> None:
        if not self.transport.is_closing():
            self.transport.write(raw_problem(400, "malformed_request",
                                             f"{msg} (malformed or oversized request head)"))
        self.transport.close()


class _Gate(asyncio.Protocol):
    """The protocol of one TCP connection: admission, deadlines, TLS, then uvicorn's HTTP."""

    table: ConnectionTable
    tls: ssl.SSLContext | None = None

    def __init__(self, config: Any, server_state: Any, app_state: Any,
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.loop = _loop or asyncio.get_event_loop()
        self._args = (config, server_state, app_state)
        self.inner: _H11 | None = None  # made once admitted (a refused connection costs less)
        self.raw: asyncio.Transport | None = None
        self.app_transport: Any = None
        self.host = "unknown"
        self.opened = self.last_byte = time.monotonic()
        self.head_started: float | None = None
        self.body_started: float | None = None
        self.connected = False
        self.closed = False
        # decrypted bytes the TLS layer delivers after its handshake but before start_tls
        # has returned to us (the client's first request often arrives right then)
        self._early: list[bytes] = []
        self._early_eof = False

    @property
    def _proto(self) -> _H11:
        """The HTTP protocol; it exists once the connection was admitted."""
        if self.inner is None:
            raise RuntimeError(f"connection from {self.host} not admitted: no HTTP protocol")
        return self.inner

    @property
    def _transport(self) -> asyncio.Transport:
        """The TCP transport; it exists once the connection was made."""
        if self.raw is None:
            raise RuntimeError("connection not made yet: no transport")
        return self.raw

    # ----- asyncio protocol -----
    def connection_made(self, transport: Any) -> None:
        self.raw = transport
        if hasattr(transport, "max_size"):  # bytes per socket read (asyncio: 256 KiB)
            transport.max_size = READ_SIZE
        peer = transport.get_extra_info("peername")
        self.host = str(peer[0]) if peer else "unknown"
        self.opened = self.last_byte = time.monotonic()
        if not self.table.admit(self):
            self.closed = True
            if self.tls is None:
                transport.write(raw_problem(503, "unavailable",
                                            f"too many connections from {self.host} in "
                                            "progress; retry later"))
            transport.close()
            return
        self.table.ensure_sweeper(self.loop)
        self.inner = _H11(*self._args, _loop=self.loop)
        if self.tls is None:
            self._connect(transport)
        else:
            self.loop.create_task(self._handshake(transport))

    async def _handshake(self, transport: Any) -> None:
        if self.tls is None:
            raise RuntimeError("TLS handshake on a gate without a TLS context")
        try:
            tls_transport = await self.loop.start_tls(
                transport, self, self.tls, server_side=True,
                ssl_handshake_timeout=self.table.policy.header_timeout)
        except Exception:  # refused certificate, plaintext client, timeout, reset
            self.table.counts["tls_failed"] += 1
            self._forget()
            return
        if self.closed or tls_transport is None:
            return
        self._connect(tls_transport)

    def _connect(self, transport: Any) -> None:
        self.connected = True
        self.app_transport = transport
        self._proto.connection_made(transport)
        early, self._early = self._early, []
        for data in early:
            self.data_received(data)
        if self._early_eof and not self.closed:
            self.eof_received()

    def data_received(self, data: bytes) -> None:
        if not self.connected:
            if sum(map(len, self._early)) + len(data) > 4 * self.table.policy.max_head:
                self.drop("oversized_early_data")
            else:
                self._early.append(bytes(data))
            return
        now = self.last_byte = time.monotonic()
        conn = self._proto.conn
        if self.head_started is None and conn.their_state is h11.IDLE:
            self.head_started = now
        self._proto.data_received(data)
        state = conn.their_state
        if state is not h11.IDLE:
            self.head_started = None
        if state is h11.SEND_BODY:
            if self.body_started is None:
                self.body_started = now
        else:
            self.body_started = None

    def eof_received(self) -> bool | None:
        if not self.connected:
            self._early_eof = True
            return True  # keep the transport until the handshake's outcome is known
        self._proto.eof_received()  # uvicorn's returns None: the transport closes
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        if self.connected:
            self.connected = False
            self._proto.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.connected:
            self._proto.pause_writing()

    def resume_writing(self) -> None:
        if self.connected:
            self._proto.resume_writing()

    # ----- bookkeeping -----
    def _forget(self) -> None:
        self.closed = True
        self.table.remove(self)

    def waiting(self) -> bool:
        """True if the connection serves no request: TLS handshake, no request yet, between
        requests, or in an incomplete request head."""
        if self.closed:
            return False
        if not self.connected:
            return True
        c = self._proto
        if c.conn.their_state is not h11.IDLE:
            return False
        return c.cycle is None or c.cycle.response_complete

    def has_unread_bytes(self) -> bool:
        """True if the client sent bytes this server has not read yet (peeked, not consumed)."""
        sock = self.raw.get_extra_info("socket") if self.raw is not None else None
        sock = getattr(sock, "_sock", sock)  # asyncio's TransportSocket wraps the socket
        if sock is None:
            return False
        try:
            return bool(sock.recv(1, socket.MSG_PEEK))  # asyncio's sockets do not block
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return False

    def drop(self, reason: str, answer: tuple[int, str, str] | None = None) -> None:
        """Close now (counted under ``reason``); first write ``answer`` (status, problem
        reason, detail) if the connection can still carry a response."""
        if self.closed:
            return
        self.table.counts[reason] += 1
        self._forget()
        if answer is not None and self.connected and not self.app_transport.is_closing():
            c = self._proto
            if c.cycle is None or not c.cycle.response_started:
                self.app_transport.write(raw_problem(*answer))
            self.app_transport.close()  # flushes the answer (and a TLS close_notify)
            self.loop.call_later(1.0, self._transport.abort)
        else:
            self._transport.abort()

    def check(self, now: float) -> None:
        """Apply the deadlines (called by the sweeper)."""
        p = self.table.policy
        if self.closed:
            return
        if not self.connected:
            if now - self.opened > p.header_timeout:
                self.drop("handshake_timeout")
            return
        c = self._proto
        state = c.conn.their_state
        if state is h11.IDLE:
            if c.cycle is not None and not c.cycle.response_complete:
                return
            if self.head_started is not None:
                if now - self.head_started > p.header_timeout:
                    self.drop("header_timeout", (408, "request_timeout",
                                                 f"request head not complete within "
                                                 f"{p.header_timeout:g} s"))
            elif c.cycle is None:
                if now - self.opened > p.header_timeout:
                    self.drop("idle_timeout", (408, "request_timeout",
                                               f"no request within {p.header_timeout:g} s"))
            elif now - self.last_byte > p.idle_timeout + 1.0:  # uvicorn's keep-alive first
                self.drop("idle_timeout")
        elif state is h11.SEND_BODY:
            started = self.body_started if self.body_started is not None else self.last_byte
            if now - started > p.body_timeout + 1.0:  # the application's 408 first
                self.drop("body_timeout", (408, "request_timeout",
                                           f"request body not complete within "
                                           f"{p.body_timeout:g} s"))


def gate_class(policy: ConnectionPolicy, tls: ssl.SSLContext | None = None) -> type[_Gate]:
    """A protocol class for uvicorn's ``http=`` option with its own connection table.

    Parameters
    ----------
    policy : ConnectionPolicy
        The limits and deadlines of the new :class:`ConnectionTable`.
    tls : ssl.SSLContext, optional
        Terminate TLS with this context (default: plain TCP).

    Returns
    -------
    type
        A subclass of the connection protocol, bound to a fresh table (``.table``).

    Raises
    ------
    AttributeError
        ``policy`` is not a :class:`ConnectionPolicy`-like object (when a connection is
        made).
    """
    return type("Gate", (_Gate,), {"table": ConnectionTable(policy), "tls": tls})


def server_tls_context(certfile: str | os.PathLike, keyfile: str | os.PathLike,
                       client_ca: str | os.PathLike | None = None) -> ssl.SSLContext:
    """A TLS 1.3-only server context; with ``client_ca``, clients may present a certificate
    issued by it (``CERT_OPTIONAL``; a bad certificate fails the handshake; [RFC8446]_).

    Parameters
    ----------
    certfile, keyfile : str or os.PathLike
        The server's certificate chain and private key (PEM).
    client_ca : str or os.PathLike, optional
        A CA whose client certificates are accepted.

    Returns
    -------
    ssl.SSLContext
        The server context.

    Raises
    ------
    ssl.SSLError
        A file that is not a valid certificate or key, or a key that does not match.
    OSError
        A file cannot be read.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(os.fspath(certfile), os.fspath(keyfile))
    if client_ca is not None:
        ctx.load_verify_locations(cafile=os.fspath(client_ca))
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def client_tls_context(ca_cert: str | os.PathLike | None = None,
                       client_cert: str | os.PathLike | None = None,
                       client_key: str | os.PathLike | None = None) -> ssl.SSLContext:
    """A TLS 1.3-only client context that verifies the server (against ``ca_cert`` if given,
    else the system's CAs) and presents ``client_cert`` / ``client_key`` if given.

    Parameters
    ----------
    ca_cert : str or os.PathLike, optional
        The CA that issued the server's certificate.
    client_cert, client_key : str or os.PathLike, optional
        The client's certificate and key (mutual TLS); the key may be in ``client_cert``.

    Returns
    -------
    ssl.SSLContext
        The client context.

    Raises
    ------
    ssl.SSLError
        A file that is not a valid certificate or key.
    OSError
        A file cannot be read.
    """
    ctx = ssl.create_default_context(cafile=os.fspath(ca_cert) if ca_cert else None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    if client_cert is not None:
        ctx.load_cert_chain(os.fspath(client_cert),
                            os.fspath(client_key) if client_key else None)
    return ctx


def raise_open_files_limit(want: int) -> int | None:
    """Raise the soft limit on open files towards ``want`` (at most the hard limit); None
    where the platform has no such limit.

    Parameters
    ----------
    want : int
        The number of open files wanted.

    Returns
    -------
    int or None
        The soft limit now in force (may be below ``want``), or None.

    Raises
    ------
    ValueError
        The operating system refused the new limit.
    """
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def bind(host: str, port: int, backlog: int = 4096) -> socket.socket:
    """A listening TCP socket on (host, port).

    Parameters
    ----------
    host : str
        An IPv4 or IPv6 address (IPv6 when it contains ``:``) or a host name.
    port : int
        The port (0: any free one; read it from ``getsockname()``).
    backlog : int, optional
        The listen queue length (default 4096).

    Returns
    -------
    socket.socket
        The non-blocking listening socket.

    Raises
    ------
    OSError
        The address is in use, not local, or cannot be resolved.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.setblocking(False)
    return sock


def serve(app: Any, host: str, port: int, data_dir: Path, *,
          policy: ConnectionPolicy | None = None, tls: ssl.SSLContext | None = None,
          rate: float | None = None, burst: float | None = None,
          counters: Counter | None = None, connections: Counter | None = None,
          announce=print) -> None:
    """Bind (host, port), write ``data_dir/listen.json`` ({"url", "pid"}), run uvicorn with the
    connection policy (and TLS) of this module until SIGINT/SIGTERM.

    ``app`` (a Starlette application) runs behind :func:`shuffledp.serve.common.guard` (the
    per-client rate limit ``rate`` / ``burst``, the access log, the last-resort problem);
    ``counters`` collects the refusals by reason, ``connections`` the connection events
    (accepted, evicted_idle, header_timeout, refused_per_client, ...).

    Parameters
    ----------
    app : ASGI application
        The service (a Starlette application).
    host : str
        The address to listen on.
    port : int
        The port (0: any free one; the URL written names the real one).
    data_dir : pathlib.Path
        Where ``listen.json`` is written.
    policy : ConnectionPolicy, optional
        Connection limits and deadlines (default :class:`ConnectionPolicy()`).
    tls : ssl.SSLContext, optional
        Serve HTTPS with this context (:func:`server_tls_context`).
    rate, burst : float, optional
        Per-client request rate limit (:func:`shuffledp.serve.common.guard`).
    counters, connections : collections.Counter, optional
        Collect refusals by reason and connection events.
    announce : callable, optional
        Called with ``"listening on <url>"`` once bound (default :func:`print`).

    Raises
    ------
    OSError
        The socket cannot be bound or ``listen.json`` cannot be written.
    ValueError
        ``rate`` / ``burst`` out of range.
    """
    import uvicorn

    policy = policy or ConnectionPolicy()
    raise_open_files_limit(policy.max_connections + 256)
    sock = bind(host, port)
    real = sock.getsockname()[1]
    scheme = "https" if tls is not None else "http"
    url = f"{scheme}://{'[' + host + ']' if ':' in host else host}:{real}"
    gate = gate_class(policy, tls)
    if connections is not None:
        gate.table.counts = connections
    config = uvicorn.Config(guard(app, rate=rate, burst=burst, counters=counters),
                            http=gate, ws="none", lifespan="on",
                            log_level="warning", access_log=False,
                            timeout_keep_alive=int(max(1, round(policy.idle_timeout))),
                            limit_concurrency=None, h11_max_incomplete_event_size=policy.max_head,
                            timeout_graceful_shutdown=5, server_header=False,
                            proxy_headers=False)  # limits use the peer, never a header
    server = uvicorn.Server(config)
    if hasattr(app, "state"):  # lets an app end the service (one secure-aggregation run)
        app.state.uvicorn_server = server
    write_atomic(data_dir / "listen.json", (json.dumps({"url": url, "pid": os.getpid()})
                                            + "\n").encode())
    announce(f"listening on {url}")
    server.run(sockets=[sock])


__all__ = ["ConnectionPolicy", "ConnectionTable", "bind", "client_tls_context", "gate_class",
           "raise_open_files_limit", "raw_problem", "serve", "server_tls_context"]
