"""HTTPS for devices, through `ledger serve --tls-cert --tls-key` with a test CA: HTTP/2 by ALPN beside
HTTP/1.1, `Strict-Transport-Security` on every answer, a `Secure` console cookie, the certificate read again on
SIGHUP without dropping an open connection, bad TLS files refused at start, and `ledger-device` (the app
library's command-line device) registering, subscribing and receiving over HTTPS. The SDK and delivery suites
run over HTTPS too: run.sh's second pass (LEDGER_TLS=1)."""

import hashlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest
import requests

from conftest import PROJECT, make_certificates, start_server, stop_and_verify

ADMIN = {"Authorization": "Bearer owner"}


@pytest.fixture(scope="module")
def https(contract):
    directory = tempfile.mkdtemp(prefix="ledger-tls-")
    tls = make_certificates(directory)
    process, base, data, binary = start_server(tls=tls)
    yield {"base": base, "data": data, "binary": binary, "tls": tls, "process": process, "directory": directory}
    stop_and_verify(process, data, binary)
    shutil.rmtree(directory, ignore_errors=True)


def _host_port(base):
    host, port = base.split("://", 1)[1].split(":")
    return host, int(port)


def _tls_socket(https, protocols):
    context = ssl.create_default_context(cafile=https["tls"]["ca"])
    context.set_alpn_protocols(protocols)
    host, port = _host_port(https["base"])
    return context.wrap_socket(socket.create_connection((host, port), timeout=10), server_hostname="localhost")


def _fingerprint(sock):
    return hashlib.sha256(sock.getpeercert(binary_form=True)).hexdigest()


def _get(sock, path="/healthz"):
    """One HTTP/1.1 request on an open TLS socket; returns the status line."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(4096)
        assert chunk, "the server closed the connection"
        answer += chunk
    head, _, rest = answer.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(rest) < length:
        rest += sock.recv(4096)
    return head.split(b"\r\n")[0].decode()


def _wait_for_output(process, text, seconds=10):
    """Reads the server's output (standard output and error, piped) until `text` appears."""
    os.set_blocking(process.stdout.fileno(), False)
    seen = b""
    deadline = time.time() + seconds
    while text not in seen:
        assert time.time() < deadline, f"the server did not print {text!r}: {seen[-500:]!r}"
        chunk = process.stdout.read()
        if chunk:
            seen += chunk
        else:
            time.sleep(0.05)


def test_alpn_offers_http2_beside_http1(https):
    with _tls_socket(https, ["h2", "http/1.1"]) as sock:
        assert sock.selected_alpn_protocol() == "h2"
        assert sock.version() in ("TLSv1.2", "TLSv1.3")
    with _tls_socket(https, ["http/1.1"]) as sock:
        assert sock.selected_alpn_protocol() == "http/1.1"
        assert _get(sock) == "HTTP/1.1 200 OK"
    with httpx.Client(http2=True, verify=https["tls"]["ca"]) as client:
        for path, status in (("/healthz", 200), ("/no/such/route", 404)):
            reply = client.get(https["base"] + path)
            assert reply.http_version == "HTTP/2" and reply.status_code == status
            assert reply.headers["strict-transport-security"] == "max-age=31536000"
        # A send and a topic listing over HTTP/2, with the admin key.
        sent = client.post(f"{https['base']}/v1/projects/{PROJECT}/messages:send", headers=ADMIN,
                           json={"message": {"topic": "h2-news", "data": {"k": "v"}}})
        assert sent.status_code == 200 and sent.json()["name"].startswith(f"projects/{PROJECT}/messages/")


def test_plain_http_is_not_spoken_on_the_https_port(https):
    host, port = _host_port(https["base"])
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(10)
        try:
            answer = sock.recv(100)
        except ConnectionResetError:
            answer = b""
        assert not answer.startswith(b"HTTP/1.1 200")


def test_the_console_cookie_is_secure_and_every_answer_has_hsts(https):
    # httpx: the console is HTML, outside the JSON contract that `requests` is held to here.
    with httpx.Client(verify=https["tls"]["ca"]) as client:
        reply = client.post(https["base"] + "/console/sign-in", data={"key": "auditor"})
    assert reply.status_code == 303
    cookie = reply.headers["Set-Cookie"]
    assert cookie.endswith("; Secure") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert reply.headers["Strict-Transport-Security"] == "max-age=31536000"
    refused = requests.get(f"{https['base']}/v1/projects/{PROJECT}/topics", verify=https["tls"]["ca"], timeout=10)
    assert refused.status_code == 401 and refused.headers["Strict-Transport-Security"] == "max-age=31536000"


