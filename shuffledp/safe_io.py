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

Shared state that several processes update (a privacy-budget ledger, a record of what was
released) goes through :class:`ChainedLog`: an append-only, hash-chained JSON-lines log with
its head stored beside it, read, verified and appended only while holding an exclusive
``flock`` (:func:`exclusive_lock`), so that concurrent writers are serialised and a deleted or
edited entry is refused (:class:`TamperedLog`) instead of silently forgotten.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from shuffledp.errors import Refused

__all__ = [
    "ChainedLog",
    "LockBusy",
    "MalformedTable",
    "NotRegularFileError",
    "Table",
    "TamperedLog",
    "UnsafeFileError",
    "atomic_output",
    "atomic_path",
    "check_regular",
    "count_lines",
    "create_private",
    "exclusive_lock",
    "open_regular",
    "read_regular",
    "read_regular_text",
    "read_rows",
    "read_up_to",
    "replace_file",
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
    """Check that ``path`` is a readable regular file (without reading it); return its size.

    Parameters
    ----------
    path : path-like
        The file; symbolic links are followed.
    what : str
        How to name the file in error messages.

    Returns
    -------
    int
        The file's size in bytes.

    Raises
    ------
    NotRegularFileError
        If the path cannot be opened or is not a regular file.
    """
    with open_regular(path, what=what) as f:
        return os.fstat(f.fileno()).st_size


def read_up_to(f: BinaryIO, n: int) -> bytes:
    """Read at most ``n`` bytes (fewer only at end of file).

    Parameters
    ----------
    f : BinaryIO
        An open binary file (read in chunks of at most 1 MiB).
    n : int
        Most bytes to read.

    Returns
    -------
    bytes
        ``n`` bytes, or fewer when the file ends first.

    Raises
    ------
    ValueError
        If ``n`` is negative.
    OSError
        If a read fails.
    """
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

    Parameters
    ----------
    path : path-like
        The file; symbolic links are followed.
    limit : int
        Largest size accepted, in bytes.
    what : str
        How to name the file in error messages.

    Returns
    -------
    bytes
        The content.

    Raises
    ------
    UnsafeFileError
        Not a regular file, unreadable, or larger than ``limit`` bytes.
    ValueError
        If ``limit`` is negative.
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

    Parameters
    ----------
    path, limit, what
        As :func:`read_regular`.

    Returns
    -------
    str
        The text.

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

    Parameters
    ----------
    path : path-like
        The file; symbolic links are followed.
    what : str
        How to name the file in error messages.

    Returns
    -------
    int
        The number of lines (0 for an empty file).

    Raises
    ------
    NotRegularFileError
        If the path cannot be opened or is not a regular file.
    OSError
        If a read fails.
    """
    n = 0
    last = b"\n"
    with open_regular(path, what=what) as f:
        while chunk := f.read(_CHUNK):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")


def _fsync_path(path: str | os.PathLike[str]) -> None:
    """fsync the file or directory ``path`` (a directory that cannot be opened: best effort)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:  # pragma: no cover - e.g. a directory without read permission
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - a directory on a file system without dir fsync
        pass
    finally:
        os.close(fd)


def _temp_name(target: str, suffix: str = ".tmp") -> str:
    folder = os.path.dirname(target) or "."
    return os.path.join(folder, f".{os.path.basename(target)}.{os.urandom(6).hex()}{suffix}")


def replace_file(src: str | os.PathLike[str], dst: str | os.PathLike[str], *,
                 durable: bool = False) -> None:
    """Rename ``src`` over ``dst`` (atomic on one file system), optionally durably.

    The one place the package renames a file into place: :func:`atomic_output`,
    :func:`atomic_path` and callers that write a temporary file themselves (e.g. an upload
    received into ``.incoming-*.tmp``, or a file moved aside to a backup name) all end here.

    Parameters
    ----------
    src : path-like
        The file to move (usually a temporary file in the folder of ``dst``).
    dst : path-like
        Its new name; an existing file there is replaced.
    durable : bool
        If true, fsync ``src`` before the rename and the folder(s) of ``dst`` (and of
        ``src`` if different) after it, so the new name survives a crash of the machine.

    Raises
    ------
    OSError
        If the rename fails (e.g. ``src`` missing, ``dst`` a directory, another file
        system) or the fsync of ``src`` fails.
    """
    if durable:
        fd = os.open(src, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    os.replace(src, dst)
    if durable:
        folders = {os.path.dirname(os.path.abspath(dst)), os.path.dirname(os.path.abspath(src))}
        for folder in sorted(folders):
            _fsync_path(folder)


@contextmanager
def atomic_output(path: str | os.PathLike[str], *, mode: int = 0o644,
                  durable: bool = False) -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` when the ``with`` block ends without an error.

    Writes go to a fresh temporary file created next to ``path`` with ``O_EXCL`` (never
    through a planted link), renamed over ``path`` at the end: readers see either the old or
    the complete new content, a FIFO or a link at ``path`` is replaced rather than written
    through, and an error leaves no partial file.

    Parameters
    ----------
    path : path-like
        The file to create or replace; its folder must exist.
    mode : int
        Permission bits of the new file (before the umask).
    durable : bool
        If true, the file is fsynced before the rename and its folder after it: once the
        ``with`` block has ended, the new content survives a crash of the machine (on a file
        system that honours ``fsync``).

    Returns
    -------
    contextmanager of BinaryIO
        Yields the open temporary file to write to (do not close it yourself).

    Raises
    ------
    OSError
        If the temporary file cannot be created (folder missing or not writable) or the
        rename fails; any exception raised in the ``with`` block is re-raised after the
        temporary file is removed.
    """
    target = os.fspath(path)
    tmp = _temp_name(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        replace_file(tmp, target)
        if durable:
            _fsync_path(os.path.dirname(os.path.abspath(target)))
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:  # pragma: no cover - already renamed or removed
            pass
        raise


@contextmanager
def atomic_path(path: str | os.PathLike[str], *, suffix: str = "",
                durable: bool = False) -> Iterator[Path]:
    """A temporary path next to ``path`` that a library writes by name, renamed over
    ``path`` when the ``with`` block ends without an error.

    For writers that want a file *name* rather than an open file (``Figure.savefig``, a PNG
    renderer). The name is fresh and random (``.<name>.<hex><suffix>``) but, unlike
    :func:`atomic_output`, not created with ``O_EXCL``: the writer opens it itself.

    Parameters
    ----------
    path : path-like
        The file to create or replace; its folder must exist.
    suffix : str
        Ending of the temporary name (e.g. ``".png"`` when the writer infers the format from
        it).
    durable : bool
        As in :func:`atomic_output`.

    Returns
    -------
    contextmanager of pathlib.Path
        Yields the temporary path to write.

    Raises
    ------
    OSError
        If the rename fails; the temporary file is removed whatever happens, and an
        exception raised in the ``with`` block is re-raised.
    """
    target = os.fspath(path)
    tmp = _temp_name(target, suffix or ".tmp")
    try:
        yield Path(tmp)
        replace_file(tmp, target, durable=durable)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def write_atomic(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644,
                 durable: bool = False) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_output`.

    Parameters
    ----------
    path : path-like
        The file to create or replace; its folder must exist.
    data : bytes
        The whole new content.
    mode : int
        Permission bits of the new file (before the umask).
    durable : bool
        If true, fsync the file and its folder (the new content survives a crash of the
        machine once this returns).

    Raises
    ------
    OSError
        If the folder is missing or not writable, or the rename fails (``path`` unchanged).
    """
    with atomic_output(path, mode=mode, durable=durable) as f:
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
    written (and renamed into place) survive a power loss.

    Parameters
    ----------
    *paths : path-like
        Files written earlier (e.g. with :func:`write_atomic` without ``durable``).

    Raises
    ------
    OSError
        If a file or folder cannot be opened or fsynced.
    """
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


# --------------------------------------------------------------------------- tabular input
#: Largest table :func:`read_rows` reads by default (1 GiB).
MAX_TABLE_BYTES = 1 << 30


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class MalformedTable(ValueError, csv.Error):
    """A record that the ``csv`` module cannot split (a field over its size limit, a stray
    quote in strict mode); also a :class:`csv.Error`, so callers that catch that still do."""


class Table:
    """The rows of a comma-separated file opened by :func:`read_rows`.

    Iterating yields ``(line, fields)`` for each non-blank record, where ``line`` is the
    1-based physical line of the file on which the record ends (the header is counted) and
    ``fields`` the list of strings as the ``csv`` module splits them (quotes honoured).

    Attributes
    ----------
    header : list of str or None
        The header row, stripped and lower-cased, or None when the file has none.
    label : str
        How the file is named in error messages (``what`` and the path).
    """

    def __init__(self, raw: BinaryIO, fh: io.TextIOWrapper, label: str, limit: int,
                 fields: tuple[int, int] | None) -> None:
        self._raw = raw
        self._reader = csv.reader(fh)
        self.label = label
        self._limit = limit
        self._fields = fields
        self.header: list[str] | None = None
        self._pending: tuple[int, list[str]] | None = None

    def _next_record(self) -> tuple[int, list[str]] | None:
        """The next non-blank record, or None at the end; errors name the line."""
        while True:
            try:
                row = next(self._reader)
            except StopIteration:
                return None
            except csv.Error as e:
                raise MalformedTable(f"{self.label}, line {self._reader.line_num}: malformed "
                                     f"CSV: {e}") from None
            if self._raw.tell() > self._limit:  # bytes taken from the file so far
                raise UnsafeFileError(f"{self.label}: grew past the {self._limit} bytes "
                                      "allowed while being read")
            if row and any(cell.strip() for cell in row):
                return self._reader.line_num, row

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        if self._pending is not None:
            first, self._pending = self._pending, None
            yield self._check(*first)
        while (rec := self._next_record()) is not None:
            yield self._check(*rec)

    def _check(self, line: int, row: list[str]) -> tuple[int, list[str]]:
        if self.header is not None and len(row) != len(self.header):
            raise ValueError(
                f"{self.label}, line {line}: expected {len(self.header)} fields "
                f"({','.join(self.header)}), got {len(row)}: {','.join(row)!r}")
        if self._fields is not None and not self._fields[0] <= len(row) <= self._fields[1]:
            lo, hi = self._fields
            want = str(lo) if lo == hi else f"{lo} to {hi}"
            raise ValueError(f"{self.label}, line {line}: expected {want} fields, got "
                             f"{len(row)}: {','.join(row)[:60]!r}")
        return line, row


@contextmanager
def read_rows(path: str | os.PathLike[str], *, what: str = "",
              limit: int = MAX_TABLE_BYTES, header: str = "none",
              columns: tuple[str, ...] = (), optional: tuple[str, ...] = (),
              fields: tuple[int, int] | None = None) -> Iterator[Table]:
    """Open a comma-separated text file safely and read its header: the one tabular reader.

    The file goes through :func:`open_regular` (regular files only: a FIFO, device or
    directory is refused at once, never read or waited on), its size is capped, it is decoded
    as UTF-8 (a byte-order mark is dropped) and split by :mod:`csv`; blank lines are skipped;
    every error names the file and the 1-based physical line.

    Parameters
    ----------
    path : path-like
        The file.
    what : str
        How to name the file in error messages (e.g. ``"--input"``); the path follows.
    limit : int
        Largest file accepted, in bytes.
    header : {"none", "required", "optional"}
        ``"required"``: the first non-blank row is a header; it must name each of
        ``columns`` once and nothing outside ``columns + optional`` (when ``columns`` is
        given), and every record must then have as many fields as the header.
        ``"optional"``: the first non-blank row is a header if, stripped and lower-cased, it
        equals ``columns`` (or, when ``columns`` is empty, if none of its fields is a
        number). ``"none"``: every row is a record.
    columns : tuple of str
        Required column names (lower case).
    optional : tuple of str
        Further column names a ``"required"`` header may hold.
    fields : (int, int), optional
        Inclusive bounds on the number of fields of each record.

    Returns
    -------
    contextmanager of Table
        Yields the :class:`Table`: its ``header`` and, iterated, ``(line, fields)``.

    Raises
    ------
    NotRegularFileError
        If ``path`` cannot be opened or is not a regular file.
    UnsafeFileError
        If the file is larger than ``limit`` (checked before and while reading).
    UnicodeDecodeError
        If the bytes are not UTF-8 (a ``ValueError``; raised while iterating).
    MalformedTable
        If the ``csv`` module cannot split a record (a ``ValueError`` and a
        :class:`csv.Error`, naming the line).
    ValueError
        For a bad ``header`` argument or ``limit``; an empty file or a header with a missing,
        unknown or duplicate column when ``header="required"``; a record with the wrong
        number of fields or malformed CSV quoting (each naming the line).
    """
    if header not in ("none", "required", "optional"):
        raise ValueError(f"header must be 'none', 'required' or 'optional', got "
                         f"header={header!r}")
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got limit={limit!r}")
    label = _label(what, path)
    raw = open_regular(path, what=what)
    try:
        size = os.fstat(raw.fileno()).st_size
        if size > limit:
            raise UnsafeFileError(f"{label}: {size} bytes, more than the {limit} allowed")
        fh = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
    except BaseException:
        raw.close()
        raise
    with fh:
        table = Table(raw, fh, label, limit, fields)
        if header != "none":
            first = table._next_record()
            names = None if first is None else [c.strip().lower() for c in first[1]]
            if header == "required":
                shape = ",".join(columns) + "".join(f"[,{o}]" for o in optional)
                if names is None:
                    raise ValueError(f"{label}: empty file; expected a header {shape}")
                if columns:
                    unknown = [h for h in names if h not in columns + optional]
                    if unknown:
                        raise ValueError(f"{label}: unknown column(s) "
                                         f"{', '.join(map(repr, unknown))}; allowed: "
                                         f"{', '.join(columns + optional)}")
                dup = sorted({h for h in names if names.count(h) > 1})
                if dup:
                    raise ValueError(f"{label}: duplicate column(s) {', '.join(map(repr, dup))}")
                missing = [h for h in columns if h not in names]
                if missing:
                    raise ValueError(f"{label}: missing column(s) "
                                     f"{', '.join(map(repr, missing))}")
                table.header = names
            elif names is not None and first is not None:
                is_header = (names == list(columns) if columns
                             else not any(_is_number(c) for c in first[1]))
                if is_header:
                    table.header = names
                else:
                    table._pending = first
        yield table


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


#: The schema of every ``report.json`` the toolkit writes (its first field, ``"schema"``).
#: Readers accept this version and a report without the field (written before versioning,
#: same layout); a report of another schema or a later version is refused.
REPORT_SCHEMA = "shuffledp-report/1"
#: The schema of the shuffler's report next to a mixed batch (``OUT.report.json``).
SHUFFLER_REPORT_SCHEMA = "shuffledp-shuffler-report/1"


def with_schema(doc: Mapping[str, Any], schema: str = REPORT_SCHEMA) -> dict[str, Any]:
    """``doc`` with ``"schema"`` as its first field."""
    return {"schema": schema, **{k: v for k, v in doc.items() if k != "schema"}}


def check_schema(doc: Mapping[str, Any], schema: str = REPORT_SCHEMA,
                 what: str = "report") -> None:
    """Refuse a document of another schema or a later version than ``schema``.

    Parameters
    ----------
    doc : mapping
        The parsed JSON document.
    schema : str
        The expected ``"name/version"``.
    what : str
        How to name the document in the error.

    Raises
    ------
    ValueError
        If ``doc["schema"]`` is present and differs from ``schema``.
    """
    got = doc.get("schema")
    if got is not None and got != schema:
        raise ValueError(f"{what} has schema={got!r}; this version of shuffledp reads "
                         f"{schema!r}")


def write_report(out_dir: Path, report: Mapping[str, Any]) -> Path:
    """Write ``out_dir/report.json`` atomically (indented JSON, schema
    :data:`REPORT_SCHEMA` first); returns its path."""
    path = Path(out_dir) / "report.json"
    text = json.dumps(with_schema(report), indent=2, default=json_default) + "\n"
    write_atomic(path, text.encode())
    return path


def write_npy(path: Path, array: np.ndarray) -> None:
    """Write one array in .npy format atomically."""
    buf = io.BytesIO()
    np.save(buf, np.asarray(array))
    write_atomic(path, buf.getvalue())


# --------------------------------------------------------------------------- locked logs
#: How long :func:`exclusive_lock` waits for a lock held by another process by default.
LOCK_TIMEOUT = 60.0

#: ``prev`` of a chained log's first entry.
GENESIS = "0" * 64

#: The format of a chained log, written in its head (``path.head``) and checked on every read.
LOG_FORMAT = "shuffledp-chained-log/1"

#: Largest chained log read (a budget ledger of ~100,000 releases).
MAX_LOG_BYTES = 256 << 20


class LockBusy(Refused):
    """Another process held the lock for longer than the caller agreed to wait."""


class TamperedLog(Refused):
    """A chained log that does not verify: an entry edited, deleted or reordered, the log
    truncated or missing while its head remains, or the head missing while the log has
    entries."""


@contextmanager
def exclusive_lock(path: str | os.PathLike[str], *, timeout: float = LOCK_TIMEOUT,
                   what: str = "") -> Iterator[None]:
    """Hold an exclusive advisory lock on the file ``path`` (created if missing) for the
    ``with`` block.

    The lock is ``fcntl.flock(LOCK_EX)`` on an open descriptor of ``path``: the kernel
    releases it when the holder exits or dies, so a crashed process never leaves a stale
    lock behind (unlike a lock *file* made with ``O_EXCL``). The lock file is opened
    without following a planted FIFO (``O_NONBLOCK``), must be a regular file, and is never
    removed (removing it would let two processes lock two different files). Cooperating
    processes only: a process that does not take the lock is not stopped by it, and
    ``flock`` does not lock across machines on some network file systems.

    Parameters
    ----------
    path : path-like
        The lock file (e.g. ``ledger.json.lock``).
    timeout : float
        Seconds to wait for a lock held by another process (polled every 20-100 ms).
    what : str
        How to name the locked resource in error messages (default: the lock file).

    Returns
    -------
    contextmanager of None
        Holds the lock while the ``with`` block runs; released on exit, even on error.

    Raises
    ------
    LockBusy
        If the lock is still held after ``timeout`` seconds.
    NotRegularFileError
        If ``path`` is not a regular file.
    """
    import fcntl
    import time

    label = what or os.fspath(path)
    if not (timeout >= 0 and math.isfinite(timeout)):
        raise ValueError(f"timeout must be a finite number >= 0, got timeout={timeout!r}")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
                     | getattr(os, "O_NOFOLLOW", 0), 0o644)  # never through a planted link
    except OSError as e:
        raise NotRegularFileError(f"{label}: cannot open the lock file {os.fspath(path)}: "
                                  f"{e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(f"{label}: the lock file {os.fspath(path)} is not a "
                                      f"regular file ({_kind(st.st_mode)})")
        deadline = time.monotonic() + timeout
        pause = 0.02
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockBusy(f"{label}: locked by another process for more than "
                                   f"{timeout:g} s (lock file {os.fspath(path)})") from None
                time.sleep(pause)
                pause = min(2 * pause, 0.1)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _entry_hash(seq: int, prev: str, body: Mapping[str, Any]) -> str:
    canon = json.dumps({"seq": seq, "prev": prev, "body": body}, sort_keys=True,
                       separators=(",", ":"), allow_nan=False, default=json_default)
    return hashlib.sha256(canon.encode()).hexdigest()


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # pragma: no cover - a directory we cannot open: best effort
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


class ChainedLog:
    """An append-only JSON-lines log whose entries are hash-chained, with its head stored
    next to it; read, verified and appended only under an exclusive lock.

    Files: ``path`` (one entry per line: ``{"seq", "prev", "body", "hash"}``, where ``hash``
    is SHA-256 of the canonical JSON of ``seq``, ``prev`` and ``body`` and ``prev`` the
    previous entry's hash), ``path.head`` (``{"format": LOG_FORMAT, "entries": n, "hash":
    <last hash>}``, replaced
    atomically after each append) and ``path.lock`` (the lock, :func:`exclusive_lock`).

    Use::

        with ChainedLog(path).locked() as log:   # waits for the lock, reads and verifies
            bodies = log.bodies                  # the entries' bodies, oldest first
            log.append({"what": "..."})          # durable (fsync) before it returns

    What it detects (:class:`TamperedLog` on the next :meth:`locked`): an entry edited,
    deleted, reordered or inserted; the log truncated (fewer entries than the head
    records) or deleted while its head remains; the head deleted or edited while the log
    has more than its first entry. What it repairs: a crash between the two writes of an
    append (the log one entry ahead of the head: the entry is kept and the head moved on,
    which can only over-count) and a torn, unterminated last line left by a crash during
    the write (dropped: its append never returned). What it does not protect against:
    anyone who can write the files and recomputes the chain (there is no secret key), or
    who deletes the log *and* its head together (the next writer starts a new log). Keep
    the head hashes elsewhere (a published report, a write-once store) to detect that.
    Concurrency holds between processes that go through this class on one machine (or a
    file system with working ``flock``).

    Parameters
    ----------
    path : path-like
        The log file.
    what : str
        How to name the log in error messages (e.g. ``"budget ledger"``).
    timeout : float
        Seconds :meth:`locked` waits for another process's lock.
    """

    def __init__(self, path: str | os.PathLike[str], *, what: str = "log",
                 timeout: float = LOCK_TIMEOUT) -> None:
        self.path = Path(path)
        self.head_path = Path(f"{os.fspath(path)}.head")
        self.lock_path = Path(f"{os.fspath(path)}.lock")
        self.what = what
        self.timeout = timeout
        self._bodies: list[dict[str, Any]] = []
        self._hashes: list[str] = []
        self._held = False

    # ---- reading
    @property
    def bodies(self) -> tuple[dict[str, Any], ...]:
        """The verified entries' bodies, oldest first (only inside :meth:`locked`)."""
        self._need_lock()
        return tuple(self._bodies)

    @property
    def head(self) -> str:
        """The hash of the last entry (:data:`GENESIS` for an empty log)."""
        self._need_lock()
        return self._hashes[-1] if self._hashes else GENESIS

    def __len__(self) -> int:
        self._need_lock()
        return len(self._bodies)

    def _need_lock(self) -> None:
        if not self._held:
            raise RuntimeError(f"{self.what} {self.path}: read or append it inside "
                               "ChainedLog.locked()")

    def _fail(self, why: str) -> TamperedLog:
        return TamperedLog(f"{self.what} {str(self.path)!r} fails verification: {why}; "
                           "refused (entries deleted or edited could hide spent budget)")

    def _read_head(self) -> dict[str, Any] | None:
        try:
            text = read_regular_text(self.head_path, 1 << 16, what=f"{self.what} head")
        except NotRegularFileError:
            if not os.path.lexists(self.head_path):
                return None
            raise
        try:
            head = json.loads(text)
            ok = (isinstance(head, dict) and isinstance(head.get("entries"), int)
                  and isinstance(head.get("hash"), str))
        except json.JSONDecodeError:
            ok = False
        if not ok:
            raise self._fail(f"its head {str(self.head_path)!r} is not "
                             '{"format", "entries": int, "hash": str}')
        if head.get("format") != LOG_FORMAT:
            raise self._fail(f"its head has format={head.get('format')!r}; this version reads "
                             f"{LOG_FORMAT!r}")
        return head

    def _load(self) -> None:
        """Read and verify the log against its head (the lock is held)."""
        head = self._read_head()
        if not os.path.lexists(self.path):
            if head is not None:
                raise self._fail(f"the log is missing but its head {str(self.head_path)!r} "
                                 f"records {head['entries']} entries")
            self._bodies, self._hashes = [], []
            return
        data = read_regular(self.path, MAX_LOG_BYTES, what=self.what)
        lines = data.split(b"\n")
        torn = lines.pop()  # b"" when the log ends with a newline
        bodies: list[dict[str, Any]] = []
        hashes: list[str] = []
        prev = GENESIS
        for i, line in enumerate(lines):
            try:
                e = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise self._fail(f"line {i + 1} is not JSON") from None
            if not (isinstance(e, dict) and set(e) == {"seq", "prev", "body", "hash"}
                    and isinstance(e["body"], dict)):
                raise self._fail(f"line {i + 1} is not an entry {{seq, prev, body, hash}}")
            if e["seq"] != i:
                raise self._fail(f"line {i + 1} has seq {e['seq']!r}, expected {i} (an entry "
                                 "deleted, inserted or reordered)")
            if e["prev"] != prev:
                raise self._fail(f"entry {i} does not chain to entry {i - 1} (an entry deleted, "
                                 "edited or reordered)")
            if _entry_hash(i, prev, e["body"]) != e["hash"]:
                raise self._fail(f"entry {i} does not match its hash (edited)")
            prev = e["hash"]
            bodies.append(e["body"])
            hashes.append(prev)
        n = len(bodies)
        if torn:  # a crash during an append: it never returned, so nothing relied on it
            if head is None or head["entries"] != n or head["hash"] != (prev if n else GENESIS):
                raise self._fail("its last line is unterminated and the head does not "
                                 "record the entries before it")
            with open(self.path, "r+b") as f:
                f.truncate(len(data) - len(torn))
                os.fsync(f.fileno())
        if head is None:
            if n > 1:
                raise self._fail(f"its head {str(self.head_path)!r} is missing and the log has "
                                 f"{n} entries")
            # creation interrupted between the log's first entry and the head
        elif head["entries"] > n:
            raise self._fail(f"the head records {head['entries']} entries, the log has {n} "
                             "(truncated)")
        elif head["entries"] == n:
            if head["hash"] != (prev if n else GENESIS):
                raise self._fail("the last entry's hash differs from the head's (rewritten)")
        elif head["entries"] == n - 1:  # a crash between the append and the head: keep it
            if head["hash"] != (hashes[-2] if n > 1 else GENESIS):
                raise self._fail(f"entry {n - 2} differs from the head's hash (rewritten)")
        else:
            raise self._fail(f"the head records {head['entries']} entries, the log has {n} "
                             "(the head was rewritten)")
        self._bodies, self._hashes = bodies, hashes
        if n and (head is None or head["entries"] != n):
            self._write_head()

    # ---- writing
    def _write_head(self) -> None:
        last = self._hashes[-1] if self._hashes else GENESIS
        text = json.dumps({"format": LOG_FORMAT, "entries": len(self._hashes), "hash": last,
                           "log": self.path.name}) + "\n"
        with atomic_output(self.head_path) as f:
            f.write(text.encode())
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(os.path.dirname(os.fspath(self.head_path)))

    def append(self, body: Mapping[str, Any]) -> tuple[int, str]:
        """Append one entry (a JSON object), durably, and move the head to it.

        Returns
        -------
        (int, str)
            The entry's sequence number and hash.
        """
        self._need_lock()
        if not isinstance(body, Mapping):
            raise TypeError(f"body must be a mapping, got body={body!r}")
        entry: dict[str, Any] = json.loads(json.dumps(dict(body), allow_nan=False,
                                                      default=json_default))
        seq, prev = len(self._hashes), self.head
        h = _entry_hash(seq, prev, entry)
        line = json.dumps({"seq": seq, "prev": prev, "body": entry, "hash": h},
                          sort_keys=True, allow_nan=False) + "\n"
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        if seq == 0:
            flags |= os.O_EXCL  # a new log: never through a planted link or FIFO
            if os.path.lexists(self.path):  # verified empty: a creation that died early
                os.unlink(self.path)
        fd = os.open(self.path, flags | getattr(os, "O_NONBLOCK", 0), 0o644)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise NotRegularFileError(f"{self.what} {self.path}: not a regular file")
            data = line.encode()
            if os.write(fd, data) != len(data):  # pragma: no cover - regular files
                raise OSError(f"{self.what} {self.path}: short write")
            os.fsync(fd)
        finally:
            os.close(fd)
        if seq == 0:
            _fsync_dir(os.path.dirname(os.fspath(self.path)))
        self._bodies.append(entry)
        self._hashes.append(h)
        self._write_head()
        return seq, h

    @contextmanager
    def locked(self) -> Iterator[ChainedLog]:
        """Take the lock, read and verify the log; yields ``self`` (read :attr:`bodies`,
        :meth:`append`). Raises :class:`LockBusy` or :class:`TamperedLog`."""
        with exclusive_lock(self.lock_path, timeout=self.timeout,
                            what=f"{self.what} {self.path}"):
            self._load()
            self._held = True
            try:
                yield self
            finally:
                self._held = False
