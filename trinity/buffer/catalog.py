"""The buffer's registries and their built-in entries, declared without importing them.

Sample strategies (``algorithm.sample_strategy``) and experience operators
(``data_processor.experience_pipeline.operators``) are named in configs and
checked when a config is loaded, before torch is imported; their modules are
imported on first :meth:`~trinity.utils.registry.Registry.get`.
"""

from __future__ import annotations

from typing import Any

from trinity.utils.registry import Registry

#: Sample strategies, by name: ``factory(storage, *, batch_size, group_size, [batch_rows,] **options)``.
SAMPLE_STRATEGIES: Registry[Any] = Registry("sample strategy")
for _name, _target in {
    "default": "trinity.buffer.sampling:SampleStrategy",
    "warmup": "trinity.buffer.sampling:SampleStrategy",  # upstream's deprecated name of default
    "staleness": "trinity.buffer.sampling:StalenessStrategy",
    "staleness_control": "trinity.buffer.sampling:staleness_control",
    "mix": "trinity.buffer.mixing:MixStrategy",  # built by the launcher: it needs the run's auxiliary data set
}.items():
    SAMPLE_STRATEGIES.declare(_name, _target)

#: Experience operators, by name: upstream's operator classes (``ExperienceOperatorV1`` / ``ExperienceOperator``,
#: see :mod:`trinity.buffer.operators`) and trinity-rft's reward shapers (``shaper(reward, experience, **args)``).
EXPERIENCE_OPERATORS: Registry[Any] = Registry("experience operator")
#: The same registry, under the name of the functions it first held.
REWARD_SHAPERS = EXPERIENCE_OPERATORS
for _name, _target in {
    "scale": "trinity.buffer.shaping:scale_reward",
    "length_penalty": "trinity.buffer.shaping:length_penalty",
    "clip": "trinity.buffer.shaping:clip_reward",
    "reward_filter": "trinity.buffer.operators.filters:RewardFilter",
    "reward_std_filter": "trinity.buffer.operators.filters:RewardSTDFilter",
    "invalid_reward_filter": "trinity.buffer.operators.filters:InvalidRewardFilter",
    "reward_shaping_mapper": "trinity.buffer.operators.mappers:RewardShapingMapper",
    "pass_rate_calculator": "trinity.buffer.operators.mappers:PassRateCalculator",
}.items():
    EXPERIENCE_OPERATORS.declare(_name, _target)

#: Priority functions of experience replay (``replay_buffer.priority_fn``): classes built with
#: ``priority_fn_args`` whose instances map a group to ``(priority, keep)`` (see :mod:`trinity.buffer.replay.priority`).
PRIORITY_FUNCTIONS: Registry[Any] = Registry("priority function")
for _name, _target in {
    "linear_decay": "trinity.buffer.replay.priority:LinearDecayPriority",
    "decay_limit_randomization": "trinity.buffer.replay.priority:DecayLimitRandomizationPriority",
}.items():
    PRIORITY_FUNCTIONS.declare(_name, _target)

__all__ = ["EXPERIENCE_OPERATORS", "PRIORITY_FUNCTIONS", "REWARD_SHAPERS", "SAMPLE_STRATEGIES"]
