"""``groupcoord groups describe`` reads well at any width: member ids are never wrapped mid-id."""

from __future__ import annotations

from typing import Any

import pytest

from groupcoord.cli.describe import print_describe, short_id

LONG = "pulsar-threshold-w0-4072fb53-4c93-4f44-a580-719d040f480c"


def info() -> dict[str, Any]:
    members = [{"member_id": f"{LONG[:-1]}{i}", "instance_id": "", "host": "127.0.0.1", "rack": "", "pool": "",
                "tasks": [f"bundle-{j:02d}" for j in range(i, 12, 3)]} for i in range(3)]
    return {"group": "demo-pulsar-threshold", "state": "Stable", "generation": 4, "protocol": "pulsar-threshold",
            "leader": members[0]["member_id"], "members": members, "tasks": [f"bundle-{j:02d}" for j in range(12)],
            "unassigned": [], "last_error": ""}


@pytest.mark.parametrize("width", [80, 100, 160])
def test_member_ids_are_shortened_in_the_middle_never_wrapped(width: int, capsys: pytest.CaptureFixture[str]) -> None:
    print_describe(info(), width=width)
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= width for line in lines), max(lines, key=len)
    rows = [line for line in lines if line.startswith("pulsar-thr")]
    assert len(rows) == 3  # one line each: no id spilled onto a second line
    for i, row in enumerate(rows):
        shown = row.split()[0]
        assert shown == short_id(f"{LONG[:-1]}{i}", len(shown)) and shown.endswith(f"f480{i}")


def test_wide_shows_the_full_ids(capsys: pytest.CaptureFixture[str]) -> None:
    print_describe(info(), width=80, wide=True)
    out = capsys.readouterr().out
    assert all(f"{LONG[:-1]}{i}" in out for i in range(3))


def test_short_id() -> None:
    assert short_id("abc", 10) == "abc"
    assert short_id("0123456789abcdefghij", 11) == "01234…fghij"
    assert len(short_id(LONG, 24)) == 24
