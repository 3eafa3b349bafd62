"""``shuffledp account``: privacy accounting from the command line.

Subcommands
-----------
emd-itemwise   PrivEMDItemWise, Imola et al. Thm 4.4 (forward with --alpha0, inverse with
               --target-alpha)
shuffle-ldp    amplification by shuffling of n eps0-LDP reports (clones bound)
summation      parameters of the App. F shuffle summation protocol (Ghazi et al. 2023)

Every subcommand prints a short table, or one JSON object with ``--json``. Bad input exits
with a usage error naming the option and the value (never a traceback).
"""

from __future__ import annotations

import json
import math
from typing import Any

import click

from shuffledp import _validation as v
from shuffledp.accounting.clones import shuffle_ldp as _shuffle_ldp
from shuffledp.accounting.metric_shuffle import (
    DEFAULT_MAX_DELTA_OUT,
    composition_alpha,
    emd_itemwise,
    emd_itemwise_alpha0,
)
from shuffledp.accounting.summation import summation_parameters


# --------------------------------------------------------------------------- param types
class _Count(click.ParamType):
    """An integer >= low; accepts 100000, 1e5, 1_000."""

    name = "integer"

    def __init__(self, low: int = 1) -> None:
        self.low = low

    def convert(self, value: Any, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            x = value
        else:
            text = str(value).strip().replace("_", "")
            try:
                x = int(text)
            except ValueError:
                try:
                    f = float(text)
                except ValueError:
                    self.fail(f"must be an integer >= {self.low}, got {value!r}", param, ctx)
                if not (math.isfinite(f) and f.is_integer()):
                    self.fail(f"must be an integer >= {self.low}, got {value!r}", param, ctx)
                x = int(f)
        if x < self.low:
            self.fail(f"must be an integer >= {self.low}, got {value!r}", param, ctx)
        return x


class _Real(click.ParamType):
    """A real number in an interval: kind "positive" (0, inf) or "unit" (0, 1)."""

    name = "number"

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def convert(self, value: Any, param, ctx):
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"must be a number, got {value!r}", param, ctx)
        if self.kind == "positive" and not (x > 0 and math.isfinite(x)):
            self.fail(f"must be a finite number > 0, got {value!r}", param, ctx)
        if self.kind == "unit" and not (0 < x < 1):
            self.fail(f"must be in (0, 1), got {value!r}", param, ctx)
        if self.kind == "unit1" and not (0 < x <= 1):
            self.fail(f"must be in (0, 1], got {value!r}", param, ctx)
        if self.kind == "unit0" and not (0 <= x < 1):
            self.fail(f"must be in [0, 1), got {value!r}", param, ctx)
        return x


COUNT = _Count(1)
COUNT2 = _Count(2)
POS = _Real("positive")
UNIT = _Real("unit")
UNIT0 = _Real("unit0")


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


def _warn(notes, valid: bool) -> None:
    if not valid:
        for note in notes:
            click.echo(f"warning: {note}", err=True)


