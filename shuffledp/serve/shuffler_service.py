"""The shuffler as an HTTP service: durable, idempotent batch upload; ``close`` mixes.

``shuffledp serve shuffler --params params.json --mac-key mac.key --listen HOST:PORT
--data DIR`` runs it. Resources, following the DAP upload conventions where they fit
([DAP]_ Sec. 4.5): a PUT of the binary batch under the round id and a report id the device
picks (16 random bytes, hex or base64url), clear status codes, RFC 9457 problem details for
every refusal ([RFC9457]_).

=====================================  =================================================
``GET /hpke_config``                   the round id, digest and the analyzer's public key
                                       and HPKE suite (if ``--analyzer-pub`` was given)
``PUT /rounds/{round}/batches/{id}``   upload one user's encrypted batch
                                       (``application/octet-stream``): 201 once it is
                                       stored; the same bytes again: 201 again, counted
                                       once; other bytes under an accepted id: 409
``GET /rounds/{round}``                status: accepted batches, rejections, closed
``POST /rounds/{round}/close``         (bearer token) mix, write the signed mixed batch
                                       and its report; idempotent
``GET /rounds/{round}/mixed``          (bearer token) the mixed batch, for the analyzer
=====================================  =================================================

Durability. A batch the shuffler accepts (:meth:`shuffledp.protocol.shuffler.Shuffler.submit`) is
written to ``DIR/round-<round>/batches/<seq>-<id>.bin`` with :func:`durable_write` (file
and directory fsynced) *before* the 201 is sent, so a crash loses nothing acknowledged. On
start the service rebuilds the :class:`~shuffledp.protocol.shuffler.Shuffler` by submitting the
stored batches again in acceptance order (``seq``), with the same sender ids: the replay
fingerprints, the capacity count and first-kept-wins among acknowledged batches are exactly
those of a run without the crash. (Writes of concurrent uploads overlap, so a crash can keep
batch k + 1 and lose batch k; k was never acknowledged, its device retries with the same id
and bytes, and the order of the acknowledged batches is unchanged.) A batch whose storage
fails is answered 500 and the service refuses further uploads
(503) until it is restarted, since its memory then holds a batch the disk does not.
``close`` writes ``mixed.bin`` and ``mixed.bin.report.json`` durably (the same files as
``shuffledp shuffle --out``, so ``shuffledp analyze --in DIR/round-<round>/mixed.bin``
reads them), then deletes the per-batch files: the shuffler forgets which report id sent
which ciphertexts once they are mixed. Rejected uploads are not stored: the rejection counts
of ``GET /rounds/{round}`` and of the report cover the uploads since the last start.

Refusals (problem type ``urn:shuffledp:problem:<reason>``): 400 with the shuffler's
:data:`~shuffledp.protocol.shuffler.REJECT_REASONS` for a batch it rejects (``malformed``,
``truncated``, ``wrong_digest``, ``incomplete``, ...), 409 ``replayed_batch`` /
``over_capacity`` / ``report_id_conflict`` / ``round_closed``, 404 ``unknown_round``, 413
``body_too_large`` (the limit is the exact size of one user's batch), 408
``request_timeout`` (the body must arrive within ``--body-timeout``), 415
``unsupported_media_type``, 401 ``unauthorized``. Randomness (permutation, bucket labels,
SipHash key) comes only from :class:`~shuffledp.protocol.crypto.SecureRandom`; nothing takes a seed.

References
----------
.. [DAP] T. Geoghegan, C. Patton, B. Pitman, E. Rescorla, C. A. Wood, "Distributed
   Aggregation Protocol for Privacy Preserving Measurement", draft-ietf-ppm-dap-16, 2025,
   Sec. 4.5.1 (HPKE configuration), 4.5.2 (upload request).
.. [RFC9457] M. Nottingham, E. Wilde, S. Dalal, "Problem Details for HTTP APIs", RFC 9457,
   2023.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import threading
from pathlib import Path
from typing import Any

from shuffledp.protocol.crypto import KEM_X25519, encrypted_record_bytes
from shuffledp.protocol.params import ProtocolParams
from shuffledp.protocol.shuffler import Shuffler
from shuffledp.protocol.wire import HEADER_SIZE
from shuffledp.safe_io import atomic_output
from shuffledp.serve.common import BodyError, durable_write, problem, read_body

REPORT_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")
_CONFLICT = ("replayed_batch", "over_capacity", "duplicate_sender")
MIXED_FILE = "mixed.bin"


class ShufflerState:
    """One round's shuffler with its durable log (framework-free; the app wraps it)."""

    def __init__(self, params: ProtocolParams, data_dir: str | os.PathLike, *,
                 mac_key: bytes, memory_limit: int = 256 << 20,
                 expected_users: int | None = None) -> None:
        self.params = params
        self.round = params.round_id.hex()
        self.dir = Path(data_dir) / f"round-{self.round}"
        self.batch_dir = self.dir / "batches"
        self.batch_dir.mkdir(parents=True, exist_ok=True)
        self.mac_key = mac_key
        self.memory_limit = memory_limit
        self.expected_users = expected_users
        self.max_body = HEADER_SIZE + params.messages_per_user * encrypted_record_bytes(params)
        self.lock = threading.Condition()
        self.pending: set[str] = set()  # accepted, durable write in flight
        self.broken: str | None = None
        self.digests: dict[str, bytes] = {}  # report id -> SHA-256 of the accepted bytes
        self.seq = 0
        self.report: dict | None = None
        self.recovered = 0
        mixed = self.dir / MIXED_FILE
        if mixed.exists() and (self.dir / f"{MIXED_FILE}.report.json").exists():
            self.report = json.loads((self.dir / f"{MIXED_FILE}.report.json").read_text())
            self.shuffler = None
        else:
            self.shuffler = Shuffler(params, encrypted=True, mac_key=mac_key,
                                     workdir=os.fspath(self.dir), memory_limit=memory_limit)
            self._recover()

    def _recover(self) -> None:
        """Submit the stored batches again in acceptance order (same sender ids)."""
        for tmp in self.batch_dir.glob(".*.tmp"):  # a write the crash cut short: never acked
            tmp.unlink()
        files = sorted(self.batch_dir.glob("*.bin"))
        for f in files:
            seq, _, rid = f.stem.partition("-")
            data = f.read_bytes()
            if not self.shuffler.submit(data, sender=rid):
                raise RuntimeError(f"stored batch {f} is no longer accepted: the data "
                                   "directory belongs to other parameters or was edited")
            self.digests[rid] = hashlib.sha256(data).digest()
            self.seq = int(seq) + 1
        self.recovered = len(files)

    @property
    def closed(self) -> bool:
        return self.report is not None

    def upload(self, rid: str, data: bytes) -> tuple[int, str | None, str]:
        """(status, problem reason or None, detail).

        The shuffler's decision is serialised by :attr:`lock` (it fixes the acceptance order
        and the file's sequence number); the durable write runs outside it, so concurrent
        uploads share the disk's flushes. The 201 is returned only after this batch's write
        (file and directory fsynced) completed; a resubmission that arrives while the first
        write is in flight waits for it.
        """
        with self.lock:
            if self.broken:
                return 503, "unavailable", self.broken
            if self.closed:
                return 409, "round_closed", f"round {self.round} was closed and mixed"
            h = hashlib.sha256(data).digest()
            if rid in self.digests:
                if not hmac.compare_digest(self.digests[rid], h):
                    return 409, "report_id_conflict", (
                        f"report id {rid} already holds another batch; pick a fresh random id")
                while rid in self.pending and not self.broken:
                    self.lock.wait()
                if self.broken:
                    return 503, "unavailable", self.broken
                return 201, None, "already stored (idempotent resubmission)"
            before = dict(self.shuffler.report.rejected)
            if not self.shuffler.submit(data, sender=rid):
                after = self.shuffler.report.rejected
                reason = next((k for k in after if after[k] != before.get(k, 0)), "malformed")
                # a rejected upload does not burn the id (the device may fix and resubmit)
                return (409 if reason in _CONFLICT else 400), reason, _REASON_DETAIL.get(
                    reason, reason)
            seq, self.seq = self.seq, self.seq + 1
            self.digests[rid] = h
            self.pending.add(rid)
        try:
            durable_write(self.batch_dir / f"{seq:010d}-{rid}.bin", data)
        except OSError as e:
            with self.lock:
                self.broken = (f"storage failed ({e.strerror or e}); restart the service to "
                               "recover from the stored batches")
                self.pending.discard(rid)
                self.lock.notify_all()
            return 500, "storage_failure", self.broken
        with self.lock:
            self.pending.discard(rid)
            self.lock.notify_all()
        return 201, None, "stored"

    def status(self) -> dict[str, Any]:
        with self.lock:
            if self.closed:
                return {"round": self.round, "closed": True, "report": self.report}
            r = self.shuffler.report
            return {"round": self.round, "closed": False, "accepted": r.n_forwarded,
                    "capacity": self.params.n, "rejected": dict(r.rejected),
                    "recovered": self.recovered}

    def close(self) -> dict:
        """Mix, write the signed mixed batch and its report durably, forget the batches."""

        with self.lock:
            while self.pending and not self.broken:  # every acknowledged write is complete
                self.lock.wait()
            if self.closed:
                return self.report
            if self.broken:
                raise RuntimeError(self.broken)
            s = self.shuffler
            if s.report.n_forwarded == 0:
                raise ValueError("no batch was accepted in this round: nothing to mix")
            if self.expected_users is not None:
                s.missing(max(0, self.expected_users - s.n_users_seen))
            out = self.dir / MIXED_FILE
            with atomic_output(out) as fh:
                header = s.mix_to(fh)
                fh.flush()
                os.fsync(fh.fileno())
            report = s.report.to_dict()
            report.update(path="encrypted", n_batch_files=self.seq, mixed_batch=os.fspath(out),
                          digest=self.params.digest.hex(), round_id=self.round,
                          authenticated=header.keyed)
            durable_write(self.dir / f"{MIXED_FILE}.report.json",
                          (json.dumps(report) + "\n").encode())
            for f in self.batch_dir.glob("*.bin"):
                f.unlink()
            self.report = report
            self.shuffler = None
            return report


