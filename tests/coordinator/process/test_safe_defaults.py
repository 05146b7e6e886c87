"""``groupcoord serve`` defaults an operator would expect (issue 38 item 6), as a process.

Before: ``--metrics-listen 0.0.0.0:PORT`` served every tenant's group names, member counts and
generations to anyone (one warning line), and a data directory left by an older version kept
``groups.db`` and its WAL at 0644. Now metrics beyond loopback need a scraper credential or the
explicit ``--metrics-public``, and the data directory and its files are tightened at start.
"""

from __future__ import annotations

import sqlite3
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.coordinator.process.test_security_serve import Lines
from tests.processes import stop_processes


def serve(cli_env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "groupcoord.cli", "serve", "--listen", "127.0.0.1:0", *args],
                            env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_metrics_beyond_loopback_need_a_credential_or_the_explicit_setting(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    refused = serve(cli_env, "--store", "memory", "--metrics-listen", "0.0.0.0:0")
    _out, err = refused.communicate(timeout=60)
    assert refused.returncode == 2 and len(err.strip().splitlines()) == 1, err
    assert "metrics on 0.0.0.0:0 would be open to anyone" in err and "--metrics-public" in err
    assert "Traceback" not in err
    config = tmp_path / "open.toml"
    config.write_text('[server]\nmetrics_public = true\n')
    for args in (("--metrics-public",), ("--config", str(config))):
        proc = serve(cli_env, "--store", "memory", "--metrics-listen", "0.0.0.0:0", *args)
        try:
            lines = Lines(proc)
            port = lines.wait_for(r"groupcoord metrics on http://0\.0\.0\.0:(\d+)/metrics").group(1)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
                assert answer.status == 200
        finally:
            stop_processes([proc])


@pytest.mark.slow
def test_an_older_data_directory_and_its_files_are_tightened_at_start(tmp_path: Path, cli_env: dict[str, str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with sqlite3.connect(data / "groups.db") as old:  # as an older version left it
        old.execute("create table t (x)")
    old.close()
    (data / "groups.db").chmod(0o644)
    data.chmod(0o755)
    proc = serve(cli_env, "--data-dir", str(data))
    try:
        lines = Lines(proc)
        lines.wait_for("coordinator listening on")
        said = [line for line in lines.seen if "tightened" in line]
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in data.iterdir() if p.is_file()}
    finally:
        stop_processes([proc])
    assert len(said) == 1, lines.seen
    assert "was mode 0755: tightened to 0700" in said[0] and "groups.db 0644 -> 0600" in said[0], said
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert modes and all(mode == 0o600 for mode in modes.values()), modes  # groups.db, its WAL and index


@pytest.mark.slow
def test_a_new_data_directory_is_the_operators_only_without_a_word(tmp_path: Path, cli_env: dict[str, str]) -> None:
    data = tmp_path / "fresh"
    proc = serve(cli_env, "--data-dir", str(data))
    try:
        lines = Lines(proc)
        lines.wait_for("coordinator listening on")
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in data.iterdir() if p.is_file()}
    finally:
        stop_processes([proc])
    assert not [line for line in lines.seen if "tightened" in line], lines.seen
    assert modes.get("groups.db") == 0o600 and all(mode == 0o600 for mode in modes.values()), modes
