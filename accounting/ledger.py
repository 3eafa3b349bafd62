"""Releases from files: report.json -> event, composition specs, and a budget ledger.

``shuffledp account compose`` reads releases' ``report.json`` files (or a JSON spec) and
composes them; ``shuffledp heatmap --budget-ledger FILE`` appends each release to a ledger
and refuses one that would take the composition past the ledger's total.

A spec is a JSON object::

    {"delta": 1e-6,                       # optional: the total delta (else --delta)
     "discretization": 1e-4,              # optional
     "releases": [
        {"report": "day1/report.json", "count": 365},   # a release, repeated
        {"event": {"type": "discrete_laplace", "parameter": 0.1}, "count": 4},
        {"parallel": [{"report": "a.json"}, {"report": "b.json"}]}  # disjoint users
     ]}

Paths in a spec are relative to the spec's directory. A ledger is a JSON object
``{"epsilon": E, "delta": D, "discretization": h, "releases": [{"event": ..., "label": ...,
"time": ...}, ...]}``: the total (E, D) is set when the ledger is created.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shuffledp import _validation as v
from shuffledp.accounting.compose import Accountant, Composition
from shuffledp.accounting.events import (
    DEFAULT_DISCRETIZATION,
    EpsDelta,
    Parallel,
    PrivacyEvent,
    event_from_dict,
)
from shuffledp.accounting.guarantee import Guarantee
from shuffledp.errors import Refused
from shuffledp.safe_io import read_regular_text, write_atomic

#: largest JSON file read (reports and specs)
MAX_JSON_BYTES = 64 << 20


def _read_json(path: str | os.PathLike[str], what: str) -> Any:

    text = read_regular_text(path, MAX_JSON_BYTES, what=what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} {str(path)!r} is not JSON: {exc}") from None


def event_of_report(report: Mapping[str, Any], source: str = "report") -> tuple[PrivacyEvent,
                                                                                   str | None]:
    """The event of a release's report (``guarantee.event``), or, for a report written
    before events existed, an (epsilon, delta) event from its guarantee; the second value is
    a note saying so (None when the report carried its event)."""
    g = report.get("guarantee") if isinstance(report, Mapping) else None
    if not isinstance(g, Mapping):
        raise ValueError(f"{source}: no 'guarantee' object in the report")
    if isinstance(g.get("event"), Mapping):
        return event_from_dict(g["event"]), None
    try:
        guar = Guarantee(notion=g["notion"], model=g["model"], epsilon=g["epsilon"],
                         delta=g.get("delta", 0.0), neighbour=g.get("neighbour", "add_remove"))
    except KeyError as exc:
        raise ValueError(f"{source}: the guarantee has no {exc.args[0]!r}") from None
    return (EpsDelta.from_guarantee(guar, label=source),
            f"{source}: no event in the report; its (epsilon, delta) is composed as is")


def _entry(item: Any, base: Path, notes: list[str]) -> tuple[PrivacyEvent, int]:
    if not isinstance(item, Mapping):
        raise ValueError(f"a spec release must be an object, got {item!r}")
    count = v.count("count", item.get("count", 1), 1)
    keys = {"report", "event", "parallel"} & set(item)
    if len(keys) != 1:
        raise ValueError(f"a spec release needs exactly one of 'report', 'event', 'parallel', "
                         f"got keys {sorted(item)}")
    if "report" in item:
        path = base / str(item["report"])
        ev, note = event_of_report(_read_json(path, "report"), str(path))
        if note:
            notes.append(note)
    elif "event" in item:
        ev = event_from_dict(item["event"])
    else:
        branches = [_entry(b, base, notes) for b in item["parallel"]]
        evs = tuple(e for e, k in branches for _ in range(k))
        ev = Parallel(branches=evs, neighbour=evs[0].neighbour)
    return ev, count


def accountant_from_spec(spec: Mapping[str, Any], base: str | os.PathLike[str] = ".",
                         discretization: float | None = None
                         ) -> tuple[Accountant, list[str]]:
    """An accountant holding a spec's releases, and the notes on how they were read."""
    if not isinstance(spec, Mapping) or not isinstance(spec.get("releases"), list):
        raise ValueError("a spec must be an object with a 'releases' list")
    h = discretization or spec.get("discretization", DEFAULT_DISCRETIZATION)
    acc = Accountant(h)
    notes: list[str] = []
    for item in spec["releases"]:
        ev, k = _entry(item, Path(base), notes)
        acc.compose(ev, k)
    return acc, notes


