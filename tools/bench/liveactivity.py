#!/usr/bin/env python3
"""Live Activity delivery (issue 66): a topic's `liveactivity` update fanned out to every follower, and an iOS 18
broadcast, pushed by `ledger serve` (release build), in one run:

- the fan-out: N `ios` registrations with APNs tokens, loaded by `ledger import` into topic `everyone`, each
  following the topic's Live Activity with an activity token of its own (`PUT …/liveActivities/everyone`, through
  the API, 64 at a time: `ledger import` takes no follows). Against `nghttpd --echo-upload` (as
  tools/bench/apns-fanout.py's wire row), in turn: h2load's rate with an alert POST and with a `liveactivity` POST,
  then `--rounds` times a plain alert send to `everyone` (N pushes to the devices' own tokens) and a `liveactivity`
  `update` to `everyone` (N pushes to the activity tokens), each ack → the last push accepted, with the server's
  and nghttpd's CPU per push;
- the broadcast: the same ledger served against the APNs stand-in (IntegrationTests/apns-standin; nghttpd cannot be
  Apple's channel-management API, it answers the creation 200 without an `apns-channel-id`), `apns.broadcast` on,
  a channel created for `everyone` (N members and followers) and for `nobody` (no member), then `--sends` updates to
  each, one at a time: from the send's acknowledgement (the 200 of messages:send, as the client reads it) to the
  stand-in's answer to the broadcast, p50 / p99 — negative when the broadcast is answered before the 200 is read
  (the pusher starts once the send is durable, as the answer does) — and from the request's start.

    tools/bench/liveactivity.py [--devices 100000] [--rounds 2] [--sends 50] [--ledger BIN] [--json OUT]
"""

import argparse
import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "IntegrationTests" / "apns-standin"))
from apns_harness import ADMIN, CLIENT, TOPIC, Ledger, StandIn, device_token, provider_token  # noqa: E402

_spec = importlib.util.spec_from_file_location("apns_fanout", HERE / "apns-fanout.py")
fanout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fanout)

LIMITS = {"registrationsPerSecond": 1_000_000, "subscriptionChangesPerSecond": 1_000_000}


def activity_token(index):
    """Follower `index`'s activity push token: 40 bytes of hex, unlike the devices' own 32-byte tokens."""
    return f"a{index + 1:079x}"


def update(event="update"):
    return {"aps": {"timestamp": int(time.time()), "event": event, "content-state": {"home": 1, "away": 0}}}


def live_message(topic):
    return {"topic": topic, "apns": {"headers": {"apns-push-type": "liveactivity", "apns-priority": "5"},
                                     "payload": update()}}


ALERT = {"topic": "everyone", "notification": {"title": "Storm warning", "body": "Gusts over 90 km/h"}}


async def follow_all(ledger, tokens, topic):
    """Every device in `tokens` follows `topic`'s Live Activity, 64 requests at a time (the device's client key)."""
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        queue = asyncio.Queue()
        for index in range(len(tokens)):
            queue.put_nowait(index)

        async def worker():
            while not queue.empty():
                index = queue.get_nowait()
                response = await client.put(ledger.url(f"/registrations/{tokens[index]}/liveActivities/{topic}"),
                                            headers={"x-goog-api-key": CLIENT},
                                            json={"pushToken": activity_token(index)})
                assert response.status_code == 200, response.text

        await asyncio.gather(*(worker() for _ in range(64)))


def h2load(base, count, payload, headers, key):
    """h2load's rate against `base`: `count` POSTs of `payload` with `headers`, 2 connections × 128 streams."""
    body = Path(tempfile.mkstemp(suffix=".json")[1])
    body.write_bytes(payload)
    command = ["h2load", "-n", str(count), "-c", "2", "-m", "128", "-d", str(body),
               "-H", f"authorization: bearer {provider_token(key)}", "-H", "content-type: application/json"]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    output = subprocess.run(command + [f"{base}/3/device/{device_token(0)}"], capture_output=True, text=True,
                            check=True).stdout
    body.unlink()
    finished = next(line for line in output.splitlines() if line.startswith("finished in"))
    codes = next(line for line in output.splitlines() if line.startswith("status codes:"))
    return {"requestsPerSecond": float(finished.split(",")[1].split()[0]), "finished": finished.strip(),
            "statusCodes": codes.strip()}


