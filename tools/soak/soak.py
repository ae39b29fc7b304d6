"""Soak: a `ledger serve` under mixed load for a long time, sampled every 10 s (RSS, open file descriptors,
p99 latency of a /healthz probe), written as CSV and plotted. Run through tools/soak/run.sh.

The load, all from other processes on loopback, bounded in time:
- wrk (Debian's) on per-token subscribe/unsubscribe and topic sends, with a Lua script;
- SSE churn: devices that open `messages:stream`, read for a few seconds, and drop the connection;
- long polls: devices waiting in `messages?waitSeconds=` and acknowledging what they get.
"""

import argparse
import csv
import multiprocessing
import os
import queue
import random
import subprocess
import threading
import time

import requests

PROJECT = "demo-project"
CLIENT = {"x-goog-api-key": "dev-client-key"}
ADMIN = {"Authorization": "Bearer owner", "content-type": "application/json"}


def register(base, count):
    tokens = []
    for _ in range(count):
        tokens.append(requests.post(f"{base}/v1/projects/{PROJECT}/registrations", headers=CLIENT,
                                    json={"platform": "ios"}, timeout=10).json()["token"])
    for chunk in range(0, count, 1000):
        requests.post(f"{base}/iid/v1:batchAdd", headers=ADMIN, timeout=30,
                      json={"to": "/topics/soak", "registration_tokens": tokens[chunk:chunk + 1000]})
    return tokens


def sse_churn(base, tokens, stop):
    while not stop.is_set():
        token = random.choice(tokens)
        try:
            with requests.get(f"{base}/v1/projects/{PROJECT}/registrations/{token}/messages:stream",
                              headers=CLIENT, stream=True, timeout=(5, 5)) as reply:
                deadline = time.time() + random.uniform(0.5, 4)
                for _ in reply.iter_lines():
                    if time.time() > deadline or stop.is_set():
                        break
        except requests.RequestException:
            pass


def long_poll(base, token, stop):
    cursor = None
    while not stop.is_set():
        try:
            query = f"?waitSeconds=5" + (f"&after={cursor}" if cursor else "")
            reply = requests.get(f"{base}/v1/projects/{PROJECT}/registrations/{token}/messages{query}",
                                 headers=CLIENT, timeout=15).json()
            cursor = reply["cursor"]
            if reply["messages"]:
                requests.post(f"{base}/v1/projects/{PROJECT}/registrations/{token}/messages:ack",
                              headers=CLIENT, json={"through": cursor}, timeout=10)
        except (requests.RequestException, KeyError, ValueError):
            time.sleep(0.5)


def probe(base, stop, latencies):
    """Its own process (no GIL shared with the load generators): a /healthz every 50 ms, each latency put
    on the `latencies` queue."""
    session = requests.Session()
    while not stop.is_set():
        started = time.perf_counter()
        try:
            session.get(f"{base}/healthz", timeout=5)
            elapsed = time.perf_counter() - started
        except requests.RequestException:
            elapsed = 5.0
        latencies.put(elapsed)
        time.sleep(0.05)


def devices(base, tokens, stop):
    """Its own process: 8 threads of SSE churn and 16 long-polling devices."""
    threads = [threading.Thread(target=sse_churn, args=(base, tokens, stop)) for _ in range(8)]
    threads += [threading.Thread(target=long_poll, args=(base, token, stop)) for token in tokens[:16]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def sample(pid):
    """RSS, its anonymous part (the heap: what a leak grows; the rest is mapped files, the ledger among
    them, which grows with the data), and the open file descriptors."""
    values = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "RssAnon:")):
                values[line.split(":")[0]] = int(line.split()[1]) * 1024
    return values.get("VmRSS", 0), values.get("RssAnon", 0), len(os.listdir(f"/proc/{pid}/fd"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--out", required=True)
    parser.add_argument("--wrk-script", required=True)
    parser.add_argument("--ledger-file", help="the ledger's data.mdb: its size is sampled beside the RSS")
    args = parser.parse_args()
    tokens = register(args.base, 300)
    with open(args.out + ".tokens", "w") as file:
        file.write("\n".join(tokens))
    stop = multiprocessing.Event()
    latencies = multiprocessing.Queue()
    processes = [multiprocessing.Process(target=devices, args=(args.base, tokens, stop)),
                 multiprocessing.Process(target=probe, args=(args.base, stop, latencies))]
    for process in processes:
        process.start()
    duration = int(args.minutes * 60)
    wrk = subprocess.Popen(
        ["wrk", "-t1", "-c8", f"-d{duration}s", "-s", args.wrk_script, args.base],
        env={**os.environ, "SOAK_TOKENS": args.out + ".tokens"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    started = time.time()
    with open(args.out, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(
            ["seconds", "rss_bytes", "rss_anon_bytes", "open_fds", "healthz_p99_ms", "healthz_max_ms", "probes",
             "ledger_file_bytes"])
        while time.time() - started < duration:
            time.sleep(10)
            window = []
            while True:
                try:
                    window.append(latencies.get_nowait())
                except queue.Empty:
                    break
            window.sort()
            rss, anon, fds = sample(args.pid)
            p99 = window[max(0, int(len(window) * 0.99) - 1)] * 1000 if window else 0
            ledger_bytes = os.path.getsize(args.ledger_file) if args.ledger_file else 0
            writer.writerow([round(time.time() - started), rss, anon, fds, round(p99, 2),
                             round(window[-1] * 1000, 2) if window else 0, len(window), ledger_bytes])
            file.flush()
    stop.set()
    for process in processes:
        process.join(timeout=20)
        if process.is_alive():
            process.terminate()
    print(wrk.communicate()[0].decode())


if __name__ == "__main__":
    main()
