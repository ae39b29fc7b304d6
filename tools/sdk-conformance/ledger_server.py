"""Starting and stopping the built `ledger serve` for the Python suites (SDK conformance, the console's
browser tests)."""

import os
import resource
import shutil
import socket
import subprocess
import tempfile
import time

import requests


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_server_ports = set()


def start_server(extra_args=(), open_files=None):
    """Starts `ledger serve` on a free port with a fresh data directory; returns (process, base, data, binary).
    `open_files`, a (soft, hard) pair, is the server's limit on open files (RLIMIT_NOFILE)."""
    binary = os.environ.get("LEDGER_BIN")
    assert binary and os.path.exists(binary), "set LEDGER_BIN to the built ledger executable"
    data = tempfile.mkdtemp(prefix="ledger-sdk-")
    port = _free_port()
    _server_ports.add(port)
    limit = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, open_files)) if open_files else None
    process = subprocess.Popen(
        [binary, "serve", "--data", data, "--port", str(port), *extra_args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=limit)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while True:
        try:
            if requests.get(f"{base}/healthz", timeout=1).status_code == 200:
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
    for project in projects:
        verify = subprocess.run(
            [binary, "verify", "--data", data, "--project", project], capture_output=True, text=True)
        assert verify.returncode == 0, verify.stdout + verify.stderr
    shutil.rmtree(data, ignore_errors=True)


