"""How clients (workers, the admin client, the CLI) open channels to a coordinator.

Two settings matter beyond gRPC's defaults:

- **Reconnect backoff, bounded.** gRPC's default backoff grows to minutes while the
  coordinator is down, so a worker could stay disconnected for seconds after a restarted
  coordinator is back and lose its session for an outage shorter than the session. Capped at
  a heartbeat interval, the worker reconnects within one interval of the coordinator's return.
- **Receive limit matching the server's.** The leader's JoinGroup answer carries the whole
  catalog; gRPC's 4 MiB default would refuse answers the server sends for groups its limits
  allow.
"""

from __future__ import annotations

__all__ = ["MAX_RECEIVE_BYTES", "channel_options"]

MAX_RECEIVE_BYTES = 256 * 1_048_576


def channel_options(reconnect_backoff_max_ms: int = 1_000) -> list[tuple[str, int]]:
    """gRPC channel options for a client that must come back quickly after an outage."""
    cap = max(100, reconnect_backoff_max_ms)
    return [
        ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
        ("grpc.initial_reconnect_backoff_ms", min(100, cap)),
        ("grpc.min_reconnect_backoff_ms", min(100, cap)),
        ("grpc.max_reconnect_backoff_ms", cap),
    ]
