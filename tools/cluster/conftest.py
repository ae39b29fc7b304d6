"""Fixtures of the cluster suite: a fresh cluster (three etcd members, three nodes) for each test."""

import os

import pytest

from cluster_harness import Cluster


@pytest.fixture
def cluster():
    binary = os.environ["LEDGER_BIN"]
    running = Cluster(binary).start()
    yield running
    running.stop()
