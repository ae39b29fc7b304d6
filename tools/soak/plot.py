"""Plots a soak CSV (tools/soak/soak.py) to PNG: RSS and open fds, and the /healthz p99, over time."""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = list(csv.DictReader(open(sys.argv[1])))
minutes = [int(r["seconds"]) / 60 for r in rows]
figure, (memory, latency) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
memory.plot(minutes, [int(r["rss_bytes"]) / 2**20 for r in rows], label="RSS (MiB)")
if "rss_anon_bytes" in rows[0]:
    memory.plot(minutes, [int(r["rss_anon_bytes"]) / 2**20 for r in rows], label="anonymous RSS, the heap (MiB)")
if rows[0].get("ledger_file_bytes"):
    memory.plot(minutes, [int(r["ledger_file_bytes"]) / 2**20 for r in rows], label="the ledger's data.mdb (MiB)",
                linestyle="--")
memory.plot(minutes, [int(r["open_fds"]) for r in rows], label="open file descriptors")
memory.set_ylim(bottom=0)
memory.legend()
memory.set_title("ledger serve under mixed load (wrk, SSE churn, long polls)")
latency.plot(minutes, [float(r["healthz_p99_ms"]) for r in rows], label="/healthz p99 (ms), per 10 s", color="C2")
latency.set_ylim(bottom=0)
latency.set_xlabel("minutes")
latency.legend()
figure.tight_layout()
figure.savefig(sys.argv[2], dpi=100)
