"""``shuffledp serve``: the shuffler and the secure-aggregation server as network services.

::

    shuffledp serve shuffler --params run/params.json --mac-key run/mac.key \\
        --analyzer-pub run/analyzer.pub --listen 127.0.0.1:8443 --data /var/lib/shuffler
    shuffledp upload --server http://127.0.0.1:8443 --params run/params.json --in u7.bin
    shuffledp serve close --server http://127.0.0.1:8443 --params run/params.json \\
        --token /var/lib/shuffler/token --out run/mixed.bin
    shuffledp serve secagg --clients 100 --threshold 67 --length 1000 \\
        --modulus 4294967296 --listen 127.0.0.1:8444 --data /var/lib/secagg
    shuffledp secagg client --server http://127.0.0.1:8444 --id 0 --input x0.npy ...

The services need the optional extra ``pip install "shuffledp[serve]"`` (Starlette, uvicorn,
httpx), imported only when a service command runs. Both write ``DATA/listen.json`` with the
URL once the socket is bound (``--listen 127.0.0.1:0`` picks a free port). The HTTP
resources, durability and refusals: :mod:`shuffledp.serve.shuffler_service` and
:mod:`shuffledp.serve.secagg_service`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from shuffledp.cli.common import COUNT, POSITIVE, Command, Group

_EXTRA = 'the services need the optional extra: pip install "shuffledp[serve]"'


def _need_extra() -> None:
    try:
        import httpx  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise click.ClickException(f"{_EXTRA} ({e.name} is missing)") from None


def _token(data: Path, token_path: str | None) -> str:
    """The operator's bearer token: --token-file, else DATA/token (created 0600 once)."""
    from shuffledp.safe_io import create_private, read_regular

    path = Path(token_path) if token_path else data / "token"
    if not path.exists():
        if token_path:
            raise click.BadParameter(f"{token_path} does not exist", param_hint="--token-file")
        create_private(path, os.urandom(24).hex().encode())
    tok = read_regular(path, 4096, what="--token-file").decode().strip()
    if len(tok) < 16:
        raise click.BadParameter(f"{path}: a token of at least 16 characters",
                                 param_hint="--token-file")
    return tok


@click.group("serve", cls=Group)
def serve() -> None:
    """Network services: the shuffler and the secure-aggregation server (HTTP)."""


_listen = click.option("--listen", default="127.0.0.1:8443", show_default=True,
                       help="HOST:PORT to listen on (PORT 0 = a free port; the URL is written "
                            "to DATA/listen.json).")
_data = click.option("--data", "data_dir", type=click.Path(file_okay=False), required=True,
                     help="Directory for the durable state (created if absent).")


@serve.command("shuffler")
@click.option("--params", "params_path", type=click.Path(exists=True, dir_okay=False),
              required=True, help="params.json written by `shuffledp setup`.")
@click.option("--mac-key", "mac_key_path", type=click.Path(exists=True, dir_okay=False),
              required=True, help="mac.key shared with the analyzer only (the mixed batch's "
                                  "HMAC-SHA256 tag).")
@click.option("--analyzer-pub", type=click.Path(exists=True, dir_okay=False), default=None,
              help="analyzer.pub, published to devices at GET /hpke_config.")
@_listen
@_data
@click.option("--token-file", default=None, type=click.Path(dir_okay=False),
              help="Operator bearer token for close and the mixed batch [default: DATA/token, "
                   "created on first start].")
@click.option("--expected-users", type=COUNT, default=None,
              help="Users admitted; absent ones count as dropped at close.")
@click.option("--memory-limit", type=COUNT, default=256, show_default=True,
              help="Approximate memory for the shuffler's data, in MiB.")
@click.option("--body-timeout", type=POSITIVE, default=30.0, show_default=True,
              help="Seconds a client has to send its whole batch (408 after).")
@click.option("--max-connections", type=COUNT, default=2048, show_default=True,
              help="Concurrent connections before the server answers 503.")
@click.option("--allow-large", is_flag=True, help="Accept absurdly large parameter sets.")
def serve_shuffler(params_path, mac_key_path, analyzer_pub, listen, data_dir, token_file,
                   expected_users, memory_limit, body_timeout, max_connections, allow_large):
    """Run the shuffler as an HTTP service (durable, idempotent uploads; close mixes).

    Devices PUT their encrypted batch to /rounds/ROUND/batches/REPORT_ID; each accepted
    batch is fsynced before the 201 reply; a restart resumes the round from DATA.
    """
    _need_extra()
    from shuffledp.cli.roles import _load_mac_key, _load_params, _load_public_key
    from shuffledp.serve.common import parse_listen
    from shuffledp.serve.common import serve as run
    from shuffledp.serve.shuffler_service import ShufflerState, make_app

    try:
        parse_listen(listen)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--listen") from None
    p = _load_params(params_path, allow_large)
    mac = _load_mac_key(mac_key_path)
    pub = _load_public_key(analyzer_pub) if analyzer_pub else None
    data = Path(data_dir)
    data.mkdir(parents=True, exist_ok=True)
    token = _token(data, token_file)
    try:
        state = ShufflerState(p, data, mac_key=mac, memory_limit=memory_limit << 20,
                              expected_users=expected_users)
    except RuntimeError as e:
        raise click.ClickException(f"--data {data_dir}: {e}") from None
    note = (f"round {state.round}: closed" if state.closed else
            f"round {state.round}: {state.recovered} stored batches recovered")
    click.echo(note, err=True)
    run(make_app(state, token=token, analyzer_pub=pub, body_timeout=body_timeout), listen,
        data, limit_concurrency=max_connections,
        announce=lambda m: click.echo(m, err=True))


