"""The cluster survives its faults with nothing acknowledged lost and identical logs (docs/cluster.md).

Each test runs a fresh cluster of three etcd members and three nodes on loopback (cluster_harness), drives
writes through every node, injects one fault, and ends with the same checks: every registration answered 200
is on every replica, the replicas' logs are identical (every seq and hash), and `ledger verify` is sound on
each copy."""

import base64
import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from cluster_harness import ADMIN, AUDITOR, CLIENT, LEASE_SECONDS, PROJECT, SECOND, free_port, wait_until
from writers import Writers


def test_every_node_serves_every_route(cluster):
    nodes = list(cluster.nodes.values())
    tokens = [node.register() for node in nodes for _ in range(3)]
    assert all(tokens)
    # A write's answer carries its seq; a read naming it on another node sees the write.
    for writer in nodes:
        response = requests.post(f"{writer.base}/v1/projects/{PROJECT}/registrations",
                                 headers={"x-goog-api-key": "cluster-client-secret"}, json={}, timeout=10)
        assert response.status_code == 200
        seq = int(response.headers["x-ledger-seq"])
        for reader in nodes:
            info = requests.get(f"{reader.base}/iid/info/{response.json()['token']}",
                                headers={"Authorization": f"Bearer {ADMIN}", "x-ledger-min-seq": str(seq)},
                                timeout=10)
            assert info.status_code == 200, (reader.node_id, info.text)
    # Sends through any node; the message is replayed by every node's own replica.
    for node in nodes:
        sent = node.send("news")
        assert sent.status_code == 200, sent.text
        message = sent.json()["name"].rsplit("/", 1)[1]
        seq = int(sent.headers["x-ledger-seq"])
        for reader in nodes:
            replay = requests.get(f"{reader.base}/v1/projects/{PROJECT}/audit/messages/{message}",
                                  headers={"Authorization": f"Bearer {AUDITOR}", "x-ledger-min-seq": str(seq)},
                                  timeout=10)
            assert replay.status_code == 200, (reader.node_id, replay.text)
    # A bad min-seq is refused; one far ahead gets 503 after the bounded wait.
    bad = requests.get(f"{nodes[1].base}/iid/info/{tokens[0]}",
                       headers={"Authorization": f"Bearer {ADMIN}", "x-ledger-min-seq": "soon"}, timeout=10)
    assert bad.status_code == 400
    ahead = requests.get(f"{nodes[1].base}/iid/info/{tokens[0]}",
                         headers={"Authorization": f"Bearer {ADMIN}", "x-ledger-min-seq": "999999"}, timeout=10)
    assert ahead.status_code == 503
    # The status names the leader and every replica at the same head.
    status = wait_until(lambda: _settled(nodes[2].status()), 10, "every replica to report the head")
    assert {node["id"] for node in status["nodes"] if node["alive"]} == {"n1", "n2", "n3"}
    # An auditor sees its own project; no credential, nothing.
    assert requests.get(f"{nodes[0].base}/v1/cluster", timeout=10).status_code == 401
    assert requests.get(f"{nodes[0].base}/v1/cluster", headers={"Authorization": f"Bearer {AUDITOR}"},
                        timeout=10).status_code == 200
    # `ledger cluster status` reads the same from etcd.
    printed = subprocess.run([cluster.binary, "cluster", "status", "--etcd", ",".join(cluster.etcd.endpoints),
                              "--project", PROJECT, "--format", "json"], capture_output=True, text=True, timeout=30)
    assert printed.returncode == 0, printed.stderr
    shop = [p for p in _settled(nodes[0].status())["projects"] if p["project"] == PROJECT]
    assert _settled(json.loads(printed.stdout))["projects"] == shop
    cluster.check([token for token in tokens])
    cluster.verify_all()


def _settled(status):
    project = next(p for p in status["projects"] if p["project"] == PROJECT)
    replicas = project["replicas"]
    heads = {(replica["appliedSeq"], replica["headHash"]) for replica in replicas}
    current = all(replica["state"] == "current" and replica["lagEvents"] == 0 for replica in replicas)
    return status if project["leader"] and len(replicas) == 3 and len(heads) == 1 and current else None


