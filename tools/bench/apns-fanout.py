#!/usr/bin/env python3
"""The APNs fan-out benchmark: one topic send to N devices with APNs tokens, pushed by `ledger serve` (release
build), each rate against h2load sending the same request to the same sink in the same run:

- the wire's speed: to `nghttpd --echo-upload` (Debian's nghttp2-server, C, over TLS), which answers every POST
  with 200 at once — the row the target (≥ 50 % of h2load) is held to;
- the behaviour: to the APNs stand-in (IntegrationTests/apns-standin, Python, one core), which checks every
  request as APNs would and bounds both rates near 4,000/s; also p50/p99 from the send's acknowledgement to the
  stand-in's receipt at 10,000 devices, and the server's RSS before and during the fan-out.

    tools/bench/apns-fanout.py [--devices 100000] [--latency-devices 10000] [--ledger BIN] [--json OUT]
                               [--import-setup] [--only-wire]

The devices are registered through the API (64 at a time), or with --import-setup loaded by `ledger import`
(registrations, APNs tokens and subscriptions as JSON lines) before the server starts: how a million are set up
in minutes rather than half an hour.

The stand-in is Python (asyncio + h2, one core): it bounds both rates, which hid the provider's own cost (108 %
of h2load against it, 15 % against nghttpd, issue 53). nghttpd's ceiling is the wire's."""

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "IntegrationTests" / "apns-standin"))
from apns_harness import CLIENT, TOPIC, Ledger, StandIn, device_token, provider_token  # noqa: E402
from ledger_server import _free_port, make_certificates  # noqa: E402


def cpu_seconds(pid):
    """User + system CPU time of `pid` so far (/proc/PID/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid):
    """(VmRSS, RssAnon, RssFile) of `pid` in KiB: the file-backed part is LMDB's map, pages of the ledger file
    that the kernel can drop; the anonymous part is the server's own memory."""
    values = {}
    for line in open(f"/proc/{pid}/status"):
        key = line.split(":")[0]
        if key in ("VmRSS", "RssAnon", "RssFile"):
            values[key] = int(line.split()[1])
    return values.get("VmRSS", 0), values.get("RssAnon", 0), values.get("RssFile", 0)


