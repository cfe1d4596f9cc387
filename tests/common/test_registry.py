"""The one registry pattern."""

from __future__ import annotations

import pytest

from trinity.common.registry import DuplicateNameError, Registry, UnknownNameError


def test_register_get_and_suggest() -> None:
    reg: Registry[object] = Registry("workflow")

    @reg.register("math")
    def math() -> None: ...

    reg.add("Toy_Repeat", object())
    assert reg.get("MATH") is math and "toy_repeat" in reg and reg.names() == ["math", "toy_repeat"]
    with pytest.raises(UnknownNameError) as caught:
        reg.get("mth")
    assert str(caught.value) == "unknown workflow 'mth'; did you mean 'math'? (known: math, toy_repeat)"


def test_duplicate_names_are_refused() -> None:
    reg: Registry[int] = Registry("reward function")
    reg.add("a", 1)
    reg.add("a", 1)  # the same object again is harmless (module re-import)
    with pytest.raises(DuplicateNameError, match="reward function 'a' is registered twice"):
        reg.add("A", 2)
