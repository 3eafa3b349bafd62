"""One command-line vocabulary: one error path, one grid parser, one name per concept, the old
one spelling per option, and one report.json schema."""

from __future__ import annotations

import json
from collections import defaultdict

import click
import pytest
from click.testing import CliRunner

from shuffledp.cli import common as cli_common
from shuffledp.cli import main


def walk(group: click.Group, prefix: str = ""):
    """(path, command) for every command and group under ``group``."""
    for name, cmd in sorted(group.commands.items()):
        yield f"{prefix}{name}", cmd
        if isinstance(cmd, click.Group):
            yield from walk(cmd, f"{prefix}{name} ")


COMMANDS = dict(walk(main))


def invoke(*args):
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    return res


def test_the_tree_holds_every_command():
    assert set(COMMANDS) == {"heatmap", "setup", "encode", "shuffle", "analyze", "account",
                             "account emd-itemwise", "account shuffle-ldp", "account summation",
                             "account compose",
                             "privhist", "metric", "metric freq", "metric itemwise",
                             "metric linear", "secagg", "secagg server", "secagg client",
                             "federated", "sweep", "serve", "serve shuffler", "serve secagg",
                             "serve close", "serve enrol", "serve revoke", "upload",
                             "figure"}


def test_every_command_goes_through_the_one_error_path():
    """Regression: the account commands had their own error handling, without the last-resort
    conversion of an unexpected exception into one line."""
    wrong = [path for path, cmd in COMMANDS.items()
             if not isinstance(cmd, (cli_common.Command, cli_common.Group))]
    assert not wrong, f"not a cli_common.Command/Group: {wrong}"


def test_an_unexpected_error_in_account_is_one_line(monkeypatch):
    from shuffledp.accounting import summation  # imported by the command when it runs

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.delenv("SHUFFLEDP_TRACEBACK", raising=False)
    monkeypatch.setattr(summation, "summation_parameters", boom)
    res = invoke("account", "summation", "--n", 10, "--epsilon", 1, "--delta", 1e-6, "--B", 8,
                 "--grid", 8)
    assert res.exit_code == 1
    assert res.output.strip().splitlines() == [
        "Error: unexpected RuntimeError: boom (set SHUFFLEDP_TRACEBACK=1 to see where)"]


def test_the_same_refusal_has_the_same_exit_code_everywhere(tmp_path):
    """Regression: no protocol for these options was exit 2 in setup, 1 in heatmap and in
    account summation."""
    reason = "no float a < 1 is epsilon=1e-300-DP"  # eps / Delta below 1 - a's resolution
    common = ["--grid", 4, "--n", 3, "--epsilon", 1e-300, "--delta", 1e-5, "--B", 256]
    for argv in (["setup", *common, "--out", tmp_path / "s"],
                 ["account", "summation", *common],
                 ["heatmap", "--model", "shuffle", *common, "--no-metrics", "--quiet",
                  "--out", tmp_path / "h"]):
        res = invoke(*argv)
        assert res.exit_code == 1, (argv[0], res.output)
        assert reason in res.output and "--epsilon 1e-300" in res.output, res.output
    assert not (tmp_path / "s" / "params.json").exists() and not (tmp_path / "h").exists()


def options():
    """(command path, click.Option) for every option of every command."""
    for path, cmd in COMMANDS.items():
        for param in cmd.params:
            if isinstance(param, click.Option) and param.name not in ("help", "version"):
                yield path, param


def test_one_grid_parser():
    grids = [(path, p) for path, p in options() if "--grid" in p.opts]
    assert {path for path, _ in grids} == {"heatmap", "setup", "account summation",
                                           "metric linear", "sweep", "figure"}
    for path, p in grids:
        assert p.type is cli_common.GRID, path


def test_one_spelling_per_concept():
    """An option's destination name determines its canonical spelling, and a spelling (old
    ones included) determines its destination; ``--out`` is the one exception: a directory
    (``out_dir``) for a command that writes several files, a file (``out_path``) for a
    command that writes one. Regression: --eps / --epsilon, --users / --n, --out-dir / --out
    named the same things in different commands."""
    canonical = defaultdict(set)
    spellings = defaultdict(set)
    dests = defaultdict(set)
    for _path, p in options():
        canonical[p.name].add(p.opts[0])
        spellings[p.name].add(tuple(p.opts))
        for opt in p.opts:
            dests[opt].add(p.name)
    assert {k: v for k, v in canonical.items() if len(v) > 1} == {}
    assert {k: v for k, v in dests.items() if len(v) > 1} == {
        "--out": {"out_dir", "out_path"}, "--input": {"input_path", "input_dir"}}
    assert spellings["epsilon"] == {("--epsilon",)}
    assert spellings["n"] == {("--n",)}
    assert spellings["out_dir"] == {("--out",)}
    out = {path: p for path, p in options() if "--out" in p.opts}
    assert {path for path, p in out.items() if p.name == "out_dir"} == \
        {"heatmap", "setup", "analyze", "privhist", "metric freq", "metric itemwise",
         "metric linear", "federated", "sweep", "serve enrol", "figure"}
    assert {path for path, p in out.items() if p.name == "out_path"} == {"encode", "shuffle",
                                                                          "serve close"}
    for path, p in out.items():
        assert p.type.file_okay == (p.name == "out_path")
        # encode --bulk writes one batch per user: its --out is then their folder
        assert p.type.dir_okay == (p.name == "out_dir" or path == "encode")


OLD_SPELLINGS = [("heatmap", "--eps"), ("heatmap", "--users"), ("heatmap", "--out-dir"),
                 ("setup", "--eps"), ("analyze", "--out-dir"), ("shuffle", "--report"),
                 ("account summation", "--eps"), ("sweep", "--users")]


@pytest.mark.parametrize("command,old", OLD_SPELLINGS,
                         ids=[f"{c.replace(' ', '-')}{o}" for c, o in OLD_SPELLINGS])
def test_one_name_per_option(command, old):
    # the spellings of before the unification are gone: a usage error naming the option
    res = invoke(*command.split(), old, "1")
    assert res.exit_code == 2 and f"No such option '{old}'" in res.output, res.output


def test_n_with_input_is_reported_as_ignored(tmp_path):
    csv = tmp_path / "u.csv"
    csv.write_text("user_id,x,y\na,0.1,0.2\nb,0.8,0.9\n")
    res = invoke("heatmap", "--input", csv, "--n", 500, "--grid", 8, "--no-metrics", "--quiet",
                 "--evaluate", "--out", tmp_path / "o")
    assert res.exit_code == 0, res.output
    assert f"WARNING: --n 500 is ignored with --input (the users are those of {csv})" in \
        res.stderr
    assert json.loads((tmp_path / "o" / "report.json").read_text())["n_users"] == 2


@pytest.mark.parametrize("argv,hint", [
    (["heatmap", "--grid", "8x"], "--grid"),
    (["setup", "--n", "3", "--epsilon", "1", "--out", "x", "--grid", "0"], "--grid"),
    (["account", "summation", "--n", "3", "--epsilon", "1", "--delta", "1e-5", "--B", "4",
      "--grid", "8y"], "--grid"),
], ids=["heatmap", "setup", "account-summation"])
def test_a_bad_grid_is_the_same_usage_error_everywhere(argv, hint):
    res = invoke(*argv)
    assert res.exit_code == 2
    (line,) = [x for x in res.output.splitlines() if x.startswith("Error:")]
    assert line.startswith(f"Error: Invalid value for '{hint}'"), line
