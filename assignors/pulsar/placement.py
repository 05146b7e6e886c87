"""Placement strategies: which member gets a task (Pulsar's ``ModularLoadManagerStrategy``).

``select_broker(candidates, bundle, load_data, conf, rng=...)`` returns one of ``candidates``
(or None when there are none); it never returns anything else. The caller records the choice
with ``load_data.preallocate(member, task)`` so the next choice in the same round sees it —
this is what keeps LeastLongTermMessageRate clear of PIP-364's over-placement problem.
Randomness comes only from ``rng`` (the assignment context's seeded source).
"""

from __future__ import annotations

import heapq
import logging
import math
import random
from collections.abc import Mapping, Sequence
from typing import Protocol

from groupcoord.assignors.pulsar.config import LoadBalancerConfig
from groupcoord.assignors.pulsar.data import BrokerData, LoadData
from groupcoord.assignors.pulsar.shedding_base import EPS

__all__ = [
    "LeastLongTermMessageRate",
    "LeastResourceUsageWithWeight",
    "ModularLoadManagerStrategy",
    "RoundRobinBrokerSelector",
    "filter_candidates",
    "remove_most_servicing",
]

log = logging.getLogger(__name__)


class ModularLoadManagerStrategy(Protocol):
    def select_broker(
        self,
        candidates: Sequence[str],
        bundle: str,
        load_data: LoadData,
        conf: LoadBalancerConfig,
        *,
        rng: random.Random | None = None,
    ) -> str | None: ...


def filter_candidates(candidates: Sequence[str], load_data: LoadData, conf: LoadBalancerConfig) -> list[str]:
    """Drop members already serving more than ``load_balancer_broker_max_topics`` topics (unless that drops all)."""
    limit = conf.load_balancer_broker_max_topics
    too_busy = {b for b, d in load_data.broker_data.items() if d.local_data.num_topics > limit}
    if not too_busy:
        return list(candidates)
    kept = [c for c in candidates if c not in too_busy]
    return kept or list(candidates)


