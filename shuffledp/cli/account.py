"""``shuffledp account``: privacy accounting from the command line.

Subcommands
-----------
emd-itemwise   PrivEMDItemWise, [Imola]_ Thm 4.4 (forward with --alpha0, inverse with
               --target-alpha)
shuffle-ldp    amplification by shuffling of n eps0-LDP reports (the clones bound of [FMT21]_
               and its exact numerical counterpart)
summation      parameters of the App. F shuffle summation protocol of [Ghazi23]_, with the
               number of shares of [BBGN20]_
compose        the total of several releases (their report.json files, or a JSON spec):
               basic, advanced and PLD composition (:mod:`shuffledp.accounting.composition`),
               the PLD's numerical error charged

Every subcommand prints a short table, or one JSON object with ``--json``. Errors follow
:mod:`shuffledp.cli.common`: an option value the accountant does not accept is a usage error
(exit 2) naming the option and the value; a configuration the protocol record refuses is a
refusal (exit 1); never a traceback. Options share their names with the other commands
(``--n``, ``--epsilon`` with its alias ``--eps``, ``--delta``, ``--grid``, ``--B``, ``--w``).

References
----------
.. [Imola] J. Imola, A. Roy Chowdhury, K. Chaudhuri, "Metric Differential Privacy at the
   User-Level" (preprint).
.. [FMT21] V. Feldman, A. McMillan, K. Talwar, "Hiding Among the Clones: A Simple and Nearly
   Optimal Analysis of Privacy Amplification by Shuffling", FOCS 2021.
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023, arXiv:2211.13454.
.. [BBGN20] B. Balle, J. Bell, A. Gascon, K. Nissim, "Private Summation in the Multi-Message
   Shuffle Model", CCS 2020, arXiv:2002.00817.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

# Light imports only: scipy and numba load inside the command that needs them, so
# `shuffledp --help` stays fast.
from shuffledp.accounting.guarantee import DEFAULT_NEIGHBOUR
from shuffledp.accounting.metric.shuffle import (
    DEFAULT_MAX_DELTA_OUT,
    composition_alpha,
    emd_itemwise,
    emd_itemwise_alpha0,
)
from shuffledp.cli.common import (
    COUNT,
    POSITIVE,
    UNIT,
    UNIT_CLOSED_HIGH,
    B_option,
    Group,
    Real,
    as_refusal,
    delta_option,
    dropout_option,
    epsilon_option,
    grid_option,
    n_option,
    w_option,
    warn,
)
from shuffledp.cli.common import as_usage_error as _as_usage_error

T = TypeVar("T")
#: a library argument spelt as Python (``method='closed-form'``, ``k=2``)
_PY_ARGUMENT = re.compile(r"\b(method|randomizer|model)='([^']*)'")


def cli_spelling(message: str) -> str:
    """A library message with its Python spellings of arguments (``method='closed-form'``)
    rewritten as the options that set them (``--method closed-form``)."""
    return _PY_ARGUMENT.sub(lambda m: f"--{m.group(1)} {m.group(2)}", message)


def as_usage_error(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """:func:`shuffledp.cli.common.as_usage_error`, its message in option spellings."""
    try:
        return _as_usage_error(fn, *args, **kwargs)
    except click.UsageError as exc:
        raise click.UsageError(cli_spelling(exc.message)) from None
    except click.ClickException as exc:
        raise click.ClickException(cli_spelling(exc.message)) from None


# --------------------------------------------------------------------------- output
def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(val) for k, val in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(val) for val in x]
    return x


def _emit(record: dict, as_json: bool, keys: list[str]) -> None:
    if as_json:
        click.echo(json.dumps(_clean(record), allow_nan=False, sort_keys=False))
        return
    width = max(len(k) for k in keys)
    for k in keys:
        val = record.get(k)
        if isinstance(val, float):
            val = f"{val:.6g}"
        elif val is None:
            val = "-"
        click.echo(f"{k.ljust(width)}  {val}")


def _warn_invalid(notes: Any, valid: bool) -> None:
    """Each note of a bound that is not valid, as a warning on stderr."""
    if not valid:
        for note in notes:
            warn(note)


# --------------------------------------------------------------------------- commands
@click.group("account", cls=Group)
def account() -> None:
    """Privacy accounting: shuffle amplification, metric DP, summation parameters."""


@account.command("emd-itemwise")
@click.option("--model", type=click.Choice(["local", "central"]), required=True,
              help="local: a user shuffles her m items; central: the server shuffles m n.")
@click.option("--m", "m", type=COUNT, required=True, help="Items per user.")
@n_option(default=None, help="Users (central model).")
@delta_option(required=True, help="delta of Thm 4.3, in (0, 1).")
@click.option("--alpha0", type=POSITIVE, default=None, help="Item-level d_X-DP parameter.")
@click.option("--target-alpha", "target_alpha", type=POSITIVE, default=None,
              help="Find the largest alpha0 with alpha <= target.")
@click.option("--max-delta-out", "max_delta_out", type=UNIT_CLOSED_HIGH,
              default=DEFAULT_MAX_DELTA_OUT, show_default=True,
              help="Largest delta' accepted; above it the bound is vacuous (not valid).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def emd_itemwise_cmd(model, m, n, delta, alpha0, target_alpha, max_delta_out, as_json):
    """PrivEMDItemWise (Imola et al., Thm 4.4): alpha and delta' from alpha0, or the inverse."""
    if (alpha0 is None) == (target_alpha is None):
        raise click.UsageError(
            f"give exactly one of --alpha0 and --target-alpha, got --alpha0={alpha0} "
            f"--target-alpha={target_alpha}"
        )
    if model == "central" and n is None:
        raise click.UsageError("--n is required with --model central, got --n=None")
    if model == "local" and n is not None:
        warn(f"--n {n} is ignored in the local model")
        n = None
    if alpha0 is not None:
        b = as_usage_error(emd_itemwise, alpha0, m, delta, model, n, max_delta_out=max_delta_out)
        rec = b.to_dict()
        rec["composition_alpha"] = b.composition_alpha
        rec["composition_alpha0"] = b.alpha / m
        rec["advanced_composition_alpha"] = as_usage_error(
            composition_alpha, alpha0, m, delta).advanced_alpha
        _warn_invalid(b.notes, b.valid)
        keys = ["model", "m", "n", "alpha0", "alpha", "delta", "delta_out", "max_delta_out",
                "vacuous", "valid", "validity_limit", "composition_alpha", "composition_alpha0"]
    else:
        inv = as_usage_error(emd_itemwise_alpha0, target_alpha, m, delta, model, n,
                             max_delta_out=max_delta_out)
        b = inv.bound
        rec = b.to_dict()
        rec.update(
            target_alpha=inv.target_alpha, limited_by=inv.limited_by,
            composition_alpha0=inv.composition_alpha0,
            asymptotic_alpha0=inv.asymptotic_alpha0, asymptotic_alpha=inv.asymptotic_alpha,
        )
        _warn_invalid(b.notes, b.valid)
        keys = ["model", "m", "n", "target_alpha", "alpha0", "alpha", "delta", "delta_out",
                "max_delta_out", "valid", "limited_by", "composition_alpha0", "asymptotic_alpha0",
                "asymptotic_alpha"]
    _emit(rec, as_json, keys)


