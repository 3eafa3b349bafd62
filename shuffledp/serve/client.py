"""Device and operator side of the shuffler service, over httpx.

:func:`upload_batch` PUTs one encrypted batch under a fresh random report id, signed with the
device's credential (:mod:`shuffledp.serve.admission`). It retries transport failures and
the answers that mean "not now" (408, 429, 5xx, 507 full disk) with the *same* id and bytes,
honouring ``Retry-After``, for up to ``retry_for`` seconds (default 5 minutes: longer than a
restart of the service, which resumes the round from its disk). The service answers a retry
idempotently (201 again, counted once, also after the round was closed if the batch was
accepted before), so a retry after a lost reply never counts a user twice. Any other 4xx
answer is final and raises :class:`Refused` carrying the RFC 9457 problem.

TLS: pass ``verify`` (an :class:`ssl.SSLContext` from
:func:`shuffledp.serve.transport.client_tls_context`, with the operator's client certificate
for :func:`close_round` when the service requires mutual TLS).
"""

from __future__ import annotations

import os
import secrets
import time
from typing import Any

from shuffledp.safe_io import atomic_output
from shuffledp.serve.admission import Credential, sign_upload
from shuffledp.serve.common import retry_after

#: statuses after which the same request may succeed later
RETRYABLE = frozenset({408, 425, 429, 500, 502, 503, 504, 507})
#: default seconds a device keeps retrying one upload
RETRY_FOR = 300.0


class Refused(Exception):
    """The service refused (a final 4xx, or a retryable answer until the retry window ended);
    ``problem`` is its problem-details body.

    A remote service's HTTP error answer, not a :class:`shuffledp.Refused` (a decision of
    this process that a release or step cannot be proven safe): it covers an unauthorised
    credential or an unavailable service as well, and is not a ``ValueError``.
    """

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status, self.problem = status, problem
        reason = str(problem.get("type", "")).rsplit(":", 1)[-1] or "error"
        super().__init__(f"HTTP {status} {reason}: {problem.get('detail', '')}")

    @property
    def reason(self) -> str:
        return str(self.problem.get("type", "")).rsplit(":", 1)[-1]


def _problem(resp) -> dict[str, Any]:
    try:
        body = resp.json()
        return body if isinstance(body, dict) else {"detail": str(body)}
    except ValueError:
        return {"detail": resp.text[:200]}


def new_report_id() -> str:
    """16 bytes from the OS's secure source, hex (the DAP report id size).

    Returns
    -------
    str
        32 lower-case hex digits.
    """
    return os.urandom(16).hex()


def backoff(attempt: int, cap: float = 10.0) -> float:
    """Exponential backoff with full jitter (from the OS's secure source): up to 0.2 * 2^k s,
    capped at ``cap``.

    Parameters
    ----------
    attempt : int
        The number of the retry, from 0.
    cap : float, optional
        The longest wait in seconds (default 10).

    Returns
    -------
    float
        Seconds to wait, uniform-ish in [top / 2, top) with top = min(cap, 0.2 * 2^attempt).

    Raises
    ------
    TypeError
        ``attempt`` or ``cap`` is not a number.
    """
    top = min(cap, 0.2 * 2 ** min(attempt, 16))
    return top * (0.5 + secrets.randbelow(1000) / 2000)


