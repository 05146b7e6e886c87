"""Structured logs: the key events carry their fields, JSON lines parse, text escapes what clients send."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from groupcoord.admin import AdminClient
from groupcoord.cli import main
from groupcoord.cli.logs import JsonFormatter, TextFormatter
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.processes import stop_processes

G = "orders"


def events(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    """Every captured record as the JSON format writes it, parsed back."""
    formatter = JsonFormatter()
    return [json.loads(formatter.format(record)) for record in caplog.records]


def test_key_events_carry_group_member_generation_and_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="groupcoord")
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200))
    h.put_tasks(G, "a", "b")
    m1, join1 = h.join_new(G, session_timeout_ms=10_000)
    generation = join1.response.generation
    h.sync(G, m1, generation, assignor_error="Boom: line one\nFORGED line two")  # the leader's assignor failed
    rejoin = h.join(G, m1, session_timeout_ms=10_000)
    h.sync(G, m1, rejoin.response.generation, {m1: ["a", "b"]})
    held = h.join(G, session_timeout_ms=1_000, instance_id="box-2")  # a static member: no second step
    m2 = h.group(G).static_members["box-2"]
    third = h.join(G, m1, session_timeout_ms=10_000)
    assert held.done and third.done
    h.sync(G, m2, third.response.generation)
    h.sync(G, m1, third.response.generation, {m1: ["a"], m2: ["b"]})
    h.advance(1.5)  # m2's session (1 s) ends; m1's (10 s) does not
    assert h.leave(G, m1) == pb.NONE

    seen = events(caplog)
    by_event: dict[str, list[dict[str, object]]] = {}
    for entry in seen:
        assert {"ts", "level", "logger", "message"} <= set(entry)
        if "event" in entry:
            by_event.setdefault(str(entry["event"]), []).append(entry)
    joined = next(e for e in by_event["member_joined"] if e["member"] == m2)
    assert joined["group"] == G and joined["instance"] == "box-2"
    refused = by_event["assignment_refused"][0]
    assert refused["group"] == G and refused["generation"] == generation
    assert "FORGED line two" in str(refused["reason"]) and refused["level"] == "warning"
    started = by_event["rebalance_started"]
    assert any("invalid assignment" in str(e["reason"]) for e in started)
    assert any(e["reason"] == f"member {m2} joined" for e in started)
    completed = by_event["rebalance_completed"][0]
    assert completed["group"] == G and completed["generation"] == rejoin.response.generation
    expired = by_event["member_expired"][0]
    assert (expired["member"], expired["instance"], expired["reason"]) == (m2, "box-2", "session expired")
    left = by_event["member_left"][0]
    assert (left["group"], left["member"], left["instance"]) == (G, m1, "")
    assert by_event["join_completed"][0]["leader"] == m1

    record = next(r for r in caplog.records if getattr(r, "event", "") == "assignment_refused")
    assert "\n" not in JsonFormatter().format(record)  # one event, one line
    text = TextFormatter().format(record)
    assert "\n" not in text and "line one\\nFORGED line two" in text  # the client's newline, escaped


def test_tracebacks_are_one_field_in_json_and_kept_in_text() -> None:
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        record = logging.LogRecord("groupcoord.service", logging.ERROR, __file__, 1, "failed on %s", ("x",),
                                   sys.exc_info())
    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "failed on x" and "ValueError: bad" in entry["exc"]
    assert "Traceback" in TextFormatter().format(record).splitlines()[1]


def test_serve_refuses_bad_metrics_and_log_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[server]\nlog_format = "xml"\n')
    cases = [
        (("serve", "--metrics-listen", "nowhere", "--store", "memory"), "--metrics-listen: 'nowhere' is not HOST:PORT"),
        (("serve", "--config", str(config), "--store", "memory"), "log_format must be text or json"),
    ]
    for args, text in cases:
        try:
            status = main(list(args))
        except SystemExit as exit_:  # argparse's own refusal (a flag's type)
            status = int(exit_.code or 0)
        assert status == 2
        err = capsys.readouterr().err
        assert text in err and err.count("\n") == 1, err


@pytest.mark.slow
def test_serve_with_json_logs_and_a_metrics_endpoint(tmp_path: Path, cli_env: dict[str, str]) -> None:
    config = tmp_path / "groupcoord.toml"
    config.write_text('[server]\nmetrics_listen = "127.0.0.1:0"\nlog_format = "json"\nstore = "memory"\n'
                      f'data_dir = "{tmp_path / "data"}"\nlisten = "127.0.0.1:0"\n')
    proc = subprocess.Popen([sys.executable, "-m", "groupcoord.cli", "--log-level", "info", "serve", "--config",
                             str(config)], env=cli_env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        address = url = ""
        while not (address and url):
            line = proc.stderr.readline()
            assert line, f"serve exited: {lines}"
            lines.append(line)
            if "metrics on " in line:
                url = line.rsplit(" ", 1)[1].strip()
            if "coordinator listening on " in line and not line.startswith("{"):
                address = line.split("listening on ", 1)[1].split(" ", 1)[0]
        AdminClient(address).put_tasks(G, ["a"])
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        assert 'groupcoord_groups{state="Empty"} 1.0' in text
        assert 'groupcoord_request_duration_seconds_count{code="NONE",rpc="PutTasks"} 1.0' in text
    finally:
        stop_processes([proc])
    assert proc.stderr is not None
    lines += proc.stderr.read().splitlines()
    logged = [json.loads(line) for line in lines if line.startswith("{")]
    assert any(e["logger"] == "groupcoord.server" and "listening" in e["message"] for e in logged)
    assert all(e["level"] in ("info", "warning", "error", "debug") for e in logged)
