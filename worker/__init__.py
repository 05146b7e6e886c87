"""The embeddable worker clients: ``WorkerClient`` (a thread) and ``AsyncWorkerClient`` (asyncio).

Both walk the diagram of ``worker.states`` and decide by the error rules of ``worker.rules``.
"""

from groupcoord.worker.aio_client import AssignmentChange, AsyncWorkerClient
from groupcoord.worker.client import WorkerClient
from groupcoord.worker.config import WorkerConfig, parse_addresses
from groupcoord.worker.listener import JoinListener, TaskListener
from groupcoord.worker.states import WorkerState
from groupcoord.worker.transport import WorkerClosedError

__all__ = [
    "AssignmentChange",
    "AsyncWorkerClient",
    "JoinListener",
    "TaskListener",
    "WorkerClient",
    "WorkerClosedError",
    "WorkerConfig",
    "WorkerState",
    "parse_addresses",
]
