"""`make bench`: run every benchmark script in turn; each prints its own table.

    python benchmarks/run_all.py [--quick] [--only NAME[,NAME...]]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = {
    "coordinator": "coordinator_bench.py",  # heartbeat capacity, rebalance latency (issue 2, 6)
    "heartbeat_instructions": "heartbeat_instructions.py",  # instructions per heartbeat vs a no-op server (issue 27)
    "load": "load_bench.py",  # many groups at 1 hb/s: capacity vs a no-op server, then 2x (issue 14)
    "stall": "stall_bench.py",  # another group's heartbeat while a maximal request is handled (issue 14)
    "store": "store_bench.py",  # SQLite vs memory saves (issue 6)
    "failover": "failover_bench.py",  # active coordinator killed -> group Stable again (issue 6)
    "assignors": "assignors_bench.py",  # replica shift, round-robin, sticky vs kafka-python (issue 3)
    "pulsar": "pulsar_bench.py",  # shedding + placement, 10k tasks / 1k members (issue 4)
    "balance_sim": "balance_sim.py",  # strategies side by side, plots in benchmarks/out (issue 4)
    "stats": "stats_bench.py",  # Spark job vs single-process reference (issue 5)
    "downtime": "downtime_bench.py",  # task downtime: rolling restart, scale-out; eager vs cooperative (issue 12)
    "worker_footprint": "worker_footprint_bench.py",  # CPU and memory: threaded vs asyncio client, 1, 100 and 1,000 members (issues 24, 27)
    "scale": "scale_bench.py",  # 1 vs 2 sharded coordinators' capacity, shard move and failover times (issue 23)
    "protocol": "protocol_bench.py",  # one member joins a group of 1,000 / 10,000: classic vs consumer protocol (issue 34)
    "zk_client": "zk_client_bench.py",  # a ZooKeeper request's CPU: kazoo's handler vs the coordinator's poll one (issue 37)
    "election_sim": "election_sim.py",  # 100 coordinators, 1,024 shards on one ZooKeeper: failover, reads, CPU (issue 37)
    "stream": "stream_bench.py",  # unary vs Session stream: members per process, joins of 1,000/10,000 (issue 35)
    "consumer_stream": "consumer_stream_bench.py",  # consumer protocol over gRPC: newcomer running its tasks (issues 34, 35)
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="", help="comma-separated subset of: " + ", ".join(BENCHMARKS))
    args = parser.parse_args()
    chosen = [n for n in args.only.split(",") if n] or list(BENCHMARKS)
    unknown = sorted(set(chosen) - set(BENCHMARKS))
    if unknown:
        print(f"run_all: unknown benchmark(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    failed = []
    for name in chosen:
        script = HERE / BENCHMARKS[name]
        print(f"\n######## {name} ({script.name})", flush=True)
        started = time.monotonic()
        result = subprocess.run([sys.executable, str(script), *(["--quick"] if args.quick else [])], check=False)
        print(f"######## {name}: exit {result.returncode} in {time.monotonic() - started:.0f}s", flush=True)
        if result.returncode != 0:
            failed.append(name)
    if failed:
        print(f"run_all: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
