"""``shuffledp serve``: the shuffler and the secure-aggregation server as network services.

::

    shuffledp serve shuffler --params run/params.json --mac-key run/mac.key \\
        --analyzer-pub run/analyzer.pub --listen 0.0.0.0:8443 --data /var/lib/shuffler \\
        --tls-cert server.pem --tls-key server.key --client-ca operators-ca.pem
    shuffledp serve enrol --data /var/lib/shuffler --count 1000 --out creds/
    shuffledp upload --server https://shuffler.example:8443 --params run/params.json \\
        --credential creds/d-1f2e....credential --input u7.bin
    shuffledp serve close --server https://shuffler.example:8443 --params run/params.json \\
        --token-file /var/lib/shuffler/token --client-cert op.pem --client-key op.key \\
        --out run/mixed.bin
    shuffledp serve secagg --clients 100 --threshold 67 --length 1000 \\
        --modulus 4294967296 --listen 127.0.0.1:8444 --data /var/lib/secagg
    shuffledp secagg client --server http://127.0.0.1:8444 --id 0 --input x0.npy ...

The services need the optional extra ``pip install "shuffledp[serve]"`` (Starlette, uvicorn,
httpx), imported only when a service command runs. Both write ``DATA/listen.json`` with the
URL once the socket is bound (``--listen 127.0.0.1:0`` picks a free port). The HTTP
resources, admission, durability and refusals: :mod:`shuffledp.serve.shuffler_service`,
:mod:`shuffledp.serve.admission` and :mod:`shuffledp.serve.secagg_service`; connections,
deadlines and TLS: :mod:`shuffledp.serve.transport`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections import Counter
from pathlib import Path

import click

from shuffledp.cli.common import (
    COUNT,
    POSITIVE,
    AliasedOption,
    Command,
    Group,
    force_option,
    input_option,
    out_dir_option,
    out_file_option,
)

_EXTRA = 'the services need the optional extra: pip install "shuffledp[serve]"'


def _need_extra() -> None:
    try:
        import httpx  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise click.ClickException(f"{_EXTRA} ({e.name} is missing)") from None


def _token(data: Path, token_path: str | None) -> str:
    """The operator's bearer token: --token-file, else DATA/token (created 0600 once, durably)."""
    from shuffledp.safe_io import read_regular
    from shuffledp.serve.common import create_durable

    path = Path(token_path) if token_path else data / "token"
    if not path.exists():
        if token_path:
            raise click.BadParameter(f"{token_path} does not exist", param_hint="--token-file")
        try:
            create_durable(path, os.urandom(24).hex().encode())
        except FileExistsError:  # created meanwhile by another start
            pass
    tok = read_regular(path, 4096, what="--token-file").decode().strip()
    if len(tok) < 16:
        raise click.BadParameter(f"{path}: a token of at least 16 characters",
                                 param_hint="--token-file")
    return tok


def _listen_address(listen: str) -> tuple[str, int]:
    from shuffledp.serve.common import parse_listen
    from shuffledp.serve.transport import bind

    try:
        host, port = parse_listen(listen)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--listen") from None
    try:  # the service binds it again once everything else is checked
        bind(host, port).close()
    except OSError as e:
        raise click.BadParameter(f"cannot listen on {listen}: {e.strerror or e}",
                                 param_hint="--listen") from None
    return host, port


def _server_tls(tls_cert, tls_key, client_ca=None):
    """The TLS 1.3 server context of --tls-cert / --tls-key (/ --client-ca), or None."""
    import ssl

    from shuffledp.serve.transport import server_tls_context

    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together")
    if tls_cert is None:
        if client_ca is not None:
            raise click.UsageError("--client-ca needs --tls-cert and --tls-key (mutual TLS)")
        return None
    try:
        return server_tls_context(tls_cert, tls_key, client_ca)
    except (ssl.SSLError, OSError, ValueError) as e:
        hint = "--client-ca" if client_ca and "verify" in str(e).lower() else "--tls-cert"
        raise click.BadParameter(f"--tls-cert {tls_cert} / --tls-key {tls_key}"
                                 f"{f' / --client-ca {client_ca}' if client_ca else ''}: "
                                 f"{getattr(e, 'reason', None) or e}", param_hint=hint) from None


