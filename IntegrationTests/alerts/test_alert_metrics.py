"""The alert rules (samples/prometheus/alerts.yml) against what the built `ledger serve` serves: every metric a rule's
expression uses, every label it matches, groups by or names in its annotations, is in a real scrape — so a metric
renamed in the server, or a rule written against one that does not exist, fails the build. The metric names the
docs promise are checked the same way.

Two servers are scraped, each on a free port with a temporary data directory:
- one alone, whose project has a witness and an APNs endpoint on closed local ports (so the witness and APNs series
  exist, and the witness fails as in production) and a short registration expiry (so sweeps run every second);
- a cluster of one node on one etcd member, for the cluster's series (`/metrics`) and the replica lag (the project's
  own metrics route).
Both routes of each are scraped: `/metrics`, and `GET /v1/projects/{p}/metrics` with the auditor key.
"""

import base64
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

ROOT = Path(__file__).resolve().parent.parent.parent
RULES = ROOT / "samples" / "prometheus" / "alerts.yml"
SCRAPE_CONFIG = ROOT / "samples" / "prometheus" / "prometheus.yml"
PROJECT = "shop"
ADMIN, AUDITOR, CLIENT, PEER = "alerts-admin", "alerts-auditor", "alerts-client", "alerts-peer"

# Labels Prometheus adds to every series of a target: not the server's to serve.
TARGET_LABELS = {"job", "instance"}
# Series Prometheus makes itself, not the server: `up` of each target.
PROMETHEUS_SERIES = {"up"}
# Label values a rule matches that neither test server can be brought to serve in a test's time. Each must still be
# a string literal in the Swift file that makes the metric, so a renamed value fails here too.
CONDITIONAL_VALUES = {
    # Only when a replica of a cluster does not answer the leader's sweep within 10 s, or when a sweep throws.
    ("ledger_expiry_sweeps_total", "outcome"): {"skipped", "failed"},
}
# Documented metrics that only a cluster node that rolled events back serves (after a crash between its commit and
# etcd's answer): checked against the name the code registers, as a string literal in Sources.
DOCUMENTED_FROM_SOURCE = {"topicledger_cluster_rolled_back_events_total"}

PROMQL_KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "inf",
    "nan", "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
    "quantile", "atan2",
}
PROMQL_TOKEN = re.compile(r"""
      (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<range>\[[^\]]*\])
    | (?P<grouping>(?<![\w:])(?:by|without|on|ignoring|group_left|group_right)\s*\((?P<labels>[^)]*)\))
    | (?P<selector>(?<![\w.:])(?P<metric>[a-zA-Z_:][\w:]*)?\s*\{(?P<matchers>[^}]*)\})
    | (?P<identifier>(?<![\w.:])[a-zA-Z_:][\w:]*)(?P<call>\s*\()?
""", re.VERBOSE)
MATCHER = re.compile(r"""([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)\"""")
TEMPLATE_LABEL = re.compile(r"\$labels\.([a-zA-Z_]\w*)")


def parse_expression(expression):
    """The metrics an expression selects, each with its matchers {label: (operator, value)}, and the labels it
    groups or matches by."""
    selectors, grouping = [], set()
    for token in PROMQL_TOKEN.finditer(expression):
        if token["grouping"]:
            grouping |= {label.strip() for label in token["labels"].split(",") if label.strip()}
        elif token["selector"]:
            assert token["metric"], f"a selector without a metric name in {expression!r}: name it"
            matchers = {label: (operator, value) for label, operator, value in MATCHER.findall(token["matchers"])}
            selectors.append((token["metric"], matchers))
        elif token["identifier"] and not token["call"] and token["identifier"].lower() not in PROMQL_KEYWORDS:
            selectors.append((token["identifier"], {}))
    return selectors, grouping


def load_rules():
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def rule_id(rule):
    return rule.get("alert") or rule.get("record")


# Exposition: the Prometheus text format, as far as these checks need it.

SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+\S+(?:\s+\d+)?$")
LABEL_PAIR = re.compile(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"')


class Scrape:
    """The series and metric families of several scrapes together."""

    def __init__(self):
        self.series = {}  # sample name → [labels]
        self.families = set()
        self.where = {}  # sample name → the URL it came from

    def add(self, url, text):
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                self.families.add(line.split()[2])
            elif line and not line.startswith("#"):
                match = SAMPLE.match(line)
                assert match, f"{url}: not a sample line: {line!r}"
                name, labels = match[1], dict(LABEL_PAIR.findall(match[2] or ""))
                self.series.setdefault(name, []).append(labels)
                self.where.setdefault(name, url)


def scrape(base, project=None):
    url = f"{base}/v1/projects/{project}/metrics" if project else f"{base}/metrics"
    headers = {"Authorization": f"Bearer {AUDITOR}"} if project else {}
    response = requests.get(url, headers=headers, timeout=10)
    assert response.status_code == 200, f"{url}: {response.status_code} {response.text[:300]}"
    return url, response.text


def gauge(text, name, **labels):
    """The value of one series in an exposition, or None."""
    for line in text.splitlines():
        match = SAMPLE.match(line) if not line.startswith("#") else None
        if match and match[1] == name and dict(LABEL_PAIR.findall(match[2] or "")) == labels:
            return float(line.split()[-1])
    return None


# Servers

def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sha(secret):
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


def ledger_binary():
    path = os.environ.get("LEDGER_BIN")
    assert path and os.path.exists(path), "set LEDGER_BIN to the built ledger executable"
    return path


def wait_until(predicate, timeout, what, process=None, log=None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"{what}: the process exited {process.returncode}: {log and log.read_text()[-2000:]}")
        try:
            value = predicate()
            if value:
                return value
        except requests.RequestException as error:
            last = error
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last error: {last})")


class Process:
    """A child process with its output in a file, stopped by its id."""

    def __init__(self, arguments, log):
        self.log = log
        self.process = subprocess.Popen(arguments, stdout=open(log, "wb"), stderr=subprocess.STDOUT)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def project_settings():
    return {"adminKeys": [sha(ADMIN)], "auditorKeys": [sha(AUDITOR)], "clientApiKeys": [sha(CLIENT)]}


def serve(directory, config, name, port=None):
    """`ledger serve --config` of `config` on `port` (a free one by default); (process, base URL) once it answers."""
    port = port or free_port()
    config_file = directory / f"{name}.json"
    config_file.write_text(json.dumps(config))
    base = f"http://127.0.0.1:{port}"
    server = Process([ledger_binary(), "serve", "--config", str(config_file), "--data", str(directory / name),
                      "--port", str(port)], directory / f"{name}.log")
    wait_until(lambda: requests.get(f"{base}/healthz", timeout=1).ok, 60, f"{name} to answer", server.process,
               server.log)
    return server, base


