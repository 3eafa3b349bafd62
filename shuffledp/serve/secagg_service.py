"""Secure aggregation over HTTP: the four rounds of Bonawitz et al. with per-round deadlines.

``shuffledp serve secagg --clients N --threshold T --length L --modulus M --listen HOST:PORT
--data DIR`` runs one aggregation ([Bonawitz17]_ Fig. 4, :class:`shuffledp.secagg.SecAggServer`)
and exits; ``shuffledp secagg client --server URL --id i ...`` runs client i
(:func:`run_client`). The transport mirrors the mailbox (:mod:`shuffledp.secagg.mailbox`):

=================================================  ===========================================
``GET /secagg/session``                            session id (hex), n, t, L, m, current round
``PUT /secagg/{session}/rounds/{r}/clients/{i}``   client i's message of round r: 201
                                                   accepted; 400 ``rejected_message`` (the
                                                   server's reason); 409 ``wrong_phase`` /
                                                   ``too_late``
``PUT .../rounds/{r}/clients/{i}/leave``           client i leaves before round r (204), so
                                                   the server need not wait for the deadline
``GET /secagg/{session}/rounds/{r}/server``        the broadcast of round r = 0, 2
``GET .../rounds/1/clients/{i}/shares``            the shares addressed to client i
=================================================  ===========================================

The channel is the client id in the URL: :meth:`SecAggServer.receive` rejects a message
whose sender field names another client, exactly as the mailbox binds it to the file name.
(Nothing authenticates the id itself here, as nothing authenticates who may write a mailbox
file; a deployment puts per-client credentials, e.g. mutual TLS, in front.) The service runs
behind the same connection limits, deadlines and optional TLS 1.3 as the shuffler
(:mod:`shuffledp.serve.transport`), so idle or slow sockets cannot stall a run; a client
retries a busy server (429, 503, ...) until its timeout and then names the answer. GETs long-poll
(``?wait=S``, at most 25 s): 200 with the message once the round closed, 204 if not yet, 410
``aborted`` with the reason once the run aborted. A round closes when every expected client
has answered or left, or at its deadline (``--round-timeout`` after it opened; round 0, which
opens when the service starts, has ``--join-timeout``, so devices coming online over minutes
can join while the later rounds stay short): a client that never answers is a dropout, not a
hang. Every refusal is an RFC 9457 problem ([RFC9457]_);
bodies are bounded by the size each round allows and must arrive within the body timeout.

The outcome mirrors the mailbox server: ``DATA/report.json`` with ``"status": "released"``
(and ``DATA/result.npy``) or ``"aborted"`` with the reason (and no ``result.npy``); an
earlier run's result and report are removed when the service starts. Randomness: the session
id from ``os.urandom``; the clients' keys, masks and shares from
:class:`~shuffledp.protocol.crypto.SecureRandom`; nothing takes a seed.

References
----------
.. [Bonawitz17] Bonawitz et al. (2017), "Practical Secure Aggregation", Sec. 4 and Fig. 4 -- full
   entry in docs/references.md.
.. [RFC9457] Nottingham et al. (2023), "Problem Details for HTTP APIs", RFC 9457 -- full entry in
   docs/references.md.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from shuffledp.safe_io import write_npy, write_report
from shuffledp.secagg import SecAggAborted, SecAggClient, SecAggServer
from shuffledp.secagg.server import message_limits
from shuffledp.serve.common import BodyError, exception_handlers, problem, read_body, retry_after

ROUNDS = 4
MAX_WAIT = 25.0


class SecAggRun:
    """One aggregation: the server state machine, its round deadlines and published replies.

    Parameters
    ----------
    n : int
        The clients of the run.
    length : int
        L, the length of every input vector.
    modulus : int
        m, the sum is taken mod m.
    threshold : int
        t, the clients needed in every round.
    data_dir : pathlib.Path
        Where ``result.npy`` and ``report.json`` are written (the previous run's removed).
    round_timeout : float
        Seconds each of rounds 1-3 waits for missing clients.
    join_timeout : float, optional
        Seconds round 0 waits (default ``round_timeout``).

    Attributes
    ----------
    server : shuffledp.secagg.SecAggServer
        The state machine.
    session : bytes
        The run's 16 random bytes.
    published : dict
        Round -> the server's reply: bytes (rounds 0, 2) or client -> bytes (round 1).
    dropped, left : dict
        Round -> clients that did not answer, and those that announced leaving.
    aborted : str or None
        Why the run stopped without a sum.
    done : bool
        The run is over (released or aborted).

    Raises
    ------
    ValueError
        Parameters :class:`~shuffledp.secagg.SecAggServer` refuses.
    OSError
        ``data_dir`` cannot be created or cleared.
    """

    def __init__(self, n: int, length: int, modulus: int, threshold: int, data_dir: Path,
                 round_timeout: float, join_timeout: float | None = None) -> None:

        self.n, self.length, self.m, self.t = n, length, modulus, threshold
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        for name in ("result.npy", "report.json"):
            (self.dir / name).unlink(missing_ok=True)
        self.session = os.urandom(16)
        self.server = SecAggServer(n, length, modulus, threshold, self.session)
        self.round_timeout = round_timeout
        self.join_timeout = round_timeout if join_timeout is None else join_timeout
        self.limits = message_limits(n, length)
        self.left: dict[int, list[int]] = {}
        self._leaving: dict[int, set[int]] = {}  # round -> clients leaving before it
        self.dropped: dict[int, list[int]] = {}
        self.published: dict[int, Any] = {}  # round -> bytes (0, 2) or {client: bytes} (1)
        self.aborted: str | None = None
        self.done = False
        self.t0 = time.perf_counter()
        self.progress: asyncio.Event | None = None
        self.ready: asyncio.Condition | None = None

    @property
    def round(self) -> int:
        return self.server.round

    def _expected(self) -> set[int]:
        return set(self.server.members[-1])

    def _complete(self) -> bool:
        return self.server.answered | self._leaving.get(self.round, set()) >= self._expected()

    def _wake(self) -> None:
        # before drive() made the event nothing waits; drive() checks _complete() first
        if self.progress is not None:
            self.progress.set()

    def receive(self, r: int, i: int, data: bytes) -> tuple[int, str | None, str]:
        if self.done or self.aborted:
            return 409, "too_late", "the run is over"
        if r < self.round:
            return 409, "too_late", f"round {r} is closed (its deadline passed or all answered)"
        if r > self.round:
            return 409, "wrong_phase", f"the server is in round {self.round}, not {r}"
        before = dict(self.server.rejected)
        if self.server.receive(data, channel=i):
            self._wake()
            return 201, None, "accepted"
        after = self.server.rejected
        reason = next((k for k in after if after[k] != before.get(k, 0)), "rejected")
        return 400, "rejected_message", reason

    def leave(self, r: int, i: int) -> tuple[int, str | None, str]:
        if r < self.round or self.done or self.aborted:
            return 409, "too_late", f"round {r} is closed"
        self._leaving.setdefault(r, set()).add(i)  # also for a later round (a mailbox marker)
        self._wake()
        return 204, None, "left"

    async def drive(self, on_done) -> None:
        """Run the four rounds with their deadlines; write the outcome; call ``on_done``."""
        from starlette.concurrency import run_in_threadpool


        self.progress = asyncio.Event()
        self.ready = asyncio.Condition()
        try:
            for r in range(ROUNDS):
                deadline = time.monotonic() + (self.join_timeout if r == 0
                                               else self.round_timeout)
                while not self._complete():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self.progress.clear()
                    try:
                        await asyncio.wait_for(self.progress.wait(), left)
                    except TimeoutError:
                        break
                expected = self._expected()
                self.dropped[r] = sorted(expected - self.server.answered)
                self.left[r] = sorted(self._leaving.get(r, set()) & expected
                                      - self.server.answered)
                reply = await run_in_threadpool(self.server.close_round)
                self.published[r] = reply
                async with self.ready:
                    self.ready.notify_all()
        except SecAggAborted as e:
            self.aborted = str(e)
            write_report(self.dir, self._report("aborted", reason=str(e)))
        else:
            if self.server.total is None:  # round 3 closed without SecAggAborted: a sum
                raise RuntimeError("secure aggregation ended without a sum")
            write_npy(self.dir / "result.npy", self.server.total)
            write_report(self.dir, self._report("released"))
        self.done = True
        async with self.ready:
            self.ready.notify_all()
        await on_done()

    def _report(self, status: str, **extra) -> dict:
        return {"status": status, "transport": "http", **self.server.summary(),
                "dropped_per_round": self.dropped, "left_per_round": self.left,
                "seconds": time.perf_counter() - self.t0, **extra}

    def message_for(self, r: int, i: int | None) -> bytes | None:
        reply = self.published.get(r)
        if reply is None:
            return None
        if r == 1:
            return reply.get(i, b"")
        return reply


def make_app(run: SecAggRun, *, body_timeout: float = 30.0, linger: float = 1.0):
    """The Starlette application of one run; the run starts with the app and, once it is
    over, the server is asked to exit after ``linger`` seconds (replies flush).

    Parameters
    ----------
    run : SecAggRun
        The aggregation the app serves.
    body_timeout : float, optional
        Seconds a client has to send a whole message (408 after).
    linger : float, optional
        Seconds between the end of the run and the request to exit.

    Returns
    -------
    starlette.applications.Starlette
        The ASGI application (wrap it in :func:`shuffledp.serve.common.guard`).

    Raises
    ------
    AttributeError
        ``run`` is not a :class:`SecAggRun`.
    """
    import contextlib

    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    sess = run.session.hex()

    def check(request, need_client=True):
        if request.path_params.get("session") != sess:
            return None, None, problem(404, "not_found", "no such session on this server")
        try:
            r = int(request.path_params.get("r", "0"))
            i = int(request.path_params.get("i", "-1"))
        except ValueError:
            return None, None, problem(404, "not_found", "round and client must be integers")
        if not 0 <= r < ROUNDS or (need_client and not 0 <= i < run.n):
            return None, None, problem(404, "not_found", f"round {r} / client {i}")
        return r, i, None

    async def session(request):
        return JSONResponse({"session": sess, "n": run.n, "threshold": run.t,
                             "length": run.length, "modulus": run.m, "round": run.round,
                             "done": run.done, "aborted": run.aborted,
                             "round_timeout": run.round_timeout})

    async def put_message(request):
        r, i, bad = check(request)
        if bad is not None:
            return bad
        try:
            data = await read_body(request, run.limits[r], body_timeout)
        except BodyError as e:
            return problem(e.status, e.reason, e.detail)
        status, reason, detail = run.receive(r, i, data)
        if reason is not None:
            return problem(status, reason, detail)
        return Response(status_code=201)

    async def put_leave(request):
        r, i, bad = check(request)
        if bad is not None:
            return bad
        status, reason, detail = run.leave(r, i)
        if reason is not None:
            return problem(status, reason, detail)
        return Response(status_code=204)

    async def get_message(request, r: int, i: int | None):
        try:
            wait = min(float(request.query_params.get("wait", "0")), MAX_WAIT)
        except ValueError:
            wait = 0.0
        deadline = time.monotonic() + max(wait, 0.0)
        while True:
            data = run.message_for(r, i)
            if data is not None:
                if r == 1 and not data:
                    return problem(409, "wrong_phase",
                                   f"client {i} is not among the clients of round 1")
                return Response(data, media_type="application/octet-stream")
            if run.aborted:
                return problem(410, "aborted", run.aborted, title="The run aborted")
            if run.done:
                return problem(410, "aborted", "the run is over", title="The run is over")
            left = deadline - time.monotonic()
            if left <= 0 or run.ready is None:
                return Response(status_code=204)
            try:
                async with run.ready:
                    await asyncio.wait_for(run.ready.wait(), left)
            except TimeoutError:
                pass

    async def get_server(request):
        r, _, bad = check(request, need_client=False)
        if bad is not None:
            return bad
        if r not in (0, 2):
            return problem(404, "not_found", f"round {r} has no broadcast")
        return await get_message(request, r, None)

    async def get_shares(request):
        r, i, bad = check(request)
        if bad is not None:
            return bad
        if r != 1:
            return problem(404, "not_found", "shares are sent in round 1 only")
        return await get_message(request, 1, i)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async def finish():
            await asyncio.sleep(linger)
            server = getattr(app.state, "uvicorn_server", None)
            if server is not None:
                server.should_exit = True

        task = asyncio.create_task(run.drive(finish))
        try:
            yield
        finally:
            task.cancel()

    base = "/secagg/{session}/rounds/{r}"
    routes = [
        Route("/secagg/session", session, methods=["GET"]),
        Route(base + "/clients/{i}", put_message, methods=["PUT"]),
        Route(base + "/clients/{i}/leave", put_leave, methods=["PUT"]),
        Route(base + "/server", get_server, methods=["GET"]),
        Route(base + "/clients/{i}/shares", get_shares, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers=exception_handlers())


class ClientAborted(RuntimeError):
    """The server aborted the run, or the client gave up waiting."""


#: answers after which the same request may succeed (the server was busy, not the message)
RETRYABLE = frozenset({429, 502, 503, 504})


def _is_certificate_failure(error: BaseException) -> bool:
    """Whether a connection failed because the server's certificate did not verify (an
    :class:`ssl.SSLCertVerificationError` anywhere in the exception's chain)."""
    import ssl

    seen: BaseException | None = error
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "CERTIFICATE_VERIFY_FAILED" in str(error)


def _call(c, method: str, url: str, deadline: float, *, idempotent: bool, **kw):
    """One request, retried until ``deadline`` on a retryable answer (honouring
    ``Retry-After``) and on a failure to connect (any transport failure if ``idempotent``).

    Raises :class:`ClientAborted` naming the last answer ("HTTP 503 unavailable: ...") or
    transport failure when the deadline passes.
    """
    import httpx

    delay = 0.1
    while True:
        try:
            resp = c.request(method, url, **kw)
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:
            if _is_certificate_failure(e):  # not transient: retrying cannot help
                raise ClientAborted(f"{method} {url}: the server's TLS certificate does not "
                                    f"verify ({e})") from None
            last: Any = e
        except httpx.TransportError as e:
            if not idempotent:  # the message may have arrived: not sent twice
                raise ClientAborted(f"{method} {url}: {type(e).__name__}: {e}") from None
            last = e
        else:
            if resp.status_code not in RETRYABLE:
                return resp
            last = resp
        wait = delay if isinstance(last, Exception) else max(delay, retry_after(last, delay))
        if time.monotonic() + wait > deadline:
            if isinstance(last, Exception):
                raise ClientAborted(f"{method} {url}: {type(last).__name__}: {last}") from None
            raise ClientAborted(_detail(last))
        time.sleep(wait)
        delay = min(2 * delay, 5.0)


def run_client(server_url: str, uid: int, x: np.ndarray, modulus: int, threshold: int, *,
               timeout: float = 60.0, stop_before: int | None = None,
               verify: Any = True) -> str:
    """Client ``uid`` through the four rounds over HTTP; returns "done" or "left".

    A busy server (429, 502, 503, 504, or no connection) is retried until ``timeout``
    seconds have passed without progress; the error then names the server's last answer.

    Parameters
    ----------
    server_url : str
        Base URL of the secure-aggregation service.
    uid : int
        This client's id, 0 <= uid < n.
    x : numpy.ndarray
        The client's input: L integers in [0, modulus).
    modulus : int
        m of the sum (checked against the server's in round 0).
    threshold : int
        t (likewise).
    timeout : float, optional
        Seconds without progress before giving up (default 60).
    stop_before : int, optional
        Announce leaving before this round (for dropout tests); default: take part to the
        end.
    verify : bool or ssl.SSLContext, optional
        ``True`` (the system's CAs) or an :class:`ssl.SSLContext` for an HTTPS server.

    Returns
    -------
    str
        ``"done"`` (all four rounds sent) or ``"left"`` (left before ``stop_before``).

    Raises
    ------
    ClientAborted
        The run was aborted by the server, or no usable server answer came within
        ``timeout`` seconds.
    shuffledp.secagg.SecAggRefused
        The server asked for something that would break this client's privacy.
    shuffledp.secagg.MessageError
        A malformed server message, or one bound to other parameters.
    ValueError
        ``x``, ``modulus`` or ``threshold`` that :class:`~shuffledp.secagg.SecAggClient`
        refuses.
    """
    import httpx

    base_url = server_url.rstrip("/")
    with httpx.Client(timeout=MAX_WAIT + 10, verify=verify) as c:
        resp = _call(c, "GET", f"{base_url}/secagg/session", time.monotonic() + timeout,
                     idempotent=True)
        if resp.status_code != 200:
            raise ClientAborted(_detail(resp))
        try:
            info = resp.json()
            sess = str(info["session"])
        except (ValueError, KeyError, TypeError):
            raise ClientAborted(f"{base_url}/secagg/session: not a session description"
                                ) from None
        client = SecAggClient(uid, x, modulus, threshold, bytes.fromhex(sess))
        base = f"{base_url}/secagg/{sess}/rounds"
        # the server message each round reads (round 0 reads none)
        sources = ["", f"{base}/0/server", f"{base}/1/clients/{uid}/shares",
                   f"{base}/2/server"]
        steps = [lambda _: client.advertise(), client.share_keys, client.masked_input,
                 client.unmask]
        for r in range(ROUNDS):
            if stop_before is not None and r >= stop_before:
                _call(c, "PUT", f"{base}/{r}/clients/{uid}/leave", time.monotonic() + timeout,
                      idempotent=True)
                return "left"
            incoming = b""  # round 0 takes no server message
            if r:
                deadline = time.monotonic() + timeout
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise ClientAborted(f"no server message for round {r} after "
                                            f"{timeout:g} s")
                    resp = _call(c, "GET", sources[r], deadline, idempotent=True,
                                 params={"wait": f"{min(left, MAX_WAIT):.3f}"})
                    if resp.status_code == 200:
                        incoming = resp.content
                        break
                    if resp.status_code != 204:
                        raise ClientAborted(_detail(resp))
            resp = _call(c, "PUT", f"{base}/{r}/clients/{uid}", time.monotonic() + timeout,
                         idempotent=False, content=steps[r](incoming),
                         headers={"content-type": "application/octet-stream"})
            if resp.status_code != 201:
                raise ClientAborted(_detail(resp))
    return "done"


def _detail(resp) -> str:
    try:
        body = resp.json()
        return f"HTTP {resp.status_code} {body.get('type', '').rsplit(':', 1)[-1]}: " \
               f"{body.get('detail', '')}"
    except ValueError:
        return f"HTTP {resp.status_code}"