def _client_tls(ca_cert=None, client_cert=None, client_key=None):
    """True (the system's CAs) or a TLS 1.3 client context."""
    import ssl

    from shuffledp.serve.transport import client_tls_context

    if client_key is not None and client_cert is None:
        raise click.UsageError("--client-key needs --client-cert")
    if ca_cert is None and client_cert is None:
        return True
    try:
        return client_tls_context(ca_cert, client_cert, client_key)
    except (ssl.SSLError, OSError, ValueError) as e:
        raise click.BadParameter(f"{e}", param_hint="--ca-cert / --client-cert") from None


def _setup_logs(access_log: str | None) -> None:
    """The service's warnings to stderr; with --access-log, one JSON line per request (to the
    file, or to stderr for '-')."""
    warn = logging.getLogger("shuffledp.serve")
    if not warn.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        warn.addHandler(h)
        warn.setLevel(logging.WARNING)
        warn.propagate = False
    acc = logging.getLogger("shuffledp.access")
    acc.propagate = False
    if access_log is None:
        acc.setLevel(logging.WARNING)
        return
    handler = (logging.StreamHandler(sys.stderr) if access_log == "-"
               else logging.FileHandler(access_log, encoding="utf-8"))
    handler.setFormatter(logging.Formatter("%(message)s"))
    acc.addHandler(handler)
    acc.setLevel(logging.INFO)


def _policy(max_connections, max_connections_per_client, header_timeout, idle_timeout,
            body_timeout):
    from shuffledp.serve.transport import ConnectionPolicy

    try:
        return ConnectionPolicy(max_connections=max_connections,
                                max_per_client=min(max_connections_per_client, max_connections),
                                header_timeout=header_timeout, body_timeout=body_timeout,
                                idle_timeout=idle_timeout)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--max-connections") from None


def _network_options(fn):
    """Options every service shares: TLS, connection limits and deadlines, rate limit, logs."""
    opts = [
        click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="Serve HTTPS (TLS 1.3 only) with this PEM certificate chain."),
        click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="The PEM private key of --tls-cert."),
        click.option("--max-connections", type=COUNT, default=1024, show_default=True,
                     help="Open connections in total; beyond, the oldest idle one is closed "
                          "(503 only when none is idle)."),
        click.option("--max-connections-per-client", type=COUNT, default=32,
                     show_default=True,
                     help="Open connections per client address (same rule). Behind a "
                          "reverse proxy every client has the proxy's address: raise it."),
        click.option("--header-timeout", type=POSITIVE, default=10.0, show_default=True,
                     help="Seconds for the TLS handshake and for each request head (408)."),
        click.option("--idle-timeout", type=POSITIVE, default=5.0, show_default=True,
                     help="Seconds an idle keep-alive connection is kept."),
        click.option("--rate-limit", type=POSITIVE, default=50.0, show_default=True,
                     help="Requests per second per client address (429 beyond the burst)."),
        click.option("--rate-burst", type=COUNT, default=200, show_default=True,
                     help="Requests a client address may send at once."),
        click.option("--access-log", default=None,
                     help="Append one JSON line per request to this file ('-': stderr); "
                          "never a header value, token, credential or body."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


@click.group("serve", cls=Group)
def serve() -> None:
    """Network services: the shuffler and the secure-aggregation server (HTTP/HTTPS)."""


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
              help="analyzer.pub, published to devices at GET /hpke_config (uploads naming "
                   "another HPKE config id are refused).")
@_listen
@_data
@click.option("--token-file", default=None, type=click.Path(dir_okay=False),
              help="Operator bearer token for close and the mixed batch [default: DATA/token, "
                   "created on first start].")
@click.option("--client-ca", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Mutual TLS: close and the mixed batch also need a client certificate "
                   "issued by this CA (devices need none).")
@click.option("--expected-users", type=COUNT, default=None,
              help="Users admitted; absent ones count as dropped at close.")
@click.option("--min-batches", type=COUNT, default=None,
              help="Fewest accepted batches close accepts  [default: n_min; add the number "
                   "of enrolled devices you do not trust]")
@click.option("--memory-limit", type=COUNT, default=256, show_default=True,
              help="Approximate memory for mixing at close, in MiB.")
@click.option("--body-timeout", type=POSITIVE, default=30.0, show_default=True,
              help="Seconds a client has to send its whole batch (408 after).")
