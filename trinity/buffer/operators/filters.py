"""Upstream's filtering operators: drop experiences by reward, by their group's reward spread, or with no reward."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

from trinity.buffer.operators import ExperienceOperator

if TYPE_CHECKING:
    from trinity.common.experience import Experience


class RewardFilter(ExperienceOperator):
    """Keep the experiences whose reward is at least ``threshold``."""

    def __init__(self, threshold: float = 0.0) -> None:
        self.threshold = threshold

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, Any]]:
        """Return the experiences rewarded ``threshold`` or more; ``filtered_count`` counts the others."""
        kept = [e for e in exps if e.reward is not None and e.reward >= self.threshold]
        return kept, {"filtered_count": len(exps) - len(kept)}


class RewardSTDFilter(ExperienceOperator):
    """Keep whole task groups whose rewards spread more than ``threshold`` (population std); drop lone rollouts."""

    def __init__(self, threshold: float = 0.0) -> None:
        self.threshold = threshold

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, Any]]:
        """Return the members of groups of two or more whose reward std exceeds ``threshold``."""
        kept: list[Experience] = []
        groups: dict[str, list[Experience]] = {}
        for exp in exps:
            groups.setdefault(exp.group_id, []).append(exp)
        for members in groups.values():
            rewards = [float(e.reward) for e in members if e.reward is not None]
            if len(members) < 2 or len(rewards) < len(members) or statistics.pstdev(rewards) <= self.threshold:
                continue
            kept.extend(members)
        return kept, {"filtered_count": len(exps) - len(kept)}


class InvalidRewardFilter(ExperienceOperator):
    """Drop experiences whose reward is missing or NaN."""

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, Any]]:
        """Return the experiences with a real reward; ``filtered_count`` counts the others."""
        kept = [e for e in exps if e.reward is not None and not math.isnan(float(e.reward))]
        return kept, {"filtered_count": len(exps) - len(kept)}


__all__ = ["InvalidRewardFilter", "RewardFilter", "RewardSTDFilter"]
