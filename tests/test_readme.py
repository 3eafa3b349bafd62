"""The README's Python example runs as written, and its two commands stay the first block."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs(capsys):
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1
    exec(compile(blocks[0], "README.md", "exec"), {})  # noqa: S102 - our own README
    out = capsys.readouterr().out.split()
    assert out[:2] == ["2.0", "1e-05"] and "zero out one user" in " ".join(out)  # the default


def test_readme_first_block_is_the_two_commands():
    first = re.search(r"```\n(.*?)```", README.read_text(), flags=re.S).group(1)
    assert first.strip().splitlines() == [
        "pip install -e . && shuffledp heatmap --out out",
        'pip install -e ".[test]" && pytest',
    ]


# --------------------------------------------------------------------------- the walk
def _walk_module():
    import importlib.util

    path = README.parent / "bench" / "newcomer_walk.py"
    spec = importlib.util.spec_from_file_location("newcomer_walk", path)
    import sys

    if "newcomer_walk" in sys.modules:
        return sys.modules["newcomer_walk"]
    mod = importlib.util.module_from_spec(spec)
    sys.modules["newcomer_walk"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _exe():
    import shutil
    import sys

    exe = shutil.which("shuffledp", path=str(Path(sys.executable).parent))
    if exe is None:
        import pytest

        pytest.skip("the shuffledp console script is not installed next to this Python")
    return exe


def test_every_readme_command_line_names_a_command_and_its_options():
    """Every `shuffledp ...` line of the README resolves to a command, and every --option
    it uses is that command's own spelling (no unknown option, no deprecated alias)."""
    import click

    from shuffledp.cli import main
    from shuffledp.cli.common import AliasedOption

    lines = _walk_module().readme_lines()
    assert len(lines) >= 40
    assert lines[0].text == "shuffledp heatmap --out out"
    for line in lines:
        cmd, argv = main, line.argv
        while isinstance(cmd, click.Group):
            assert argv and argv[0] in cmd.commands, line.text
            cmd, argv = cmd.commands[argv[0]], argv[1:]
        spellings = {o for p in cmd.params if isinstance(p, click.Option)
                     for o in p.opts + p.secondary_opts}
        aliases = {a for p in cmd.params if isinstance(p, AliasedOption) for a in p.aliases}
        used = {a.split("=")[0] for a in argv if a.startswith("--")}
        assert used <= spellings, (line.text, used - spellings)
        assert not used & aliases, (line.text, used & aliases)


def test_readme_outputs_never_collide():
    """No two README lines write the same --out (the second would be refused: no output is
    silently replaced)."""
    import click

    from shuffledp.cli import main

    outs = {}
    for line in _walk_module().readme_lines():
        cmd, argv = main, line.argv
        while isinstance(cmd, click.Group):
            cmd, argv = cmd.commands[argv[0]], argv[1:]
        default = next((p.default for p in cmd.params if p.name in ("out_dir", "out_path")),
                       None)
        out = argv[argv.index("--out") + 1] if "--out" in argv else default
        if out is None:
            continue
        out = str(out).rstrip("/")
        assert out not in outs, (line.text, outs.get(out))
        outs[out] = line.text


def test_readme_quick_lines_run_on_the_installed_package(tmp_path):
    """A few seconds of the walk on every run of the suite (the accountant's lines, compose
    on an earlier release); the whole walk: bench/newcomer_walk.py and the slow test."""
    walk = _walk_module()
    exe = _exe()
    walk.make_inputs(tmp_path)
    walk.prepare(exe, tmp_path)
    quick = [ln for ln in walk.readme_lines() if ln.text.startswith(
        ("shuffledp account summation", "shuffledp account emd-itemwise",
         "shuffledp account compose day"))]
    assert len(quick) == 4  # compose day*/report.json: the glob expanded as a shell does
    results = walk.walk(quick, exe, tmp_path, timeout=300, echo=False)
    assert [r.verdict for r in results] == ["ok"] * 4, [(r.line.text, r.verdict)
                                                        for r in results]


def test_walk_judges_tracebacks_hangs_and_exit_codes():
    judge = _walk_module().judge
    assert judge(0, "", "") == "ok"
    assert judge(2, "", "Usage: x\nError: bad --n").startswith("ok (exit 2")
    assert judge(1, "", "Traceback (most recent call last):\n").startswith("FAIL")
    assert judge("hang", "", "") == "FAIL: hang"
    assert judge(3, "", "Error: x").startswith("FAIL")
    assert judge(1, "", "no error line").startswith("FAIL")


def _slow():
    import pytest

    return pytest.mark.slow


@_slow()
def test_readme_walk_every_line_but_the_slowest():
    """Every README line not listed in bench/newcomer_walk.py's SLOW (about 4 minutes on 2
    busy cores): no traceback, hang or undocumented exit status."""
    import subprocess
    import sys

    _exe()
    p = subprocess.run([sys.executable, str(README.parent / "bench" / "newcomer_walk.py"),
                        "--skip-slow", "--timeout", "600"], capture_output=True, text=True,
                       timeout=1800)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]


def test_readme_states_the_test_duration():
    text = " ".join(README.read_text().split())
    assert "runs the test suite on every core (pytest-xdist, `-n auto` in pyproject.toml" in text
    assert "about 5 minutes on 2 quiet cores" in text
    # the claim holds only while the suite runs on every core
    pyproject = (README.parent / "pyproject.toml").read_text()
    assert 'addopts = "-q -n auto"' in pyproject and '"pytest-xdist>=' in pyproject
