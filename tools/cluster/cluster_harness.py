"""A cluster on loopback for the cluster suite: three etcd members and `ledger serve` nodes sharing them
(docs/cluster.md). Every process is a child of the test process; each node has its own data directory."""

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import requests

PROJECT = "shop"
ADMIN = "cluster-admin-secret"
AUDITOR = "cluster-auditor-secret"
CLIENT = "cluster-client-secret"
PEER = "cluster-peer-secret"
# A second project, which a fourth node takes from one of the first three (rendezvous placement: with n1…n4,
# `news` is held by n2, n4 and n3).
SECOND = "news"


def secrets(project):
    """The admin, auditor and client secrets of `project` (each secret belongs to one project)."""
    if project == PROJECT:
        return {"admin": ADMIN, "auditor": AUDITOR, "client": CLIENT}
    return {role: f"{project}-{role}-secret" for role in ("admin", "auditor", "client")}
LEASE_SECONDS = 2


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sha(secret):
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


def wait_until(predicate, timeout, what, interval=0.05):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as error:  # noqa: BLE001 (a server still starting refuses connections)
            last = error
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last})")


class EtcdCluster:
    """Three etcd members on loopback (a quorum of two), each with its own data directory."""

    def __init__(self, root, members=3):
        self.root = Path(root)
        self.names = [f"e{index + 1}" for index in range(members)]
        self.client_ports = {name: free_port() for name in self.names}
        self.peer_ports = {name: free_port() for name in self.names}
        self.processes = {}

    @property
    def endpoints(self):
        return [f"127.0.0.1:{self.client_ports[name]}" for name in self.names]

    def start(self):
        for name in self.names:
            self.start_member(name)
        wait_until(self.healthy, 30, "etcd to be healthy")

    def start_member(self, name, state="new"):
        cluster = ",".join(f"{other}=http://127.0.0.1:{self.peer_ports[other]}" for other in self.names)
        client = f"http://127.0.0.1:{self.client_ports[name]}"
        peer = f"http://127.0.0.1:{self.peer_ports[name]}"
        log = open(self.root / f"{name}.log", "ab")
        self.processes[name] = subprocess.Popen(
            ["etcd", "--name", name, "--data-dir", str(self.root / name),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", cluster, "--initial-cluster-state", state,
             "--initial-cluster-token", "topicledger-test",
             "--heartbeat-interval", "50", "--election-timeout", "500",
             "--auto-compaction-mode", "revision", "--auto-compaction-retention", "5000",
             "--logger", "zap", "--log-outputs", "stderr"],
            stdout=log, stderr=log)

    def kill_member(self, name):
        process = self.processes.pop(name)
        process.kill()
        process.wait()

    def healthy(self):
        result = subprocess.run(
            ["etcdctl", "--endpoints", ",".join(self.endpoints), "endpoint", "health"],
            capture_output=True, text=True, env={**os.environ, "ETCDCTL_API": "3"}, timeout=10)
        return result.returncode == 0

    def stop(self):
        for process in self.processes.values():
            process.kill()
            process.wait()
        self.processes = {}


