"""Sample generators shared by the load statistics tests."""

from __future__ import annotations

import random
from typing import Any

from groupcoord.loadstats.samples import LoadReport, ResourceUsage, TaskLoad, report_rows


def make_reports(
    seed: int = 7,
    groups: tuple[str, ...] = ("g1", "g2"),
    workers: int = 3,
    reports_per_worker: int = 40,
    tasks_per_group: int = 6,
    tasks_per_report: int = 3,
    ts_range: int = 50,
) -> list[tuple[str, str, LoadReport]]:
    """Random reports with colliding timestamps (``ts_range`` small) and tasks moving between workers."""
    rnd = random.Random(seed)
    out: list[tuple[str, str, LoadReport]] = []
    for g in groups:
        for w in range(workers):
            for _ in range(reports_per_worker):
                chosen = rnd.sample(range(tasks_per_group), tasks_per_report)
                tasks = tuple(
                    TaskLoad(
                        f"t{t}",
                        rnd.uniform(0, 50_000),
                        rnd.uniform(0, 20_000),
                        rnd.uniform(0, 2e8),
                        rnd.uniform(0, 1e7),
                        rnd.randint(0, 2000),
                        rnd.randint(0, 700),
                        rnd.randint(0, 700),
                    )
                    for t in chosen
                )
                report = LoadReport(
                    ts_ms=1_700_000_000_000 + rnd.randrange(ts_range),
                    cpu=ResourceUsage(rnd.uniform(0, 400), 400.0),
                    memory=ResourceUsage(rnd.uniform(0, 8000), 16000.0),
                    direct_memory=ResourceUsage(0.0, 0.0),
                    bandwidth_in=ResourceUsage(rnd.uniform(0, 1e5), 1.2e5),
                    bandwidth_out=ResourceUsage(rnd.uniform(0, 1e5), 1.2e5),
                    tasks=tasks,
                )
                out.append((g, f"w{w}", report))
    rnd.shuffle(out)
    return out


def rows_of(reports: list[tuple[str, str, LoadReport]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for g, w, r in reports:
        rows.extend(report_rows(g, w, r))
    return rows
