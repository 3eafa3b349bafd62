"""Citations anyone can check: papers are cited by key, never by internal file names.

Every tracked Python file is scanned (``git ls-files``):

* no "seed" + " 00" + digit (the project's private names for the papers) and no file name of
  the private paper copies (three digits, an underscore, 16 hex digits, ``.txt``);
* every ``[<key>]_`` citation in a module's docstrings resolves to a ``.. [<key>]`` entry in a
  numpydoc ``References`` section of the same module, and no key is defined twice there
  (Sphinx renders a module's docstrings on one page).

The helper tests feed the scanners known-bad text, so the checks are shown to fail when they
should.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PRIVATE_NAME = re.compile(r"seed 00\d", re.IGNORECASE)
PRIVATE_FILE = re.compile(r"00[0-4]_[0-9a-f]{16}\.txt")
CITED = re.compile(r"\[([A-Za-z][A-Za-z0-9+.:-]*)\]_")
DEFINED = re.compile(r"^\s*\.\. \[([A-Za-z][A-Za-z0-9+.:-]*)\]", re.MULTILINE)


def tracked_python_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return [ROOT / line for line in out.splitlines() if (ROOT / line).is_file()]


def private_references(text: str) -> list[str]:
    """Every internal paper name or private file name in ``text``."""
    return [m.group(0) for rx in (PRIVATE_NAME, PRIVATE_FILE) for m in rx.finditer(text)]


def docstrings(source: str) -> list[str]:
    """The module, class and function docstrings of a Python source."""
    tree = ast.parse(source)
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(
        n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    return [d for d in (ast.get_docstring(n, clean=False) for n in nodes) if d]


def citation_problems(source: str) -> list[str]:
    """Keys cited but not defined, and keys defined more than once, in one module."""
    docs = "\n".join(docstrings(source))
    cited = set(CITED.findall(docs))
    defined = DEFINED.findall(docs)
    problems = [f"[{k}]_ has no '.. [{k}]' entry" for k in sorted(cited - set(defined))]
    problems += [f"'.. [{k}]' defined {defined.count(k)} times"
                 for k in sorted(set(defined)) if defined.count(k) > 1]
    return problems


def test_no_internal_paper_names_or_files():
    bad = {}
    for path in tracked_python_files():
        found = private_references(path.read_text(encoding="utf-8"))
        if found:
            bad[str(path.relative_to(ROOT))] = sorted(set(found))
    assert not bad, f"cite papers by key ([Ghazi23]_ ...), not by internal names: {bad}"


def test_every_cited_key_has_a_reference_entry():
    bad = {}
    for path in tracked_python_files():
        problems = citation_problems(path.read_text(encoding="utf-8"))
        if problems:
            bad[str(path.relative_to(ROOT))] = problems
    assert not bad, f"unresolved or duplicate citation keys: {bad}"


@pytest.mark.parametrize("text", [
    "see seed " + "004, Thm 4.3",
    "(Seed " + "000, App. F)",
    "read 000_" + "d4632881d1ce4c52" + ".txt",
], ids=["seed-name", "capitalised", "file-name"])
def test_private_reference_scanner_flags(text):
    assert private_references(text)


@pytest.mark.parametrize("text", [
    "seeds 0 to 3", "rng seed 0", "[Ghazi23]_ App. F", "000_short.txt",
], ids=["plural", "rng-seed", "key", "not-a-paper-file"])
def test_private_reference_scanner_passes(text):
    assert not private_references(text)


def test_citation_scanner_flags_missing_and_duplicate_entries():
    missing = '"""Uses [Foo21]_ Thm 1.\n\nReferences\n----------\n.. [Bar] B. Bar."""\n'
    assert citation_problems(missing) == ["[Foo21]_ has no '.. [Foo21]' entry"]
    twice = ('"""[Bar]_.\n\n.. [Bar] B. Bar."""\n\n'
             'def f():\n    """[Bar]_.\n\n    .. [Bar] B. Bar.\n    """\n')
    assert citation_problems(twice) == ["'.. [Bar]' defined 2 times"]


def test_citation_scanner_accepts_function_level_entries():
    source = ('"""Module."""\n\n\ndef f():\n    """See [BJO+19]_.\n\n    References\n'
              '    ----------\n    .. [BJO+19] Z. Bylinskii et al.\n    """\n')
    assert citation_problems(source) == []


TRACKER = re.compile(r"(?<![/\w])[Ii]ssues? #?\d+")


def tracker_references(text: str) -> list[str]:
    """References to an issue tracker that is not in the repository ("issue" and a number);
    an upstream project's issue (``dask/distributed issue #8576``) names its project."""
    return [m.group(0) for m in TRACKER.finditer(text)
            if "distributed issue" not in text[max(0, m.start() - 12):m.end()]]


def test_tracker_scanner_catches_what_it_should():
    n = "18"  # built at run time, so this file does not cite a tracker itself
    found = tracker_references(f"see issue {n}, item 2 and Issue {n}")
    assert found == [f"issue {n}", f"Issue {n}"]
    assert tracker_references("(dask/distributed issue #8576)") == []


def test_no_references_to_a_private_issue_tracker():
    out = subprocess.run(["git", "ls-files", "*.py", "*.md"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout if (ROOT / ".git").exists() else ""
    if not out:
        pytest.skip("not a git checkout: the tracked files are unknown")
    bad = [f"{line}: {ref}" for line in out.splitlines() if (ROOT / line).is_file()
           for ref in tracker_references((ROOT / line).read_text(errors="replace"))]
    assert not bad, "\n".join(bad)


def test_every_cited_key_is_in_the_bibliography():
    # docs/references.md is the one bibliography: a module's short entry points there
    listed = set(re.findall(r"^- \*\*\[([^\]]+)\]\*\*", (ROOT / "docs" / "references.md")
                            .read_text(), re.MULTILINE))
    missing = sorted({f"{path.relative_to(ROOT)}: [{key}]" for path in tracked_python_files()
                      if path.relative_to(ROOT).parts[0] in ("shuffledp", "encoders",
                                                             "analyzers", "accounting")
                      for key in DEFINED.findall(path.read_text())
                      if key not in listed})
    assert not missing, "\n".join(missing)
