"""A cluster on loopback for the cluster suite: three etcd members and `ledger serve` nodes sharing them
(docs/cluster.md). Every process is a child of the test process; each node has its own data directory."""

import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
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


_handed_out = set()


def free_port():
    """A port free now and not handed out before in this process (the kernel may offer a port it just gave
    back, and two etcd members given the same one never become healthy)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def sha(secret):
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


def protobuf_fields(data):
    """The fields of a protobuf message: number → values (varints as ints, the rest as bytes)."""
    fields, index = {}, 0

    def varint():
        nonlocal index
        value, shift = 0, 0
        while True:
            byte = data[index]
            index += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value
    while index < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
        elif wire == 2:
            length = varint()
            value = data[index:index + length]
            index += length
        else:
            raise ValueError(f"wire type {wire}")
        fields.setdefault(number, []).append(value)
    return fields


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

    def __init__(self, root, members=3, address="127.0.0.1", extra=()):
        self.root = Path(root)
        self.address = address
        self.extra = list(extra)
        self.names = [f"e{index + 1}" for index in range(members)]
        self.client_ports = {name: free_port() for name in self.names}
        self.peer_ports = {name: free_port() for name in self.names}
        self.processes = {}

    @property
    def endpoints(self):
        return [f"{self.address}:{self.client_ports[name]}" for name in self.names]

    def start(self):
        for name in self.names:
            self.start_member(name)
        wait_until(self.healthy, 60, "etcd to be healthy")

    def start_member(self, name, state="new"):
        cluster = ",".join(f"{other}=http://{self.address}:{self.peer_ports[other]}" for other in self.names)
        client = f"http://{self.address}:{self.client_ports[name]}"
        peer = f"http://{self.address}:{self.peer_ports[name]}"
        log = open(self.root / f"{name}.log", "ab")
        self.processes[name] = subprocess.Popen(
            ["etcd", "--name", name, "--data-dir", str(self.root / name),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", cluster, "--initial-cluster-state", state,
             "--initial-cluster-token", "topicledger-test",
             "--heartbeat-interval", "50", "--election-timeout", "500",
             "--auto-compaction-mode", "revision", "--auto-compaction-retention", "5000",
             "--logger", "zap", "--log-outputs", "stderr", *self.extra],
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

    def blocks(self, project=PROJECT):
        """Each block etcd holds of `project`: (first seq, records, last seq of its commit)."""
        result = subprocess.run(
            ["etcdctl", "--endpoints", ",".join(self.endpoints), "get", "--prefix",
             f"/topicledger/projects/{project}/blocks/", "--write-out", "json"],
            capture_output=True, text=True, env={**os.environ, "ETCDCTL_API": "3"}, timeout=30, check=True)
        blocks = []
        for kv in json.loads(result.stdout).get("kvs", []):
            fields = protobuf_fields(base64.b64decode(kv["value"]))
            blocks.append((fields[1][0], len(fields.get(3, [])), fields[4][0]))
        return sorted(blocks)

    def stop(self):
        for process in self.processes.values():
            process.kill()
            process.wait()
        self.processes = {}


class Node:
    """One `ledger serve` of the cluster."""

    def __init__(self, binary, root, node_id, etcd_endpoints, replicas=3, address="127.0.0.1", namespace=None,
                 options=None, advertise=None, name=None, project_options=None):
        """`advertise`: the URL the node advertises (its own by default); `name`: its files' name (its id by
        default: a second process under one id needs its own); `project_options`: more keys of every project's
        configuration."""
        self.binary = binary
        self.node_id = node_id
        self.port = free_port()
        self.address = address
        self.namespace = namespace
        self.base = f"http://{address}:{self.port}"
        name = name or node_id
        self.data = Path(root) / name
        self.data.mkdir(parents=True, exist_ok=True)
        self.config = Path(root) / f"{name}.json"
        secret_file = Path(root) / f"{name}.peer-secret"
        secret_file.write_text(PEER + "\n")
        secret_file.chmod(0o600)
        self.config.write_text(json.dumps({
            # One checkpoint key per project, the same file for every node (docs/cluster.md).
            "projects": {project: {"adminKeys": [sha(secrets(project)["admin"])],
                                   "auditorKeys": [sha(secrets(project)["auditor"])],
                                   "clientApiKeys": [sha(secrets(project)["client"])],
                                   "checkpoint": {"keyFile": str(Path(root) / f"{project}.checkpoint.key")},
                                   **(project_options or {})}
                         for project in (PROJECT, SECOND)},
            "limits": {"registrationsPerSecond": 1000000, "sendsPerMinute": 100000000,
                       "subscriptionChangesPerSecond": 1000000},
            "cluster": {"nodeId": node_id, "advertiseURL": advertise or self.base, "etcdEndpoints": etcd_endpoints,
                        "leaseSeconds": LEASE_SECONDS, "replicas": replicas, "peerKeys": [sha(PEER)],
                        "peerSecretFile": str(secret_file), **(options or {})},
        }))
        self.log_path = Path(root) / f"{name}.log"
        self.process = None
        self.paused = False

    def command(self):
        wrapper = ["ip", "netns", "exec", self.namespace] if self.namespace else []
        return [*wrapper, self.binary, "serve", "--config", str(self.config), "--data", str(self.data),
                "--host", self.address, "--port", str(self.port)]

    def start(self):
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(self.command(), stdout=log, stderr=log)
        wait_until(lambda: requests.get(self.base + "/healthz", timeout=1).ok, 60, f"{self.node_id} to answer")

    def run_to_exit(self, timeout=60):
        """Starts the node and waits for it to exit (a start that is refused): (exit code, its output)."""
        result = subprocess.run(self.command(), capture_output=True, text=True, timeout=timeout)
        return result.returncode, result.stdout + result.stderr

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

    def status(self, project=PROJECT):
        """`GET /v1/cluster` with `project`'s admin key: the nodes, and that project alone."""
        response = requests.get(f"{self.base}/v1/cluster",
                                headers={"Authorization": f"Bearer {secrets(project)['admin']}"}, timeout=3)
        response.raise_for_status()
        return response.json()

    def leader(self, project=PROJECT):
        for entry in self.status(project)["projects"]:
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

    def __init__(self, binary, nodes=3, network=None, options=None, etcd_arguments=(), disks=None, replicas=3,
                 project_options=None):
        """`disks`: node id → megabytes, for nodes whose data directory is a tmpfs of that size (``Disk``);
        `replicas`: how many nodes hold each project; `project_options`: more keys of every project's
        configuration."""
        self.project_options = project_options
        self.root = Path(tempfile.mkdtemp(prefix="ledger-cluster-"))
        self.replicas = replicas
        self.binary = binary
        self.network = network
        self.options = options
        address = network.host_address if network else "127.0.0.1"
        self.etcd = EtcdCluster(self.root / "etcd", address=address, extra=etcd_arguments)
        (self.root / "etcd").mkdir()
        self.nodes = {}
        self.node_count = nodes
        self.disks = {}
        for node_id, megabytes in (disks or {}).items():
            self.disks[node_id] = Disk(self.root / node_id, megabytes).mount()

    def start(self, n1_leads=False):
        """Starts etcd and the nodes; with `n1_leads`, n1 alone until it leads both projects (which node is
        elected first is otherwise a race)."""
        self.etcd.start()
        for index in range(self.node_count):
            self.add_node(f"n{index + 1}")
            if n1_leads and index == 0:
                for project in (PROJECT, SECOND):
                    wait_until(lambda: self.nodes["n1"].leader(project) == "n1", 30, f"n1 to lead {project}")
        self.wait_for_leader()
        # Elected is not yet writing (the leader catches up first): one registration per project, through every
        # node, before the test begins.
        for project in (PROJECT, SECOND):
            for node in self.live_nodes():
                wait_until(lambda: node.register(project=project), 30, f"{node.node_id} to take writes of {project}")
        return self

    def add_node(self, node_id, replicas=None):
        replicas = replicas or self.replicas
        if self.network and node_id == self.network.node_id:
            node = Node(self.binary, self.root, node_id, self.etcd.endpoints, replicas=replicas,
                        address=self.network.namespace_address, namespace=self.network.name, options=self.options,
                        project_options=self.project_options)
        else:
            address = self.network.host_address if self.network else "127.0.0.1"
            node = Node(self.binary, self.root, node_id, self.etcd.endpoints, replicas=replicas, address=address,
                        options=self.options, project_options=self.project_options)
        node.start()
        self.nodes[node_id] = node
        return node

    def register_many(self, count):
        """`count` registrations, sent 16 at a time through every node in turn; their tokens (None where one was
        refused)."""
        nodes = list(self.nodes.values())
        with ThreadPoolExecutor(16) as pool:
            return list(pool.map(lambda index: nodes[index % len(nodes)].register(), range(count)))

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
        # Each node's own replica, once it holds the whole log (a read may otherwise be stale: docs/cluster.md).
        headers = {"Authorization": f"Bearer {admin}", "x-ledger-min-seq": str(len(seqs))}
        for node in nodes:
            for token in acknowledged:
                response = requests.get(f"{node.base}/iid/info/{token}", headers=headers, timeout=10)
                assert response.status_code == 200, (
                    f"{token} acknowledged, missing on {node.node_id}: {response.status_code} {response.text[:300]}")
        # The reads above may have been answered by the leader (a replica that is damaged, stalled or not yet
        # caught up forwards them): each holder's own copy must reach the same head, as it reports to etcd.
        head = log[-1]
        holders = [node.node_id for node in nodes if node.holds(project)]

        def every_copy_at_the_head():
            positions = {replica["node"]: (replica["appliedSeq"], replica["headHash"])
                         for entry in nodes[0].status(project)["projects"] if entry["project"] == project
                         for replica in entry["replicas"]}
            return all(positions.get(node_id) == head for node_id in holders)
        wait_until(every_copy_at_the_head, 60, f"the copies of {project} on {holders} to reach seq {head[0]}")
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
        for disk in self.disks.values():
            disk.unmount()
        if os.environ.get("LEDGER_KEEP_CLUSTER"):
            print(f"cluster files kept in {self.root}")
            return
        shutil.rmtree(self.root, ignore_errors=True)