@click.option("--replay-window", type=POSITIVE, default=600.0, show_default=True,
              help="Seconds a signed upload's timestamp may differ from the server's clock.")
@_network_options
@click.option("--allow-large", is_flag=True, help="Accept absurdly large parameter sets.")
def serve_shuffler(params_path, mac_key_path, analyzer_pub, listen, data_dir, token_file,
                   client_ca, expected_users, min_batches, memory_limit, body_timeout,
                   replay_window, tls_cert, tls_key, max_connections,
                   max_connections_per_client, header_timeout, idle_timeout, rate_limit,
                   rate_burst, access_log, allow_large):
    """Run the shuffler as an HTTP(S) service (admitted devices, durable idempotent uploads;
    close mixes).

    Enrolled devices (`shuffledp serve enrol`) PUT their signed, encrypted batch to
    /rounds/ROUND/batches/REPORT_ID; each accepted batch is fsynced before the 201 reply; a
    restart resumes the round from DATA.
    """
    _need_extra()
    from shuffledp.cli.roles import _load_mac_key, _load_params, _load_public_key
    from shuffledp.serve.admission import DeviceRegistry
    from shuffledp.serve.shuffler_service import ShufflerState, make_app
    from shuffledp.serve.transport import serve as run

    host, port = _listen_address(listen)
    tls = _server_tls(tls_cert, tls_key, client_ca)
    policy = _policy(max_connections, max_connections_per_client, header_timeout,
                     idle_timeout, body_timeout)
    p = _load_params(params_path, allow_large)
    if min_batches is not None and min_batches > p.n:
        raise click.BadParameter(f"--min-batches {min_batches} exceeds n={p.n} of --params",
                                 param_hint="--min-batches")
    mac = _load_mac_key(mac_key_path)
    pub = _load_public_key(analyzer_pub) if analyzer_pub else None
    data = Path(data_dir)
    data.mkdir(parents=True, exist_ok=True)
    token = _token(data, token_file)
    _setup_logs(access_log)
    try:
        registry = DeviceRegistry(data)
        state = ShufflerState(p, data, mac_key=mac, memory_limit=memory_limit << 20,
                              expected_users=expected_users, min_batches=min_batches,
                              analyzer_pub=pub)
    except (RuntimeError, ValueError) as e:
        raise click.ClickException(f"--data {data_dir}: {e}") from None
    note = (f"round {state.round}: closed" if state.closed else
            f"round {state.round}: {state.recovered} stored batches recovered, "
            f"{len(registry.enrolled())} devices enrolled")
    click.echo(note, err=True)
    counters: Counter = Counter()
    connections: Counter = Counter()
    app = make_app(state, token=token, registry=registry,
                   body_timeout=body_timeout, replay_window=replay_window,
                   require_client_cert=client_ca is not None, counters=counters,
                   connections=connections)
    run(app, host, port, data, policy=policy, tls=tls, rate=rate_limit, burst=rate_burst,
        counters=counters, connections=connections,
        announce=lambda m: click.echo(m, err=True))


@serve.command("enrol")
@_data
@click.option("--device", "device_ids", multiple=True,
              help="Enrol this device id (1 to 64 characters of A-Z a-z 0-9 _ -); repeat "
                   "for several.")
@click.option("--count", "n_devices", type=COUNT, default=None,
              help="Enrol this many devices with fresh random ids.")
@out_dir_option(required=True,
                help="Directory for the credential files (ID.credential, mode 0600), one per "
                     "device, to hand to each device.")
def serve_enrol(data_dir, device_ids, n_devices, out_dir):
    """Enrol devices with the shuffler service of DATA: write one credential per device.

    Works while the service runs (it rereads its registry). Each credential holds the
    device id and its key; the service keeps only the ids and its enrolment key.
    """
    _need_extra()
    from shuffledp.serve.admission import DEVICE_ID, DeviceRegistry
    from shuffledp.serve.common import create_durable

    ids = list(device_ids)
    for d in ids:
        if not DEVICE_ID.fullmatch(d):
            raise click.BadParameter(f"{d[:80]!r}: 1 to 64 characters of A-Z a-z 0-9 _ -",
                                     param_hint="--device")
    if n_devices:
        ids += [f"d-{os.urandom(8).hex()}" for _ in range(n_devices)]
    if not ids:
        raise click.UsageError("give --device ID (repeatable) or --count N")
    if len(set(ids)) != len(ids):
        raise click.BadParameter("a device id is given twice", param_hint="--device")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for d in ids:
        if (out / f"{d}.credential").exists():
            raise click.BadParameter(f"{out / f'{d}.credential'} exists (a credential is never "
                                     "overwritten)", param_hint="--out")
    data = Path(data_dir)
    data.mkdir(parents=True, exist_ok=True)
    registry = DeviceRegistry(data)
    for cred in registry.enrol(ids):
        path = out / f"{cred.device_id}.credential"
        create_durable(path, cred.to_json().encode())
        click.echo(f"{cred.device_id}\t{path}")


