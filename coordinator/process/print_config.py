"""``groupcoord serve --print-config``: the effective options as TOML (or JSON), secrets masked.

Generic over the options dataclass: every field is printed, so options added later appear without
a change here. Scalar fields go to ``[server]``; a field that is itself a dataclass (``coordinator``)
becomes its own table. A field whose name says it holds a secret (key, password, secret, token,
credential) is printed only as a path when its value is one (the file is never read), else masked.
The TOML output can be fed back as ``--config`` (masked values aside).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["MASK", "options_as_dict", "render_options"]

MASK = "********"
_SECRET = re.compile(r"key|password|passwd|secret|token|credential", re.IGNORECASE)


def _plain(name: str, value: Any) -> Any:
    """JSON-ready value of one field (None stays None: unset)."""
    if isinstance(value, Path):
        return str(value)  # a path, even of a secret file: its contents are never read
    if _SECRET.search(name) and value not in (None, ""):
        return MASK
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list, frozenset, set)):
        return [_plain(name, v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(str(k), v) for k, v in value.items()}
    return value


def options_as_dict(options: Any) -> dict[str, dict[str, Any]]:
    """``{"server": {...}, "<nested>": {...}}`` from a dataclass instance."""
    tables: dict[str, dict[str, Any]] = {"server": {}}
    for field in dataclasses.fields(options):
        value = getattr(options, field.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            tables[field.name] = {f.name: _plain(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)}
        else:
            tables["server"][field.name] = _plain(field.name, value)
    return tables


def render_options(options: Any, fmt: str = "toml") -> str:
    tables = options_as_dict(options)
    if fmt == "json":
        return json.dumps(tables, indent=2, default=str) + "\n"
    lines: list[str] = []
    for table, values in tables.items():
        lines.append(f"[{table}]")
        for key, value in values.items():
            lines.append(f"# {key} = (not set)" if value is None else f"{key} = {_toml(value)}")
        lines.append("")
    return "\n".join(lines)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else "nan" if math.isnan(value) else repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value), ensure_ascii=False)  # a JSON string is a valid TOML basic string
