"""The embeddable worker client (see ``worker.client``)."""

from worker.client import TaskListener, WorkerClient, WorkerClosedError, WorkerState
from worker.config import WorkerConfig, parse_addresses

__all__ = ["WorkerClient", "WorkerConfig", "WorkerState", "TaskListener", "WorkerClosedError", "parse_addresses"]
