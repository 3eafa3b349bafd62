"""`shuffledp account compose` and `shuffledp heatmap --budget-ledger`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from shuffledp.accounting.events import DiscreteLaplace, ShuffledKRR
from shuffledp.accounting.guarantee import Guarantee
from shuffledp.cli import main as _main  # noqa: F401  (registers the commands)
from shuffledp.cli.account import account


def _report(path, event=None, **g):
    guar = Guarantee(notion=g.get("notion", "pure"), model="central",
                     epsilon=g.get("epsilon", 0.1), delta=g.get("delta", 0.0),
                     neighbour=g.get("neighbour", "add_remove"), event=event)
    path.write_text(json.dumps({"guarantee": guar.to_dict()}))
    return str(path)


def test_compose_reports_and_times(tmp_path):
    ev = DiscreteLaplace(parameter=0.1)
    a = _report(tmp_path / "a.json", ev)
    r = CliRunner().invoke(account, ["compose", a, "--times", "100", "--delta", "1e-6",
                                     "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["releases"] == 100 and d["method"] == "pld"
    assert d["basic"][0] == pytest.approx(10.0) and d["epsilon"] < 0.5 * d["basic"][0]
    # a report without an event: its (epsilon, delta), with a warning
    b = _report(tmp_path / "b.json", None, epsilon=0.1)
    r = CliRunner().invoke(account, ["compose", a, b, "--delta", "1e-6"])
    assert r.exit_code == 0 and "no event in the report" in r.stderr


def test_compose_spec_and_refusals(tmp_path):
    _report(tmp_path / "day.json", DiscreteLaplace(parameter=0.05, neighbour="replace"),
            neighbour="replace")
    spec = {"delta": 1e-6, "discretization": 1e-3, "releases": [
        {"report": "day.json", "count": 30},
        {"event": ShuffledKRR(n=1000, k=3, eps0=1.0, epsilon=0.3, delta=1e-8,
                              neighbour="replace").to_dict(), "count": 2},
        {"parallel": [{"report": "day.json"},
                      {"event": DiscreteLaplace(parameter=0.02,
                                                neighbour="replace").to_dict()}]}]}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    r = CliRunner().invoke(account, ["compose", "--spec", str(tmp_path / "spec.json"),
                                     "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["releases"] == 33 and d["pld"][0] <= d["basic"][0]
    # different neighbour relations are refused, naming both
    other = _report(tmp_path / "o.json", DiscreteLaplace(parameter=0.1))
    r = CliRunner().invoke(account, ["compose", str(tmp_path / "day.json"), other,
                                     "--delta", "1e-6"])
    assert r.exit_code == 2 and "'replace'" in r.output and "'add_remove'" in r.output
    r = CliRunner().invoke(account, ["compose", other])
    assert r.exit_code == 2 and "--delta" in r.output


def test_heatmap_budget_ledger_appends_and_refuses(tmp_path):
    from shuffledp.cli.heatmap import heatmap

    led = tmp_path / "ledger.json"
    base = ["--grid", "16", "--n", "30", "--no-metrics", "--quiet", "--epsilon", "1",
            "--budget-ledger", str(led)]
    r = CliRunner().invoke(heatmap, base + ["--out", str(tmp_path / "a")])
    assert r.exit_code == 2 and "total epsilon and delta" in r.output  # no total yet
    r = CliRunner().invoke(heatmap, base + ["--out", str(tmp_path / "a"),
                                            "--budget-epsilon", "2.5", "--budget-delta", "1e-6"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(heatmap, base + ["--out", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    from shuffledp.accounting.ledger import BudgetLedger

    rel = BudgetLedger.open(led).releases
    assert len(rel) == 2 and rel[-1]["spent"]["epsilon"] <= 2.0 + 1e-9
    r = CliRunner().invoke(heatmap, base + ["--out", str(tmp_path / "c")])
    assert r.exit_code == 1 and "release refused" in r.output
    assert not (tmp_path / "c").exists()  # nothing written
    assert len(BudgetLedger.open(led).releases) == 2


def test_compose_spec_refuses_parallel_groups_that_are_not_disjoint(tmp_path):
    """Parallel composition needs disjoint users: a group listing one report twice, a branch
    repeated with a count, or two reports of the same input are refused (exit 2, naming the
    branch); reports of different inputs are composed in parallel."""
    ev = DiscreteLaplace(parameter=0.05, neighbour="replace")
    for name, source in (("a.json", "users-a.csv"), ("b.json", "users-b.csv"),
                         ("c.json", "users-a.csv")):
        _report(tmp_path / name, ev, neighbour="replace")
        data = json.loads((tmp_path / name).read_text())
        data["input"] = source
        (tmp_path / name).write_text(json.dumps(data))

    def run(group):
        spec = {"delta": 1e-6, "releases": [{"report": "a.json"}, {"parallel": group}]}
        (tmp_path / "spec.json").write_text(json.dumps(spec))
        return CliRunner().invoke(account, ["compose", "--spec", str(tmp_path / "spec.json")])

    r = run([{"report": "a.json"}, {"report": "./a.json"}])
    assert r.exit_code == 2 and "releases[1].parallel[1]" in r.output
    assert "is already branch" in r.output
    r = run([{"report": "b.json", "count": 2}])
    assert r.exit_code == 2 and "count=2 inside a parallel group" in r.output
    r = run([{"report": "a.json"}, {"report": "c.json"}])
    assert r.exit_code == 2 and "reads input 'users-a.csv'" in r.output
    r = run([{"report": "a.json"}, {"report": "b.json"}])
    assert r.exit_code == 0, r.output


def test_library_spec_reader_refuses_parallel_groups_that_are_not_disjoint(tmp_path):
    """The library's spec reader applies the same disjointness check as the CLI: a caller
    of ``accountant_from_spec`` cannot compose one report in parallel with itself."""
    from shuffledp.accounting.ledger import accountant_from_spec

    ev = DiscreteLaplace(parameter=0.05, neighbour="replace")
    _report(tmp_path / "a.json", ev, neighbour="replace")
    bad = {"releases": [{"parallel": [{"report": "a.json"}, {"report": "a.json"}]}]}
    with pytest.raises(ValueError, match=r"releases\[0\]\.parallel\[1\]"):
        accountant_from_spec(bad, tmp_path)
    good = {"releases": [{"parallel": [{"report": "a.json"}]}]}
    acc, _ = accountant_from_spec(good, tmp_path)
    assert acc.epsilon(1e-6).epsilon > 0