@pytest.fixture(scope="module")
def directory():
    path = Path(tempfile.mkdtemp(prefix="ledger-alerts-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def alone(directory):
    """`ledger serve` with a witness and an APNs endpoint on closed local ports and a 10 s registration expiry;
    a device erased (so the erasure series exist) and a message sent (so a checkpoint goes to the witness, which
    fails). Returns its base URL."""
    vkey = subprocess.run([ledger_binary(), "witness", "--key", str(directory / "witness.key"), "--name",
                           "witness.example/closed", "--public-key"],
                          capture_output=True, text=True, check=True).stdout.strip()
    key_file = directory / "AuthKey_ALERTS.p8"
    key_file.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    key_file.chmod(0o600)
    # A port bound and never listened on: connections are refused, and no other process of the test can take it.
    reserved = socket.socket()
    reserved.bind(("127.0.0.1", 0))
    closed = f"127.0.0.1:{reserved.getsockname()[1]}"
    project = project_settings() | {
        "registrationExpiry": "10s",
        "witnesses": [{"url": f"http://{closed}", "verifierKey": vkey}],
        "apns": {"teamId": "ABCDE12345", "keyId": "KEY1234567", "keyFile": str(key_file),
                 "topic": "com.example.alerts", "endpoint": f"https://{closed}", "sandboxEndpoint": f"https://{closed}"},
    }
    server = None
    try:
        server, base = serve(directory, {"projects": {PROJECT: project}}, "alone")
        project_url = f"{base}/v1/projects/{PROJECT}"
        token = requests.post(f"{project_url}/registrations", headers={"x-goog-api-key": CLIENT},
                              json={"platform": "android"}, timeout=10).json()["token"]
        erased = requests.post(f"{project_url}/registrations/{token}:erase", headers={"Authorization": f"Bearer {ADMIN}"},
                               json={"reason": "alerts test"}, timeout=30)
        assert erased.status_code == 200, erased.text
        sent = requests.post(f"{project_url}/messages:send", headers={"Authorization": f"Bearer {ADMIN}"},
                             json={"message": {"topic": "news", "data": {"k": "v"}}}, timeout=10)
        assert sent.status_code == 200, sent.text
        wait_until(lambda: gauge(scrape(base)[1], "topicledger_witness_failing", witness="witness.example/closed") == 1,
                   30, "the witness on a closed port to be reported failing", server.process, server.log)
        wait_until(lambda: gauge(scrape(base)[1], "ledger_expiry_sweeps_total", outcome="completed"),
                   30, "an expiry sweep", server.process, server.log)
        yield base
    finally:
        if server:
            server.stop()
        reserved.close()


@pytest.fixture(scope="module")
def cluster(directory):
    """A cluster of one `ledger serve` node (one replica per project) on one etcd member. Returns its base URL."""
    client, peer = free_port(), free_port()
    etcd = Process(["etcd", "--name", "e1", "--data-dir", str(directory / "etcd"),
                    "--listen-client-urls", f"http://127.0.0.1:{client}",
                    "--advertise-client-urls", f"http://127.0.0.1:{client}",
                    "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                    "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                    "--initial-cluster", f"e1=http://127.0.0.1:{peer}"], directory / "etcd.log")
    server = None
    try:
        wait_until(lambda: requests.get(f"http://127.0.0.1:{client}/health", timeout=1).ok, 30, "etcd",
                   etcd.process, etcd.log)
        secret = directory / "peer.secret"
        secret.write_text(PEER + "\n")
        secret.chmod(0o600)
        port = free_port()
        config = {
            "projects": {PROJECT: project_settings()},
            "cluster": {"nodeId": "n1", "advertiseURL": f"http://127.0.0.1:{port}",
                        "etcdEndpoints": [f"127.0.0.1:{client}"], "leaseSeconds": 2, "replicas": 1,
                        "peerKeys": [sha(PEER)], "peerSecretFile": str(secret)},
        }
        server, base = serve(directory, config, "node", port)
        # Its project's route answers 503 until the node leads it (its election, then the replica's catch-up).
        def lag():
            response = requests.get(f"{base}/v1/projects/{PROJECT}/metrics",
                                    headers={"Authorization": f"Bearer {AUDITOR}"}, timeout=5)
            return response.ok and gauge(response.text, "topicledger_replica_lag_events", project=PROJECT) is not None
        wait_until(lag, 30, "the node to lead its project and serve its replica's lag", server.process, server.log)
        yield base
    finally:
        if server:
            server.stop()
        etcd.stop()


@pytest.fixture(scope="module")
def witness(directory):
    """`ledger witness` (its own /metrics: evidence, refused proofs, connections) for one log. Returns its base URL."""
    key = directory / "witness.key"
    subprocess.run([ledger_binary(), "witness", "--key", str(key), "--name", "witness.example/alerts",
                    "--public-key"], capture_output=True, check=True)
    # A signed-note verifier key of a log (C2SP signed-note, type 0x01): the witness only parses it here.
    name, public = "example.com/alerts-log", bytes(range(32))
    key_hash = hashlib.sha256(name.encode() + b"\n\x01" + public).digest()[:4].hex()
    blob = base64.b64encode(b"\x01" + public).decode()
    vkey = f"{name}+{key_hash}+{blob}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = Process([ledger_binary(), "witness", "--data", str(directory / "witness"), "--key", str(key),
                       "--name", "witness.example/alerts", "--port", str(port), "--log", f"{name}={vkey}"],
                      directory / "witness.log")
    try:
        wait_until(lambda: requests.get(f"{base}/healthz", timeout=1).ok, 30, "the witness to answer",
                   process.process, process.log)
        yield base
    finally:
        process.stop()


@pytest.fixture(scope="module")
def served(alone, cluster, witness):
    scrapes = Scrape()
    for base in (alone, cluster):
        scrapes.add(*scrape(base))
        scrapes.add(*scrape(base, PROJECT))
    scrapes.add(*scrape(witness))
    return scrapes


# The checks

RULE_LIST = load_rules()


# The failure states issue #64 lists, each with its rule.
FAILURE_STATES = {
    "witness quorum missing": "TopicLedgerWitnessQuorumMissing",
    "a witness failing": "TopicLedgerWitnessFailing",
    "a replica stalled": "TopicLedgerReplicaStalled",
    "replica lag over a threshold": "TopicLedgerReplicaLagging",
    "APNs not answering": "TopicLedgerAPNsFailing",
    "a compaction owed": "TopicLedgerCompactionOwed",
    "expiry sweeps skipped": "TopicLedgerExpirySweepsSkipped",
    "the LMDB map close to full": "TopicLedgerLMDBMapNearlyFull",
    "disk nearly full": "TopicLedgerDiskNearlyFull",
    "the process down": "TopicLedgerDown",
}


def test_every_failure_state_has_its_rule():
    """A rules file that lost its rules would also make every check below vacuous."""
    names = [rule_id(rule) for rule in RULE_LIST]
    assert len(names) == len(set(names)), names
    missing = {state: name for state, name in FAILURE_STATES.items() if name not in names}
    assert not missing, f"no rule for {missing}"
    for rule in RULE_LIST:
        assert parse_expression(rule["expr"])[0], f"{rule_id(rule)}: no metric found in {rule['expr']!r}"


