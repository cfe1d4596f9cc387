"""The dtype and attention hooks: defaults, a backend's own answers, resolution of ``auto`` and refusals."""

from __future__ import annotations

import pytest

from tests.device import plugins
from trinity.device import AttentionChoice, DtypeSupport, hookimpl
from trinity.device.backends import cpu
from trinity.device.errors import DeviceError, UnsupportedDtypeError
from trinity.device.loader import load_plugin


class HalfOnly(plugins.FakeAccel):
    """A device computing in half precision only, with flash attention in bfloat16."""

    @hookimpl
    def trinity_supported_dtypes(self) -> DtypeSupport:
        return DtypeSupport(("bfloat16", "float16"), unsupported={"float32": "the matrix units have no float32 path"})

    @hookimpl
    def trinity_attention_implementation(self, dtype: str) -> AttentionChoice:
        if dtype == "bfloat16":
            return AttentionChoice("flash_attention_2", "vendor kernel")
        return AttentionChoice("eager", "no fused kernel in float16")


class FixedAttention(plugins.FakeAccel):
    """Answers the attention hook without taking its argument (a subset, which the spec allows)."""

    @hookimpl
    def trinity_attention_implementation(self) -> AttentionChoice:
        return AttentionChoice("eager")


class NoDtypes(plugins.FakeAccel):
    """A buggy backend naming no dtype at all."""

    @hookimpl
    def trinity_supported_dtypes(self) -> DtypeSupport:
        return DtypeSupport(())


def test_defaults_are_the_host_cpus_answer() -> None:
    backend = load_plugin(plugins.FakeAccel(), expected_name="accel")
    support = backend.supported_dtypes()
    assert support.supported == ("float32", "bfloat16", "float16") and support.preferred == "float32"
    assert backend.attention_implementation("bfloat16").implementation == "sdpa"
    assert not backend.implements("trinity_supported_dtypes")


def test_the_built_in_cpu_backend_resolves_auto_to_float32() -> None:
    backend = load_plugin(cpu, expected_name="cpu")
    assert backend.resolve_dtype("auto") == "float32"
    assert backend.resolve_dtype("bfloat16") == "bfloat16"
    assert backend.attention_implementation("float32").implementation == "sdpa"


def test_a_backend_overrides_both_answers() -> None:
    backend = load_plugin(HalfOnly(), expected_name="accel")
    assert backend.implements("trinity_supported_dtypes") and backend.implements("trinity_attention_implementation")
    assert backend.resolve_dtype("auto") == "bfloat16"
    assert backend.attention_implementation("bfloat16") == AttentionChoice("flash_attention_2", "vendor kernel")
    assert backend.attention_implementation("float16").implementation == "eager"


def test_a_refused_dtype_carries_the_backends_reason() -> None:
    backend = load_plugin(HalfOnly(), expected_name="accel")
    with pytest.raises(UnsupportedDtypeError) as caught:
        backend.resolve_dtype("float32")
    assert str(caught.value) == (
        "dtype float32 is not supported on the accel backend: the matrix units have no float32 path; "
        "use one of bfloat16, float16 (or auto: bfloat16)"
    )


def test_a_dtype_without_a_reason_gets_a_generic_one() -> None:
    backend = load_plugin(plugins.FakeAccel(), expected_name="accel")
    with pytest.raises(UnsupportedDtypeError, match="float64 is not among the supported float32, bfloat16, float16"):
        backend.resolve_dtype("float64")


def test_an_implementation_may_take_a_subset_of_the_arguments() -> None:
    backend = load_plugin(FixedAttention(), expected_name="accel")
    assert backend.attention_implementation("float16").implementation == "eager"


def test_an_empty_answer_is_a_backend_bug() -> None:
    backend = load_plugin(NoDtypes(), expected_name="accel")
    with pytest.raises(DeviceError, match=r"returned no dtype names.*bug in the backend package"):
        backend.supported_dtypes()