class Node:
    """One `ledger serve` of the cluster."""

    def __init__(self, binary, root, node_id, etcd_endpoints, replicas=3):
        self.binary = binary
        self.node_id = node_id
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.data = Path(root) / node_id
        self.data.mkdir(parents=True, exist_ok=True)
        self.config = Path(root) / f"{node_id}.json"
        self.config.write_text(json.dumps({
            "projects": {project: {"adminKeys": [sha(secrets(project)["admin"])],
                                   "auditorKeys": [sha(secrets(project)["auditor"])],
                                   "clientApiKeys": [sha(secrets(project)["client"])]}
                         for project in (PROJECT, SECOND)},
            "limits": {"registrationsPerSecond": 1000000, "sendsPerMinute": 100000000},
            "cluster": {"nodeId": node_id, "advertiseURL": self.base, "etcdEndpoints": etcd_endpoints,
                        "leaseSeconds": LEASE_SECONDS, "replicas": replicas, "peerKeys": [sha(PEER)]},
        }))
        self.log_path = Path(root) / f"{node_id}.log"
        self.process = None
        self.paused = False

    def start(self, wrapper=()):
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [*wrapper, self.binary, "serve", "--config", str(self.config), "--data", str(self.data),
             "--port", str(self.port)],
            stdout=log, stderr=log)
        wait_until(lambda: requests.get(self.base + "/healthz", timeout=1).ok, 60, f"{self.node_id} to answer")

    def kill(self):
        if self.process:
            self.process.kill()
            self.process.wait()
            self.process = None

    def stop(self):
        if self.process:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def pause(self):
        self.process.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        self.process.send_signal(signal.SIGCONT)
        self.paused = False

    @property
    def alive(self):
        return self.process is not None and self.process.poll() is None

    # Requests

    def register(self, timeout=10, project=PROJECT):
        """Registers a device through this node; the token when the answer is 200, else None."""
        response = requests.post(f"{self.base}/v1/projects/{project}/registrations",
                                 headers={"x-goog-api-key": secrets(project)["client"]},
                                 json={"platform": "android"}, timeout=timeout)
        return response.json()["token"] if response.status_code == 200 else None

    def send(self, topic, timeout=10):
        response = requests.post(f"{self.base}/v1/projects/{PROJECT}/messages:send",
                                 headers={"Authorization": f"Bearer {ADMIN}"},
                                 json={"message": {"topic": topic, "data": {"k": "v"}}}, timeout=timeout)
        return response

    def events(self, project=PROJECT):
        """This node's log, read from its own replica (or its leader's, when it holds none): (seq, hash) of
        every event."""
        out = []
        from_seq = 1
        while True:
            response = requests.get(f"{self.base}/v1/projects/{project}/audit/events",
                                    params={"fromSeq": from_seq, "limit": 10000},
                                    headers={"Authorization": f"Bearer {secrets(project)['auditor']}"},
                                    timeout=30)
            response.raise_for_status()
            lines = [json.loads(line) for line in response.text.splitlines() if line]
            if not lines:
                return out
            out += [(line["seq"], line["hash"]) for line in lines]
            from_seq = lines[-1]["seq"] + 1

    def status(self):
        response = requests.get(f"{self.base}/v1/cluster", headers={"Authorization": f"Bearer {ADMIN}"},
                                timeout=3)
        response.raise_for_status()
        return response.json()

    def leader(self, project=PROJECT):
        for entry in self.status()["projects"]:
            if entry["project"] == project:
                return entry["leader"]
        return None

    def holds(self, project):
        """Whether this node has a copy of `project`'s ledger."""
        return (self.data / project).exists()

    def verify(self, project=PROJECT):
        """`ledger verify` of this node's copy (the node must be stopped)."""
        return subprocess.run([self.binary, "verify", "--data", str(self.data), "--project", project],
                              capture_output=True, text=True, timeout=300)


class Cluster:
    """etcd and the nodes, and the checks every case ends with."""

    def __init__(self, binary, nodes=3):
        self.root = Path(tempfile.mkdtemp(prefix="ledger-cluster-"))
        self.binary = binary
        self.etcd = EtcdCluster(self.root / "etcd")
        (self.root / "etcd").mkdir()
        self.nodes = {}
        self.node_count = nodes

    def start(self):
        self.etcd.start()
        for index in range(self.node_count):
            self.add_node(f"n{index + 1}")
        self.wait_for_leader()
        return self

    def add_node(self, node_id, replicas=3):
        node = Node(self.binary, self.root, node_id, self.etcd.endpoints, replicas=replicas)
        node.start()
        self.nodes[node_id] = node
        return node

    def live_nodes(self):
        return [node for node in self.nodes.values() if node.alive and not node.paused]

    def wait_for_leader(self, timeout=30, excluding=None, project=PROJECT):
        def elected():
            for node in self.live_nodes():
                leader = node.leader(project)
                if leader and leader != excluding and self.nodes.get(leader) in self.live_nodes():
                    return leader
            return None
        return wait_until(elected, timeout, "a leader to be elected")

    def converged(self, nodes=None, timeout=60, project=PROJECT):
        """Waits until every live node (or `nodes`) holds the same log; returns it."""
        nodes = nodes or self.live_nodes()

        def same():
            logs = [node.events(project) for node in nodes]
            return logs[0] if all(log == logs[0] for log in logs) else None
        return wait_until(same, timeout, "the replicas to hold the same log", interval=0.3)

    def check(self, acknowledged, nodes=None, project=PROJECT):
        """After a case: every acknowledged registration is on every replica, and the logs are identical."""
        nodes = nodes or self.live_nodes()
        log = self.converged(nodes, project=project)
        seqs = [seq for seq, _ in log]
        assert seqs == list(range(1, len(seqs) + 1)), "the log has gaps"
        admin = secrets(project)["admin"]
        for node in nodes:
            for token in acknowledged:
                response = requests.get(f"{node.base}/iid/info/{token}",
                                        headers={"Authorization": f"Bearer {admin}"}, timeout=10)
                assert response.status_code == 200, f"{token} acknowledged, missing on {node.node_id}"
        return log

    def verify_all(self):
        """Stops every node and runs `ledger verify` on each copy of each project."""
        for node in self.nodes.values():
            node.stop()
        for node in self.nodes.values():
            for project in (PROJECT, SECOND):
                if not node.holds(project):
                    continue
                result = node.verify(project)
                assert result.returncode == 0, f"{node.node_id} {project}: {result.stdout}{result.stderr}"

    def stop(self):
        for node in self.nodes.values():
            node.kill()
        self.etcd.stop()
        shutil.rmtree(self.root, ignore_errors=True)
