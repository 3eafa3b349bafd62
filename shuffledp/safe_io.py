"""Reading untrusted input files safely: regular files only, bounded size, never a hang.

The command-line roles read files named on the command line or found in a directory (users'
batches, keys, parameter files, point files). A directory entry, a FIFO, a device such as
``/dev/zero`` (or a symbolic link to one) or a file far larger than its format allows must end
in a one-line error, not a crash, a hang or exhausted memory. Every reader here therefore

1. opens the path with ``O_RDONLY | O_NONBLOCK | O_NOCTTY``: opening a FIFO returns at once
   instead of waiting for a writer, and a terminal never becomes the controlling one;
2. checks with ``fstat`` on the *open descriptor* that it is a regular file, so a path swapped
   for a FIFO or a device between a check and the open cannot slip through;
3. reads at most ``limit + 1`` bytes, so a file that grows after the check stays bounded; the
   extra byte tells "larger than the limit" apart from "exactly the limit".

Symbolic links are followed; what counts is the file they lead to. Errors are
:class:`UnsafeFileError` (a ``ValueError``) naming the file and what is wrong with it.
Writers (:func:`write_atomic`, :func:`create_private`) never follow a planted link or write
into a FIFO: they create a fresh file with ``O_EXCL`` and, for :func:`write_atomic`, rename it
over the target.
"""

from __future__ import annotations

import io
import json
import os
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

__all__ = [
    "NotRegularFileError",
    "UnsafeFileError",
    "atomic_output",
    "check_regular",
    "count_lines",
    "create_private",
    "open_regular",
    "read_regular",
    "read_regular_text",
    "read_up_to",
    "sync_to_disk",
    "write_atomic",
]

_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
_CHUNK = 1 << 20


class UnsafeFileError(ValueError):
    """An input file that is missing, not a regular file, unreadable or larger than allowed."""


class NotRegularFileError(UnsafeFileError):
    """The path cannot be opened or is not a regular file (directory, FIFO, device...)."""


def _label(what: str, path: str | os.PathLike[str]) -> str:
    return f"{what} {os.fspath(path)}" if what else os.fspath(path)


def _kind(mode: int) -> str:
    """Human name of a non-regular file type (for error messages)."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return f"a special file (mode {stat.filemode(mode)})"


def open_regular(path: str | os.PathLike[str], *, what: str = "") -> BinaryIO:
    """Open ``path`` for binary reading if (and only if) it is a regular file.

    Parameters
    ----------
    path : path-like
        The file; symbolic links are followed.
    what : str
        How to name the file in error messages (e.g. ``"--points"`` or ``"batch"``).

    Returns
    -------
    BinaryIO
        A buffered reader positioned at the start; close it (use ``with``).

    Raises
    ------
    NotRegularFileError
        If the path cannot be opened or is a directory, FIFO, device or socket.
    """
    label = _label(what, path)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except IsADirectoryError:
        raise NotRegularFileError(f"{label}: not a regular file (a directory)") from None
    except OSError as e:
        raise NotRegularFileError(f"{label}: cannot open: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(f"{label}: not a regular file ({_kind(st.st_mode)})")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(path: str | os.PathLike[str], *, what: str = "") -> int:
    """Check that ``path`` is a readable regular file (without reading it); return its size."""
    with open_regular(path, what=what) as f:
        return os.fstat(f.fileno()).st_size


def read_up_to(f: BinaryIO, n: int) -> bytes:
    """Read at most ``n`` bytes (fewer only at end of file)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got n={n!r}")
    parts = []
    left = n
    while left:
        b = f.read(min(left, _CHUNK))
        if not b:
            break
        parts.append(b)
        left -= len(b)
    return b"".join(parts)


def read_regular(path: str | os.PathLike[str], limit: int, *, what: str = "") -> bytes:
    """The whole content of a regular file of at most ``limit`` bytes.

    Reads at most ``limit + 1`` bytes whatever the file claims or becomes.

    Raises
    ------
    UnsafeFileError
        Not a regular file, unreadable, or larger than ``limit`` bytes.
    """
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got limit={limit!r}")
    label = _label(what, path)
    with open_regular(path, what=what) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise UnsafeFileError(f"{label}: {size} bytes, more than the {limit} allowed")
        try:
            data = read_up_to(f, limit + 1)
        except OSError as e:
            raise UnsafeFileError(f"{label}: cannot read: {e.strerror or e}") from None
    if len(data) > limit:
        raise UnsafeFileError(f"{label}: grew past the {limit} bytes allowed while being read")
    return data


