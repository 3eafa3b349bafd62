"""``shuffledp secagg``: secure aggregation with the server and clients as separate processes.

Subcommands
-----------
server   run the server over a mailbox directory (:mod:`shuffledp.secagg.mailbox`) and write
         the sum (``result.npy``) and a report (survivors, dropouts per round, rejected
         messages, timings)
client   run one client: read its integer vector from a ``.npy`` file, answer the four
         rounds through the same directory

Only masked vectors and encrypted shares ever reach the directory ([Bonawitz17]_). Errors
follow :mod:`shuffledp.cli_common`: exit 2 for a bad option, exit 1 for a refusal (too few
clients, a deviating server), never a traceback.

References
----------
.. [Bonawitz17] K. Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving
   Machine Learning", CCS 2017.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import click
import numpy as np

from shuffledp.cli_common import COUNT, POSITIVE, Group, write_npy, write_report

ROUNDS = 4


@click.group("secagg", cls=Group)
def secagg() -> None:
    """Secure aggregation (Bonawitz et al. 2017) over a mailbox directory."""


def _dir_option(fn):
    return click.option("--dir", "mailbox", type=click.Path(file_okay=False), required=True,
                        help="Mailbox directory shared by the server and the clients.")(fn)


@secagg.command("server")
@_dir_option
@click.option("--clients", "clients", type=COUNT, required=True,
              help="Clients expected (ids 0..N-1).")
@click.option("--length", type=COUNT, required=True, help="Vector length L.")
@click.option("--modulus", type=COUNT, required=True, help="Modulus m of the sum (2..2^62).")
@click.option("--threshold", type=COUNT, default=None,
              help="Shares needed / fewest clients per round  [default: 2n/3 + 1]")
@click.option("--round-timeout", "round_timeout", type=POSITIVE, default=30.0,
              show_default=True, help="Seconds to wait for the clients of each round.")
def server_cmd(mailbox, clients, length, modulus, threshold, round_timeout):
    """Run the server: relay keys and shares, collect masked inputs, unmask the sum."""
    n = clients
    from shuffledp.secagg import SecAggServer, default_threshold
    from shuffledp.secagg.mailbox import collect, post

    if not 2 <= modulus <= 1 << 62:
        raise click.BadParameter(f"must be in [2, 2^62], got {modulus}", param_hint="--modulus")
    t = default_threshold(n) if threshold is None else threshold
    if not 2 <= t <= n:
        raise click.BadParameter(f"must be in [2, --clients={n}], got {t}",
                                 param_hint="--threshold")
    box = Path(mailbox)
    session = os.urandom(16)
    post(box / "session", session)
    server = SecAggServer(n, length, modulus, t, session)
    t0 = time.perf_counter()
    dropped = {}
    for r in range(ROUNDS):
        expected = set(server.members[-1])
        for data in collect(box / f"round{r}", expected, round_timeout).values():
            server.receive(data)
        dropped[r] = sorted(expected - server.answered)
        reply = server.close_round()  # SecAggAborted (a ValueError) exits 1 with its reason
        if r == 1:
            for i, data in reply.items():
                post(box / "round1" / f"to-{i}.msg", data)
        elif r in (0, 2):
            post(box / f"round{r}" / "server.msg", reply)
    write_npy(box / "result.npy", server.total)
    survivors = sorted(server.members[3])
    write_report(box, {"survivors": survivors, "dropped_per_round": dropped,
                       "threshold": t, "rejected": dict(server.rejected),
                       "seconds": time.perf_counter() - t0})
    click.echo(f"sum of {len(survivors)} clients (threshold {t}) written to {box}/result.npy")


@secagg.command("client")
@_dir_option
@click.option("--id", "uid", type=int, required=True, help="This client's id (0..N-1).")
@click.option("--input", "input_path", type=click.Path(dir_okay=False), required=True,
              help=".npy file with the integer vector.")
@click.option("--modulus", type=COUNT, required=True)
@click.option("--threshold", type=COUNT, required=True)
@click.option("--timeout", type=POSITIVE, default=60.0, show_default=True,
              help="Seconds to wait for each server message.")
@click.option("--stop-before-round", "stop", type=click.IntRange(0, 3), default=None,
              hidden=True, help="Fault injection for tests: leave before this round.")
def client_cmd(mailbox, uid, input_path, modulus, threshold, timeout, stop):
    """Run one client through the four rounds."""
    from shuffledp.secagg import SecAggClient
    from shuffledp.secagg.mailbox import post, wait_for

    box = Path(mailbox)
    x = np.load(input_path, allow_pickle=False)
    if x.ndim != 1 or not np.issubdtype(x.dtype, np.integer) or (x < 0).any() or \
            (x >= modulus).any():
        raise click.BadParameter(f"{input_path} must hold a 1-d integer vector in [0, "
                                 f"{modulus})", param_hint="--input")
    session = wait_for(box / "session", timeout)
    client = SecAggClient(uid, x, modulus, threshold, session)
    sources = [None, box / "round0" / "server.msg", box / "round1" / f"to-{uid}.msg",
               box / "round2" / "server.msg"]
    steps = [lambda _: client.advertise(), client.share_keys, client.masked_input,
             client.unmask]
    for r in range(ROUNDS):
        if stop is not None and r >= stop:
            click.echo(f"client {uid}: left before round {r}")
            return
        incoming = None if r == 0 else wait_for(sources[r], timeout)
        post(box / f"round{r}" / f"client-{uid}.msg", steps[r](incoming))
    click.echo(f"client {uid}: done")


__all__ = ["secagg"]
