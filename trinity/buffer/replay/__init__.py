"""Experience replay: priority functions, the persistent replay pool and the strategy that draws from it."""

from trinity.buffer.replay.pool import ReplayPool
from trinity.buffer.replay.priority import (
    DecayLimitRandomizationPriority,
    LinearDecayPriority,
    PriorityFunction,
    make_priority_function,
)
from trinity.buffer.replay.strategy import ReplayStrategy, replay_pool_path, split_groups

__all__ = [
    "DecayLimitRandomizationPriority",
    "LinearDecayPriority",
    "PriorityFunction",
    "ReplayPool",
    "ReplayStrategy",
    "make_priority_function",
    "replay_pool_path",
    "split_groups",
]