class LeastLongTermMessageRate:
    """Pulsar's default placement: the member with the least long-term msg rate, preallocations included.

    score = long-term msg rate in + out of the member's tasks + that of the tasks preallocated to
    it this round; ``inf`` when its max resource usage (heap left out, no weights) is above the
    overload threshold. A random member among those within ``EPS`` of the lowest score; all
    candidates if every score is ``inf``.
    """

    @staticmethod
    def get_score(broker_data: BrokerData, conf: LoadBalancerConfig) -> float:
        overload_threshold = conf.load_balancer_broker_overloaded_threshold_percentage / 100.0
        if broker_data.local_data.max_resource_usage() > overload_threshold + EPS:
            return math.inf
        preallocated = sum(
            bd.long_term_data.msg_rate_in + bd.long_term_data.msg_rate_out
            for bd in broker_data.preallocated_bundle_data.values()
        )
        tad = broker_data.time_average_data
        return preallocated + tad.long_term_msg_rate_in + tad.long_term_msg_rate_out

    def __init__(self) -> None:
        self._view: LoadData | None = None
        self._base: dict[str, float] = {}
        self._prealloc: dict[str, tuple[int, float]] = {}
        self._heap: list[tuple[float, str]] = []
        self._cand_obj: Sequence[str] | None = None
        self._cand_set: set[str] = set()
        self._cand_known: tuple[LoadData, int] | None = None
        self._cand_in_view = False

    def _score(self, broker: str, load_data: LoadData, conf: LoadBalancerConfig) -> float:
        """``get_score`` with the per-round parts cached; preallocations are added incrementally."""
        if self._view is not load_data:
            self._view, self._base, self._prealloc, self._heap = load_data, {}, {}, []
            for name in load_data.broker_data:
                score = self._score(name, load_data, conf)
                if score != math.inf:
                    self._heap.append((score, name))
            heapq.heapify(self._heap)
        data = load_data.broker_data.get(broker)
        if data is None:
            return 0.0
        base = self._base.get(broker)
        if base is None:
            overload_threshold = conf.load_balancer_broker_overloaded_threshold_percentage / 100.0
            if data.local_data.max_resource_usage() > overload_threshold + EPS:
                base = math.inf
            else:
                tad = data.time_average_data
                base = tad.long_term_msg_rate_in + tad.long_term_msg_rate_out
            self._base[broker] = base
        if base == math.inf:
            return base
        count, total = self._prealloc.get(broker, (0, 0.0))
        pre = data.preallocated_bundle_data
        if len(pre) != count:
            if len(pre) < count:
                count, total = 0, 0.0
            for bd in list(pre.values())[count:]:
                total += bd.long_term_data.msg_rate_in + bd.long_term_data.msg_rate_out
            count = len(pre)
            self._prealloc[broker] = (count, total)
        return base + total

    def select_broker(
        self,
        candidates: Sequence[str],
        bundle: str,
        load_data: LoadData,
        conf: LoadBalancerConfig,
        *,
        rng: random.Random | None = None,
    ) -> str | None:
        if not candidates:
            return None
        rng = rng or random.Random(0)
        if self._cand_obj is not candidates:  # the caller reuses one list for most tasks: convert it once
            self._cand_obj, self._cand_set = candidates, set(candidates)
            self._cand_known = None
        # whether every candidate is in the view: asked once per candidate list and view (an O(members)
        # question; a round placing 1,000 tasks among 10,000 members asked it 1,000 times)
        known = (load_data, len(load_data.broker_data))
        if self._cand_known is None or self._cand_known[0] is not known[0] or self._cand_known[1] != known[1]:
            self._cand_known = known
            self._cand_in_view = self._cand_set <= load_data.broker_data.keys()
        if self._view is load_data and self._cand_in_view:
            found = self._lowest_from_heap(self._cand_set, load_data, conf)
            if found:
                return rng.choice(sorted(found))
        return self._select_linear(candidates, load_data, conf, rng)

    def _lowest_from_heap(self, candidates: set[str], load_data: LoadData, conf: LoadBalancerConfig) -> list[str]:
        """The candidates within ``EPS`` of the lowest finite score, from a lazily updated heap.

        Scores only grow within a round (preallocations add to them), so a popped entry whose
        stored score is stale is pushed back with its current one.
        """
        popped: list[tuple[float, str]] = []
        best: float | None = None
        ties: list[str] = []
        heap = self._heap
        while heap:
            stored, broker = heapq.heappop(heap)
            current = self._score(broker, load_data, conf)
            if current > stored:
                heapq.heappush(heap, (current, broker))
                continue
            popped.append((stored, broker))
            if broker not in candidates:
                continue
            if best is None:
                best, ties = stored, [broker]
            elif stored - best <= max(EPS, abs(best) * 1e-12):
                ties.append(broker)
            else:
                break
        for entry in popped:
            heapq.heappush(heap, entry)
        return ties

    def _select_linear(
        self, candidates: Sequence[str], load_data: LoadData, conf: LoadBalancerConfig, rng: random.Random
    ) -> str | None:
        scores = {c: self._score(c, load_data, conf) for c in candidates}
        finite = [s for s in scores.values() if s != math.inf]
        if not finite:
            log.warning("all %d candidates are overloaded; choosing at random", len(candidates))
            return rng.choice(sorted(candidates))
        best = min(finite)
        tol = max(EPS, abs(best) * 1e-12)
        best_brokers = sorted(c for c, s in scores.items() if s != math.inf and s - best <= tol)
        return rng.choice(best_brokers)


