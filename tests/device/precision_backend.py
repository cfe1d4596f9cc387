"""A CPU-computing test backend that prefers bfloat16 and eager attention, selectable through the façade."""

from __future__ import annotations

import pytest

from tests.device import plugins
from trinity import device
from trinity.device import AttentionChoice, DtypeSupport, hookimpl
from trinity.device import facade as device_facade
from trinity.device.loader import BackendRecord, builtin_records, load_plugin

#: The reason the backend gives for refusing float16.
NO_FLOAT16 = "the test device has no float16 units"


class Bf16Eager(plugins.FakeAccel):
    """Computes on the host CPU, but answers like an accelerator with its own dtype and attention policy."""

    @hookimpl
    def trinity_supported_dtypes(self) -> DtypeSupport:
        return DtypeSupport(("bfloat16", "float32"), unsupported={"float16": NO_FLOAT16})

    @hookimpl
    def trinity_attention_implementation(self, dtype: str) -> AttentionChoice:
        return AttentionChoice("eager", f"the test device has no fused attention in {dtype}")


def select_bf16_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """Install :class:`Bf16Eager` as backend ``bf16eager`` and select it (undone by ``device.reset()``)."""
    backend = load_plugin(Bf16Eager("bf16eager", key=None), expected_name="bf16eager")
    found = {r.name: r for r in builtin_records()}
    found["bf16eager"] = BackendRecord("bf16eager", "trinity-backend-bf16eager", "1.0", "x", "ok", backend)
    monkeypatch.setattr(device_facade, "discover", lambda: found)
    device.reset()
    device.select_backend("bf16eager")
