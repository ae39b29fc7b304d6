"""The cluster as operators and hostile clients meet it (docs/cluster.md, "Failures"): a replica behind blocks
larger than one read catches up, a node id and an advertise URL are claimed once, a client's forwarding header is
ignored, and through a follower every answer is the leader's.

Each case runs on a fresh cluster (cluster_harness) and ends, like the others, with every acknowledged write on
every replica and identical logs."""

import hashlib
import json
import re
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from cluster_harness import ADMIN, AUDITOR, CLIENT, PEER, PROJECT, SECOND, Node, free_port, secrets, wait_until

# Topic names near FCM's limit of 900 characters: a batch of a thousand subscriptions to one is about 1.1 MB of
# records, two blocks, so eight blocks in a row are more than gRPC's 2 MiB default.
LONG_TOPIC = "t" * 880


def error_lines(text):
    """The lines of a node's log at error level or above (swift-log's stream format: `<time> <level> <label> …`)."""
    return [line for line in text.splitlines() if re.match(r"^\S+ (error|critical) ", line)]


def copy_positions(node, project=PROJECT):
    """Each holder's own applied position, state and lag, as the cluster reports them."""
    return {replica["node"]: replica for entry in node.status(project)["projects"] if entry["project"] == project
            for replica in entry["replicas"]}


def test_a_replica_catches_up_through_blocks_larger_than_a_read(cluster):
    leader = cluster.nodes[cluster.wait_for_leader()]
    follower = next(node for node in cluster.nodes.values() if node is not leader)
    tokens = cluster.register_many(1000)
    assert all(tokens)
    follower.kill()
    seq = 0
    for index in range(12):
        response = requests.post(f"{leader.base}/iid/v1:batchAdd", headers={"Authorization": f"Bearer {ADMIN}"},
                                 json={"to": f"/topics/{LONG_TOPIC}-{index}", "registration_tokens": tokens},
                                 timeout=120)
        assert response.status_code == 200, response.text[:300]
        assert all(result == {} for result in response.json()["results"])
        seq = int(response.headers["x-ledger-seq"])
    last = requests.get(f"{leader.base}/v1/projects/{PROJECT}/audit/events", params={"fromSeq": seq, "limit": 1},
                        headers={"Authorization": f"Bearer {AUDITOR}"}, timeout=30).json()
    head = (seq, last["hash"])
    blocks = cluster.etcd.blocks()
    assert len([block for block in blocks if block[0] > len(tokens)]) >= 24, "each batch is two blocks or more"

    def at_the_head():
        replica = copy_positions(leader).get(follower.node_id)
        # Its state is reported apart from its position, at most half a second later.
        return (replica and (replica["appliedSeq"], replica["headHash"]) == head and replica["state"] == "current"
                and replica)

    # Restarted: it applies the twelve batches from etcd, about 13 MB, within a minute.
    follower.start()
    replica = wait_until(at_the_head, 60, f"{follower.node_id} to reach seq {head[0]} after its restart")
    assert replica["state"] == "current" and replica["lagEvents"] == 0, replica
    # A node replacing it under the same id, on an empty disk: the whole log from etcd.
    follower.stop()
    shutil.rmtree(follower.data)
    follower.data.mkdir()
    follower.start()
    replica = wait_until(at_the_head, 60, f"an empty {follower.node_id} to reach seq {head[0]}")
    assert replica["state"] == "current" and replica["lagEvents"] == 0, replica
    assert not error_lines(follower.log_path.read_text())
    cluster.check(tokens)
    cluster.verify_all()


