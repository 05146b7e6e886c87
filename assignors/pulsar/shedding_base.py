"""What every shedder shares: the ``LoadSheddingStrategy`` contract, the float tolerance, task selection.

Each strategy's ``find_bundles_for_unloading(load_data, conf)`` returns ``{member: [task, ...]}``
and never touches the assignment; the assignor re-places what it returns. All skip tasks in
``load_data.recently_unloaded_bundles`` (the assignor keeps only those still inside the grace
period there). A strategy called on a single member still answers, as Pulsar's do: the "only 1
broker available" guard is the caller's (Pulsar's ``doLoadShedding``; here the assignor's round).
Members are visited in id order, so a seed gives one answer (Pulsar walks a HashMap).

Floats are compared with a small tolerance (``EPS``): scores like ``0.7*100 - 0.3*100`` are
39.999999999999993, and a threshold of 40 must count as reached.

The strategies live in ``shedding_threshold`` (Overload, Threshold) and ``shedding_difference``
(UniformLoad, Avg); ``shedding`` names all four.
"""

from __future__ import annotations

import logging
from typing import Protocol

from groupcoord.assignors.pulsar.config import LoadBalancerConfig
from groupcoord.assignors.pulsar.data import BundleData, LoadData, LocalBrokerData

__all__ = [
    "EPS",
    "LoadSheddingStrategy",
    "local_msg_rate",
    "local_throughput",
    "sheddable",
    "warn_few_bundles",
]

# One logger for the shedding family, whichever module a strategy lives in.
log = logging.getLogger("groupcoord.assignors.pulsar.shedding")

EPS = 1e-9
"""Tolerance for comparing usages (fractions), rates and AvgShedder scores."""


class LoadSheddingStrategy(Protocol):
    def find_bundles_for_unloading(self, load_data: LoadData, conf: LoadBalancerConfig) -> dict[str, list[str]]: ...


def _short_term_throughput(bd: BundleData) -> float:
    return bd.short_term_data.msg_throughput_in + bd.short_term_data.msg_throughput_out


def _short_term_msg_rate(bd: BundleData) -> float:
    return bd.short_term_data.msg_rate_in + bd.short_term_data.msg_rate_out


def sheddable(load_data: LoadData, local: LocalBrokerData, traffic: str) -> list[tuple[str, float]]:
    """The member's tasks not recently unloaded, heaviest first (ties by task id), with their traffic."""
    key = _short_term_msg_rate if traffic == "msg_rate" else _short_term_throughput
    bundles = load_data.bundle_data_for_load_shedding()
    found = [
        (name, key(bundles[name]))
        for name in local.bundles
        if name in bundles and name not in load_data.recently_unloaded_bundles
    ]
    found.sort(key=lambda e: (-e[1], e[0]))
    return found


def local_throughput(local: LocalBrokerData) -> float:
    return local.msg_throughput_in + local.msg_throughput_out


def local_msg_rate(local: LocalBrokerData) -> float:
    return local.msg_rate_in + local.msg_rate_out


def warn_few_bundles(broker: str, local: LocalBrokerData) -> None:
    if len(local.bundles) == 1:
        log.warning(
            "high usage: sole task %s is overloading member %s; not shedding it", next(iter(local.bundles)), broker
        )
    else:
        log.warning("member %s is overloaded despite having no tasks", broker)
