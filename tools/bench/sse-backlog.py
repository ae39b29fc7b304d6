"""What a device's backlog costs the server: a device that never acknowledges reconnects to
`messages:stream` (no Last-Event-ID, as after an app restart) and is sent its whole unacknowledged inbox
again, while a /healthz probe measures how long other requests wait.

For each binary given (e.g. the previous commit's and this checkout's, built in the same run): a fresh
server, DEVICES devices subscribed to one topic, MESSAGES sends to it, then ROUNDS rounds of CONNECTIONS
concurrent streams that each read the whole backlog. Prints messages replayed per second of wall time,
the server's CPU seconds per thousand messages replayed, and the /healthz p99 during the replays — and the
ratios of each binary to the first.

    python3 tools/bench/sse-backlog.py OLD_BINARY NEW_BINARY [--messages 3000] [--connections 8]
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

import requests

PROJECT = "demo-project"
CLIENT = {"x-goog-api-key": "dev-client-key"}
ADMIN = {"Authorization": "Bearer owner", "content-type": "application/json"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_backlog(base, token, expected):
    """Reads the stream until `expected` message events have arrived; returns how many did."""
    count = 0
    with requests.get(f"{base}/v1/projects/{PROJECT}/registrations/{token}/messages:stream", headers=CLIENT,
                      stream=True, timeout=(5, 60)) as reply:
        for line in reply.iter_lines(chunk_size=65536):
            if line.startswith(b"event: message"):
                count += 1
                if count == expected:
                    break
    return count


def probe(base, stop, latencies):
    session = requests.Session()
    while not stop.is_set():
        started = time.perf_counter()
        try:
            session.get(f"{base}/healthz", timeout=10)
        except requests.RequestException:
            pass
        latencies.append(time.perf_counter() - started)
        time.sleep(0.02)


def run(binary, args):
    data = tempfile.mkdtemp()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([binary, "serve", "--data", data, "--port", str(port), "--registration-rate",
                               "100000", "--send-quota", "100000000"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{base}/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        session = requests.Session()
        tokens = [session.post(f"{base}/v1/projects/{PROJECT}/registrations", headers=CLIENT,
                               json={"platform": "ios"}, timeout=10).json()["token"]
                  for _ in range(args.devices)]
        session.post(f"{base}/iid/v1:batchAdd", headers=ADMIN, timeout=30,
                     json={"to": "/topics/backlog", "registration_tokens": tokens}).raise_for_status()
        for n in range(args.messages):
            session.post(f"{base}/v1/projects/{PROJECT}/messages:send", headers=ADMIN, timeout=10, json={
                "message": {"topic": "backlog", "data": {"n": str(n), "kind": "bench"},
                            "notification": {"title": "Backlog", "body": f"message {n}"}}}).raise_for_status()
        # One warm-up read (the same for both binaries), then the measured rounds.
        read_backlog(base, tokens[0], args.messages)
        stop, latencies = threading.Event(), []
        prober = threading.Thread(target=probe, args=(base, stop, latencies))
        prober.start()
        cpu_before, started = cpu_seconds(server.pid), time.perf_counter()
        replayed = 0
        for round_ in range(args.rounds):
            results = [0] * args.connections
            def reader(i):
                results[i] = read_backlog(base, tokens[1 + (round_ * args.connections + i) % (args.devices - 1)],
                                          args.messages)
            readers = [threading.Thread(target=reader, args=(i,)) for i in range(args.connections)]
            for t in readers:
                t.start()
            for t in readers:
                t.join()
            assert all(r == args.messages for r in results), results
            replayed += sum(results)
        elapsed, cpu = time.perf_counter() - started, cpu_seconds(server.pid) - cpu_before
        stop.set()
        prober.join()
        latencies.sort()
        return {"messages_per_second": replayed / elapsed, "cpu_ms_per_1000": cpu * 1e6 / replayed,
                "healthz_p99_ms": latencies[max(0, int(len(latencies) * 0.99) - 1)] * 1000,
                "replayed": replayed}
    finally:
        server.terminate()
        server.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--devices", type=int, default=50)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    results = []
    for binary in args.binaries:
        result = run(binary, args)
        result["binary"] = binary
        results.append(result)
        print(f"{binary}: {result['messages_per_second']:,.0f} messages/s replayed, "
              f"{result['cpu_ms_per_1000']:.1f} server CPU ms per 1000, /healthz p99 {result['healthz_p99_ms']:.1f} ms")
    base = results[0]
    for result in results[1:]:
        print(f"{result['binary']} vs {base['binary']}: "
              f"{result['messages_per_second'] / base['messages_per_second']:.2f}x messages/s, "
              f"{base['cpu_ms_per_1000'] / result['cpu_ms_per_1000']:.2f}x less CPU per message, "
              f"/healthz p99 {base['healthz_p99_ms']:.0f} -> {result['healthz_p99_ms']:.0f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"parameters": vars(args), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