def test_a_node_id_and_an_advertise_url_are_claimed_once(cluster):
    n1, n2, n3 = (cluster.nodes[node_id] for node_id in ("n1", "n2", "n3"))
    # A second process under n2's id (another port, another disk): refused at start, naming the holder.
    impostor = Node(cluster.binary, cluster.root, "n2", cluster.etcd.endpoints, name="impostor")
    code, output = impostor.run_to_exit()
    assert code == 1, output
    assert f"cluster.nodeId n2 is held by a live node advertising {n2.base}" in output, output
    # Another id with n3's URL: refused too.
    thief = Node(cluster.binary, cluster.root, "n9", cluster.etcd.endpoints, advertise=n3.base, name="thief")
    code, output = thief.run_to_exit()
    assert code == 1, output
    assert f"cluster.advertiseURL {n3.base} is advertised by live node n3" in output, output
    # Neither took anything: n2 is a member at its own URL, and writes of both projects go on through every node.
    nodes = {node["id"]: node for node in n1.status()["nodes"]}
    assert nodes["n2"] == {"id": "n2", "url": n2.base, "alive": True}
    assert "n9" not in nodes
    acknowledged = []
    for node in (n1, n2, n3):
        for project in (PROJECT, SECOND):
            token = node.register(project=project)
            assert token, f"a write of {project} through {node.node_id} was refused"
            if project == PROJECT:
                acknowledged.append(token)
    # Its own process, killed, is not a live holder: a restart waits for the dead lease and joins.
    n2.kill()
    n2.start()
    wait_until(lambda: n2.register(), 30, "n2 to take writes after its restart")
    assert "held by a live node" not in n2.log_path.read_text()
    cluster.check(acknowledged)
    cluster.verify_all()


def test_through_a_follower_every_answer_is_the_leaders(cluster):
    leader = cluster.nodes[cluster.wait_for_leader()]
    follower = next(node for node in cluster.nodes.values() if node is not leader)
    logged = len(follower.log_path.read_text())
    # A body over the limit (1 MiB): 413, in each route's own shape, the same from both.
    oversized = json.dumps({"message": {"topic": "a", "data": {"k": "x" * (2 << 20)}}})
    routes = [(f"/v1/projects/{PROJECT}/messages:send", {"Authorization": f"Bearer {ADMIN}"}),
              ("/iid/v1:batchAdd", {"Authorization": f"Bearer {ADMIN}"}),
              (f"/v1/projects/{PROJECT}/registrations", {"x-goog-api-key": CLIENT})]
    for path, headers in routes:
        answers = [requests.post(node.base + path, data=oversized,
                                 headers={**headers, "content-type": "application/json"}, timeout=30)
                   for node in (leader, follower)]
        assert [answer.status_code for answer in answers] == [413, 413], (path, [a.text[:200] for a in answers])
        assert answers[0].json() == answers[1].json(), path
    # Other refusals pass through as the leader gave them.
    for body, status in (({"message": {"topic": "a", "condition": "'b' in topics"}}, 400), ("{", 400)):
        answers = [requests.post(f"{node.base}/v1/projects/{PROJECT}/messages:send",
                                 headers={"Authorization": f"Bearer {ADMIN}", "content-type": "application/json"},
                                 data=body if isinstance(body, str) else json.dumps(body), timeout=10)
                   for node in (leader, follower)]
        assert [answer.status_code for answer in answers] == [status, status]
        assert answers[0].json() == answers[1].json()
    assert not error_lines(follower.log_path.read_text()[logged:])

    # Routing comes before authentication: a write through a follower is authenticated once, by the leader
    # that serves it (a wrong key is refused there, with the leader's answer).
    def refused_sends(node):
        lines = requests.get(f"{node.base}/metrics", timeout=10).text.splitlines()
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines
                   if line.startswith("ledger_http_requests_total{") and "messages:send" in line
                   and 'status="401"' in line)
    before = refused_sends(leader)
    wrong = requests.post(f"{follower.base}/v1/projects/{PROJECT}/messages:send",
                          headers={"Authorization": "Bearer not-a-key"}, json={"message": {"topic": "a"}}, timeout=10)
    assert wrong.status_code == 401 and wrong.json()["error"]["status"] == "UNAUTHENTICATED"
    assert refused_sends(leader) == before + 1

    # /v1/cluster: a key sees the projects it is a key of, and no other.
    def projects_seen(secret):
        response = requests.get(f"{follower.base}/v1/cluster", headers={"Authorization": f"Bearer {secret}"},
                                timeout=10)
        assert response.status_code == 200, response.text
        return {entry["project"] for entry in response.json()["projects"]}
    assert projects_seen(ADMIN) == {PROJECT}
    assert projects_seen(AUDITOR) == {PROJECT}
    assert projects_seen(secrets(SECOND)["admin"]) == {SECOND}
    # The peer secret is no one's bearer here.
    assert requests.get(f"{follower.base}/v1/cluster", headers={"Authorization": f"Bearer {PEER}"},
                        timeout=10).status_code == 401
    cluster.check([node.register() for node in cluster.nodes.values()])


