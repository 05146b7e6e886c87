"""The documentation site: it builds with warnings as errors, and its reference pages name every config
key, CLI flag and metric there is; the README stays a front page whose examples work.

What the site must name is enumerated here from the code's own sources (the keys ``serve`` accepts,
the parser's actions, the collectors), not from ``docs/gen_reference.py``, so a generator that drops
something fails this test.
"""

from __future__ import annotations

import argparse
import dataclasses
import html as html_lib
import importlib
import importlib.util
import inspect
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from types import ModuleType

import pytest
from prometheus_client import CollectorRegistry

from groupcoord import (
    AssignmentContext,
    Assignor,
    AsyncWorkerClient,
    MemberInfo,
    TaskListener,
    TaskSpec,
    WorkerClient,
    errors,
)
from groupcoord.assignors.balanced.config import BalancedConfig
from groupcoord.assignors.pulsar.config import LoadBalancerConfig
from groupcoord.cli.parser import _parser
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model import states as group_states
from groupcoord.coordinator.process import options
from groupcoord.coordinator.process.stderr_relay import relay_metrics
from groupcoord.coordinator.runtime.metrics import CoordinatorMetrics
from groupcoord.loadstats.follow_metrics import FollowMetrics
from groupcoord.worker import states as worker_states
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.metrics import WorkerCollector
from tests.paths import ROOT
from tests.scripts import load_script

README = ROOT / "README.md"
QUIET = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}


def _build(site: Path, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess[str]:
    mkdocs = Path(sys.executable).with_name("mkdocs")
    return subprocess.run([str(mkdocs), "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
                          check=False, cwd=ROOT, env={**os.environ, **QUIET}, capture_output=True, text=True,
                          timeout=300)


def _page(site: Path, name: str) -> str:
    return (site / f"{name}.html").read_text(encoding="utf-8")  # use_directory_urls: false (opens from disk)


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], argparse.Action]]:
    for action in parser._actions:
        if isinstance(action.choices, dict) and action.nargs == argparse.PARSER:
            for name, child in action.choices.items():
                yield from _commands(child, (*path, name))
        else:
            yield path, action


def _missing_config_keys(html: str) -> list[str]:
    keys = set(options._SERVER_KEYS) | {f.name for f in dataclasses.fields(CoordinatorConfig)}  # what --config takes
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


PUBLIC = ("groupcoord", "groupcoord.worker", "groupcoord.assignors")
"""The modules whose ``__all__`` the API reference must cover."""


def _text(html: str) -> str:
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", "", html)).split())


def _api_problems(html: str) -> list[str]:
    """Every public name has its heading (mkdocstrings' id is the path it is shown under), and the
    clients' and contracts' docstrings are there: the page is read from the code, not written by hand."""
    problems = []
    for module_name in PUBLIC:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            if f'id="groupcoord.{name}"' not in html and f'id="{module_name}.{name}"' not in html:
                problems.append(f"{module_name}.{name} not in the API reference")
    text = _text(html)
    for obj in (WorkerClient, AsyncWorkerClient, WorkerConfig, TaskListener, Assignor, AssignmentContext,
                errors.RebalanceInProgressError):
        first = (inspect.getdoc(obj) or "").split("\n\n")[0]
        if " ".join(first.replace("``", "").split()) not in text:
            problems.append(f"{obj.__qualname__}'s docstring not on the API page")
    for protocol in (TaskListener, Assignor):  # a protocol's methods have no docstrings: listed all the same
        members = [m for m in (*vars(protocol), *protocol.__annotations__) if not m.startswith("_")]
        problems += [f"{protocol.__name__}.{m} not in the API reference" for m in members
                     if f'id="groupcoord.{protocol.__name__}.{m}"' not in html]
    if 'href="states.html#worker-client"' not in html:
        problems.append("the API reference does not link the worker's state machine")
    return problems