def upload_batch(server: str, round_id: str | bytes, batch: bytes, *, credential: Credential,
                 report_id: str | None = None, config_id: str = "", timeout: float = 30.0,
                 retry_for: float = RETRY_FOR, client: Any = None, verify: Any = True) -> str:
    """Upload one device's batch; returns its report id once the service stored it (201).

    Parameters
    ----------
    server : str
        Base URL of the service.
    round_id : str or bytes
        The round id (hex, or the 16 bytes of ``ProtocolParams.round_id``).
    batch : bytes
        The encrypted batch (``shuffledp encode``).
    credential : Credential
        The device's credential (``shuffledp serve enrol``).
    report_id : str, optional
        Reuse an id to retry an earlier upload of the same batch; default: a fresh one.
    config_id : str
        The HPKE config id of the analyzer key the batch was encrypted to (checked by the
        service; empty: not sent).
    timeout : float
        Seconds of one attempt.
    retry_for : float
        Seconds to keep retrying transport failures and retryable answers.
    client : httpx.Client, optional
        A client to reuse (its own TLS settings then apply).
    verify : bool or ssl.SSLContext
        Server certificate verification (``True``: the system's CAs).

    Raises
    ------
    Refused
        A final refusal, or a retryable one still given when ``retry_for`` ran out.
    httpx.TransportError
        No answer at all within ``retry_for``.
    ValueError
        ``round_id`` is a string that is not hex.

    Returns
    -------
    str
        The report id the service stored the batch under.
    """
    import httpx

    rnd = round_id if isinstance(round_id, bytes) else bytes.fromhex(round_id)
    rid = report_id or new_report_id()
    url = f"{server.rstrip('/')}/rounds/{rnd.hex()}/batches/{rid}"
    own = client is None
    c = client or httpx.Client(timeout=timeout, verify=verify)
    deadline = time.monotonic() + retry_for
    try:
        attempt = 0
        while True:
            headers = {"content-type": "application/octet-stream",
                       **sign_upload(credential, rnd, rid, batch, config_id=config_id)}
            try:
                r = c.put(url, content=batch, headers=headers)
            except httpx.TransportError:
                wait = backoff(attempt)
                if time.monotonic() + wait > deadline:
                    raise
            else:
                if r.status_code == 201:
                    return rid
                if r.status_code not in RETRYABLE:
                    raise Refused(r.status_code, _problem(r))
                wait = max(retry_after(r, 0.0), backoff(attempt))
                if time.monotonic() + wait > deadline:
                    raise Refused(r.status_code, _problem(r))
            time.sleep(wait)
            attempt += 1
    finally:
        if own:
            c.close()


def close_round(server: str, round_hex: str, token: str, *, timeout: float = 600.0,
                out: str | os.PathLike | None = None, verify: Any = True) -> dict[str, Any]:
    """Close the round (mix); with ``out`` also download the signed mixed batch there.

    ``verify`` is ``True`` or an :class:`ssl.SSLContext` (carrying the operator's client
    certificate when the service requires mutual TLS). A close the service cannot complete
    (507 full disk, 409 too few batches) raises :class:`Refused`; the round stays open and
    close can be called again.

    Parameters
    ----------
    server : str
        Base URL of the service.
    round_hex : str
        The round id in hex.
    token : str
        The operator's bearer token.
    timeout : float, optional
        Seconds for each request (default 600: mixing a large round takes time).
    out : str or os.PathLike, optional
        Where to write the signed mixed batch (atomically).
    verify : bool or ssl.SSLContext, optional
        Server certificate verification (``True``: the system's CAs).

    Returns
    -------
    dict
        The round's report (the JSON the service answers the close with).

    Raises
    ------
    Refused
        The service did not answer 200 to the close or to the download.
    httpx.HTTPError
        No answer (transport failure or timeout).
    OSError
        ``out`` could not be written.
    """
    import httpx

    base = f"{server.rstrip('/')}/rounds/{round_hex}"
    auth = {"authorization": f"Bearer {token}"}
    with httpx.Client(timeout=timeout, verify=verify) as c:
        r = c.post(f"{base}/close", headers=auth)
        if r.status_code != 200:
            raise Refused(r.status_code, _problem(r))
        report = r.json()
        if out is not None:
            with c.stream("GET", f"{base}/mixed", headers=auth) as m:
                if m.status_code != 200:
                    m.read()
                    raise Refused(m.status_code, _problem(m))
                with atomic_output(out) as fh:
                    for chunk in m.iter_bytes():
                        fh.write(chunk)
    return report


__all__ = ["RETRYABLE", "RETRY_FOR", "Refused", "backoff", "close_round", "new_report_id",
           "upload_batch"]