@pytest.fixture
def two_replica_cluster():
    """Three nodes, each project held by two of them: the third holds no copy, and forwards."""
    from conftest import stopped_afterwards
    from cluster_harness import Cluster
    import os
    with stopped_afterwards(Cluster(os.environ["LEDGER_BIN"], replicas=2)) as running:
        yield running.start()


def test_a_clients_forwarding_header_is_ignored(two_replica_cluster):
    cluster = two_replica_cluster
    nodes = list(cluster.nodes.values())
    tokens = [node.register() for node in nodes for _ in range(3)]
    assert all(tokens)
    holders = wait_until(lambda: len(copy_positions(nodes[0])) == 2 and set(copy_positions(nodes[0])), 30,
                         "two holders of the project to report")
    outsider = next(node for node in nodes if node.node_id not in holders)
    assert not outsider.holds(PROJECT)
    # The headers a node puts on what it forwards, sent by a client (with a wrong peer secret, or none): the
    # outsider still forwards, and the answer is the leader's, not an empty log of its own.
    for spoofed in ({"x-ledger-forwarded-by": "n1"}, {"x-ledger-forwarded-by": "n1", "x-ledger-peer": "guess"}):
        honest = outsider.events()
        assert len(honest) >= len(tokens)
        response = requests.get(f"{outsider.base}/v1/projects/{PROJECT}/audit/events",
                                params={"fromSeq": 1, "limit": 10000},
                                headers={"Authorization": f"Bearer {AUDITOR}", **spoofed}, timeout=10)
        assert response.status_code == 200
        lines = [json.loads(line) for line in response.text.splitlines() if line]
        assert [(line["seq"], line["hash"]) for line in lines] == honest
        write = requests.post(f"{outsider.base}/v1/projects/{PROJECT}/registrations",
                              headers={"x-goog-api-key": CLIENT, **spoofed}, json={}, timeout=10)
        assert write.status_code == 200, write.text
        tokens.append(write.json()["token"])
    assert not outsider.holds(PROJECT), "the outsider served a client's request from a copy of its own"
    cluster.check(tokens)
    cluster.verify_all()


def test_streams_through_a_non_holder_leave_its_writes_room(two_replica_cluster):
    cluster = two_replica_cluster
    nodes = list(cluster.nodes.values())
    holders = wait_until(lambda: len(copy_positions(nodes[0])) == 2 and set(copy_positions(nodes[0])), 30,
                         "two holders of the project to report")
    outsider = next(node for node in nodes if node.node_id not in holders)
    with ThreadPoolExecutor(16) as pool:
        devices = list(pool.map(lambda _: outsider.register(), range(300)))
    assert all(devices)
    # 300 event streams through the outsider, held open, with nothing but the public client key: each is
    # forwarded to a holder and stays open.
    host, port = outsider.base.split("://", 1)[1].split(":")
    streams = []
    try:
        for token in devices:
            sock = socket.create_connection((host, int(port)), timeout=10)
            sock.sendall(f"GET /v1/projects/{PROJECT}/registrations/{token}/messages:stream HTTP/1.1\r\n"
                         f"Host: {host}\r\nx-goog-api-key: {CLIENT}\r\nAccept: text/event-stream\r\n\r\n".encode())
            streams.append(sock)
        # Every stream is answered (its headers arrive), so each holds a forwarded connection now.
        for sock in streams:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(4096)
                assert chunk, "a stream was closed"
                head += chunk
            assert head.startswith(b"HTTP/1.1 200"), head[:200]
        # A write through the outsider still answers at once.
        for _ in range(5):
            started = time.monotonic()
            token = outsider.register(timeout=10)
            elapsed = time.monotonic() - started
            assert token and elapsed < 1, f"a write took {elapsed:.2f} s with 300 streams open"
            devices.append(token)
    finally:
        for sock in streams:
            sock.close()
    cluster.check(devices)