def fan_out(ledger, sink, poller, message, count, target):
    """One send to `count` devices: ack → `ledger_apns_pushes_total{outcome="accepted"}` reaches `target`."""
    cpu_before = fanout.cpu_seconds(ledger.process.pid), fanout.cpu_seconds(sink.process.pid)
    before = time.time()
    ledger.send(message)
    acknowledged = time.time()
    deadline = acknowledged + 1800
    while (accepted := fanout.accepted_pushes(ledger, poller)) < target:
        if time.time() > deadline:
            raise SystemExit(f"only {accepted - target + count} of {count} pushes accepted within 1800 s")
        time.sleep(0.2)
    elapsed = time.time() - acknowledged
    return {"pushesPerSecond": count / elapsed, "seconds": elapsed, "sendSeconds": acknowledged - before,
            "serverCPUMicrosecondsPerPush": (fanout.cpu_seconds(ledger.process.pid) - cpu_before[0]) / count * 1e6,
            "nghttpdCPUMicrosecondsPerPush": (fanout.cpu_seconds(sink.process.pid) - cpu_before[1]) / count * 1e6,
            "loadAverage": os.getloadavg()[0]}


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * fraction + 0.5) - 1)]


def broadcasts(standin):
    return [r for r in standin.requests() if r["path"] == f"/4/broadcasts/apps/{TOPIC}"]