@serve.command("revoke")
@_data
@click.option("--device", "device_ids", multiple=True, required=True,
              help="Revoke this device id; repeat for several.")
def serve_revoke(data_dir, device_ids):
    """Revoke devices of the shuffler service of DATA: their uploads are refused from now on."""
    _need_extra()
    from shuffledp.serve.admission import DeviceRegistry

    registry = DeviceRegistry(Path(data_dir))
    unknown = sorted(set(device_ids) - registry.enrolled())
    try:
        registry.revoke(list(device_ids))
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--device") from None
    if unknown:
        click.echo(f"not enrolled (revoked anyway): {', '.join(unknown)}", err=True)
    click.echo(f"revoked {len(device_ids)} device(s)")


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
@_network_options
def serve_secagg(clients, threshold, length, modulus, listen, data_dir, round_timeout,
                 join_timeout, body_timeout, tls_cert, tls_key, max_connections,
                 max_connections_per_client, header_timeout, idle_timeout, rate_limit,
                 rate_burst, access_log):
    """Run one secure aggregation (Bonawitz et al. 2017) over HTTP(S), then exit.

    Writes DATA/report.json ("released" with DATA/result.npy, or "aborted" with the reason;
    exit 1 then). Clients: `shuffledp secagg client --server URL`.
    """
    _need_extra()
    from shuffledp.cli.secagg import server_threshold
    from shuffledp.serve.secagg_service import SecAggRun, make_app
    from shuffledp.serve.transport import serve as run_server

    host, port = _listen_address(listen)
    tls = _server_tls(tls_cert, tls_key)
    policy = _policy(max_connections, max_connections_per_client, header_timeout,
                     idle_timeout, body_timeout)
    _setup_logs(access_log)
    n = clients
    t = server_threshold(n, modulus, threshold)
    run = SecAggRun(n, length, modulus, t, Path(data_dir), round_timeout, join_timeout)
    click.echo(f"session {run.session.hex()}: {n} clients, threshold {t}", err=True)
    run_server(make_app(run, body_timeout=body_timeout), host, port, Path(data_dir),
               policy=policy, tls=tls, rate=rate_limit, burst=rate_burst,
               announce=lambda m: click.echo(m, err=True))
    if run.aborted or not run.done:
        raise click.ClickException(run.aborted or "the service stopped before the run ended")
    click.echo(f"sum of {len(run.server.members[3])} clients (threshold {t}) written to "
               f"{Path(data_dir) / 'result.npy'}")


