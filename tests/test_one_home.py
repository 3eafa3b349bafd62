"""One home for atomic writes and one for tabular input (issue: "the temp-file-then-rename
write exists 4 times, CSV readers 4 times").

Every rename of a file into place goes through :mod:`shuffledp.safe_io` (``write_atomic``,
``atomic_output``, ``atomic_path``, ``replace_file``) and every CSV file is split by
``safe_io.read_rows``. This test scans the package source and fails when a new
``os.replace``/``os.rename``/``Path.rename``/``csv.reader``/``csv.DictReader`` appears
anywhere else. The allow-list holds the duplicates that existed when the one home was made;
each is to be switched to ``safe_io`` (see the hand-over report) and then removed from the
list, which should end empty.
"""

from __future__ import annotations

import ast
from pathlib import Path

import shuffledp

ROOT = Path(shuffledp.__file__).resolve().parent.parent
#: the package's source folders (shuffledp/encoders, analyzers, accounting are links to these)
FOLDERS = ("shuffledp", "encoders", "analyzers", "accounting")

HOME = {"shuffledp/safe_io.py"}

#: (file, call) pairs still to be switched to safe_io; shrink to empty
ALLOWED = {
    ("shuffledp/serve/shuffler_service.py", "os.rename"),  # _store -> replace_file
    ("shuffledp/cli/metric.py", "csv.reader"),            # load_user_items -> read_rows
    ("shuffledp/sweep/store.py", "csv.DictReader"),       # done_keys -> read_rows
}


def _calls(tree: ast.AST) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                name = f"{f.value.id}.{f.attr}"
                if name in ("os.replace", "os.rename", "csv.reader", "csv.DictReader"):
                    found.append((name, node.lineno))
            if (isinstance(f, ast.Attribute) and f.attr in ("rename", "replace")
                    and not (isinstance(f.value, ast.Name) and f.value.id == "os")
                    and len(node.args) == 1 and not node.keywords
                    and isinstance(node.args[0], (ast.Name, ast.Attribute, ast.BinOp))):
                # Path.rename(x) / Path.replace(x); str.replace takes two arguments
                found.append((f".{f.attr}", node.lineno))
        elif isinstance(node, ast.ImportFrom) and node.module in ("os", "csv", "shutil"):
            for alias in node.names:
                if alias.name in ("replace", "rename", "reader", "DictReader", "move"):
                    found.append((f"from {node.module} import {alias.name}", node.lineno))
    return found


def _sources() -> list[Path]:
    files = []
    for folder in FOLDERS:
        base = ROOT / folder
        for path in base.rglob("*.py"):
            rel = path.relative_to(ROOT)
            if any((ROOT / part).is_symlink() for part in (rel, *rel.parents[:-1])):
                continue  # shuffledp/encoders etc. lead to the top-level folders
            files.append(path)
    return sorted(set(files))


def test_the_scan_sees_the_package():
    names = {p.relative_to(ROOT).as_posix() for p in _sources()}
    assert "shuffledp/safe_io.py" in names and "accounting/ledger.py" in names
    assert not any(n.startswith("shuffledp/encoders/") for n in names)  # links skipped


def test_renames_and_csv_readers_only_in_safe_io():
    seen: set[tuple[str, str]] = set()
    stray = []
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        if rel in HOME:
            continue
        for call, line in _calls(ast.parse(path.read_text(encoding="utf-8"))):
            if (rel, call) in ALLOWED:
                seen.add((rel, call))
            else:
                stray.append(f"{rel}:{line}: {call}")
    assert not stray, ("write through shuffledp.safe_io (write_atomic, atomic_output, "
                       "atomic_path, replace_file) and read CSV through safe_io.read_rows:\n"
                       + "\n".join(stray))
    gone = ALLOWED - seen
    assert not gone, f"switched to safe_io: remove from ALLOWED: {sorted(gone)}"