class LeastResourceUsageWithWeight:
    """ThresholdShedder's scoring for placement: a random member well below the average usage.

    Each candidate's weighted max usage is history-averaged like ThresholdShedder's (reset when the
    member has no tasks or no traffic, as Pulsar does); candidates with
    ``usage + diff_threshold <= avg`` are eligible, all candidates if none is (PIP-364's 40,40,40,40,69,70
    case). Pulsar advances this history on every ``selectBroker`` call, so placing 50 tasks in one
    round wipes the history out; we advance it once per ``load_data.round_id``.
    """

    def __init__(self) -> None:
        self.broker_avg_resource_usage_with_weight: dict[str, float] = {}
        self._updated_in_round: dict[str, object] = {}
        self._best_view: LoadData | None = None
        self._best: dict[tuple[str, ...], list[str]] = {}

    def _usage(self, broker: str, load_data: LoadData, conf: LoadBalancerConfig) -> float:
        data = load_data.broker_data.get(broker) or BrokerData()
        round_id = load_data.round_id
        if round_id is not None and self._updated_in_round.get(broker, _NEVER) == round_id:
            return self.broker_avg_resource_usage_with_weight[broker]
        local = data.local_data
        history = self.broker_avg_resource_usage_with_weight.get(broker)
        if not local.bundles or (local.msg_rate_in == 0 and local.msg_rate_out == 0):
            history = None  # a restarted or idle member starts from its current usage
        usage = local.max_resource_usage_with_weight_conf(conf)
        x = conf.load_balancer_history_resource_percentage
        history = usage if history is None else history * x + (1 - x) * usage
        self.broker_avg_resource_usage_with_weight[broker] = history
        self._updated_in_round[broker] = round_id
        if history > conf.load_balancer_broker_overloaded_threshold_percentage / 100.0:
            log.debug("member %s is overloaded: weighted usage %.1f%%", broker, history * 100)
        return history

    def select_broker(
        self,
        candidates: Sequence[str],
        bundle: str,
        load_data: LoadData,
        conf: LoadBalancerConfig,
        *,
        rng: random.Random | None = None,
    ) -> str | None:
        if not candidates:
            return None
        rng = rng or random.Random(0)
        ordered = tuple(sorted(candidates))
        # Usages do not change within a round (no preallocation term), so neither does the answer
        # for a given candidate set: cache it for the round.
        if self._best_view is not load_data:
            self._best_view, self._best = load_data, {}
        best = self._best.get(ordered)
        if best is None:
            usages = {c: self._usage(c, load_data, conf) for c in ordered}
            avg = sum(usages.values()) / len(ordered)
            diff = conf.load_balancer_average_resource_usage_difference_threshold_percentage / 100.0
            # Only candidates: an older Pulsar walked every member it had a history for here.
            best = [c for c in ordered if usages[c] + diff <= avg + EPS]
            if not best:
                log.debug(
                    "no member is %.0f points below the average %.1f%%; choosing among all", diff * 100, avg * 100
                )
                best = list(ordered)
            self._best[ordered] = best
        return rng.choice(best)


class RoundRobinBrokerSelector:
    """Pulsar's round-robin: a call counter modulo the number of candidates, in the order given.

    The candidate list is kept from the call that cached it (not re-sorted) and reused while the
    number of candidates stays the same and the cached entry at the index is still a candidate;
    otherwise it is re-read from ``candidates``. The counter wraps at 2^31 - 1, as Java's int does.
    """

    def __init__(self) -> None:
        self._count = 0
        self._cache: tuple[str, ...] = ()

    def select_broker(
        self,
        candidates: Sequence[str],
        bundle: str,
        load_data: LoadData,
        conf: LoadBalancerConfig,
        *,
        rng: random.Random | None = None,
    ) -> str | None:
        size = len(candidates)
        if size == 0:
            return None
        index = self._count % size
        self._count = 0 if self._count == _INT_MAX else self._count + 1
        cache = self._cache
        if len(cache) <= index or len(cache) != size:
            cache = tuple(candidates)
        selected = cache[index]
        if selected not in candidates:
            cache = tuple(candidates)
            selected = cache[index]
        self._cache = cache
        return selected


def remove_most_servicing(candidates: Sequence[str], counts: Mapping[str, int]) -> list[str]:
    """Pulsar's ``removeMostServicingBrokersForNamespace``: keep the candidates owning the fewest
    tasks of the namespace (``counts``: member -> its tasks of that namespace, absent = 0), in order."""
    if not candidates:
        return []
    least = min(counts.get(c, 0) for c in candidates)
    return [c for c in candidates if counts.get(c, 0) <= least]


_INT_MAX = 2**31 - 1
_NEVER = object()
