"""Hardening through `ledger serve`: a slow request body cannot hold a connection, one secret cannot hold two
roles, a checkpoint key others can read stops the server at start, and a fresh project's first checkpoint
is signed. (The console's findings are in IntegrationTests/console-browser/test_console_hardening.py.)"""

import hashlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
import requests

from conftest import PROJECT, start_server, stop_and_verify

ADMIN = {"Authorization": "Bearer owner"}
AUDITOR = {"Authorization": "Bearer auditor"}


def _hash(secret):
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


def _write_config(config):
    path = Path(tempfile.mkdtemp(prefix="ledger-config-")) / "config.json"
    path.write_text(json.dumps(config))
    return path


def _serve_refused(args, data=None):
    """Runs `ledger serve` with `args`, which must refuse to start; returns what it printed."""
    binary = os.environ["LEDGER_BIN"]
    data = data or tempfile.mkdtemp(prefix="ledger-refused-")
    result = subprocess.run([binary, "serve", "--data", data, "--port", "0", *args],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode != 0, f"the server started: {result.stdout}{result.stderr}"
    return result.stdout + result.stderr


def _host_port(base):
    host, port = base.removeprefix("http://").split(":")
    return host, int(port)


def _closed(sock):
    """Whether the server has closed `sock` (without waiting); an answer it sent first is read past."""
    sock.setblocking(False)
    try:
        while sock.recv(4096):
            pass
        return True
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        sock.setblocking(True)


# 1. A slow request body.

@pytest.fixture(scope="module")
def capped(contract):
    """A server that holds at most 40 connections, with the default body deadline (10 s of grace, 1024 bytes a
    second after it, 60 s at most); its output is read at the end."""
    config = json.loads((Path(__file__).resolve().parents[2] / "samples" / "server-config.json").read_text())
    config["limits"].update({"maxConnections": 40})
    path = _write_config(config)
    process, base, data, binary = start_server(["--config", str(path)])
    yield {"base": base, "process": process}
    process.terminate()
    process.wait(timeout=10)
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(path.parent, ignore_errors=True)


def _body_head(path, length):
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def test_a_slow_body_is_closed_and_health_answers_meanwhile(capped):
    """40 connections (the cap) each send a head, then one body byte every 2 s: the server holds every one at 6 s
    and closes them once 10 s of grace pass without the minimum rate, /healthz answers after, and no error is logged. A body
    that keeps the rate for longer than the grace is answered."""
    host, port = _host_port(capped["base"])
    slow = []
    for _ in range(40):
        sock = socket.create_connection((host, port), timeout=10)
        sock.sendall(_body_head("/console/sign-in", 1000) + b"k")
        slow.append(sock)
    # A batch of 100 tokens (about 21 KB) sent at 1.5 KB/s for 14 s: past the grace, kept by the rate. Started
    # once the slow ones are closed (the cap is full until then): counted from its own head.
    steady_answer = {}

    def steady():
        tokens = [f"steady-{index:03d}-" + "x" * 190 for index in range(100)]
        body = json.dumps({"to": "/topics/steady", "registration_tokens": tokens}).encode()
        head = (f"POST /iid/v1:batchAdd HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer shop-admin-secret\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        with socket.create_connection((host, port), timeout=30) as sock:
            sock.sendall(head)
            for offset in range(0, len(body), 1536):
                sock.sendall(body[offset:offset + 1536])
                time.sleep(1)
            steady_answer["status"] = sock.recv(200).split(b"\r\n", 1)[0]

    started = time.time()
    open_after = None
    while time.time() - started < 16:
        still_open = [sock for sock in slow if not _closed(sock)]
        if not still_open:
            break
        for sock in still_open:
            try:
                sock.sendall(b"k")
            except OSError:
                pass
        if time.time() - started > 6 and open_after is None:
            open_after = len(still_open)  # 4 s before the grace has passed, they are held
        time.sleep(2)
    closed_at = time.time() - started
    still_open = [sock for sock in slow if not _closed(sock)]
    assert not still_open, f"{len(still_open)} of 40 slow bodies were still open after {closed_at:.0f} s"
    assert open_after == 40, f"slow bodies were closed before the 10 s grace ({open_after} open at 6 s)"
    assert requests.get(capped["base"] + "/healthz", timeout=5).status_code == 200
    thread = threading.Thread(target=steady)
    thread.start()
    thread.join(40)
    assert steady_answer.get("status") == b"HTTP/1.1 200 OK", steady_answer
    for sock in slow:
        sock.close()


def test_a_dropped_body_is_not_an_error_and_a_large_sign_in_is_413(capped):
    host, port = _host_port(capped["base"])
    for _ in range(5):
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(_body_head("/console/sign-in", 1000) + b"key=abc")
            time.sleep(0.1)
    connection = http.client.HTTPConnection(host, port, timeout=10)
    for chunked in (False, True):
        body = b"key=" + b"x" * 4996
        connection.request("POST", "/console/sign-in", body=iter([body]) if chunked else body,
                           headers={"Content-Type": "application/x-www-form-urlencoded"}, encode_chunked=chunked)
        reply = connection.getresponse()
        assert reply.status == 413, (chunked, reply.status)
        assert "too large" in reply.read().decode()
    connection.close()
    time.sleep(0.5)
    process = capped["process"]
    process.terminate()
    output = process.stdout.read().decode()
    process.wait(timeout=10)
    assert "internal error" not in output and " error " not in output, output


# 2. One secret, one role.

@pytest.mark.parametrize("places", [
    (("p", "adminKeys"), ("p", "clientApiKeys")),
    (("p", "adminKeys"), ("p", "auditorKeys")),
    (("p", "auditorKeys"), ("q", "auditorKeys")),
    (("p", "clientApiKeys"), ("q", "adminKeys")),
])
def test_one_secret_in_two_places_is_refused_at_start(places):
    config = {"projects": {"p": {"adminKeys": [_hash("p-admin")]}, "q": {"adminKeys": [_hash("q-admin")]}}}
    for project, field in places:
        config["projects"][project].setdefault(field, []).append(_hash("shared-secret"))
    path = _write_config(config)
    output = _serve_refused(["--config", str(path)])
    first, second = sorted(f"projects.{project}.{field}" for project, field in places)
    assert f"{first} and {second}" in output, output
    # A control: the same file without the second place starts.
    config["projects"][places[1][0]][places[1][1]].remove(_hash("shared-secret"))
    path.write_text(json.dumps(config))
    process, base, data, binary = start_server(["--config", str(path)])
    stop_and_verify(process, data, binary, projects=())


# 4. A checkpoint key others can read.

def _checkpoint_config(key_file):
    return {"projects": {PROJECT: {"adminKeys": [_hash("owner")], "auditorKeys": [_hash("auditor")],
                                   "checkpoint": {"keyFile": str(key_file)}}}}


def test_a_checkpoint_key_others_can_read_stops_the_server_at_start():
    # The configured key file: made by the server's first checkpoint, then opened to others.
    directory = Path(tempfile.mkdtemp(prefix="ledger-key-"))
    key = directory / "checkpoint.key"
    config = _write_config(_checkpoint_config(key))
    process, base, data, binary = start_server(["--config", str(config)])
    assert requests.get(f"{base}/v1/projects/{PROJECT}/ledger:checkpoint", headers=AUDITOR,
                        timeout=10).status_code == 200
    process.terminate()
    process.wait(timeout=10)
    assert key.stat().st_mode & 0o777 == 0o600
    key.chmod(0o644)
    output = _serve_refused(["--config", str(config)], data=data)
    assert str(key) in output and "chmod 600" in output, output
    # The default key, beside the ledger.
    default = Path(data) / PROJECT / "checkpoint.key"
    shutil.move(key, default)
    output = _serve_refused([], data=data)
    assert str(default) in output, output
    # Mended, it starts.
    default.chmod(0o600)
    process, base, unused, binary = start_server(["--data", data])  # the last --data given is served
    assert requests.get(f"{base}/v1/projects/{PROJECT}/ledger:checkpoint", headers=AUDITOR,
                        timeout=10).status_code == 200
    stop_and_verify(process, data, binary)
    shutil.rmtree(unused, ignore_errors=True)


def test_a_key_spoiled_while_serving_is_503_without_a_path_and_not_ready():
    directory = Path(tempfile.mkdtemp(prefix="ledger-key-"))
    key = directory / "checkpoint.key"
    process, base, data, binary = start_server(["--config", str(_write_config(_checkpoint_config(key)))])
    key.write_text("not a key\n")  # appears after the start check, before the first checkpoint
    key.chmod(0o600)
    reply = requests.get(f"{base}/v1/projects/{PROJECT}/ledger:checkpoint", headers=AUDITOR, timeout=10)
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"]["status"] == "UNAVAILABLE"
    assert str(directory) not in reply.text and "checkpoint.key" not in reply.text
    ready = requests.get(f"{base}/readyz", timeout=10)
    assert ready.status_code == 503 and "cannot sign checkpoints" in " ".join(ready.json()["reasons"]), ready.text
    # Mended: the next request signs, and readiness is back.
    key.unlink()
    assert requests.get(f"{base}/v1/projects/{PROJECT}/ledger:checkpoint", headers=AUDITOR,
                        timeout=10).status_code == 200
    assert requests.get(f"{base}/readyz", timeout=10).status_code == 200
    stop_and_verify(process, data, binary)


# 5. A fresh project's first request.

def test_a_checkpoint_as_the_first_request_of_a_fresh_project_is_signed():
    process, base, data, binary = start_server()
    assert not (Path(data) / PROJECT).exists()
    reply = requests.get(f"{base}/v1/projects/{PROJECT}/ledger:checkpoint", headers=AUDITOR, timeout=10)
    assert reply.status_code == 200, reply.text
    assert reply.text.startswith(f"topicledger/{PROJECT}\n"), reply.text
    stop_and_verify(process, data, binary)


# 6. A lifetime one nanosecond past 4 weeks.

@pytest.mark.parametrize("ttl,status", [
    ("2419200.000000001s", 400), ("2419200.000001s", 400), ("2419200.999999999s", 400),
    ("2419200s", 200), ("2419200.000000000s", 200), ("2419199.999999999s", 200),
])
def test_android_ttl_is_checked_to_the_nanosecond(server, ttl, status):
    body = {"message": {"topic": "weather", "android": {"ttl": ttl}}, "validate_only": True}
    reply = requests.post(f"{server['base']}/v1/projects/{PROJECT}/messages:send", json=body, headers=ADMIN,
                          timeout=10)
    assert reply.status_code == status, (ttl, reply.text)
