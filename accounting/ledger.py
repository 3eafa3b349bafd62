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

References
----------
.. [ZDW22] Zhu et al. (2022), "Optimal Accounting of Differential Privacy via Characteristic
   Function", Def. 7, Thm 10 -- full entry in docs/references.md
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shuffledp import _validation as v
from shuffledp.accounting.composition import Accountant, Composition, check_parallel_groups
from shuffledp.accounting.events import (
    DEFAULT_DISCRETIZATION,
    EpsDelta,
    Parallel,
    PrivacyEvent,
    event_from_dict,
)
from shuffledp.accounting.guarantee import Guarantee
from shuffledp.errors import Refused
from shuffledp.safe_io import (
    GENESIS,
    LOCK_TIMEOUT,
    REPORT_SCHEMA,
    ChainedLog,
    TamperedLog,
    check_schema,
    exclusive_lock,
    read_regular_text,
    replace_file,
)

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
    a note saying so (None when the report carried its event).

    Parameters
    ----------
    report : Mapping
        A parsed ``report.json`` (schema ``shuffledp-report/1``).
    source : str
        Names the report in messages and labels.

    Returns
    -------
    tuple of (PrivacyEvent, str or None)
        The release's event and the note.

    Raises
    ------
    ValueError
        The report is of another schema or a later version, has no ``guarantee`` object,
        its guarantee lacks a field, or its event is refused (:func:`event_from_dict`).

    References
    ----------
    [ZDW22]_ Def. 7 (the event stands for the release's dominating pair).
    """
    if isinstance(report, Mapping):
        check_schema(report, REPORT_SCHEMA, source)
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
    """An accountant holding a spec's releases, and the notes on how they were read.

    Parameters
    ----------
    spec : Mapping
        The spec (module notes): a ``releases`` list, optionally ``discretization``.
    base : str or path-like
        Directory the spec's report paths are relative to.
    discretization : float, optional
        Grid step of the PLD composition (default: the spec's, else the accountant's).

    Returns
    -------
    tuple of (Accountant, list of str)
        The accountant and the notes (reports without an event, read as (eps, delta)).

    Raises
    ------
    ValueError
        The spec or a release in it is malformed, a report is unreadable JSON or refused,
        the releases' neighbour relations or notions differ, or a ``parallel`` group is
        visibly not disjoint (:func:`~shuffledp.accounting.composition.check_parallel_groups`).
    OSError
        A report cannot be read.
    TypeError
        A release's ``count`` is not an integer.

    References
    ----------
    [ZDW22]_ Thm 10 (the releases' pairs compose).
    """
    if not isinstance(spec, Mapping) or not isinstance(spec.get("releases"), list):
        raise ValueError("a spec must be an object with a 'releases' list")
    check_parallel_groups(spec, base)
    h = discretization or spec.get("discretization", DEFAULT_DISCRETIZATION)
    acc = Accountant(h)
    notes: list[str] = []
    for item in spec["releases"]:
        ev, k = _entry(item, Path(base), notes)
        acc.compose(ev, k)
    return acc, notes


def accountant_from_reports(paths: list[str], discretization: float = DEFAULT_DISCRETIZATION
                            ) -> tuple[Accountant, list[str]]:
    """An accountant holding the releases of ``report.json`` files, composed in sequence.

    Parameters
    ----------
    paths : list of str
        The reports' paths.
    discretization : float
        Grid step of the PLD composition (<= 0.1).

    Returns
    -------
    tuple of (Accountant, list of str)
        The accountant and the notes (reports without an event, read as (eps, delta)).

    Raises
    ------
    OSError
        A report cannot be read.
    ValueError
        A report is not JSON, is of another schema, or its event is refused; or the
        releases' neighbour relations or notions differ.

    References
    ----------
    [ZDW22]_ Thm 10 (the releases' pairs compose).
    """
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


class LegacyLedger(Refused):
    """A ledger in the format before hash chaining (one JSON object replaced on each
    release, with no lock: releases could be lost); convert it with
    :func:`convert_legacy_ledger`."""


#: Format version of the ledger's first entry.
LEDGER_VERSION = 2


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class Charge:
    """The receipt of one release recorded in a budget ledger.

    Attributes
    ----------
    ledger : str
        The ledger's path.
    ledger_id : str
        The ledger's random identifier (set when it was created): a ledger deleted and
        started again has another one, so a report's receipt tells them apart.
    entry : int
        The release's entry in the ledger's log (entry 0 is the ledger's header).
    head : str
        The log's head hash once the release was recorded (hex SHA-256).
    composition : Composition
        All the ledger's releases, this one included, composed at the ledger's delta.
    total : (float, float)
        The ledger's total (epsilon, delta).
    """

    ledger: str
    ledger_id: str
    entry: int
    head: str
    composition: Composition
    total: tuple[float, float]

    def to_dict(self) -> dict[str, Any]:
        """The receipt for a release's report (no data: the ledger, entry, head, spent)."""
        c = self.composition
        return {"ledger": self.ledger, "ledger_id": self.ledger_id, "entry": self.entry,
                "head": self.head, "releases": c.releases,
                "spent": {"epsilon": c.epsilon, "delta": c.delta, "method": c.method},
                "total": {"epsilon": self.total[0], "delta": self.total[1]}}


def _header(path: Path, body: Mapping[str, Any]) -> tuple[float, float, float, str]:
    """(epsilon, delta, discretization, id) of a ledger's first entry."""
    if body.get("type") != "budget_ledger":
        raise ValueError(f"budget ledger {str(path)!r}: its first entry is not a ledger header "
                         f"(type={body.get('type')!r})")
    try:
        return (v.positive("epsilon", body["epsilon"]), v.probability("delta", body["delta"]),
                v.positive("discretization", body["discretization"]), str(body["id"]))
    except KeyError as exc:
        raise ValueError(f"budget ledger {str(path)!r} has no {exc.args[0]!r}") from None


def _is_legacy(path: Path) -> bool:
    try:
        data = json.loads(read_regular_text(path, MAX_JSON_BYTES, what="budget ledger"))
    except (ValueError, OSError):
        return False
    return isinstance(data, Mapping) and "releases" in data and "seq" not in data


@contextmanager
def _locked_log(path: Path, timeout: float) -> Iterator[ChainedLog]:
    """The ledger's log, locked and verified (a legacy ledger refused by name)."""
    try:
        with ChainedLog(path, what="budget ledger", timeout=timeout).locked() as log:
            yield log
    except TamperedLog:
        if _is_legacy(path):
            raise LegacyLedger(
                f"budget ledger {str(path)!r} is in the format before hash chaining (releases "
                "could be lost under concurrency); convert it once with "
                "shuffledp.accounting.ledger.convert_legacy_ledger(path)") from None
        raise


def _check_totals(path: Path, epsilon: float | None, delta: float | None, own_eps: float,
                  own_delta: float) -> None:
    for name, given, own in (("epsilon", epsilon, own_eps), ("delta", delta, own_delta)):
        if given is not None and given != own:
            raise ValueError(f"the ledger {str(path)!r} has total {name}={own!r}; got "
                             f"{name}={given!r} (a total is fixed when the ledger is created)")


def _events(bodies: tuple[Mapping[str, Any], ...]) -> list[PrivacyEvent]:
    return [event_from_dict(b["event"]) for b in bodies[1:] if b.get("type") == "charge"]


def _compose(events: list[PrivacyEvent], discretization: float) -> Accountant:
    acc = Accountant(discretization)
    for e in events:
        acc.compose(e)
    return acc


@dataclass(frozen=True)
class BudgetLedger:
    """A privacy-budget ledger: a total (epsilon, delta) and the releases charged to it.

    The ledger is a :class:`shuffledp.safe_io.ChainedLog` at ``path`` (with ``path.head``
    and ``path.lock`` beside it): entry 0 is the header (total epsilon and delta, PLD
    discretization, a random identifier), every later entry a release charged (its
    :class:`~shuffledp.accounting.events.PrivacyEvent`, a label, the time and the composed
    spend) or a refused attempt. :meth:`charge` is atomic across processes: under an
    exclusive lock it re-reads and verifies the whole log, composes every charged event with
    the new one (:class:`~shuffledp.accounting.composition.Accountant`, at the ledger's delta),
    and either appends the charge (durably, before returning) or refuses. A caller that
    publishes only after :meth:`charge` returned can never publish an uncharged release;
    a crash after the charge and before publishing over-counts, never under-counts.

    Tamper evidence, not tamper proofing: an edited, deleted, reordered or inserted entry,
    a truncated log, or a log deleted while its head remains is refused
    (:class:`shuffledp.safe_io.TamperedLog`), so deleting entries cannot reset the budget
    silently. Someone who can write the files and recomputes the hash chain, or deletes the
    log and its head together, is not stopped (there is no secret key); every charge's
    receipt (:class:`Charge`: ledger id, entry, head hash) goes into the release's report,
    which anchors the ledger's history outside it.

    Attributes
    ----------
    path : Path
    epsilon, delta : float
        The total.
    discretization : float
        The PLD grid of the composition.
    releases : tuple of Mapping
        The charged entries (``event``, ``label``, ``time``, ``spent``), oldest first, as read.
    ledger_id : str
        Empty for a ledger not yet created.
    head : str
        The log's head hash when read.
    """

    path: Path
    epsilon: float
    delta: float
    discretization: float
    releases: tuple[Mapping[str, Any], ...]
    ledger_id: str = ""
    head: str = GENESIS

    @classmethod
    def open(cls, path: str | os.PathLike[str], epsilon: float | None = None,
             delta: float | None = None, *, timeout: float = LOCK_TIMEOUT) -> BudgetLedger:
        """A verified snapshot of the ledger at ``path``, or of a new one with total
        (epsilon, delta) (both required then; it is created by the first :meth:`charge`).
        A total given for an existing ledger must match its own.

        Raises
        ------
        ValueError
            No ledger and no total, or a total that differs from the ledger's.
        shuffledp.safe_io.TamperedLog, LegacyLedger, shuffledp.safe_io.LockBusy
            The ledger does not verify, is in the old format, or stays locked.
        """
        p = Path(path)
        with _locked_log(p, timeout) as log:
            bodies = log.bodies
            head = log.head
        if not bodies:
            if epsilon is None or delta is None:
                raise ValueError(f"no budget ledger at {str(p)!r}: give its total epsilon and "
                                 "delta to start one")
            return cls(p, v.positive("epsilon", epsilon), v.probability("delta", delta),
                       DEFAULT_DISCRETIZATION, ())
        eps, dlt, h, lid = _header(p, bodies[0])
        _check_totals(p, epsilon, delta, eps, dlt)
        return cls(p, eps, dlt, h, tuple(b for b in bodies[1:] if b.get("type") == "charge"),
                   lid, head)

    def accountant(self) -> Accountant:
        """The releases of this snapshot, composed."""
        return _compose([event_from_dict(r["event"]) for r in self.releases],
                        self.discretization)

    def _spend(self, acc: Accountant) -> Composition:
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

    def check(self, event: PrivacyEvent) -> Composition:
        """The composition of this snapshot with ``event`` added; BudgetExceeded if it passes
        the total. Advisory only (another process may charge meanwhile): :meth:`charge` is
        the atomic check-and-record."""
        return self._spend(self.accountant().compose(event))

    def charge(self, event: PrivacyEvent, label: str = "", *,
               timeout: float = LOCK_TIMEOUT) -> Charge:
        """Atomically check ``event`` against everything charged so far and record it.

        Under the ledger's lock: read and verify the log (creating it with this snapshot's
        total if it does not exist yet), compose all charged events with ``event`` and
        append the charge, or append a refused attempt and raise :class:`BudgetExceeded`.

        Returns
        -------
        Charge
            The receipt (ledger id, entry, head hash, composition).

        Raises
        ------
        BudgetExceeded
            The composition with ``event`` passes the total (the attempt is recorded).
        ValueError
            The ledger was created meanwhile with another total; an event the accountant
            cannot compose with the others (e.g. another neighbour relation).
        shuffledp.safe_io.TamperedLog, LegacyLedger, shuffledp.safe_io.LockBusy
        """
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"event must be a PrivacyEvent, got event={event!r}")
        with _locked_log(self.path, timeout) as log:
            if not len(log):
                log.append({"type": "budget_ledger", "version": LEDGER_VERSION,
                            "epsilon": self.epsilon, "delta": self.delta,
                            "discretization": self.discretization,
                            "id": os.urandom(16).hex(), "created": _now()})
            bodies = log.bodies
            eps, dlt, h, lid = _header(self.path, bodies[0])
            _check_totals(self.path, self.epsilon, self.delta, eps, dlt)
            cur = BudgetLedger(self.path, eps, dlt, h,
                               tuple(b for b in bodies[1:] if b.get("type") == "charge"),
                               lid, log.head)
            acc = cur.accountant().compose(event)
            record = {"event": event.to_dict(), "label": str(label), "time": _now()}
            try:
                res = cur._spend(acc)
            except BudgetExceeded as exc:
                log.append({"type": "refused", **record, "reason": str(exc)})
                raise
            seq, head = log.append({"type": "charge", **record, "spent": {
                "epsilon": res.epsilon, "delta": res.delta, "method": res.method}})
        return Charge(str(self.path), lid, seq, head, res, (eps, dlt))

    def append(self, event: PrivacyEvent, label: str = "") -> tuple[BudgetLedger, Composition]:
        """:meth:`charge` ``event``; returns the ledger as it stands after the charge and
        the composition."""
        c = self.charge(event, label)
        return BudgetLedger.open(self.path), c.composition


def convert_legacy_ledger(path: str | os.PathLike[str]) -> BudgetLedger:
    """Convert a ledger of the format before hash chaining (one JSON object) in place.

    The old file is kept as ``path.legacy``; the new log has its total and its releases in
    order (labels prefixed ``converted:``). Releases that the old format lost under
    concurrency cannot be recovered: count them by hand (their reports) if there were
    concurrent runs.

    Parameters
    ----------
    path : str or path-like
        The old-format ledger file.

    Returns
    -------
    BudgetLedger
        The converted ledger, opened.

    Raises
    ------
    ValueError
        The file is not an old-format ledger, ``path.legacy`` exists already, or its total
        or a release in it is refused.
    OSError
        The file cannot be read, locked or moved.

    References
    ----------
    [ZDW22]_ Thm 10 (the converted releases are composed again as they are charged).
    """
    p = Path(path)
    with exclusive_lock(f"{p}.lock", what="budget ledger"):
        if not _is_legacy(p):
            raise ValueError(f"budget ledger {str(p)!r} is not a ledger of the old format")
        data = _read_json(p, "budget ledger")
        old = Path(f"{p}.legacy")
        if old.exists():
            raise ValueError(f"{str(old)!r} exists already: move it away first")
        replace_file(p, old, durable=True)
    led = BudgetLedger(p, v.positive("epsilon", data["epsilon"]),
                       v.probability("delta", data["delta"]),
                       v.positive("discretization",
                                  data.get("discretization", DEFAULT_DISCRETIZATION)), ())
    for r in data.get("releases", []):
        led.charge(event_from_dict(r["event"]), f"converted: {r.get('label', '')}")
    return BudgetLedger.open(p)


__all__ = ["BudgetExceeded", "BudgetLedger", "Charge", "LegacyLedger", "accountant_from_reports",
           "accountant_from_spec", "convert_legacy_ledger", "event_of_report"]
