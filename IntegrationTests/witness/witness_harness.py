"""Witnesses end to end: `ledger witness` processes, a `ledger serve` whose project is cosigned by them, and a log
played by this script. Everything about the formats here is written from the C2SP texts (signed-note,
tlog-checkpoint, tlog-witness, tlog-cosignature) and RFC 6962, not from TopicLedger's code."""

import base64
import hashlib
import http.server
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tools" / "merkle"))
import verify_proof  # noqa: E402  (the independent verifier: its cosignature check is the one under test)

PROJECT = "shop"
ADMIN, AUDITOR, CLIENT = "admin-secret-w", "auditor-secret-w", "client-secret-w"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary():
    path = os.environ.get("LEDGER_BIN")
    assert path and os.path.exists(path), "set LEDGER_BIN to the built ledger executable"
    return path


def wait_healthy(base, process, what):
    deadline = time.time() + 30
    while True:
        try:
            if requests.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        assert process.poll() is None, f"{what} exited: {process.stdout.read().decode() if process.stdout else ''}"
        assert time.time() < deadline, f"{what} did not start"
        time.sleep(0.1)


# RFC 6962 §2.1: the Merkle tree hash, and consistency proofs (SUBPROOF).
def leaf_hash(data):
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n):
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def tree_root(leaves):
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaf_hash(leaves[0])
    k = _split(len(leaves))
    return node_hash(tree_root(leaves[:k]), tree_root(leaves[k:]))


def consistency_proof(m, leaves):
    def subproof(m, leaves, whole):
        n = len(leaves)
        if m == n:
            return [] if whole else [tree_root(leaves)]
        k = _split(n)
        if m <= k:
            return subproof(m, leaves[:k], whole) + [tree_root(leaves[k:])]
        return subproof(m - k, leaves[k:], False) + [tree_root(leaves[:k])]

    return subproof(m, leaves, True) if 0 < m < len(leaves) else []


class NoteKey:
    """An Ed25519 signed-note key (C2SP signed-note: type 0x01)."""

    def __init__(self, name):
        self.name = name
        self.private = Ed25519PrivateKey.generate()
        self.public = self.private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.key_hash = hashlib.sha256(name.encode() + b"\n\x01" + self.public).digest()[:4]

    @property
    def vkey(self):
        blob = base64.b64encode(b"\x01" + self.public).decode()
        return f"{self.name}+{self.key_hash.hex()}+{blob}"

    @property
    def signer_key_line(self):
        seed = self.private.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
        blob = base64.b64encode(b"\x01" + seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.key_hash.hex()}+{blob}"

    def sign(self, body):
        signature = self.private.sign(body.encode())
        return f"\u2014 {self.name} {base64.b64encode(self.key_hash + signature).decode()}\n"


class PlayedLog:
    """A transparency log that is not TopicLedger: its own origin, key and leaves."""

    def __init__(self, origin="example.com/played-log"):
        self.origin = origin
        self.key = NoteKey(origin)

    def checkpoint(self, leaves, key=None):
        body = f"{self.origin}\n{len(leaves)}\n{base64.b64encode(tree_root(leaves)).decode()}\n"
        return body + "\n" + (key or self.key).sign(body)

    @staticmethod
    def request(old, proof, note):
        return (f"old {old}\n" + "".join(base64.b64encode(h).decode() + "\n" for h in proof) + "\n" + note).encode()


class Witness:
    """`ledger witness` on a free port, with its key and data in `directory`."""

    def __init__(self, directory, name, logs, port=None):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.name, self.logs = name, logs
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.key = self.directory / "witness.key"
        self.vkey = subprocess.run(
            [binary(), "witness", "--key", str(self.key), "--name", name, "--public-key"],
            capture_output=True, text=True, check=True).stdout.strip()
        self.process = None

    def start(self, extra=(), open_files=None):
        """Starts it with `extra` arguments; with `open_files`, under that limit on open files (soft and hard, as
        `ulimit -n` sets both)."""
        arguments = [binary(), "witness", "--data", str(self.directory / "data"), "--key", str(self.key), "--name",
                     self.name, "--port", str(self.port)]
        for origin, vkey in self.logs:
            arguments += ["--log", f"{origin}={vkey}"]
        arguments += list(extra)

        def limit_open_files():
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

        self.process = subprocess.Popen(arguments, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        preexec_fn=limit_open_files if open_files else None)
        wait_healthy(self.base, self.process, f"witness {self.name}")
        return self

    def stop(self, kill=False):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            self.process.wait(timeout=10)
        output = self.process.stdout.read().decode() if self.process else ""
        self.process = None
        return output

    def add(self, body):
        return requests.post(f"{self.base}/add-checkpoint", data=body, timeout=10)

    def evidence(self):
        result = subprocess.run(
            [binary(), "witness", "--data", str(self.directory / "data"), "--key", str(self.key), "--name", self.name,
             "--evidence"], capture_output=True, text=True, check=True)
        return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def _hash(secret):
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


