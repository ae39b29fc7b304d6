"""Connections and shutdown (issue "Crash-proof server"): slow or idle connections are closed after the idle
timeout, connections beyond the cap (the config's, or `--max-connections`) are refused at once while /healthz
keeps answering, SIGTERM ends a pending long poll at once instead of holding shutdown for a minute, and a
SIGKILL in the middle of concurrent writes loses none that was answered 200."""

import json
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest
import requests

from conftest import PROJECT, restart_server, start_server, stop_and_verify

SAMPLE_CONFIG = Path(__file__).resolve().parents[2] / "samples" / "server-config.json"


def _partial_request(base):
    """A connection that sends half a request head and then nothing (a slowloris)."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHo")
    return sock


def _closed_within(sock, seconds):
    """Whether the server closes `sock` within `seconds`."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except (socket.timeout, TimeoutError):
        return False
    except ConnectionResetError:
        return True


def _expect_cap(base, under, over, cap):
    """`under` connections held open stay open; of `over` more, some are closed at once; once all are closed,
    /healthz answers."""
    held = [_partial_request(base) for _ in range(under)]
    time.sleep(0.5)
    assert not any(_closed_within(sock, 0.01) for sock in held), f"connections under the cap of {cap} were closed"
    extra = [_partial_request(base) for _ in range(over)]
    assert any(_closed_within(sock, 1) for sock in extra), f"connections past the cap of {cap} were kept"
    for sock in held + extra:
        sock.close()
    time.sleep(0.5)
    assert requests.get(base + "/healthz", timeout=5).status_code == 200


@pytest.fixture(scope="module")
def limited(contract):
    config = json.loads(SAMPLE_CONFIG.read_text())
    config["limits"].update({"idleTimeoutSeconds": 2, "maxConnections": 40})
    path = Path(tempfile.mkdtemp(prefix="ledger-config-")) / "config.json"
    path.write_text(json.dumps(config))
    process, base, data, binary = start_server(["--config", str(path)])
    yield {"base": base, "data": data, "binary": binary}
    stop_and_verify(process, data, binary, projects=())
    shutil.rmtree(path.parent, ignore_errors=True)


def test_slow_connections_are_closed_and_health_answers(limited):
    slow = [_partial_request(limited["base"]) for _ in range(30)]
    # While they hang, the server answers on other connections.
    assert requests.get(limited["base"] + "/healthz", timeout=5).status_code == 200
    started = time.time()
    closed = [_closed_within(sock, 6) for sock in slow]
    assert all(closed), f"{closed.count(False)} half-sent requests were still open after the idle timeout"
    assert time.time() - started < 6
    assert requests.get(limited["base"] + "/healthz", timeout=5).status_code == 200


def test_connections_beyond_the_cap_are_closed_at_once(limited):
    held = [_partial_request(limited["base"]) for _ in range(38)]
    extra = [_partial_request(limited["base"]) for _ in range(6)]
    assert any(_closed_within(sock, 1) for sock in extra), "connections beyond the cap of 40 were kept"
    for sock in held + extra:
        sock.close()
    time.sleep(0.5)
    assert requests.get(limited["base"] + "/healthz", timeout=5).status_code == 200


def test_max_connections_flag_overrides_the_config(contract):
    # The config allows 40; the flag lowers the cap to 12, so of 16 connections some are closed at once.
    config = json.loads(SAMPLE_CONFIG.read_text())
    config["limits"].update({"maxConnections": 40})
    path = Path(tempfile.mkdtemp(prefix="ledger-config-")) / "config.json"
    path.write_text(json.dumps(config))
    process, base, data, binary = start_server(["--config", str(path), "--max-connections", "12"])
    try:
        _expect_cap(base, under=10, over=6, cap=12)
    finally:
        stop_and_verify(process, data, binary, projects=())
        shutil.rmtree(path.parent, ignore_errors=True)


def test_a_low_soft_limit_on_open_files_is_raised(contract):
    # Soft 256, hard 4096: the server raises its soft limit, so it holds 300 connections open.
    process, base, data, binary = start_server(open_files=(256, 4096))
    try:
        held = [_partial_request(base) for _ in range(300)]
        time.sleep(0.5)
        assert not any(_closed_within(sock, 0.01) for sock in held), "connections under the raised limit were closed"
        for sock in held:
            sock.close()
    finally:
        stop_and_verify(process, data, binary, projects=())


def test_the_cap_leaves_room_under_the_hard_limit_on_open_files(contract):
    # Hard limit 256 with the default cap of 10,000: the cap comes down to 256 - 72 (one project's reserve), so
    # connections past it are closed at once instead of waiting unaccepted; the server says so at start.
    process, base, data, binary = start_server(open_files=(256, 256))
    try:
        _expect_cap(base, under=180, over=12, cap=184)
    finally:
        stop_and_verify(process, data, binary, projects=())
    output = process.stdout.read().decode()
    assert "connections are capped at 184, not 10000" in output, output


