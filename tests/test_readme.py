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
