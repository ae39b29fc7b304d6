"""Issue #64, "The witness as a public service": `ledger witness` has the header, body and idle timeouts, the
connection cap and the per-address cap of `ledger serve`. Under `ulimit -n 256`, 400 slow connections (half a
request head, or a body dripped a byte a second) from other addresses leave `/healthz` and a valid add-checkpoint
answered within a second throughout; the slow connections are closed by the server; connections past the
per-address cap are closed at once, counted in /metrics and warned of once. Run by run.sh (LEDGER_BIN)."""

import re
import selectors
import socket
import subprocess
import threading
import time

import pytest
import requests

from witness_harness import PlayedLog, Witness, binary, consistency_proof, remove, temporary_directory

# Short timeouts so the test stays fast: a head must be whole 2 s after the connection opens, a body 3 s after its
# head (`grace` = min(10 s, the body timeout), and a byte a second earns nothing at 1024 bytes/s).
HEAD_SECONDS, BODY_SECONDS = 2, 3
LIMITS = ["--idle-timeout-seconds", str(HEAD_SECONDS), "--request-body-timeout-seconds", str(BODY_SECONDS)]
OPEN_FILES = 256
# The attackers' addresses: loopback is all of 127.0.0.0/8 on Linux. The witness is probed from 127.0.0.1.
ATTACKERS = [f"127.0.0.{i}" for i in range(2, 10)]
LEAVES = [f"leaf {i}".encode() for i in range(1000)]


@pytest.fixture
def directory():
    path = temporary_directory()
    yield path
    remove(path)


def metric(base, name, labels=""):
    text = requests.get(f"{base}/metrics", timeout=5).text
    found = re.search(rf"^{re.escape(name + labels)} (\d+)$", text, re.MULTILINE)
    assert found, f"{name}{labels} not in /metrics:\n{text}"
    return int(found.group(1))


class Slot:
    """One attacker connection, reopened half a second after the server closes it."""

    def __init__(self, kind, source):
        self.kind, self.source = kind, source
        self.sock = None
        self.opened = self.reopen_at = self.next_byte = 0.0


class SlowClients:
    """Keeps `count` slow connections to `port` open for as long as it runs, half of them holding half a request
    head, half a whole head for POST /add-checkpoint whose body arrives a byte a second (fast enough that an idle
    timeout alone would never close it). Records how long each connection stayed open before the server closed
    it."""

    HALF_HEAD = b"GET /healthz HTTP/1.1\r\nHost: witness\r\nX-Slow: "
    BODY_HEAD = (b"POST /add-checkpoint HTTP/1.1\r\nHost: witness\r\nContent-Type: text/plain\r\n"
                 b"Content-Length: 2000\r\n\r\n")

    def __init__(self, port, count):
        self.port = port
        self.slots = [Slot("head" if i % 2 == 0 else "body", ATTACKERS[i % len(ATTACKERS)]) for i in range(count)]
        self.lifetimes = {"head": [], "body": []}
        self.selector = selectors.DefaultSelector()
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.running = False
        self.thread.join(timeout=10)
        for slot in self.slots:
            if slot.sock:
                self.selector.unregister(slot.sock)
                slot.sock.close()

    def _open(self, slot, now):
        sock = socket.socket()
        sock.setblocking(False)
        sock.bind((slot.source, 0))
        try:
            sock.connect(("127.0.0.1", self.port))
        except BlockingIOError:
            pass
        slot.sock, slot.opened, slot.next_byte = sock, now, now
        slot.sent_head = False
        self.selector.register(sock, selectors.EVENT_READ, slot)

    def _closed(self, slot, now):
        self.lifetimes[slot.kind].append(now - slot.opened)
        self.selector.unregister(slot.sock)
        slot.sock.close()
        slot.sock, slot.reopen_at = None, now + 0.5

    def _run(self):
        while self.running:
            now = time.monotonic()
            for slot in self.slots:
                if slot.sock is None and now >= slot.reopen_at:
                    self._open(slot, now)
                elif slot.sock is not None and now >= slot.next_byte:
                    try:
                        if not slot.sent_head:
                            slot.sock.send(self.HALF_HEAD if slot.kind == "head" else self.BODY_HEAD)
                            slot.sent_head = True
                            slot.next_byte = now + (3600 if slot.kind == "head" else 1)
                        else:
                            slot.sock.send(b"x")
                            slot.next_byte = now + 1
                    except BlockingIOError:
                        slot.next_byte = now + 0.05  # not connected yet
                    except OSError:
                        self._closed(slot, now)
            for key, _ in self.selector.select(timeout=0.05):
                slot = key.data
                try:
                    data = slot.sock.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self._closed(slot, time.monotonic())


def timed(call):
    started = time.monotonic()
    try:
        response = call()
        return response.status_code, time.monotonic() - started, response.text
    except requests.RequestException as error:
        return None, time.monotonic() - started, repr(error)


