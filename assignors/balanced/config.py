"""``balanced``'s settings: every option with its default and unit, relations checked once."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BalancedConfig"]


@dataclass(frozen=True, kw_only=True, slots=True)
class BalancedConfig:
    """Goals, triggers and costs of the ``balanced`` assignor (ratios are max/mean utilization)."""

    target_ratio: float = 1.03
    """soft goal: moves stop once the busiest member is at most this x the mean utilization."""
    trigger_ratio: float = 1.05
    """an imbalance above this counts a hit; ``hit_count`` hits in a row start a rebalance."""
    hit_count: int = 2
    """consecutive snapshots over ``trigger_ratio`` before moving (a spike lasts one or two)."""
    urgent_ratio: float = 1.08
    """an imbalance above this rebalances at once."""
    provisional_ratio: float = 1.08
    """the goal while most estimates are younger than three samples (a spike cannot be told yet)."""
    capacity_threshold: float = 0.85
    """hard goal (utilization, 0-1): no member above this after a placement, while the mean is below."""
    min_gain: float = 0.001
    """move cost (utilization): a move must lower the busier of its two members by at least this."""
    no_return_s: float = 6 * 3600.0
    """seconds during which a task is not moved back to a member it was moved off."""
    max_moves_per_round: int = 0
    """moves per rebalance, 0 = as many as the goal needs."""
    window: int = 5
    """samples per task in the median that estimates its load (a spike shorter than half is ignored)."""
    recheck_interval_s: float = 60.0
    """how often the leader asks ``needs_rebalance`` (seconds; 0 turns the check off)."""

    def __post_init__(self) -> None:
        if not 1.0 <= self.target_ratio <= self.trigger_ratio <= self.urgent_ratio:
            raise ValueError("need 1 <= target_ratio <= trigger_ratio <= urgent_ratio")
        if not self.target_ratio <= self.provisional_ratio <= self.urgent_ratio:
            raise ValueError("need target_ratio <= provisional_ratio <= urgent_ratio")
        if self.hit_count < 1:
            raise ValueError("hit_count must be >= 1")
        if not 0.0 < self.capacity_threshold <= 1.0:
            raise ValueError("capacity_threshold is a utilization in (0, 1]")
        if self.min_gain < 0 or self.no_return_s < 0 or self.max_moves_per_round < 0:
            raise ValueError("min_gain, no_return_s and max_moves_per_round must be >= 0")
        if self.window < 1:
            raise ValueError("window must be >= 1")
