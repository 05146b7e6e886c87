"""The console over HTTP, in front of a real coordinator with real (in-process) workers."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from groupcoord.admin import AdminClient
from groupcoord.cli.main import main
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker import WorkerClient, WorkerConfig
from tests.console.conftest import TOKEN, ConsoleThread, console_for
from tests.processes import stop_processes

HOSTILE = "<script>x<img src=x onerror=alert(1)>"
OSC_RACK = "\x1b]8;;http://evil.example\x07rack\x1b]8;;\x07"


class _Quiet:
    def on_assigned(self, tasks: object, generation: int) -> None:
        pass

    def on_revoked(self, tasks: object) -> None:
        pass


def _worker(address: str, group: str, name: str, **overrides: object) -> WorkerClient:
    settings: dict[str, object] = {"group_id": group, "coordinators": address, "client_id": name,
                                   "session_timeout_ms": 3000, "heartbeat_interval_ms": 100,
                                   "rebalance_timeout_ms": 5000, "retry_backoff_ms": 20, "retry_backoff_max_ms": 200}
    settings.update(overrides)
    return WorkerClient(WorkerConfig(**settings), _Quiet()).start()  # type: ignore[arg-type]


@pytest.fixture
def shop(server: ServerThread) -> Iterator[list[WorkerClient]]:
    """Group ``shop``: four tasks, two workers (one on a rack named with OSC bytes), Stable."""
    admin = AdminClient(server.address)
    admin.put_tasks("shop", [f"orders-{i}" for i in range(4)])
    workers = [_worker(server.address, "shop", "w1", rack=OSC_RACK, instance_id="static-1"),
               _worker(server.address, "shop", "w2", rack="r2")]
    admin.wait_for("shop", lambda d: d.state == pb.STABLE and len(d.members) == 2, 30)
    yield workers
    for worker in workers:
        worker.close()
    admin.close()


@pytest.mark.parametrize("path", ["/", "/groups", "/groups?fragment=1", "/group?id=shop", "/member?group=shop&id=x",
                                  "/static/console.js"])
def test_without_the_token_every_page_answers_401(console: ConsoleThread, path: str) -> None:
    for token in (None, "wrong", TOKEN + "x", ""):
        status, headers, body = console.get(path, token=token)
        assert status == 401, (path, token)
        assert headers["WWW-Authenticate"].startswith("Bearer")
        assert "Token needed" in body and "shop" not in body
    assert console.get(path)[0] == 200


def test_a_token_link_sets_an_httponly_cookie_and_leaves_the_address(console: ConsoleThread) -> None:
    status, headers, _ = console.get(f"/groups?q=sh&token={TOKEN}", token=None)
    assert status == 302 and headers["Location"] == "/groups?q=sh"
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    value = re.search(r"groupcoord_console=([^;]+)", cookie)
    assert value is not None
    assert console.get("/groups", token=None, Cookie=f"groupcoord_console={value.group(1)}")[0] == 200
    assert console.get("/groups", token=None, Cookie="groupcoord_console=forged")[0] == 401


def test_the_group_page_lists_members_with_static_id_host_rack_and_tasks(
        console: ConsoleThread, shop: list[WorkerClient]) -> None:
    status, headers, body = console.get("/group?id=shop")
    assert status == 200
    assert "script-src 'self'" in headers["Content-Security-Policy"] and headers["X-Frame-Options"] == "DENY"
    live = console.get("/group?id=shop&fragment=1")[2]
    assert "<html" not in live and 'id="group-state" class="state-Stable">Stable<' in live
    rows = re.findall(r"<tr>\s*<td><a href=\"/member\?group=shop&amp;id=([^\"]+)\"", live)
    assert len(rows) == 2
    assert "static-1" in live and ">r2<" in live
    assert sorted(re.findall(r"orders-\d", live)) == [f"orders-{i}" for i in range(4)]
    # the rack's OSC bytes are shown as escapes, never sent raw
    assert "\x1b" not in body and "\x07" not in body
    assert r"\x1b]8;;http://evil.example\x07rack" in body


def test_a_hostile_group_id_is_text_on_every_page(console: ConsoleThread, server: ServerThread) -> None:
    with AdminClient(server.address) as admin:
        admin.put_tasks(HOSTILE, ["t1"])
    for path in ("/groups", "/groups?q=%3Cscript", "/group?id=%3Cscript%3Ex%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E"):
        body = console.get(path)[2]
        assert "&lt;script&gt;x&lt;img src=x onerror=alert(1)&gt;" in body, path
        assert "<script>x" not in body and "<img" not in body, path


def test_the_groups_page_filters_and_pages(
        console: ConsoleThread, server: ServerThread) -> None:
    with AdminClient(server.address) as admin:
        for i in range(120):
            admin.put_tasks(f"g{i:05d}", ["t"])
    body = console.get("/groups?page=3&fragment=1")[2]
    assert "120 group(s); 101&ndash;120 shown" in body and "page 3 of 3" in body
    assert re.findall(r"id=(g\d+)", body) == [f"g{i:05d}" for i in range(100, 120)]
    filtered = console.get("/groups?q=G0011&fragment=1")[2]  # case-insensitive
    assert re.findall(r"id=(g\d+)", filtered) == [f"g{i:05d}" for i in range(110, 120)]
    assert console.get("/groups?page=x")[0] == 200  # a bad page number is page 1


def test_an_unknown_group_or_member_is_one_line(console: ConsoleThread, shop: list[WorkerClient]) -> None:
    body = console.get("/group?id=nope&fragment=1")[2]
    assert 'class="problem"' in body and "GROUP_ID_NOT_FOUND" in body and "Traceback" not in body
    assert "not a member of the group now" in console.get("/member?group=shop&id=gone")[2]


def test_read_only_console_refuses_to_remove_members(console: ConsoleThread, shop: list[WorkerClient]) -> None:
    member = shop[1].member_id
    status, _, body = console.post("/group/remove-members", {"group": "shop", "member_id": member})
    assert status == 403 and "read-only" in body
    assert "remove</button>" not in console.get("/group?id=shop")[2]


def test_remove_members_with_the_flag_as_the_consoles_principal(server: ServerThread,
                                                                shop: list[WorkerClient]) -> None:
    with console_for(server, allow_remove_members=True) as console:
        victim = shop[1].member_id
        assert "remove</button>" in console.get("/group?id=shop")[2]
        status, _, _ = console.post("/group/remove-members", {"group": "shop", "member_id": victim},
                                    Origin="http://evil.example")
        assert status == 403
        status, headers, _ = console.post("/group/remove-members", {"group": "shop", "member_id": victim})
        assert status == 303 and headers["Location"].startswith("/group?id=shop&notice=removed")
        with AdminClient(server.address) as admin:
            after = admin.describe_group("shop")
        assert victim not in {m.member.member_id for m in after.members}


def _console_process(cli_env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "groupcoord.cli", "console", *args], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, env=cli_env)


@pytest.mark.slow
def test_the_command_warns_beyond_loopback_prints_its_address_and_stops_on_sigterm(
        server: ServerThread, cli_env: dict[str, str]) -> None:
    proc = _console_process(cli_env, "--listen", "0.0.0.0:0", "--coordinator", server.address)
    try:
        assert proc.stderr is not None
        warning = proc.stderr.readline()
        assert "WARNING: listening on 0.0.0.0:0 without TLS" in warning
        address = proc.stderr.readline()
        assert re.match(r"groupcoord console on http://0\.0\.0\.0:\d+/\?token=\S+ \(coordinators .*read-only\)",
                        address), address
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        stop_processes([proc])


@pytest.mark.parametrize(("args", "said"), [
    (["--listen", "nowhere"], "--listen 'nowhere' is not HOST:PORT"),
    (["--access-token-file", "/nonexistent/token"], "cannot read --access-token-file"),
    (["--console-tls-cert", "c.pem"], "--console-tls-cert and --console-tls-key go together"),
    (["--console-client-ca", "ca.pem"], "--console-client-ca needs --console-tls-cert"),
    (["--coordinator", "no-port"], "is not HOST:PORT"),
])
def test_bad_flags_are_one_line_and_status_2(capsys: pytest.CaptureFixture[str], args: list[str], said: str) -> None:
    try:
        status = main(["console", "--listen", "127.0.0.1:0", *args])
    except SystemExit as exit_:  # a flag refused while the command line is parsed (the CLI's parser exits 2)
        status = int(exit_.code or 0)
    assert status == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("groupcoord console: ") and said in lines[0], lines
