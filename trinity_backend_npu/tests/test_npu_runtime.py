"""torch_npu is imported lazily, registers torch.npu, and the device hooks reach it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from trinity.device.errors import BackendUnavailableError
from trinity.device.loader import load_plugin
from trinity_backend_npu import plugin, runtime


@pytest.fixture
def backend(npu_runtime: Any) -> Any:
    return load_plugin(plugin, expected_name="npu")


def test_plugin_load_and_probe_do_not_import_torch_npu(backend: Any) -> None:
    assert backend.probe().available
    backend.compile_support()
    assert "torch_npu" not in sys.modules


def test_device_module_imports_torch_npu_and_returns_torch_npu(backend: Any) -> None:
    import torch

    module = backend.device_module()
    assert "torch_npu" in sys.modules
    assert module is torch.npu is sys.modules["torch_npu"].npu
    assert module.device_count() == 16
    assert runtime.device_module() is module


@pytest.mark.parametrize("before", [None, "1"])
def test_autoload_switch_is_left_as_it_was(backend: Any, monkeypatch: pytest.MonkeyPatch, before: str | None) -> None:
    if before is None:
        monkeypatch.delenv("TORCH_DEVICE_BACKEND_AUTOLOAD", raising=False)
    else:
        monkeypatch.setenv("TORCH_DEVICE_BACKEND_AUTOLOAD", before)
    backend.device_module()
    # The double, like torch_npu, sets it to 0 during an explicit import; the backend restores it.
    assert os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD") == before


def test_import_without_cann_is_an_actionable_error(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCH_DEVICE_BACKEND_AUTOLOAD", raising=False)
    monkeypatch.delenv("LD_LIBRARY_PATH")
    with pytest.raises(BackendUnavailableError) as caught:
        backend.device_module()
    message = str(caught.value)
    assert "libhccl.so: cannot open shared object file" in message
    assert "source /usr/local/Ascend/ascend-toolkit/set_env.sh" in message
    assert isinstance(caught.value.__cause__, ImportError)
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD" not in os.environ
    assert "torch_npu" not in sys.modules


def test_sys_exit_from_old_torch_npu_becomes_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def exit_like_old_torch_npu(name: str) -> None:
        raise SystemExit(None)

    monkeypatch.setattr(runtime.importlib, "import_module", exit_like_old_torch_npu)
    with pytest.raises(BackendUnavailableError, match="torch_npu could not be imported"):
        runtime.import_torch_npu()


def test_set_device_and_current_device(backend: Any) -> None:
    backend.set_device(11)
    assert backend.current_device_index() == 11
    backend.set_device(0)
    assert backend.current_device_index() == 0


def test_set_device_rejects_an_invalid_id_like_torch_npu(backend: Any) -> None:
    with pytest.raises(RuntimeError, match="107001"):
        backend.set_device(16)
    assert backend.current_device_index() == 0


def test_set_device_honours_the_visible_mask(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4,5")
    backend.set_device(1)
    with pytest.raises(RuntimeError, match="Invalid device ID"):
        backend.set_device(2)


def test_memory_stats_and_empty_cache(backend: Any) -> None:
    backend.set_device(2)
    module = backend.device_module()
    module._double_allocate(3 << 20)
    module._double_allocate(-(1 << 20))
    stats = backend.memory_stats()
    assert stats.allocated == 2 << 20
    assert stats.reserved == 3 << 20
    assert stats.total == 64 * 1024**3
    assert stats.free == stats.total - stats.reserved
    backend.empty_cache()
    assert backend.memory_stats().reserved == 2 << 20


def test_manual_seed_seeds_torch_and_every_npu(backend: Any) -> None:
    import torch

    backend.manual_seed(4321)
    first = torch.rand(3)
    assert backend.device_module().initial_seed() == 4321
    backend.manual_seed(4321)
    assert torch.equal(first, torch.rand(3))


def test_default_device_calls_go_through_torch_npu(backend: Any) -> None:
    backend.set_device(1)
    assert "torch_npu" in sys.modules, "set_device must import torch_npu through trinity_device_module"
    assert backend.device_module() is sys.modules["torch_npu"].npu
    assert backend.current_device_index() == 1
    backend.synchronize()
    with pytest.raises(Exception, match="16"):
        backend.set_device(16)


def test_double_is_undone_for_the_other_backends(npu_machine: Any, doubles: Any) -> None:
    """After the double, torch is a plain CPU torch again: the CPU backend's behaviour is unchanged."""
    import torch

    from trinity.device.backends import cpu

    autoload_before = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")
    with doubles.fake_torch_npu_installed():
        import torch_npu  # the double, imported directly: like the real one it leaves the switch at 0

        assert os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"
        assert hasattr(torch, "npu")
    assert not hasattr(torch, "npu")
    assert "torch.npu" not in sys.modules
    assert not [name for name in sys.modules if name.split(".")[0] == "torch_npu"]
    assert str(doubles.FAKE_SITE) not in sys.path
    assert os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD") == autoload_before
    assert runtime._device_module is None

    cpu_backend = load_plugin(cpu, expected_name="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cpu_backend.manual_seed(7)  # torch.manual_seed would warn if a half-registered torch.npu were left
    # The shared process never renamed privateuse1, so torch.accelerator is untouched.
    assert torch._C._get_privateuse1_backend_name() == "privateuseone"
    accelerator = torch.accelerator.current_accelerator()
    assert accelerator is None or accelerator.type != "npu"
    with doubles.fake_torch_npu_installed():
        import torch_npu  # noqa: F401 - a second import in the same process works

        assert torch.npu.device_count() == 16


_FAITHFUL_SCRIPT = """
import json, os, sys, warnings
from pathlib import Path
import trinity.device as device
import trinity_backend_npu.probe as probe
probe.DEVICE_DIR = Path(sys.argv[1])
device.reset()
device.set_device(3)
module = device.get_torch_device()
import torch  # already imported by torch_npu, with autoload off, so the double was not autoloaded
with warnings.catch_warnings():
    warnings.simplefilter("error")
    device.manual_seed(11)
print(json.dumps({
    "selected": device.current_backend().name,
    "device": str(device.torch_device()),
    "get_device_module": torch.get_device_module("npu") is module,
    "accelerator": torch.accelerator.current_accelerator().type,
    "privateuse1": torch._C._get_privateuse1_backend_name(),
    "npu_seed": module.initial_seed(),
    "autoload": os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD"),
}))
"""


def test_faithful_registration_in_a_process_of_its_own(npu_machine: Any, doubles: Any) -> None:
    """With the real registration (privateuse1 renamed), the selected backend drives torch.npu end to end.

    torch is first imported by torch_npu itself (explicit import through the
    backend), and the backend restores the autoload switch torch_npu zeroed.
    """
    env = doubles.subprocess_env(
        TRINITY_DEVICE="npu",
        ASCEND_HOME_PATH=str(npu_machine.toolkit),
        ASCEND_OPP_PATH=str(npu_machine.toolkit / "opp"),
        LD_LIBRARY_PATH=str(npu_machine.toolkit / "lib64"),
        FAKE_TORCH_NPU_DEVICES="16",
    )
    done = subprocess.run(
        [sys.executable, "-c", _FAITHFUL_SCRIPT, str(npu_machine.dev)],
        capture_output=True, text=True, check=False, env=env, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "selected": "npu",
        "device": "npu:3",
        "get_device_module": True,
        "accelerator": "npu",
        "privateuse1": "npu",
        "npu_seed": 11,
        "autoload": None,
    }


def test_conformance_kit_with_faithful_registration(doubles: Any) -> None:
    """The whole conformance kit again, in a child pytest where the double renames privateuse1 like torch_npu."""
    conformance = Path(__file__).resolve().parent / "test_npu_conformance.py"
    env = {**os.environ, doubles.FAITHFUL_VAR: "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(conformance)],
        capture_output=True, text=True, check=False, env=env, timeout=300, cwd=str(conformance.parents[2]),
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


def _run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, env=env, timeout=120
    )


def test_double_models_the_autoload_trap(tmp_path: Path, doubles: Any) -> None:
    """Installed torch_npu without CANN: plain `import torch` fails (torch autoloads it), unless autoload is off."""
    failed = _run_python("import torch", doubles.subprocess_env())
    assert failed.returncode != 0
    assert "libhccl.so: cannot open shared object file" in failed.stderr
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in failed.stderr

    off_env = doubles.subprocess_env(TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    off = _run_python("import torch; print(hasattr(torch, 'npu'))", off_env)
    assert off.returncode == 0, off.stderr
    assert off.stdout.strip() == "False"

    (tmp_path / "lib64").mkdir()
    (tmp_path / "lib64" / "libhccl.so").touch()
    code = (
        "import os, torch; "
        "print(torch.npu.__name__, torch.device('npu:1'), os.environ['TORCH_DEVICE_BACKEND_AUTOLOAD'])"
    )
    sourced = _run_python(code, doubles.subprocess_env(LD_LIBRARY_PATH=str(tmp_path / "lib64")))
    assert sourced.returncode == 0, sourced.stderr
    # Autoloaded through the torch.backends entry point; _autoload restored the switch torch_npu had zeroed.
    assert sourced.stdout.split() == ["torch_npu.npu", "npu:1", "1"]
