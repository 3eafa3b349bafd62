"""The declared minimum versions are the ones CI tests.

pyproject.toml declares a floor (``name>=X``) for every dependency, runtime and each extra;
constraints/minimum.txt pins each of them at exactly that floor (``name==X``), and CI's second
pass (.ci/run) installs with those constraints and runs the whole suite. These tests keep the
two files from drifting apart, so a floor raised or lowered in one place is tested as declared.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
CONSTRAINTS = ROOT / "constraints" / "minimum.txt"
CI = ROOT / ".ci" / "run"

#: name, optional [extras], one floor, nothing else (no upper bound, marker or second clause)
_FLOOR = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[A-Za-z0-9._,-]+\])?>=([0-9][0-9A-Za-z.+!-]*)$"
)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!-]*)$")

pytestmark = pytest.mark.skipif(
    not (PYPROJECT.is_file() and CONSTRAINTS.is_file()),
    reason="needs the source checkout (pyproject.toml and constraints/minimum.txt)",
)


def _norm(name: str) -> str:
    """PEP 503 normalised project name (POT == pot, dp_accounting == dp-accounting)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> list[tuple[str, str]]:
    """(where, requirement) for every requirement of pyproject.toml."""
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    out = [("dependencies", r) for r in project["dependencies"]]
    for extra, reqs in project.get("optional-dependencies", {}).items():
        out += [(f"[{extra}]", r) for r in reqs]
    return out


def _floors() -> dict[str, str]:
    floors: dict[str, str] = {}
    for where, req in _declared():
        m = _FLOOR.match(req.replace(" ", ""))
        assert m, f"{where}: {req!r} is not of the form name>=floor"
        name, floor = _norm(m.group(1)), m.group(3)
        assert floors.setdefault(name, floor) == floor, (
            f"{name} has two floors in pyproject.toml: {floors[name]} and {floor} ({where})"
        )
    return floors


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for n, line in enumerate(CONSTRAINTS.read_text(encoding="utf-8").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = _PIN.match(line.replace(" ", ""))
        assert m, f"constraints/minimum.txt line {n}: {line!r} is not of the form name==version"
        name = _norm(m.group(1))
        assert name not in pins, f"constraints/minimum.txt pins {name} twice"
        pins[name] = m.group(2)
    return pins


def test_every_dependency_has_one_floor():
    floors = _floors()
    assert {"numpy", "scipy", "cryptography", "click", "pytest"} <= floors.keys()


def test_constraints_pin_exactly_the_declared_floors():
    floors, pins = _floors(), _pins()
    assert sorted(floors.keys() - pins.keys()) == [], "declared but not pinned at its floor"
    assert sorted(pins.keys() - floors.keys()) == [], "pinned but not a declared dependency"
    differ = {k: (floors[k], pins[k]) for k in floors if floors[k] != pins[k]}
    assert differ == {}, "name: (floor in pyproject.toml, pin in constraints/minimum.txt)"


def test_ci_runs_the_suite_at_the_minimum_versions():
    if not CI.is_file():
        pytest.skip("no .ci/run in this tree")
    assert "-c constraints/minimum.txt" in CI.read_text(encoding="utf-8")
