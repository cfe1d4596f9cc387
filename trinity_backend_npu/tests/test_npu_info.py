"""The backend's static facts, and that importing the package stays light."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from trinity.device.loader import load_plugin
from trinity.device.spec import SPEC_VERSION
from trinity_backend_npu import plugin


def test_info_facts() -> None:
    info = load_plugin(plugin, expected_name="npu").info
    assert (info.name, info.device_type, info.priority, info.spec_version) == ("npu", "npu", 100, SPEC_VERSION)
    assert (info.collective_backend, info.ray_resource_key) == ("hccl", "NPU")
    assert info.visible_devices_env == "ASCEND_RT_VISIBLE_DEVICES"
    assert {"ASCEND_", "HCCL_"} <= set(info.worker_env_prefixes)
    assert "Ascend" in info.description


def test_torch_compile_is_refused_with_the_reason() -> None:
    support = load_plugin(plugin, expected_name="npu").compile_support()
    assert support.supported is False
    assert "inductor has no NPU driver" in support.reason
    assert "set trainer.use_torch_compile: false" in support.reason


def test_only_what_differs_from_the_defaults_is_implemented() -> None:
    backend = load_plugin(plugin, expected_name="npu")
    for hook in (
        "trinity_device_module", "trinity_visible_devices_env", "trinity_worker_env",
        "trinity_torch_compile_support", "trinity_doctor",
    ):
        assert backend.implements(hook), hook
    # These reach torch.npu through trinity_device_module (tested in test_npu_runtime.py).
    for hook in ("trinity_set_device", "trinity_synchronize", "trinity_memory_stats", "trinity_manual_seed"):
        assert not backend.implements(hook), hook


def test_importing_the_package_imports_no_runtime(doubles: Any) -> None:
    code = (
        "import json, sys, trinity_backend_npu, trinity_backend_npu.plugin, trinity_backend_npu.runtime; "
        "print(json.dumps([trinity_backend_npu.__version__, "
        "sorted(m for m in ('torch', 'torch_npu') if m in sys.modules)]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True, text=True, check=False, env=doubles.subprocess_env(), timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["0.3.0", []]
