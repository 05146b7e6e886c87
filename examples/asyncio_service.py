"""An aiohttp service that is a member of a groupcoord group (``AsyncWorkerClient``).

Each task the group assigns this process runs as an asyncio task; ``on_revoked`` cancels it and
awaits its end before the worker re-joins, so a task never runs on two processes at once.
``GET /assignment`` says what this process runs. Everything is on one event loop: the web server,
the tasks and the group membership.

Run a coordinator (``groupcoord serve``), add tasks
(``groupcoord tasks put shop orders-0 orders-1 orders-2``), then start this a few times:

    python examples/asyncio_service.py --coordinator 127.0.0.1:9400 --group shop --port 8080
    curl localhost:8080/assignment

Ctrl-C (or SIGTERM) stops the tasks, leaves the group and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from collections.abc import Sequence

from aiohttp import web

from groupcoord import AsyncWorkerClient, TaskReplica, WorkerConfig


class Tasks:
    """One asyncio task per assigned task replica."""

    def __init__(self) -> None:
        self.client: AsyncWorkerClient | None = None
        self.running: dict[TaskReplica, asyncio.Task[None]] = {}

    async def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None:
        for task in tasks:
            self.running[task] = asyncio.create_task(self.work(task, generation), name=str(task))

    async def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
        """Stop them, and wait until they have stopped: the worker re-joins only after this returns."""
        stopping = [self.running.pop(task) for task in tasks if task in self.running]
        for running in stopping:
            running.cancel()
        await asyncio.gather(*stopping, return_exceptions=True)

    async def on_lost(self, tasks: Sequence[TaskReplica]) -> None:
        await self.on_revoked(tasks)  # another member may run them already: stop at once, commit nothing

    async def work(self, task: TaskReplica, generation: int) -> None:
        while True:
            client = self.client
            # fencing: act only while the task is ours in this generation
            if client is not None and client.generation == generation and task in client.assigned_tasks:
                print(f"working on {task} (generation {generation})", flush=True)
            await asyncio.sleep(1.0)


async def assignment(request: web.Request) -> web.Response:
    client: AsyncWorkerClient = request.app["client"]
    return web.json_response({
        "member_id": client.member_id,
        "generation": client.generation,
        "state": client.state.value,
        "tasks": sorted(str(t) for t in client.assigned_tasks),
    })


async def serve(args: argparse.Namespace) -> None:
    tasks = Tasks()
    config = WorkerConfig(group_id=args.group, coordinators=args.coordinator, client_id=args.name,
                          assignors=("sticky", "round-robin"), rebalance_protocol="cooperative")
    async with AsyncWorkerClient(config, tasks) as client:
        tasks.client = client
        app = web.Application()
        app["client"] = client
        app.router.add_get("/assignment", assignment)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port)
        await site.start()
        port = runner.addresses[0][1]
        print(f"listening on http://127.0.0.1:{port}/assignment", flush=True)
        try:
            await asyncio.Event().wait()  # until cancelled (Ctrl-C, SIGTERM)
        finally:
            await runner.cleanup()
    # leaving the block closed the client: tasks stopped (on_revoked awaited), LeaveGroup sent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--coordinator", default="127.0.0.1:9400", help="HOST:PORT[,HOST:PORT...]")
    parser.add_argument("--group", default="shop")
    parser.add_argument("--name", default="aio-example")
    parser.add_argument("--port", type=int, default=8080, help="0: any free port")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    async def run() -> None:
        service = asyncio.create_task(serve(args))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, service.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await service

    asyncio.run(run())


if __name__ == "__main__":
    main()