def broadcast_latency(ledger, standin, topic, sends):
    """`sends` updates to `topic`, one at a time: each ack → the stand-in's answer to its broadcast, in ms."""
    response = httpx.post(ledger.url(f"/topics/{topic}:createLiveActivityChannel"),
                          headers={"Authorization": f"Bearer {ADMIN}"}, json={"messageStoragePolicy": 0}, timeout=30)
    assert response.status_code == 200, response.text
    channel = response.json()["channelId"]
    latencies, from_request, send_ms = [], [], []
    with httpx.Client(timeout=30) as client:
        for _ in range(sends):
            seen = len(broadcasts(standin))
            before = time.time()
            answer = client.post(ledger.url("/messages:send"), headers={"Authorization": f"Bearer {ADMIN}"},
                                 json={"message": live_message(topic)})
            acknowledged = time.time()
            assert answer.status_code == 200, answer.text
            deadline = acknowledged + 60
            while len(current := broadcasts(standin)) <= seen:
                assert time.time() < deadline, "the broadcast never arrived"
                time.sleep(0.002)
            [arrived] = current[seen:]
            assert arrived["status"] == 200 and arrived["channelId"] == channel, arrived
            latencies.append(1000 * (arrived["time"] - acknowledged))
            from_request.append(1000 * (arrived["time"] - before))
            send_ms.append(1000 * (acknowledged - before))
            time.sleep(0.05)
    return {"sends": sends, "p50Ms": percentile(latencies, 0.5), "p99Ms": percentile(latencies, 0.99),
            "maxMs": max(latencies), "minMs": min(latencies), "firstMs": latencies[0],
            "sendP50Ms": percentile(send_ms, 0.5), "sendP99Ms": percentile(send_ms, 0.99),
            "fromRequestP50Ms": percentile(from_request, 0.5), "fromRequestP99Ms": percentile(from_request, 0.99),
            "latenciesMs": [round(value, 2) for value in latencies]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2, help="alert and liveactivity fan-outs, each this often")
    parser.add_argument("--sends", type=int, default=50, help="broadcasts timed on each topic")
    parser.add_argument("--ledger", default=None, help="the ledger binary (default: a release build)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if not shutil.which("h2load"):
        raise SystemExit("h2load is missing: apt-get install -y nghttp2-client")
    binary = args.ledger or str(HERE.parent.parent / ".build-bench/release/ledger")
    os.environ["LEDGER_BIN"] = binary
    directory = tempfile.mkdtemp(prefix="liveactivity-bench-")
    data = tempfile.mkdtemp(prefix="liveactivity-bench-data-")
    result = {"devices": args.devices, "rounds": args.rounds, "loadAverageAtStart": os.getloadavg()}
    started = time.time()
    tokens = fanout.import_setup(binary, data, args.devices, 0)
    result["importSeconds"] = time.time() - started
    standin = StandIn(directory, max_streams=1000)  # its team key signs; nghttpd checks nothing
    sink = fanout.Nghttpd(directory)
    try:
        ledger = Ledger(standin, directory, data=data, limits=LIMITS, apns={
            "endpoint": sink.base, "sandboxEndpoint": sink.base, "caFile": sink.tls["ca"]})
        poller = httpx.Client()
        try:
            started = time.time()
            asyncio.run(follow_all(ledger, tokens, "everyone"))
            result["follows"] = {"seconds": time.time() - started,
                                 "perSecond": args.devices / (time.time() - started)}
            print(f"{args.devices:,} follows through the API in {result['follows']['seconds']:.0f} s",
                  file=sys.stderr)
            # h2load with the server idle, each shape of POST.
            alert_body = json.dumps({"aps": {"alert": {"body": "Gusts over 90 km/h", "title": "Storm warning"}},
                                     "from": "/topics/everyone", "gcm.message_id": "1795000000000000000"}).encode()
            live_body = json.dumps({**update(), "from": "/topics/everyone",
                                    "gcm.message_id": "1795000000000000000"}).encode()
            result["h2load"] = {
                "alert": h2load(sink.base, args.devices, alert_body, {
                    "apns-topic": TOPIC, "apns-push-type": "alert", "apns-priority": "10"}, standin.team_key),
                "liveactivity": h2load(sink.base, args.devices, live_body, {
                    "apns-topic": TOPIC + ".push-type.liveactivity", "apns-push-type": "liveactivity",
                    "apns-priority": "5"}, standin.team_key),
            }
            result["alert"], result["liveactivity"] = [], []
            target = fanout.accepted_pushes(ledger, poller)
            for _ in range(args.rounds):
                for kind, message in (("alert", ALERT), ("liveactivity", live_message("everyone"))):
                    time.sleep(2)  # the last fan-out's progress recorded
                    target += args.devices
                    row = fan_out(ledger, sink, poller, message, args.devices, target)
                    result[kind].append(row)
                    print(f"{kind}: {row['pushesPerSecond']:,.0f} pushes/s ({row['seconds']:.1f} s), server "
                          f"{row['serverCPUMicrosecondsPerPush']:.0f} µs a push, load {row['loadAverage']:.1f}",
                          file=sys.stderr)
        finally:
            poller.close()
            ledger.stop()
    finally:
        sink.stop()

    # The broadcast, against the stand-in (Apple's channel API and broadcast endpoint).
    try:
        ledger = Ledger(standin, directory, data=data, limits=LIMITS, apns={
            "broadcast": True, "channelEndpoint": standin.base, "broadcastEndpoint": standin.base})
        try:
            result["broadcast"] = {topic: broadcast_latency(ledger, standin, topic, args.sends)
                                   for topic in ("everyone", "nobody")}
        finally:
            ledger.stop()
        ledger.verify()
    finally:
        standin.stop()
        shutil.rmtree(data, ignore_errors=True)
    result["loadAverageAtEnd"] = os.getloadavg()

    h2 = result["h2load"]
    best = {kind: max(result[kind], key=lambda row: row["pushesPerSecond"]) for kind in ("alert", "liveactivity")}
    rows = "\n".join(
        f"| {kind} fan-out to nghttpd, best of {args.rounds} (ack → last push accepted) | "
        f"{best[kind]['pushesPerSecond']:,.0f} pushes/s ({best[kind]['seconds']:.1f} s), ratio to h2load "
        f"{best[kind]['pushesPerSecond'] / h2[kind]['requestsPerSecond']:.2f}, server "
        f"{best[kind]['serverCPUMicrosecondsPerPush']:.0f} µs / nghttpd "
        f"{best[kind]['nghttpdCPUMicrosecondsPerPush']:.0f} µs a push |" for kind in ("alert", "liveactivity"))
    cast = result["broadcast"]
    print(f"""
| measure | value |
|---|---|
| h2load → nghttpd, alert / liveactivity POSTs | {h2['alert']['requestsPerSecond']:,.0f} / {h2['liveactivity']['requestsPerSecond']:,.0f} req/s |
{rows}
| broadcast, ack → stand-in's answer, topic of {args.devices:,} ({args.sends} sends) | p50 {cast['everyone']['p50Ms']:.1f} ms, p99 {cast['everyone']['p99Ms']:.1f} ms (from the request: {cast['everyone']['fromRequestP50Ms']:.1f} / {cast['everyone']['fromRequestP99Ms']:.1f} ms) |
| broadcast, the same, topic without members | p50 {cast['nobody']['p50Ms']:.1f} ms, p99 {cast['nobody']['p99Ms']:.1f} ms (from the request: {cast['nobody']['fromRequestP50Ms']:.1f} / {cast['nobody']['fromRequestP99Ms']:.1f} ms) |
""")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
