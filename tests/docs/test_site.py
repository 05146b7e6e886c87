"""The documentation site: it builds with warnings as errors, and its reference pages name every config
key, CLI flag and metric there is; the README stays a front page whose examples work.

What the site must name is enumerated here from the code's own sources (the keys ``serve`` accepts,
the parser's actions, the collectors), not from ``docs/gen_reference.py``, so a generator that drops
something fails this test.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from prometheus_client import CollectorRegistry

from groupcoord import AssignmentContext, MemberInfo, TaskSpec
from groupcoord.assignors.balanced.config import BalancedConfig
from groupcoord.assignors.pulsar.config import LoadBalancerConfig
from groupcoord.cli.main import _parser
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.process import serve
from groupcoord.coordinator.process.stderr_relay import relay_metrics
from groupcoord.coordinator.runtime.metrics import CoordinatorMetrics
from groupcoord.loadstats.follow_metrics import FollowMetrics
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.metrics import WorkerCollector
from tests.paths import ROOT

README = ROOT / "README.md"
QUIET = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}


def _build(site: Path, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess[str]:
    mkdocs = Path(sys.executable).with_name("mkdocs")
    return subprocess.run([str(mkdocs), "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
                          check=False, cwd=ROOT, env={**os.environ, **QUIET}, capture_output=True, text=True,
                          timeout=300)


def _page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text(encoding="utf-8")


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], argparse.Action]]:
    for action in parser._actions:
        if isinstance(action.choices, dict) and action.nargs == argparse.PARSER:
            for name, child in action.choices.items():
                yield from _commands(child, (*path, name))
        else:
            yield path, action


def _missing_config_keys(html: str) -> list[str]:
    keys = set(serve._SERVER_KEYS) | {f.name for f in dataclasses.fields(CoordinatorConfig)}  # what --config takes
    keys |= {f.name for cls in (WorkerConfig, BalancedConfig, LoadBalancerConfig) for f in dataclasses.fields(cls)}
    return sorted(f"config key {k}" for k in keys if f"<code>{k}</code>" not in html)


def _missing_cli(html: str) -> list[str]:
    missing = set()
    for path, action in _commands(_parser(), ("groupcoord",)):
        if isinstance(action, argparse._HelpAction):
            continue  # -h/--help, argparse's own on every command (the page says so once)
        if f"<code>{' '.join(path)}</code>" not in html:
            missing.add(f"command {' '.join(path)}")
        for flag in action.option_strings:
            if not re.search(rf"<code>[^<]*(?<![\w-]){re.escape(flag)}(?![\w-])", html):
                missing.add(f"flag {' '.join(path)} {flag}")
    return sorted(missing)


def _missing_metrics(html: str) -> list[str]:
    coordinator, worker, stats = CollectorRegistry(), CollectorRegistry(), CollectorRegistry()
    CoordinatorMetrics(coordinator)
    relay_metrics(coordinator)
    worker.register(WorkerCollector())
    FollowMetrics(stats)
    families = [f for registry in (coordinator, worker, stats) for f in registry.collect()]
    assert len(families) >= 15
    return sorted(f"metric {f.name}" for f in families if f"<code>{f.name}" not in html)


# ------------------------------------------------------------------------------------------ the site


@pytest.mark.slow
def test_the_built_site_names_every_config_key_cli_flag_and_metric(tmp_path: Path) -> None:
    """One build (a few seconds of CPU), every check: the message lists everything that is missing."""
    site = tmp_path / "site"
    built = _build(site)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    config = _page(site, "reference/config")
    missing = _missing_config_keys(config) + _missing_cli(_page(site, "reference/cli"))
    missing += _missing_metrics(_page(site, "reference/metrics"))
    assert not missing, f"missing from the built reference pages: {missing}"
    row = re.search(r"<code>max_pending_requests</code></td>\s*<td><code>([^<]*)</code>", config)
    assert row and row.group(1) == str(CoordinatorConfig().max_pending_requests)  # defaults shown as they are
    assert "Keep groups of workers agreed on who runs which task." in (site / "index.html").read_text()  # README
    nav = re.findall(r":\s*([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.MULTILINE)
    assert {"asyncio.md", "ha.md", "loadstats.md", "metrics.md", "reference/config.md"} <= set(nav)
    for page in nav:
        assert (site / ("index.html" if page == "index.md" else page.removesuffix(".md") + "/index.html")).is_file()


@pytest.mark.slow
def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    with (docs / "cli.md").open("a") as page:
        page.write("\nSee [the missing page](nowhere.md).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text((ROOT / "mkdocs.yml").read_text().replace("docs_dir: docs", f"docs_dir: {docs}").replace(
        "- docs/gen_reference.py", f"- {ROOT / 'docs' / 'gen_reference.py'}"))
    built = _build(tmp_path / "site", config)
    assert built.returncode != 0
    assert "nowhere.md" in built.stderr


# ------------------------------------------------------------------------------------------ the generator


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference_under_test", ROOT / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines the pages; writes nothing outside a build
    return module


def test_a_config_field_without_help_stops_the_generator() -> None:
    gen = _generator()

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Settings:
        documented: int = 1
        """Has help."""
        bare: int = 2

    with pytest.raises(gen.MissingHelp, match=r"Settings\.bare has no help"):
        gen.field_help(Settings)
    assert gen.field_help(CoordinatorConfig)["max_replicas"].startswith("Largest replication factor")


def test_help_text_lands_in_one_table_cell_as_text() -> None:
    gen = _generator()
    assert gen.cell("a | b <= 0,\n  `x<y>`") == r"a \| b &lt;= 0, `x<y>`"


# ------------------------------------------------------------------------------------------ the README


def test_readme_is_a_front_page_with_the_two_commands() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail to docs/"
    assert any(line.startswith("make demo    # sets up .venv") for line in lines)
    assert any(line.startswith("make test    # sets up .venv and runs the test suite") for line in lines)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test ||" in ci and "make test-heavy ||" in ci and "make docs ||" in ci


def test_the_readme_assignor_example_gives_a_valid_assignment() -> None:
    text = README.read_text(encoding="utf-8")
    block = re.search(r"## Write an assignor.*?```python\n(.*?)```", text, flags=re.DOTALL)
    assert block, "the README's assignor example is gone"
    source = block.group(1).replace("register(LeastLoaded())", "")  # keep the process-wide registry as it is
    namespace: dict[str, object] = {}
    exec(compile(source, "README.md", "exec"), namespace)  # noqa: S102 - the README's own example
    assignor = namespace["LeastLoaded"]()  # type: ignore[operator]
    members = (MemberInfo("a"), MemberInfo("b"), MemberInfo("c", pool="gpu"))
    tasks = (TaskSpec("t1", weight=3.0), TaskSpec("t2"), TaskSpec("t3", replicas=2), TaskSpec("t4", pool="gpu"),
             TaskSpec("t5", replicas=3))
    result = assignor.assign(AssignmentContext(group_id="g", generation=1, members=members, tasks=tasks))
    placed = [(member, replica) for member, replicas in result.members.items() for replica in replicas]
    every = [r for t in tasks for r in t.replica_ids()]
    assert sorted([r for _, r in placed] + list(result.unassigned)) == sorted(every)  # each replica once
    owners = {(r.task_id, m) for m, r in placed}
    assert len(owners) == len(placed)  # a task's replicas on distinct members
    pool = {m.member_id: m.pool for m in members}
    spec = {t.task_id: t for t in tasks}
    assert all(pool[m] == spec[r.task_id].pool for m, r in placed)  # pools kept
    assert {m: [str(r) for r in rs] for m, rs in result.members.items()} == {
        "a": ["t1#0", "t3#1", "t5#1"], "b": ["t2#0", "t3#0", "t5#0"], "c": ["t4#0"]}  # least loaded first
    assert [str(r) for r in result.unassigned] == ["t5#2"]  # three replicas, two members in the pool
