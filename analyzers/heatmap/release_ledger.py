"""The release ledger: each round of the shuffle protocol is released at most once.

Why. Two mixed batches of one round hold the same users' messages: if the first holds users
0-5 and the second users 0-4, the difference of the two releases' sums is user 5's noisy
vector exactly, whatever the noise (each user's noise is in both sums and cancels). The
guarantee a release states holds for *one* release per round; the protocol gives no budget
for a second. So the analyzer records every release of a round in a ledger and refuses a
second one.

What identifies a round. The round id (16 random bytes drawn by ``shuffledp setup``, in
``params.json``; it enters the parameter digest in every batch header and the HPKE ``info``
of every message, so a message of round R opens only as a message of round R). Every mixed
batch of R, whichever users it holds, a subset or a superset of an earlier one, a
re-shuffle or a splice, is a batch of R. The ledger keys on the round id alone, so "users
0-4 after users 0-5" is refused without the analyzer having to know who the users are (it
cannot: the mixing hides it).

What is allowed again. Analysing a batch whose sums mod q are exactly those already released
(the same file again, or the same users' messages in another order) reproduces the same
release: it is post-processing of what was published and costs no privacy. The ledger keeps
a digest of the released sums (SHA-256 over the parameter digest, the number of users summed
and the sums; :func:`sums_digest`) and answers such a request as a *repeat* instead of a
refusal, so an analyzer that crashed after recording and before writing its output can
finish. Any other batch of the round is refused.

The file. The ledger is a :class:`shuffledp.safe_io.ChainedLog` (the primitive the budget
ledger uses too): JSON lines, each entry hash-chained to the one before, its head stored in
``<ledger>.head``, read, verified and appended only under an exclusive ``flock`` on
``<ledger>.lock``, every append fsynced before it returns. An entry's body holds
``version``, ``round_id``, ``digest``, ``sums_sha256``, ``n_users``, ``n_unreadable``,
``n_dropped``, ``label`` and ``time``. The round is checked and the entry appended under one
lock, so two analyzers racing on one round cannot both record it; a ledger that does not
verify (an entry edited or deleted, the ledger truncated) refuses every release until it is
repaired (fail closed).

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially private heatmaps" -- full entry in
   docs/references.md
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from shuffledp.errors import Refused
from shuffledp.safe_io import ChainedLog, LockBusy, TamperedLog, UnsafeFileError

LEDGER_VERSION = 1


class RoundAlreadyReleased(Refused, RuntimeError):
    """A release of this round is already recorded (with other sums): a second one is
    refused."""


class LedgerError(Refused, RuntimeError):
    """The ledger cannot be read, verified or written: no release is recorded, so none is
    made (fail closed)."""


def sums_digest(digest: bytes, n_users: int, sums: np.ndarray) -> str:
    """SHA-256 (hex) identifying a release's input: parameter digest, users summed, sums.

    Parameters
    ----------
    digest : bytes
        The parameter digest (``ProtocolParams.digest``; it covers the round id).
    n_users : int
        Users whose messages are in the sums.
    sums : ndarray
        The sums mod q per coordinate.

    Returns
    -------
    str
        The 64-character hex digest.

    Raises
    ------
    TypeError
        If ``digest`` is not bytes-like or ``sums`` not numeric.
    OverflowError
        If ``n_users`` is negative or does not fit in 8 bytes.

    References
    ----------
    [Ghazi23]_ App. F (the guarantee covers one release per round; the digest tells a repeat
    of that release from a new one).
    """
    h = hashlib.sha256(b"shuffledp release sums\x00")
    h.update(bytes(digest))
    h.update(int(n_users).to_bytes(8, "little"))
    h.update(np.ascontiguousarray(sums, dtype="<i8").tobytes())
    return h.hexdigest()


class ReleaseLedger:
    """The rounds released so far, in a file (``path``) or in this process only (None).

    Parameters
    ----------
    path : path-like or None
        The ledger file (created on the first release; its folder must exist). None keeps
        the ledger in memory: it refuses a second release of a round within this process
        only.
    """

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = None if path is None else Path(path)
        self._memory: list[dict[str, Any]] = []

    def __repr__(self) -> str:
        return f"ReleaseLedger({os.fspath(self.path) if self.path else None!r})"

    @property
    def label(self) -> str:
        return os.fspath(self.path) if self.path is not None else "(this process)"

    # ------------------------------------------------------------------ reading
    @contextlib.contextmanager
    def _locked(self) -> Iterator[tuple[list[dict[str, Any]], Any]]:
        """(entries, append) under the lock; I/O and verification failures are
        :class:`LedgerError` (a refusal: nothing is released)."""
        if self.path is None:
            yield list(self._memory), self._memory.append
            return
        try:
            with ChainedLog(self.path, what="release ledger").locked() as log:
                yield [dict(b) for b in log.bodies], log.append
        except (TamperedLog, LockBusy) as e:
            raise LedgerError(f"{e}; no release is recorded or made until the ledger is "
                              "repaired") from None
        except (UnsafeFileError, OSError) as e:
            raise LedgerError(f"release ledger {self.path}: {e}; not releasing") from None

    def entries(self) -> list[dict[str, Any]]:
        """Every recorded release, oldest first (the ledger is verified first)."""
        with self._locked() as (entries, _):
            return entries

    def released(self, round_id: bytes | str) -> dict[str, Any] | None:
        """The recorded release of ``round_id`` (bytes or hex), or None."""
        rid = round_id.hex() if isinstance(round_id, (bytes, bytearray)) else str(round_id)
        return next((e for e in self.entries() if e["round_id"] == rid), None)

    def _decide(self, entries: list[dict[str, Any]], round_id: str, sums: str
                ) -> tuple[int, dict[str, Any]] | None:
        for i, e in enumerate(entries):
            if e.get("round_id") != round_id:
                continue
            if e.get("sums_sha256") == sums:
                return i, e
            raise RoundAlreadyReleased(
                f"round {round_id} was already released ({e.get('time', '?')}, "
                f"{e.get('n_users', '?')} users, {e.get('label') or 'no label'}; release "
                f"ledger {self.label}, entry {i + 1}); a second release of a round with other "
                "messages would reveal the difference of the two sums (one user's noisy "
                "vector when the batches differ by one user). Not releasing")
        return None

    def check(self, round_id: bytes, sums_sha256: str) -> dict[str, Any] | None:
        """Raise :class:`RoundAlreadyReleased` if the round was released with other sums;
        the recorded entry if these sums were released already (a repeat), else None."""
        found = self._decide(self.entries(), bytes(round_id).hex(), sums_sha256)
        return None if found is None else found[1]

    # ------------------------------------------------------------------ recording
    def record(self, *, round_id: bytes, digest: bytes, sums_sha256: str, n_users: int,
               n_unreadable: int = 0, n_dropped: int = 0, label: str = ""
               ) -> tuple[int, dict[str, Any], bool]:
        """Record a release of ``round_id`` (checked and appended under one lock), or
        recognise a repeat.

        Returns
        -------
        index : int
            1-based position of the entry in the ledger.
        entry : dict
            The recorded entry.
        repeat : bool
            True when these exact sums of the round were recorded before (nothing appended).

        Raises
        ------
        RoundAlreadyReleased
            Another release of the round is recorded.
        LedgerError
            The ledger does not verify or cannot be written (nothing is released then).
        """
        rid = bytes(round_id).hex()
        with self._locked() as (entries, append):
            found = self._decide(entries, rid, sums_sha256)
            if found is not None:
                return found[0] + 1, found[1], True
            entry = {"version": LEDGER_VERSION, "round_id": rid, "digest": bytes(digest).hex(),
                     "sums_sha256": sums_sha256, "n_users": int(n_users),
                     "n_unreadable": int(n_unreadable), "n_dropped": int(n_dropped),
                     "label": str(label),
                     "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            append(entry)
            return len(entries) + 1, entry, False


#: the ledger :func:`shuffledp.analyzers.heatmap.modular.release_mixed` uses when given none
PROCESS_LEDGER = ReleaseLedger(None)


def as_ledger(ledger: ReleaseLedger | str | os.PathLike[str] | None) -> ReleaseLedger:
    """A :class:`ReleaseLedger` from a ledger, a path, or None (this process's ledger).

    Parameters
    ----------
    ledger : ReleaseLedger, path-like or None
        A ledger, the path of a ledger file, or None for :data:`PROCESS_LEDGER`.

    Returns
    -------
    ReleaseLedger
        ``ledger`` itself, a ledger on the path, or the process's ledger.

    Raises
    ------
    TypeError
        If ``ledger`` is none of these.

    References
    ----------
    [Ghazi23]_ App. F (the guarantee covers one release per round).
    """
    if ledger is None:
        return PROCESS_LEDGER
    if isinstance(ledger, ReleaseLedger):
        return ledger
    if isinstance(ledger, (str, os.PathLike)):
        return ReleaseLedger(ledger)
    raise TypeError(f"ledger must be a ReleaseLedger, a path or None, got "
                    f"{type(ledger).__name__}")


__all__ = ["LEDGER_VERSION", "LedgerError", "PROCESS_LEDGER", "ReleaseLedger",
           "RoundAlreadyReleased", "as_ledger", "sums_digest"]
