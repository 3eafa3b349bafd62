"""Where a sweep's runs go: ``runs.csv`` and ``runs.jsonl`` (one row / line per run, flushed
and fsynced), the keys of the runs already done (resume) and the repair of a torn last row."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

from shuffledp.sweep.config import (
    COLUMNS,
    RunRecord,
)

CSV_NAME = "runs.csv"

JSONL_NAME = "runs.jsonl"


def done_keys(out_dir: str | os.PathLike[str]) -> set[str]:
    """Keys of the runs already in ``out_dir/runs.csv`` (empty if there is none).

    Parameters
    ----------
    out_dir : str or os.PathLike
        The sweep's output directory.

    Returns
    -------
    set of str
        The keys of the runs on disk.

    Raises
    ------
    ValueError
        If ``runs.csv`` has other columns than a sweep's (:data:`COLUMNS`).
    OSError
        If the file cannot be read.
    """
    path = Path(out_dir) / CSV_NAME
    if not path.exists():
        return set()
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None:
            return set()
        if tuple(reader.fieldnames) != COLUMNS:
            raise ValueError(f"{path}: columns {reader.fieldnames!r} are not those of a "
                             "sweep; use a fresh --out")
        return {row["key"] for row in reader}


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8", newline="") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def repair(out_dir: str | os.PathLike[str]) -> None:
    """Cut a partial last line (a run killed mid-write) from ``runs.jsonl`` and ``runs.csv``.

    No field holds a newline, so every complete row ends with one.

    Parameters
    ----------
    out_dir : str or os.PathLike
        The sweep's output directory (missing files are left alone).

    Raises
    ------
    OSError
        If a file cannot be read or truncated.
    """
    for name in (JSONL_NAME, CSV_NAME):
        path = Path(out_dir) / name
        if not path.exists():
            continue
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            with open(path, "r+b") as fh:
                fh.truncate(data.rfind(b"\n") + 1)
                fh.flush()
                os.fsync(fh.fileno())


def append_record(out_dir: str | os.PathLike[str], record: RunRecord) -> None:
    """Append one record to ``runs.jsonl``, then to ``runs.csv`` (header first if new).

    Each is flushed and fsynced: a run is done (skipped on resume) once its CSV row is on
    disk, and its JSON line is there by then.

    Parameters
    ----------
    out_dir : str or os.PathLike
        The sweep's output directory (created if missing).
    record : RunRecord
        The finished run.

    Raises
    ------
    TypeError
        If ``record`` is not a RunRecord.
    OSError
        If the directory or a file cannot be written.
    """
    if not isinstance(record, RunRecord):
        raise TypeError(f"record must be a RunRecord, got {type(record).__name__}")
    import io

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / CSV_NAME
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    if not path.exists() or path.stat().st_size == 0:
        writer.writeheader()
    row = record.to_dict()
    writer.writerow({k: "" if x is None else repr(x) if isinstance(x, float) else x
                     for k, x in row.items()})
    _append(out / JSONL_NAME, json.dumps(row, allow_nan=True) + "\n")
    _append(path, buf.getvalue())


def read_runs(out_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of ``out_dir/runs.jsonl`` as dicts, one per key.

    For a key written twice the last line wins (a run interrupted between its JSON line and
    its CSV row is run again on resume).

    Parameters
    ----------
    out_dir : str or os.PathLike
        The sweep's output directory.

    Returns
    -------
    list of dict
        One record per key, in first-written order.

    Raises
    ------
    OSError
        If ``runs.jsonl`` is missing or unreadable.
    json.JSONDecodeError
        If a line is not JSON (a ValueError).
    KeyError
        If a record has no ``key``.
    """
    rows: dict[str, dict[str, Any]] = {}
    with open(Path(out_dir) / JSONL_NAME, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                rows[row["key"]] = row
    return list(rows.values())