class Server:
    """`ledger serve` with one project whose checkpoints are signed by a key this script made, and cosigned by
    `witnesses` (a quorum of `quorum`)."""

    ORIGIN = "example.com/shop"

    def __init__(self, directory, witnesses, quorum=None):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.data = self.directory / "data"
        self.log_key = NoteKey(self.ORIGIN)
        key_file = self.directory / "checkpoint.key"
        key_file.write_text(self.log_key.signer_key_line + "\n")
        key_file.chmod(0o600)
        project = {
            "adminKeys": [_hash(ADMIN)], "auditorKeys": [_hash(AUDITOR)], "clientApiKeys": [_hash(CLIENT)],
            "checkpoint": {"origin": self.ORIGIN, "keyName": self.ORIGIN, "keyFile": str(key_file)},
            "witnesses": [{"url": w.base, "verifierKey": w.vkey} for w in witnesses],
        }
        if quorum is not None:
            project["witnessQuorum"] = quorum
        self.config = self.directory / "config.json"
        self.config.write_text(json.dumps({"projects": {PROJECT: project}}))
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process = None

    def start(self):
        self.process = subprocess.Popen(
            [binary(), "serve", "--data", str(self.data), "--port", str(self.port), "--config", str(self.config)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        wait_healthy(self.base, self.process, "ledger serve")
        return self

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)
        output = self.process.stdout.read().decode() if self.process else ""
        self.process = None
        return output

    def url(self, path):
        return f"{self.base}/v1/projects/{PROJECT}{path}"

    def send(self, topic="news"):
        response = requests.post(self.url("/messages:send"), headers={"Authorization": f"Bearer {ADMIN}"},
                                 json={"message": {"topic": topic}}, timeout=10)
        assert response.status_code == 200, response.text
        return response.json()["name"].rsplit("/", 1)[1]

    def get(self, path, **kwargs):
        return requests.get(self.url(path), headers={"Authorization": f"Bearer {AUDITOR}"}, timeout=30, **kwargs)


def temporary_directory():
    return Path(tempfile.mkdtemp(prefix="ledger-witness-"))


def remove(directory):
    shutil.rmtree(directory, ignore_errors=True)


class ScriptedWitness:
    """A tiny HTTP stand-in for a witness, answering each `add-checkpoint` as the test scripts it.

    `script(old, size)` returns `(status, content_type, text)` to answer, or None for the default: forwarded to
    `forward_to` (a real `ledger witness`, whose answer is relayed) when given, else a cosignature by this
    stand-in's own key (C2SP tlog-cosignature, cosignature/v1) dated `time()`. Every request is recorded as
    `(old, size, how, status)`, how being "scripted", "forwarded" or "cosigned"."""

    def __init__(self, name, forward_to=None):
        self.name, self.forward_to = name, forward_to
        self.private = Ed25519PrivateKey.generate()
        public = self.private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.key_id = hashlib.sha256(name.encode() + b"\n\x04" + public).digest()[:4]
        blob = base64.b64encode(b"\x04" + public).decode()
        self.own_vkey = f"{name}+{self.key_id.hex()}+{blob}"
        self.vkey = forward_to.vkey if forward_to else self.own_vkey
        self.script = None
        self.time = lambda: int(time.time())
        self.requests = []
        self.lock = threading.Lock()
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                status, content_type, text = stand_in.answer(body)
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *arguments):
                pass

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.http.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def answer(self, body):
        head, _, note = body.partition("\n\n")
        old = int(head.split("\n")[0].split(" ")[1])
        size = int(note.split("\n")[1])
        with self.lock:
            script = self.script
        scripted = script(old, size) if script else None
        if scripted is not None:
            how, answer = "scripted", scripted
        elif self.forward_to:
            response = requests.post(f"{self.forward_to.base}/add-checkpoint", data=body.encode(), timeout=10)
            how = "forwarded"
            answer = (response.status_code, response.headers.get("Content-Type", "text/plain"), response.text)
        else:
            how, answer = "cosigned", (200, "text/plain; charset=utf-8", self.cosignature(note, self.time()))
        with self.lock:
            self.requests.append((old, size, how, answer[0]))
        return answer

    def cosignature(self, note, timestamp):
        body = note.partition("\n\n")[0] + "\n"
        signature = self.private.sign(f"cosignature/v1\ntime {timestamp}\n{body}".encode())
        blob = self.key_id + timestamp.to_bytes(8, "big") + signature
        return f"\u2014 {self.name} {base64.b64encode(blob).decode()}\n"

    def set_script(self, script):
        with self.lock:
            self.script = script

    def recorded(self):
        with self.lock:
            return list(self.requests)

    def wait_for(self, predicate, timeout=20, what="requests"):
        deadline = time.time() + timeout
        while not predicate(self.recorded()):
            assert time.time() < deadline, f"the stand-in did not see {what}: {self.recorded()}"
            time.sleep(0.1)

    def close(self):
        self.http.shutdown()
        self.http.server_close()
