"""A Session stream's way out: its answers and news queued in order, written by one task, and bounded.

Why a queue of our own in front of grpc's: a client that stops reading must not grow the coordinator's
memory (``session_max_buffered_bytes``: past it the stream is cut off and everything queued dropped),
and an answer must never wait for the one before it to be serialised again.

Why batches: gRPC Python spends about as much CPU on one message's write as the coordinator spends on a
heartbeat's model step, and a rebalance of N members writes 2N+ answers and news in a burst. To a client
that says it reads them (its call metadata has ``groupcoord-session-batch``), whatever waits when the
writer comes round goes out as one ``SessionResponse`` whose ``batch`` holds each frame as written (a
length-delimited field: no decoding, no copy into a message), up to ``BATCH_BYTES``; a larger frame goes
alone. A client that does not ask gets one frame a message, as before.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from groupcoord.coordinator.rpc.session_envelope import varint
from groupcoord.coordinator.rpc.session_metrics import SessionFigures

__all__ = ["BATCH_BYTES", "BATCH_KEY", "SessionOutbox", "batch_of"]

BATCH_BYTES = 192 * 1024
"""A batch is closed at this size (a client's default receive limit is 4 MiB; large answers go alone)."""
BATCH_KEY = b"\xf2\x01"  # field 30 (``batch``), wire type 2: varint(30 << 3 | 2)


def batch_of(frames: list[bytes]) -> bytes:
    """One ``SessionResponse`` carrying ``frames`` (each a serialised ``SessionResponse``) in its ``batch``."""
    return b"".join(BATCH_KEY + varint(len(data)) + data for data in frames)


class SessionOutbox:
    """Frames on their way to one client; ``put`` refuses one past the bound (the caller cuts the stream off)."""

    def __init__(self, limit: int, figures: SessionFigures, write: Callable[[bytes], Awaitable[None]],
                 *, batches: bool) -> None:
        self.limit = limit
        self.batches = batches
        self._figures = figures
        self._write = write
        self._queue: deque[bytes] = deque()
        self._buffered = 0  # queued and being written
        self._writing = 0  # of which being written now
        self.wake = asyncio.Event()

    def __bool__(self) -> bool:
        """Whether anything is still queued or being written."""
        return bool(self._queue) or self._writing > 0

    def waiting_with(self, data: bytes) -> int:
        """The bytes that would wait behind the message being written, ``data`` queued (0: nothing waits)."""
        return self._buffered - self._writing + len(data) if self._buffered else 0

    def put(self, data: bytes) -> bool:
        """Queue ``data``; False (nothing queued) when more than ``limit`` bytes would then wait."""
        if self.waiting_with(data) > self.limit:
            return False
        self._queue.append(data)
        self._buffered += len(data)
        figures = self._figures
        figures.buffered_bytes += len(data)
        figures.peak_buffered_bytes = max(figures.peak_buffered_bytes, self._buffered)
        self.wake.set()
        return True

    def drop(self) -> None:
        self._figures.buffered_bytes -= self._buffered
        self._queue.clear()
        self._buffered = self._writing = 0

    def _next(self) -> tuple[bytes, int]:
        """The next message to write and the queued bytes it carries (taken off the queue)."""
        queue = self._queue
        first = queue.popleft()
        if not self.batches or not queue or len(first) >= BATCH_BYTES:
            return first, len(first)
        frames, size = [first], len(first)
        while queue and size + len(queue[0]) <= BATCH_BYTES:
            data = queue.popleft()
            frames.append(data)
            size += len(data)
        return batch_of(frames), size

    async def run(self, idle: Callable[[], None]) -> None:
        """Write until cancelled; ``idle`` is called each time nothing is left to write."""
        while True:
            if not self._queue:
                self.wake.clear()
                idle()
                await self.wake.wait()
                continue
            message, carried = self._next()
            self._writing = carried
            try:
                await self._write(message)
            finally:
                if self._writing:  # (not dropped meanwhile)
                    self._writing = 0
                    self._buffered -= carried
                    self._figures.buffered_bytes -= carried
