"""A service written as docs/asyncio.md and docs/worker.md show it, stopped by SIGTERM (run by test_sigterm.py).

``python sigterm_member.py asyncio|threaded ADDRESS``: joins group "svc" with a 60 s session, prints
"stable MEMBER_ID" once Stable, then serves until a signal and prints "left SIGNUM"."""

from __future__ import annotations

import asyncio
import sys

from groupcoord.worker import AsyncWorkerClient, WorkerClient, WorkerConfig


class Quiet:
    def on_assigned(self, tasks: object, generation: int) -> None:
        pass

    def on_revoked(self, tasks: object) -> None:
        pass


def config(address: str) -> WorkerConfig:
    return WorkerConfig(group_id="svc", coordinators=(address,), client_id="child", session_timeout_ms=60_000,
                        heartbeat_interval_ms=200, rebalance_timeout_ms=5_000)


async def on_a_loop(address: str) -> int:
    async with AsyncWorkerClient(config(address), Quiet()) as client:
        if not await client.wait_until_stable(30):
            return 2
        print("stable", client.member_id, flush=True)
        signum = await client.run_until_signal()
    print("left", signum, flush=True)
    return 0


def threaded(address: str) -> int:
    client = WorkerClient(config(address), Quiet()).start()
    if not client.wait_until_stable(30):
        client.close()
        return 2
    print("stable", client.member_id, flush=True)
    signum = client.run_until_signal()
    print("left", signum, flush=True)
    return 0


if __name__ == "__main__":
    kind, address = sys.argv[1], sys.argv[2]
    sys.exit(asyncio.run(on_a_loop(address)) if kind == "asyncio" else threaded(address))