def test_kill_9_of_the_leader_under_writes_through_every_node(cluster):
    writers = Writers(list(cluster.nodes.values())).start()
    wait_until(lambda: writers.count() > 50, 60, "writes to be acknowledged")
    leader = cluster.wait_for_leader()
    killed_at = time.monotonic()
    cluster.nodes[leader].kill()
    new_leader = cluster.wait_for_leader(excluding=leader, timeout=4 * LEASE_SECONDS + 10)
    before = writers.count()
    wait_until(lambda: writers.count() > before + 50, 60, "writes to resume under the new leader")
    failover = time.monotonic() - killed_at
    acknowledged = writers.stop()
    assert new_leader != leader
    assert failover < 6 * LEASE_SECONDS + 5
    cluster.check(acknowledged)
    # The killed node comes back and catches up.
    cluster.nodes[leader].start()
    cluster.check(acknowledged)
    cluster.verify_all()


def test_a_paused_leader_past_its_lease_does_not_acknowledge_and_nothing_forks(cluster):
    leader = cluster.wait_for_leader()
    others = [node for node_id, node in cluster.nodes.items() if node_id != leader]
    paused = cluster.nodes[leader]
    writers = Writers(list(cluster.nodes.values())).start()
    wait_until(lambda: writers.count() > 30, 60, "writes to be acknowledged")
    paused.pause()
    new_leader = cluster.wait_for_leader(excluding=leader, timeout=4 * LEASE_SECONDS + 10)
    before = writers.count()
    wait_until(lambda: writers.count() > before + 30, 60, "writes to go on under the new leader")
    paused.resume()
    # The deposed leader's writes in flight are refused by etcd's fence; what it answers 200 must be in the log.
    time.sleep(2 * LEASE_SECONDS)
    acknowledged = writers.stop()
    assert new_leader != leader
    log = cluster.check(acknowledged)
    assert len(log) >= len(acknowledged)
    cluster.verify_all()


def test_a_write_forwarded_to_a_paused_leader_is_given_up_once_another_leads(cluster):
    # The follower's HTTP client would wait for the paused leader's answer until its 30 s deadline; the forwarder
    # gives the request up with 503 as soon as the routing names another leader.
    leader = cluster.wait_for_leader()
    entry = next(node for node_id, node in cluster.nodes.items() if node_id != leader)
    assert entry.register() is not None  # the follower forwards to this leader, and keeps its connection
    paused = cluster.nodes[leader]
    paused.pause()
    try:
        with ThreadPoolExecutor(1) as pool:
            started = time.monotonic()
            answer = pool.submit(requests.post, f"{entry.base}/v1/projects/{PROJECT}/registrations",
                                 headers={"x-goog-api-key": CLIENT}, json={"platform": "android"}, timeout=60)
            new_leader = cluster.wait_for_leader(excluding=leader, timeout=4 * LEASE_SECONDS + 10)
            elected = time.monotonic()
            response = answer.result()
            answered = time.monotonic()
        assert new_leader != leader
        assert response.status_code == 503, response.text
        assert "went away" in response.json()["error"]["message"], response.text
        assert answered - elected < 3 and answered - started < 20, (answered - started, elected - started)
    finally:
        paused.resume()
    cluster.verify_all()


def test_one_etcd_member_lost(cluster):
    writers = Writers(list(cluster.nodes.values())).start()
    wait_until(lambda: writers.count() > 30, 60, "writes to be acknowledged")
    cluster.etcd.kill_member("e1")
    before = writers.count()
    wait_until(lambda: writers.count() > before + 100, 60, "writes to go on with two etcd members")
    acknowledged = writers.stop()
    cluster.check(acknowledged)
    cluster.verify_all()


def test_a_node_down_while_writes_go_on_then_back(cluster):
    leader = cluster.wait_for_leader()
    follower = next(node for node_id, node in cluster.nodes.items() if node_id != leader)
    writers = Writers([node for node in cluster.live_nodes() if node is not follower]).start()
    wait_until(lambda: writers.count() > 50, 60, "writes to be acknowledged")
    # kill -9 while it applies the writers' blocks: its copy is whole commits, and it goes on from there.
    follower.kill()
    before = writers.count()
    wait_until(lambda: writers.count() > before + 100, 60, "writes with a node down")
    follower.start()
    before = writers.count()
    wait_until(lambda: writers.count() > before + 50, 60, "writes after it came back")
    acknowledged = writers.stop()
    cluster.check(acknowledged)
    cluster.verify_all()


