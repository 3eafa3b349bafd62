"""One default per function across Python and the command line: every option of the main
commands whose name is a parameter of the function the command runs has that parameter's
default (an option defaulting to None is not passed, so the function's own default holds)."""

from __future__ import annotations

import inspect

import pytest

from shuffledp.accounting.amplification.clones import shuffle_ldp
from shuffledp.accounting.metric.shuffle import emd_itemwise_alpha0
from shuffledp.accounting.summation import summation_parameters
from shuffledp.analyzers.heatmap.central import central_heatmap
from shuffledp.analyzers.metric.freq import freq_est_local
from shuffledp.analyzers.metric.itemwise import priv_emd_itemwise
from shuffledp.analyzers.metric.linear import priv_emd_linear, user_level_linear
from shuffledp.analyzers.privhist import privhist
from shuffledp.cli import main
from shuffledp.protocol.federated import adaptive_histogram
from shuffledp.protocol.params import derive_params
from shuffledp.protocol.runner import shuffle_heatmap

#: (command, the function it runs)
PAIRS = [
    ("heatmap", central_heatmap), ("heatmap", shuffle_heatmap),
    ("federated", adaptive_histogram), ("setup", derive_params),
    ("account summation", summation_parameters), ("account emd-itemwise", emd_itemwise_alpha0),
    ("account shuffle-ldp", shuffle_ldp), ("privhist", privhist),
    ("metric freq", freq_est_local), ("metric itemwise", priv_emd_itemwise),
    ("metric linear", priv_emd_linear), ("metric linear", user_level_linear),
]


def _command(path: str):
    cmd = main
    for name in path.split():
        cmd = cmd.commands[name]
    return cmd


def _same(cli_default, py_default) -> bool:
    if hasattr(py_default, "token"):  # a Neighbour: the CLI spells its token
        return cli_default == py_default.token
    return cli_default == py_default


@pytest.mark.parametrize("path,fn", PAIRS, ids=[f"{p}-{f.__name__}" for p, f in PAIRS])
def test_cli_option_defaults_are_the_python_defaults(path, fn):
    sig = inspect.signature(fn).parameters
    compared, wrong = [], []
    for opt in _command(path).params:
        if opt.name not in sig or sig[opt.name].default is inspect.Parameter.empty:
            continue
        if not opt.required and opt.default is None:
            continue  # not passed: the function's default holds
        if opt.required:
            continue
        compared.append(opt.name)
        if not _same(opt.default, sig[opt.name].default):
            wrong.append((opt.name, opt.default, sig[opt.name].default))
    assert not wrong, f"{path}: CLI default != {fn.__name__} default: {wrong}"
    assert compared, f"{path}: no option compared with {fn.__name__}"


def test_the_adaptive_histogram_reads_the_shared_constants():
    from shuffledp.accounting.budget import DEFAULT_EQ7, DEFAULT_EQ7_C, DEFAULT_FEDERATED_DROPOUT

    sig = inspect.signature(adaptive_histogram).parameters
    assert (sig["c"].default, sig["eq7"].default, sig["dropout"].default) == (
        DEFAULT_EQ7_C, DEFAULT_EQ7, DEFAULT_FEDERATED_DROPOUT) == (0.05, "shards", 0.1)
    opts = {p.name: p.default for p in _command("federated").params}
    assert (opts["c"], opts["eq7"], opts["dropout"]) == (0.05, "shards", 0.1)
