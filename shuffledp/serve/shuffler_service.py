"""The shuffler as an HTTP service: admitted devices, durable idempotent uploads; ``close`` mixes.

``shuffledp serve shuffler --params params.json --mac-key mac.key --listen HOST:PORT
--data DIR`` runs it. Resources, following the DAP upload conventions where they fit
([DAP]_ Sec. 4.5; the comparison is in ``docs/threat_model.md``): a PUT of the binary batch
under the round id and a report id the device picks (16 random bytes, hex or base64url),
signed with the device's credential, clear status codes, RFC 9457 problem details for every
refusal ([RFC9457]_).

=========================================  ==============================================
``GET /hpke_config``                       round id, digest, the analyzer's public key,
                                           HPKE suite and config id, the figures a device
                                           needs (m, q, r, sizes) and the upload scheme
``GET /rounds/{round}/params``             the round's params.json
``PUT /rounds/{round}/batches/{id}``       upload one device's encrypted batch
                                           (``application/octet-stream``, signed: see
                                           :mod:`shuffledp.serve.admission`): 201 once it
                                           is stored; the same bytes again: 201 again,
                                           counted once
``GET /rounds/{round}``                    status: accepted batches, refusals, closed
``POST /rounds/{round}/close``             (bearer token; client certificate with
                                           ``--client-ca``) mix, write the signed mixed
                                           batch and its report; idempotent
``GET /rounds/{round}/mixed``              (same) the mixed batch, for the analyzer
=========================================  ==============================================

Admission. Only enrolled devices upload (:mod:`shuffledp.serve.admission`: the credential is
checked from the headers before any body byte is read). A device takes at most one place per
round: once a batch of it is accepted, another report id of the same device is refused (409
``device_already_uploaded``; the same id and bytes again is the idempotent retry), and it
has at most two uploads in progress (429 ``upload_in_progress``). Each device is rate
limited (token bucket, 429 ``rate_limited``), on top of the per-address limit of every
request and the connection limits of :mod:`shuffledp.serve.transport`.

Durability. An upload's body streams into a temporary file in ``DIR/round-<round>/batches``
(memory: one chunk per connection). Once complete it is checked against its signed digest
and by the shuffler's own batch checks (:meth:`shuffledp.protocol.shuffler.Shuffler.submit`'s
validation, replay fingerprint, capacity), then fsynced and renamed to
``<seq>.<report id>.<device>.bin`` and the directory fsynced. Only then is it *seen*: its
report id, device and replay fingerprint are recorded and the 201 is sent. While the write
is in flight its fingerprint and place are reserved (a concurrent copy waits or is refused),
and if the write fails the reservation is released: nothing is marked seen that is not
stored, so the device's retry (same id and bytes) succeeds once the disk has room. A full
disk (``ENOSPC``/``EDQUOT``) is answered 507 ``insufficient_storage`` with ``Retry-After``;
another write error 500 ``storage_failure``, equally retryable. On start the service
removes temporary files and rebuilds its state from the stored batches in acceptance order
(``seq``).

Close. The stored batches are submitted, in acceptance order, to a fresh
:class:`~shuffledp.protocol.shuffler.Shuffler` whose spill directory lives in the round's
folder; it mixes into a temporary file that is fsynced and renamed to ``mixed.bin``, then
the receipts and ``mixed.bin.report.json`` are written durably (the report is the commit
point). Any failure (a full disk included: 507) removes the spill directory and the partial
output and leaves the round open with every batch in place, so close can simply be retried;
a crash during close leaves only temporary files, removed at the next start. Once closed,
the per-batch files are deleted and the service forgets which device and report id sent
which batch; it keeps only a receipt per accepted batch, SHA-256(report id || 0x00 ||
SHA-256(batch)), so that a device retrying an upload that was accepted before the close
still gets 201, and any other upload gets 409 ``round_closed``. Close refuses (409
``too_few_batches``) while fewer than ``min_batches`` (default n_min) batches are accepted:
a release needs n_min honest users' noise, and raising ``min_batches`` by k keeps that true
with k dishonest enrolled devices in the round.

Counting. ``n_forwarded`` counts the batches mixed, ``n_dropped`` real users only: enrolled
devices that uploaded something that was refused and never had a batch accepted (or, with
``--expected-users``, the admitted users without an accepted batch), plus batches removed at
mixing for sharing a record with an earlier one. Refused requests (no credential, rate
limits, ...) are counted by reason in ``refused_requests``, not as users.

Refusals (problem type ``urn:shuffledp:problem:<reason>``): 400 with the shuffler's
:data:`~shuffledp.protocol.shuffler.REJECT_REASONS` for a batch it rejects (``malformed``,
``truncated``, ``wrong_digest``, ``incomplete``, ``wrong_key`` when the state holds the
analyzer's key, ...) and ``digest_mismatch``,
``report_too_early`` / ``report_too_old``, ``outdated_config``; 401 ``unauthorized``; 403
``forbidden`` (no client certificate); 404 ``unknown_round``; 408 ``request_timeout``;
409 ``replayed_batch`` / ``over_capacity`` / ``report_id_conflict`` /
``device_already_uploaded`` / ``round_closed`` / ``too_few_batches``; 413
``body_too_large`` (the limit is the exact size of one user's batch); 415
``unsupported_media_type``; 429 ``rate_limited`` / ``upload_in_progress``; 503 ``closing``;
507 ``insufficient_storage``. Randomness (permutation, bucket labels, SipHash key) comes
only from :class:`~shuffledp.protocol.crypto.SecureRandom`; nothing takes a seed.

References
----------
.. [DAP] Geoghegan et al. (2025), "Distributed Aggregation Protocol", Sec. 4.5.1 (HPKE
   configuration), 4.5.2 (upload request) -- full entry in docs/references.md.
.. [RFC9457] Nottingham et al. (2023), "Problem Details for HTTP APIs", RFC 9457 -- full entry in
   docs/references.md.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import os
import re
import shutil
import struct
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from shuffledp.protocol.crypto import KEM_X25519, analyzer_key_id, encrypted_record_bytes
from shuffledp.protocol.params import ProtocolParams
from shuffledp.protocol.shuffler import DEFAULT_MEMORY_LIMIT, Shuffler
from shuffledp.protocol.wire import HEADER_SIZE
from shuffledp.safe_io import atomic_output, read_regular
from shuffledp.serve.admission import (
    REPLAY_WINDOW,
    SCHEME,
    AuthError,
    DeviceRegistry,
)
from shuffledp.serve.common import (
    ProblemError,
    TokenBuckets,
    declared_length,
    durable_write,
    exception_handlers,
    fsync_dir,
    problem,
    receive_to_file,
    storage_error,
)

REPORT_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")
_CONFLICT = ("replayed_batch", "over_capacity", "duplicate_sender")
MIXED_FILE = "mixed.bin"
REPORT_FILE = f"{MIXED_FILE}.report.json"
RECEIPTS_FILE = "receipts.json"
#: uploads of one device in progress at once
MAX_IN_FLIGHT = 2
#: batches validated at once (each holds one batch in memory)
MAX_VALIDATING = 2
HPKE_SUITE = {"kem_id": 0x0020, "kdf_id": 0x0001, "aead_id": 0x0003}
_BATCH_NAME = re.compile(r"(\d{10})\.([A-Za-z0-9_-]{16,64})\.([A-Za-z0-9_-]{1,64})\.bin")
#: a batch stored by a version without admission control (no device id)
_LEGACY_NAME = re.compile(r"(\d{10})-([A-Za-z0-9_-]{16,64})\.bin")

log = logging.getLogger("shuffledp.serve")


def hpke_config_id(public_key: bytes) -> str:
    """The HPKE config id of an analyzer key: the first 8 bytes (hex) of SHA-256 over a label,
    the suite (KEM, KDF, AEAD ids) and the public key. Devices compute it from
    ``analyzer.pub`` offline; a new key (a new setup) gets a new id ([DAP]_ Sec. 4.5.1).

    Parameters
    ----------
    public_key : bytes
        The analyzer's raw X25519 public key.

    Returns
    -------
    str
        16 hex digits.

    Raises
    ------
    TypeError
        ``public_key`` is not bytes-like.
    """
    suite = struct.pack(">HHH", HPKE_SUITE["kem_id"], HPKE_SUITE["kdf_id"],
                        HPKE_SUITE["aead_id"])
    return hashlib.sha256(b"shuffledp/3 hpke config\x00" + suite + bytes(public_key)
                          ).hexdigest()[:16]


def receipt(report_id: str, batch_digest: bytes) -> str:
    """What the service keeps of an accepted batch after close (module docstring).

    Parameters
    ----------
    report_id : str
        The batch's report id.
    batch_digest : bytes
        SHA-256 of the batch.

    Returns
    -------
    str
        SHA-256 (hex) of the report id, a zero byte and the digest: a device that kept both
        can find its receipt in the close report.

    Raises
    ------
    AttributeError
        ``report_id`` is not a string.
    TypeError
        ``batch_digest`` is not bytes.
    """
    return hashlib.sha256(report_id.encode() + b"\x00" + batch_digest).hexdigest()


class ShufflerState:
    """The durable state of one round of the shuffler service (module docstring).

    Parameters
    ----------
    params : ProtocolParams
    data_dir : path
        The service's data directory; the round lives in ``round-<round id>``.
    mac_key : bytes, optional
        The key of the mixed batch's tag (shared with the analyzer).
    memory_limit : int
        Approximate memory of the mixing at close, in bytes.
    expected_users : int, optional
        Users admitted to the round; absent ones count as dropped at close.
    min_batches : int, optional
        Fewest accepted batches close accepts (default: the parameters' n_min).
    analyzer_pub : bytes, optional
        The analyzer's raw X25519 public key. With it, a batch whose header names another
        key (or none) is refused on upload as ``wrong_key``
        (:func:`shuffledp.protocol.crypto.analyzer_key_id`), before it is stored or mixed.
    """

    def __init__(self, params: ProtocolParams, data_dir: str | os.PathLike, *,
                 mac_key: bytes | None = None, memory_limit: int = DEFAULT_MEMORY_LIMIT,
                 expected_users: int | None = None, min_batches: int | None = None,
                 analyzer_pub: bytes | None = None) -> None:
        self.params = params
        self.analyzer_pub: bytes | None = None
        self.key_id: bytes | None = None
        if analyzer_pub is not None:
            self.analyzer_pub = bytes(analyzer_pub)
            # ValueError naming the length for raw bytes that are not a 32-byte key
            self.key_id = analyzer_key_id(self.analyzer_pub)
        self.mac_key = mac_key
        self.memory_limit = memory_limit
        self.expected_users = expected_users
        mb = params.n_min if min_batches is None else min_batches
        if isinstance(mb, bool) or not isinstance(mb, int) or not 1 <= mb <= params.n:
            raise ValueError(f"min_batches must be an integer in [1, n={params.n}], got "
                             f"min_batches={min_batches!r}")
        self.min_batches = mb
        self.round = params.round_id.hex()
        self.dir = Path(data_dir) / f"round-{self.round}"
        self.batch_dir = self.dir / "batches"
        self.batch_dir.mkdir(parents=True, exist_ok=True)
        self.max_body = HEADER_SIZE + params.messages_per_user * encrypted_record_bytes(params)
        # the shuffler's own batch checks (validation and replay fingerprint), nothing stored
        self._checker = Shuffler(params, encrypted=True, memory_limit=1 << 40,
                                 analyzer_key_id=self.key_id)
        self._validating = threading.BoundedSemaphore(MAX_VALIDATING)
        self.lock = threading.Condition()
        # what is stored (and therefore seen): report id -> (seq, device, path, sha256)
        self.files: dict[str, tuple[int, str, Path, bytes]] = {}
        self.by_device: dict[str, str] = {}  # device -> its accepted report id
        self.fingerprints: set[bytes] = set()
        # reserved while a durable write is in flight: report id -> (device, fingerprint)
        self.pending: dict[str, tuple[str, bytes]] = {}
        self.in_flight: Counter = Counter()  # device -> uploads in progress
        self.failed_devices: set[str] = set()
        self.batch_refusals: Counter = Counter()
        self.seq = 0
        self.closing = False
        self.report: dict | None = None
        self.receipts: set[str] = set()
        self.recovered = 0
        self._remove_temporaries()
        if (self.dir / REPORT_FILE).exists() and (self.dir / MIXED_FILE).exists():
            self.report = json.loads((self.dir / REPORT_FILE).read_text())
            if (self.dir / RECEIPTS_FILE).exists():
                self.receipts = set(json.loads((self.dir / RECEIPTS_FILE).read_text()))
            self._forget_batches()  # a crash may have interrupted the forgetting
        else:
            self._recover()

    # ----- start -----
    def _remove_temporaries(self) -> None:
        """Remove what a crash can leave: partial uploads, spill folders and partial outputs
        of an interrupted close (none of them was acknowledged)."""
        for folder in (self.dir, self.batch_dir):
            for entry in folder.iterdir():
                name = entry.name
                if name.startswith(".") and name.endswith(".tmp") and entry.is_file():
                    entry.unlink()
                elif (name.startswith(".close-") or name.startswith("shuffledp-")) and \
                        entry.is_dir() and folder == self.dir:
                    shutil.rmtree(entry, ignore_errors=True)

    def _recover(self) -> None:
        """Rebuild the state from the stored batches, in acceptance order."""
        entries = []
        for f in self.batch_dir.iterdir():
            m = _BATCH_NAME.fullmatch(f.name)
            if m is not None:
                entries.append((int(m.group(1)), m.group(2), m.group(3), f))
            elif (m := _LEGACY_NAME.fullmatch(f.name)) is not None:
                # acknowledged before admission control existed: kept, under a device id no
                # enrolled device can have (enrolment ids cannot hold a dot)
                entries.append((int(m.group(1)), m.group(2), f"legacy.{m.group(1)}", f))
        for seq, rid, dev, f in sorted(entries):
            data = read_regular(f, self.max_body, what="stored batch")
            reason, rows = self._checker._validate(data)
            fp = None if reason or rows is None else self._checker._fingerprint(rows)
            if (fp is None or fp in self.fingerprints or rid in self.files
                    or dev in self.by_device):
                why = reason or ("malformed" if fp is None else "a duplicate")
                raise RuntimeError(f"stored batch {f} is no longer accepted ({why}): the data "
                                   "directory belongs to other parameters or was edited")
            self._record(rid, dev, seq, f, hashlib.sha256(data).digest(), fp)
            self.seq = seq + 1
        if len(self.files) > self.params.n:
            raise RuntimeError(f"{len(self.files)} stored batches exceed n={self.params.n}: "
                               "the data directory belongs to other parameters")
        self.recovered = len(entries)

    def _record(self, rid: str, dev: str, seq: int, path: Path, sha: bytes, fp: bytes) -> None:
        self.files[rid] = (seq, dev, path, sha)
        self.by_device[dev] = rid
        self.fingerprints.add(fp)
        self.failed_devices.discard(dev)

    @property
    def closed(self) -> bool:
        return self.report is not None

    # ----- upload -----
    def begin(self, rid: str, device: str) -> None:
        """Before the body is read: refuse what the headers decide, count an upload of
        ``device`` in progress (:meth:`end` releases it). Raises :class:`ProblemError`."""
        with self.lock:
            if self.closing:
                raise ProblemError(503, "closing", f"round {self.round} is being closed; retry "
                                   "in a few seconds", retry_after=5)
            if not self.closed:
                have = self.by_device.get(device)
                if have is not None and have != rid:
                    raise ProblemError(409, "device_already_uploaded",
                                       f"device {device!r} already holds a place in round "
                                       f"{self.round} (report id {have}); one batch per "
                                       "device and round")
                owner = self.files.get(rid, (None, None))[1] or self.pending.get(rid, (None,))[0]
                if owner is not None and owner != device:
                    raise ProblemError(409, "report_id_conflict",
                                       f"report id {rid} belongs to another device's batch; "
                                       "pick a fresh random id")
            if self.in_flight[device] >= MAX_IN_FLIGHT:
                raise ProblemError(429, "upload_in_progress",
                                   f"device {device!r} has {MAX_IN_FLIGHT} uploads in progress",
                                   retry_after=1)
            self.in_flight[device] += 1

    def end(self, device: str) -> None:
        """The upload :meth:`begin` counted is over."""
        with self.lock:
            self.in_flight[device] -= 1
            if self.in_flight[device] <= 0:
                del self.in_flight[device]

    def incoming(self) -> tuple[int, Path]:
        """A fresh temporary file for an upload's body: (descriptor, path)."""
        path = self.batch_dir / f".incoming-{os.urandom(8).hex()}.tmp"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                         0o600)
        except OSError as e:
            raise storage_error(e) from None
        return fd, path

    def _refuse_batch(self, device: str, reason: str) -> ProblemError:
        with self.lock:
            self.batch_refusals[reason] += 1
            if device not in self.by_device:
                self.failed_devices.add(device)
        status = 409 if reason in _CONFLICT else 400
        return ProblemError(status, reason, _REASON_DETAIL.get(reason, reason))

    def commit(self, rid: str, device: str, fd: int, tmp: Path, sha: bytes) -> tuple[int, str]:
        """Decide on a received body (in ``tmp``, open as ``fd``) and store it durably.

        Returns (201, detail) once the batch is stored (or was already); raises
        :class:`ProblemError` otherwise. Blocking: run it in a worker thread.
        """
        with self.lock:
            while True:
                if self.closed:
                    if receipt(rid, sha) in self.receipts:
                        return 201, "already included in the closed round"
                    raise ProblemError(409, "round_closed",
                                       f"round {self.round} was closed and mixed")
                if self.closing:
                    raise ProblemError(503, "closing", f"round {self.round} is being closed; "
                                       "retry in a few seconds", retry_after=5)
                if rid not in self.pending:
                    break
                self.lock.wait()  # the first write of this id is in flight: its outcome
            if rid in self.files:
                _, owner, _, have = self.files[rid]
                if owner != device or not hmac.compare_digest(have, sha):
                    raise ProblemError(409, "report_id_conflict",
                                       f"report id {rid} already holds another batch; pick a "
                                       "fresh random id")
                return 201, "already stored (idempotent resubmission)"
        with self._validating:  # at most MAX_VALIDATING batches in memory
            size = os.fstat(fd).st_size
            data = os.pread(fd, size, 0)
            reason, rows = self._checker._validate(data)
            fp = None if reason or rows is None else self._checker._fingerprint(rows)
            del data, rows
        if reason is not None or fp is None:  # _validate gives rows whenever reason is None
            raise self._refuse_batch(device, reason or "malformed")
        with self.lock:
            if self.closed or self.closing or rid in self.pending or rid in self.files:
                # decided meanwhile by a concurrent request: answer as that one did
                pass
            elif device in self.by_device or any(d == device for d, _ in self.pending.values()):
                raise ProblemError(409 if device in self.by_device else 429,
                                   "device_already_uploaded" if device in self.by_device
                                   else "upload_in_progress",
                                   f"device {device!r} already holds or is taking a place in "
                                   f"round {self.round}", retry_after=None
                                   if device in self.by_device else 1)
            elif fp in self.fingerprints or any(f == fp for _, f in self.pending.values()):
                raise self._refuse_locked(device, "replayed_batch")
            elif len(self.files) + len(self.pending) >= self.params.n:
                raise self._refuse_locked(device, "over_capacity")
            else:
                seq, self.seq = self.seq, self.seq + 1
                self.pending[rid] = (device, fp)
                return self._store(rid, device, seq, fd, tmp, sha, fp)
        return self.commit(rid, device, fd, tmp, sha)

    def _refuse_locked(self, device: str, reason: str) -> ProblemError:
        self.batch_refusals[reason] += 1
        if device not in self.by_device:
            self.failed_devices.add(device)
        return ProblemError(409 if reason in _CONFLICT else 400, reason,
                            _REASON_DETAIL.get(reason, reason))

    def _store(self, rid: str, device: str, seq: int, fd: int, tmp: Path, sha: bytes,
               fp: bytes) -> tuple[int, str]:
        """Called with the lock held and ``rid`` reserved; releases the lock during the
        write."""
        final = self.batch_dir / f"{seq:010d}.{rid}.{device}.bin"
        self.lock.release()
        try:
            try:
                os.fsync(fd)
                os.rename(tmp, final)
                fsync_dir(self.batch_dir)
                error = None
            except OSError as e:
                final.unlink(missing_ok=True)  # not acknowledged: never recovered either
                error = storage_error(e)
        finally:
            self.lock.acquire()
        del self.pending[rid]
        if error is None:
            self._record(rid, device, seq, final, sha, fp)
        self.lock.notify_all()
        if error is not None:
            log.warning("upload not stored (%s); the device may retry", error.reason)
            raise error
        return 201, "stored"

    # ----- status and close -----
    def status(self) -> dict[str, Any]:
        with self.lock:
            if self.closed:
                return {"round": self.round, "closed": True, "report": self.report}
            return {"round": self.round, "closed": False, "closing": self.closing,
                    "accepted": len(self.files), "capacity": self.params.n,
                    "min_batches": self.min_batches, "rejected": dict(self.batch_refusals),
                    "recovered": self.recovered}

    def close(self, refused_requests: dict | None = None) -> dict:
        """Mix the stored batches, write the signed mixed batch and its report durably, then
        forget the batches (module docstring). Idempotent. Raises :class:`ProblemError` (409
        ``too_few_batches`` / ``closing``, 507 / 500 for a failed write: retry later) and
        RuntimeError for a stored batch the shuffler no longer accepts."""
        with self.lock:
            if self.report is not None:  # closed
                return self.report
            if self.closing:
                raise ProblemError(409, "closing", "another close is in progress",
                                   retry_after=5)
            while self.pending:  # every acknowledged write is complete
                self.lock.wait()
            n = len(self.files)
            if n < self.min_batches:
                raise ProblemError(409, "too_few_batches",
                                   f"{n} batches accepted, close needs at least "
                                   f"{self.min_batches} (n_min = {self.params.n_min}: the "
                                   "noise is planned for that many honest users)")
            self.closing = True
            entries = sorted((seq, rid, dev, path, sha)
                             for rid, (seq, dev, path, sha) in self.files.items())
            failed = len(self.failed_devices - set(self.by_device))
            refusals = Counter(self.batch_refusals)
        try:
            report, receipts = self._mix(entries, failed, refusals, refused_requests or {})
        except OSError as e:
            with self.lock:
                self.closing = False
                self.lock.notify_all()
            log.warning("close failed (%s); the round stays open, retry close", e.strerror)
            raise storage_error(e) from None
        except BaseException:
            with self.lock:
                self.closing = False
                self.lock.notify_all()
            raise
        with self.lock:
            self.report, self.receipts = report, receipts
            self.closing = False
            self.files, self.by_device, self.fingerprints = {}, {}, set()
            self.failed_devices = set()
            self.lock.notify_all()
        self._forget_batches()
        return report

    def _mix(self, entries: list, failed: int, refusals: Counter,
             refused_requests: dict) -> tuple[dict, set[str]]:
        work = Path(tempfile.mkdtemp(prefix=".close-", dir=self.dir))
        out = self.dir / MIXED_FILE
        s = Shuffler(self.params, encrypted=True, mac_key=self.mac_key,
                     workdir=os.fspath(work), memory_limit=self.memory_limit,
                     analyzer_key_id=self.key_id)
        written = False
        try:
            for _seq, rid, _dev, path, _sha in entries:
                data = read_regular(path, self.max_body, what="stored batch")
                if not s.submit(data, sender=rid):
                    raise RuntimeError(f"stored batch {path} is no longer accepted: the data "
                                       "directory was edited")
            if self.expected_users is not None:
                s.missing(max(0, self.expected_users - s.n_users_seen))
            else:
                s.report.n_failed_users += failed
            with atomic_output(out) as fh:
                written = True
                header = s.mix_to(fh)
                fh.flush()
                os.fsync(fh.fileno())
            fsync_dir(self.dir)
            report = s.report.to_dict()
            rejected = Counter(report["rejected"])
            rejected.update(refusals)
            report.update(rejected=dict(rejected), path="encrypted",
                          n_batch_files=len(entries), mixed_batch=os.fspath(out),
                          digest=self.params.digest.hex(), round_id=self.round,
                          authenticated=header.keyed,
                          refused_requests={k: v for k, v in refused_requests.items() if v})
            receipts = {receipt(rid, sha) for _seq, rid, _dev, _path, sha in entries}
            durable_write(self.dir / RECEIPTS_FILE, json.dumps(sorted(receipts)).encode())
            durable_write(self.dir / REPORT_FILE, (json.dumps(report) + "\n").encode())
            return report, receipts
        except BaseException:
            if written:
                out.unlink(missing_ok=True)
            (self.dir / RECEIPTS_FILE).unlink(missing_ok=True)
            raise
        finally:
            s.close()
            shutil.rmtree(work, ignore_errors=True)

    def _forget_batches(self) -> None:
        try:
            for f in self.batch_dir.iterdir():
                f.unlink()
            fsync_dir(self.batch_dir)
        except OSError as e:  # removed at the next start
            log.warning("could not remove the mixed batches' files (%s)", e.strerror)


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
    "wrong_key": "sealed to another analyzer key than this round's (the header's key id)",
    "over_capacity": "the round already holds the n batches its parameters provision for",
    "duplicate_sender": "this report id already holds a batch",
}


