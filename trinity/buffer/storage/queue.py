"""Upstream's module of the priority queue, for user code that imports its priority-function base class from here.

Experience replay lives in :mod:`trinity.buffer.replay`; this module only
gives upstream's names to its classes.
"""

from trinity.buffer.replay.priority import DecayLimitRandomizationPriority, LinearDecayPriority, PriorityFunction

#: Upstream's name of ``decay_limit_randomization``.
LinearDecayUseCountControlPriority = DecayLimitRandomizationPriority

__all__ = ["LinearDecayPriority", "LinearDecayUseCountControlPriority", "PriorityFunction"]
