"""What every command of the roof shares: the usage error, argument types, the admin client, the stats extra.

The bottom of ``groupcoord.cli``: the other modules import it, it imports none of them.
"""

from __future__ import annotations

import argparse
import importlib.util

from groupcoord.admin import AdminClient

__all__ = [
    "DEFAULT_LISTEN",
    "STATS_EXTRA_HINT",
    "UsageError",
    "missing_stats_extra",
    "non_negative_float",
    "open_admin",
    "positive_int",
]

DEFAULT_LISTEN = "127.0.0.1:9400"
STATS_EXTRA_HINT = "pip install 'groupcoord[stats]'"


class UsageError(Exception):
    """Bad flags or config: exit status 2."""


def positive_int(text: str) -> int:
    """argparse type: an integer > 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0 (NaN and inf refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def open_admin(address: str) -> AdminClient:
    """An admin client for ``--coordinator``; a malformed address is a usage error."""
    try:
        return AdminClient(address)
    except ValueError as error:
        raise UsageError(str(error)) from None


def missing_stats_extra() -> str | None:
    """The first of PySpark and pyarrow (the ``stats`` extra) that is not installed, or None.

    Looks the packages up without importing them, so asking costs nothing.
    """
    for name in ("pyspark", "pyarrow"):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # blocked (None in sys.modules) or a broken install
            found = False
        if not found:
            return name
    return None
