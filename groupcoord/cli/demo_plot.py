"""Act two's picture: CPU per member before and after, one panel per strategy, moves underneath.

Drawn with ``groupcoord.plots`` (matplotlib on Agg, optional): without matplotlib
:func:`plot_outcomes` returns None and the demo says in one line that it skipped the PNG.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

from groupcoord.cli.demo_balance import Outcome
from groupcoord.plots import pyplot, save

__all__ = ["plot_outcomes"]

OVERLOAD_LINE = 85.0
"""Pulsar's overload threshold (percent), drawn as a guide."""


def _label(outcome: Outcome, name: str) -> str:
    short = name.rsplit("-", 1)[-1]
    tag = " hot" if name == outcome.hot else " +foreign" if name == outcome.foreign else ""
    msg = f"{outcome.before[name].msg / 1000:.1f}k→{outcome.after[name].msg / 1000:.1f}k"
    return f"{short}{tag}\n{msg}"


def _caption(outcome: Outcome) -> str:
    moves = outcome.moves()
    if not moves:
        text = "moved nothing" + (f": {outcome.note}" if outcome.note else "")
    else:
        text = "moved: " + ", ".join(f"{t} {a.rsplit('-', 1)[-1]}→{b.rsplit('-', 1)[-1]}" for t, a, b in moves)
    return "\n".join(textwrap.wrap(text, 42)[:3])


def plot_outcomes(outcomes: Sequence[Outcome], path: Path) -> Path | None:
    """Write the PNG to ``path``; None when matplotlib is not installed."""
    plt = pyplot()
    if plt is None:
        return None
    cols = min(3, len(outcomes))
    rows = math.ceil(len(outcomes) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.9 * rows), squeeze=False, sharey=True)
    top = max([110.0] + [v.cpu * 1.1 for o in outcomes for v in [*o.before.values(), *o.after.values()]])
    for ax, outcome in zip(axes.flat, outcomes, strict=False):
        names = sorted(outcome.before)
        xs = range(len(names))
        before = [outcome.before[n].cpu for n in names]
        after = [outcome.after[n].cpu for n in names]
        ax.bar([x - 0.2 for x in xs], before, width=0.4, color="#b0b0b0", label="before")
        colors = ["#d62728" if n == outcome.hot else "#1f77b4" for n in names]
        ax.bar([x + 0.2 for x in xs], after, width=0.4, color=colors, label="after")
        if outcome.foreign in names and outcome.foreign_cpu > 0:  # the part of its CPU that is no task's
            x = names.index(outcome.foreign)
            ax.bar([x - 0.2, x + 0.2], [outcome.foreign_cpu] * 2, width=0.4, fill=False, hatch="//",
                   edgecolor="#333333", linewidth=0.6, label="foreign process")
        for x, value in zip(xs, after, strict=True):
            ax.text(x + 0.2, value + 1.5, f"{value:.0f}", ha="center", fontsize=8)
        ax.axhline(OVERLOAD_LINE, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xticks(list(xs), [_label(outcome, n) for n in names], fontsize=8)
        ax.set_ylim(0, top)
        cpu = outcome.balance("cpu")
        ax.set_title(f"{outcome.assignor}\nmax/mean CPU {cpu[0]:.2f} → {cpu[1]:.2f}", fontsize=10)
        ax.set_xlabel(_caption(outcome), fontsize=8)
    for ax in axes.flat[len(outcomes):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("CPU % of one core")
    axes.flat[0].legend(loc="upper right", fontsize=8)
    fig.suptitle("groupcoord demo, act two: CPU per member before (grey) and after each strategy rebalanced\n"
                 "red: the hot member; hatched: a process that is no task's; dashed: 85% overload; "
                 "under each member its msg/s before→after", fontsize=10)
    return save(fig, path)
