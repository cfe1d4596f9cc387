"""Upstream's built-in task selectors: ``offline_easy2hard`` (a fixed curriculum from features of each task) and
``difficulty_based`` (BOTS: tasks whose estimated pass rate is closest to a target, estimated online)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from trinity.buffer.selector import BaseSelector, DataSource


def _features(data_source: DataSource, keys: list[str], name: str, count: int | None = None) -> np.ndarray:
    if not keys or (count is not None and len(keys) != count):
        want = f"exactly {count}" if count is not None else "at least one"
        raise ValueError(f"selector {name} needs {want} feature_keys (columns of the task set), got {keys}")
    try:
        columns = [np.asarray(data_source.dataset[key], dtype=float) for key in keys]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"selector {name}: feature_keys {keys} must be numeric columns ({exc})") from None
    return np.stack(columns, axis=1)


class OfflineEasy2HardSelector(BaseSelector):
    """Serve tasks from easiest to hardest by their features (higher is easier), round and round."""

    def __init__(self, data_source: DataSource, config: Any) -> None:
        super().__init__(data_source, config)
        self.features = _features(data_source, list(config.feature_keys), "offline_easy2hard")
        order = sorted(range(len(self.features)), key=lambda i: (*self.features[i], i), reverse=True)
        #: Task indices from easiest to hardest.
        self.sorted_index = np.asarray(order, dtype=int)
        self.dataset_size = data_source.dataset_size
        self.current_index = 0

    def get_indices(self, batch_size: int, return_extra_info: bool = False) -> Any:
        """Return the next ``batch_size`` tasks of the curriculum (it restarts after the hardest)."""
        positions = [(self.current_index + k) % self.dataset_size for k in range(batch_size)]
        self.current_index += batch_size
        selected = self.sorted_index[positions]
        if return_extra_info:
            return selected, {"indices": selected.tolist(), "features": self.features[selected].tolist()}
        return selected

    def feedback(self, indices: list[int], values: list[float]) -> None:
        """Nothing to learn: the curriculum is fixed."""

    def state_dict(self) -> dict[str, Any]:
        """Return the position in the curriculum."""
        return {"current_index": self.current_index}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue the curriculum where it was."""
        self.current_index = int(state_dict.get("current_index", 0))