@account.command("shuffle-ldp")
@n_option(required=True, help="Number of users (reports).")
@click.option("--eps0", type=POSITIVE, required=True, help="Local DP parameter.")
@delta_option(required=True, help="Target delta, in (0, 1).")
@click.option("--method", type=click.Choice(["tightest", "variation-ratio", "numerical",
                                            "closed-form", "krr-blanket", "binary-rr-exact"]),
              default="tightest", show_default=True,
              help="tightest: the smallest certified of the others; variation-ratio: the "
                   "stronger-clone pair (Feldman-McMillan-Talwar 2023); numerical: the exact "
                   "clones pair (Feldman-McMillan-Talwar 2021); closed-form: FMT21 Thm 3.1; "
                   "krr-blanket: k-ary randomized response's exact privacy blanket "
                   "(--randomizer krr); binary-rr-exact: binary RR's exact worst case "
                   "(--randomizer krr --k 2, n <= 2e5).")
@click.option("--randomizer", type=click.Choice(["general", "krr"]), default="general",
              show_default=True,
              help="What the reports come from: any eps0-LDP randomizer, or k-ary randomized "
                   "response (needs --k; tighter for k >= 3).")
@click.option("--k", "k", type=COUNT, default=None,
              help="Domain size of k-RR (with --randomizer krr), >= 2.")
@click.option("--d", "d", type=Real(0.0, 1.0, closed_high=True), default=1.0,
              show_default=True,
              help="Metric randomizer: distance of the changed item as a fraction of the "
                   "diameter (alpha0 = --eps0). Not with closed-form.")
