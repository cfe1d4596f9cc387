"""The built-in policy losses, by family (declared in :mod:`trinity.algorithm.catalog`).

* :mod:`~trinity.algorithm.losses.clipped`: ``ppo``, ``gspo``, ``importance_sampling``;
* :mod:`~trinity.algorithm.losses.reweighted`: ``topr``, ``cispo``, ``sapo``, ``sppo``, ``rec``;
* :mod:`~trinity.algorithm.losses.supervised`: ``sft``, ``sft_is``, ``sft_phi``, ``dpo``, ``opmd``;
* :mod:`~trinity.algorithm.losses.mixed`: ``mix``, ``mix_chord``.
"""
