"""Pulsar's load balancing as assignors: members play Pulsar's brokers, tasks its bundles.

Modules, one job each: ``config`` (every setting, Pulsar's defaults and units), ``data`` (the load
data model), ``convert`` (``LoadData`` from the statistics job's snapshot), ``shedding`` (the four
shedders, defined in ``shedding_threshold`` and ``shedding_difference`` on the contract and
helpers of ``shedding_base``; PIP-192's ``TransferShedder`` in ``shedding_transfer``), ``placement`` (three placement strategies), ``split`` (bundle
split), ``assignors`` (the ``pulsar-*`` assignors that tie them together, running the round's
``steps``).
"""

from groupcoord.assignors.pulsar.assignors import (
    PulsarAssignor,
    PulsarAvgAssignor,
    PulsarOverloadAssignor,
    PulsarThresholdAssignor,
    PulsarTransferAssignor,
    PulsarUniformAssignor,
)
from groupcoord.assignors.pulsar.config import LoadBalancerConfig
from groupcoord.assignors.pulsar.convert import load_data_from_context, load_data_from_snapshot
from groupcoord.assignors.pulsar.data import (
    BrokerData,
    BundleData,
    LoadData,
    LocalBrokerData,
    NamespaceBundleStats,
    ResourceUsage,
    TimeAverageBrokerData,
    TimeAverageMessageData,
)
from groupcoord.assignors.pulsar.placement import (
    LeastLongTermMessageRate,
    LeastResourceUsageWithWeight,
    RoundRobinBrokerSelector,
)
from groupcoord.assignors.pulsar.shedding import AvgShedder, OverloadShedder, ThresholdShedder, UniformLoadShedder
from groupcoord.assignors.pulsar.shedding_transfer import TransferShedder
from groupcoord.assignors.pulsar.split import (
    find_bundles_to_split,
    flow_or_qps_equally_divide,
    range_equally_divide,
    specified_positions_divide,
    split_task,
    topic_count_equally_divide,
)

__all__ = [
    # assignors
    "PulsarAssignor",
    "PulsarThresholdAssignor",
    "PulsarUniformAssignor",
    "PulsarAvgAssignor",
    "PulsarOverloadAssignor",
    "PulsarTransferAssignor",
    # config and data
    "LoadBalancerConfig",
    "ResourceUsage",
    "NamespaceBundleStats",
    "LocalBrokerData",
    "TimeAverageMessageData",
    "BundleData",
    "TimeAverageBrokerData",
    "BrokerData",
    "LoadData",
    "load_data_from_context",
    "load_data_from_snapshot",
    # shedding
    "OverloadShedder",
    "ThresholdShedder",
    "UniformLoadShedder",
    "AvgShedder",
    "TransferShedder",
    # placement
    "LeastLongTermMessageRate",
    "LeastResourceUsageWithWeight",
    "RoundRobinBrokerSelector",
    # split
    "find_bundles_to_split",
    "split_task",
    "range_equally_divide",
    "topic_count_equally_divide",
    "specified_positions_divide",
    "flow_or_qps_equally_divide",
]
