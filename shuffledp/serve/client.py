"""Device and operator side of the shuffler service, over httpx.

:func:`upload_batch` PUTs one encrypted batch under a fresh random report id and retries
transport failures and 5xx answers with the *same* id and bytes, which the service answers
idempotently (201 again, counted once), so a retry after a lost reply never counts a user
twice. A 4xx answer is final and raises :class:`Refused` carrying the RFC 9457 problem.
"""

from __future__ import annotations

import os
import time
from typing import Any

from shuffledp.safe_io import atomic_output


class Refused(Exception):
    """The service refused (4xx/5xx after retries); ``problem`` is its problem-details body.

    A remote service's HTTP error answer, not a :class:`shuffledp.Refused` (a decision of
    this process that a release or step cannot be proven safe): it covers an unauthorised
    token or an unavailable service as well, and is not a ``ValueError``.
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
    """16 bytes from the OS's secure source, hex (the DAP report id size)."""
    return os.urandom(16).hex()


def upload_batch(server: str, round_hex: str, batch: bytes, *, report_id: str | None = None,
                 timeout: float = 30.0, retries: int = 3, client: Any = None) -> str:
    """Upload one user's batch; returns its report id once the service stored it (201)."""
    import httpx

    rid = report_id or new_report_id()
    url = f"{server.rstrip('/')}/rounds/{round_hex}/batches/{rid}"
    own = client is None
    c = client or httpx.Client(timeout=timeout)
    try:
        for attempt in range(retries + 1):
            try:
                r = c.put(url, content=batch,
                          headers={"content-type": "application/octet-stream"})
            except httpx.TransportError:
                if attempt == retries:
                    raise
                time.sleep(0.2 * (attempt + 1))
                continue
            if r.status_code == 201:
                return rid
            if r.status_code >= 500 and attempt < retries:
                time.sleep(0.2 * (attempt + 1))
                continue
            raise Refused(r.status_code, _problem(r))
    finally:
        if own:
            c.close()
    raise AssertionError("unreachable")  # pragma: no cover


def close_round(server: str, round_hex: str, token: str, *, timeout: float = 600.0,
                out: str | os.PathLike | None = None) -> dict[str, Any]:
    """Close the round (mix); with ``out`` also download the signed mixed batch there."""
    import httpx

    base = f"{server.rstrip('/')}/rounds/{round_hex}"
    auth = {"authorization": f"Bearer {token}"}
    with httpx.Client(timeout=timeout) as c:
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
