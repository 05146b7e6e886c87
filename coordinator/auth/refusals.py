"""How refused calls are logged and answered: a bounded number of lines, and a short pause first.

A refused caller may retry as fast as it is answered. Two things keep that cheap (issue 38: four
senders of 24 MiB PutTasks without a token drew 3,664 WARNING lines in 15 s and 6.4 s of CPU):

* ``RefusalLog`` writes at most ``lines_per_window`` lines per window; past that it counts, and the
  next line it writes says how many it left out. Quoted client input is cut to ``quote`` (ids over
  their limit never reach the log whole).
* ``RefusalDelay`` answers a refusal made before the body is read only after a pause, as Kafka's
  ``connection.failed.authentication.delay.ms`` does (KIP-306): a client that waits for each answer
  can be refused at most ``1 / delay`` times a second. The pause costs no CPU and reads no byte, and
  at most ``max_held`` refusals wait at once (past that they are answered at once), so holding them
  costs at most that many HTTP/2 windows. A refusal made once the body was read waits longer, in
  proportion to the bytes read (``READ_REFUSED_BYTES_PER_S``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["MAX_READ_PAUSE_S", "QUOTE_CHARS", "READ_REFUSED_BYTES_PER_S", "RefusalDelay", "RefusalLog", "quoted"]

QUOTE_CHARS = 64
"""Characters of client input (a group id, a principal's claim) quoted in a log line or an answer."""


def quoted(value: str, limit: int = QUOTE_CHARS) -> str:
    """``value`` as ``repr`` would show it, cut to ``limit`` characters with its full length said."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value):,} characters)"


@dataclass
class RefusalLog:
    """WARNING lines for refused calls, at most ``lines_per_window`` per ``window_s`` seconds."""

    logger: logging.Logger
    lines_per_window: int = 10
    window_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    _window_start: float = field(default=float("-inf"), init=False)
    _written: int = field(default=0, init=False)
    _left_out: int = field(default=0, init=False)

    def refused(self, method: str, principal: str, what: str) -> bool:
        """Log one refusal (or count it); True if a line was written."""
        now = self.clock()
        if now - self._window_start >= self.window_s:
            self._window_start, self._written = now, 0
        if self._written >= self.lines_per_window:
            self._left_out += 1
            return False
        self._written += 1
        left_out, self._left_out = self._left_out, 0
        more = f" ({left_out} more refusals not logged before this one)" if left_out else ""
        self.logger.warning("denied %s: principal %s: %s%s", method, principal, what, more)
        return True

    @property
    def left_out(self) -> int:
        """Refusals counted but not yet reported by a line."""
        return self._left_out


READ_REFUSED_BYTES_PER_S = 16 * 1_048_576
"""A refusal made after the body was read (it named a group the caller may not act on) waits a
further second per this many bytes read, so a caller that waits for its answers makes the coordinator
read at most about this much a second for nothing (issue 38: four senders of 21 MiB PutTasks to a
group their token has no right on, 420 refusals and 6.3 s of CPU in 16 s with the base pause only; 60 refusals and 0.9 s with it)."""
MAX_READ_PAUSE_S = 2.0
"""At most this much is added for the bytes read."""


@dataclass
class RefusalDelay:
    """Pauses before refusals are answered, at most ``max_held`` at once (the rest answered at once)."""

    max_held: int = 256
    held: int = field(default=0, init=False)

    @staticmethod
    def length(delay_s: float, read_bytes: int = 0) -> float:
        """The pause before a refusal: ``delay_s`` (0: none at all), more for the bytes read."""
        if delay_s <= 0:
            return 0.0
        return delay_s + min(MAX_READ_PAUSE_S, read_bytes / READ_REFUSED_BYTES_PER_S)

    async def pause(self, delay_s: float, read_bytes: int = 0) -> None:
        """Wait ``length(delay_s, read_bytes)`` unless ``max_held`` refusals are waiting already."""
        seconds = self.length(delay_s, read_bytes)
        if seconds <= 0 or self.held >= self.max_held:
            return
        self.held += 1
        try:
            await asyncio.sleep(seconds)
        finally:
            self.held -= 1