def accountant_from_reports(paths: list[str], discretization: float = DEFAULT_DISCRETIZATION
                            ) -> tuple[Accountant, list[str]]:
    acc = Accountant(discretization)
    notes: list[str] = []
    for p in paths:
        ev, note = event_of_report(_read_json(p, "report"), p)
        if note:
            notes.append(note)
        acc.compose(ev)
    return acc, notes


class BudgetExceeded(Refused):
    """A release would take the composition past the ledger's total."""


@dataclass(frozen=True)
class BudgetLedger:
    """A ledger file: a total (epsilon, delta) and the releases made so far."""

    path: Path
    epsilon: float
    delta: float
    discretization: float
    releases: tuple[Mapping[str, Any], ...]

    @classmethod
    def open(cls, path: str | os.PathLike[str], epsilon: float | None = None,
             delta: float | None = None) -> BudgetLedger:
        """Read the ledger at ``path``, or start one with total (epsilon, delta) (both
        required then). A total given for an existing ledger must match its own."""
        p = Path(path)
        if p.exists():
            data = _read_json(p, "budget ledger")
            try:
                led = cls(p, v.positive("epsilon", data["epsilon"]),
                          v.probability("delta", data["delta"]),
                          v.positive("discretization",
                                     data.get("discretization", DEFAULT_DISCRETIZATION)),
                          tuple(data.get("releases", [])))
            except KeyError as exc:
                raise ValueError(f"budget ledger {str(p)!r} has no {exc.args[0]!r}") from None
            for name, given, own in (("epsilon", epsilon, led.epsilon),
                                     ("delta", delta, led.delta)):
                if given is not None and given != own:
                    raise ValueError(f"the ledger {str(p)!r} has total {name}={own!r}; "
                                     f"got {name}={given!r} (a total is fixed when the ledger "
                                     "is created)")
            return led
        if epsilon is None or delta is None:
            raise ValueError(f"no budget ledger at {str(p)!r}: give its total epsilon and "
                             "delta to start one")
        return cls(p, v.positive("epsilon", epsilon), v.probability("delta", delta),
                   DEFAULT_DISCRETIZATION, ())

    def accountant(self) -> Accountant:
        acc = Accountant(self.discretization)
        for r in self.releases:
            acc.compose(event_from_dict(r["event"]))
        return acc

    def check(self, event: PrivacyEvent) -> Composition:
        """The composition with ``event`` added; BudgetExceeded if it passes the total."""
        acc = self.accountant().compose(event)
        try:
            res = acc.epsilon(self.delta)
        except ValueError as exc:
            raise BudgetExceeded(f"release refused: {exc}") from None
        if res.epsilon > self.epsilon:
            raise BudgetExceeded(
                f"release refused: with it the {acc.releases} releases in {str(self.path)!r} "
                f"compose to epsilon={res.epsilon:.6g} ({res.method}) at delta={self.delta:g}, "
                f"above the ledger's total epsilon={self.epsilon:g}")
        return res

    def append(self, event: PrivacyEvent, label: str = "") -> tuple[BudgetLedger, Composition]:
        """Check and record ``event``; the file is replaced atomically."""

        res = self.check(event)
        rec = {"event": event.to_dict(), "label": label,
               "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        new = BudgetLedger(self.path, self.epsilon, self.delta, self.discretization,
                           self.releases + (rec,))
        data = {"epsilon": self.epsilon, "delta": self.delta,
                "discretization": self.discretization, "releases": list(new.releases),
                "spent": {"epsilon": res.epsilon, "delta": res.delta, "method": res.method}}
        write_atomic(self.path, (json.dumps(data, indent=1) + "\n").encode())
        return new, res


__all__ = ["BudgetExceeded", "BudgetLedger", "accountant_from_reports", "accountant_from_spec",
           "event_of_report"]
