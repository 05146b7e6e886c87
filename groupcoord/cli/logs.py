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
from datetime import UTC, datetime
from typing import Any

__all__ = ["JsonFormatter", "TextFormatter", "escape", "use_log_format"]

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
