"""The cluster's loops are woken by what gives them work, not by a timer (docs/cluster.md, "What wakes each loop").

Each case measures from the event that gives the loop its work to the loop's effect, and bounds it well below
the safety-net period the loop keeps, so that a loop left without its wake-up (a watch that never fires, a head
nobody raises) fails here instead of falling back, slowly, on its safety net. Each ends with the suite's checks."""

import statistics
import time

import requests

from cluster_harness import LEASE_SECONDS, PROJECT, secrets, wait_until


def _positions(node):
    """The applied seq each replica of PROJECT last reported to etcd, by node (`GET /v1/cluster`)."""
    project = next(p for p in node.status()["projects"] if p["project"] == PROJECT)
    return {replica["node"]: replica["appliedSeq"] for replica in project["replicas"]}


def test_every_replica_reports_a_write_to_etcd_as_soon_as_it_holds_it(cluster):
    leader = cluster.nodes[cluster.wait_for_leader()]
    assert all(node.register() for node in cluster.nodes.values())
    delays = []
    tokens = []
    for _ in range(10):
        # Each write comes after a quiet moment longer than the reporters' rate (half a second), so that it is
        # the first move of the head the reporters see: they write it at once, or not before their next timer.
        time.sleep(0.6)
        response = requests.post(f"{leader.base}/v1/projects/{PROJECT}/registrations",
                                 headers={"x-goog-api-key": secrets(PROJECT)["client"]},
                                 json={"platform": "android"}, timeout=10)
        assert response.status_code == 200, response.text
        answered = time.monotonic()
        seq = int(response.headers["x-ledger-seq"])
        tokens.append(response.json()["token"])
        wait_until(lambda: len(_positions(leader)) == 3 and min(_positions(leader).values()) >= seq, 10,
                   "every replica to report the write", interval=0.005)
        delays.append(time.monotonic() - answered)
    # Woken by the head, a report takes an apply, one etcd write and this status read (about 0.1 s here); a
    # half-second timer would add a quarter of a second to the median.
    assert statistics.median(delays) < 0.2, delays
    cluster.check(tokens)
    cluster.verify_all()


def test_a_restarted_node_joins_as_soon_as_its_dead_lease_expires(cluster):
    n2 = cluster.nodes["n2"]
    n2.kill()
    killed = time.monotonic()
    # It answers /healthz only once it has claimed its membership, which its killed process's record holds
    # until that lease expires (within the lease's seconds of the kill, as etcd checks expiries twice a second).
    n2.start()
    joined = time.monotonic() - killed
    # The claim is woken by the record's deletion; without that wake-up it would wait out its whole patience
    # (twice the lease and a second) and try once more.
    assert joined < LEASE_SECONDS + 1.5, joined
    assert "held by a live node" not in n2.log_path.read_text()
    tokens = [node.register() for node in cluster.nodes.values()]
    assert all(tokens)
    cluster.check(tokens)
    cluster.verify_all()


def test_etcd_is_trimmed_as_soon_as_every_holder_reports_what_it_applied(trimming_cluster):
    cluster = trimming_cluster
    cluster.wait_for_leader()
    tokens = [node.register() for _ in range(20) for node in cluster.nodes.values()]
    assert all(tokens)
    written = time.monotonic()
    head = len(cluster.converged())
    # etcd keeps 10 events behind the tail (one registration a block here, give or take a group commit): the
    # leader trims at the holders' next reports, not at a timer's next turn (its safety net is 30 s).
    wait_until(lambda: cluster.etcd.blocks()[0][0] > head - 20, 5, "etcd to trim what every holder applied",
               interval=0.1)
    assert time.monotonic() - written < 8
    cluster.check(tokens)
    cluster.verify_all()