def _run(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (ValueError, TypeError) as exc:
        raise click.UsageError(str(exc)) from None


def _run_or_refuse(fn, *args, **kwargs):
    """Like :func:`_run`, but a refusal is a plain error: exit 1 with the reason."""
    try:
        return fn(*args, **kwargs)
    except (ValueError, TypeError) as exc:
        raise click.ClickException(str(exc)) from None


# --------------------------------------------------------------------------- commands
@click.group("account")
def account() -> None:
    """Privacy accounting: shuffle amplification, metric DP, summation parameters."""


@account.command("emd-itemwise")
@click.option("--model", type=click.Choice(["local", "central"]), required=True,
              help="local: a user shuffles her m items; central: the server shuffles m n.")
@click.option("--m", "m", type=COUNT, required=True, help="Items per user.")
@click.option("--n", "n", type=COUNT, default=None, help="Users (central model).")
@click.option("--delta", type=UNIT, required=True, help="delta of Thm 4.3, in (0, 1).")
@click.option("--alpha0", type=POS, default=None, help="Item-level d_X-DP parameter.")
@click.option("--target-alpha", "target_alpha", type=POS, default=None,
              help="Find the largest alpha0 with alpha <= target.")
@click.option("--max-delta-out", "max_delta_out", type=_Real("unit1"),
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
        click.echo(f"warning: --n={n} is ignored in the local model", err=True)
        n = None
    if alpha0 is not None:
        b = _run(emd_itemwise, alpha0, m, delta, model, n, max_delta_out=max_delta_out)
        rec = b.to_dict()
        rec["composition_alpha"] = b.composition_alpha
        rec["composition_alpha0"] = b.alpha / m
        rec["advanced_composition_alpha"] = _run(composition_alpha, alpha0, m,
                                                 delta).advanced_alpha
        _warn(b.notes, b.valid)
        keys = ["model", "m", "n", "alpha0", "alpha", "delta", "delta_out", "max_delta_out",
                "vacuous", "valid", "validity_limit", "composition_alpha", "composition_alpha0"]
    else:
        inv = _run(emd_itemwise_alpha0, target_alpha, m, delta, model, n,
                   max_delta_out=max_delta_out)
        b = inv.bound
        rec = b.to_dict()
        rec.update(
            target_alpha=inv.target_alpha, limited_by=inv.limited_by,
            composition_alpha0=inv.composition_alpha0,
            asymptotic_alpha0=inv.asymptotic_alpha0, asymptotic_alpha=inv.asymptotic_alpha,
        )
        _warn(b.notes, b.valid)
        keys = ["model", "m", "n", "target_alpha", "alpha0", "alpha", "delta", "delta_out",
                "max_delta_out", "valid", "limited_by", "composition_alpha0", "asymptotic_alpha0",
                "asymptotic_alpha"]
    _emit(rec, as_json, keys)


@account.command("shuffle-ldp")
@click.option("--n", "n", type=COUNT, required=True, help="Number of users (reports).")
@click.option("--eps0", type=POS, required=True, help="Local DP parameter.")
@click.option("--delta", type=UNIT, required=True, help="Target delta, in (0, 1).")
@click.option("--method", type=click.Choice(["closed-form", "numerical"]),
              default="numerical", show_default=True)
@click.option("--rtol", type=POS, default=1e-3, show_default=True,
              help="Numerical: relative resolution of the epsilon grid.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def shuffle_ldp_cmd(n, eps0, delta, method, rtol, as_json):
    """Amplification by shuffling of n eps0-LDP reports (clones bound)."""
    if method == "numerical":
        if rtol > 0.5:
            raise click.BadParameter(f"must be in (0, 0.5], got {rtol!r}", param_hint="--rtol")
        b = _run(_shuffle_ldp, n, eps0, delta, method, rtol=rtol)
    else:
        b = _run(_shuffle_ldp, n, eps0, delta, method)
    _warn(b.notes, b.valid)
    _emit(b.to_dict(), as_json,
          ["n", "eps0", "delta", "method", "epsilon", "epsilon_lower", "tolerance", "valid"])


@account.command("summation")
@click.option("--n", "n", type=COUNT2, required=True, help="Users (>= 2).")
@click.option("--eps", "eps", type=POS, required=True, help="Total epsilon.")
@click.option("--delta", type=UNIT, required=True, help="delta in (0, 1).")
@click.option("--B", "B", type=COUNT, required=True, help="Scaling factor.")
@click.option("--grid", "grid", type=str, required=True, help="WIDTHxHEIGHT, e.g. 320x240.")
@click.option("--w", "w", type=COUNT, default=20, show_default=True,
              help="Reconstruct's top-w (fixes the start level).")
@click.option("--gamma", type=POS, default=None, help="Per-level decay (default 1/sqrt 2).")
@click.option("--rounding", type=click.Choice(["largest_remainder", "floor"]),
              default="largest_remainder", show_default=True)
@click.option("--neighbour", type=click.Choice(["replace", "add_remove"]),
              default="replace", show_default=True)
@click.option("--dropout", type=UNIT0, default=0.0, show_default=True,
              help="Declared dropout fraction.")
@click.option("--wrap-target", "wrap_target", type=UNIT, default=1e-12, show_default=True)
@click.option("--decoding", type=click.Choice(["shifted", "centred"]), default="shifted",
              show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def summation_cmd(n, eps, delta, B, grid, w, gamma, rounding, neighbour, dropout, wrap_target,
                  decoding, as_json):
    """Parameters of the App. F shuffle summation protocol (Ghazi et al. 2023).

    Refuses (exit 1, the reason on one line) every configuration the protocol record
    (``shuffledp.protocol_params.ProtocolParams``) would refuse: q <= 2^32, messages of at
    most 64 bits, n_min >= 2, a headroom of at least 1.
    """
    from shuffledp.grid import Grid

    try:
        g = Grid.parse(grid)
    except (TypeError, ValueError) as exc:
        raise click.BadParameter(f"{exc}", param_hint="--grid") from None
    kw = {} if gamma is None else {"gamma": gamma}
    p = _run_or_refuse(summation_parameters, n=n, epsilon=eps, delta=delta, B=B, grid=g,
                       w=w, rounding=rounding, neighbour=neighbour, dropout=dropout,
                       wrap_target=wrap_target, decoding=decoding, **kw)
    rec = p.to_dict()
    rec["grid"] = str(g)
    _emit(rec, as_json,
          ["grid", "n", "n_min", "epsilon", "delta", "B", "m", "levels", "q", "decode_low", "r",
           "messages_per_user", "bits_per_message", "bits_per_user", "wrap_probability"])


__all__ = ["account", "v"]