def _state_problems(html: str) -> list[str]:
    """Each transition of the two tables is an arrow of a Mermaid diagram; no reST markup shows."""
    diagrams = [html_lib.unescape(block) for block in re.findall(r'<pre class="mermaid"><code>(.*?)</code></pre>',
                                                                  html, flags=re.DOTALL)]
    problems = [] if len(diagrams) == 2 else [f"{len(diagrams)} state diagrams, not 2"]
    for diagram, table in zip(diagrams, (group_states.TRANSITIONS, worker_states.TRANSITIONS), strict=False):
        for trigger, sources, destination in table:
            for source in sources if isinstance(sources, list) else [sources]:
                if f"{source.value} --> {destination.value} : {trigger}" not in diagram:
                    problems.append(f"no arrow {source.value} -{trigger}-> {destination.value}")
    if "=====" in html or "``" in _text(html):
        problems.append("reStructuredText markup on the states page")
    return problems


def _disk_problems(site: Path) -> list[str]:
    """Opened from disk (file://), every link of every page names a file that is there (a directory
    would show a folder listing), and search has its index as a script and its shim on the site."""
    problems = []
    for page in site.rglob("*.html"):
        if page.name == "404.html":
            continue  # a web server's answer to a missing page: its links are from the site's root
        for href in re.findall(r'(?:href|src)="([^"#?]+)[^"]*"', page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:|//", href):
                continue  # another site (Material's own link, an issue)
            target = (page.parent / href).resolve()
            if "screenshots/" in href and not (ROOT / "docs" / "screenshots" / Path(href).name).is_file():
                continue  # the console's screenshots: taken by its browser test, kept out of git (docs/console.md)
            if not target.is_file():
                problems.append(f"{page.relative_to(site)} links {href}, not a file")
    if not (site / "search" / "search_index.js").is_file():
        problems.append("no search/search_index.js (the offline plugin's index as a script)")
    if "unpkg.com" in (site / "index.html").read_text(encoding="utf-8"):
        problems.append("a page loads a script from unpkg.com: it would not open without network")
    return problems


# ------------------------------------------------------------------------------------------ the site


@pytest.mark.slow
@pytest.mark.heavy  # a whole build (every generator, mkdocstrings over the package) and a browser: 47 s of a 4-worker
# make test at load 12 and one of its longest paths; make docs builds the same site in CI too
def test_the_built_site_names_everything_public_and_opens_from_disk(tmp_path: Path) -> None:
    """One build (a few seconds of CPU), every check: each config key, CLI flag and metric; each public
    Python name in the API reference; each transition in a state diagram; every link a file."""
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
        assert (site / (page.removesuffix(".md") + ".html")).is_file()
    problems = _api_problems(_page(site, "reference/api")) + _state_problems(_page(site, "reference/states"))
    problems += _disk_problems(site)
    assert not problems, problems


def _search_from_disk(page: Path, query: str) -> int:
    """How many pages the site's search finds for ``query``, ``page`` opened from disk (``file://``, no
    server, no network needed) in headless Chromium; -1 if the search did not answer."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium (Debian's package; .ci/run installs it)")
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=15000",
                           "--dump-dom", f"{page.as_uri()}?q={query}"], capture_output=True, text=True, timeout=120,
                          check=False)
    found = re.search(r'md-search-result__meta">\s*(\d+) matching document', done.stdout)
    return int(found.group(1)) if found else -1


@pytest.mark.slow
@pytest.mark.heavy
def test_the_site_searches_from_disk_in_a_browser(tmp_path: Path) -> None:
    """What a reader gets opening ``site/index.html`` as the README says: the search answers, from a page
    at the root and from one a folder down (the index is a script, its worker shim on the site itself)."""
    site = tmp_path / "site"
    built = _build(site)
    assert built.returncode == 0, built.stdout + built.stderr
    assert _search_from_disk(site / "index.html", "heartbeat") > 0
    assert _search_from_disk(site / "reference" / "api.html", "AsyncWorkerClient") > 0


def _site_rules_only(docs: Path) -> str:
    """The project's mkdocs.yml with its rules (strict, validation, theme, markdown) but no generator plugins and a
    nav of two pages: what decides whether a broken link fails the build, without the minute a whole build costs."""
    text = (ROOT / "mkdocs.yml").read_text()
    before_plugins, rest = text.split("\nplugins:\n", 1)
    after_plugins = rest[rest.index("\nmarkdown_extensions:\n"):]
    rules = after_plugins[:after_plugins.index("\nnav:\n")]
    return (before_plugins.replace("docs_dir: docs", f"docs_dir: {docs}") + "\nplugins:\n  - search\n" + rules
            + "\nnav:\n  - Home: index.md\n  - Command line: cli.md\n")


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copytree(ROOT / "docs" / "stylesheets", docs / "stylesheets")
    shutil.copytree(ROOT / "docs" / "javascripts", docs / "javascripts")
    (docs / "index.md").write_text("# Home\n\nSee [the command line](cli.md).\n")
    (docs / "cli.md").write_text("# Command line\n\nBack [home](index.md).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(_site_rules_only(docs))
    assert _build(tmp_path / "good", config).returncode == 0  # the cut-down site builds: the failure below is the link
    with (docs / "cli.md").open("a") as page:
        page.write("\nSee [the missing page](nowhere.md).\n")
    built = _build(tmp_path / "site", config)
    assert built.returncode != 0
    assert "nowhere.md" in built.stderr


# ------------------------------------------------------------------------------------------ the generator


def _generator(name: str = "gen_reference") -> ModuleType:
    module: ModuleType = load_script(ROOT / "docs" / f"{name}.py", f"{name}_under_test")  # defines the pages;
    return module  # writes nothing outside a build


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


def test_a_state_diagram_has_one_arrow_per_source_of_each_transition() -> None:
    gen = _generator("gen_states")

    class Light(Enum):
        OFF = "Off"
        ON = "On"
        BROKEN = "Broken"

    diagram = gen.mermaid([["switch", Light.OFF, Light.ON], ["break", [Light.OFF, Light.ON], Light.BROKEN]], Light.OFF)
    assert diagram.splitlines() == ["```mermaid", "stateDiagram-v2", "    [*] --> Off", "    Off --> On : switch",
                                    "    Off --> Broken : break", "    On --> Broken : break", "```"]


def test_a_docstring_table_overrunning_its_borders_reads_as_a_markdown_table() -> None:
    """The source's reST tables: a cell one character past its border, a row continued on the next
    line, a drawing after ``::``; the page gets a Markdown table, the words whole, no drawing."""
    gen = _generator("gen_states")
    doc = textwrap.dedent("""\
        Intro with ``code``, drawn::

            A --go--> B

        =====  ==========  ======
        state  answer      note
        =====  ==========  ======
        A      NOT_ALLOWED_X overrun
               then B       x
        B      fine       ok
        =====  ==========  ======
        """)
    text = gen.readable(doc)
    assert "--go-->" not in text and "drawn: the diagram above." in text
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert rows[0] == "| state | answer | note |"
    assert rows[2].replace("_<wbr>", "_") == "| A | NOT_ALLOWED_X then B | overrun x |"
    assert rows[3] == "| B | fine | ok |"


def test_a_new_public_name_lands_in_the_api_reference_without_a_section(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = _generator("gen_api")
    import groupcoord.worker

    monkeypatch.setattr(groupcoord.worker, "__all__", [*groupcoord.worker.__all__, "brand_new"], raising=True)
    page = gen.api_page()
    assert "::: groupcoord.WorkerClient\n" in page and "::: groupcoord.worker.parse_addresses\n" in page
    assert page.index("## Other public names") < page.index("::: groupcoord.worker.brand_new")
    assert page.count("::: groupcoord.WorkerClient\n") == 1  # once, under its shortest path


def test_the_nav_names_each_page_once() -> None:
    """A reader tells pages apart by their nav titles: no two the same (there were two "Command line")."""
    entries = re.findall(r'^\s*- (?:"([^"]+)"|([^:"\n]+)):\s*[\w/.-]+\.md\s*$', (ROOT / "mkdocs.yml").read_text(),
                         flags=re.MULTILINE)
    titles = [quoted or plain for quoted, plain in entries]
    assert len(titles) > 20 and "Python API" in titles and "Sharding: finding a group's coordinator" in titles
    assert sorted(t for t in set(titles) if titles.count(t) > 1) == []


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