def test_a_fourth_node_joins(unstarted_cluster):
    # Placement by rendezvous hashing: with n1…n3 every node holds both projects; with n4, `news` moves from n1
    # to n4 and `shop` stays where it is (cluster_harness.SECOND). n1 starts alone, so it leads both; giving
    # `news` up, it resigns at once.
    cluster = unstarted_cluster.start(n1_leads=True)
    nodes = list(cluster.nodes.values())
    writers = Writers(nodes, project=SECOND).start()
    shop = [node.register() for node in nodes]
    wait_until(lambda: writers.count() > 50, 60, "writes to be acknowledged")
    assert cluster.nodes["n1"].leader(SECOND) == "n1"
    fourth = cluster.add_node("n4")
    wait_until(lambda: fourth.holds(SECOND), 30, "the fourth node to take its project")
    wait_until(lambda: fourth.leader(SECOND) in ("n2", "n3", "n4"), 3 * LEASE_SECONDS, "news to have a new leader")
    before = writers.count()
    wait_until(lambda: writers.count() > before + 50, 60, "writes with four nodes")
    acknowledged = writers.stop()
    # Writes through n4 and reads of it: of `news` from its own replica, of `shop` (not held) from shop's leader.
    assert fourth.register(project=SECOND)
    assert fourth.register()
    holders = [cluster.nodes[node_id] for node_id in ("n2", "n3", "n4")]
    cluster.check(acknowledged, nodes=holders, project=SECOND)
    assert not fourth.holds(PROJECT)
    cluster.check(shop, nodes=list(cluster.nodes.values()))
    # n1 gave `news` up: it still serves it, from the leader.
    assert cluster.nodes["n1"].events(SECOND) == holders[0].events(SECOND)
    cluster.verify_all()


def test_a_node_cut_off_from_etcd_and_its_peers(cut_off_cluster):
    cluster, network = cut_off_cluster
    cut = cluster.nodes["n1"]
    others = [cluster.nodes["n2"], cluster.nodes["n3"]]
    assert cut.leader() == "n1"
    writers = Writers(list(cluster.nodes.values())).start()
    wait_until(lambda: writers.count() > 30, 60, "writes to be acknowledged")
    network.cut()
    cut.paused = True  # unreachable from here: the harness asks the others
    new_leader = cluster.wait_for_leader(excluding="n1", timeout=4 * LEASE_SECONDS + 10)
    before = writers.count()
    wait_until(lambda: writers.count() > before + 50, 60, "writes to go on without the cut-off node")
    # The cut-off node, asked from within its namespace, acknowledges nothing: it cannot reach etcd.
    time.sleep(LEASE_SECONDS)
    assert [network.register_inside(cut) for _ in range(3)] == [503, 503, 503]
    network.heal()
    cut.paused = False
    before = writers.count()
    wait_until(lambda: writers.count() > before + 30, 60, "writes after the network healed")
    acknowledged = writers.stop()
    assert new_leader in ("n2", "n3")
    cluster.check(acknowledged)
    cluster.verify_all()


def test_a_leader_killed_between_its_commit_and_etcds_answer_restarts_with_etcds_log(cut_off_cluster):
    """A leader commits each batch to its ledger before etcd holds it (commit ahead, docs/cluster.md) and answers
    only once etcd does. Cut off from etcd, n1 commits what its clients send and answers none of it; killed
    then, its copy holds seqs etcd never took. Restarted, it rolls them back to etcd's log — counted and logged —
    and every copy is the same."""
    cluster, network = cut_off_cluster
    cut = cluster.nodes["n1"]
    assert cut.leader() == "n1"
    acknowledged = [token for token in (cut.register() for _ in range(20)) if token]
    assert len(acknowledged) == 20
    network.cut()
    cut.paused = True
    inside = [subprocess.Popen(
        ["ip", "netns", "exec", network.name, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
         "--max-time", "10", "-X", "POST", "-H", f"x-goog-api-key: {CLIENT}", "-H", "content-type: application/json",
         "-d", "{}", f"{cut.base}/v1/projects/{PROJECT}/registrations"],
        stdout=subprocess.PIPE, text=True) for _ in range(8)]
    time.sleep(0.5)
    cut.kill()
    answers = [process.communicate()[0] for process in inside]
    assert "200" not in answers, answers
    stats = subprocess.run([cut.binary, "stats", "--data", str(cut.data), "--project", PROJECT, "--format", "json"],
                           capture_output=True, text=True, timeout=60, check=True)
    local_head = json.loads(stats.stdout)["events"]
    # Another leader first: n1's lease is gone, so a transaction of n1's that the kernel still delivers once the
    # network heals (the socket of a killed process lingers) fails the fence.
    new_leader = cluster.wait_for_leader(excluding="n1", timeout=4 * LEASE_SECONDS + 10)
    etcd_tail = max(first + count - 1 for first, count, _ in cluster.etcd.blocks())
    assert local_head > etcd_tail, f"n1 committed nothing ahead of etcd ({local_head} ≤ {etcd_tail})"
    network.heal()
    cut.paused = False
    others = [node for node_id, node in cluster.nodes.items() if node_id != "n1"]
    acknowledged += [token for token in (others[0].register() for _ in range(10)) if token]
    cut.start()
    log = cluster.check(acknowledged)
    assert new_leader in ("n2", "n3")
    assert len(log) >= len(acknowledged)
    metrics = requests.get(cut.base + "/metrics", timeout=5).text
    rolled = [line for line in metrics.splitlines() if line.startswith("topicledger_cluster_rolled_back_events_total")]
    assert rolled and float(rolled[0].split()[-1]) == local_head - etcd_tail, (rolled, local_head, etcd_tail)
    assert "committed ahead of etcd" in cut.log_path.read_text()
    cluster.verify_all()


