"""The catalog: every built-in declared once, resolvable, described truthfully, and importable without torch."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from trinity.algorithm import catalog
from trinity.algorithm.catalog import FAMILIES, FunctionInfo
from trinity.utils.registry import import_object

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr


def test_the_catalog_and_the_package_import_without_torch() -> None:
    _run("import trinity.algorithm.catalog, sys; assert 'torch' not in sys.modules")
    _run(
        "import sys, trinity.algorithm\n"
        "from trinity.algorithm import ALGORITHMS, POLICY_LOSS_FNS, AlgorithmSpec, UnknownOptionError\n"
        "assert isinstance(ALGORITHMS.get('grpo'), AlgorithmSpec) and 'ppo' in POLICY_LOSS_FNS\n"
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )


def test_resolving_every_algorithm_type_does_not_import_torch() -> None:
    _run(
        "import sys\n"
        "from trinity.common.config.schema.algorithm import AlgorithmConfig\n"
        "from trinity.trainer.plan import resolve_plan\n"
        "from trinity.algorithm.catalog import ALGORITHMS\n"
        "for name in ALGORITHMS.names():\n"
        "    resolve_plan(AlgorithmConfig(algorithm_type=name)).describe()\n"
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )


def _declarations() -> list[tuple[str, str, FunctionInfo]]:
    return [(family.kind, name, info) for family in FAMILIES for name, info in family.builtins().items()]


@pytest.mark.parametrize(("kind", "name", "info"), _declarations(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_declared_target_resolves_to_a_function(kind: str, name: str, info: FunctionInfo) -> None:
    fn = import_object(info.target)
    assert callable(fn), f"{kind} {name}: {info.target} is not callable"
    assert inspect.getdoc(fn), f"{kind} {name}: {info.target} has no docstring"


def test_algorithm_declarations_resolve() -> None:
    from trinity.algorithm.algorithms import AlgorithmSpec

    for name in catalog.ALGORITHM_TARGETS:
        spec = catalog.ALGORITHMS.get(name)
        assert isinstance(spec, AlgorithmSpec)
        assert spec.name == name or (name, spec.name) == ("reinforce_plus_plus", "reinforceplusplus")
    assert catalog.ALGORITHMS.get("reinforce_plus_plus") is catalog.ALGORITHMS.get("reinforceplusplus")


def test_every_public_function_of_a_function_module_is_declared() -> None:
    declared: dict[str, set[str]] = {}
    for _, _, info in _declarations():
        module, _, attr = info.target.partition(":")
        declared.setdefault(module, set()).add(attr)
    assert sorted(declared) == [
        "trinity.algorithm.advantages.baselines",
        "trinity.algorithm.advantages.discounted",
        "trinity.algorithm.advantages.distill",
        "trinity.algorithm.advantages.entropy_clip",
        "trinity.algorithm.advantages.grpo",
        "trinity.algorithm.aggregation_modes",
        "trinity.algorithm.entropy_terms",
        "trinity.algorithm.kl_estimators",
        "trinity.algorithm.losses.clipped",
        "trinity.algorithm.losses.mixed",
        "trinity.algorithm.losses.reweighted",
        "trinity.algorithm.losses.supervised",
    ]
    for module_name, attrs in declared.items():
        module = importlib.import_module(module_name)
        public = {
            name
            for name, fn in inspect.getmembers(module, inspect.isfunction)
            if fn.__module__ == module_name and not name.startswith("_")
        }
        assert public == attrs, f"{module_name}: public {sorted(public)} but declared {sorted(attrs)}"


@pytest.mark.parametrize(("kind", "name", "info"), _declarations(), ids=lambda v: v if isinstance(v, str) else "")
def test_catalog_options_are_the_functions_keyword_options(kind: str, name: str, info: FunctionInfo) -> None:
    fn = import_object(info.target)
    assert callable(fn)
    keyword = {
        p.name: p.default for p in inspect.signature(fn).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    if kind in ("advantage function", "policy loss"):
        assert dict(info.options) == keyword  # every option a config may set, with the function's own default
    elif kind == "entropy loss function":
        assert {k: keyword[k] for k in info.options} == dict(info.options)
    else:  # KL estimators take their coefficient from the caller; aggregation modes have no options
        assert "kl_coef" not in keyword
    for key in info.upstream_defaults():
        assert key in info.options


def test_function_info_rejects_unknown_inputs_and_stray_default_args() -> None:
    with pytest.raises(ValueError, match="unknown inputs"):
        FunctionInfo("m:f", reads=frozenset({"rewardz"}))
    with pytest.raises(ValueError, match="not options"):
        FunctionInfo("m:f", options={"a": 1}, default_args={"b": 2})


def test_aliases_share_their_target() -> None:
    adv = catalog.ADVANTAGES
    for alias, main in (("gae", "ppo"), ("reinforce_plus_plus", "reinforceplusplus"), ("opmd_verl", "opmd")):
        alias_info, main_info = adv.info(alias), adv.info(main)
        assert alias_info is not None and main_info is not None
        assert alias_info.target == main_info.target


def test_the_algorithms_page_names_every_built_in() -> None:
    page = (ROOT / "docs" / "algorithms.md").read_text()
    names = {name for family in FAMILIES for name in family.builtins()} | set(catalog.ALGORITHM_TARGETS)
    names |= set(catalog.SAMPLE_STRATEGY_OPTIONS)
    missing = sorted(name for name in names if f"`{name}`" not in page)
    assert missing == []
