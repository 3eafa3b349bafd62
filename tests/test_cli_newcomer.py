"""What a newcomer meets first: no silent overwrite, exit codes as documented, errors that
name the option, one name per option, help on every option, the accountant's outputs."""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from shuffledp.cli import main


def invoke(*args, code=None):
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    if code is not None:
        assert res.exit_code == code, res.output
    return res


def error_line(res) -> str:
    lines = [ln for ln in res.output.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1, res.output
    return lines[0]


def walk(group: click.Group, prefix: str = ""):
    for name, cmd in sorted(group.commands.items()):
        yield f"{prefix}{name}", cmd
        if isinstance(cmd, click.Group):
            yield from walk(cmd, f"{prefix}{name} ")


COMMANDS = dict(walk(main))


# --------------------------------------------------------------------------- overwrite
def test_heatmap_refuses_to_overwrite_an_earlier_run_unless_force(tmp_path):
    out = tmp_path / "out"
    argv = ["heatmap", "--grid", "8", "--n", "20", "--no-metrics", "--quiet", "--out", out]
    invoke(*argv, code=0)
    before = (out / "estimate.npy").read_bytes()
    line = error_line(invoke(*argv, code=1))
    assert f"--out {out}" in line and "--force" in line and "estimate.npy" in line
    assert (out / "estimate.npy").read_bytes() == before  # nothing touched
    invoke(*argv, "--force", code=0)


def test_every_command_that_writes_a_set_of_files_checks_its_out_and_has_force():
    from shuffledp.cli.common import OutputOption

    checked = {path for path, cmd in COMMANDS.items()
               for p in cmd.params if isinstance(p, OutputOption) and p.writes}
    assert checked == {"heatmap", "setup", "analyze", "privhist", "metric freq",
                       "metric itemwise", "metric linear", "federated", "encode", "shuffle",
                       "serve close", "figure"}
    for path in checked:
        assert "force" in {p.name for p in COMMANDS[path].params}, path


def test_role_outputs_are_not_silently_replaced(tmp_path):
    run = tmp_path / "run"
    invoke("setup", "--grid", 4, "--n", 3, "--epsilon", 1, "--out", run, code=0)
    line = error_line(invoke("setup", "--grid", 4, "--n", 3, "--epsilon", 1, "--out", run,
                             code=1))
    assert "params.json" in line and "--force" in line
    (tmp_path / "me.csv").write_text("0.1,0.2\n")
    enc = ["encode", "--params", run / "params.json", "--analyzer-pub", run / "analyzer.pub",
           "--input", tmp_path / "me.csv", "--out", tmp_path / "u.bin"]
    invoke(*enc, code=0)
    assert "--out" in error_line(invoke(*enc, code=1))
    invoke(*enc, "--force", code=0)


def test_an_out_that_cannot_be_created_names_the_option(tmp_path):
    (tmp_path / "file").write_text("x")
    res = invoke("heatmap", "--quiet", "--grid", 8, "--n", 20, "--out", tmp_path / "file" / "o",
                 code=2)
    assert "--out" in error_line(res) and "not a directory" in error_line(res)


# --------------------------------------------------------------------------- exit codes
@pytest.fixture(scope="module")
def odd_paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("odd")
    os.mkfifo(d / "fifo")
    return {"fifo": d / "fifo", "device": Path("/dev/null")}


#: the input files whose non-regular-file error was exit 1 (the README promises 2)
NOT_REGULAR = [
    ("metric freq", ["metric", "freq", "--s", 2, "--t", 2, "--r", 0.1, "--alpha0", 1],
     "--input"),
    ("metric itemwise", ["metric", "itemwise", "--s", 2, "--t", 2, "--r", 0.1, "--alpha0", 1],
     "--input"),
    ("metric linear", ["metric", "linear", "--alpha", 1], "--input"),
    ("sweep", ["sweep", "--param", "B", "--values", 1], "--input"),
    ("federated", ["federated"], "--input"),
    ("serve close", ["serve", "close", "--server", "http://127.0.0.1:9",
                     "--params", "{params}"], "--token-file"),
]


@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("name,argv,option", NOT_REGULAR, ids=[n for n, _, _ in NOT_REGULAR])
def test_a_path_that_is_not_a_regular_file_is_exit_2(tmp_path, odd_paths, name, argv, option,
                                                    kind):
    if name == "serve close":
        pytest.importorskip("httpx")
        invoke("setup", "--grid", 4, "--n", 3, "--epsilon", 1, "--out", tmp_path / "r", code=0)
    argv = [str(a).format(params=tmp_path / "r" / "params.json") for a in argv]
    out = [] if name == "serve close" else ["--out", tmp_path / "o"]
    res = invoke(*argv, *out, option, odd_paths[kind], code=2)
    assert option in error_line(res) and "not a regular file" in error_line(res)


def test_serve_shuffler_token_file_not_regular_is_exit_2(tmp_path, odd_paths):
    pytest.importorskip("uvicorn")
    invoke("setup", "--grid", 4, "--n", 3, "--epsilon", 1, "--out", tmp_path / "r", code=0)
    res = invoke("serve", "shuffler", "--params", tmp_path / "r" / "params.json", "--mac-key",
                 tmp_path / "r" / "mac.key", "--data", tmp_path / "d", "--listen",
                 "127.0.0.1:0", "--token-file", odd_paths["fifo"], code=2)
    assert "--token-file" in error_line(res)


def test_a_listen_address_in_use_names_the_option(tmp_path):
    pytest.importorskip("uvicorn")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        res = invoke("serve", "secagg", "--clients", 3, "--length", 4, "--modulus", 16,
                     "--listen", f"127.0.0.1:{port}", "--data", tmp_path / "d", code=2)
    assert "--listen" in error_line(res)


# --------------------------------------------------------------------------- messages
def test_no_numpy_repr_in_metric_linear_errors(tmp_path):
    (tmp_path / "p.csv").write_text("user_id,x,y\nu1,0.1,0.1\nu1,0.2,0.2\nu2,0.3,0.3\n")
    line = error_line(invoke("metric", "linear", "--alpha", 1, "--input", tmp_path / "p.csv",
                             "--out", tmp_path / "o", code=1))
    assert "np.str_" not in line and "'u2'" in line


def test_accounting_errors_use_option_spellings():
    from shuffledp.cli.account import cli_spelling

    assert cli_spelling("too many terms; use method='closed-form'") == \
        "too many terms; use --method closed-form"
    line = error_line(invoke("account", "shuffle-ldp", "--n", 100, "--eps0", 1, "--delta",
                             1e-6, "--method", "binary-rr-exact", code=2))
    assert "--randomizer krr --k 2" in line and "method=" not in line


# --------------------------------------------------------------------------- one name
@pytest.mark.parametrize("argv,old,new", [
    (["encode"], "--points", "--input"),
    (["analyze"], "--in", "--input"),
    (["shuffle"], "--in-dir", "--input"),
    (["upload"], "--in", "--input"),
    (["serve", "close"], "--token", "--token-file"),
])
def test_old_spellings_are_hidden_deprecated_aliases(argv, old, new):
    help_text = invoke(*argv, "--help", code=0).output
    assert new in help_text and not re.search(rf"{re.escape(old)}\b(?!-)", help_text)
    # accepted, with a warning naming the new spelling (here the command then stops at a
    # missing required option: a usage error that is not about the alias)
    res = invoke(*argv, old, "x")
    assert f"WARNING: {old} is deprecated; use {new}" in res.output
    assert f"No such option: {old}" not in res.output


def test_input_files_have_one_name():
    names = {p.opts[0] for _, cmd in COMMANDS.items() for p in cmd.params
             if isinstance(p, click.Option) and p.name in ("input_path", "input_dir")}
    assert names == {"--input"}
    for path, cmd in COMMANDS.items():
        spellings = {o for p in cmd.params if isinstance(p, click.Option) for o in p.opts}
        assert not spellings & {"--points", "--in", "--in-dir", "--token"}, path


# --------------------------------------------------------------------------- help
def test_every_option_has_help():
    missing = [(path, p.opts[0]) for path, cmd in COMMANDS.items() for p in cmd.params
               if isinstance(p, click.Option) and not p.hidden and not p.help]
    assert missing == []


# --------------------------------------------------------------------------- accounting
def test_shuffle_ldp_never_prints_valid_false_next_to_a_guarantee_that_holds():
    out = invoke("account", "shuffle-ldp", "--n", 10, "--eps0", 30, "--delta", 1e-6,
                 "--method", "closed-form", code=0).output
    assert "valid" not in out.replace("not valid", "")  # the warning may say the bound is
    assert re.search(r"^amplified\s+no: .*eps0 d, which holds", out, flags=re.M), out
    rec = json.loads(invoke("account", "shuffle-ldp", "--n", 10, "--eps0", 30, "--delta",
                            1e-6, "--method", "closed-form", "--json", code=0).stdout)
    assert rec["holds"] is True and rec["amplified"] is False and rec["epsilon"] == 30


def test_summation_prints_its_noise_without_json():
    argv = ["account", "summation", "--n", 50, "--epsilon", 5, "--delta", 1e-5, "--B", 16,
            "--grid", 16]
    rec = json.loads(invoke(*argv, "--json", code=0).stdout)
    out = invoke(*argv, code=0).output
    assert "noise per measured level" in out
    rows = [ln.split() for ln in out.splitlines() if re.match(r"^\s+\d+\s+\d+\s", ln)]
    assert [int(r[0]) for r in rows] == rec["levels"]
    for r, std, a in zip(rows, rec["level_noise_std"], rec["dl_parameters"]):
        assert float(r[5]) == pytest.approx(std, rel=1e-4)
        assert float(r[4]) == pytest.approx(a, abs=1e-10)
        # the standard deviation of DL(a): sqrt(2 a) / (1 - a)
        assert std == pytest.approx((2 * a) ** 0.5 / (1 - a), rel=1e-9)
    assert rec["encrypted_bytes_per_user"] > rec["bytes_per_user"]


def test_compose_documents_and_reads_shuffle_ldp_json_and_the_spec_example(tmp_path):
    help_text = " ".join(invoke("account", "compose", "--help", code=0).output.split())
    assert "shuffle-ldp --json" in help_text and '"releases"' in help_text
    s = invoke("account", "shuffle-ldp", "--n", 100000, "--eps0", 1, "--delta", 1e-6,
               "--json", code=0).stdout
    (tmp_path / "s.json").write_text(s)
    (tmp_path / "t.json").write_text(s)
    eps = json.loads(s)["epsilon"]
    one = json.loads(invoke("account", "compose", tmp_path / "s.json", "--delta", 1e-6,
                            "--json", code=0).stdout)
    assert one["epsilon"] == pytest.approx(eps, rel=1e-3)
    doc = (Path(__file__).resolve().parents[1] / "docs" / "accounting.md").read_text()
    spec = re.search(r"```json\n(.*?)```", doc, flags=re.S).group(1)
    (tmp_path / "spec.json").write_text(spec)
    rec = json.loads(invoke("account", "compose", "--spec", tmp_path / "spec.json", "--json",
                            code=0).stdout)
    assert rec["releases"] == 8 and rec["delta"] == 1e-5
    # basic composition of the spec: 3 + 1 (parallel: the worst branch) shuffled releases
    # and 4 discrete Laplace releases of epsilon 0.1 each
    assert rec["basic"][0] == pytest.approx(4 * eps + 4 * 0.1, rel=1e-9)
    assert rec["epsilon"] <= rec["basic"][0]