_REASON_DETAIL = {
    "malformed": "the batch does not parse (header, or longer than its header promises)",
    "truncated": "fewer bytes than the header promises",
    "wrong_digest": "produced under other protocol parameters or in another round",
    "wrong_kind": "not an encrypted user batch",
    "wrong_record_size": "records of the wrong size for these parameters",
    "coordinate_out_of_range": "a coordinate >= m",
    "incomplete": "not exactly r messages for every coordinate",
    "replayed_batch": "the same records as an accepted batch (any order, any id)",
    "duplicate_record": "an ephemeral key twice in one batch",
    "over_capacity": "the round already holds the n batches its parameters provision for",
    "duplicate_sender": "this report id already holds a batch",
}


def make_app(state: ShufflerState, *, token: str, analyzer_pub: bytes | None = None,
             body_timeout: float = 30.0):
    """The Starlette application around ``state`` (``token`` guards close and mixed)."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import FileResponse, JSONResponse, Response
    from starlette.routing import Route

    def authorised(request) -> bool:
        got = request.headers.get("authorization", "")
        return hmac.compare_digest(got.encode(), f"Bearer {token}".encode())

    def wrong_round(rnd: str):
        if rnd != state.round:
            return problem(404, "unknown_round",
                           f"this server runs round {state.round}, not {rnd!r}")
        return None

    async def hpke_config(request):
        body = {"round": state.round, "digest": state.params.digest.hex(),
                "kem": KEM_X25519, "suite": {"kem_id": 0x0020, "kdf_id": 0x0001,
                                             "aead_id": 0x0003},
                "info": "b'shuffledp/3 hpke message\\x00' || digest || round id || "
                        "coordinate (uint32 LE); aad empty",
                "max_body": state.max_body}
        if analyzer_pub is not None:
            body["public_key"] = analyzer_pub.hex()
        return JSONResponse(body)

    async def upload(request):
        rnd, rid = request.path_params["round"], request.path_params["rid"]
        if (bad := wrong_round(rnd)) is not None:
            return bad
        if not REPORT_ID.fullmatch(rid):
            return problem(400, "bad_report_id", f"report id {rid[:80]!r}")
        ctype = request.headers.get("content-type", "application/octet-stream")
        if ctype.split(";")[0].strip().lower() != "application/octet-stream":
            return problem(415, "unsupported_media_type", f"Content-Type {ctype[:80]!r}")
        try:
            data = await read_body(request, state.max_body, body_timeout)
        except BodyError as e:
            return problem(e.status, e.reason, e.detail)
        status, reason, detail = await run_in_threadpool(state.upload, rid, data)
        if reason is not None:
            return problem(status, reason, detail)
        return Response(status_code=status, headers={
            "Location": f"/rounds/{state.round}/batches/{rid}"})

    async def status(request):
        if (bad := wrong_round(request.path_params["round"])) is not None:
            return bad
        return JSONResponse(await run_in_threadpool(state.status))

    async def close(request):
        if (bad := wrong_round(request.path_params["round"])) is not None:
            return bad
        if not authorised(request):
            return problem(401, "unauthorized", "close needs the operator's bearer token")
        try:
            report = await run_in_threadpool(state.close)
        except ValueError as e:
            return problem(409, "unavailable", str(e))
        except RuntimeError as e:
            return problem(503, "unavailable", str(e))
        return JSONResponse(report)

    async def mixed(request):
        if (bad := wrong_round(request.path_params["round"])) is not None:
            return bad
        if not authorised(request):
            return problem(401, "unauthorized", "the mixed batch is for the analyzer only")
        if not state.closed:
            return problem(409, "unavailable", "the round is not closed yet")
        return FileResponse(state.dir / MIXED_FILE, media_type="application/octet-stream")

    async def not_found(request, exc):
        return problem(getattr(exc, "status_code", 404),
                       "not_found" if getattr(exc, "status_code", 404) == 404 else "unavailable",
                       f"{request.method} {request.url.path}")

    routes = [
        Route("/hpke_config", hpke_config, methods=["GET"]),
        Route("/rounds/{round}/batches/{rid}", upload, methods=["PUT"]),
        Route("/rounds/{round}", status, methods=["GET"]),
        Route("/rounds/{round}/close", close, methods=["POST"]),
        Route("/rounds/{round}/mixed", mixed, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})


__all__ = ["MIXED_FILE", "REPORT_ID", "ShufflerState", "make_app"]