class RSSSampler(threading.Thread):
    """The peak RSS of `pid` (total, anonymous, file-backed, each its own peak), sampled every 20 ms."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.running = pid, (0, 0, 0), True

    def run(self):
        while self.running:
            self.peak = tuple(max(a, b) for a, b in zip(self.peak, rss_kib(self.pid)))
            time.sleep(0.02)


async def register_all(ledger, count):
    """`count` ios registrations with APNs tokens, 64 at a time; their registration tokens in order."""
    tokens = [None] * count
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        queue = asyncio.Queue()
        for index in range(count):
            queue.put_nowait(index)

        async def worker():
            while not queue.empty():
                index = queue.get_nowait()
                response = await client.post(ledger.url("/registrations"), headers={"x-goog-api-key": CLIENT},
                                             json={"platform": "ios", "apnsToken": device_token(index)})
                assert response.status_code == 200, response.text
                tokens[index] = response.json()["token"]

        await asyncio.gather(*(worker() for _ in range(64)))
    return tokens


def import_setup(binary, data, count, latency_count):
    """Loads `count` ios registrations with APNs tokens, all in topic `everyone` and the first `latency_count` in
    `latency`, into an empty ledger with `ledger import`; returns their registration tokens."""
    from apns_harness import PROJECT
    tokens = [f"d{index:07d}:APA91b{'x' * 140}" for index in range(count)]
    lines = Path(data) / "setup.jsonl"
    with open(lines, "w") as out:
        for index, token in enumerate(tokens):
            out.write(json.dumps({"op": "register", "token": token, "platform": "ios"}) + "\n")
            out.write(json.dumps({"op": "setApnsToken", "token": token, "apnsToken": device_token(index)}) + "\n")
            out.write(json.dumps({"op": "subscribe", "token": token, "topic": "everyone"}) + "\n")
            if index < latency_count:
                out.write(json.dumps({"op": "subscribe", "token": token, "topic": "latency"}) + "\n")
    subprocess.run([binary, "import", "--data", data, "--project", PROJECT, str(lines)], check=True,
                   stdout=subprocess.DEVNULL)
    lines.unlink()
    return tokens


def stats(standin, times=False):
    return httpx.get(standin.control + "/stats" + ("?times=1" if times else ""), timeout=120).json()


def wait_count(standin, count, timeout):
    deadline = time.time() + timeout
    while True:
        current = stats(standin)
        if current["count"] >= count:
            return current
        if time.time() > deadline:
            raise SystemExit(f"only {current['count']} of {count} pushes arrived within {timeout} s")
        time.sleep(0.2)


def h2load(standin, count, payload, base=None):
    """h2load's rate against the stand-in (or the sink at `base`): `count` POSTs of `payload` with a provider token
    the stand-in accepts, over 2 connections of up to 128 streams each (what the server uses: 2 connections, 256
    pushes in flight)."""
    body = Path(tempfile.mkstemp(suffix=".json")[1])
    body.write_bytes(payload)
    token = provider_token(standin.team_key)
    command = ["h2load", "-n", str(count), "-c", "2", "-m", "128", "-d", str(body),
               "-H", f"authorization: bearer {token}", "-H", f"apns-topic: {TOPIC}", "-H", "apns-push-type: alert",
               "-H", "apns-priority: 10", "-H", "content-type: application/json",
               f"{base or standin.base}/3/device/{device_token(0)}"]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    finished = next(line for line in output.splitlines() if line.startswith("finished in"))
    succeeded = next(line for line in output.splitlines() if line.startswith("status codes:"))
    rate = float(finished.split(",")[1].split()[0])
    return rate, finished.strip(), succeeded.strip()


class Nghttpd:
    """`nghttpd --echo-upload` over TLS on a free port, with a certificate the ledger trusts as its APNs `caFile`."""

    def __init__(self, directory):
        if not shutil.which("nghttpd"):
            raise SystemExit("nghttpd is missing: apt-get install -y nghttp2-server")
        self.tls = make_certificates(Path(directory), name="nghttpd")
        self.port = _free_port()
        self.base = f"https://127.0.0.1:{self.port}"
        command = ["nghttpd", "--echo-upload", "--max-concurrent-streams=1000", str(self.port)]
        if os.geteuid() == 0 and shutil.which("unshare"):
            # nghttpd writes each upload to a file under /tmp (its path is compiled in): on ext4, creating and
            # deleting 100,000 files costs it more than HTTP/2 does, and varies from run to run (h2load's rate
            # moved from 18,000 to 50,000 req/s between runs). A tmpfs of its own makes the sink's cost the wire's.
            self.files = Path(tempfile.mkdtemp(prefix="nghttpd-", dir="/dev/shm"))
            key, cert = self.files / "key.pem", self.files / "cert.pem"
            shutil.copy(self.tls["key"], key)
            shutil.copy(self.tls["cert"], cert)
            inner = " ".join(command + [str(key), str(cert)])
            command = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                       f"mount -t tmpfs tmpfs /tmp && exec {inner}"]
        else:
            self.files = None
            command += [self.tls["key"], self.tls["cert"]]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                assert self.process.poll() is None and time.time() < deadline, "nghttpd did not start"
                time.sleep(0.1)

    def stop(self):
        self.process.kill()
        self.process.wait(timeout=10)
        if self.files:
            shutil.rmtree(self.files, ignore_errors=True)


def accepted_pushes(ledger, client):
    """`ledger_apns_pushes_total{outcome="accepted"}` of the running server, read with `client` (one client for
    every look: `httpx.get` makes a TLS context each time, and 5 a second took a tenth of a core from the run)."""
    for line in client.get(ledger.base + "/metrics", timeout=30).text.splitlines():
        if line.startswith('ledger_apns_pushes_total{outcome="accepted"}'):
            return int(float(line.split()[-1]))
    return 0


def wire_row(args, standin, directory, data, payload):
    """The fan-out to nghttpd against h2load to nghttpd, in this run: a server on the same ledger pushes one new
    send to every device (the earlier sends' pushes are recorded, so only this one is owed)."""
    sink = Nghttpd(directory)
    try:
        rate, finished, codes = h2load(standin, args.devices, payload, base=sink.base)
        ledger = Ledger(standin, directory, data=data, apns={
            "endpoint": sink.base, "sandboxEndpoint": sink.base, "caFile": sink.tls["ca"]})
        poller = httpx.Client()
        try:
            cpu_before = cpu_seconds(ledger.process.pid), cpu_seconds(sink.process.pid)
            before = time.time()
            ledger.send({"topic": "everyone", "notification": {"title": "Storm warning", "body": "Gusts over 90"}})
            acknowledged = time.time()
            deadline = acknowledged + 1800
            while (count := accepted_pushes(ledger, poller)) < args.devices:
                if time.time() > deadline:
                    raise SystemExit(f"only {count} of {args.devices} pushes accepted by nghttpd within 1800 s")
                # Each look reads /metrics: often enough to time the end within 1 % at 100,000 pushes, seldom
                # enough not to take the CPU the fan-out and nghttpd share.
                time.sleep(0.2)
            elapsed = time.time() - acknowledged
            # CPU per push, the server's and nghttpd's: what bounds the rate when the two cores are full.
            server_cpu = (cpu_seconds(ledger.process.pid) - cpu_before[0]) / args.devices * 1e6
            sink_cpu = (cpu_seconds(sink.process.pid) - cpu_before[1]) / args.devices * 1e6
        finally:
            poller.close()
            ledger.stop()
    finally:
        sink.stop()
    pushes = args.devices / elapsed
    return {"h2load": {"requestsPerSecond": rate, "finished": finished, "statusCodes": codes},
            "fanOut": {"pushesPerSecond": pushes, "seconds": elapsed, "sendSeconds": acknowledged - before,
                       "serverCPUMicrosecondsPerPush": server_cpu, "nghttpdCPUMicrosecondsPerPush": sink_cpu},
            "ratioToH2load": pushes / rate}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=100_000)
    parser.add_argument("--latency-devices", type=int, default=10_000)
    parser.add_argument("--ledger", default=None, help="the ledger binary (default: a release build)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--import-setup", action="store_true", help="set the devices up with `ledger import`")
    parser.add_argument("--no-h2load", action="store_true", help="the fan-out alone (for its RSS at a million)")
    parser.add_argument("--only-wire", action="store_true", help="the nghttpd row alone")
    args = parser.parse_args()
    if not shutil.which("h2load"):
        raise SystemExit("h2load is missing: apt-get install -y nghttp2-client")
    os.environ["LEDGER_BIN"] = args.ledger or str(HERE.parent.parent / ".build-bench/release/ledger")
    directory = tempfile.mkdtemp(prefix="apns-bench-")
    standin = StandIn(directory, max_streams=1000, summary_only=True)
    started = time.time()
    data = None
    if args.import_setup:
        data = tempfile.mkdtemp(prefix="apns-bench-data-")
        import_setup(os.environ["LEDGER_BIN"], data, args.devices, args.latency_devices)
    ledger = Ledger(standin, directory, data=data, limits={
        "registrationsPerSecond": 1_000_000, "subscriptionChangesPerSecond": 1_000_000})
    result = {"devices": args.devices, "latencyDevices": args.latency_devices, "importSetup": args.import_setup}
    try:
        if not args.import_setup:
            tokens = asyncio.run(register_all(ledger, args.devices))
            ledger.batch_add(tokens, "everyone")
            ledger.batch_add(tokens[:args.latency_devices], "latency")
        print(f"set up {args.devices} devices in {time.time() - started:.0f} s", file=sys.stderr)
        message = {"topic": "everyone", "notification": {"title": "Storm warning", "body": "Gusts over 90 km/h"}}
        payload = json.dumps({"aps": {"alert": {"body": "Gusts over 90 km/h", "title": "Storm warning"}},
                              "from": "/topics/everyone", "gcm.message_id": "1795000000000000000"}).encode()

        if args.only_wire:
            ledger.stop()
            result["wire"] = wire_row(args, standin, directory, ledger.data, payload)
            wire = result["wire"]
            print(f"nghttpd: h2load {wire['h2load']['requestsPerSecond']:,.0f} req/s, ledger serve "
                  f"{wire['fanOut']['pushesPerSecond']:,.0f} pushes/s ({wire['fanOut']['seconds']:.1f} s), ratio "
                  f"{wire['ratioToH2load']:.2f}; CPU per push: server "
                  f"{wire['fanOut']['serverCPUMicrosecondsPerPush']:.0f} µs, nghttpd "
                  f"{wire['fanOut']['nghttpdCPUMicrosecondsPerPush']:.0f} µs")
            if args.json:
                Path(args.json).write_text(json.dumps(result, indent=2))
            return

        # h2load first, against a stand-in with nothing else to do.
        rate = None
        if not args.no_h2load:
            rate, finished, codes = h2load(standin, args.devices, payload)
            result["h2load"] = {"requestsPerSecond": rate, "finished": finished, "statusCodes": codes}
            standin.reset()

        # The fan-out: from the send's acknowledgement to the last push the stand-in answered.
        baseline = rss_kib(ledger.process.pid)
        sampler = RSSSampler(ledger.process.pid)
        sampler.start()
        before = time.time()
        ledger.send(message)
        acknowledged = time.time()
        done = wait_count(standin, args.devices, timeout=1800)
        sampler.running = False
        sampler.join()
        elapsed = done["last"] - acknowledged
        result["fanOut"] = {
            "pushesPerSecond": args.devices / elapsed, "seconds": elapsed, "sendSeconds": acknowledged - before,
            "statuses": done["statuses"],
            "rssBeforeMiB": baseline[0] / 1024, "rssPeakMiB": sampler.peak[0] / 1024,
            "rssGrowthMiB": (sampler.peak[0] - baseline[0]) / 1024,
            "anonymousBeforeMiB": baseline[1] / 1024, "anonymousPeakMiB": sampler.peak[1] / 1024,
            "anonymousGrowthMiB": (sampler.peak[1] - baseline[1]) / 1024,
            "fileBackedBeforeMiB": baseline[2] / 1024, "fileBackedPeakMiB": sampler.peak[2] / 1024,
        }
        if rate:
            result["ratioToH2load"] = result["fanOut"]["pushesPerSecond"] / rate
        standin.reset()

        # Latency at 10,000 devices.
        time.sleep(2)  # the last fan-out's progress recorded
        ledger.send({"topic": "latency", "notification": {"title": "Now", "body": "latency probe"}})
        acknowledged = time.time()
        wait_count(standin, args.latency_devices, timeout=600)
        times = sorted(t - acknowledged for t in stats(standin, times=True)["times"])
        result["latency"] = {
            "p50Ms": 1000 * times[len(times) // 2], "p99Ms": 1000 * times[int(len(times) * 0.99) - 1],
            "maxMs": 1000 * times[-1],
        }
        ledger.stop()
        result["wire"] = wire_row(args, standin, directory, ledger.data, payload)
    finally:
        ledger.stop()
        standin.stop()
    fan, wire = result["fanOut"], result["wire"]
    h2 = f"{result['h2load']['requestsPerSecond']:,.0f} req/s" if "h2load" in result else "not run"
    ratio = f"{result['ratioToH2load']:.2f}" if "ratioToH2load" in result else "—"
    print(f"""
| measure | value |
|---|---|
| h2load against nghttpd ({args.devices:,} POSTs, 2 connections × 128 streams, TLS) | {wire['h2load']['requestsPerSecond']:,.0f} req/s |
| ledger serve fan-out to nghttpd (ack → last push accepted) | {wire['fanOut']['pushesPerSecond']:,.0f} pushes/s ({wire['fanOut']['seconds']:.1f} s) |
| ratio to h2load against nghttpd (target ≥ 0.5) | {wire['ratioToH2load']:.2f} |
| CPU per push during that fan-out: server / nghttpd | {wire['fanOut']['serverCPUMicrosecondsPerPush']:.0f} µs / {wire['fanOut']['nghttpdCPUMicrosecondsPerPush']:.0f} µs |
| h2load against the stand-in ({args.devices:,} POSTs, 2 connections × 128 streams) | {h2} |
| ledger serve fan-out to {args.devices:,} APNs devices (ack → last push answered) | {fan['pushesPerSecond']:,.0f} pushes/s ({fan['seconds']:.1f} s) |
| ratio to h2load against the stand-in | {ratio} |
| ack → stand-in receipt at {args.latency_devices:,} devices | p50 {result['latency']['p50Ms']:.0f} ms, p99 {result['latency']['p99Ms']:.0f} ms |
| server RSS before → peak during the fan-out | {fan['rssBeforeMiB']:.0f} → {fan['rssPeakMiB']:.0f} MiB (+{fan['rssGrowthMiB']:.0f} MiB) |
| of it anonymous (the server's own) / file-backed (LMDB's map) | {fan['anonymousBeforeMiB']:.0f} → {fan['anonymousPeakMiB']:.0f} MiB (+{fan['anonymousGrowthMiB']:.0f}) / {fan['fileBackedBeforeMiB']:.0f} → {fan['fileBackedPeakMiB']:.0f} MiB |
""")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