def test_slow_connections_from_other_addresses_leave_the_witness_answering_within_a_second(directory):
    log = PlayedLog()
    witness = Witness(directory / "w", "witness.example/limits", [(log.origin, log.key.vkey)])
    witness.start(extra=LIMITS, open_files=OPEN_FILES)
    try:
        failures, answered = [], 0
        size = 1
        assert witness.add(PlayedLog.request(0, [], log.checkpoint(LEAVES[:size]))).status_code == 200
        with SlowClients(witness.port, 400) as slow:
            started = time.monotonic()
            while time.monotonic() - started < 40:
                at = round(time.monotonic() - started, 1)
                status, took, text = timed(lambda: requests.get(f"{witness.base}/healthz", timeout=1))
                if status != 200 or took >= 1:
                    failures.append((at, "healthz", status, round(took, 2), text[:120]))
                body = PlayedLog.request(size, consistency_proof(size, LEAVES[:size + 1]), log.checkpoint(
                    LEAVES[:size + 1]))
                status, took, text = timed(
                    lambda: requests.post(f"{witness.base}/add-checkpoint", data=body, timeout=1))
                if status == 200 and took < 1:
                    size += 1
                    answered += 1
                else:
                    failures.append((at, "add-checkpoint", status, round(took, 2), text[:120]))
                time.sleep(0.2)
        assert not failures, f"{len(failures)} probes not answered within 1 s (of {answered} cosigned): {failures[:10]}"
        assert answered >= 40
        # The slow connections were there (not refused at once) and were closed by the server: a half head at the
        # idle timeout, a dripping body at its deadline, each within a second and a half of it.
        for kind, limit in (("head", HEAD_SECONDS), ("body", BODY_SECONDS)):
            held = [t for t in slow.lifetimes[kind] if t >= limit - 0.5]
            late = [round(t, 2) for t in held if t > limit + 1.5]
            assert len(held) >= 100, f"only {len(held)} {kind} connections were held: {slow.lifetimes[kind][:20]}"
            assert not late, f"{len(late)} {kind} connections stayed open past the timeout: {late[:10]}"
        # The attackers' connections past their address's cap were refused, and counted.
        assert metric(witness.base, "topicledger_connections_refused_total", '{reason="address_cap"}') > 0
    finally:
        output = witness.stop()
    assert "SPLIT VIEW" not in output


def _half_head(source, port):
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(5)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHo")
    return sock


def _closed_within(sock, seconds):
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except (socket.timeout, TimeoutError):
        return False
    except ConnectionResetError:
        return True


def test_connections_past_the_per_address_cap_are_closed_at_once_counted_and_warned_of_once(directory):
    log = PlayedLog()
    witness = Witness(directory / "w", "witness.example/cap", [(log.origin, log.key.vkey)])
    witness.start(extra=["--idle-timeout-seconds", "20", "--max-connections-per-address", "4"])
    try:
        assert metric(witness.base, "topicledger_connections_refused_total", '{reason="address_cap"}') == 0
        held = [_half_head("127.0.0.50", witness.port) for _ in range(4)]
        time.sleep(0.3)
        assert not any(_closed_within(sock, 0.01) for sock in held), "connections under the cap were closed"
        started = time.monotonic()
        extra = [_half_head("127.0.0.50", witness.port) for _ in range(6)]
        assert all(_closed_within(sock, 1) for sock in extra), "connections past the per-address cap were kept"
        assert time.monotonic() - started < 2
        assert not any(_closed_within(sock, 0.01) for sock in held), "the cap closed connections it had admitted"
        # Another address is served meanwhile.
        assert requests.get(f"{witness.base}/healthz", timeout=1).status_code == 200
        assert metric(witness.base, "topicledger_connections_refused_total", '{reason="address_cap"}') == 6
        assert metric(witness.base, "topicledger_connections_refused_total", '{reason="server_cap"}') == 0
        assert metric(witness.base, "topicledger_connections_open") >= 5  # the 4 held and the scrape's own
        # Once the held ones close, the address may connect again.
        for sock in held + extra:
            sock.close()
        time.sleep(0.3)
        again = _half_head("127.0.0.50", witness.port)
        assert not _closed_within(again, 0.3)
        again.close()
    finally:
        output = witness.stop()
    warnings = [line for line in output.splitlines() if "per-address" in line]
    assert len(warnings) == 1, output


@pytest.mark.parametrize("flag, value", [
    ("--max-connections", "0"), ("--max-connections-per-address", "0"), ("--idle-timeout-seconds", "0"),
    ("--request-body-timeout-seconds", "86401"), ("--min-request-body-bytes-per-second", "0"),
])
def test_limits_out_of_range_are_refused(directory, flag, value):
    result = subprocess.run(
        [binary(), "witness", "--key", str(directory / "k"), "--log", "a=b", flag, value],
        capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert flag in result.stderr, result.stderr
