"""Concurrent writers: threads registering devices through given nodes, keeping what was acknowledged."""

import threading

import requests


class Writers:
    """`per_node` threads per node, each registering devices until stopped; `acknowledged` holds the token of
    every registration answered 200."""

    def __init__(self, nodes, per_node=2, project="shop"):
        self.nodes = nodes
        self.project = project
        self.per_node = per_node
        self.acknowledged = []
        self.failures = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = []

    def _run(self, node):
        while not self.stopping.is_set():
            try:
                token = node.register(timeout=15, project=self.project)
            except requests.RequestException:
                token = None
            with self.lock:
                if token:
                    self.acknowledged.append(token)
                else:
                    self.failures += 1
            if not token:
                self.stopping.wait(0.05)

    def start(self):
        for node in self.nodes:
            for _ in range(self.per_node):
                thread = threading.Thread(target=self._run, args=(node,), daemon=True)
                thread.start()
                self.threads.append(thread)
        return self

    def count(self):
        with self.lock:
            return len(self.acknowledged)

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)
        return list(self.acknowledged)
