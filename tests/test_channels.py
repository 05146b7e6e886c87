"""Client channels: one client's failed connections never make another client fail."""

from __future__ import annotations

import pytest

from groupcoord.admin import AdminClient
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.errors import CoordinatorNotAvailableError
from tests.zookeeper_server import free_port


def test_a_new_client_reaches_a_coordinator_where_an_older_client_found_nothing() -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    older = AdminClient(address, timeout_s=1.0)  # kept open: its channel retries the port in the background
    try:
        with pytest.raises(CoordinatorNotAvailableError):
            older.list_groups()
        with pytest.raises(CoordinatorNotAvailableError):
            older.list_groups()  # its connection now waits out a backoff
        with ServerThread(listen=address), AdminClient(address, timeout_s=1.0) as newer:
            assert newer.list_groups() == []  # at once: gRPC's shared connection would still be backing off
    finally:
        older.close()

