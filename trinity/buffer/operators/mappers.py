"""Upstream's mapping operators: reshape rewards from statistics in ``info``, and measure each task's pass rate."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trinity.buffer.operators import ExperienceOperator

if TYPE_CHECKING:
    from trinity.common.experience import Experience

#: How ``reward_shaping_mapper`` combines a reward with ``weight * info[stats_key]``.
SHAPING_OPS = ("ADD", "SUB", "MUL", "DIV")


class RewardShapingMapper(ExperienceOperator):
    """Reshape each reward by statistics its experience carries in ``info`` (upstream's ``reward_shaping_configs``).

    Each entry is ``{"stats_key": KEY, "op_type": ADD|SUB|MUL|DIV, "weight": W}``
    and applies ``reward <op>= W * info[KEY]`` in order; an experience
    without ``KEY`` (or without a reward) is left as it is, and a zero divisor
    divides nothing. The reward before shaping is kept in ``info["raw_reward"]``.
    """

    def __init__(self, reward_shaping_configs: Sequence[Mapping[str, Any]] | None = None) -> None:
        self.reward_shaping_configs = [dict(entry) for entry in reward_shaping_configs or []]
        for number, entry in enumerate(self.reward_shaping_configs):
            op = str(entry.get("op_type", "ADD")).upper()
            if op not in SHAPING_OPS:
                raise ValueError(f"reward_shaping_configs[{number}].op_type: must be one of "
                                 f"{', '.join(SHAPING_OPS)}, got {entry.get('op_type')!r}")
            extra = set(entry) - {"stats_key", "op_type", "weight"}
            if extra:
                raise ValueError(f"reward_shaping_configs[{number}]: unknown keys {sorted(extra)} "
                                 "(known: stats_key, op_type, weight)")

    def _shape(self, reward: float, info: Mapping[str, Any]) -> float:
        for entry in self.reward_shaping_configs:
            key = entry.get("stats_key")
            if key is None or key not in info:
                continue
            value = float(entry.get("weight", 1.0)) * float(info[key])
            op = str(entry.get("op_type", "ADD")).upper()
            if op == "ADD":
                reward += value
            elif op == "SUB":
                reward -= value
            elif op == "MUL":
                reward *= value
            elif value != 0:
                reward /= value
        return reward

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, Any]]:
        """Return the experiences with reshaped rewards; metrics ``reward_diff/{mean,min,max}``."""
        out: list[Experience] = []
        diffs: list[float] = []
        for exp in exps:
            if exp.reward is None:
                out.append(exp)
                diffs.append(0.0)
                continue
            before = float(exp.reward)
            after = self._shape(before, exp.info)
            if after != before:
                exp.info = {**exp.info, "raw_reward": exp.info.get("raw_reward", before)}
            exp.reward = after
            out.append(exp)
            diffs.append(after - before)
        if not diffs:
            return out, {"reward_diff/mean": 0.0, "reward_diff/min": 0.0, "reward_diff/max": 0.0}
        return out, {"reward_diff/mean": sum(diffs) / len(diffs), "reward_diff/min": min(diffs),
                     "reward_diff/max": max(diffs)}


class PassRateCalculator(ExperienceOperator):
    """Measure each task's pass rate (mean reward of its group) and report how many tasks are neither solved
    nor hopeless (upstream's ``selection/*`` ratios)."""

    def __init__(self, **kwargs: Any) -> None:
        self.options = kwargs

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, Any]]:
        """Return the experiences unchanged and the pass-rate metrics of the step's tasks."""
        rewards: dict[str, list[float]] = {}
        for exp in exps:
            if exp.reward is not None:
                rewards.setdefault(exp.group_id, []).append(float(exp.reward))
        rates = [sum(r) / len(r) for r in rewards.values() if r]
        if not rates:
            return exps, {}
        low, high = 1 / 16 + 1e-3, 15 / 16 - 1e-3

        def share(test: Any) -> float:
            return sum(1 for rate in rates if test(rate)) / len(rates)

        return exps, {
            "selection/valid_ratio": share(lambda r: 0 < r < 1),
            "selection/strict_valid_ratio": share(lambda r: low < r < high),
            "selection/<1_ratio": share(lambda r: r < 1),
            "selection/>0_ratio": share(lambda r: r > 0),
            "selection/<15_16_ratio": share(lambda r: r < high),
            "selection/>1_16_ratio": share(lambda r: r > low),
        }


__all__ = ["SHAPING_OPS", "PassRateCalculator", "RewardShapingMapper"]
