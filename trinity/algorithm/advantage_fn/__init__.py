"""Upstream Trinity-RFT's advantage classes, at upstream's import path.

A user's advantage written from upstream's ``develop_algorithm.md`` subclasses
:class:`GroupAdvantage` (or :class:`AdvantageFn`) and registers in
:data:`ADVANTAGE_FN`, which is trinity-rft's one advantage registry
(:data:`~trinity.algorithm.catalog.ADVANTAGE_FNS`): built-in functions and
users' classes sit side by side. The buffer calls such a class on the
experiences of complete task groups (:mod:`trinity.algorithm.class_adapters`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from trinity.algorithm.catalog import ADVANTAGE_FNS

#: Upstream's name of the advantage registry.
ADVANTAGE_FN = ADVANTAGE_FNS


class AdvantageFn(ABC):
    """An advantage computed from experiences: ``fn(exps) -> (exps with advantages and returns, metrics)``."""

    @abstractmethod
    def __call__(self, exps: Any, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Return the experiences with ``advantages`` and ``returns`` set, and metrics to log."""

    @classmethod
    @abstractmethod
    def default_args(cls) -> dict[str, Any]:
        """Return the constructor's arguments used when the config gives no ``advantage_fn_args``."""

    @classmethod
    def compute_in_trainer(cls) -> bool:
        """Whether the trainer computes it on the whole batch (trinity-rft runs classes in the buffer only)."""
        return True


class GroupAdvantage(AdvantageFn):
    """An advantage computed group by group: say how to group and what each group's advantages are."""

    @abstractmethod
    def group_experiences(self, exps: list[Any]) -> dict[str, list[Any]]:
        """Return ``exps`` split into groups, by group id."""

    @abstractmethod
    def calculate_group_advantage(self, group_id: str, exps: list[Any]) -> tuple[list[Any], dict[str, Any]]:
        """Set ``advantages`` and ``returns`` of one group's experiences; return them and the group's metrics."""

    def process(self, exps: list[Any]) -> tuple[list[Any], dict[str, Any]]:
        """Return every group's experiences with advantages, and the groups' metrics averaged."""
        if not exps:
            return [], {}
        groups = self.group_experiences(exps)
        out: list[Any] = []
        per_group: list[dict[str, Any]] = []
        for group_id, members in groups.items():
            computed, metrics = self.calculate_group_advantage(group_id, members)
            out.extend(computed)
            per_group.append(metrics)
        return out, average_metrics(per_group, "group_advantages")

    def __call__(self, exps: Any, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        return self.process(exps)

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        """No arguments by default (override to give some)."""
        return {}

    @classmethod
    def compute_in_trainer(cls) -> bool:
        """Group advantages are computed in the buffer."""
        return False


def average_metrics(metrics: list[dict[str, Any]], prefix: str) -> dict[str, float]:
    """Return the mean of each numeric metric over ``metrics``, named ``prefix/<name>/mean``."""
    sums: dict[str, list[float]] = {}
    for entry in metrics:
        for key, value in entry.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                sums.setdefault(key, []).append(float(value))
            elif hasattr(value, "item"):
                sums.setdefault(key, []).append(float(value.item()))
    return {f"{prefix}/{key}/mean": sum(values) / len(values) for key, values in sums.items()}


__all__ = ["ADVANTAGE_FN", "AdvantageFn", "GroupAdvantage", "average_metrics"]
