"""Starting and stopping the built `ledger serve` for the Python suites (SDK conformance, the console's
browser tests)."""

import os
import resource
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import requests


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_server_ports = set()


def make_certificates(directory, name="server"):
    """A test CA and a server certificate for 127.0.0.1 and localhost signed by it, as PEM files in
    `directory`: returns {"ca", "cert", "key"} paths (the key mode 0600). Each call makes a new CA unless
    `directory` holds one already, so a second server certificate (a renewal) is signed by the same CA."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory = Path(directory)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_path, ca_key_path = directory / "ca.pem", directory / "ca.key"
    if ca_path.exists():
        ca = x509.load_pem_x509_certificate(ca_path.read_bytes())
        ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), None)
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "TopicLedger test CA")])
        ca = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(ca_key.public_key())
              .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
              .not_valid_after(now + datetime.timedelta(days=1))
              .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
              .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                           content_commitment=False, key_encipherment=False,
                                           data_encipherment=False, key_agreement=False, encipher_only=False,
                                           decipher_only=False), critical=True)
              .sign(ca_key, hashes.SHA256()))
        ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        ca_key_path.write_bytes(ca_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()))
        ca_key_path.chmod(0o600)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            # Where its revocations would be: a certificate without is one testssl.sh flags (the address is
            # never fetched here).
            .add_extension(x509.CRLDistributionPoints([x509.DistributionPoint(
                full_name=[x509.UniformResourceIdentifier("http://127.0.0.1:9/topicledger-test-ca.crl")],
                relative_name=None, reasons=None, crl_issuer=None)]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = {"ca": str(ca_path), "cert": str(directory / f"{name}.pem"), "key": str(directory / f"{name}.key")}
    Path(paths["cert"]).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path = Path(paths["key"])
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return paths


def start_server(extra_args=(), open_files=None, tls=None):
    """Starts `ledger serve` on a free port with a fresh data directory; returns (process, base, data, binary).
    `open_files`, a (soft, hard) pair, is the server's limit on open files (RLIMIT_NOFILE). `tls`, paths from
    `make_certificates`, serves HTTPS with them (the base is then https://)."""
    binary = os.environ.get("LEDGER_BIN")
    assert binary and os.path.exists(binary), "set LEDGER_BIN to the built ledger executable"
    data = tempfile.mkdtemp(prefix="ledger-sdk-")
    port = _free_port()
    _server_ports.add(port)
    def prepare():
        # A permissive umask, as a shell's usual one: the server's files must be 0600 and 0700 all the same.
        os.umask(0o022)
        if open_files:
            resource.setrlimit(resource.RLIMIT_NOFILE, open_files)
    tls_args = ["--tls-cert", tls["cert"], "--tls-key", tls["key"]] if tls else []
    process = subprocess.Popen(
        [binary, "serve", "--data", data, "--port", str(port), *tls_args, *extra_args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=prepare)
    base = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    deadline = time.time() + 30
    while True:
        try:
            if requests.get(f"{base}/healthz", timeout=1, verify=tls["ca"] if tls else True).status_code == 200:
                break
        except requests.ConnectionError:
            pass
        assert time.time() < deadline, "the server did not start"
        assert process.poll() is None, process.stdout.read().decode()
        time.sleep(0.1)
    return process, base, data, binary


def restart_server(binary, data, base):
    """Starts `ledger serve` again on `data` and the port of `base` (after the first process was killed);
    returns the process once /healthz answers."""
    process = subprocess.Popen([binary, "serve", "--data", data, "--port", base.rsplit(":", 1)[1]],
                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while process.poll() is None and time.time() < deadline:
        try:
            if requests.get(f"{base}/healthz", timeout=1).status_code == 200:
                return process
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    process.kill()
    raise AssertionError(f"the server did not start again on {data} (exit {process.wait()})")


def stop_and_verify(process, data, binary, projects=("demo-project",)):
    """Stops the server; its ledgers must be sound: chain intact, projections equal a rebuild. The data
    directory is removed once they are (kept for a look when they are not)."""
    process.terminate()
    process.wait(timeout=10)
    # Started under this process's umask (022 here): what the server wrote — each project's directory and
    # everything in it — is still its owner's alone. (A test may leave files of its own beside them.)
    for project in projects:
        ledger = os.path.join(data, project)
        for root, directories, files in os.walk(ledger):
            for path in [root] + [os.path.join(root, name) for name in directories + files]:
                mode = os.stat(path).st_mode
                assert mode & 0o077 == 0, f"{path} is mode {oct(mode & 0o777)}"
    for project in projects:
        verify = subprocess.run(
            [binary, "verify", "--data", data, "--project", project], capture_output=True, text=True)
        assert verify.returncode == 0, verify.stdout + verify.stderr
    shutil.rmtree(data, ignore_errors=True)


