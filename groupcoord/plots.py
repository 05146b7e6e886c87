"""PNG charts with matplotlib, shared by the balance simulator and ``groupcoord demo``.

matplotlib is the ``bench`` extra, so it is imported here lazily and only through
:func:`pyplot`, which returns None when it is missing: a caller says in one line that it
skipped the picture instead of failing. The Agg backend draws to files without a display
(CI, ssh). Ground layer: imports nothing of the project.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

__all__ = ["MISSING_HINT", "line_chart", "pyplot", "save"]

MISSING_HINT = "matplotlib is not installed (pip install 'groupcoord[bench]')"


def pyplot() -> Any | None:
    """``matplotlib.pyplot`` on the Agg backend, or None when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Figure, path: Path, *, dpi: int = 100) -> Path:
    """Lay out, write and close ``fig``; returns ``path`` (its directory is created)."""
    import matplotlib.pyplot as plt  # already imported by pyplot(): a figure exists

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def line_chart(
    path: Path,
    series: Mapping[str, Sequence[float]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    hline: float | None = None,
    emphasize: str = "",
) -> Path | None:
    """One line per series over its index; a dashed grey ``hline`` marks a goal. None without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, values in series.items():
        ax.plot(range(len(values)), list(values), label=label, linewidth=2.0 if label == emphasize else 1.0)
    if hline is not None:
        ax.axhline(hline, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(loc="upper right")
    return save(fig, path)
