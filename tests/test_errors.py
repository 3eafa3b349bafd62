"""One base class of refusals: every refusal type is a ``shuffledp.Refused`` (a
``ValueError``), and the command line turns each into one line with exit status 1."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import click
import numpy as np
import pytest

import shuffledp
import shuffledp.errors
from shuffledp.accounting.ledger import BudgetExceeded, LegacyLedger
from shuffledp.analyzers.federated import FederatedRefused
from shuffledp.analyzers.heatmap.modular import ReleaseRefused
from shuffledp.analyzers.heatmap.release_ledger import LedgerError, RoundAlreadyReleased
from shuffledp.cli.common import as_refusal, as_usage_error, one_line_errors
from shuffledp.errors import Refused
from shuffledp.protocol.federated import federated_histogram
from shuffledp.safe_io import LockBusy, TamperedLog
from shuffledp.secagg import SecAggAborted, SecAggRefused
from shuffledp.serve.client import Refused as ServiceRefused

REFUSALS = (ReleaseRefused, FederatedRefused, SecAggRefused, SecAggAborted, BudgetExceeded,
            LegacyLedger, LockBusy, TamperedLog, RoundAlreadyReleased, LedgerError)


def test_refused_is_exported_and_a_value_error():
    assert shuffledp.Refused is Refused
    assert "Refused" in shuffledp.__all__
    assert issubclass(Refused, ValueError)


@pytest.mark.parametrize("cls", REFUSALS, ids=lambda c: c.__name__)
def test_every_refusal_type_is_a_refused(cls):
    assert issubclass(cls, shuffledp.Refused)
    assert issubclass(cls, ValueError)  # callers that caught ValueError keep working


def _refusal_classes_in_the_source() -> dict[str, str]:
    """{class name: module} of every class of the installed package that subclasses Refused
    (directly or through another refusal), found by parsing the source (no imports)."""
    found: dict[str, str] = {}
    defs = []
    roots = [Path(p) for p in shuffledp.__path__]
    for sub in ("analyzers", "accounting", "encoders"):
        mod = importlib.util.find_spec(f"shuffledp.{sub}")
        roots.extend(Path(p) for p in mod.submodule_search_locations)
    for base in dict.fromkeys(roots):
        for path in sorted(base.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    names = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                             for b in node.bases]
                    defs.append((node.name, names, path.name))
    known = {"Refused"}
    while True:
        new = {(n, p) for n, bases, p in defs if n not in known and known & set(bases)}
        if not new:
            return found
        for n, p in new:
            known.add(n)
            found[n] = p


def test_the_table_and_the_tests_list_every_refusal_type():
    """Every Refused subclass of the package is in REFUSALS (so the tests above check it)
    and in the table of shuffledp/errors.py's docstring."""
    in_source = _refusal_classes_in_the_source()
    assert set(in_source) == {c.__name__ for c in REFUSALS}, in_source
    doc = shuffledp.errors.__doc__
    for cls in REFUSALS:
        assert f".{cls.__name__}`" in doc, cls.__name__


def test_release_refused_is_still_a_runtime_error():
    assert issubclass(ReleaseRefused, RuntimeError)  # its base before 0.2


def test_the_http_clients_refused_is_not_a_refusal_of_this_process():
    assert not issubclass(ServiceRefused, Refused)


def test_a_raised_refusal_is_caught_as_refused():
    dropped = np.zeros(20, bool)
    dropped[:3] = True  # 17 survivors < n_min = 18
    with pytest.raises(Refused, match="n_min=18"):
        federated_histogram(np.zeros(20, dtype=int), 4, 1.0, shard_size=20, dropout=0.1,
                            dropped=dropped, neighbour="zero_out", aggregation="plain", rng=0)


def _raise(cls):
    raise cls("the reason, with numbers: 17 < 18")


@pytest.mark.parametrize("cls", REFUSALS, ids=lambda c: c.__name__)
def test_the_cli_maps_a_refusal_to_exit_1_and_one_line(cls):
    with pytest.raises(click.ClickException) as e, one_line_errors():
        _raise(cls)
    assert not isinstance(e.value, click.UsageError)
    assert e.value.exit_code == 1
    assert e.value.format_message() == "the reason, with numbers: 17 < 18"
    # even where a ValueError would be a usage error (exit 2), a refusal stays exit 1
    with pytest.raises(click.ClickException) as e:
        as_usage_error(_raise, cls)
    assert e.value.exit_code == 1 and not isinstance(e.value, click.UsageError)
    with pytest.raises(click.ClickException) as e:
        as_refusal("--x 1", _raise, cls)
    assert e.value.exit_code == 1
    assert e.value.format_message() == "--x 1: the reason, with numbers: 17 < 18"


@pytest.mark.parametrize("name", ["REPLACE_ONE", "ADD_REMOVE_ONE", "ZERO_OUT", "BOUNDED_EMD"])
def test_neighbours_have_one_spelling(name):
    # the relation is spelled Neighbour.X only; no module-level alias exists
    from shuffledp.accounting import guarantee

    with pytest.raises(AttributeError):
        getattr(guarantee, name)
