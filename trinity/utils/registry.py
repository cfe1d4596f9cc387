"""Upstream Trinity-RFT's import path of the registry class: the project's one registry pattern.

``Registry("workflows", default_mapping={"name": "pkg.module.Class"})`` and
``@REG.register_module("name")`` work as upstream documents them; see
:class:`trinity.common.registry.Registry`.
"""

from trinity.common.registry import DuplicateNameError, Registry, UnknownNameError

__all__ = ["DuplicateNameError", "Registry", "UnknownNameError"]