@serve.command("secagg")
@click.option("--clients", type=COUNT, required=True, help="Clients expected (ids 0..N-1).")
@click.option("--threshold", type=COUNT, default=None,
              help="Shares needed / fewest clients per round  [default: 2n/3 + 1]")
@click.option("--length", type=COUNT, required=True, help="Vector length L.")
@click.option("--modulus", type=COUNT, required=True, help="Modulus m of the sum (2..2^62).")
@_listen
@_data
@click.option("--round-timeout", type=POSITIVE, default=30.0, show_default=True,
              help="Deadline of each round, from its opening: a client that has neither "
                   "answered nor left by then is a dropout.")
@click.option("--join-timeout", type=POSITIVE, default=None,
              help="Deadline of round 0 (advertising keys), from the service start  "
                   "[default: --round-timeout]")
@click.option("--body-timeout", type=POSITIVE, default=30.0, show_default=True,
              help="Seconds a client has to send one message's body (408 after).")
def serve_secagg(clients, threshold, length, modulus, listen, data_dir, round_timeout,
                 join_timeout, body_timeout):
    """Run one secure aggregation (Bonawitz et al. 2017) over HTTP, then exit.

    Writes DATA/report.json ("released" with DATA/result.npy, or "aborted" with the reason;
    exit 1 then). Clients: `shuffledp secagg client --server URL`.
    """
    _need_extra()
    from shuffledp.cli.secagg import server_threshold
    from shuffledp.serve.common import parse_listen
    from shuffledp.serve.common import serve as run_server
    from shuffledp.serve.secagg_service import SecAggRun, make_app

    try:
        parse_listen(listen)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--listen") from None
    n = clients
    t = server_threshold(n, modulus, threshold)
    run = SecAggRun(n, length, modulus, t, Path(data_dir), round_timeout, join_timeout)
    click.echo(f"session {run.session.hex()}: {n} clients, threshold {t}", err=True)
    run_server(make_app(run, body_timeout=body_timeout), listen, Path(data_dir),
               announce=lambda m: click.echo(m, err=True))
    if run.aborted or not run.done:
        raise click.ClickException(run.aborted or "the service stopped before the run ended")
    click.echo(f"sum of {len(run.server.members[3])} clients (threshold {t}) written to "
               f"{Path(data_dir) / 'result.npy'}")


@serve.command("close")
@click.option("--server", required=True, help="URL of the shuffler service.")
@click.option("--params", "params_path", type=click.Path(exists=True, dir_okay=False),
              required=True, help="params.json of the round.")
@click.option("--token", "token_path", type=click.Path(exists=True, dir_okay=False),
              required=True, help="The service's operator token file (DATA/token).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Download the signed mixed batch here (its report goes to OUT.report.json).")
def serve_close(server, params_path, token_path, out_path):
    """Close the round: the service mixes and keeps the signed mixed batch for the analyzer."""
    _need_extra()
    from shuffledp.cli.roles import _load_params
    from shuffledp.safe_io import read_regular, write_atomic
    from shuffledp.serve.client import Refused, close_round

    p = _load_params(params_path, True)
    token = read_regular(token_path, 4096, what="--token").decode().strip()
    try:
        report = close_round(server, p.round_id.hex(), token, out=out_path)
    except Refused as e:
        raise click.ClickException(f"--server {server}: {e}") from None
    except OSError as e:
        raise click.ClickException(f"--server {server}: {e}") from None
    text = json.dumps(report)
    if out_path:
        write_atomic(f"{out_path}.report.json", (text + "\n").encode())
    click.echo(text)


@click.command("upload", cls=Command)
@click.option("--server", required=True, help="URL of the shuffler service.")
@click.option("--params", "params_path", type=click.Path(exists=True, dir_okay=False),
              required=True, help="params.json of the round (names the round id).")
@click.option("--in", "in_path", type=click.Path(exists=True, dir_okay=False), required=True,
              help="The user's encrypted batch (from `shuffledp encode`).")
@click.option("--report-id", default=None,
              help="Report id to upload under [default: 16 fresh random bytes, hex]; reuse it "
                   "to retry the same batch idempotently.")
@click.option("--timeout", type=POSITIVE, default=30.0, show_default=True)
def upload(server, params_path, in_path, report_id, timeout):
    """Upload one user's batch to the shuffler service; prints the report id."""
    _need_extra()
    import httpx

    from shuffledp.cli.roles import _load_params
    from shuffledp.protocol.crypto import encrypted_record_bytes
    from shuffledp.protocol.wire import HEADER_SIZE
    from shuffledp.safe_io import read_regular
    from shuffledp.serve.client import Refused, upload_batch

    p = _load_params(params_path, True)
    data = read_regular(in_path, HEADER_SIZE + p.messages_per_user * encrypted_record_bytes(p)
                        + 1, what="--in")
    try:
        rid = upload_batch(server, p.round_id.hex(), data, report_id=report_id, timeout=timeout)
    except Refused as e:
        raise click.ClickException(f"--server {server}: {e}") from None
    except httpx.HTTPError as e:
        raise click.ClickException(f"--server {server}: {type(e).__name__}: {e}") from None
    click.echo(rid)


SERVE_COMMANDS = (serve, upload)
