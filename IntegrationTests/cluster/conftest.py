"""Fixtures of the cluster suite: a fresh cluster (three etcd members, three nodes) for each test."""

import contextlib
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk-conformance"))
from openapi_contract import Contract, checking_responses  # noqa: E402

from cluster_harness import Cluster, Disk, Namespace


@pytest.fixture(scope="session", autouse=True)
def contract():
    """Every response of a node, to the suite's own requests, is checked against docs/openapi.yaml (the
    sdk-conformance suite's checker); at the end, the cluster's own operations must have answered 2xx."""
    def node_route(url):
        return urlsplit(url).path.startswith(("/v1/", "/iid/"))

    with checking_responses(Contract(), node_route) as checker:
        yield checker
    if os.environ.get("LEDGER_CONTRACT_COVERAGE") == "0":
        return
    cluster_operations = [(template, method) for template, method in checker.operations()
                          if "cluster" in checker.spec["paths"][template][method].get("tags", [])]
    missing = [operation for operation in cluster_operations
               if not any(seen[:2] == operation and seen[2].startswith("2") for seen in checker.seen)]
    assert not missing, f"cluster operations never answered 2xx in the suite: {missing}"


@contextlib.contextmanager
def stopped_afterwards(cluster):
    """Yields `cluster` and stops it (every process, its mounts, its files) however the test ends — a start that
    failed included."""
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster():
    with stopped_afterwards(Cluster(os.environ["LEDGER_BIN"])) as running:
        yield running.start()


@pytest.fixture
def expiring_cluster():
    """A cluster whose projects expire registrations silent for 8 seconds."""
    with stopped_afterwards(Cluster(os.environ["LEDGER_BIN"], project_options={"registrationExpiry": "8s"})) as running:
        yield running.start()


@pytest.fixture
def cut_off_cluster():
    """A cluster whose n1 (the first leader) runs in a network namespace, to be cut off; skipped, with the
    reason, where namespaces cannot be made."""
    reason = Namespace.unavailable()
    if reason:
        pytest.skip(reason)
    network = Namespace("n1").create()
    try:
        with stopped_afterwards(Cluster(os.environ["LEDGER_BIN"], network=network)) as running:
            yield running.start(n1_leads=True), network
    finally:
        network.destroy()


@pytest.fixture
def small_block_cluster():
    """A cluster whose blocks are at most 64 KiB, so that a batch of a thousand subscriptions is split."""
    with stopped_afterwards(Cluster(os.environ["LEDGER_BIN"], options={"maximumBlockBytes": 65536})) as running:
        yield running.start()


@pytest.fixture
def trimming_cluster():
    """A cluster whose etcd keeps only 10 events behind the tail once every holder has them."""
    with stopped_afterwards(Cluster(os.environ["LEDGER_BIN"], options={"retainedEvents": 10})) as running:
        yield running.start()


@pytest.fixture
def unstarted_cluster():
    """A cluster not started yet (its etcd neither), for a test that prepares the nodes' data first."""
    with stopped_afterwards(Cluster(os.environ["LEDGER_BIN"])) as running:
        yield running


@pytest.fixture
def small_etcd_cluster():
    """A cluster whose etcd members have a 4 MiB quota, which a few large commits fill (the NOSPACE alarm)."""
    quota = ("--quota-backend-bytes", str(4 << 20))
    with stopped_afterwards(Cluster(os.environ["LEDGER_BIN"], etcd_arguments=quota)) as running:
        yield running.start()


@pytest.fixture
def small_disk_cluster():
    """A cluster whose n1 (the first leader) and n3 keep their data on 64 MiB tmpfs mounts, to be filled;
    skipped, with the reason, where a tmpfs cannot be mounted."""
    reason = Disk.unavailable()
    if reason:
        pytest.skip(reason)
    with stopped_afterwards(Cluster(os.environ["LEDGER_BIN"], disks={"n1": 64, "n3": 64})) as running:
        yield running.start(n1_leads=True)
