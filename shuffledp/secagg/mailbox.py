"""A directory as the network: server and clients of secure aggregation as separate processes.

Each message is one file, written to a temporary name and renamed into place (atomic on
POSIX), so a reader never sees half a message. Every run has its own folder, named after
its 16-byte session id, so nothing of an earlier run can be taken for this one::

    DIR/session                          the server's hello: the current run's session id and
                                         the parameters it binds (modulus, vector length,
                                         threshold; :func:`shuffledp.secagg.messages.hello`),
                                         checked by every client before round 0
    DIR/run-{session hex}/round{k}/client-{i}.msg    client i's message of round k
    DIR/run-{session hex}/round{k}/client-{i}.leave  client i leaves before round k
    DIR/run-{session hex}/round{k}/server.msg        the server's broadcast (k = 0, 2)
    DIR/run-{session hex}/round1/to-{i}.msg          the shares addressed to client i
    DIR/run-{session hex}/aborted                    why the run stopped without a sum
    DIR/result.npy, DIR/report.json      the outcome of the run the report names

When the server starts it removes the previous run's ``session``, ``result.npy``,
``report.json`` and run folders (:func:`clear`), so an aborted run never leaves an old
result looking current: ``result.npy`` exists only if the run named in ``report.json``
released a sum, and ``report.json`` says ``"status": "released"`` or ``"aborted"``.

Files are read with :mod:`shuffledp.safe_io`: regular files only (a directory, FIFO or
device at a message's name is rejected and counted, never blocks) and at most the size the
round allows. The server closes a round when every expected client has posted a message or
a leave marker, or when ``round_timeout`` seconds have passed (a silent client is a
dropout); clients wait for the server's messages up to their own timeout and stop at once
when the run is marked aborted.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

from shuffledp.safe_io import UnsafeFileError, read_regular, write_atomic

POLL = 0.02
MAX_SERVER_MESSAGE = 16 << 20  # bounds a client's read of any server message
SESSION_FILE = "session"
RESULT_FILES = ("result.npy", "report.json")


class RunAborted(RuntimeError):
    """The server marked the run aborted (the message says why)."""


def run_dir(box: Path, session: bytes) -> Path:
    """The folder of the run with this session id.

    Parameters
    ----------
    box : pathlib.Path
        The mailbox directory.
    session : bytes
        The run's 16-byte session id.

    Returns
    -------
    pathlib.Path
        ``box / "run-<session hex>"`` (not created).

    Raises
    ------
    TypeError
        ``session`` is not bytes.
    """
    if not isinstance(session, (bytes, bytearray)):
        raise TypeError(f"session must be bytes, got {type(session).__name__}")
    return box / f"run-{session.hex()}"


def post(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a fresh temporary file renamed into place).

    Parameters
    ----------
    path : pathlib.Path
        The message file; its folder is created if missing.
    data : bytes
        The message.

    Raises
    ------
    OSError
        The folder or the file could not be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)


def _remove(path: Path) -> None:
    """Remove a file, link or directory tree at ``path`` (a link is removed, not followed)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)
    else:
        path.unlink()


def clear(box: Path) -> None:
    """Remove what an earlier run left in ``box``: session, results and run folders.

    Parameters
    ----------
    box : pathlib.Path
        The mailbox directory (created if missing); links in it are removed, not followed.

    Raises
    ------
    OSError
        Something could not be removed.
    """
    box.mkdir(parents=True, exist_ok=True)
    for name in (SESSION_FILE, *RESULT_FILES):
        _remove(box / name)
    for entry in box.iterdir():
        if entry.name.startswith("run-") or (entry.name.startswith("round")
                                             and entry.name[5:].isdigit()):
            _remove(entry)


def read_message(path: Path, limit: int) -> bytes:
    """The bytes of one message file (a regular file of at most ``limit`` bytes).

    Parameters
    ----------
    path : pathlib.Path
        The message file.
    limit : int
        The most bytes accepted.

    Returns
    -------
    bytes
        The file's contents.

    Raises
    ------
    shuffledp.safe_io.UnsafeFileError
        Not a regular file (directory, FIFO, device), unreadable or too large.
    """
    return read_regular(path, limit, what="message")


def _present(path: Path) -> bool:
    try:
        os.lstat(path)
        return True
    except FileNotFoundError:
        return False


def wait_for(path: Path, timeout: float, *, limit: int = MAX_SERVER_MESSAGE,
             abort_marker: Path | None = None) -> bytes:
    """The contents of ``path`` once it exists.

    Parameters
    ----------
    path : pathlib.Path
        The message file awaited (polled every 20 ms).
    timeout : float
        Seconds to wait.
    limit : int, optional
        The most bytes accepted (default 16 MiB).
    abort_marker : pathlib.Path, optional
        A file whose appearance means the run was aborted.

    Returns
    -------
    bytes
        The file's contents.

    Raises
    ------
    TimeoutError
        Nothing at ``path`` after ``timeout`` seconds.
    RunAborted
        ``abort_marker`` appeared first (the server gave up on the run).
    shuffledp.safe_io.UnsafeFileError
        What appeared is not a regular file of at most ``limit`` bytes.
    """
    deadline = time.monotonic() + timeout
    while not _present(path):
        if abort_marker is not None and _present(abort_marker):
            try:
                why = read_regular(abort_marker, 4096).decode("utf-8", "replace")
            except UnsafeFileError as e:
                why = str(e)
            raise RunAborted(f"the server aborted the run: {why}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no message at {path} after {timeout:g} s")
        time.sleep(POLL)
    return read_message(path, limit)


def collect(folder: Path, expected: set[int], timeout: float,
            limit: int) -> tuple[dict[int, bytes], dict[int, str], set[int]]:
    """Messages of the expected clients of one round.

    Waits until every expected client has posted ``client-{i}.msg`` or
    ``client-{i}.leave``, or ``timeout`` seconds have passed.

    Parameters
    ----------
    folder : pathlib.Path
        The round's folder.
    expected : set of int
        The clients expected to answer.
    timeout : float
        Seconds to wait.
    limit : int
        The most bytes accepted per message file.

    Returns
    -------
    messages : dict
        Client -> bytes of its message file.
    unreadable : dict
        Client -> why its message file was refused (not a regular file, too large).
    left : set
        Clients that posted a leave marker and no message.

    Raises
    ------
    OSError
        ``folder`` cannot be read. A message file that is not a regular file or too large
        is reported in ``unreadable``, never raised.
    """
    deadline = time.monotonic() + timeout
    while True:
        sent = {i for i in expected if _present(folder / f"client-{i}.msg")}
        left = {i for i in expected - sent if _present(folder / f"client-{i}.leave")}
        if sent | left == expected or time.monotonic() > deadline:
            break
        time.sleep(POLL)
    messages: dict[int, bytes] = {}
    unreadable: dict[int, str] = {}
    for i in sorted(sent):
        try:
            messages[i] = read_message(folder / f"client-{i}.msg", limit)
        except UnsafeFileError as e:
            unreadable[i] = str(e)
    return messages, unreadable, left


__all__ = ["MAX_SERVER_MESSAGE", "RunAborted", "clear", "collect", "post",
           "read_message", "run_dir", "wait_for"]
