"""Load statistics: load reports, the sample log, the Spark job and the load snapshot.

Light by design: importing ``loadstats`` (or ``loadstats.samples``, ``sample_log``,
``report_policy``, ``probe``, ``snapshot_io``, ``state``) imports neither PySpark nor pyarrow
(the ``groupcoord[stats]`` extra): the functions that need them import them when called. Only
``loadstats.job`` and ``loadstats.transforms`` (the full rebuild), ``loadstats.stream`` and
``loadstats.incremental`` (the incremental job; PySpark) and ``loadstats.reference`` (pyarrow,
numpy) need them to import.
See ``docs/loadstats.md``.
"""

from groupcoord.loadstats.report_policy import ReportPolicy
from groupcoord.loadstats.sample_log import SampleLog, SampleLogStats
from groupcoord.loadstats.samples import (
    SAMPLE_COLUMNS,
    LoadReport,
    ResourceUsage,
    TaskLoad,
    report_rows,
    sample_arrow_schema,
    sample_spark_schema,
)
from groupcoord.loadstats.snapshot_io import read_meta, read_snapshots

__all__ = [
    # reports
    "LoadReport",
    "ResourceUsage",
    "TaskLoad",
    "ReportPolicy",
    # sample log
    "SampleLog",
    "SampleLogStats",
    "report_rows",
    "SAMPLE_COLUMNS",
    "sample_arrow_schema",
    "sample_spark_schema",
    # snapshot
    "read_snapshots",
    "read_meta",
]
