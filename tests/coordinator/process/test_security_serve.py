"""``groupcoord serve`` as a process: tokens reloaded on SIGHUP, the plaintext warning, file modes."""

from __future__ import annotations

import os
import queue
import re
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupcoord import errors
from groupcoord.admin import AdminClient
from groupcoord.channels import ClientSecurity
from groupcoord.coordinator.storage.sqlite_store import SqliteStore
from groupcoord.loadstats.sample_log import SampleLog
from groupcoord.loadstats.samples import LoadReport, ResourceUsage
from tests.processes import stop_processes
from tests.security_pki import Tokens


class Lines:
    """A child's stderr, line by line, read on a thread so a silent child cannot hang the test."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._queue: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        assert proc.stderr is not None
        stream = proc.stderr
        threading.Thread(target=lambda: [self._queue.put(line) for line in stream], daemon=True).start()

    def wait_for(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        while True:
            try:
                line = self._queue.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r}; saw {self.seen}") from None
            self.seen.append(line)
            match = re.search(pattern, line)
            if match:
                return match


@pytest.fixture
def serve(tmp_path: Path, cli_env: dict[str, str]) -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    stop_processes(procs)


@pytest.mark.slow
def test_tokens_reload_on_sighup_and_plaintext_beyond_loopback_warns(
    tmp_path: Path, cli_env: dict[str, str], serve: list[subprocess.Popen[str]]
) -> None:
    tokens = Tokens(tmp_path)
    old, new = tokens.new("old"), tokens.new("new")
    token_file = tokens.server_file(["old"])
    data_dir = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "groupcoord.cli", "serve", "--listen", "0.0.0.0:0", "--data-dir", str(data_dir),
         "--token-file", str(token_file)],
        env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    serve.append(proc)
    lines = Lines(proc)
    lines.wait_for(r"WARNING: listening on 0\.0\.0\.0:0 without TLS")
    port = lines.wait_for(r"listening on 0\.0\.0\.0:(\d+)").group(1)
    address = f"127.0.0.1:{port}"

    def list_with(token: Path) -> object:
        with AdminClient(address, security=ClientSecurity(token_file=str(token))) as client:
            try:
                return client.list_groups()
            except errors.NotAuthenticatedError as error:
                return error

    assert list_with(old) == []
    assert isinstance(list_with(new), errors.NotAuthenticatedError)
    tokens.server_file(["new"])
    proc.send_signal(signal.SIGHUP)
    lines.wait_for(r"reloaded: 1 token\(s\)")
    assert list_with(new) == []
    assert isinstance(list_with(old), errors.NotAuthenticatedError)
    token_file.write_text("this is not a token line\n")  # a broken file keeps the tokens in force
    proc.send_signal(signal.SIGHUP)
    lines.wait_for(r"reload failed, the policy in force stays: token file .* line 1")
    assert list_with(new) == []
    # created for the operator only
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((data_dir / "groups.db").stat().st_mode) == 0o600
    assert "this is not a token line" not in "".join(lines.seen)


def test_the_store_and_the_sample_log_are_created_for_the_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o022)  # a typical umask: without explicit modes these would be world-readable
    try:
        with SqliteStore(tmp_path / "new" / "groups.db") as store:
            store.save("g", {"x": 1})
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "new").iterdir()}
        assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
        assert modes and all(mode == 0o600 for mode in modes.values()), modes
        with SampleLog(str(tmp_path / "samples")) as log:
            log.append("g", "w1", LoadReport(ts_ms=1, cpu=ResourceUsage(1.0, 400.0)))
        files = list((tmp_path / "samples").iterdir())
        assert stat.S_IMODE((tmp_path / "samples").stat().st_mode) == 0o700
        assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    finally:
        os.umask(old)
