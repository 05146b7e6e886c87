"""``balanced``: a load-aware assignor of our own, beyond Pulsar's strategies.

Modules: ``config`` (settings), ``model`` (spike-resistant load estimate from the snapshot),
``optimizer`` (goal-based moves: hard capacity goal, soft balance goal, move cost, no return),
``assignor`` (the state between rounds, hit counters, eager and cooperative rounds).
"""

from groupcoord.assignors.balanced.assignor import BalancedAssignor
from groupcoord.assignors.balanced.config import BalancedConfig
from groupcoord.assignors.balanced.model import LoadEstimator, LoadView

__all__ = ["BalancedAssignor", "BalancedConfig", "LoadEstimator", "LoadView"]