class Disk:
    """A small tmpfs mounted over a node's data directory, which a test fills (a full disk) and frees."""

    def __init__(self, path, megabytes):
        self.path = Path(path)
        self.megabytes = megabytes
        self.filler = self.path / "filler"

    @staticmethod
    def unavailable():
        """Why a tmpfs cannot be mounted here, or None."""
        if os.geteuid() != 0:
            return "mounting a tmpfs needs root"
        probe = Path(tempfile.mkdtemp(prefix="ledger-tmpfs-probe-"))
        try:
            mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)],
                                     capture_output=True, text=True)
            if mounted.returncode != 0:
                return f"mount -t tmpfs is not permitted here: {mounted.stderr.strip()}"
            subprocess.run(["umount", str(probe)], capture_output=True)
            return None
        finally:
            probe.rmdir()

    def mount(self):
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.megabytes}m", "tmpfs", str(self.path)],
                       check=True, capture_output=True, text=True)
        return self

    def fill(self):
        """Takes every free byte: the next write that needs a new page fails with ENOSPC."""
        space = os.statvfs(self.path)
        size = space.f_bavail * space.f_frsize
        with open(self.filler, "wb") as filler:
            while size > 0:
                try:
                    os.posix_fallocate(filler.fileno(), 0, size)
                    break
                except OSError:
                    size -= 4096

    def free(self):
        self.filler.unlink(missing_ok=True)

    def unmount(self):
        subprocess.run(["umount", "--lazy", str(self.path)], capture_output=True)


