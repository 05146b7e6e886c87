"""tests/deadlines.py: a deadline stretches with the load seen while it runs, within its cap, and never shrinks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import deadlines
from tests.deadlines import Deadline, keep_waiting, load_factor, run_within


def _load(monkeypatch: pytest.MonkeyPatch, per_core: float) -> None:
    cores = os.cpu_count() or 1
    monkeypatch.setattr(deadlines.os, "getloadavg", lambda: (per_core * cores, 0.0, 0.0))


def test_the_factor_is_the_load_per_core_within_one_and_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    _load(monkeypatch, 0.2)
    assert load_factor() == 1.0
    _load(monkeypatch, 3.0)
    assert load_factor() == pytest.approx(3.0)
    _load(monkeypatch, 40.0)
    assert load_factor() == deadlines.DEFAULT_CAP and load_factor(cap=2.0) == 2.0


def test_a_deadline_stretches_as_the_load_rises_and_keeps_its_highest_stretch(monkeypatch: pytest.MonkeyPatch) -> None:
    _load(monkeypatch, 1.0)
    deadline = Deadline(10.0)
    assert deadline.allowed == pytest.approx(10.0)
    _load(monkeypatch, 5.0)  # a burst of tests started after the wait began
    assert deadline.allowed == pytest.approx(50.0)
    _load(monkeypatch, 1.0)  # a lull: the time already lost to the load stays allowed
    assert deadline.allowed == pytest.approx(50.0)


def test_run_within_returns_what_the_child_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    _load(monkeypatch, 1.0)
    done = run_within([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
                      60.0)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")


def test_run_within_writes_to_the_files_it_is_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _load(monkeypatch, 1.0)
    with (tmp_path / "out").open("w") as out:
        done = run_within([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"], 60.0,
                          stdout=out)
    assert (done.returncode, done.stdout, done.stderr) == (0, None, "err\n")
    assert (tmp_path / "out").read_text() == "out\n"


def test_run_within_kills_a_child_past_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    _load(monkeypatch, 1.0)
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        run_within([sys.executable, "-c", "import time; time.sleep(600)"], 0.5, poll_s=0.1)
    assert 0.5 <= raised.value.timeout < 60


def test_keep_waiting_retries_a_timed_out_wait_until_it_returns_or_the_deadline_passes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _load(monkeypatch, 1.0)
    calls: list[float] = []

    def ready_on_the_third(step: float) -> str:
        calls.append(step)
        if len(calls) < 3:
            raise TimeoutError("not yet")
        return "ready"

    assert keep_waiting(ready_on_the_third, 60.0, step_s=0.01) == "ready" and calls == [0.01] * 3

    def never(step: float) -> str:
        raise TimeoutError("never")

    with pytest.raises(TimeoutError, match="never"):
        keep_waiting(never, 0.05, step_s=0.01)
