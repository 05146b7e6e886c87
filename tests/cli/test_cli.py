"""The ``groupcoord`` command against a real coordinator, as a user would run it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from groupcoord.admin import AdminClient
from groupcoord.cli import main
from groupcoord.coordinator.rpc.server import ServerThread


def run(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The command as a separate process, exactly as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "groupcoord.cli", *args], check=False, capture_output=True, text=True, env=env,
        timeout=timeout,
    )


def run_here(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """The same entry point in this process (cheaper; the subprocess tests cover start-up); argparse's
    own refusals (SystemExit 2) come back as a status too."""
    try:
        status = main(list(args))
    except SystemExit as exit_:
        status = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), status, out, err)


def test_tasks_and_groups_commands(server: ServerThread, cli_env: dict[str, str],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    addr = server.address
    put = run(cli_env, "tasks", "put", "--group", "g1", "a", "b", "c", "--replicas", "1", "--coordinator", addr)
    assert put.returncode == 0, put.stderr
    assert "3 task(s)" in put.stdout
    listed = run_here(capsys, "groups", "list", "--coordinator", addr)
    assert listed.returncode == 0 and "g1" in listed.stdout and "Empty" in listed.stdout
    described = run_here(capsys, "groups", "describe", "--group", "g1", "--json", "--coordinator", addr)
    assert described.returncode == 0, described.stderr
    info = json.loads(described.stdout)
    assert {"group", "state", "generation", "protocol", "leader", "members", "tasks"} <= set(info)
    assert info["tasks"] == ["a", "b", "c"] and info["state"] == "Empty" and info["members"] == []
    table = run_here(capsys, "groups", "describe", "--group", "g1", "--coordinator", addr)
    assert table.returncode == 0 and "GROUP" in table.stdout and "a b c" in table.stdout
    deleted = run_here(capsys, "tasks", "delete", "--group", "g1", "b", "--coordinator", addr)
    assert deleted.returncode == 0 and "2 task(s)" in deleted.stdout


def test_bad_input_is_one_line_and_a_non_zero_exit(server: ServerThread, capsys: pytest.CaptureFixture[str]) -> None:
    addr = server.address
    cases = [
        (("tasks", "put", "--group", "g1", "x", "x", "--coordinator", addr), 1, "given twice"),
        (("tasks", "delete", "--group", "nope", "x", "--coordinator", addr), 1, "GROUP_ID_NOT_FOUND"),
        (("groups", "describe", "--group", "missing", "--coordinator", addr), 1, "GROUP_ID_NOT_FOUND"),
        (("groups", "describe", "--group", "g", "--coordinator", "not-an-address"), 2, "is not HOST:PORT"),
        (("tasks", "put", "--group", "g1", "x", "--replicas", "0", "--coordinator", addr), 2, "must be > 0"),
        (("worker", "--group", "g", "--coordinator", addr, "--assignor", "no-such"), 2, "no assignor named"),
        (("worker", "--group", "g", "--coordinator", addr, "--heartbeat-interval-ms", "20000"), 2, "less than"),
        (("stats", "--samples", "s", "--out", "o", "--max-sample-age-s", "-1"), 2, "finite number >= 0"),
        (("stats", "--samples", "s", "--out", "o", "--max-sample-age-s", "nan"), 2, "finite number >= 0"),
        (("stats", "--samples", "/nonexistent/samples", "--out", "o"), 2, "does not exist"),
        (("stats", "--samples", "s", "--out", "o", "--conf", "spark.executor.memory"), 2, "is not KEY=VALUE"),
        (("stats", "--samples", "s", "--out", "o", "--follow", "--metrics-listen", "nope"), 2, "is not HOST:PORT"),
        (("stats", "--samples", "s", "--out", "o", "--metrics-listen", "127.0.0.1:0"), 2, "add --follow"),
    ]
    for args, status, message in cases:
        try:
            result = run_here(capsys, *args)
        except SystemExit as exit_:  # argparse rejects flags by exiting 2
            out, err = capsys.readouterr()
            result = subprocess.CompletedProcess(list(args), exit_.code, out, err.strip().splitlines()[-1])
        assert result.returncode == status, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 or args[0] != "groups", result.stderr


def test_unreachable_coordinator(cli_env: dict[str, str]) -> None:
    with ServerThread() as probe:
        dead = probe.address
    result = run(cli_env, "groups", "list", "--coordinator", dead)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0
    assert "no coordinator reached" in result.stderr and dead in result.stderr
    assert "connection refused" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_refuses_a_bad_config_file(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    config = Path(str(tmp_path)) / "bad.toml"
    config.write_text("[coordinator]\ngroup_max_sise = 3\n")
    result = run_here(capsys, "serve", "--config", str(config), "--listen", "127.0.0.1:0",
                 "--data-dir", str(Path(str(tmp_path)) / "d"))
    assert result.returncode == 2
    assert "unknown coordinator setting(s): group_max_sise" in result.stderr
    assert "Traceback" not in result.stderr


def test_worker_command_prints_json_events(server: ServerThread, cli_env: dict[str, str]) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks("gw", ["t1", "t2"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "groupcoord.cli", "worker", "--group", "gw", "--coordinator", server.address,
         "--name", "cli-worker", "--session-timeout-ms", "3000", "--heartbeat-interval-ms", "200"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env,
    )
    try:
        events = []
        assert proc.stdout is not None
        for line in proc.stdout:
            events.append(json.loads(line))
            if events[-1]["event"] == "assigned":
                break
        assert [e["event"] for e in events] == ["joined", "assigned"]
        assert events[1]["tasks"] == ["t1", "t2"] and events[1]["generation"] == 1
        proc.terminate()
        out, err = proc.communicate(timeout=30)
        tail = [json.loads(line) for line in out.splitlines()]
        assert [e["event"] for e in tail] == ["revoked", "left"], (out, err)
        assert tail[-1]["member_id"] == events[0]["member_id"]  # the member that left, not a blank
        assert proc.returncode == 0
        admin.wait_for("gw", lambda d: not d.members, 10)  # it sent LeaveGroup
    finally:
        if proc.poll() is None:
            proc.kill()
        admin.close()


def test_stats_without_the_stats_extra_says_which_extra_to_install(cli_env: dict[str, str]) -> None:
    """pyspark and pyarrow blocked: one line naming the extra, exit 2, nothing imported them."""
    script = (
        "import sys\n"
        "sys.modules['pyspark'] = None; sys.modules['pyarrow'] = None  # as if not installed\n"
        "from groupcoord.cli import main\n"
        "status = main(['stats', '--samples', 'samples', '--out', 'out'])\n"
        "assert not [m for m in sys.modules if m.startswith(('pyspark.', 'pyarrow.'))], 'imported anyway'\n"
        "sys.exit(status)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True,
                            env=cli_env, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "groupcoord stats: needs PySpark and pyarrow (pyspark is not installed): pip install 'groupcoord[stats]'"
    ]
    assert result.stdout == ""


def test_stats_before_the_first_sample_file_rolled_says_so_without_starting_spark(
        tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    samples = Path(str(tmp_path)) / "samples"
    samples.mkdir()
    (samples / ".samples-1.jsonl.inprogress").write_text('{"half": ')  # the coordinator's open file
    result = run_here(capsys, "stats", "--samples", str(samples), "--out", str(Path(str(tmp_path)) / "out"))
    assert result.returncode == 0 and result.stdout == ""
    assert result.stderr == (f"groupcoord stats: no samples under {samples} yet: the coordinator's sample log makes "
                             "its files visible when it rolls them (every minute, and when it stops)\n")
    assert not (Path(str(tmp_path)) / "out").exists()
