"""Command-line interface: ``shuffledp heatmap``, ``shuffledp account``, role commands.

The group and its commands, one module each: ``heatmap`` (:mod:`shuffledp.cli.heatmap`, the
private heatmap of [Ghazi23]_), ``account`` (:mod:`shuffledp.cli.account`) and the role
commands ``setup``, ``encode``, ``shuffle``, ``analyze`` (:mod:`shuffledp.cli.roles`) are
registered here, and ``figure`` (:mod:`shuffledp.cli.figure`, the paper's example
figures: an evaluation, not a private release).

Every command goes through :mod:`shuffledp.cli.common`: one error path (a one-line ``Error:``,
exit 2 for a usage error, 1 for a refusal, never a traceback), one grid parser, and one name
per option across commands (``--epsilon``, ``--n``, ``--grid``, ``--out``, ...).

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps"
   -- full entry in docs/references.md
"""

from __future__ import annotations

import re
import sys

import click

from shuffledp.cli.common import Group

#: the commands of ``shuffledp --help``, grouped by who reaches for them
ROLES = (
    ("Private releases", ("heatmap", "federated", "privhist", "metric", "sweep")),
    ("Deployment roles", ("setup", "encode", "upload", "shuffle", "analyze", "serve", "secagg")),
    ("Privacy accounting", ("account",)),
    ("Evaluations (not private releases)", ("figure",)),
)
#: a sentence ends at ". " unless the period closes one of these abbreviations
_ABBREVIATIONS = ("et al", "e.g", "i.e", "cf", "Sec", "Alg", "Thm", "Eq", "Fig", "vs")
_SENTENCE_END = re.compile(r"(?<!\b" + r")(?<!\b".join(re.escape(a) for a in _ABBREVIATIONS)
                           + r")\.(\s|$)")


def summary(help_text: str) -> str:
    """The first sentence of a command's help, whole (click's own short help cuts it at 45
    characters or at the first period, "et al." included)."""
    first = " ".join(help_text.split("\n\n")[0].split())
    m = _SENTENCE_END.search(first)
    return first[: m.start() + 1] if m else first


class RootGroup(Group):
    """The top-level group: commands listed by role, each with its whole first sentence."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        listed: set[str] = set()
        for title, names in ROLES:
            rows = [(n, summary(self.commands[n].help or "")) for n in names
                    if n in self.commands and not self.commands[n].hidden]
            listed.update(names)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        rest = [(n, summary(c.help or "")) for n, c in sorted(self.commands.items())
                if n not in listed and not c.hidden]
        if rest:
            with formatter.section("Other commands"):
                formatter.write_dl(rest)


@click.group(cls=RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="shuffledp")
def main() -> None:
    """shuffledp: differential privacy in the shuffle model."""


def _register() -> None:
    from importlib import import_module

    # one module per command (group); each keeps its heavy imports inside the command so
    # that `shuffledp --help` stays fast
    from shuffledp.cli.account import account
    from shuffledp.cli.heatmap import heatmap
    from shuffledp.cli.roles import ROLE_COMMANDS

    main.add_command(heatmap)
    main.add_command(account)
    main.add_command(import_module("shuffledp.cli.privhist").privhist_cmd)
    main.add_command(import_module("shuffledp.cli.metric").metric)
    main.add_command(import_module("shuffledp.cli.secagg").secagg)
    main.add_command(import_module("shuffledp.cli.federated").federated_cmd)
    main.add_command(import_module("shuffledp.cli.sweep").sweep)
    main.add_command(import_module("shuffledp.cli.figure").figure)
    for command in import_module("shuffledp.cli.serve").SERVE_COMMANDS:
        main.add_command(command)
    for command in ROLE_COMMANDS:
        main.add_command(command)


_register()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
