"""Log formats of the ``groupcoord`` command: text (the default) and JSON, one event per line.

The standard library's ``logging`` with a small JSON formatter, not structlog: every module
already logs through ``logging.getLogger("groupcoord.*")``, the key sites pass their fields
as ``extra=`` (``event``, ``group``, ``member``, ``instance``, ``generation``, ``reason``), and
a formatter is all it takes to turn those into one JSON object per line. Nothing else to
install, and a service embedding the worker or the coordinator keeps its own logging setup.

Both formats are safe against what clients send: JSON escapes by construction, and the text
format escapes control characters in the message (a reason with a newline in it cannot forge a
second log line). Tracebacks keep their lines in text, and travel as one ``exc`` field in JSON.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

__all__ = ["EventRateLimit", "JsonFormatter", "TextFormatter", "escape", "use_log_format"]

# attributes every LogRecord has: anything else on a record came in through ``extra=``
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "taskName"}


def escape(text: str) -> str:
    """``text`` with control and other unprintable characters as Python escapes (``\\n``, ``\\x1b``)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message``, the message escaped."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape(record.message)
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, the
    record's ``extra=`` fields, and ``exc`` (the traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)


def use_log_format(log_format: str) -> None:
    """Switch the root logger's ``TextFormatter`` handlers (``main`` installs one) to ``log_format``."""
    formatter: logging.Formatter = JsonFormatter() if log_format == "json" else TextFormatter()
    for handler in logging.getLogger().handlers:
        if isinstance(handler.formatter, (TextFormatter, JsonFormatter)):
            handler.setFormatter(formatter)


class EventRateLimit(logging.Filter):
    """At most ``burst`` lines of one event kind (the ``event`` extra: ``member_joined``,
    ``rebalance_started``...) per ``window_s``; beyond that they are counted, not written, and the
    first line of that kind after the window says how many were left out (``suppressed``). A fleet
    of a thousand workers starting together writes a screenful, not a thousand lines; one group's
    story, a few lines a minute, is never cut. Lines without an event pass untouched."""

    def __init__(self, burst: int = 50, window_s: float = 10.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst = burst
        self.window_s = window_s
        self._monotonic = monotonic
        self._windows: dict[str, list[float]] = {}  # event -> [window start, lines shown, lines left out]

    def filter(self, record: logging.LogRecord) -> bool:
        event = getattr(record, "event", None)
        if not isinstance(event, str):
            return True
        now = self._monotonic()
        window = self._windows.setdefault(event, [now, 0, 0])
        if now - window[0] >= self.window_s:
            left_out = int(window[2])
            window[:] = [now, 0, 0]
            if left_out:
                record.suppressed = left_out
                record.msg = f"{record.msg} ({left_out} more {event} line(s) left out before this one)"
        if window[1] >= self.burst:
            window[2] += 1
            return False
        window[1] += 1
        return True