def _client_tls_options(fn):
    opts = [
        click.option("--ca-cert", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="Verify the server's certificate against this PEM CA [default: the "
                          "system's CAs]."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


@serve.command("close")
@click.option("--server", required=True, help="URL of the shuffler service.")
@click.option("--params", "params_path", type=click.Path(exists=True, dir_okay=False),
              required=True, help="params.json of the round.")
@click.option("--token-file", "token_file", cls=AliasedOption, aliases=("--token",),
              type=click.Path(exists=True, dir_okay=False), required=True,
              help="The service's operator token file (DATA/token, or the service's "
                   "--token-file).")
@out_file_option(default=None,
                 help="Download the signed mixed batch here (its report goes to "
                      "OUT.report.json).")
@force_option(help="Replace an existing --out file.")
@_client_tls_options
@click.option("--client-cert", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Mutual TLS: the operator's PEM certificate (the service's --client-ca).")
@click.option("--client-key", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The PEM private key of --client-cert (if not in the same file).")
def serve_close(server, params_path, token_file, out_path, force, ca_cert, client_cert,
                client_key):
    """Close the round: the service mixes and keeps the signed mixed batch for the analyzer.

    Retry it after a refusal (a full disk: 507; too few batches: 409): the round stays open
    with every batch in place, and closing a closed round returns the same report.
    """
    _need_extra()
    import httpx

    from shuffledp.cli.roles import _load_params
    from shuffledp.safe_io import (
        SHUFFLER_REPORT_SCHEMA,
        read_regular,
        with_schema,
        write_atomic,
    )
    from shuffledp.serve.client import Refused, close_round

    verify = _client_tls(ca_cert, client_cert, client_key)
    p = _load_params(params_path, True)
    token = read_regular(token_file, 4096, what="--token-file").decode().strip()
    try:
        report = close_round(server, p.round_id.hex(), token, out=out_path, verify=verify)
    except Refused as e:
        raise click.ClickException(f"--server {server}: {e}") from None
    except (httpx.HTTPError, OSError) as e:
        raise click.ClickException(f"--server {server}: {type(e).__name__}: {e}") from None
    text = json.dumps(with_schema(report, SHUFFLER_REPORT_SCHEMA))
    if out_path:
        write_atomic(f"{out_path}.report.json", (text + "\n").encode())
    click.echo(text)


@click.command("upload", cls=Command)
@click.option("--server", required=True, help="URL of the shuffler service.")
@click.option("--params", "params_path", type=click.Path(exists=True, dir_okay=False),
              required=True, help="params.json of the round (names the round id).")
@input_option(aliases=("--in",), type=click.Path(exists=True, dir_okay=False), required=True,
              help="The user's encrypted batch (from `shuffledp encode`).")
@click.option("--credential", "credential_path", type=click.Path(exists=True, dir_okay=False),
              required=True, help="This device's credential (from `shuffledp serve enrol`).")
@click.option("--analyzer-pub", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The analyzer.pub the batch was encrypted to: its HPKE config id is sent "
                   "and the service refuses a batch for another key.")
@click.option("--report-id", default=None,
              help="Report id to upload under [default: 16 fresh random bytes, hex]; reuse it "
                   "to retry the same batch idempotently.")
@click.option("--timeout", type=POSITIVE, default=30.0, show_default=True,
              help="Seconds of one attempt.")
@click.option("--retry-for", type=POSITIVE, default=300.0, show_default=True,
              help="Seconds to keep retrying a failed attempt (no answer, 5xx, 507, 429) "
                   "with the same report id; longer than a service restart.")
@_client_tls_options
def upload(server, params_path, input_path, credential_path, analyzer_pub, report_id, timeout,
           retry_for, ca_cert):
    """Upload one user's batch to the shuffler service; prints the report id."""
    _need_extra()
    import httpx

    from shuffledp.cli.roles import _load_params, _load_public_key
    from shuffledp.protocol.crypto import encrypted_record_bytes
    from shuffledp.protocol.wire import HEADER_SIZE
    from shuffledp.safe_io import read_regular
    from shuffledp.serve.admission import Credential
    from shuffledp.serve.client import Refused, upload_batch
    from shuffledp.serve.shuffler_service import REPORT_ID, hpke_config_id

    if report_id is not None and not REPORT_ID.fullmatch(report_id):
        raise click.BadParameter(f"{report_id[:80]!r}: 16 to 64 characters of A-Z a-z 0-9 _ -",
                                 param_hint="--report-id")
    verify = _client_tls(ca_cert)
    p = _load_params(params_path, True)
    try:
        cred = Credential.load(credential_path)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--credential") from None
    config_id = hpke_config_id(_load_public_key(analyzer_pub)) if analyzer_pub else ""
    data = read_regular(input_path, HEADER_SIZE + p.messages_per_user
                        * encrypted_record_bytes(p) + 1, what="--input")
    try:
        rid = upload_batch(server, p.round_id, data, credential=cred, report_id=report_id,
                           config_id=config_id, timeout=timeout, retry_for=retry_for,
                           verify=verify)
    except Refused as e:
        raise click.ClickException(f"--server {server}: {e}") from None
    except httpx.HTTPError as e:
        raise click.ClickException(f"--server {server}: {type(e).__name__}: {e}") from None
    click.echo(rid)


SERVE_COMMANDS = (serve, upload)

__all__ = ["SERVE_COMMANDS", "serve", "upload"]
