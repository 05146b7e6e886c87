"""The embeddable worker client (see ``worker.client``; its diagram is ``worker.states``)."""

from groupcoord.worker.client import WorkerClient
from groupcoord.worker.config import WorkerConfig, parse_addresses
from groupcoord.worker.listener import JoinListener, TaskListener
from groupcoord.worker.states import WorkerState
from groupcoord.worker.transport import WorkerClosedError

__all__ = [
    "JoinListener",
    "TaskListener",
    "WorkerClient",
    "WorkerClosedError",
    "WorkerConfig",
    "WorkerState",
    "parse_addresses",
]
