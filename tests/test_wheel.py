"""The wheel a user installs: one top-level import name, ``groupcoord``, with everything under it.

Built from a copy of the tracked tree (so no ``build/`` lands in the checkout), with the venv's
setuptools, no network.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    source = tmp_path_factory.mktemp("source")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    for name in tracked.decode().split("\0"):
        if not name or name.startswith("tests/"):
            continue
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        origin = ROOT / name
        if origin.is_symlink():
            target.symlink_to(origin.readlink())
        else:
            shutil.copy2(origin, target)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)],
        check=True, capture_output=True, timeout=300,
    )
    (built,) = out.glob("groupcoord-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_installs_exactly_one_top_level_name(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/")[0] for name in wheel.namelist() if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"groupcoord"}
    top_level = next(n for n in wheel.namelist() if n.endswith(".dist-info/top_level.txt"))
    assert wheel.read(top_level).decode().split() == ["groupcoord"]


def test_the_repository_folders_are_packages_of_groupcoord(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    for module in ("coordinator/__init__.py", "worker/client.py", "assignors/pulsar/split.py", "loadstats/job.py"):
        assert f"groupcoord/{module}" in names, module
    assert (ROOT / "groupcoord" / "worker" / "client.py").read_bytes() == wheel.read("groupcoord/worker/client.py")
    assert "groupcoord/v1/groupcoord_pb2.py" in names
