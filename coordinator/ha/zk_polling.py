"""kazoo's threading handler, with fewer system calls per ZooKeeper message: less CPU, and no
queueing for the GIL between the parts of one message.

kazoo's connection thread waits for its socket before every read and every write, and once more per
turn of its loop, and reads each message in two ``recv`` (its length, then its body): four or five
system calls for each answer or watch event. Two costs follow:

* **CPU.** kazoo 2.x waits by building an epoll selector, registering the sockets, waiting and
  closing it (``selector_select``, kept for sockets numbered past ``select``'s 1,024). In a profile
  of the election simulation's host processes (issue 37) that was most of the CPU the coordinators
  spent on ZooKeeper. Here a wait is one ``poll`` (no such limit, no kernel object to make).
* **Waiting for the GIL.** Each system call gives the GIL up, and taking it back waits for any
  thread running Python in the meantime to be made to yield (``sys.getswitchinterval()``, 5 ms):
  with a busy thread beside it (a coordinator's event loop, or here the other coordinators of a
  host process) one read took 10-14 ms and 100 pipelined ones 90-300 ms. So the connection's socket
  is read 64 KiB at a time (``BufferedConnection``): a burst of answers and events (a failover's)
  comes in with one ``recv``, and the messages already in the buffer are read, and waited for,
  with no system call at all. kazoo asks a socket for ``pending()`` bytes before it waits (for TLS);
  the buffer answers it, and ``poll_select`` returns a socket with bytes pending at once.

``benchmarks/zk_client_bench.py`` measures both; the module's tests hold ``poll_select`` to
``selector_select`` on live sockets.
"""

from __future__ import annotations

import math
import select
from collections.abc import Sequence
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import fileobj_to_fd

__all__ = ["CHUNK", "BufferedConnection", "PollingHandler", "poll_select"]

CHUNK = 65_536  # bytes read at once: a failover's burst of events and answers to one coordinator is less

_READABLE = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR  # as select() calls readable
_WRITABLE = select.POLLOUT | select.POLLHUP | select.POLLERR


def poll_select(rlist: Sequence[Any], wlist: Sequence[Any], xlist: Sequence[Any],
                timeout: float | None = None) -> tuple[list[Any], list[Any], list[Any]]:
    """``select.select``'s contract for any descriptor number, as kazoo's ``selector_select`` keeps it:
    the ready objects of ``rlist`` and ``wlist`` (``xlist`` is never answered, as there), a negative or
    non-numeric timeout refused, a bad descriptor a ``ValueError`` (a closed one a ``TypeError``)."""
    if timeout is not None:
        if not isinstance(timeout, (int, float)):
            raise TypeError("timeout must be a number")
        if timeout < 0:
            raise ValueError("timeout must be non-negative")
    buffered = [f for f in rlist if isinstance(f, BufferedConnection) and f.pending()]
    if buffered:  # read already: no wait (a request queued meanwhile goes once the buffer is read)
        return buffered, [], []
    masks: dict[int, int] = {}
    for objects, mask in ((rlist, select.POLLIN | select.POLLPRI), (wlist, select.POLLOUT)):
        for fileobj in objects:
            fd = fileobj_to_fd(fileobj)
            masks[fd] = masks.get(fd, 0) | mask
    poller = select.poll()
    for fd, mask in masks.items():
        poller.register(fd, mask)
    ready = dict(poller.poll(None if timeout is None else math.ceil(timeout * 1000)))
    if any(events & select.POLLNVAL for events in ready.values()):
        raise ValueError("Invalid event mask or fd")
    readable = [f for f in rlist if ready.get(fileobj_to_fd(f), 0) & _READABLE]
    writable = [f for f in wlist if ready.get(fileobj_to_fd(f), 0) & _WRITABLE]
    return readable, writable, []


class BufferedConnection:
    """A connected socket (plain or TLS) read ``CHUNK`` bytes at a time: ``recv(n)`` serves what the
    last read brought before it reads again. Everything else is the socket's own."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._buffer = bytearray()

    def pending(self) -> int:
        """Bytes readable without a system call (ours, and a TLS socket's decrypted ones)."""
        inner = self._sock.pending() if hasattr(self._sock, "pending") else 0
        return len(self._buffer) + inner

    def recv(self, size: int) -> bytes:
        if not self._buffer:
            chunk = self._sock.recv(max(size, CHUNK))  # raises as the socket does (would block, TLS wants)
            if not chunk:
                return b""  # closed by the server: kazoo says "socket connection broken"
            if len(chunk) <= size:
                return bytes(chunk)
            self._buffer += chunk
        out = bytes(self._buffer[:size])
        del self._buffer[:size]
        return out

    def fileno(self) -> int:
        return int(self._sock.fileno())

    def __getattr__(self, name: str) -> Any:  # send, close, setblocking, ...: the socket's
        return getattr(self._sock, name)


class PollingHandler(SequentialThreadingHandler):  # type: ignore[misc]  # kazoo has no type hints
    """kazoo's own threading handler; its waits are ``poll_select`` and its connection is buffered."""

    def select(self, *args: Any, **kwargs: Any) -> tuple[list[Any], list[Any], list[Any]]:
        return poll_select(*args, **kwargs)

    def create_connection(self, *args: Any, **kwargs: Any) -> BufferedConnection:
        return BufferedConnection(super().create_connection(*args, **kwargs))