def test_sigterm_ends_a_pending_long_poll_at_once(contract):
    process, base, data, binary = start_server()
    token = requests.post(f"{base}/v1/projects/{PROJECT}/registrations", headers={"x-goog-api-key": "dev-client-key"},
                          json={"platform": "ios"}).json()["token"]
    answer = {}

    def poll():
        answer["reply"] = requests.get(f"{base}/v1/projects/{PROJECT}/registrations/{token}/messages?waitSeconds=60",
                                       headers={"x-goog-api-key": "dev-client-key"}, timeout=70)

    waiter = threading.Thread(target=poll)
    waiter.start()
    time.sleep(1)
    started = time.time()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    stopped = time.time() - started
    waiter.join(timeout=10)
    assert stopped < 5, f"SIGTERM took {stopped:.1f} s with a long poll pending"
    assert answer["reply"].status_code == 200 and answer["reply"].json()["messages"] == []
    # A graceful stop signs a last checkpoint of the final head (kept beside the ledger).
    kept = [json.loads(line) for line in open(f"{data}/{PROJECT}/checkpoints.jsonl")]
    assert kept[-1]["size"] == 1 and kept[-1]["note"].startswith(f"topicledger/{PROJECT}\n1\n")
    stop_and_verify(process, data, binary)


def test_sigkill_under_concurrent_writes_loses_nothing_acknowledged(contract):
    # Per-token subscribes, batchAdds and topic sends from twelve connections, each pair new; the server is
    # killed with SIGKILL while they run. After a restart on the same data, every pair that was answered 200
    # (for batchAdd, each token whose result was {}) and every message whose send was answered 200 is there:
    # nothing is acknowledged before its commit.
    process, base, data, binary = start_server(
        ["--subscription-rate", "1000000", "--registration-rate", "100000", "--send-quota", "1000000"])
    admin = {"Authorization": "Bearer owner"}
    with requests.Session() as session:
        tokens = [session.post(f"{base}/v1/projects/{PROJECT}/registrations",
                               headers={"x-goog-api-key": "dev-client-key"}, json={}).json()["token"]
                  for _ in range(100)]
    acknowledged = set()
    messages = set()
    lock = threading.Lock()
    stop = threading.Event()

    def per_token(lane):
        with requests.Session() as session:
            n = 0
            while not stop.is_set():
                token, topic = tokens[(lane * 7 + n) % len(tokens)], f"kill-{lane}-{n}"
                n += 1
                try:
                    reply = session.post(f"{base}/v1/projects/{PROJECT}/registrations/{token}/topicSubscriptions"
                                         f"?topicName={topic}", headers=admin, json={}, timeout=5)
                except requests.RequestException:
                    return
                if reply.status_code == 200:
                    with lock:
                        acknowledged.add((token, topic))

    def bulk(lane):
        with requests.Session() as session:
            n = 0
            while not stop.is_set():
                topic = f"bulk-{lane}-{n}"
                n += 1
                try:
                    reply = session.post(f"{base}/iid/v1:batchAdd", headers=admin, timeout=5,
                                         json={"to": f"/topics/{topic}", "registration_tokens": tokens})
                except requests.RequestException:
                    return
                if reply.status_code == 200:
                    with lock:
                        acknowledged.update((token, topic) for token, result in zip(tokens, reply.json()["results"])
                                            if result == {})

    def send(lane):
        with requests.Session() as session:
            while not stop.is_set():
                try:
                    reply = session.post(f"{base}/v1/projects/{PROJECT}/messages:send", headers=admin, timeout=5,
                                         json={"message": {"topic": f"kill-{lane}-0", "data": {"lane": str(lane)}}})
                except requests.RequestException:
                    return
                if reply.status_code == 200:
                    with lock:
                        messages.add(reply.json()["name"].rsplit("/", 1)[1])

    lanes = [threading.Thread(target=per_token, args=(lane,)) for lane in range(8)]
    lanes += [threading.Thread(target=bulk, args=(lane,)) for lane in range(2)]
    lanes += [threading.Thread(target=send, args=(lane,)) for lane in range(2)]
    for lane in lanes:
        lane.start()
    time.sleep(2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    stop.set()
    for lane in lanes:
        lane.join(timeout=10)
    with lock:
        answered, sent = set(acknowledged), set(messages)
    assert sum(topic.startswith("kill-") for _, topic in answered) > 50, "too few per-token subscribes answered"
    assert sum(topic.startswith("bulk-") for _, topic in answered) >= 100, "no batchAdd was answered"
    assert len(sent) > 10, "too few sends answered"

    restarted = restart_server(binary, data, base)
    try:
        with requests.Session() as session:
            def stored(message):
                # A send whose audience the restart has not recorded yet replays too (recordedDigest null).
                return session.get(f"{base}/v1/projects/{PROJECT}/audit/messages/{message}?pageSize=1",
                                   headers=admin, timeout=10).status_code == 200

            held = set()
            for token in tokens:
                info = session.get(f"{base}/iid/info/{token}?details=true", headers=admin, timeout=10)
                assert info.status_code == 200, info.text
                held.update((token, topic) for topic in info.json().get("rel", {}).get("topics", {}))
            missing = [message for message in sorted(sent) if not stored(message)]
            assert not stored(str(max(int(message) for message in sent) + 1_000_000)), "a message never sent is found"
        lost = answered - held
        assert not lost, f"{len(lost)} of {len(answered)} acknowledged subscriptions are gone, e.g. {sorted(lost)[:3]}"
        assert not missing, f"{len(missing)} of {len(sent)} acknowledged sends are gone, e.g. {missing[:3]}"
    finally:
        stop_and_verify(restarted, data, binary)