def test_sighup_reloads_the_certificate_and_keeps_open_connections(https):
    old = _tls_socket(https, ["http/1.1"])
    before = _fingerprint(old)
    assert _get(old) == "HTTP/1.1 200 OK"
    # A renewal: a new pair from the same CA, written over the files the server was started with.
    renewed = make_certificates(https["directory"], name="renewed")
    shutil.copy(renewed["cert"], https["tls"]["cert"])
    shutil.copy(renewed["key"], https["tls"]["key"])
    https["process"].send_signal(signal.SIGHUP)
    deadline = time.time() + 10
    while True:
        with _tls_socket(https, ["http/1.1"]) as fresh:
            after = _fingerprint(fresh)
            if after != before:
                assert _get(fresh) == "HTTP/1.1 200 OK"
                break
        assert time.time() < deadline, "new connections still get the old certificate"
        time.sleep(0.2)
    assert after == hashlib.sha256(ssl.PEM_cert_to_DER_cert(Path(renewed["cert"]).read_text())).hexdigest()
    # The connection opened before the reload still answers, with the certificate it was opened with.
    assert _get(old) == "HTTP/1.1 200 OK" and _fingerprint(old) == before
    old.close()
    # A reload of files that do not fit together keeps the pair in force (checked once the server has said it
    # tried the reload and kept the old pair).
    other = make_certificates(https["directory"], name="mismatched")
    shutil.copy(other["key"], https["tls"]["key"])
    https["process"].send_signal(signal.SIGHUP)
    _wait_for_output(https["process"], b"TLS certificate not reloaded")
    with _tls_socket(https, ["http/1.1"]) as fresh:
        assert _fingerprint(fresh) == after and _get(fresh) == "HTTP/1.1 200 OK"
    shutil.copy(renewed["key"], https["tls"]["key"])


def test_a_tls_handshake_that_never_finishes_is_closed():
    """A connection that sends nothing, or half a ClientHello, is closed after the idle timeout (3 s here), as a
    half-sent HTTP request head is; one whose handshake finished is kept past that moment while it is used."""
    directory = Path(tempfile.mkdtemp(prefix="ledger-tls-"))
    tls = make_certificates(directory)
    config = directory / "config.json"
    config.write_text(json.dumps({
        "limits": {"idleTimeoutSeconds": 3},
        "projects": {PROJECT: {"adminKeys": ["sha256:" + hashlib.sha256(b"owner").hexdigest()]}}}))
    process, base, data, binary = start_server(["--config", str(config)], tls=tls)
    host, port = _host_port(base)
    stalled = []
    started = time.time()
    for payload in (b"", b"\x16\x03\x01\x00\xa0\x01"):  # nothing; the first bytes of a ClientHello
        sock = socket.create_connection((host, port), timeout=10)
        sock.sendall(payload)
        stalled.append(sock)
    context = ssl.create_default_context(cafile=tls["ca"])
    finished = context.wrap_socket(socket.create_connection((host, port), timeout=10), server_hostname="localhost")
    time.sleep(1.5)
    assert _get(finished) == "HTTP/1.1 200 OK"  # a request restarts its idle time
    for sock in stalled:
        try:
            assert sock.recv(1) == b"", "a stalled handshake got an answer"
        except ConnectionResetError:
            pass
        sock.close()
    closed_after = time.time() - started
    assert 2.5 < closed_after < 8, f"stalled handshakes closed after {closed_after:.1f} s, not the idle timeout's 3 s"
    # Past the moment the stalled ones were closed, the connection whose handshake finished still answers.
    assert _get(finished) == "HTTP/1.1 200 OK"
    finished.close()
    stop_and_verify(process, data, binary, projects=())
    shutil.rmtree(directory, ignore_errors=True)