class BetaPassRates:
    """Each task's pass rate as a Beta(alpha, beta) estimate, updated from observed pass rates of the tasks run and,
    for every task, from an interpolation between two reference pass rates (its two features) by the policy's
    estimated ability.

    ``alpha <- (1 - lamb) alpha + lamb + (1 - rho) s + rho m p``, and ``beta`` alike with failures, where ``s``
    is the observed successes out of ``m`` (0 for tasks not run) and ``p`` the interpolated pass rate.
    """

    def __init__(self, features: np.ndarray, *, m: int = 16, lamb: float = 0.2, rho: float = 0.2,
                 adaptive_rho: bool = False, ability_discount: float = 0.9) -> None:
        self.features = features
        self.m, self.lamb, self.rho = int(m), float(lamb), float(rho)
        self.adaptive_rho = bool(adaptive_rho)
        self.ability_discount = float(ability_discount)
        self.alphas = np.ones(len(features))
        self.betas = np.ones(len(features))
        #: The policy's place between the two reference models (0: the first, 1: the second); None before feedback.
        self.ability: float | None = None

    def update(self, indices: list[int], pass_rates: list[float]) -> None:
        """Learn from the pass rates observed for the tasks at ``indices``."""
        observed = np.asarray(pass_rates, dtype=float)
        low, high = self.features[indices].mean(axis=0)
        estimate = (observed.mean() - low) / (high - low + 1e-6)
        self.ability = estimate if self.ability is None else (
            self.ability_discount * self.ability + (1 - self.ability_discount) * estimate)
        interpolated = np.clip(self.features[:, 0] + (self.features[:, 1] - self.features[:, 0]) * self.ability, 0, 1)
        if self.adaptive_rho and np.abs(interpolated[indices] - observed).mean() >= 0.25:
            self.rho *= 0.5
        interpolated[indices] = observed
        successes = np.zeros(len(self.features))
        failures = np.zeros(len(self.features))
        successes[indices] = observed * self.m
        failures[indices] = (1 - observed) * self.m
        keep = 1 - self.lamb
        self.alphas = keep * self.alphas + self.lamb + (1 - self.rho) * successes + self.rho * interpolated * self.m
        self.betas = keep * self.betas + self.lamb + (1 - self.rho) * failures + self.rho * (1 - interpolated) * self.m

    def predict(self, rng: np.random.Generator, sample: bool) -> np.ndarray:
        """Return every task's pass rate: the Beta's mean, or a draw from it with ``sample``."""
        return rng.beta(self.alphas, self.betas) if sample else self.alphas / (self.alphas + self.betas)

    def state_dict(self) -> dict[str, Any]:
        """Return the estimate (all of it: a resumed run selects as the interrupted one would have)."""
        return {"alphas": self.alphas.tolist(), "betas": self.betas.tolist(), "ability": self.ability,
                "rho": self.rho}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a saved estimate; raises ValueError when it is for another number of tasks."""
        alphas, betas = np.asarray(state["alphas"], dtype=float), np.asarray(state["betas"], dtype=float)
        if alphas.shape != self.alphas.shape or betas.shape != self.betas.shape:
            raise ValueError(f"the saved pass-rate estimate is for {len(alphas)} tasks, the task set has "
                             f"{len(self.alphas)}")
        self.alphas, self.betas = alphas, betas
        self.ability, self.rho = state.get("ability"), float(state.get("rho", self.rho))


class DifficultyBasedSelector(BaseSelector):
    """Select the tasks whose estimated pass rate is closest to ``target_reward`` (BOTS).

    ``feature_keys``: two columns, each task's pass rate under a weaker and a
    stronger reference model. ``kwargs``: ``m`` (rollouts per task, 16),
    ``lamb`` (forgetting, 0.2), ``rho`` (weight of the interpolation, 0.2),
    ``adaptive_rho``, ``target_reward`` (1.0), ``tau`` (softmax temperature of
    the choice; 0 takes the closest), ``do_sample`` (draw pass rates from their
    Beta instead of taking its mean). Seeded by ``seed`` and the position, so a
    resumed run draws the same tasks.
    """

    def __init__(self, data_source: DataSource, config: Any) -> None:
        super().__init__(data_source, config)
        options = dict(config.kwargs or {})
        self.estimator = BetaPassRates(
            _features(data_source, list(config.feature_keys), "difficulty_based", count=2),
            m=options.get("m", 16), lamb=options.get("lamb", 0.2), rho=options.get("rho", 0.2),
            adaptive_rho=options.get("adaptive_rho", False))
        self.seed = int(config.seed)
        self.do_sample = bool(options.get("do_sample", False))
        self.target_reward = float(options.get("target_reward", 1.0))
        self.tau = float(options.get("tau", 1.0))
        self.current_index = 0

    def scores(self) -> np.ndarray:
        """Return each task's score: minus the distance of its pass rate from the target."""
        rng = np.random.default_rng(self.seed + self.current_index)
        return -np.abs(self.target_reward - self.estimator.predict(rng, self.do_sample))

    def get_indices(self, batch_size: int, return_extra_info: bool = False) -> Any:
        """Return ``batch_size`` distinct tasks: the best scores (``tau`` 0) or a softmax draw at ``tau``."""
        scores = torch.from_numpy(self.scores())
        count = min(batch_size, len(scores))
        if self.tau == 0:
            selected = torch.topk(scores, count).indices
        else:
            logits = scores / self.tau
            generator = torch.Generator().manual_seed(self.seed + self.current_index)
            selected = torch.multinomial(torch.softmax(logits - logits.max(), dim=0), count, replacement=False,
                                         generator=generator)
        self.current_index += batch_size
        indices = selected.numpy()
        if return_extra_info:
            return indices, {"indices": indices.tolist(), "scores": scores[selected].tolist()}
        return indices

    def feedback(self, indices: list[int], values: list[float]) -> None:
        """Update the pass-rate estimate with the observed pass rates."""
        if indices:
            self.estimator.update(list(indices), list(values))

    def state_dict(self) -> dict[str, Any]:
        """Return the position and the whole estimate."""
        return {"current_index": self.current_index, "estimator": self.estimator.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a saved position and estimate."""
        self.current_index = int(state_dict.get("current_index", 0))
        if "estimator" in state_dict:
            self.estimator.load_state_dict(state_dict["estimator"])


__all__ = ["BetaPassRates", "DifficultyBasedSelector", "OfflineEasy2HardSelector"]
