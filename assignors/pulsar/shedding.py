"""Shedding strategies: which tasks to take off which members (Pulsar's ``LoadSheddingStrategy``).

The four shedders, named in one place; each is defined with its family:

- ``shedding_threshold`` — a member past a usage line offloads its excess: ``OverloadShedder``
  (a fixed overload threshold), ``ThresholdShedder`` (the average plus a margin, over a history);
- ``shedding_difference`` — a share of the gap between two members moves: ``UniformLoadShedder``
  (busiest vs idlest), ``AvgShedder`` (PIP-364's score pairs; it also places);
- ``shedding_base`` — the ``LoadSheddingStrategy`` contract, the float tolerance ``EPS`` and the
  task selection they share.

Each strategy's ``find_bundles_for_unloading(load_data, conf)`` returns ``{member: [task, ...]}``
and never touches the assignment; the assignor re-places what it returns. All of them log to
``assignors.pulsar.shedding``.
"""

from __future__ import annotations

from groupcoord.assignors.pulsar.shedding_base import EPS, LoadSheddingStrategy
from groupcoord.assignors.pulsar.shedding_difference import AvgShedder, UniformLoadShedder
from groupcoord.assignors.pulsar.shedding_threshold import (
    ADDITIONAL_THRESHOLD_PERCENT_MARGIN,
    LOWER_BOUNDARY_THRESHOLD_MARGIN,
    OverloadShedder,
    ThresholdShedder,
)

__all__ = [
    "EPS",
    "ADDITIONAL_THRESHOLD_PERCENT_MARGIN",
    "LOWER_BOUNDARY_THRESHOLD_MARGIN",
    "AvgShedder",
    "LoadSheddingStrategy",
    "OverloadShedder",
    "ThresholdShedder",
    "UniformLoadShedder",
]