def _refused(args, expected):
    binary = os.environ["LEDGER_BIN"]
    data = tempfile.mkdtemp(prefix="ledger-refused-")
    result = subprocess.run([binary, "serve", "--data", data, "--port", "0", *args], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode != 0, result.stdout
    assert expected in result.stdout + result.stderr, result.stdout + result.stderr
    shutil.rmtree(data, ignore_errors=True)


def test_bad_tls_files_are_refused_at_start():
    directory = Path(tempfile.mkdtemp(prefix="ledger-tls-"))
    tls = make_certificates(directory)
    other = make_certificates(directory, name="other")
    _refused(["--tls-cert", tls["cert"]], "--tls-cert and --tls-key go together")
    _refused(["--tls-cert", str(directory / "missing.pem"), "--tls-key", tls["key"]], "missing.pem")
    _refused(["--tls-cert", tls["cert"], "--tls-key", other["key"]], "is not the key of the certificate")
    _refused(["--tls-cert", tls["key"], "--tls-key", tls["key"]], "not a PEM certificate chain")
    Path(tls["key"]).chmod(0o644)
    _refused(["--tls-cert", tls["cert"], "--tls-key", tls["key"]], "can be read by others")
    Path(tls["key"]).chmod(0o600)
    # The config file's `tls` is read the same way; an unknown key in it is refused.
    config = directory / "config.json"
    keys = {"adminKeys": ["sha256:" + hashlib.sha256(b"owner").hexdigest()]}
    config.write_text(json.dumps({"projects": {PROJECT: keys}, "tls": {"certificateFile": tls["cert"], "keyFile": other["key"]}}))
    _refused(["--config", str(config)], "is not the key of the certificate")
    config.write_text(json.dumps({"projects": {PROJECT: keys}, "tls": {"certificate": tls["cert"]}}))
    _refused(["--config", str(config)], "tls.certificate")
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def trusted_ca(https):
    """The test CA in the system's trust store for as long as the test runs: FoundationNetworking's URLSession
    on Linux trusts only /etc/ssl/certs/ca-certificates.crt (no per-session roots, no environment variable),
    as an app's platform trusts only its store. Needs root, as `make test` has."""
    assert os.geteuid() == 0, "the ledger-device HTTPS test adds a test CA to the system trust store: run as root"
    installed = Path("/usr/local/share/ca-certificates") / f"topicledger-test-{os.getpid()}.crt"
    installed.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(https["tls"]["ca"], installed)
    subprocess.run(["update-ca-certificates"], check=True, capture_output=True)
    yield
    installed.unlink()
    subprocess.run(["update-ca-certificates", "--fresh"], check=True, capture_output=True)


def test_ledger_device_registers_subscribes_and_receives_over_https(https, trusted_ca):
    device = Path(os.environ["LEDGER_BIN"]).parent / "ledger-device"
    store = Path(https["directory"]) / "device.json"

    def run(*args):
        result = subprocess.run([str(device), *args, "--server", https["base"], "--store", str(store)],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    run("register")
    run("subscribe", "weather")
    token = json.loads(store.read_text())["token"]
    with httpx.Client(http2=True, verify=https["tls"]["ca"]) as client:
        topics = client.get(f"{https['base']}/iid/info/{token}?details=true", headers=ADMIN).json()
        assert list(topics["rel"]["topics"]) == ["weather"]
        sent = client.post(f"{https['base']}/v1/projects/{PROJECT}/messages:send", headers=ADMIN,
                           json={"message": {"topic": "weather", "data": {"storm": "14:00"}}})
        assert sent.status_code == 200
    received = run("poll", "--wait", "5")
    assert "14:00" in received, received


def test_testssl_finds_nothing_but_the_test_certificates_trust(https):
    """Mozilla's "intermediate" profile: TLS 1.3, and TLS 1.2 with ECDHE and AEAD suites only, in the server's
    order. testssl.sh (its full default run) may fault nothing but the chain of trust of the test CA, which no
    trust store holds."""
    host, port = _host_port(https["base"])
    result = subprocess.run(["testssl", "--quiet", "--color", "0", "--warnings", "batch", f"{host}:{port}"],
                            capture_output=True, text=True, timeout=600)
    report = result.stdout + result.stderr
    faults = [line.strip() for line in report.splitlines()
              if ("NOT ok" in line or "VULNERABLE" in line) and not line.strip().startswith("Chain of trust")]
    assert not faults, report
    assert "Has server cipher order?     yes (OK)" in report, report
    assert "Obsolete CBC ciphers (AES, ARIA etc.)         not offered" in report, report
    assert "TLS 1.3    offered (OK)" in report and "TLS 1.1    not offered" in report, report

