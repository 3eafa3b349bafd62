"""The command line starts without the heavy modules: ``shuffledp --help`` and
``--version`` import neither scipy nor numba nor cryptography; those load inside the command
that needs them. Checked by the set of loaded modules in a fresh interpreter, not by timing
(the time is printed by ``bench/cli_startup.py``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("scipy", "numba", "cryptography", "matplotlib")


def loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\n"
                          "print('\\n'.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["heatmap", "--help"],
                                  ["account", "shuffle-ldp", "--help"], ["privhist", "--help"],
                                  ["metric", "freq", "--help"], ["federated", "--help"]])
def test_help_and_version_skip_heavy_imports(argv):
    code = ("import sys\nfrom shuffledp.cli import main\n"
            f"try:\n    main({argv!r}, standalone_mode=False)\nexcept SystemExit:\n    pass")
    mods = loaded_after(code)
    heavy = sorted(m for m in mods if m.split(".")[0] in HEAVY)
    assert not heavy, heavy[:5]


def test_lazy_package_still_exposes_the_api():
    import shuffledp
    import shuffledp.accounting as acc

    for name in shuffledp.__all__:
        assert getattr(shuffledp, name) is not None, name
    for name in acc.__all__:
        assert getattr(acc, name) is not None, name
    assert set(shuffledp.__all__) <= set(dir(shuffledp))
    with pytest.raises(AttributeError, match="no_such_name"):
        shuffledp.no_such_name  # noqa: B018


def test_privhist_cli_split_choices_match_the_mechanism():
    from shuffledp.analyzers.privhist.mechanism import REGIMES, SPLITS
    from shuffledp.cli import privhist as cli_privhist

    assert cli_privhist.SPLITS == SPLITS and cli_privhist.REGIMES == REGIMES


def test_accounting_import_skips_scipy_signal():
    """Every release builds its guarantee through the accountant, so importing it must not
    pay for scipy.signal or scipy.stats (about 1 s each); they load when a curve or a
    shuffle bound is first computed."""
    mods = loaded_after("import shuffledp.accounting.composition\n"
                        "import shuffledp.accounting.events")
    assert not {"scipy.signal", "scipy.stats"} & mods
