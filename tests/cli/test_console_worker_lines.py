"""``groupcoord worker`` lines are each one write, so workers can share one O_APPEND log file."""

from __future__ import annotations

import io
import json

import pytest

from groupcoord.cli.console_worker import JsonLinesListener


class Writes(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return super().write(text)


def test_each_event_line_is_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    out = Writes()
    monkeypatch.setattr("sys.stdout", out)
    JsonLinesListener("w1").emit("revoked", tasks=["t1", "t2"])
    assert len(out.calls) == 1 and out.calls[0].endswith("\n")
    assert json.loads(out.calls[0])["tasks"] == ["t1", "t2"]
