"""HTTPS: the services serve TLS 1.3 only with --tls-cert / --tls-key, and the shuffler's close
and mixed-batch fetch need a client certificate with --client-ca (mutual TLS) on top of the
bearer token; devices need none. Regression: no TLS anywhere (the bearer token and every
upload travelled in clear). Certificates come from a throwaway CA made here."""

from __future__ import annotations

import datetime
import ipaddress
import json
import socket
import ssl

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402
from serve_helpers import (  # noqa: E402
    enrol,
    is_problem,
    make_round,
    params,
    rid,
    run_cli,
    shuffler_args,
    signed_put,
    start_server,
    stop,
)

from shuffledp.serve.transport import client_tls_context  # noqa: E402


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path, key, cert):
    path.with_suffix(".key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def make_ca(folder, cn):
    """A self-signed CA: (key, cert), written to folder/<cn>.pem / .key."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    _write(folder / cn, key, cert)
    return key, cert


def issue(folder, ca, cn, *, server):
    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    b = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_cert.subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=1)))
    if server:
        b = b.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                            critical=False)
    else:
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                            critical=False)
    _write(folder / cn, key, b.sign(ca_key, hashes.SHA256()))


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    f = tmp_path_factory.mktemp("pki")
    server_ca = make_ca(f, "server-ca")
    issue(f, server_ca, "server", server=True)
    op_ca = make_ca(f, "operator-ca")
    issue(f, op_ca, "operator", server=False)
    stranger_ca = make_ca(f, "stranger-ca")
    issue(f, stranger_ca, "stranger", server=False)
    return f


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_round(tmp_path_factory.mktemp("round"))


def test_https_tls13_only_and_mutual_tls_for_the_analyzer(run_dir, pki, tmp_path):
    d, data = run_dir, tmp_path / "svc"
    creds = enrol(data, 3)
    rnd = params(d).round_id
    device_tls = client_tls_context(pki / "server-ca.pem")
    proc, url = start_server(data, *shuffler_args(
        d, "--tls-cert", pki / "server.pem", "--tls-key", pki / "server.key",
        "--client-ca", pki / "operator-ca.pem"), verify=device_tls)
    try:
        assert url.startswith("https://127.0.0.1:")
        assert json.loads((data / "listen.json").read_text())["url"] == url
        port = int(url.rsplit(":", 1)[1])
        # TLS 1.2 is refused
        old = ssl.create_default_context(cafile=str(pki / "server-ca.pem"))
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises(ssl.SSLError), socket.create_connection(("127.0.0.1", port)) as s:
            old.wrap_socket(s, server_hostname="127.0.0.1")
        # plaintext HTTP gets nothing but a closed connection
        with pytest.raises(httpx.TransportError):
            httpx.get(url.replace("https://", "http://") + "/hpke_config", timeout=5)
        # a client certificate from another CA fails the handshake
        stranger = client_tls_context(pki / "server-ca.pem", pki / "stranger.pem",
                                      pki / "stranger.key")
        with pytest.raises(httpx.TransportError):
            httpx.get(url + "/hpke_config", verify=stranger, timeout=5).raise_for_status()
        # devices upload over TLS 1.3 without a client certificate
        with httpx.Client(verify=device_tls) as c:
            for j in range(3):
                r = signed_put(url, rnd, rid(), (d / f"u{j}.bin").read_bytes(), creds[j],
                               client=c)
                assert r.status_code == 201, r.text
            token = (data / "token").read_text().strip()
            # the token alone is not enough: the analyzer's fetch needs its certificate
            is_problem(c.post(f"{url}/rounds/{rnd.hex()}/close",
                              headers={"authorization": f"Bearer {token}"}), 403, "forbidden")
        res = run_cli("serve", "close", "--server", url, "--params", d / "params.json",
                      "--token-file", data / "token", "--ca-cert", pki / "server-ca.pem",
                      "--client-cert", pki / "operator.pem", "--client-key",
                      pki / "operator.key", "--out", tmp_path / "mixed.bin")
        assert json.loads(res.output)["n_forwarded"] == 3
        assert (tmp_path / "mixed.bin").stat().st_size > 0
    finally:
        stop(proc)


def test_the_device_command_over_https(run_dir, pki, tmp_path):
    d, data = run_dir, tmp_path / "svc"
    enrol(data, 1, out=tmp_path / "creds")
    cred_file = next((tmp_path / "creds").glob("*.credential"))
    proc, url = start_server(data, *shuffler_args(
        d, "--tls-cert", pki / "server.pem", "--tls-key", pki / "server.key"),
        verify=client_tls_context(pki / "server-ca.pem"))
    try:
        from click.testing import CliRunner

        from shuffledp.cli import main

        args = ["upload", "--server", url, "--params", str(d / "params.json"), "--input",
                str(d / "u0.bin"), "--credential", str(cred_file), "--retry-for", "1"]
        # without the CA the server's certificate is not trusted: a clear one-line error
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1 and "--server" in res.output and "Traceback" not in res.output
        res = CliRunner().invoke(main, [*args, "--ca-cert", str(pki / "server-ca.pem")])
        assert res.exit_code == 0, res.output
    finally:
        stop(proc)


def test_tls_options_are_checked(run_dir, pki, tmp_path):
    from click.testing import CliRunner

    from shuffledp.cli import main

    base = ["serve", *map(str, shuffler_args(run_dir)), "--data", str(tmp_path / "svc")]
    res = CliRunner().invoke(main, [*base, "--tls-cert", str(pki / "server.pem")])
    assert res.exit_code == 2 and "--tls-key" in res.output
    res = CliRunner().invoke(main, [*base, "--tls-cert", str(pki / "server.pem"), "--tls-key",
                                    str(pki / "operator.key")])  # key of another certificate
    assert res.exit_code == 2 and "--tls-cert" in res.output
    res = CliRunner().invoke(main, [*base, "--client-ca", str(pki / "operator-ca.pem")])
    assert res.exit_code == 2 and "--client-ca" in res.output


def test_the_secagg_client_over_https_with_ca_cert(pki, tmp_path):
    """`shuffledp secagg client --server https://... --ca-cert CA`: the sum is released over
    TLS. Without the CA the client fails at once (a certificate that does not verify is not
    retried until --timeout) with one line naming --ca-cert; --ca-cert with --dir is refused."""
    import subprocess
    import sys
    import time

    import numpy as np

    m, n, length = 1 << 32, 2, 5
    rng = np.random.default_rng(4)
    xs = [rng.integers(0, m, length, dtype=np.int64) for _ in range(n)]
    for i, x in enumerate(xs):
        np.save(tmp_path / f"x{i}.npy", x)
    data = tmp_path / "svc"
    proc, url = start_server(
        data, "secagg", "--clients", n, "--threshold", n, "--length", length, "--modulus", m,
        "--join-timeout", 60, "--round-timeout", 30, "--tls-cert", pki / "server.pem",
        "--tls-key", pki / "server.key", verify=client_tls_context(pki / "server-ca.pem"))
    assert url.startswith("https://")

    def client(i, *extra):
        return [sys.executable, "-m", "shuffledp.cli", "secagg", "client", "--server", url,
                "--id", str(i), "--input", str(tmp_path / f"x{i}.npy"), "--modulus", str(m),
                "--threshold", str(n), "--timeout", "60", *map(str, extra)]

    try:
        t0 = time.monotonic()
        res = subprocess.run(client(0), capture_output=True, text=True, timeout=120)
        assert res.returncode == 1 and "--ca-cert" in res.stderr, res.stderr
        assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
        assert time.monotonic() - t0 < 45  # refused at once, not after --timeout 60
        procs = [subprocess.Popen(client(i, "--ca-cert", pki / "server-ca.pem"),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(n)]
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            assert out.strip().endswith("done")
        proc.wait(timeout=120)
    finally:
        stop(proc)
    report = json.loads((data / "report.json").read_text())
    assert report["status"] == "released"
    want = np.sum([x.astype(object) for x in xs], axis=0) % m
    np.testing.assert_array_equal(np.load(data / "result.npy").astype(object), want)

    from click.testing import CliRunner

    from shuffledp.cli import main

    res = CliRunner().invoke(main, ["secagg", "client", "--dir", str(tmp_path / "box"), "--id",
                                    "0", "--input", str(tmp_path / "x0.npy"), "--modulus",
                                    str(m), "--threshold", "2", "--ca-cert",
                                    str(pki / "server-ca.pem")])
    assert res.exit_code == 2 and "--ca-cert" in res.output