def make_app(state: ShufflerState, *, token: str, registry: DeviceRegistry,
             analyzer_pub: bytes | None = None, body_timeout: float = 30.0,
             replay_window: float = REPLAY_WINDOW, device_rate: float = 0.5,
             device_burst: float = 10.0, require_client_cert: bool = False,
             counters: Counter | None = None, connections: Counter | None = None):
    """The Starlette application around ``state``.

    Parameters
    ----------
    token : str
        The operator's bearer token (close and the mixed batch).
    registry : DeviceRegistry
        The enrolled devices (uploads).
    analyzer_pub : bytes, optional
        The analyzer's X25519 public key, published at ``/hpke_config``; its config id is
        then checked against the one an upload names. Default: ``state.analyzer_pub`` (the
        key whose id the state checks in every batch's header); another key than the
        state's is refused.
    body_timeout : float
        Seconds a client has to send a whole batch (408 after).
    replay_window : float
        Seconds an upload's signed timestamp may differ from the server's clock.
    device_rate, device_burst : float
        Upload attempts per second and burst allowed per device.
    require_client_cert : bool
        Close and the mixed batch also need a client certificate (mutual TLS).
    counters : collections.Counter, optional
        The refusal counts of :func:`shuffledp.serve.common.guard` (in the status and the
        close report).
    connections : collections.Counter, optional
        The connection events of :mod:`shuffledp.serve.transport` (in the status).

    Returns
    -------
    starlette.applications.Starlette
        The ASGI application (wrap it in :func:`shuffledp.serve.common.guard`).

    Raises
    ------
    ValueError
        ``device_rate`` not positive and finite, or ``device_burst`` < 1.
    """
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import FileResponse, JSONResponse, Response
    from starlette.routing import Route

    if analyzer_pub is None:
        analyzer_pub = state.analyzer_pub
    elif state.analyzer_pub is not None and bytes(analyzer_pub) != state.analyzer_pub:
        raise ValueError("analyzer_pub differs from the key the ShufflerState checks batches "
                         f"against (key id {state.key_id.hex() if state.key_id else None})")
    config_id = hpke_config_id(analyzer_pub) if analyzer_pub is not None else None
    devices = TokenBuckets(device_rate, device_burst)
    counters = counters if counters is not None else Counter()
    connections = connections if connections is not None else Counter()
    p = state.params

    def operator(request):
        """None if the request may close / fetch, else the problem response."""
        scheme, _, got = request.headers.get("authorization", "").strip().partition(" ")
        if not (scheme.lower() == "bearer" and hmac.compare_digest(got.strip().encode(),
                                                                   token.encode())):
            return problem(401, "unauthorized", "close and the mixed batch need the operator's "
                           "bearer token", headers={"www-authenticate": "Bearer"})
        if require_client_cert:
            tls = (request.scope.get("extensions") or {}).get("tls") or {}
            if not tls.get("client_cert"):
                return problem(403, "forbidden", "close and the mixed batch need a client "
                               "certificate issued by the service's --client-ca (mutual TLS)")
        return None

    def wrong_round(rnd: str):
        if rnd != state.round:
            return problem(404, "unknown_round",
                           f"this server runs round {state.round}, not {rnd[:80]!r}", close=True)
        return None

    async def hpke_config(request):
        body = {"round": state.round, "digest": p.digest.hex(), "kem": KEM_X25519,
                "suite": HPKE_SUITE,
                "info": "b'shuffledp/3 hpke message\\x00' || digest || round id || "
                        "coordinate (uint32 LE); aad empty",
                "max_body": state.max_body,
                "params": {"m": p.m, "q": p.q, "r": p.r, "n": p.n, "n_min": p.n_min,
                           "messages_per_user": p.messages_per_user,
                           "share_bytes": p.share_bytes,
                           "record_bytes": encrypted_record_bytes(p),
                           "header_bytes": HEADER_SIZE},
                "upload": {"method": "PUT", "path": "/rounds/{round}/batches/{report_id}",
                           "auth_scheme": SCHEME, "content_digest": "sha-256",
                           "replay_window": replay_window}}
        if analyzer_pub is not None:
            body["public_key"] = analyzer_pub.hex()
            body["config_id"] = config_id
        return JSONResponse(body)

    async def params(request):
        if (bad := wrong_round(request.path_params["round"])) is not None:
            return bad
        return Response(p.to_json() + "\n", media_type="application/json")

    async def upload(request):
        rnd, rid = request.path_params["round"], request.path_params["rid"]
        if (bad := wrong_round(rnd)) is not None:
            return bad
        if not REPORT_ID.fullmatch(rid):
            return problem(400, "bad_report_id", f"report id {rid[:80]!r}", close=True)
        ctype = request.headers.get("content-type", "application/octet-stream")
        if ctype.split(";")[0].strip().lower() != "application/octet-stream":
            return problem(415, "unsupported_media_type", f"Content-Type {ctype[:80]!r}",
                           close=True)
        try:
            device, want = registry.verify(request.headers, round_id=p.round_id,
                                           report_id=rid, config_id=config_id,
                                           window=replay_window)
        except AuthError as e:
            headers = {"www-authenticate": f'{SCHEME} realm="shuffler"'} \
                if e.status == 401 else None
            return problem(e.status, e.reason, e.detail, headers=headers, close=True)
        request.state.device = device
        wait = devices.take(device)
        if wait > 0:
            return problem(429, "rate_limited", f"too many uploads from device {device!r}; "
                           f"retry after {math.ceil(wait)} s",
                           headers={"retry-after": str(math.ceil(wait))}, close=True)
        try:
            declared_length(request, state.max_body)
            state.begin(rid, device)
        except ProblemError as e:
            return e.response(close=True)
        fd, tmp = -1, None
        try:
            fd, tmp = state.incoming()
            _, sha = await receive_to_file(request, fd, state.max_body, body_timeout)
            if not hmac.compare_digest(sha, want):
                raise ProblemError(400, "digest_mismatch", "the body's SHA-256 differs from "
                                   "the signed Content-Digest")
            status, _ = await run_in_threadpool(state.commit, rid, device, fd, tmp, sha)
        except ProblemError as e:
            return e.response()
        finally:
            if fd >= 0:
                os.close(fd)
            if tmp is not None:
                tmp.unlink(missing_ok=True)  # renamed away once stored
            state.end(device)
        return Response(status_code=status, headers={
            "Location": f"/rounds/{state.round}/batches/{rid}"})

    async def status(request):
        if (bad := wrong_round(request.path_params["round"])) is not None:
            return bad
        body = await run_in_threadpool(state.status)
        body["refused_requests"] = {k: v for k, v in counters.items() if v}
        body["connections"] = {k: v for k, v in connections.items() if v}
        return JSONResponse(body)

    async def close(request):
        if (bad := wrong_round(request.path_params["round"])) is not None:
            return bad
        if (bad := operator(request)) is not None:
            return bad
        try:
            report = await run_in_threadpool(state.close, dict(counters))
        except ProblemError as e:
            return e.response()
        except RuntimeError as e:
            return problem(500, "internal_error", str(e))
        return JSONResponse(report)

    async def mixed(request):
        if (bad := wrong_round(request.path_params["round"])) is not None:
            return bad
        if (bad := operator(request)) is not None:
            return bad
        if not state.closed:
            return problem(409, "unavailable", "the round is not closed yet")
        return FileResponse(state.dir / MIXED_FILE, media_type="application/octet-stream")

    routes = [
        Route("/hpke_config", hpke_config, methods=["GET"]),
        Route("/rounds/{round}/params", params, methods=["GET"]),
        Route("/rounds/{round}/batches/{rid}", upload, methods=["PUT"]),
        Route("/rounds/{round}", status, methods=["GET"]),
        Route("/rounds/{round}/close", close, methods=["POST"]),
        Route("/rounds/{round}/mixed", mixed, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers=exception_handlers())


__all__ = ["MIXED_FILE", "REPORT_ID", "ShufflerState", "hpke_config_id", "make_app", "receipt"]
