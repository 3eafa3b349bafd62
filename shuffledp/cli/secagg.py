"""``shuffledp secagg``: secure aggregation with the server and clients as separate processes.

Subcommands
-----------
server   run the server over a mailbox directory (:mod:`shuffledp.secagg.mailbox`) and write
         the sum (``result.npy``) and a report (status, session, survivors, dropouts per
         round, rejected messages, clients excluded for wrong shares, clients refused for
         other parameters (``mismatched``), timings); an earlier
         run's files are removed first, and an aborted run writes its report with the
         reason and no ``result.npy``
client   run one client: read its integer vector from a ``.npy`` file, check the server's
         hello (``DIR/session``: the session and the modulus, vector length and threshold
         it binds; another value of any of them is refused, naming it, before the input is
         used, and the client posts a leave marker so the server does not wait), answer the
         four rounds through the same directory

Only masked vectors and encrypted shares ever reach the directory ([Bonawitz17]_). Errors
follow :mod:`shuffledp.cli.common`: exit 2 for a bad option, exit 1 for a refusal (too few
clients, a deviating server), never a traceback.

References
----------
.. [Bonawitz17] K. Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving
   Machine Learning", CCS 2017.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import click
import numpy as np

from shuffledp.cli.common import COUNT, POSITIVE, Group, write_npy, write_report

ROUNDS = 4


def server_threshold(n: int, modulus: int, threshold: int | None) -> int:
    """Check --clients, --modulus and --threshold of a secure-aggregation server (mailbox or
    HTTP); returns the threshold t (default 2n/3 + 1)."""
    from shuffledp.secagg import default_threshold
    from shuffledp.secagg.server import MAX_CLIENTS

    if not 2 <= n <= MAX_CLIENTS:
        raise click.BadParameter(f"must be in [2, {MAX_CLIENTS}], got {n}",
                                 param_hint="--clients")
    if not 2 <= modulus <= 1 << 62:
        raise click.BadParameter(f"must be in [2, 2^62], got {modulus}", param_hint="--modulus")
    t = default_threshold(n) if threshold is None else threshold
    if not 2 <= t <= n:
        raise click.BadParameter(f"must be in [2, --clients={n}], got {t}",
                                 param_hint="--threshold")
    return t
INPUT_LIMIT = 1 << 30  # bytes of a client's --input .npy file


@click.group("secagg", cls=Group)
def secagg() -> None:
    """Secure aggregation (Bonawitz et al. 2017) over a mailbox directory."""


def _dir_option(fn):
    return click.option("--dir", "mailbox", type=click.Path(file_okay=False), required=True,
                        help="Mailbox directory shared by the server and the clients.")(fn)


@secagg.command("server")
@_dir_option
@click.option("--clients", "clients", type=COUNT, required=True,
              help="Clients expected (ids 0..N-1, N <= 65536).")
@click.option("--length", type=COUNT, required=True, help="Vector length L.")
@click.option("--modulus", type=COUNT, required=True, help="Modulus m of the sum (2..2^62).")
@click.option("--threshold", type=COUNT, default=None,
              help="Shares needed / fewest clients per round  [default: 2n/3 + 1]")
@click.option("--round-timeout", "round_timeout", type=POSITIVE, default=30.0,
              show_default=True,
              help="Seconds to wait for the clients of each round that neither answered nor "
                   "left.")
def server_cmd(mailbox, clients, length, modulus, threshold, round_timeout):
    """Run the server: relay keys and shares, collect masked inputs, unmask the sum.

    The previous run's session, result and report in --dir are removed first; the report
    of this run says whether it released a sum (result.npy) or aborted (and why).
    """
    n = clients
    from shuffledp.secagg import SecAggAborted, SecAggServer
    from shuffledp.secagg.mailbox import clear, collect, post, run_dir
    from shuffledp.secagg.server import message_limits

    t = server_threshold(n, modulus, threshold)
    limits = message_limits(n, length)
    box = Path(mailbox)
    clear(box)
    session = os.urandom(16)
    run = run_dir(box, session)
    run.mkdir(parents=True)
    server = SecAggServer(n, length, modulus, t, session)
    post(box / "session", server.hello())  # the session id and the parameters it binds
    t0 = time.perf_counter()
    dropped: dict[int, list[int]] = {}
    left: dict[int, list[int]] = {}

    def report(status: str, **extra) -> dict:
        return {"status": status, **server.summary(), "dropped_per_round": dropped,
                "left_per_round": left, "seconds": time.perf_counter() - t0, **extra}

    try:
        for r in range(ROUNDS):
            expected = set(server.members[-1])
            got, unreadable, gone = collect(run / f"round{r}", expected, round_timeout,
                                            limits[r])
            for _ in unreadable:
                server.rejected[f"round {r}: message file not a regular file or too large"] += 1
            for i, data in got.items():
                server.receive(data, channel=i)
            dropped[r] = sorted(expected - server.answered)
            left[r] = sorted(gone)
            reply = server.close_round()
            if r == 1:
                for i, data in reply.items():
                    post(run / "round1" / f"to-{i}.msg", data)
            elif r in (0, 2):
                post(run / f"round{r}" / "server.msg", reply)
    except SecAggAborted as e:
        post(run / "aborted", str(e).encode())
        write_report(box, report("aborted", reason=str(e)))
        raise click.ClickException(str(e)) from None
    write_npy(box / "result.npy", server.total)
    write_report(box, report("released"))
    click.echo(f"sum of {len(server.members[3])} clients (threshold {t}) written to "
               f"{box}/result.npy")


@secagg.command("client")
@click.option("--dir", "mailbox", type=click.Path(file_okay=False), default=None,
              help="Mailbox directory shared by the server and the clients.")
@click.option("--server", "server", default=None,
              help="URL of `shuffledp serve secagg` (HTTP transport; instead of --dir).")
@click.option("--id", "uid", type=click.IntRange(0, (1 << 16) - 1), required=True,
              help="This client's id (0..N-1).")
@click.option("--input", "input_path", type=click.Path(dir_okay=False), required=True,
              help=".npy file with the integer vector.")
@click.option("--modulus", type=COUNT, required=True,
              help="Modulus m of the sum: the server's --modulus (a mismatch is refused).")
@click.option("--threshold", type=COUNT, required=True,
              help="Shares needed / fewest clients: the server's threshold (a mismatch is "
                   "refused).")
@click.option("--timeout", type=POSITIVE, default=60.0, show_default=True,
              help="Seconds to wait for each server message.")
@click.option("--ca-cert", "ca_cert", type=click.Path(exists=True, dir_okay=False),
              default=None,
              help="With --server over HTTPS: verify the server's certificate against this PEM "
                   "CA [default: the system's CAs].")
@click.option("--stop-before-round", "stop", type=click.IntRange(0, 3), default=None,
              hidden=True, help="Fault injection for tests: leave before this round (posting a "
                                "leave marker, so the server need not wait for a timeout).")
def client_cmd(mailbox, server, uid, input_path, modulus, threshold, timeout, ca_cert, stop):
    """Run one client through the four rounds (over --dir, or over HTTP with --server)."""
    if (mailbox is None) == (server is None):
        raise click.UsageError("give exactly one of --dir (mailbox) and --server (HTTP)")
    if ca_cert is not None and server is None:
        raise click.UsageError(f"--ca-cert {ca_cert} applies to --server (HTTPS) only, not to "
                               "--dir")
    from shuffledp.safe_io import UnsafeFileError, read_regular
    from shuffledp.secagg import MessageError, SecAggClient, SecAggRefused
    from shuffledp.secagg import messages as msg
    from shuffledp.secagg.mailbox import RunAborted, post, run_dir, wait_for

    box = Path(mailbox or ".")
    try:
        x = np.load(io.BytesIO(read_regular(input_path, INPUT_LIMIT, what="--input")),
                    allow_pickle=False)
    except (UnsafeFileError, ValueError, OSError) as e:
        raise click.BadParameter(f"{input_path}: not a readable .npy file ({e})",
                                 param_hint="--input") from None
    if x.ndim != 1 or not np.issubdtype(x.dtype, np.integer) or (x < 0).any() or \
            (x >= modulus).any():
        raise click.BadParameter(f"{input_path} must hold a 1-d integer vector in [0, "
                                 f"{modulus})", param_hint="--input")
    if server is not None:
        _http_client(server, uid, x, modulus, threshold, timeout, stop, ca_cert)
        return
    r, run = 0, None
    try:
        hello = wait_for(box / "session", timeout, limit=msg.HEADER.size)
        session = msg.context_of(hello).session
        run = run_dir(box, session)
        client = SecAggClient(uid, x, modulus, threshold, session)
        client.check_hello(hello)  # other parameters than the server's: refused here
        sources = [None, run / "round0" / "server.msg", run / "round1" / f"to-{uid}.msg",
                   run / "round2" / "server.msg"]
        steps = [lambda _: client.advertise(), client.share_keys, client.masked_input,
                 client.unmask]
        for r in range(ROUNDS):
            if stop is not None and r >= stop:
                post(run / f"round{r}" / f"client-{uid}.leave", b"")
                click.echo(f"client {uid}: left before round {r}")
                return
            incoming = None if r == 0 else wait_for(sources[r], timeout,
                                                    abort_marker=run / "aborted")
            post(run / f"round{r}" / f"client-{uid}.msg", steps[r](incoming))
    except (SecAggRefused, MessageError) as e:
        if run is not None:  # leave at once, so the server need not wait for a deadline
            post(run / f"round{r}" / f"client-{uid}.leave", b"")
        raise click.ClickException(_named(uid, e)) from None
    except (TimeoutError, RunAborted, UnsafeFileError) as e:
        raise click.ClickException(f"client {uid}: {e}") from None
    click.echo(f"client {uid}: done")


def _named(uid: int, error: Exception) -> str:
    """``client UID: <error>``, without naming the client twice."""
    text = str(error)
    return text if text.startswith(f"client {uid}:") else f"client {uid}: {text}"


def _http_client(url, uid, x, modulus, threshold, timeout, stop, ca_cert=None) -> None:
    """The client over HTTP or HTTPS (:mod:`shuffledp.serve.secagg_service`, extra
    ``[serve]``); ``ca_cert`` is the PEM CA the server's certificate must chain to."""
    try:
        import httpx

        from shuffledp.cli.serve import _client_tls
        from shuffledp.serve.secagg_service import ClientAborted, run_client
    except ImportError as e:
        raise click.ClickException(
            f'--server needs the optional extra: pip install "shuffledp[serve]" ({e.name} is '
            f'missing)') from None
    from shuffledp.secagg import MessageError, SecAggRefused

    verify = _client_tls(ca_cert)
    try:
        how = run_client(url, uid, x, modulus, threshold, timeout=timeout, stop_before=stop,
                         verify=verify)
    except (ClientAborted, SecAggRefused, MessageError) as e:
        text = _named(uid, e)
        if "certificate does not verify" in text:
            text += (f" (--server {url}: its certificate is not trusted; give its CA with "
                     "--ca-cert)")
        raise click.ClickException(text) from None
    except httpx.HTTPError as e:
        hint = ""
        if "CERTIFICATE_VERIFY_FAILED" in str(e):
            hint = (f" (--server {url}: its certificate is not trusted; give its CA with "
                    "--ca-cert)")
        raise click.ClickException(f"client {uid}: {type(e).__name__}: {e}{hint}") from None
    click.echo(f"client {uid}: {'left' if how == 'left' else 'done'}")


__all__ = ["secagg"]
