"""The experience pipeline: processors applied, in order, to experiences before they are stored.

Built-in processors:

* :class:`RewardShaping`: applies :data:`~trinity.buffer.shaping.REWARD_SHAPERS`
  in turn to each reward; the reward before shaping is kept in
  ``info["raw_reward"]``.
* :class:`GroupAdvantages`: for group-based algorithms (``grpo``, ``rloo``,
  ``opmd``: see :data:`GROUP_ADVANTAGE_FNS`), holds each group until all its
  ``group_size`` members have arrived, then calls the advantage function of
  :data:`~trinity.algorithm.advantage.ADVANTAGE_FNS` by name on a
  :func:`~trinity.common.experience.make_batch` of the complete groups and
  writes per-token ``advantages`` and ``returns`` into each experience (and
  ``info["group_size"]``, which the sample strategies use).

A group whose members will never all arrive (a failed rollout) stays held
until :meth:`ExperiencePipeline.flush`, which releases it as it is.

Every member of a group must pass through the same pipeline object: run one
pipeline per writer and keep a task's rollouts on one writer.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from trinity.algorithm.advantage import ADVANTAGE_FNS, AdvantageInputs
from trinity.algorithm.options import check_options
from trinity.buffer.sampling import GroupAssembler
from trinity.buffer.shaping import REWARD_SHAPERS
from trinity.buffer.storage.base import ExperienceStorage
from trinity.common.config.schema import AlgorithmConfig
from trinity.common.experience import Experience, make_batch

#: Advantage functions whose result for a rollout depends only on its own group: computed here, in the buffer.
#: Others (``gae``/``ppo`` need critic values, ``reinforce_plus_plus`` whitens over the whole batch) belong
#: to the trainer.
GROUP_ADVANTAGE_FNS = frozenset({"grpo", "rloo", "opmd"})


def computes_in_buffer(advantage_fn: str) -> bool:
    """Return whether the advantage function ``advantage_fn`` is computed by the pipeline (group-local)."""
    return advantage_fn.strip().lower() in GROUP_ADVANTAGE_FNS


def buffer_advantage_fn(algorithm: AlgorithmConfig) -> str:
    """Return the advantage function the pipeline computes for ``algorithm``, or ``""`` when the trainer does.

    The name is ``algorithm.advantage_fn``, else the algorithm type's default
    (:data:`~trinity.algorithm.algorithms.ALGORITHMS`). It is computed in the
    buffer only when it is group-local and no KL reward penalty (which needs
    the reference model, in the trainer) changes the rewards first. Raises
    UnknownNameError for an unknown algorithm type.
    """
    from trinity.algorithm.algorithms import ALGORITHMS

    spec = ALGORITHMS.get(algorithm.algorithm_type)
    name = algorithm.advantage_fn or spec.advantage_fn or ""
    return name if name and computes_in_buffer(name) and not algorithm.kl_penalty_fn else ""


class ExperienceProcessor(ABC):
    """One stage of the pipeline."""

    @abstractmethod
    def process(self, experiences: list[Experience]) -> list[Experience]:
        """Return the experiences to pass on (possibly changed, possibly fewer: a stage may hold some)."""

    def flush(self) -> list[Experience]:
        """Return every held experience, processed as far as possible; nothing is held afterwards."""
        return []

    def held(self) -> int:
        """Return the number of experiences this stage holds."""
        return 0


class RewardShaping(ExperienceProcessor):
    """Applies reward shapers in order; see the module docstring."""

    def __init__(self, shapers: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """Check each ``(name, options)``; raises UnknownNameError / UnknownOptionError (one line)."""
        self.shapers = []
        for name, options in shapers:
            fn = REWARD_SHAPERS.get(name)
            check_options(REWARD_SHAPERS.kind, name, fn, dict(options))
            self.shapers.append((fn, dict(options)))

    def process(self, experiences: list[Experience]) -> list[Experience]:
        """Return copies of ``experiences`` with shaped rewards (experiences without a reward unchanged)."""
        out = []
        for exp in experiences:
            if exp.reward is None or not self.shapers:
                out.append(exp)
                continue
            reward = float(exp.reward)
            for fn, options in self.shapers:
                reward = float(fn(reward, exp, **options))
            info = {**exp.info, "raw_reward": exp.info.get("raw_reward", exp.reward)}
            out.append(dataclasses.replace(exp, reward=reward, info=info))
        return out


class GroupAdvantages(ExperienceProcessor):
    """Computes group advantages once groups are complete; see the module docstring."""

    def __init__(
        self,
        advantage_fn: str,
        options: Mapping[str, Any] | None = None,
        *,
        group_size: int,
        pad_token_id: int = 0,
    ) -> None:
        """Raises UnknownNameError / UnknownOptionError (one line) for a bad function or option name."""
        fn = ADVANTAGE_FNS.get(advantage_fn)
        self.options = dict(options or {})
        check_options(ADVANTAGE_FNS.kind, advantage_fn, fn, self.options)
        self.fn = fn
        self.name = advantage_fn
        self.pad_token_id = pad_token_id
        self.assembler = GroupAssembler(group_size)

    def _complete(self) -> list[list[Experience]]:
        groups = []
        while (group := self.assembler.pop()) is not None:
            groups.append(group)
        return groups

    def _compute(self, groups: list[list[Experience]]) -> list[Experience]:
        """Return the members of ``groups`` with advantages and returns filled in (one batch for all groups)."""
        members = [e for g in groups for e in g]
        if not members:
            return []
        missing = next((e for e in members if e.reward is None), None)
        if missing is not None:
            raise ValueError(
                f"experience {missing.run_id} of group {missing.group_id!r} has no reward; "
                f"advantage function {self.name!r} needs every reward (does the workflow set one?)"
            )
        batch = make_batch(members, self.pad_token_id)
        with torch.no_grad():
            advantages, returns = self.fn(AdvantageInputs.from_batch(batch), **self.options)
        out = []
        row = 0
        for group in groups:
            for exp in group:
                start, stop = exp.prompt_length - 1, len(exp.tokens) - 1
                out.append(dataclasses.replace(
                    exp,
                    advantages=advantages[row, start:stop].clone(),
                    returns=returns[row, start:stop].clone(),
                    info={**exp.info, "group_size": len(group)},
                ))
                row += 1
        return out

    def process(self, experiences: list[Experience]) -> list[Experience]:
        """Hold ``experiences`` by group and return the members of every group now complete, with advantages."""
        self.assembler.feed(experiences)
        return self._compute(self._complete())

    def flush(self) -> list[Experience]:
        """Release every incomplete group as it is, with advantages computed over the members present."""
        self.assembler.release_incomplete()
        return self._compute(self._complete())

    def held(self) -> int:
        """Return the number of experiences of incomplete groups."""
        return len(self.assembler.held())


class ExperiencePipeline:
    """A chain of processors, optionally writing its output to a storage."""

    def __init__(self, processors: Sequence[ExperienceProcessor] = (), storage: ExperienceStorage | None = None):
        self.processors = list(processors)
        self.storage = storage

    def process(self, experiences: Sequence[Experience]) -> list[Experience]:
        """Run ``experiences`` through every processor; returns what comes out of the last one."""
        out = list(experiences)
        for processor in self.processors:
            out = processor.process(out)
        return out

    def flush(self) -> list[Experience]:
        """Flush every processor in order (each flush output passes through the later ones) and return the lot."""
        out: list[Experience] = []
        for processor in self.processors:
            out = (processor.process(out) if out else []) + processor.flush()
        return out

    def held(self) -> int:
        """Return the number of experiences held by the processors."""
        return sum(p.held() for p in self.processors)

    def write(self, experiences: Sequence[Experience], timeout: float | None = None) -> int:
        """Process ``experiences`` and put the result into the storage in one call; returns how many were stored.

        Raises ValueError without a storage, and whatever the storage's ``put`` raises.
        """
        return self._put(self.process(experiences), timeout)

    def finish(self, timeout: float | None = None) -> int:
        """Flush and store what was held (call before closing the storage); returns how many were stored."""
        return self._put(self.flush(), timeout)

    def _put(self, experiences: list[Experience], timeout: float | None) -> int:
        if self.storage is None:
            raise ValueError("this experience pipeline has no storage to write to")
        if experiences:
            self.storage.put(experiences, timeout=timeout)
        return len(experiences)


def build_pipeline(
    *,
    reward_shaping: Sequence[Mapping[str, Any]] = (),
    advantage_fn: str = "",
    advantage_options: Mapping[str, Any] | None = None,
    group_size: int = 1,
    pad_token_id: int = 0,
    storage: ExperienceStorage | None = None,
) -> ExperiencePipeline:
    """Return the pipeline for a run.

    ``reward_shaping`` is a list of ``{"name": <shaper>, "args": {...}}``
    (applied in order). ``advantage_fn``, when set, adds group advantages
    (use it for the names of :data:`GROUP_ADVANTAGE_FNS`; others need what only
    the trainer has). Raises ValueError (one line) for a malformed shaping
    entry, UnknownNameError / UnknownOptionError for unknown names or options.
    """
    processors: list[ExperienceProcessor] = []
    if reward_shaping:
        specs = []
        for number, entry in enumerate(reward_shaping, start=1):
            extra = set(entry) - {"name", "args"}
            if "name" not in entry or extra or not isinstance(entry.get("args", {}), Mapping):
                raise ValueError(
                    f"reward shaping entry {number} {dict(entry)!r} must be {{'name': <shaper>, 'args': {{...}}}} "
                    f"(shapers: {', '.join(REWARD_SHAPERS.names())})"
                )
            specs.append((str(entry["name"]), entry.get("args", {})))
        processors.append(RewardShaping(specs))
    if advantage_fn:
        processors.append(GroupAdvantages(advantage_fn, advantage_options, group_size=group_size,
                                          pad_token_id=pad_token_id))
    return ExperiencePipeline(processors, storage)


def pipeline_for_algorithm(
    algorithm: AlgorithmConfig,
    *,
    reward_shaping: Sequence[Mapping[str, Any]] = (),
    pad_token_id: int = 0,
    storage: ExperienceStorage | None = None,
) -> ExperiencePipeline:
    """Return the pipeline of a run: reward shaping, then group advantages when :func:`buffer_advantage_fn` says so.

    Groups have ``algorithm.repeat_times`` members; the advantage options are
    ``algorithm.advantage_fn_args``. Raises as :func:`build_pipeline`.
    """
    name = buffer_advantage_fn(algorithm)
    return build_pipeline(
        reward_shaping=reward_shaping,
        advantage_fn=name,
        advantage_options=algorithm.advantage_fn_args if name else None,
        group_size=algorithm.repeat_times,
        pad_token_id=pad_token_id,
        storage=storage,
    )