def test_a_lone_topic_send_and_its_audience_are_one_etcd_transaction(cluster):
    """A send whose audience is small carries its `audience` event in its own commit: the send and its audience
    are in one etcd block, so a send made while nothing else is written costs etcd one transaction, not two
    (docs/cluster.md, "The leader's write path")."""
    leader = cluster.nodes[cluster.wait_for_leader()]
    tokens = cluster.register_many(20)
    assert all(tokens)
    response = requests.post(f"{leader.base}/iid/v1:batchAdd", headers={"Authorization": f"Bearer {ADMIN}"},
                             json={"to": "/topics/alerts", "registration_tokens": tokens}, timeout=30)
    assert response.status_code == 200, response.text
    for _ in range(3):
        sent = leader.send("alerts")
        assert sent.status_code == 200, sent.text
        # The answer names the seq through which the send's commit was acknowledged: its audience's.
        audience_seq = int(sent.headers["x-ledger-seq"])
        events = requests.get(f"{leader.base}/v1/projects/{PROJECT}/audit/events",
                              params={"fromSeq": audience_seq - 1, "limit": 2},
                              headers={"Authorization": f"Bearer {AUDITOR}"}, timeout=10)
        kinds = [json.loads(line)["kind"] for line in events.text.splitlines() if line]
        assert kinds == ["sent", "audience"], events.text[:500]
        # etcd held both when the send was answered, in one block (one transaction's Put).
        holding = [(first, records) for first, records, _ in cluster.etcd.blocks()
                   if first <= audience_seq - 1 < first + records]
        assert len(holding) == 1 and audience_seq < sum(holding[0]), holding
    cluster.verify_all()


def test_a_commit_larger_than_a_block_is_split_and_every_part_is_applied(small_block_cluster):
    cluster = small_block_cluster
    nodes = list(cluster.nodes.values())
    tokens = cluster.register_many(1000)
    assert all(tokens)
    # One batchAdd of 1000 tokens through a follower: one commit of 1000 events, about 250 KB of records.
    follower = next(node for node in nodes if node.node_id != cluster.wait_for_leader())
    response = requests.post(f"{follower.base}/iid/v1:batchAdd", headers={"Authorization": f"Bearer {ADMIN}"},
                             json={"to": "/topics/big", "registration_tokens": tokens}, timeout=60)
    assert response.status_code == 200, response.text
    assert all(result == {} for result in response.json()["results"])
    seq = int(response.headers["x-ledger-seq"])
    blocks = cluster.etcd.blocks()
    commit = [block for block in blocks if block[2] == seq]
    assert len(commit) >= 3, blocks[-6:]
    assert sum(records for _, records, _ in commit) == 1000
    for (first, records, _), (following, _, _) in zip(commit, commit[1:]):
        assert following == first + records
    cluster.check(tokens)
    for node in nodes:
        topic = requests.get(f"{node.base}/v1/projects/{PROJECT}/audit/topics/big",
                             headers={"Authorization": f"Bearer {AUDITOR}", "x-ledger-min-seq": str(seq)}, timeout=10)
        assert topic.status_code == 200 and '"subscriberCount":1000' in topic.text.replace(" ", ""), topic.text[:300]
    cluster.verify_all()