@click.option("--rtol", type=Real(0.0, 0.5, closed_high=True), default=1e-3, show_default=True,
              help="Numerical: relative resolution of the epsilon grid, in (0, 0.5].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def shuffle_ldp_cmd(n, eps0, delta, method, randomizer, k, d, rtol, as_json):
    """Amplification by shuffling of n eps0-LDP reports (or alpha0 d_X-DP reports)."""
    if method == "closed-form" and d != 1.0:
        raise click.BadParameter(f"--d {d} needs a numerical method, not closed-form",
                                 param_hint="--d")
    if (randomizer == "krr") != (k is not None):
        raise click.BadParameter("--k goes with --randomizer krr, and only with it",
                                 param_hint="--k")
    if randomizer == "krr" and d != 1.0:
        raise click.BadParameter(f"--d {d} is not available for --randomizer krr",
                                 param_hint="--d")
    if method == "krr-blanket" and randomizer != "krr":
        raise click.BadParameter("krr-blanket needs --randomizer krr --k K",
                                 param_hint="--method")
    if method == "binary-rr-exact" and (randomizer != "krr" or k != 2):
        raise click.BadParameter("binary-rr-exact needs --randomizer krr --k 2",
                                 param_hint="--method")
    from shuffledp.accounting.amplification.clones import shuffle_ldp as _shuffle_ldp
    from shuffledp.cli.common import progress_bar

    kw = {} if method == "closed-form" else {"rtol": rtol, "d": d}
    with progress_bar(0, "binary RR: every data set", "data set", as_json) as bar:
        last = [0]

        def follow(done: int, total: int) -> None:
            """One pass over the n data sets per certified check (usually one or two)."""
            if done <= last[0] or last[0] == 0:
                bar.total += total
                bar.refresh()
                last[0] = 0
            bar.update(done - last[0])
            last[0] = done

        from shuffledp.cli.common import EstimatedProgress

        # binary RR's exact walk reports its progress (the bar); the other bounds do not:
        # a line with the time elapsed instead
        with EstimatedProgress("account shuffle-ldp: computing the bound", None,
                               as_json or (randomizer == "krr" and k == 2)):
            b = as_usage_error(_shuffle_ldp, n, eps0, delta, method, randomizer=randomizer,
                               k=k, progress=follow, **kw)
    rec = b.to_dict()
    if d == 1.0:
        # exact divergence of shuffled k-RR (binary RR for a general randomizer) on one pair
        # of data sets: no valid bound can certify at or below it
        from shuffledp.accounting.amplification.krr_lower import krr_lower_epsilon
        from shuffledp.cli.common import EstimatedProgress

        with EstimatedProgress("account shuffle-ldp: the exact lower bound", None, as_json):
            rec["epsilon_refuted"], fam = krr_lower_epsilon(n, eps0, delta, k=k or 2,
                                                            rtol=rtol)
        rec["refuted_by"] = (f"exact shuffled {k or 2}-RR, others holding "
                             f"{'x1^0' if fam == 'x0' else 'a third value'}" if fam else None)
    _warn_invalid(b.notes, b.valid)
    # ``valid`` is whether the amplification bound's condition holds; the (epsilon, delta)
    # printed holds either way (without amplification it is eps0 d, by post-processing)
    rec["amplified"] = bool(b.valid)
    rec["holds"] = True
    if not as_json:
        rec["amplified"] = ("yes" if b.valid else
                            "no: this method certifies no amplification here, so epsilon is "
                            "eps0 d, which holds (shuffling is post-processing)")
    _emit(rec, as_json,
          ["n", "eps0", "d", "delta", "method", "epsilon", "epsilon_lower", "tolerance",
           "amplified", "epsilon_refuted"])


@account.command("summation")
@n_option(low=2, required=True, help="Users (>= 2).")
@epsilon_option(required=True, help="Total epsilon.")
@delta_option(required=True)
@B_option(required=True)
@grid_option(required=True)
@w_option()
@click.option("--gamma", type=POSITIVE, default=None, help="Per-level decay (default 1/sqrt 2).")
@click.option("--rounding", type=click.Choice(["largest_remainder", "floor"]),
              default="largest_remainder", show_default=True,
              help="How a user's level vector is scaled by B and rounded: largest_remainder keeps "
                   "every level summing to exactly B; floor is Ghazi et al. App. F's.")
@click.option("--neighbour", type=click.Choice(["zero_out", "replace", "add_remove"]),
              default=DEFAULT_NEIGHBOUR.token, show_default=True,
              help="zero_out (the toolkit's one default) or replace (n public); add_remove is "
                   "refused: the noise is planned from n.")
@dropout_option()
@click.option("--wrap-target", "wrap_target", type=UNIT, default=1e-12, show_default=True,
              help="Largest probability that any coordinate's sum leaves the decoding window "
                   "(wrap-around mod q; it costs accuracy, not privacy), in (0, 1).")
@click.option("--decoding", type=click.Choice(["shifted", "centred"]), default="shifted",
              show_default=True,
              help="Decoding window of the sums mod q: shifted [-t, q - 1 - t] (the smallest "
                   "q = n B + 2 t + 1) or centred (q = 2 (n B + t) + 1).")
@click.option("--budget", type=click.Choice(["auto", "paper"]), default="auto",
              show_default=True,
              help="Split of eps over the levels, as `shuffledp setup --budget`: auto (the "
                   "default of both models: more on the finest level when eps n / pixels is "
                   "large) or paper (Ghazi et al.'s printed split).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def summation_cmd(n, epsilon, delta, B, grid, w, gamma, rounding, neighbour, dropout, wrap_target,
                  decoding, budget, as_json):
    """Parameters of the App. F shuffle summation protocol (Ghazi et al. (AAAI 2023)).

    Refuses (exit 1, the reason on one line) every configuration the protocol record
    (``shuffledp.protocol.params.ProtocolParams``) would refuse: q <= 2^32, messages of at
    most 64 bits, n_min >= 2, a headroom of at least 1.
    """
    from shuffledp.accounting.summation import summation_parameters

    kw: dict[str, Any] = {"budget": budget}
    if gamma is not None:
        kw["gamma"] = gamma
    p = as_refusal(f"no protocol for --grid {grid} --n {n} --epsilon {epsilon} --delta {delta} "
                   f"--B {B} --dropout {dropout} --budget {budget}",
                   summation_parameters, n=n, epsilon=epsilon, delta=delta, B=B, grid=grid,
                   w=w, rounding=rounding, neighbour=neighbour, dropout=dropout,
                   wrap_target=wrap_target, decoding=decoding, **kw)
    rec = p.to_dict()
    rec["grid"] = str(grid)
    wire = _wire_figures(grid, n, epsilon, delta, B, w, rounding, neighbour, dropout,
                         wrap_target, decoding, kw)
    rec.update(wire)
    _emit(rec, as_json,
          ["grid", "n", "n_min", "epsilon", "delta", "B", "m", "levels", "q", "decode_low", "r",
           "messages_per_user", "bits_per_message", "bits_per_user", *wire, "polya_shape",
           "wrap_probability"])
    if not as_json:
        _noise_table(rec)


def _wire_figures(grid: Any, n: int, epsilon: float, delta: float, B: int, w: int,
                  rounding: str, neighbour: str, dropout: float, wrap_target: float,
                  decoding: str, kw: dict) -> dict[str, int]:
    """What one user's batch takes on the wire: plaintext (simulation path) and encrypted
    (deployment path, one HPKE encapsulation per message), from
    :class:`shuffledp.protocol.params.ProtocolParams` (the centred decoding has no protocol
    record: empty then)."""
    from shuffledp.protocol.params import derive_params

    if decoding != "shifted":
        return {}
    try:
        p = derive_params(grid, n, epsilon=epsilon, delta=delta, B=B, w=w, rounding=rounding,
                          neighbour=neighbour, dropout=dropout, wrap_target=wrap_target, **kw)
    except (ValueError, TypeError):
        return {}
    return {"bytes_per_user": p.bytes_per_user,
            "encrypted_bytes_per_user": p.encrypted_bytes_per_user}


def _noise_table(rec: dict[str, Any]) -> None:
    """The noise of every measured level: its budget, sensitivity, the discrete Laplace
    parameter of the summed noise and its standard deviation (in units of the scaled sums,
    and divided by B: in units of the users' mass)."""
    click.echo("noise per measured level (the sum of all users' Polya noise is DL(a) per "
               "coordinate):")
    click.echo(f"{'level':>6} {'cells':>8} {'eps_i':>10} {'sens.':>6} {'a = DL parameter':>18} "
               f"{'noise std':>11} {'std / B':>9}")
    B = rec["B"]
    for lvl, size, eps, sens, a, std in zip(rec["levels"], rec["level_sizes"],
                                            rec["level_epsilons"], rec["level_sensitivities"],
                                            rec["dl_parameters"], rec["level_noise_std"]):
        click.echo(f"{lvl:>6} {size:>8} {eps:>10.4g} {sens:>6} {a:>18.10f} {std:>11.5g} "
                   f"{std / B:>9.4g}")


@account.command("compose")
@click.argument("reports", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--spec", type=click.Path(dir_okay=False), default=None,
              help="JSON spec of releases (reports with counts, events, parallel groups; "
                   "format and example below and in docs/accounting.md).")
@click.option("--times", type=COUNT, default=1, show_default=True,
              help="Each REPORT counts this many times (e.g. 365 daily releases alike).")
@delta_option(default=None, help="Total delta of the composition (default: the spec's).")
@click.option("--discretization", type=Real(0.0, 0.1, closed_high=True), default=None,
              help="PLD grid interval (default 1e-4; pessimistic rounding).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--quiet", is_flag=True, help="No progress line on stderr.")
def compose_cmd(reports, spec, times, delta, discretization, as_json, quiet):
    """Total (epsilon, delta) of several releases: each REPORT is a release's report.json
    or the output of `shuffledp account shuffle-ldp --json` / `summation --json` saved to a
    file (anything whose 'guarantee' carries its event), or give --spec FILE.

    \b
    Example: shuffledp account shuffle-ldp --n 100000 --eps0 1 --delta 1e-6 --json > s.json
             shuffledp account compose s.json out/report.json --delta 1e-5

    \b
    A spec is a JSON object (paths relative to the spec's folder):
      {"delta": 1e-6,
       "releases": [
         {"report": "day1/report.json", "count": 365},
         {"event": {"type": "discrete_laplace", "parameter": 0.1,
                    "sensitivity": 1, "neighbour": "replace"}, "count": 4},
         {"parallel": [{"report": "a/report.json"}, {"report": "b/report.json"}]}]}
    "count" repeats a release, "parallel" holds releases on disjoint users, "delta" is the
    total delta (else --delta), "discretization" the PLD grid.

    Prints basic composition, advanced composition (Kairouz-Oh-Viswanath 2015, Thm 3.5) and
    the PLD composition of the releases' dominating pairs (its numerical error bound
    charged, ``pld_error``), and the smallest with the method that gave it. Releases must
    share one neighbour relation; an event whose stated (epsilon, delta) its parameters do
    not prove is refused, and so is a parallel group the spec shows not to be disjoint.
    """
    from shuffledp.accounting.composition import check_parallel_groups
    from shuffledp.accounting.ledger import accountant_from_reports, accountant_from_spec
    from shuffledp.safe_io import read_regular_text

    if bool(reports) == bool(spec):
        raise click.UsageError("give REPORT files or --spec FILE (one of them)")
    if spec:
        import os

        data = as_usage_error(lambda: json.loads(read_regular_text(spec, 64 << 20,
                                                                   what="spec")))
        as_usage_error(check_parallel_groups, data, os.path.dirname(spec) or ".")
        acc, notes = as_usage_error(accountant_from_spec, data, os.path.dirname(spec) or ".",
                                    discretization)
        delta = delta if delta is not None else data.get("delta") if isinstance(data, dict) \
            else None
    else:
        acc, notes = as_usage_error(accountant_from_reports, list(reports),
                                    discretization or 1e-4)
        if times > 1:
            for ev, k in list(acc.events):
                acc.compose(ev, k * (times - 1))
    if delta is None:
        raise click.UsageError("give the total --delta (or 'delta' in the spec)")
    from shuffledp.cli.common import EstimatedProgress

    total = sum(k for _, k in acc.events)
    # the PLD of K alike releases takes about log2(K) convolutions, each as long as its
    # support: no estimate is known in advance, so the line shows the time elapsed
    with EstimatedProgress(f"account compose: PLD composition of {total:,} releases", None,
                           quiet):
        res = as_refusal("no certified composition", acc.epsilon, delta)
    for note in list(notes) + list(res.notes):
        warn(note)
    rec = res.to_dict()
    rec["neighbour"] = str(res.neighbour)
    _emit(rec, as_json, ["releases", "neighbour", "delta", "epsilon", "method", "basic",
                         "advanced", "pld", "pld_error", "discretization"])


__all__ = ["account"]
