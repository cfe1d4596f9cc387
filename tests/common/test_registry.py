"""The one registry pattern."""

from __future__ import annotations

import pytest

from trinity.utils.registry import DuplicateNameError, Registry, UnknownNameError


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


def test_declared_entries_are_known_at_once_and_imported_on_first_get() -> None:
    import sys

    reg: Registry[object] = Registry("workflow")
    reg.declare("dumps", "json:dumps")
    reg.declare("Dumps", "json:dumps")  # the same target again is harmless
    assert "dumps" in reg and reg.names() == ["dumps"] and reg.declared_targets() == {"dumps": "json:dumps"}
    assert reg.get("DUMPS") is sys.modules["json"].dumps and reg.declared_targets() == {}
    with pytest.raises(DuplicateNameError):
        reg.declare("dumps", "json:loads")
    reg.declare("broken", "json:no_such_function")
    with pytest.raises(UnknownNameError, match=r"workflow 'broken' is declared as json:no_such_function but cannot "
                                               r"be loaded"):
        reg.get("broken")


def test_a_python_path_is_imported_when_allowed() -> None:
    import json

    reg: Registry[object] = Registry("reward function")
    assert reg.get("json.dumps") is json.dumps and reg.resolves("json.dumps") and not reg.resolves("json.nothing")
    with pytest.raises(UnknownNameError, match=r"unknown reward function 'no_pkg\.fn': not a registered name, and "
                                               r"importing it as a Python path failed \(ModuleNotFoundError"):
        reg.get("no_pkg.fn")
    strict: Registry[object] = Registry("engine", allow_import_path=False)
    with pytest.raises(UnknownNameError, match=r"unknown engine 'json\.dumps'"):
        strict.get("json.dumps")