def test_a_forked_replica_is_kept_aside_and_seeded_from_a_peer(cluster):
    leader = cluster.nodes[cluster.wait_for_leader()]
    forked = next(node for node in cluster.nodes.values() if node is not leader)
    before = [node.register() for node in cluster.nodes.values() for _ in range(3)]
    cluster.check(before)
    forked.stop()
    # Its copy gets an event the cluster never had: a node of its own (no cluster section) on its data.
    config = cluster.root / "alone.json"
    config.write_text(json.dumps({"projects": {PROJECT: {"clientApiKeys": [
        "sha256:" + hashlib.sha256(CLIENT.encode()).hexdigest()]}}}))
    port = free_port()
    alone = subprocess.Popen([cluster.binary, "serve", "--config", str(config), "--data", str(forked.data),
                              "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: requests.get(base + "/healthz", timeout=1).ok, 30, "the node of its own")
        response = requests.post(f"{base}/v1/projects/{PROJECT}/registrations", headers={"x-goog-api-key": CLIENT},
                                 json={}, timeout=10)
        assert response.status_code == 200
        stray = response.json()["token"]
    finally:
        alone.terminate()
        alone.wait()
    # The cluster writes on meanwhile: its next seqs are other events.
    during = [leader.register() for _ in range(5)]
    # First without its peer secret: no peer's copy can be had, so it stays damaged — says so, serves nothing of
    # its own, and logs the damage once and what came of it once, not at every try (one every 2 s).
    configured = forked.config.read_text()
    without_secret = json.loads(configured)
    del without_secret["cluster"]["peerSecretFile"]
    forked.config.write_text(json.dumps(without_secret))
    forked.start()

    def damaged():
        ready = requests.get(forked.base + "/readyz", timeout=5)
        return ready.status_code == 503 and any("replica is damaged" in reason for reason in ready.json()["reasons"])
    wait_until(damaged, 60, f"{forked.node_id} to report its fork")
    time.sleep(8)  # four retries: each found the fork again
    assert forked.log_path.read_text().count("cluster replica is damaged") == 2, forked.log_path.read_text()
    assert damaged() and not list((forked.data / ".quarantine").glob("*"))
    answer = requests.get(f"{forked.base}/iid/info/{stray}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
    assert answer.status_code == 404, answer.text
    forked.stop()
    forked.config.write_text(configured)
    logged = len(forked.log_path.read_text())
    forked.start()
    # Seen as a fork: its copy is moved aside (path logged), and a peer's copy takes its place.
    wait_until(lambda: "a forked copy of a project's ledger was moved aside" in forked.log_path.read_text(), 60,
               f"{forked.node_id} to move its forked copy aside")
    kept = list((forked.data / ".quarantine").glob(f"{PROJECT}-*/data.mdb"))
    assert len(kept) == 1 and stray.encode() in kept[0].read_bytes(), kept
    assert str(kept[0]) in forked.log_path.read_text()
    # Said once, not at every try.
    assert forked.log_path.read_text()[logged:].count("cluster replica is damaged") == 1
    after = [node.register() for node in cluster.nodes.values()]
    log = cluster.check(before + during + after)
    # The fork is served by no node: the stray device is unknown everywhere, through the forked node too, even
    # to a client that claims to be a peer.
    for node in cluster.nodes.values():
        for headers in ({}, {"x-ledger-forwarded-by": "n1"}):
            answer = requests.get(f"{node.base}/iid/info/{stray}",
                                  headers={"Authorization": f"Bearer {ADMIN}", "x-ledger-min-seq": str(len(log)),
                                           **headers}, timeout=10)
            assert answer.status_code == 404, (node.node_id, answer.text)
    assert requests.get(forked.base + "/readyz", timeout=5).status_code == 200
    cluster.verify_all()
