"""Retention of the sample log: which finished files to drop, by age and by total size.

Light (``os`` only): the coordinator's sample log imports it. Kept apart from the writer so the
rule is one small function with no thread or queue around it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["RetentionResult", "enforce_retention"]


@dataclass(frozen=True)
class RetentionResult:
    """What one pass dropped (oldest first) and what it kept."""

    dropped: tuple[str, ...]
    bytes_dropped: int
    files_kept: int
    bytes_kept: int
    error: OSError | None = None


def _log_files(directory: str, prefix: str, suffix: str) -> list[tuple[int, str, int]]:
    """``(created_ms, name, size)`` of the log's finished files (``<prefix><ms>-...<suffix>``), oldest first."""
    files = []
    for name in os.listdir(directory):
        if not (name.startswith(prefix) and name.endswith(suffix)):
            continue
        try:
            created_ms = int(name[len(prefix):].split("-")[0])
            size = os.path.getsize(os.path.join(directory, name))
        except (ValueError, OSError):
            continue
        files.append((created_ms, name, size))
    files.sort()
    return files


def enforce_retention(
    directory: str,
    now_ms: int,
    max_age_s: float | None,
    max_bytes: int | None,
    *,
    prefix: str = "samples-",
    suffix: str = ".jsonl",
) -> RetentionResult:
    """Delete the oldest finished files while they are older than ``max_age_s`` or the files
    total more than ``max_bytes``; the newest file always stays (None: no such limit).

    Only names ``<prefix><created ms>-...<suffix>`` are candidates, ordered by the time in the
    name (a file's mtime changes when it is copied; its name does not). Stops at the first file
    it cannot delete and returns the error.
    """
    files = _log_files(directory, prefix, suffix)
    total = sum(size for _, _, size in files)
    oldest_kept_ms = now_ms - int(max_age_s * 1000) if max_age_s is not None else None
    dropped: list[str] = []
    n_bytes = 0
    error: OSError | None = None
    for created_ms, name, size in files[:-1]:
        too_old = oldest_kept_ms is not None and created_ms < oldest_kept_ms
        too_big = max_bytes is not None and total > max_bytes
        if not (too_old or too_big):
            break
        try:
            os.unlink(os.path.join(directory, name))
        except FileNotFoundError:
            pass
        except OSError as exc:
            error = exc
            break
        total -= size
        n_bytes += size
        dropped.append(name)
    return RetentionResult(tuple(dropped), n_bytes, len(files) - len(dropped), total, error)
