"""One consumer-protocol member in a process of its own, driven by either client, for the process tests.

    python -m tests.worker.consumer_member_proc --driver asyncio --coordinator HOST:PORT --group g \\
        --name g/w2#1 [--instance-id s2] --session-timeout-ms 3000 >> ownership.log

``groupcoord worker --protocol consumer`` is the threaded client's process; this one runs
``AsyncWorkerClient`` (or ``WorkerClient``) and writes the same JSON lines, one ``os.write`` each, so
both kinds share one ``O_APPEND`` ownership log (``tests/chaos/ownership.py``). SIGTERM closes the
client (revoke, then leave: -1, or -2 for a static member) and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from groupcoord.worker import AsyncWorkerClient, WorkerClient, WorkerConfig
from tests.chaos.member_host import SharedLogListener

__all__ = ["main"]


def _config(args: argparse.Namespace) -> WorkerConfig:
    return WorkerConfig(group_id=args.group, coordinators=args.coordinator, client_id=args.name,
                        protocol="consumer", instance_id=args.instance_id, session_timeout_ms=args.session_timeout_ms,
                        heartbeat_interval_ms=100, rebalance_timeout_ms=10_000, retry_backoff_ms=50,
                        retry_backoff_max_ms=500, session_stream=not args.unary)


async def _run_async(config: WorkerConfig, listener: SharedLogListener) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with AsyncWorkerClient(config, listener) as client:
        listener.client = client  # type: ignore[assignment]
        await stop.wait()
    return 0


def _run_threaded(config: WorkerConfig, listener: SharedLogListener) -> int:
    client = WorkerClient(config, listener)
    listener.client = client
    client.start()
    client.run_until_signal()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--driver", choices=["asyncio", "threaded"], default="asyncio")
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--name", required=True, help="the ownership log's worker name (GROUP/SLOT#INCARNATION)")
    parser.add_argument("--instance-id", default="")
    parser.add_argument("--session-timeout-ms", type=int, default=3_000)
    parser.add_argument("--unary", action="store_true", help="no Session stream: every call unary")
    args = parser.parse_args(argv)
    listener = SharedLogListener(args.name)
    config = _config(args)
    if args.driver == "asyncio":
        return asyncio.run(_run_async(config, listener))
    return _run_threaded(config, listener)


if __name__ == "__main__":
    sys.exit(main())
