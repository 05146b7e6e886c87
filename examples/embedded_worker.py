"""A service that embeds the groupcoord worker client.

Run a coordinator (``groupcoord serve``), add tasks
(``groupcoord tasks put shop orders-0 orders-1 orders-2``), then start this
file a few times: each process runs the tasks the group gives it, stops them
when they are revoked, and leaves the group cleanly on Ctrl-C.

    python examples/embedded_worker.py --coordinator 127.0.0.1:9400 --group shop
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Sequence

from groupcoord.assignors import TaskReplica
from groupcoord.worker import WorkerClient, WorkerConfig


class TaskRunner:
    """Runs one thread per assigned task; the generation fences side effects."""

    def __init__(self) -> None:
        self.client: WorkerClient | None = None
        self._stops: dict[TaskReplica, threading.Event] = {}

    def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None:
        for task in tasks:
            stop = threading.Event()
            self._stops[task] = stop
            threading.Thread(target=self._work, args=(task, generation, stop), daemon=True).start()

    def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
        for task in tasks:  # eager protocol: stop before the group re-balances
            self._stops.pop(task).set()

    def _work(self, task: TaskReplica, generation: int, stop: threading.Event) -> None:
        while not stop.wait(1.0):
            client = self.client
            # Fencing: only act while this task is still ours in this generation.
            if client is None or client.generation != generation or task not in client.assigned_tasks:
                return
            print(f"working on {task} (generation {generation})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--coordinator", default="127.0.0.1:9400", help="HOST:PORT[,HOST:PORT...]")
    parser.add_argument("--group", default="shop")
    parser.add_argument("--name", default="example")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    runner = TaskRunner()
    config = WorkerConfig(
        group_id=args.group,
        coordinators=args.coordinator,
        client_id=args.name,
        assignors=("sticky", "round-robin"),  # most preferred first; the group picks one all members support
        session_timeout_ms=10_000,
        heartbeat_interval_ms=3_000,
    )
    done = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: done.set())
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with WorkerClient(config, runner) as client:  # start() ... close() sends LeaveGroup
        runner.client = client
        done.wait()


if __name__ == "__main__":
    main()
