"""``shuffledp federated``: adaptive hierarchical heatmaps under distributed DP ([Bagdasaryan22]_).

Reads a CSV of ``user_id,x,y`` points (each user's first point is her location) or, without
``--input``, the built-in synthetic mixture; runs the adaptive algorithm (Alg. 2: sub-queries
on a partition tree, each one Alg. 1 with Polya noise and secure aggregation per shard) and
writes to ``--out``:

* ``estimate.npy``: the normalised density on the 2^L x 2^L grid;
* ``report.json``: the guarantee, per-round budgets, tree sizes and vector lengths, shards;
  under ``--neighbour zero_out`` (the default, the toolkit's one relation) or ``replace``
  (n public) also the users, survivors and SecAgg server seconds. Under ``add_remove`` n is
  private: the report states
  the public population bound ``--max-users`` instead and no count that follows n (users,
  survivors, clients per shard, timings, communication in user-entries, the noise shares the
  publisher added to shards that ended with fewer than n_min survivors); with
  ``--report-error`` only (evaluation: computed from the data without noise, not private)
  the MSE against the true density, that of the flat one-hot baseline, the users, and under
  ``add_remove`` the top-up shares of each sub-query;
* ``tree.png``: the estimate and the final partition's cell boundaries side by side (and the
  true density with ``--report-error``).

``--locations all`` (with ``--input``) runs the multi-location extension instead
([Bagdasaryan22]_ Sec. 5.7): every point of a user with its weight, normalised to sum 1,
scaled by ``--gamma`` and randomly rounded (``--rounding``; l1 bound gamma, or gamma + d for
the paper's independent rounding), one federated round over the 2^L x 2^L grid with the same
Polya noise, shards and dropout over-provisioning; writes ``estimate.npy`` and
``report.json``.

Errors follow :mod:`shuffledp.cli.common` (exit 2 bad option, exit 1 refusal).

References
----------
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards Sparse Federated Analytics",
   Alg. 1-2, Thm 4.2, Sec. 4-6 -- full entry in docs/references.md
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import click
import numpy as np

from shuffledp.accounting.budget import DEFAULT_EQ7, DEFAULT_EQ7_C, DEFAULT_FEDERATED_DROPOUT
from shuffledp.accounting.guarantee import DEFAULT_NEIGHBOUR
from shuffledp.cli.common import (
    COUNT,
    POSITIVE,
    SEED,
    UNIT_CLOSED_LOW,
    Command,
    Count,
    delta_option,
    epsilon_option,
    force_option,
    n_option,
    out_dir_option,
    write_npy,
    write_report,
)

EVALUATION_NOTE = ("mse values are computed from the input without noise: evaluation only, "
                   "do not publish them with the release")


def _locations(input_path: str | None, n: int, side: int, seed: int | None):
    """(rows, cols, source, density, ids): the built-in data are n users sampled from a public
    population-density image (as Bagdasaryan et al. Sec. 6.1 sample users from population
    heatmaps), whose density is the truth, ids their positions; with --input, density is None
    and each user's id is a 63-bit hash of her own user_id (so that another user joining or
    leaving never moves her to another shard)."""
    from shuffledp import datasets
    from shuffledp.safe_io import NotRegularFileError

    if input_path is None:
        density = datasets.population_image(side, spread=(0.02, 0.15), background=0.5)
        rows, cols = datasets.sample_pixels(density, n, seed)
        return rows, cols, ("users sampled from population_image("
                            f"{side}, spread=(0.02, 0.15), background=0.5)"), density, None
    try:
        table = datasets.load_csv(input_path)
    except NotRegularFileError as e:  # a usage error naming the option (exit 2)
        raise click.BadParameter(str(e), param_hint="--input") from None
    names, first = np.unique(table.user.astype(str), return_index=True)
    order = np.argsort(first)  # users in the order they first appear in the file
    names, first = names[order], first[order]
    x, y = table.x[first], table.y[first]
    cols = np.minimum((x * side).astype(np.int64), side - 1)
    rows = np.minimum((y * side).astype(np.int64), side - 1)
    return rows, cols, str(input_path), None, _user_hashes(names)


def _user_hashes(names) -> np.ndarray:
    """A 63-bit BLAKE2b hash of each user_id: her shard under add/remove depends on her id
    only (a collision is refused by the plan as a repeated id)."""
    import hashlib

    return np.array([int.from_bytes(hashlib.blake2b(str(u).encode(), digest_size=8).digest(),
                                    "big") >> 1 for u in names], dtype=np.int64)


def _boundaries(owners: np.ndarray) -> np.ndarray:
    edge = np.zeros(owners.shape, dtype=bool)
    edge[:, 1:] |= owners[:, 1:] != owners[:, :-1]
    edge[1:, :] |= owners[1:, :] != owners[:-1, :]
    return edge


@click.command("federated", cls=Command)
@click.option("--input", "input_path", type=click.Path(dir_okay=False), default=None,
              help="CSV 'user_id,x,y' (x, y in [0, 1)); default: built-in synthetic data.")
@n_option(default=10_000, help="Users sampled from the built-in population image (ignored "
                                "with --input).")
@epsilon_option(default=1.0)
@click.option("--depth", type=click.IntRange(1, 10), default=8, show_default=True,
              help="Finest level L: a 2^L x 2^L grid.")
@click.option("--users-per-query", "users_per_query", type=COUNT, default=None,
              help="U, users sampled per sub-query  [default: all]")
@click.option("--shard-size", "shard_size", type=COUNT, default=10_000, show_default=True,
              help="S_max, clients per secure-aggregation shard (the paper's 10,000).")
@click.option("--dropout", type=UNIT_CLOSED_LOW, default=DEFAULT_FEDERATED_DROPOUT,
              show_default=True,
              help="Planned dropout fraction the noise is over-provisioned for (a shard "
                   "left with fewer survivors is refused; under add_remove the publisher "
                   "tops its noise up instead, and real SecAgg refuses below its threshold, "
                   "more than two thirds of a shard's clients).")
@click.option("--dropout-rate", "dropout_rate", type=UNIT_CLOSED_LOW, default=0.0,
              show_default=True, help="Simulated fraction of clients that drop out (e.g. "
                                      "0.02; at most --dropout).")
@click.option("--c", "c", type=POSITIVE, default=DEFAULT_EQ7_C, show_default=True,
              help="Calibration c of eq. 7 (0.05 reproduces the paper's Table 1 "
                   "communication: bench/federated_tables.py; error against c on two data "
                   "sets: bench/federated_c.py).")
@click.option("--eq7", type=click.Choice(["shards", "printed"]), default=DEFAULT_EQ7,
              show_default=True,
              help="eq. 7's shard factor as its text means it (the k shards' noise adds up) "
                   "or as printed (docs/errata.md).")
@click.option("--b", "b", type=POSITIVE, default=2.0, show_default=True,
              help="Expansion parameter b of eq. 9.")
@click.option("--aggregation", type=click.Choice(["secagg", "plain", "simulate"]),
              default="simulate", show_default=True,
              help="simulate: each shard's sum of the clients' Polya noise sampled directly "
                   "(exactly its law, seconds); secagg: the real secure aggregation protocol "
                   "(see --secagg-graph; SecAgg+ by default, every core); plain: the same "
                   "sums without masking.")
@click.option("--secagg-graph", "secagg_graph", type=click.Choice(["sparse", "complete"]),
              default="sparse", show_default=True,
              help="With --aggregation secagg: SecAgg+ (Bell et al. 2020; each client works "
                   "with O(log n) neighbours of a random graph chosen for --dropout and 5% "
                   "corrupted clients) or the full protocol (every pair of a shard's clients "
                   "agrees a key: quadratic).")
@click.option("--seed", type=SEED, default=None,
              help="Reproducible evaluation (not a private release).")
@click.option("--neighbour", type=click.Choice(["zero_out", "add_remove", "replace"]),
              default=DEFAULT_NEIGHBOUR.token, show_default=True,
              help="Neighbouring users: zero out one user's data (the user still takes part, "
                   "n public; sensitivity 1; the toolkit's one default, as for the central and "
                   "shuffle heatmaps), add/remove one (n private; needs --max-users with "
                   "--input) or replace one (2).")
@click.option("--max-users", "max_users", type=Count(2), default=None,
              help="add_remove: the public bound N on the population the shards and the "
                   "noise are planned for, declared before the data: ceil(N / shard size) "
                   "shards, each client's noise planned for (1 - dropout) of a shard's N / "
                   "shards users; rounds with more users are refused  [default: --n for the "
                   "built-in data; required with --input]")
@delta_option(default=None,
              help="add_remove: the total delta spent on each joining user's own noise share "
                   "(split over the sub-queries)  [default: as adaptive_histogram, 30 "
                   "sub-queries x 1e-10]")
@click.option("--report-error", "report_error", is_flag=True,
              help="Add the MSE to the true density, the flat baseline's, and the true "
                   "density to the PNG (evaluation only: not private).")
@click.option("--locations", type=click.Choice(["first", "all"]), default="first",
              show_default=True,
              help="first: each user's first point (the adaptive algorithm); all: every point "
                   "with its weight (Sec. 5.7: weighted normalisation, scaling by --gamma, "
                   "randomized rounding), one round on the 2^L x 2^L grid; needs --input.")
@click.option("--gamma", type=COUNT, default=1000, show_default=True,
              help="--locations all: the scale gamma of the normalised weights.")
@click.option("--rounding", type=click.Choice(["systematic", "independent"]),
              default="systematic", show_default=True,
              help="--locations all: unbiased rounding with l1 bound gamma (systematic) or "
                   "the paper's independent rounding (bound gamma + d).")
@out_dir_option(writes=("estimate.npy", "tree.png", "report.json"), required=True)
@force_option()
def federated_cmd(input_path, n, epsilon, depth, users_per_query, shard_size, dropout,
                  dropout_rate, c, eq7, b, aggregation, secagg_graph, seed, neighbour,
                  max_users, delta, report_error, locations, gamma, rounding, out_dir, force):
    """Adaptive hierarchical heatmap (Bagdasaryan et al. 2022, Alg. 2) via secure aggregation."""
    if locations == "all":
        _multi_location(input_path, depth, epsilon, gamma, rounding, shard_size, dropout,
                        dropout_rate,
                        "secagg_complete" if aggregation == "secagg"
                        and secagg_graph == "complete" else aggregation, seed, neighbour,
                        max_users, delta, users_per_query, report_error, out_dir)
        return
    from shuffledp.analyzers.federated.tree import mse
    from shuffledp.analyzers.heatmap.render import render_png
    from shuffledp.protocol.federated import adaptive_histogram, flat_histogram

    t0 = time.perf_counter()
    side = 1 << depth
    rows, cols, source, density, ids = _locations(input_path, n, side, seed)
    if users_per_query is not None and users_per_query > rows.size:
        raise click.BadParameter(f"must be at most the {rows.size} users, got "
                                 f"{users_per_query}", param_hint="--users-per-query")
    if shard_size < 2:
        raise click.BadParameter(f"must be >= 2, got {shard_size}", param_hint="--shard-size")
    private_n = neighbour == "add_remove"
    plan = _plan_users(private_n, users_per_query, max_users, input_path, n)
    from shuffledp.cli.common import progress_bar, warn

    per_query = users_per_query or plan or rows.size
    shards = -(-per_query // shard_size)
    if aggregation == "secagg" and secagg_graph == "complete":
        _warn_secagg_cost(per_query, shard_size, warn)
    agg_mode = ("secagg_complete" if aggregation == "secagg" and secagg_graph == "complete"
                else aggregation)
    extra = ({"max_users": plan, "delta": delta, "user_ids": ids}
             if private_n and users_per_query is None else {})
    with progress_bar(None, f"sub-queries ({shards} shard{'s' if shards > 1 else ''} each)",
                      "shard", False) as bar:
        rel = adaptive_histogram(rows, cols, depth, epsilon, users_per_query=users_per_query,
                                 shard_size=shard_size, c=c, b=b, dropout=dropout,
                                 dropout_rate=dropout_rate, aggregation=agg_mode,
                                 neighbour=neighbour, eq7=eq7, rng=seed, progress=bar.update,
                                 **extra)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_npy(out / "estimate.npy", rel.estimate)
    edges = _boundaries(rel.tree.owner_map()).astype(float)
    panels = [("adaptive estimate", rel.estimate), ("final partition", edges)]
    evaluation = {}
    if report_error:
        truth = _truth(rows, cols, side, density)
        flat = flat_histogram(rows, cols, depth, epsilon, shard_size=shard_size,
                              dropout=dropout, aggregation="simulate", neighbour="zero_out",
                              rng=None if seed is None else seed + 1)
        panels.append(("true density", truth))
        evaluation = {"mse": mse(rel.estimate, truth), "mse_flat_baseline": mse(flat, truth),
                      "truth": ("the population image the users were sampled from"
                                if density is not None else "the users' own histogram"),
                      "users": int(rows.size), "notes": [EVALUATION_NOTE],
                      **({"top_up_shares_by_round": [r.get("top_up_shares", 0)
                                                     for r in rel.rounds]}
                         if private_n and plan else {})}
    render_png(out / "tree.png", panels)
    report = {
        "mechanism": "adaptive hierarchical histogram (Bagdasaryan et al. 2022, Alg. 2)",
        "release": "reproducible evaluation" if seed is not None else "private",
        "input": source, "grid": f"{side}x{side}",
        "aggregation": aggregation,
        **({"secagg_graph": secagg_graph} if aggregation == "secagg" else {}),
        "guarantee": rel.guarantee.to_dict(), "rounds": rel.public_rounds(),
        "final_tree_nodes": len(rel.tree.nodes),
        "final_vector_length": len(rel.tree.vector_nodes()),
        "communication_per_user_vector_entries": int(sum(r["vector_length"]
                                                         for r in rel.rounds)),
        **({"max_users": plan} if plan else {}),
        **({} if private_n else {
            "users": int(rows.size),
            "communication_total_vector_entries": int(sum(r["vector_length"] * r["users"]
                                                          for r in rel.rounds))}),
        **evaluation,
    }
    if not private_n or report_error:  # run time follows n: evaluation or n public only
        report["seconds"] = time.perf_counter() - t0
    write_report(out, report)
    _summary(report, rel.rounds, side, aggregation, out)


#: --locations all holds one dense vector per user: refuse beyond this many entries in all
MULTI_LOCATION_MAX_ENTRIES = 50_000_000


def _multi_location(input_path, depth, epsilon, gamma, rounding, shard_size, dropout,
                    dropout_rate, aggregation, seed, neighbour, max_users, delta,
                    users_per_query, report_error, out_dir) -> None:
    """``--locations all``: Bagdasaryan et al. Sec. 5.7 on every user's weighted points, one
    federated round (:func:`shuffledp.protocol.federated.federated_locations`)."""
    from shuffledp import datasets
    from shuffledp.analyzers.federated.histogram import public_shards
    from shuffledp.protocol.federated import federated_locations

    if input_path is None:
        raise click.BadParameter("needs --input (a CSV 'user_id,x,y[,weight]' with several "
                                 "points per user); the built-in data hold one location per "
                                 "user", param_hint="--locations")
    for flag, value in (("--users-per-query", users_per_query),
                        ("--report-error", report_error or None)):
        if value is not None:
            raise click.BadParameter(f"applies to the adaptive algorithm (--locations first), "
                                     f"got {flag} with --locations all", param_hint=flag)
    if shard_size < 2:
        raise click.BadParameter(f"must be >= 2, got {shard_size}", param_hint="--shard-size")
    side = 1 << depth
    table = datasets.load_csv(input_path)
    names, inverse = np.unique(table.user.astype(str), return_inverse=True)
    if names.size * side * side > MULTI_LOCATION_MAX_ENTRIES:
        raise click.BadParameter(
            f"--locations all holds one vector of 4^depth = {side * side:,} entries per user: "
            f"{names.size:,} users need {names.size * side * side:,} entries, above "
            f"{MULTI_LOCATION_MAX_ENTRIES:,}; use a smaller --depth", param_hint="--depth")
    cols = np.minimum((table.x * side).astype(np.int64), side - 1)
    rows = np.minimum((table.y * side).astype(np.int64), side - 1)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(names.size + 1))
    cells = (rows * side + cols)[order]
    weights = table.weight[order]
    users = [(cells[bounds[j]:bounds[j + 1]], weights[bounds[j]:bounds[j + 1]])
             for j in range(names.size)]
    private_n = neighbour == "add_remove"
    plan = _plan_users(private_n, None, max_users, input_path, names.size)
    extra = ({"max_users": plan, "delta": delta, "user_ids": _user_hashes(names)}
             if private_n else {})
    dropped = np.random.default_rng(seed).random(names.size) < dropout_rate
    counts, rel = federated_locations(users, side * side, epsilon, gamma=gamma,
                                      rounding=rounding, shard_size=shard_size,
                                      dropout=dropout, dropped=dropped,
                                      aggregation=aggregation, neighbour=neighbour,
                                      rng=seed, **extra)
    dens = np.maximum(counts, 0.0).reshape(side, side)
    dens = dens / dens.sum() if dens.sum() > 0 else np.full(dens.shape, 1.0 / dens.size)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_npy(out / "estimate.npy", dens)
    report = {
        "mechanism": "multi-location federated histogram (Bagdasaryan et al. 2022, Sec. 5.7: "
                     "weighted normalisation, scaling by gamma, randomized rounding)",
        "release": "reproducible evaluation" if seed is not None else "private",
        "input": str(input_path), "grid": f"{side}x{side}", "aggregation": aggregation,
        "gamma": gamma, "rounding": rounding,
        "l1_bound": rel.guarantee.parameters["l1_bound"],
        "guarantee": rel.guarantee.to_dict(), "shards": public_shards(rel),
        "communication_per_user_vector_entries": side * side,
        **({"max_users": plan} if plan else {"users": int(names.size)}),
    }
    write_report(out, report)
    click.echo(f"multi-location round over {side * side} cells, gamma {gamma} ({rounding} "
               f"rounding, l1 bound {report['l1_bound']}), {len(rel.shards)} shard(s); wrote "
               f"{out}/estimate.npy, report.json")


def _plan_users(private_n: bool, users_per_query: int | None, max_users: int | None,
                input_path: str | None, n: int) -> int | None:
    """The public population bound of an add/remove run (None when n is public or the
    sub-queries sample a fixed, public number of users): ``--max-users``, or ``--n`` for the
    built-in data (whose size the caller chose); required with ``--input``."""
    if not private_n:
        if max_users is not None:
            raise click.BadParameter("plans an add_remove run; with --neighbour zero_out or "
                                     f"replace n is public, got --max-users {max_users}",
                                     param_hint="--max-users")
        return None
    if users_per_query is not None:
        return None
    if max_users is None and input_path is not None:
        raise click.BadParameter(
            "--neighbour add_remove keeps n private, so the shards and the noise must be "
            "planned for a public bound on the population declared before the data: give "
            "--max-users N (or --users-per-query, or --neighbour zero_out, where n is "
            "public), got no --max-users", param_hint="--max-users")
    return max_users if max_users is not None else n


def _warn_secagg_cost(per_query: int, shard_size: int, warn: Callable[[str], object]) -> None:
    """Warn when real secure aggregation would need more than 200,000 key agreements per
    sub-query (pairwise within a shard)."""
    pairs = per_query * min(shard_size, per_query)
    if pairs > 200_000:
        warn(f"--aggregation secagg with {per_query} users per sub-query in shards of "
             f"{min(shard_size, per_query)}: about {pairs:,} pairwise key agreements per "
             f"sub-query (roughly {pairs / 7e3:,.0f} s each on 2 cores); for a quick run "
             "use --n 1000 --shard-size 100 --neighbour zero_out (add_remove needs large "
             "shards: the joining user's own noise share costs about 1/shard size)")


def _truth(rows: np.ndarray, cols: np.ndarray, side: int,
           density: np.ndarray | None) -> np.ndarray:
    """The density the estimate is compared with: the population image the users were sampled
    from (the paper's truth) or, for --input, the users' own normalised histogram."""
    if density is not None:
        return density
    truth = np.bincount(rows * side + cols, minlength=side * side).reshape(side, side)
    return truth / truth.sum()


def _summary(report: dict, rounds: list[dict], side: int, aggregation: str, out: Path) -> None:
    """The one-line summary on stdout."""
    err = (f", mse {report['mse']:.3g} (flat {report['mse_flat_baseline']:.3g})"
           if "mse" in report else "")
    agg = {"simulate": "shard noise sums sampled from their exact law (--aggregation secagg "
                       "runs the real protocol)",
           "secagg": "real secure aggregation", "plain": "plain sums"}[aggregation]
    comm = report["communication_per_user_vector_entries"]
    click.echo(f"{len(rounds)} sub-queries, final vector {report['final_vector_length']} "
               f"of {side * side} cells, communication {comm}"
               f" (sum of vector sizes){err}; {agg}; wrote {out}/estimate.npy, report.json, "
               "tree.png")


__all__ = ["federated_cmd"]
