#!/usr/bin/env python3
"""The cluster benchmark (docs/performance.md, "Cluster"): replicated durable appends against one node, failover
time, and write latency in the cluster, all in one run on this machine.

    tools/bench/cluster.py [--ledger BIN] [--seconds 10] [--kills 10] [--json OUT]

1. One node without `cluster` (the baseline), then the leader of a three-node cluster on three etcd members: wrk
   (a separate process, 2 threads, 64 connections) POSTs device registrations — each one event, acknowledged only
   once durable (on the node's LMDB and in etcd's Raft log on a quorum) — for --seconds after a 2 s warm-up. Then
   the same through a follower, which forwards every write to the leader. The cluster runs twice: with
   `commitAhead: false` (each commit waits for etcd inside its LMDB transaction: the write path before commit
   ahead, measured as its baseline) and with the default (docs/cluster.md, "The leader's write path").
2. Failover: --kills times, kill -9 of the project's leader while clients register through every node, timed
   from the kill to the first registration answered 200 by a surviving node; the killed node is started again
   and the cluster settles before the next kill.

Everything runs on loopback on this machine: three etcd members (each fsyncing its own WAL), three nodes and wrk
share its cores, so the ratio is of the whole system on one machine, not of a network of three."""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "IntegrationTests" / "cluster"))
from cluster_harness import (CLIENT, LEASE_SECONDS, PROJECT, Cluster, Node, free_port, sha, secrets,  # noqa: E402
                             wait_until)

SCRIPT = ROOT / "tools" / "bench" / "wrk" / "register.lua"


def wrk(base, seconds, connections=64):
    subprocess.run(["wrk", "-t2", f"-c{connections}", "-d2s", "-s", str(SCRIPT), base], capture_output=True)
    result = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "-s",
                             str(SCRIPT), base], capture_output=True, text=True, check=True)
    line = next(line for line in result.stdout.splitlines() if line.startswith("BENCH "))
    count, micros, errors, p50, p99 = (int(value) for value in line.split()[1:])
    return {"requests": count, "seconds": micros / 1e6, "perSecond": round(count / (micros / 1e6), 1),
            "errors": errors, "p50Ms": round(p50 / 1000, 2), "p99Ms": round(p99 / 1000, 2)}


def single_node(binary, seconds):
    root = Path(tempfile.mkdtemp(prefix="ledger-bench-single-"))
    port = free_port()
    config = root / "config.json"
    keys = secrets(PROJECT)
    config.write_text(json.dumps({
        "projects": {PROJECT: {"adminKeys": [sha(keys["admin"])], "auditorKeys": [sha(keys["auditor"])],
                               "clientApiKeys": [sha(keys["client"])]}},
        "limits": {"registrationsPerSecond": 1000000}}))
    process = subprocess.Popen([binary, "serve", "--config", str(config), "--data", str(root / "data"),
                                "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: requests.get(base + "/healthz", timeout=1).ok, 30, "the single node")
        return wrk(base, seconds)
    finally:
        process.kill()
        process.wait()


def failover(cluster, kills):
    times = []
    for round_number in range(kills):
        leader = cluster.wait_for_leader(timeout=60)
        survivors = [node for node_id, node in cluster.nodes.items() if node_id != leader]
        acknowledged = threading.Event()
        stop = threading.Event()

        def client(node):
            while not stop.is_set():
                try:
                    if node.register(timeout=5):
                        acknowledged.set()
                        return
                except requests.RequestException:
                    pass
                time.sleep(0.005)

        # Writes are flowing before the kill.
        assert survivors[0].register(timeout=10)
        threads = []
        killed_at = time.monotonic()
        cluster.nodes[leader].kill()
        for node in survivors:
            for _ in range(2):
                thread = threading.Thread(target=client, args=(node,), daemon=True)
                thread.start()
                threads.append(thread)
        acknowledged.wait(timeout=60)
        elapsed = time.monotonic() - killed_at
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        times.append(round(elapsed, 3))
        print(f"  kill {round_number + 1}: leader {leader}, first acknowledged write after {elapsed:.2f} s",
              flush=True)
        cluster.nodes[leader].start()
        cluster.converged(timeout=120)
    return times


def run_cluster(arguments, label, options, kills):
    """A fresh cluster with `options`: wrk through its leader, then through a follower, then `kills` failovers;
    (leader's result, follower's result, failover times)."""
    cluster = Cluster(arguments.ledger, options=options).start()
    try:
        leader = cluster.nodes[cluster.wait_for_leader()]
        follower = next(node for node in cluster.nodes.values() if node is not leader)
        print(f"cluster leader, {label}, 64 connections…", flush=True)
        direct = wrk(leader.base, arguments.seconds)
        print(f"  {direct}", flush=True)
        print(f"cluster follower (forwarding), {label}, 64 connections…", flush=True)
        forwarded = wrk(follower.base, arguments.seconds)
        print(f"  {forwarded}", flush=True)
        times = []
        if kills:
            cluster.converged(timeout=120)
            print(f"failover, {kills} kills of the leader (lease {LEASE_SECONDS} s)…", flush=True)
            times = failover(cluster, kills)
        return direct, forwarded, times
    finally:
        cluster.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ledger", default=str(ROOT / ".build-bench" / "release" / "ledger"))
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--json")
    arguments = parser.parse_args()

    print("single node, 64 connections…", flush=True)
    single = single_node(arguments.ledger, arguments.seconds)
    print(f"  {single}", flush=True)
    # The baseline of the cluster's own write path: each commit waits for etcd inside its LMDB transaction.
    inside_leader, inside_follower, _ = run_cluster(arguments, "commitAhead false", {"commitAhead": False}, kills=0)
    replicated, forwarded, kills = run_cluster(arguments, "commit ahead (the default)", {}, kills=arguments.kills)
    results = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cores": os.cpu_count(),
        "leaseSeconds": LEASE_SECONDS,
        "singleNode": single,
        "clusterLeaderCommitInside": inside_leader,
        "clusterFollowerCommitInside": inside_follower,
        "clusterLeader": replicated,
        "clusterFollower": forwarded,
        "ratioInsideLeaderToSingle": round(inside_leader["perSecond"] / single["perSecond"], 3),
        "ratioInsideFollowerToLeader": round(inside_follower["perSecond"] / inside_leader["perSecond"], 3),
        "ratioLeaderToSingle": round(replicated["perSecond"] / single["perSecond"], 3),
        "ratioFollowerToSingle": round(forwarded["perSecond"] / single["perSecond"], 3),
        "ratioFollowerToLeader": round(forwarded["perSecond"] / replicated["perSecond"], 3),
        "failoverSeconds": kills,
        "failoverMedian": statistics.median(kills) if kills else None,
        "failoverMax": max(kills) if kills else None,
        "failoverTarget": 2 * LEASE_SECONDS,
    }
    print(json.dumps(results, indent=2))
    if arguments.json:
        Path(arguments.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
