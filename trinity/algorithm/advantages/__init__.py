"""The built-in advantage functions, by family (declared in :mod:`trinity.algorithm.catalog`).

* :mod:`~trinity.algorithm.advantages.grpo`: ``grpo``, ``grpo_verl``, ``step_wise_grpo``;
* :mod:`~trinity.algorithm.advantages.baselines`: ``reinforce``, ``rloo``, ``opmd``, ``opmd_verl``,
  ``asymre``, ``asymre_verl``, ``rec``;
* :mod:`~trinity.algorithm.advantages.discounted`: ``ppo`` (``gae``), ``reinforceplusplus``, ``remax``;
* :mod:`~trinity.algorithm.advantages.distill`: ``on_policy_distill``, ``jsd``.
"""