def read_regular_text(path: str | os.PathLike[str], limit: int, *, what: str = "") -> str:
    """:func:`read_regular` decoded as UTF-8 (a leading byte-order mark is dropped).

    Raises
    ------
    UnsafeFileError
        As :func:`read_regular`, or if the bytes are not UTF-8 (naming the byte offset).
    """
    data = read_regular(path, limit, what=what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UnsafeFileError(
            f"{_label(what, path)}: not UTF-8 text (byte {e.start} is {data[e.start]:#04x})"
        ) from None


def count_lines(path: str | os.PathLike[str], *, what: str = "") -> int:
    """Number of lines of a regular file (newlines, plus one for an unterminated last line).

    Streams the file in 1 MiB chunks (bounded memory); used to estimate a load's memory
    before loading it.
    """
    n = 0
    last = b"\n"
    with open_regular(path, what=what) as f:
        while chunk := f.read(_CHUNK):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")


@contextmanager
def atomic_output(path: str | os.PathLike[str], *, mode: int = 0o644) -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` when the ``with`` block ends without an error.

    Writes go to a fresh temporary file created next to ``path`` with ``O_EXCL`` (never
    through a planted link), renamed over ``path`` at the end: readers see either the old or
    the complete new content, a FIFO or a link at ``path`` is replaced rather than written
    through, and an error leaves no partial file.
    """
    target = os.fspath(path)
    folder = os.path.dirname(target) or "."
    tmp = os.path.join(folder, f".{os.path.basename(target)}.{os.urandom(6).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:  # pragma: no cover - already renamed or removed
            pass
        raise


def write_atomic(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_output`."""
    with atomic_output(path, mode=mode) as f:
        f.write(data)


def create_private(path: str | os.PathLike[str], data: bytes, *, force: bool = False) -> None:
    """Create ``path`` with mode 0600 from the start and write ``data`` (e.g. a private key).

    Uses ``O_CREAT | O_EXCL`` with mode 0o600, so the file is never readable by others, not
    even for an instant, and a link planted at ``path`` is not followed.

    Parameters
    ----------
    force : bool
        Replace an existing file (it is unlinked first, then created afresh).

    Raises
    ------
    FileExistsError
        If ``path`` exists and ``force`` is false.
    """
    target = os.fspath(path)
    if force:
        try:
            os.unlink(target)
        except FileNotFoundError:
            pass
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                 0o600)
    try:
        os.fchmod(fd, 0o600)  # exactly 0600 even under an unusual umask
        f = os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        os.unlink(target)
        raise
    try:
        with f:
            f.write(data)
    except BaseException:
        os.unlink(target)
        raise


def sync_to_disk(*paths: str | os.PathLike[str]) -> None:
    """fsync each file of ``paths`` and then each folder holding one, so that files just
    written (and renamed into place) survive a power loss."""
    folders = []
    for path in paths:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in folders:
            folders.append(folder)
    for folder in folders:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def json_default(o: Any) -> Any:
    """``json.dumps`` hook: numpy scalars and arrays, tuples and sets, mappings."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (tuple, set, frozenset)):
        return list(o)
    if isinstance(o, Mapping):
        return dict(o)
    if isinstance(o, bytes):
        return o.hex()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_report(out_dir: Path, report: Mapping[str, Any]) -> Path:
    """Write ``out_dir/report.json`` atomically (indented JSON); returns its path."""
    path = Path(out_dir) / "report.json"
    text = json.dumps(dict(report), indent=2, default=json_default) + "\n"
    write_atomic(path, text.encode())
    return path


def write_npy(path: Path, array: np.ndarray) -> None:
    """Write one array in .npy format atomically."""
    buf = io.BytesIO()
    np.save(buf, np.asarray(array))
    write_atomic(path, buf.getvalue())
