"""The ZooKeeper connection's one-call wait (``coordinator.ha.zk_polling``) answers as kazoo's own does."""

from __future__ import annotations

import os
import resource
import select
import socket
import threading
from collections.abc import Iterator

import pytest
from kazoo.handlers.utils import selector_select

from groupcoord.coordinator.ha.election import connect
from groupcoord.coordinator.ha.zk_polling import CHUNK, BufferedConnection, PollingHandler, poll_select
from tests.zookeeper_server import ZooKeeperServer


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def both(rlist: list[object], wlist: list[object], timeout: float | None = 0.0) -> tuple[object, object]:
    return poll_select(rlist, wlist, [], timeout), selector_select(rlist, wlist, [], timeout)


def test_nothing_to_read_times_out_empty_and_a_written_socket_is_readable(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    ours, kazoos = both([a], [], 0.01)
    assert ours == kazoos == ([], [], [])
    b.send(b"x")
    ours, kazoos = both([a, b], [])
    assert ours == kazoos == ([a], [], [])
    ours, kazoos = both([a], [b])
    assert ours == kazoos == ([a], [b], [])
    # one socket in both lists (kazoo never asks that): as select.select answers, once in each
    assert poll_select([a, b], [b], [], 0) == select.select([a, b], [b], [], 0) == ([a], [b], [])


def test_a_peer_that_hung_up_reads_as_readable(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    b.close()
    ours, kazoos = both([a], [])
    assert ours == kazoos == ([a], [], [])  # recv then says so (0 bytes): kazoo's "socket connection broken"


def test_descriptors_past_select_s_limit_are_waited_on(pair: tuple[socket.socket, socket.socket]) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"descriptors are limited to {hard} here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100), hard))
    a, b = pair
    high = os.dup2(a.fileno(), 1090)  # select.select() refuses a descriptor this high
    try:
        b.send(b"x")
        ours, kazoos = both([high], [])
        assert ours == kazoos == ([1090], [], [])
        with pytest.raises(ValueError):
            select.select([high], [], [], 0)
    finally:
        os.close(high)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("timeout, error", [(-1, ValueError), ("1", TypeError)])
def test_a_bad_timeout_is_refused_as_kazoo_refuses_it(pair: tuple[socket.socket, socket.socket],
                                                       timeout: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        poll_select([pair[0]], [], [], timeout)  # type: ignore[arg-type]
    with pytest.raises(error):
        selector_select([pair[0]], [], [], timeout)


def test_a_closed_socket_or_descriptor_is_refused_as_kazoo_refuses_it() -> None:
    closed = socket.socket()
    closed.close()
    for select_ in (poll_select, selector_select):
        with pytest.raises(TypeError):  # fileno() is -1
            select_([closed], [], [], 0)
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    for select_ in (poll_select, selector_select):
        with pytest.raises(ValueError):  # a number no longer open
            select_([r], [], [], 0)


def test_the_coordinators_client_waits_with_poll_and_works_on_a_real_zookeeper(tmp_path: object) -> None:
    zk = ZooKeeperServer()
    zk.start()
    try:
        client = connect(zk.hosts, session_timeout=4.0)
        try:
            assert isinstance(client.handler, PollingHandler)
            assert isinstance(client._connection._socket, BufferedConnection)  # kazoo's connection, read buffered
            client.create("/polled", b"v" * 100_000)  # a write and a read over several socket waits each
            assert client.get("/polled")[0] == b"v" * 100_000
            answers = [client.get_async("/polled") for _ in range(50)]
            assert all(len(a.get(timeout=30)[0]) == 100_000 for a in answers)
        finally:
            client.stop()
            client.close()
    finally:
        zk.close()


def test_a_buffered_connection_serves_several_messages_from_one_read_and_says_so(
        pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    conn = BufferedConnection(a)
    b.sendall(b"\x00\x00\x00\x03abc" + b"\x00\x00\x00\x02de")  # two messages, as ZooKeeper frames them
    assert poll_select([conn], [], [], 5) == ([conn], [], [])
    assert conn.recv(4) == b"\x00\x00\x00\x03" and conn.pending() == 9
    # the rest is already here: readable at once, with nothing left on the socket itself
    assert poll_select([conn], [], [], 0) == ([conn], [], []) and select.select([a], [], [], 0)[0] == []
    assert [conn.recv(3), conn.recv(4), conn.recv(10)] == [b"abc", b"\x00\x00\x00\x02", b"de"]
    assert conn.pending() == 0 and poll_select([conn], [], [], 0) == ([], [], [])
    b.close()
    assert poll_select([conn], [], [], 5) == ([conn], [], []) and conn.recv(4) == b""  # hung up: "broken"


def test_a_buffered_connection_reads_a_message_larger_than_its_chunk_whole(
        pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    a.setblocking(False)  # as kazoo sets it
    conn = BufferedConnection(a)
    body = os.urandom(3 * CHUNK + 17)
    sender = threading.Thread(target=b.sendall, args=(body,))
    sender.start()
    got = bytearray()
    while len(got) < len(body):
        if conn.pending() or poll_select([conn], [], [], 5)[0]:
            got += conn.recv(len(body) - len(got))
    sender.join()
    assert bytes(got) == body
    with pytest.raises(BlockingIOError):  # nothing buffered, nothing sent: the socket's own answer
        conn.recv(4)
