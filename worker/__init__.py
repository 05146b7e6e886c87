"""The embeddable worker client (see ``worker.client``; its diagram is ``worker.states``)."""

from worker.client import WorkerClient
from worker.config import WorkerConfig, parse_addresses
from worker.listener import JoinListener, TaskListener
from worker.states import WorkerState
from worker.transport import WorkerClosedError

__all__ = [
    "JoinListener",
    "TaskListener",
    "WorkerClient",
    "WorkerClosedError",
    "WorkerConfig",
    "WorkerState",
    "parse_addresses",
]
