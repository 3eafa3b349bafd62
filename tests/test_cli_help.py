"""``shuffledp --help``: every command listed once, under its role, with a whole summary."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from shuffledp.cli import ROLES, main, summary


def test_every_command_is_listed_once_under_a_role():
    out = CliRunner().invoke(main, ["--help"]).output
    for title, _ in ROLES:
        assert f"{title}:" in out
    grouped = [n for _, names in ROLES for n in names]
    assert len(grouped) == len(set(grouped))
    assert set(main.commands) <= set(grouped), set(main.commands) - set(grouped)


@pytest.mark.parametrize("name", sorted(main.commands))
def test_summaries_are_whole_sentences(name):
    s = summary(main.commands[name].help or "")
    assert s.endswith((".", ")")) and s.count("(") == s.count(")"), s
    assert not s.endswith(("et al.", "e.g.")), s


@pytest.mark.parametrize("text,first", [
    ("Heatmap (Ghazi et al., AAAI 2023). More.", "Heatmap (Ghazi et al., AAAI 2023)."),
    ("Secure aggregation (Bonawitz et al. 2017) over a mailbox. Then.",
     "Secure aggregation (Bonawitz et al. 2017) over a mailbox."),
    ("No period at all", "No period at all"),
    ("One, e.g. this. Two.", "One, e.g. this."),
])
def test_summary_skips_abbreviations(text, first):
    assert summary(text) == first