def test_a_replica_behind_the_trimmed_log_is_seeded_from_a_peer(trimming_cluster):
    cluster = trimming_cluster
    leader = cluster.wait_for_leader()
    behind = next(node for node_id, node in cluster.nodes.items() if node_id != leader)
    before = [node.register() for node in cluster.nodes.values() for _ in range(5)]
    head = len(cluster.check(before))
    behind.stop()  # SIGTERM: its lease is revoked, so the two others are the project's holders now
    with ThreadPoolExecutor(8) as pool:
        during = list(pool.map(lambda index: cluster.live_nodes()[index % 2].register(), range(300)))
    assert all(during)
    # etcd trims what both holders applied: the stopped node's next seq is gone.
    wait_until(lambda: cluster.etcd.blocks()[0][0] > head + 1, 30, "etcd to trim the log past the stopped node")
    behind.start()
    after = [node.register() for node in cluster.nodes.values() for _ in range(5)]
    cluster.check(before + during + after)
    assert "re-seeding a replica from a peer's copy" in behind.log_path.read_text()
    # The copy made for it is gone once sent, and the one it downloaded once in place.
    wait_until(lambda: not any(list((node.data / ".snapshots").glob("*")) for node in cluster.nodes.values()
                               if (node.data / ".snapshots").exists()), 30, "the copies to be removed")
    # A peer's copy is given only for a peer secret.
    refused = requests.get(f"{behind.base}/internal/v1/projects/{PROJECT}/snapshot",
                           headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
    assert refused.status_code == 401
    cluster.verify_all()


def test_a_single_nodes_ledger_becomes_a_clusters(unstarted_cluster):
    cluster = unstarted_cluster
    # One node without `cluster`, its ledger in what will be n1's data directory.
    data = cluster.root / "n1"
    config = cluster.root / "single.json"
    config.write_text(json.dumps({"projects": {PROJECT: {"clientApiKeys": ["sha256:" + __import__("hashlib")
                                                                           .sha256(CLIENT.encode()).hexdigest()]}}}))
    port = free_port()
    single = subprocess.Popen([cluster.binary, "serve", "--config", str(config), "--data", str(data), "--port",
                               str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: requests.get(base + "/healthz", timeout=1).ok, 30, "the single node")
        before = []
        for _ in range(20):
            response = requests.post(f"{base}/v1/projects/{PROJECT}/registrations",
                                     headers={"x-goog-api-key": CLIENT}, json={}, timeout=10)
            assert response.status_code == 200
            before.append(response.json()["token"])
    finally:
        single.terminate()
        single.wait()
    # Copied to n2 before the cluster's first start; n3 starts empty and is seeded from a peer.
    shutil.copytree(data / PROJECT, cluster.root / "n2" / PROJECT)
    # n1 leads first (an empty node elected first would begin another history: docs/cluster.md).
    cluster.start(n1_leads=True)
    after = [node.register() for node in cluster.nodes.values() for _ in range(3)]
    assert all(after)
    cluster.check(before + after)
    assert "re-seeding a replica from a peer's copy" in cluster.nodes["n3"].log_path.read_text()
    cluster.verify_all()


def test_etcd_out_of_space_is_a_readiness_reason_and_a_metric(small_etcd_cluster):
    cluster = small_etcd_cluster
    nodes = list(cluster.nodes.values())
    tokens = cluster.register_many(1000)
    assert all(tokens)
    # Batches of 1000 subscriptions (about 250 KB each) until etcd refuses: writes then get 503, nothing is lost.
    acknowledged_topics = []
    for index in range(60):
        response = requests.post(f"{nodes[0].base}/iid/v1:batchAdd", headers={"Authorization": f"Bearer {ADMIN}"},
                                 json={"to": f"/topics/fill-{index}", "registration_tokens": tokens}, timeout=60)
        if response.status_code != 200:
            assert response.status_code == 503, response.text
            break
        assert all(result == {} for result in response.json()["results"])
        acknowledged_topics.append(f"fill-{index}")
    else:
        raise AssertionError("etcd never ran out of space")
    assert acknowledged_topics

    def reports_nospace(node):
        ready = requests.get(node.base + "/readyz", timeout=5)
        metrics = requests.get(node.base + "/metrics", timeout=5).text
        return (ready.status_code == 503 and "NOSPACE" in ready.text
                and 'topicledger_etcd_alarms{alarm="NOSPACE"} 1' in metrics)
    for node in nodes:
        wait_until(lambda: reports_nospace(node), 20, f"{node.node_id} to report etcd's NOSPACE alarm")
    # Every acknowledged batch is on every replica.
    for node in nodes:
        for topic in acknowledged_topics:
            answer = requests.get(f"{node.base}/v1/projects/{PROJECT}/audit/topics/{topic}",
                                  headers={"Authorization": f"Bearer {AUDITOR}"}, timeout=10)
            assert answer.status_code == 200 and '"subscriberCount":1000' in answer.text.replace(" ", ""), (
                node.node_id, topic, answer.text[:200])


def test_a_full_disk_stalls_a_follower_and_moves_the_leadership(small_disk_cluster):
    cluster = small_disk_cluster
    n1, n2, n3 = (cluster.nodes[node_id] for node_id in ("n1", "n2", "n3"))
    writers = Writers([n1, n2, n3]).start()
    wait_until(lambda: writers.count() > 50, 60, "writes to be acknowledged")

    def cannot_apply(node):
        ready = requests.get(node.base + "/readyz", timeout=5)
        return ready.status_code == 503 and "cannot apply the log" in ready.text and "disk is full" in ready.text

    def ready(node):
        return requests.get(node.base + "/readyz", timeout=5).status_code == 200

    # A follower's disk fills: it falls behind and says so, with no path in the reason; the cluster writes on,
    # through it too, and its reads are served by the leader (its own copy would miss the newest writes).
    cluster.disks["n3"].fill()
    wait_until(lambda: cannot_apply(n3), 60, "n3 to report that it cannot apply the log")
    assert str(cluster.root) not in requests.get(n3.base + "/readyz", timeout=5).text
    assert ready(n1) and ready(n2)
    before = writers.count()
    wait_until(lambda: writers.count() > before + 100, 60, "writes to go on while n3's disk is full")
    for _ in range(5):
        token = n3.register()
        assert token, "a write through n3 (forwarded to the leader) was refused"
        info = requests.get(f"{n3.base}/iid/info/{token}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
        assert info.status_code == 200, info.text
        # A client's forwarding header does not make n3 answer from its stalled copy.
        spoofed = requests.get(f"{n3.base}/iid/info/{token}",
                               headers={"Authorization": f"Bearer {ADMIN}", "x-ledger-forwarded-by": "n1"}, timeout=10)
        assert spoofed.status_code == 200, spoofed.text
    # Where operators look: its state names the reason, the metrics count it, the log says it once.
    replica = next(replica for entry in n1.status()["projects"] if entry["project"] == PROJECT
                   for replica in entry["replicas"] if replica["node"] == "n3")
    assert replica["state"].startswith("stalled: ") and "disk is full" in replica["state"], replica
    assert "topicledger_replicas_stalled 1" in requests.get(n3.base + "/metrics", timeout=5).text
    lag = requests.get(f"{n3.base}/v1/projects/{PROJECT}/metrics", headers={"Authorization": f"Bearer {ADMIN}"},
                       timeout=5).text
    assert f'topicledger_replica_lag_events{{project="{PROJECT}"}}' in lag
    assert n3.log_path.read_text().count("cluster replica is stalled") == 1
    assert n1.leader() == "n1"
    # Space returns: it catches up by itself.
    cluster.disks["n3"].free()
    wait_until(lambda: ready(n3), 60, "n3 to be ready again once its disk has space")

    # The leader's disk fills: its commit fails after etcd took the block (never acknowledged), it cannot
    # apply the block back, and it gives the leadership up; another node leads and writes go on.
    cluster.disks["n1"].fill()
    wait_until(lambda: n2.leader() not in (None, "n1"), 60, "the leadership to leave n1")
    wait_until(lambda: cannot_apply(n1), 30, "n1 to report that it cannot apply the log")
    before = writers.count()
    wait_until(lambda: writers.count() > before + 100, 60, "writes to go on with a new leader")
    cluster.disks["n1"].free()
    wait_until(lambda: ready(n1), 60, "n1 to be ready again once its disk has space")
    acknowledged = writers.stop()
    cluster.check(acknowledged)
    cluster.verify_all()


def _holders(directory, token):
    """Files under `directory` that hold `token` as text, hex or base64."""
    forms = {token.encode(), token.encode().hex().encode(), base64.b64encode(token.encode()).rstrip(b"=")}
    found = []
    for root, _, files in os.walk(directory):
        for name in files:
            content = Path(root, name).read_bytes()
            found += [os.path.join(root, name) for form in forms if form in content]
    return found


def test_an_erasure_through_a_follower_leaves_no_copy_and_no_etcd_revision_holding_the_token(trimming_cluster):
    cluster = trimming_cluster
    leader = cluster.wait_for_leader()
    follower = next(node for node_id, node in cluster.nodes.items() if node_id != leader)
    erased = follower.register()
    kept = [node.register() for node in cluster.nodes.values() for _ in range(3)]
    assert erased and all(kept)
    cluster.check([erased] + kept)
    assert all(_holders(node.data, erased) for node in cluster.nodes.values())
    old_revision = json.loads(subprocess.run(
        ["etcdctl", "--endpoints", ",".join(cluster.etcd.endpoints), "get", "x", "--write-out", "json"],
        capture_output=True, text=True, env={**os.environ, "ETCDCTL_API": "3"}, check=True).stdout)["header"][
        "revision"]

    reply = requests.post(f"{follower.base}/v1/projects/{PROJECT}/registrations/{erased}:erase",
                          headers={"Authorization": f"Bearer {ADMIN}"}, json={"reason": "GDPR Art. 17"}, timeout=60)
    assert reply.status_code == 200, reply.text
    pseudonym = reply.json()["pseudonym"]
    # More writes, so that etcd trims the blocks that named the device (10 events are kept past every replica).
    after = [node.register() for node in cluster.nodes.values() for _ in range(10)]
    events = cluster.check(kept + after)
    wait_until(lambda: all(not _holders(node.data, erased) for node in cluster.nodes.values()), 30,
               "every node's copy to be free of the token")
    # Every copy holds the same log (the same hashes: the erasure kept them) and names the pseudonym.
    for node in cluster.nodes.values():
        erasures = requests.get(f"{node.base}/v1/projects/{PROJECT}/audit/erasures",
                                headers={"Authorization": f"Bearer {AUDITOR}"}, timeout=10)
        assert [entry["device"] for entry in erasures.json()["erasures"]] == [pseudonym]
        assert node.events() == events

    # etcd: the blocks that named it are trimmed, and its history compacted past them.
    def etcd_forgot():
        current = subprocess.run(
            ["etcdctl", "--endpoints", ",".join(cluster.etcd.endpoints), "get", "--prefix",
             f"/topicledger/projects/{PROJECT}/blocks/", "--write-out", "json"],
            capture_output=True, text=True, env={**os.environ, "ETCDCTL_API": "3"}, check=True).stdout
        old = subprocess.run(
            ["etcdctl", "--endpoints", ",".join(cluster.etcd.endpoints), "get", "--prefix",
             f"/topicledger/projects/{PROJECT}/blocks/", "--rev", str(old_revision)],
            capture_output=True, text=True, env={**os.environ, "ETCDCTL_API": "3"})
        held = any(erased.encode() in base64.b64decode(kv["value"]) for kv in json.loads(current).get("kvs", []))
        return not held and old.returncode != 0 and "compacted" in old.stderr
    wait_until(etcd_forgot, 30, "etcd to trim the blocks naming the device and compact its history")
    cluster.verify_all()


def test_registrations_expire_in_a_cluster_by_the_activity_every_replica_saw(expiring_cluster):
    """A device that polls a follower only is heard from by that follower alone; the leader, which expires, asks
    every replica before it expires anyone: the silent device expires, the polling one stays."""
    cluster = expiring_cluster
    leader_id = cluster.wait_for_leader()
    leader = cluster.nodes[leader_id]
    follower = next(node for node_id, node in cluster.nodes.items() if node_id != leader_id)
    active, silent = follower.register(), follower.register()
    assert active and silent
    client = {"x-goog-api-key": CLIENT}

    def poll(token):
        return requests.get(f"{follower.base}/v1/projects/{PROJECT}/registrations/{token}/messages", headers=client,
                            timeout=10).status_code

    wait_until(lambda: poll(active) == 200, 10, "the follower to apply the registration")
    started = time.monotonic()
    silent_gone = None
    # Past twice the expiry: a leader that knew only its own activity would have expired the polling device.
    while time.monotonic() - started < 20:
        assert poll(active) == 200, "the device polling a follower was expired"
        if silent_gone is None and requests.get(
                f"{leader.base}/v1/projects/{PROJECT}/audit/instances/{silent}",
                headers={"Authorization": f"Bearer {AUDITOR}"}, timeout=10).json()["registrations"][0].get("untilSeq"):
            silent_gone = time.monotonic() - started
        time.sleep(1)
    assert silent_gone is not None and silent_gone >= 7, silent_gone
    # Its token is unknown through every node once applied there; the expiry is an audited event.
    for node in cluster.nodes.values():
        wait_until(lambda: requests.get(f"{node.base}/v1/projects/{PROJECT}/registrations/{silent}/messages",
                                        headers=client, timeout=10).status_code == 404, 10,
                   f"{node.node_id} to refuse the expired token")
    erasures = requests.get(f"{leader.base}/v1/projects/{PROJECT}/audit/erasures",
                            headers={"Authorization": f"Bearer {AUDITOR}"}, timeout=10).json()["erasures"]
    expired = {entry["device"]: entry for entry in erasures if entry["kind"] == "expired"}
    assert silent in expired and active not in expired
    assert expired[silent]["actor"] == "expiry" and expired[silent]["reason"].startswith("expired: no activity since")
    metrics = requests.get(f"{leader.base}/metrics", timeout=10).text
    assert 'ledger_expiry_sweeps_total{outcome="completed"}' in metrics
    # A peer's activity route wants a peer's secret, and a body it can read.
    route = f"{follower.base}/internal/v1/projects/{PROJECT}/activity"
    assert requests.post(route, json={"devices": [1]}, timeout=10).status_code == 401
    assert requests.post(route, headers={"Authorization": f"Bearer {ADMIN}"}, json={"devices": [1]},
                         timeout=10).status_code == 401
    peer = {"Authorization": "Bearer cluster-peer-secret"}
    assert requests.post(route, headers=peer, data=b"{not json", timeout=10).status_code == 400
    assert requests.post(route, headers=peer, json={"devices": [-1]}, timeout=10).status_code == 400
    answer = requests.post(route, headers=peer, json={"devices": [1, 2, 4294967295]}, timeout=10)
    assert answer.status_code == 200 and all(entry["lastActive"] > 0 for entry in answer.json()["lastActive"])
    cluster.verify_all()


def test_the_replicas_cosign_the_leaders_checkpoint(cluster):
    """Issue "No split views", part 4: each replica checks the leader's checkpoint against its own copy and
    cosigns it with its node's key; /v1/cluster shows what each cosigned, and its vkey."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "tools" / "merkle"))
    import verify_proof

    nodes = list(cluster.nodes.values())
    assert all(node.register() for node in nodes for _ in range(3))
    # Asked of a follower: forwarded to the leader, which signs, and its replicas cosign.
    follower = next(node for node in nodes if node.node_id != cluster.wait_for_leader())
    response = requests.get(f"{follower.base}/v1/projects/{PROJECT}/ledger:checkpoint",
                            headers={"Authorization": f"Bearer {AUDITOR}"}, timeout=30)
    assert response.status_code == 200, response.text
    note = response.text
    size = int(note.split("\n")[1])
    assert size >= 9
    names = sorted(line.split(" ")[1] for line in note.split("\n\n", 1)[1].splitlines()
                   if line.startswith("\u2014 topicledger-node/"))
    assert names == ["topicledger-node/n1", "topicledger-node/n2", "topicledger-node/n3"], note

    def all_cosigned():
        replicas = _cosigned(follower, size)
        return replicas if len(replicas) == 3 else None

    replicas = wait_until(all_cosigned, 10, "every replica to report its cosignature")
    keys = [replica["cosignerKey"] for replica in replicas]
    assert len(set(keys)) == 3
    # Each replica's cosignature verifies with the vkey it reported, by the C2SP text alone.
    assert verify_proof.count_cosignatures(note, keys) == 3
    # A message's proof asked of a follower is the leader's (it signs), against a checkpoint all three cosigned.
    sent = follower.send("news")
    assert sent.status_code == 200, sent.text
    message = sent.json()["name"].rsplit("/", 1)[1]
    proof = requests.get(f"{follower.base}/v1/projects/{PROJECT}/messages/{message}:proof",
                         headers={"Authorization": f"Bearer {AUDITOR}"}, timeout=30)
    assert proof.status_code == 200, proof.text
    assert proof.json()["entries"][0]["kind"] == "sent"
    assert verify_proof.count_cosignatures(proof.json()["checkpoint"], keys) == 3


def _cosigned(node, size):
    replicas = node.status()["projects"][0]["replicas"]
    return [r for r in replicas if (r.get("cosignedSize") or 0) >= size]