class Namespace:
    """A network namespace joined to this one by a veth pair, for a node that can be cut off: the namespace's
    node reaches etcd and its peers (and they it) only across the pair, where iptables can drop it."""

    def __init__(self, node_id, name="tlcluster", host_address="10.231.0.1", namespace_address="10.231.0.2"):
        self.node_id = node_id
        self.name = name
        self.host_address = host_address
        self.namespace_address = namespace_address

    @staticmethod
    def unavailable():
        """Why namespaces cannot be used here, or None."""
        if os.geteuid() != 0:
            return "network namespaces need root"
        if not shutil.which("ip") or not shutil.which("iptables"):
            return "network namespaces need iproute2 and iptables (apt-get install -y iproute2 iptables)"
        probe = subprocess.run(["ip", "netns", "add", "tlprobe"], capture_output=True, text=True)
        if probe.returncode != 0:
            return f"ip netns is not permitted here: {probe.stderr.strip()}"
        subprocess.run(["ip", "netns", "del", "tlprobe"], capture_output=True)
        return None

    def _run(self, *command, inside=False):
        prefix = ["ip", "netns", "exec", self.name] if inside else []
        subprocess.run([*prefix, *command], check=True, capture_output=True, text=True)

    def create(self):
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        subprocess.run(["ip", "link", "del", "tlveth-h"], capture_output=True)
        self._run("ip", "netns", "add", self.name)
        self._run("ip", "link", "add", "tlveth-h", "type", "veth", "peer", "name", "tlveth-n")
        self._run("ip", "link", "set", "tlveth-n", "netns", self.name)
        self._run("ip", "addr", "add", f"{self.host_address}/24", "dev", "tlveth-h")
        self._run("ip", "link", "set", "tlveth-h", "up")
        self._run("ip", "addr", "add", f"{self.namespace_address}/24", "dev", "tlveth-n", inside=True)
        self._run("ip", "link", "set", "tlveth-n", "up", inside=True)
        self._run("ip", "link", "set", "lo", "up", inside=True)
        return self

    def cut(self):
        """Drops every packet between the namespace and the host side — etcd, the peers, and the test's own
        connections (``register_inside`` reaches the node from within)."""
        self._run("iptables", "-A", "OUTPUT", "-d", self.host_address, "-j", "DROP", inside=True)
        self._run("iptables", "-A", "INPUT", "-s", self.host_address, "-j", "DROP", inside=True)

    def register_inside(self, node, project="shop"):
        """A registration sent to `node` from within the namespace: the HTTP status (0: no answer in 10 s)."""
        result = subprocess.run(
            ["ip", "netns", "exec", self.name, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
             "--max-time", "10", "-X", "POST", "-H", f"x-goog-api-key: {secrets(project)['client']}",
             "-H", "content-type: application/json", "-d", "{}",
             f"{node.base}/v1/projects/{project}/registrations"],
            capture_output=True, text=True)
        return int(result.stdout or 0)

    def heal(self):
        self._run("iptables", "-F", "INPUT", inside=True)
        self._run("iptables", "-F", "OUTPUT", inside=True)

    def destroy(self):
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        subprocess.run(["ip", "link", "del", "tlveth-h"], capture_output=True)