@pytest.mark.parametrize("rule", RULE_LIST, ids=rule_id)
def test_every_metric_and_label_a_rule_uses_is_served(rule, served):
    selectors, grouping = parse_expression(rule["expr"])
    templated = set()
    for text in [*rule.get("annotations", {}).values(), *rule.get("labels", {}).values()]:
        templated |= set(TEMPLATE_LABEL.findall(str(text)))
    problems = []
    for metric, matchers in selectors:
        if metric in PROMETHEUS_SERIES:
            continue
        if metric not in served.series:
            problems.append(f"{metric} is not served (on /metrics or a project's metrics route)")
            continue
        for label, (operator, value) in matchers.items():
            if label in TARGET_LABELS:
                continue
            served_values = {labels[label] for labels in served.series[metric] if label in labels}
            if not served_values:
                problems.append(f"{metric} is served without the label {label} ({served.where[metric]})")
            elif operator == "=" and value not in served_values:
                if value in CONDITIONAL_VALUES.get((metric, label), set()):
                    source = source_files_naming(metric)
                    if not any(f'"{value}"' in path.read_text() for path in source):
                        problems.append(f'{metric}{{{label}="{value}"}}: "{value}" is not in {source}')
                else:
                    problems.append(f'{metric} has no series with {label}="{value}" (served: {sorted(served_values)})')
    used = [metric for metric, _ in selectors if metric in served.series]
    for label in (grouping | templated) - TARGET_LABELS:
        if not any(label in labels for metric in used for labels in served.series[metric]):
            problems.append(f"the label {label} (grouped by, or in an annotation) is on none of {used}")
    assert not problems, f"{rule_id(rule)}: " + "; ".join(problems)


@pytest.mark.parametrize("rule", RULE_LIST, ids=rule_id)
def test_every_rule_says_what_to_do_and_links_a_doc_section_that_exists(rule):
    assert rule.get("for"), f"{rule_id(rule)} has no `for:`"
    assert rule.get("labels", {}).get("severity") in {"critical", "warning"}
    annotations = rule.get("annotations", {})
    assert annotations.get("summary") and annotations.get("description")
    links = re.findall(r"(docs/[\w./-]+\.md)#([\w-]+)", annotations["description"])
    assert links, f"{rule_id(rule)}: its description links no docs/…md#section"
    for path, anchor in links:
        assert anchor in heading_anchors(ROOT / path), f"{rule_id(rule)}: {path} has no heading #{anchor}"


def test_the_jobs_the_rules_name_are_the_sample_scrape_configurations():
    jobs = {job["job_name"] for job in yaml.safe_load(SCRAPE_CONFIG.read_text())["scrape_configs"]}
    for rule in RULE_LIST:
        for _, matchers in parse_expression(rule["expr"])[0]:
            if "job" in matchers:
                operator, value = matchers["job"]
                assert operator == "=" and value in jobs, f"{rule_id(rule)}: job {value!r} is not one of {jobs}"


def test_a_failing_witness_is_what_the_witness_rules_see(alone):
    """The witness on a closed port fails, as a witness that is down does in production: both rules' series say so."""
    text = scrape(alone)[1]
    assert gauge(text, "topicledger_witness_failing", witness="witness.example/closed") == 1
    assert gauge(text, "topicledger_witness_quorum_missing") == 1
    ready = requests.get(f"{alone}/readyz", timeout=10)
    assert ready.status_code == 503 and "witness.example/closed" in ready.text, ready.text


def test_the_metrics_the_docs_name_are_served(served):
    documented = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for span in re.findall(r"`([^`\n]+)`", path.read_text()):
            documented |= set(re.findall(r"(?<![\w.…])((?:topicledger|ledger)_[a-z0-9_]+)(?![\w.])", span))
    assert documented, "no metric found in the docs"
    missing = []
    for name in sorted(documented):
        if name in served.series or name in served.families:
            continue
        if name in DOCUMENTED_FROM_SOURCE and any(f'"{name}"' in p.read_text() for p in source_files_naming(name)):
            continue
        missing.append(name)
    assert not missing, f"named in the docs, not served by `ledger serve` or `ledger witness`: {missing}"


# Helpers of the checks

def source_files_naming(metric):
    return [path for path in (ROOT / "Sources").rglob("*.swift") if f'"{metric}"' in path.read_text()]


def heading_anchors(path):
    """GitHub's anchors of a Markdown file's headings."""
    anchors, fenced = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match[1].strip().lower()).replace(" ", "-")
            anchors.add(slug)
    return anchors
