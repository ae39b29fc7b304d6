"""Fixtures of the cluster suite: a fresh cluster (three etcd members, three nodes) for each test."""

import os

import pytest

from cluster_harness import Cluster, Namespace


@pytest.fixture
def cluster():
    binary = os.environ["LEDGER_BIN"]
    running = Cluster(binary).start()
    yield running
    running.stop()


@pytest.fixture
def cut_off_cluster():
    """A cluster whose n1 (the first leader) runs in a network namespace, to be cut off; skipped, with the
    reason, where namespaces cannot be made."""
    reason = Namespace.unavailable()
    if reason:
        pytest.skip(reason)
    network = Namespace("n1").create()
    running = Cluster(os.environ["LEDGER_BIN"], network=network)
    try:
        running.start()
        yield running, network
    finally:
        running.stop()
        network.destroy()


@pytest.fixture
def small_block_cluster():
    """A cluster whose blocks are at most 64 KiB, so that a batch of a thousand subscriptions is split."""
    running = Cluster(os.environ["LEDGER_BIN"], options={"maximumBlockBytes": 65536}).start()
    yield running
    running.stop()
