"""The site's state-machine page (``reference/states.md``), generated from the transition tables.

Run by the ``gen-files`` plugin of ``mkdocs.yml`` (``make docs``), like ``gen_reference.py``. For the
group (``groupcoord.coordinator.model.states``) and the worker (``groupcoord.worker.states``): a Mermaid
diagram drawn from the module's ``TRANSITIONS`` (Material renders ```` ```mermaid ```` blocks), the
states with their docstrings, the transitions as a table, then the module's docstring made readable
(its reStructuredText simple tables become Markdown tables; its ASCII drawing is left out, the
diagram above being drawn from the same table).
"""

from __future__ import annotations

import ast
import enum
import importlib.util
import inspect
import re
import textwrap
from collections.abc import Iterable, Iterator
from itertools import pairwise
from pathlib import Path
from types import ModuleType
from typing import Any

from groupcoord.coordinator.model import states as group_states
from groupcoord.worker import states as worker_states
from groupcoord.worker.rules import error_table_markdown


def _sibling(name: str) -> ModuleType:
    """``docs/gen_reference.py`` (its table helpers), loaded by path: docs/ is not a package."""
    spec = importlib.util.spec_from_file_location(f"_docs_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ref = _sibling("gen_reference")

GROUP_TITLE = "Group (coordinator)"
WORKER_TITLE = "Worker (client)"
"""The sections' headings: their anchors (``#group-coordinator``, ``#worker-client``) are linked from
the API reference."""


# ---------------------------------------------------------------------------------------- diagrams


def _states_of(source: Any) -> list[enum.Enum]:
    return list(source) if isinstance(source, (list, tuple)) else [source]


def mermaid(transitions: Iterable[list[Any]], initial: enum.Enum) -> str:
    """A ``stateDiagram-v2`` with one arrow per (source, trigger, destination) of the table."""
    lines = ["stateDiagram-v2", f"    [*] --> {initial.value}"]
    for trigger, sources, destination in transitions:
        lines += [f"    {source.value} --> {destination.value} : {trigger}" for source in _states_of(sources)]
    return "```mermaid\n" + "\n".join(lines) + "\n```\n"


# ---------------------------------------------------------------------------------------- docstrings

_BORDER = re.compile(r"^=+( +=+)+\s*$")


def _cells(line: str, starts: list[int]) -> list[str]:
    """One table line's cells, cut at the columns' starts. The source's tables are off by a character
    now and then: a word cut in two stays whole in the cell it starts in, unless it starts a run of
    text (two spaces before it) a character or two early, when it belongs to the next column."""
    cuts = []
    for start in starts[1:]:
        word = start
        while 0 < word < len(line) and not line[word - 1].isspace() and not line[word].isspace():
            word -= 1  # a cut inside a word: find where the word starts
        if word != start and not (word >= start - 2 and line[max(word - 2, 0):word] == "  "):
            while word < len(line) and not line[word].isspace():
                word += 1  # the word continues the cell before: it stays there whole
        cuts.append(word)
    bounds = [0, *cuts, None]
    return [line[a:b].strip() for a, b in pairwise(bounds)]


def breakable(text: str) -> str:
    """A cell's text that may wrap after ``_`` (``COORDINATOR_NOT_AVAILABLE``) outside code spans, so a
    wide table of error codes fits its box."""
    parts = re.split(r"(`+[^`]*`+)", ref.cell(text))
    return "".join(part if part.startswith("`") else part.replace("_", "_<wbr>") for part in parts)


def _simple_table(lines: list[str]) -> str:
    """A reStructuredText simple table (``====  ====`` borders) as a Markdown table.

    A row whose first column is blank continues the row above (reST's rule); its cells are joined
    with spaces."""
    starts = [m.start() for m in re.finditer(r"=+", lines[0])]
    rows: list[list[str]] = []
    borders = 0
    for line in lines[1:]:
        if _BORDER.match(line):
            borders += 1
            continue
        cells = _cells(line, starts)
        if rows and not cells[0] and borders > 0:
            rows[-1] = [f"{before} {after}".strip() for before, after in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
    header, *body = rows
    return ref.table((ref.cell(c) for c in header), ([breakable(c) for c in row] for row in body))


def _blocks(lines: list[str]) -> Iterator[tuple[str, list[str]]]:
    """The docstring's lines, grouped: ("table", lines), ("literal", lines) or ("text", [line])."""
    i = 0
    while i < len(lines):
        if _BORDER.match(lines[i]):
            end, seen = i, 0
            while end < len(lines) and seen < 3:  # top border, header underline, bottom border
                seen += bool(_BORDER.match(lines[end]))
                end += 1
            yield "table", lines[i:end]
            i = end
        elif i > 0 and lines[i - 1].rstrip().endswith("::") and (not lines[i].strip() or lines[i][:1] == " "):
            end = i
            while end < len(lines) and (not lines[end].strip() or lines[end][:1] == " "):
                end += 1
            yield "literal", lines[i:end]
            i = end
        else:
            yield "text", [lines[i]]
            i += 1


def readable(doc: str) -> str:
    """A module docstring (reStructuredText) as Markdown: tables as tables, the drawing left out."""
    out: list[str] = []
    for kind, lines in _blocks(doc.splitlines()):
        if kind == "table":
            out += ["", _simple_table(lines)]
        elif kind == "text":
            line = lines[0]
            out.append(line[:-1] + " the diagram above." if line.rstrip().endswith("::") else line)
    return "\n".join(out).strip() + "\n"


# ---------------------------------------------------------------------------------------- the page


def _state_help(state_enum: type[enum.Enum]) -> dict[str, str]:
    helps: dict[str, str] = {}
    body = ast.parse(textwrap.dedent(inspect.getsource(state_enum))).body[0]
    assert isinstance(body, ast.ClassDef)
    for stmt, after in zip(body.body, body.body[1:], strict=False):
        if (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)):
            helps[stmt.targets[0].id] = str(after.value.value)
    return helps


def state_section(title: str, module: ModuleType, state_enum: type[enum.Enum]) -> str:
    helps = _state_help(state_enum)
    members = list(state_enum)  # the first is where a new group or worker starts

    def names(states: Any) -> str:
        return ", ".join(ref.code(s.value) for s in _states_of(states))

    return "".join([
        f"\n## {title}\n\n", f"From `{module.__name__}`: `{state_enum.__name__}` and `TRANSITIONS`.\n\n",
        mermaid(module.TRANSITIONS, members[0]),
        "\n", ref.table(["state", "meaning"], ([ref.code(m.value), ref.cell(helps.get(m.name, ""))] for m in members)),
        "\n### Transitions\n\n",
        ref.table(["trigger", "from", "to"], ([ref.code(t), names(src), names(dst)] for t, src, dst in module.TRANSITIONS)),
        "\n### How it behaves in each state\n\n", readable(inspect.getdoc(module) or ""),
    ])


def states_page() -> str:
    return "".join([
        ref.GENERATED, "# State machines\n\n",
        ("The group's and the worker's states, each declared once as a `transitions` table; this page, its "
         "diagrams included, is drawn from those tables at every build. How a rebalance goes through them: "
         "[Protocol](../protocol.md); the clients that walk the worker's: [Python API](api.md).\n"),
        state_section(GROUP_TITLE, group_states, group_states.GroupState),
        state_section(WORKER_TITLE, worker_states, worker_states.WorkerState),
        ("\n### Which error leads where\n\nFrom `groupcoord.worker.rules`, the one table both worker clients "
         "(`WorkerClient`, `AsyncWorkerClient`) look every failure up in.\n\n"),
        error_table_markdown(),
    ])


if __name__ in ("__main__", "<run_path>"):  # run by the gen-files plugin (runpy.run_path), not on import
    ref.write_pages({"reference/states.md": states_page})
