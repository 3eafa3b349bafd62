"""The budget ledger: atomic charges across processes, and tamper evidence.

The concurrency tests run real processes (multiprocessing, fork) that wait at a barrier and
then charge the same ledger at once; before the ledger was locked and chained, each read the
file at start and replaced it at the end, so all of them passed and one was recorded.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shuffledp.accounting.events import DiscreteLaplace
from shuffledp.accounting.ledger import BudgetExceeded, BudgetLedger
from shuffledp.errors import Refused

pytestmark = pytest.mark.skipif(os.name != "posix", reason="flock and fork are POSIX")

#: a pure eps = 1 release
ONE = DiscreteLaplace(parameter=1.0)


def _charge_at_barrier(path: str, total: float, barrier, results, i: int) -> None:
    barrier.wait(timeout=60)
    try:
        # open + append: the API the ledger had before it was made atomic
        BudgetLedger.open(path, total, 1e-6).append(ONE, f"process {i}")
        results.put((i, "charged"))
    except BudgetExceeded:
        results.put((i, "refused"))
    except Exception as exc:  # pragma: no cover - reported by the assertion below
        results.put((i, f"{type(exc).__name__}: {exc}"))


def _charged_releases(path: Path) -> int:
    return len(BudgetLedger.open(path).releases)


def test_concurrent_charges_let_exactly_the_affordable_ones_through(tmp_path):
    """6 processes charge eps = 1 each at once against a total of 3.5: exactly 3 pass and
    all 3 are recorded (before: all 6 passed and 1 was recorded)."""
    ctx = mp.get_context("fork")
    path = str(tmp_path / "ledger.json")
    k = 6
    barrier, results = ctx.Barrier(k), ctx.Queue()
    procs = [ctx.Process(target=_charge_at_barrier, args=(path, 3.5, barrier, results, i))
             for i in range(k)]
    for p in procs:
        p.start()
    outcome = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert sorted(outcome.values()) == ["charged"] * 3 + ["refused"] * 3, outcome
    assert _charged_releases(tmp_path / "ledger.json") == 3
    led = BudgetLedger.open(path)
    assert sorted(r["label"] for r in led.releases) == sorted(
        f"process {i}" for i, o in outcome.items() if o == "charged")
    # the refused attempts are in the log too (not counted)
    lines = (tmp_path / "ledger.json").read_text().splitlines()
    kinds = [json.loads(x)["body"]["type"] for x in lines]
    assert kinds.count("charge") == 3 and kinds.count("refused") == 3
    assert led.accountant().epsilon(1e-6).epsilon <= 3.5


def test_concurrent_heatmap_runs_publish_only_what_the_ledger_records(tmp_path):
    """Three `shuffledp heatmap` processes at eps = 1 against a total of 2.5: two publish,
    two are recorded, the third writes nothing (before: three published, one recorded)."""
    led = tmp_path / "ledger.json"
    cmd = [sys.executable, "-m", "shuffledp.cli", "heatmap", "--grid", "8", "--n", "20",
           "--epsilon", "1", "--quiet", "--budget-ledger", str(led), "--budget-epsilon", "2.5",
           "--budget-delta", "1e-6"]
    procs = [subprocess.Popen([*cmd, "--out", str(tmp_path / f"r{i}")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 0, 1], outs
    published = sorted(d.name for d in tmp_path.iterdir() if d.name.startswith("r"))
    assert len(published) == 2
    assert sorted(r["label"] for r in BudgetLedger.open(led).releases) == sorted(
        f"heatmap --out {tmp_path / d}" for d in published)
    refused = next(err for (_, err), p in zip(outs, procs) if p.returncode == 1)
    assert "release refused" in refused and "Traceback" not in refused
    for d in published:  # each report carries its receipt
        rec = json.loads((tmp_path / d / "report.json").read_text())["budget_ledger"]
        assert rec["entry"] in (1, 2) and len(rec["head"]) == 64


def _drop_last_release(path: Path) -> None:
    """Remove the last recorded release the way a user editing the file would: from the
    'releases' list of the old JSON-object format, or the last line of the log."""
    text = path.read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        data["releases"].pop()
        path.write_text(json.dumps(data))
    else:
        path.write_text("".join(text.splitlines(keepends=True)[:-1]))


def test_deleting_a_release_does_not_reset_the_budget(tmp_path):
    """Before: deleting a release from the ledger gave its budget back silently."""
    path = tmp_path / "ledger.json"
    led = BudgetLedger.open(path, 2.5, 1e-6)
    led, _ = led.append(ONE, "a")
    led, _ = led.append(ONE, "b")
    _drop_last_release(path)
    with pytest.raises(Refused):
        BudgetLedger.open(path).append(ONE, "c")


def _ledger_with(tmp_path, k: int = 3) -> Path:
    path = tmp_path / "ledger.json"
    led = BudgetLedger.open(path, 10.0, 1e-6)
    for i in range(k):
        led.charge(ONE, f"r{i}")
    return path


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def _edit_epsilon(path: Path) -> None:
    lines = _lines(path)
    e = json.loads(lines[1])
    e["body"]["event"]["parameter"] = 0.001  # claim a far cheaper release
    lines[1] = json.dumps(e, sort_keys=True) + "\n"
    path.write_text("".join(lines))


def _edit_total(path: Path) -> None:
    lines = _lines(path)
    e = json.loads(lines[0])
    e["body"]["epsilon"] = 100.0
    lines[0] = json.dumps(e, sort_keys=True) + "\n"
    path.write_text("".join(lines))


TAMPERING = {
    "delete-middle-entry": lambda p: p.write_text("".join(_lines(p)[:2] + _lines(p)[3:])),
    "truncate-last-entry": lambda p: p.write_text("".join(_lines(p)[:-1])),
    "truncate-to-header": lambda p: p.write_text(_lines(p)[0]),
    "empty-log": lambda p: p.write_text(""),
    "delete-log": lambda p: p.unlink(),
    "delete-head": lambda p: Path(f"{p}.head").unlink(),
    "swap-entries": lambda p: p.write_text("".join(
        [_lines(p)[0], _lines(p)[2], _lines(p)[1], *_lines(p)[3:]])),
    "edit-an-event": _edit_epsilon,
    "edit-the-total": _edit_total,
    "rewrite-the-head": lambda p: Path(f"{p}.head").write_text(
        json.dumps({"entries": 2, "hash": json.loads(_lines(p)[1])["hash"]})),
    "garbage-line": lambda p: p.write_text("".join(_lines(p)[:2] + ["not json\n"]
                                                   + _lines(p)[2:])),
}


@pytest.mark.parametrize("how", sorted(TAMPERING))
def test_tampering_is_detected_and_refused(tmp_path, how):
    from shuffledp.safe_io import TamperedLog

    path = _ledger_with(tmp_path)
    TAMPERING[how](path)
    before = path.read_bytes() if path.exists() else None
    with pytest.raises(TamperedLog, match="fails verification"):
        BudgetLedger.open(path)
    led = BudgetLedger(path, 10.0, 1e-6, 1e-4, ())
    with pytest.raises(TamperedLog):
        led.charge(ONE, "after tampering")
    assert (path.read_bytes() if path.exists() else None) == before  # nothing appended


def test_a_crash_between_the_append_and_the_head_counts_the_charge(tmp_path):
    """The log one entry ahead of its head (a crash between the two writes) keeps the
    entry: over-counting is safe, under-counting is not."""
    path = _ledger_with(tmp_path, 2)
    head = Path(f"{path}.head")
    old_head = head.read_text()
    BudgetLedger.open(path).charge(ONE, "r2")
    head.write_text(old_head)
    assert len(BudgetLedger.open(path).releases) == 3
    assert json.loads(head.read_text())["entries"] == 4  # repaired


def test_a_torn_last_line_is_dropped(tmp_path):
    """A crash during the write leaves an unterminated line: that charge never returned,
    so it is dropped and the ledger stays usable."""
    path = _ledger_with(tmp_path, 2)
    with open(path, "a") as f:
        f.write('{"seq": 3, "prev": "ab')
    assert len(BudgetLedger.open(path).releases) == 2
    assert path.read_text().endswith("\n")
    BudgetLedger.open(path).charge(ONE, "r2")
    assert len(BudgetLedger.open(path).releases) == 3


def test_a_held_lock_is_waited_for_then_refused(tmp_path):
    from shuffledp.safe_io import LockBusy, exclusive_lock

    path = _ledger_with(tmp_path, 1)
    led = BudgetLedger.open(path)
    with exclusive_lock(f"{path}.lock"):  # flock: a second descriptor is another holder
        with pytest.raises(LockBusy, match=f"{path}: locked by another process for more "
                                           "than 0.2 s"):
            led.charge(ONE, "blocked", timeout=0.2)
    assert len(BudgetLedger.open(path).releases) == 1


def test_a_new_ledger_needs_its_total_and_keeps_it(tmp_path):
    path = tmp_path / "ledger.json"
    with pytest.raises(ValueError, match="give its total epsilon and delta"):
        BudgetLedger.open(path)
    c = BudgetLedger.open(path, 2.0, 1e-6).charge(ONE, "a")
    assert (c.entry, c.total, c.composition.releases) == (1, (2.0, 1e-6), 1)
    assert c.to_dict()["ledger_id"] == c.ledger_id and len(c.ledger_id) == 32
    with pytest.raises(ValueError, match="total epsilon=2.0; got epsilon=3.0"):
        BudgetLedger.open(path, 3.0, 1e-6)
    # a racing creator with another total is refused under the lock
    with pytest.raises(ValueError, match="total epsilon=2.0; got epsilon=5.0"):
        BudgetLedger(path, 5.0, 1e-6, 1e-4, ()).charge(ONE, "b")
    with pytest.raises(BudgetExceeded, match="above the ledger's total epsilon=2"):
        BudgetLedger.open(path).charge(DiscreteLaplace(parameter=1.5), "c")


def test_the_old_format_is_refused_by_name_and_converts(tmp_path):
    from shuffledp.accounting.ledger import LegacyLedger, convert_legacy_ledger

    path = tmp_path / "ledger.json"
    path.write_text(json.dumps({"epsilon": 3.0, "delta": 1e-6, "discretization": 1e-4,
                                "releases": [{"event": ONE.to_dict(), "label": "old"}]},
                               indent=1))
    with pytest.raises(LegacyLedger, match="format before hash chaining"):
        BudgetLedger.open(path)
    led = convert_legacy_ledger(path)
    assert (led.epsilon, [r["label"] for r in led.releases]) == (3.0, ["converted: old"])
    assert Path(f"{path}.legacy").exists()


def test_chained_log_is_a_reusable_primitive(tmp_path):
    """The locked, chained log on its own (what a release ledger can build on)."""
    from shuffledp.safe_io import GENESIS, ChainedLog

    log = ChainedLog(tmp_path / "r.log", what="release ledger")
    with pytest.raises(RuntimeError, match="inside ChainedLog.locked"):
        log.bodies  # noqa: B018
    with log.locked() as held:
        assert held.bodies == () and held.head == GENESIS
        assert held.append({"round": "a"})[0] == 0
        seq, h = held.append({"round": "b"})
    with log.locked() as held:
        assert [b["round"] for b in held.bodies] == ["a", "b"] and held.head == h
    assert seq == 1
