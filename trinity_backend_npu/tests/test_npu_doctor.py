"""Each doctor check, both ways; the doctor never raises and imports neither torch nor torch_npu."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from trinity.device.loader import load_plugin
from trinity_backend_npu import doctor, plugin


def _versions(monkeypatch: pytest.MonkeyPatch, **found: str | None) -> None:
    known = {"torch": "2.13.0+cpu", "torch-npu": "2.13.0", "vllm-ascend": None, **found}
    monkeypatch.setattr(doctor, "installed_version", known.get)


# --- devices ----------------------------------------------------------------------------------


def test_devices_ok(npu_machine: Any) -> None:
    check = doctor.check_devices(os.environ)
    assert check.status == "ok"
    assert "16 device file(s): davinci0, davinci1" in check.detail and "davinci15" in check.detail
    assert check.facts["visible"] == "16"


def test_devices_fail(npu_machine: Any) -> None:
    npu_machine.set_device_files(0)
    check = doctor.check_devices(os.environ)
    assert check.status == "fail"
    assert "--device" in check.fix and "npu-smi info" in check.fix


def test_devices_masked(npu_machine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "14,15")
    check = doctor.check_devices(os.environ)
    assert check.status == "ok" and "2 visible through ASCEND_RT_VISIBLE_DEVICES=14,15" in check.detail
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "")
    hidden = doctor.check_devices(os.environ)
    assert hidden.status == "warn" and "hides all of them" in hidden.detail and hidden.fix
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "x")
    assert doctor.check_devices(os.environ).status == "fail"


# --- driver -----------------------------------------------------------------------------------


def test_driver_version_read(npu_machine: Any) -> None:
    check = doctor.check_driver()
    assert check.status == "ok"
    assert check.facts["driver"] == "24.1.rc3"
    assert str(npu_machine.driver_version_file) in check.detail


def test_driver_missing(npu_machine: Any) -> None:
    npu_machine.driver_version_file.unlink()
    check = doctor.check_driver()
    assert check.status == "fail" and "npu-driver" in check.fix


def test_driver_file_without_version(npu_machine: Any) -> None:
    npu_machine.driver_version_file.write_text("ascendhal_version=7.35.23\n", encoding="utf-8")
    check = doctor.check_driver()
    assert check.status == "warn" and check.fix


def test_driver_package_version_is_enough(npu_machine: Any) -> None:
    npu_machine.driver_version_file.write_text("package_version=25.0.rc1\n", encoding="utf-8")
    assert doctor.check_driver().facts["driver"] == "25.0.rc1"


# --- CANN toolkit -----------------------------------------------------------------------------


def test_cann_sourced(npu_machine: Any) -> None:
    check = doctor.check_cann(os.environ)
    assert check.status == "ok"
    assert check.facts["libhccl.so"] == str(npu_machine.toolkit / "lib64" / "libhccl.so")


def test_cann_not_sourced(npu_machine: Any) -> None:
    npu_machine.unsource_cann()
    check = doctor.check_cann(os.environ)
    assert check.status == "fail"
    assert "CANN environment not set" in check.detail
    assert check.fix.startswith("source /usr/local/Ascend/ascend-toolkit/set_env.sh")


def test_cann_home_missing(npu_machine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_HOME_PATH", str(npu_machine.toolkit / "gone"))
    check = doctor.check_cann(os.environ)
    assert check.status == "fail" and "does not exist" in check.detail


def test_cann_home_set_but_libhccl_not_on_library_path(npu_machine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/lib")
    check = doctor.check_cann(os.environ)
    assert check.status == "fail"
    assert "libhccl.so is not on LD_LIBRARY_PATH" in check.detail
    assert f"it is in {npu_machine.toolkit / 'lib64'}" in check.detail


def test_cann_without_opp_path(npu_machine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASCEND_OPP_PATH")
    check = doctor.check_cann(os.environ)
    assert check.status == "fail" and "ASCEND_OPP_PATH is not set" in check.detail


# --- NNAL / ATB --------------------------------------------------------------------------------


def test_atb_found(npu_machine: Any) -> None:
    check = doctor.check_atb(os.environ)
    assert check.status == "ok" and check.facts["libatb"] == str(npu_machine.atb_home / "lib" / "libatb.so")


def test_atb_missing_without_vllm_ascend_is_a_warning(npu_machine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    npu_machine.unsource_atb()
    monkeypatch.setattr(doctor, "find_spec", lambda name: None)
    check = doctor.check_atb(os.environ)
    assert check.status == "warn"
    assert check.fix.endswith("source /usr/local/Ascend/nnal/atb/set_env.sh")


def test_atb_missing_with_vllm_ascend_fails(npu_machine: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    npu_machine.unsource_atb()
    (tmp_path / "site" / "vllm_ascend").mkdir(parents=True)
    (tmp_path / "site" / "vllm_ascend" / "__init__.py").write_text("", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    check = doctor.check_atb(os.environ)
    assert check.status == "fail" and "vllm-ascend is installed and needs it" in check.detail


# --- torch / torch_npu versions ---------------------------------------------------------------


def test_versions_match_with_the_double_installed(npu_runtime: Any) -> None:
    # Real metadata: the double's torch_npu-2.13.0.dist-info against the venv's torch 2.13.0+cpu.
    check = doctor.check_torch_npu_version()
    assert check.status == "ok", check.detail
    assert check.facts["torch_npu"] == "2.13.0" and check.facts["torch"].startswith("2.13.0")


@pytest.mark.parametrize(("npu", "torch"), [("2.5.1.post1", "2.5.1"), ("2.1.0.post12", "2.1.0+cpu")])
def test_versions_match_across_local_and_post_tags(monkeypatch: pytest.MonkeyPatch, npu: str, torch: str) -> None:
    _versions(monkeypatch, **{"torch-npu": npu, "torch": torch})
    assert doctor.check_torch_npu_version().status == "ok"


def test_versions_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    _versions(monkeypatch, **{"torch-npu": "2.10.0", "torch": "2.13.0+cpu"})
    check = doctor.check_torch_npu_version()
    assert check.status == "fail"
    assert "torch-npu 2.10.0 does not match torch 2.13.0+cpu" in check.detail
    assert check.fix.startswith("pip install torch==2.10.0")


def test_torch_npu_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    _versions(monkeypatch, **{"torch-npu": None})
    check = doctor.check_torch_npu_version()
    assert check.status == "fail" and "pip install 'trinity-backend-npu[ascend]'" in check.fix


def test_release_parsing() -> None:
    assert doctor.release("2.13.0+cpu") == (2, 13, 0)
    assert doctor.release("2.6.0rc1") == (2, 6, 0)
    assert doctor.release("2.7") == (2, 7, 0)
    assert doctor.release("nightly") is None


# --- vllm-ascend -------------------------------------------------------------------------------


def test_vllm_ascend_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "vllm_ascend").mkdir()
    (tmp_path / "vllm_ascend" / "__init__.py").write_text("", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    check = doctor.check_vllm_ascend()
    assert check.status == "ok"
    assert "vllm_ascend" not in sys.modules


def test_vllm_ascend_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "find_spec", lambda name: None)
    check = doctor.check_vllm_ascend()
    assert check.status == "warn" and "vllm-ascend" in check.fix


# --- the autoload trap -------------------------------------------------------------------------


def test_autoload_trap_fails_with_both_fixes(npu_machine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _versions(monkeypatch)
    npu_machine.unsource_cann()
    check = doctor.check_autoload(os.environ)
    assert check.status == "fail"
    assert "libhccl.so: cannot open shared object file" in check.detail
    assert "source /usr/local/Ascend/ascend-toolkit/set_env.sh" in check.fix
    assert "export TORCH_DEVICE_BACKEND_AUTOLOAD=0" in check.fix


def test_autoload_disabled_is_only_a_warning(npu_machine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _versions(monkeypatch)
    npu_machine.unsource_cann()
    monkeypatch.setenv("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    check = doctor.check_autoload(os.environ)
    assert check.status == "warn" and check.fix.startswith("source ")


def test_autoload_with_cann_sourced_is_fine(npu_machine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _versions(monkeypatch)
    assert doctor.check_autoload(os.environ).status == "ok"


def test_autoload_without_torch_npu_is_fine(npu_machine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _versions(monkeypatch, **{"torch-npu": None})
    npu_machine.unsource_cann()
    check = doctor.check_autoload(os.environ)
    assert check.status == "ok" and "not installed" in check.detail


# --- the doctor as a whole ---------------------------------------------------------------------


def test_all_checks_pass_on_a_complete_host(npu_runtime: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "vllm_ascend").mkdir()
    (tmp_path / "vllm_ascend" / "__init__.py").write_text("", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    checks = load_plugin(plugin, expected_name="npu").doctor()
    assert [(check.name, check.status) for check in checks] == [
        ("NPU devices", "ok"),
        ("Ascend driver", "ok"),
        ("CANN toolkit", "ok"),
        ("NNAL ATB", "ok"),
        ("torch_npu", "ok"),
        ("vllm-ascend", "ok"),
        ("import torch (torch_npu autoload)", "ok"),
        ("torch", "ok"),  # the core's own check
    ]


def test_a_raising_check_becomes_a_fail(npu_machine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise PermissionError("denied")

    monkeypatch.setattr(doctor, "check_driver", broken)
    checks = doctor.run_checks()
    driver = next(check for check in checks if check.name == "Ascend driver")
    assert driver.status == "fail" and "PermissionError: denied" in driver.detail and driver.fix
    assert len(checks) == 7


def test_every_fail_has_a_fix_on_a_bare_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor.probe, "DEVICE_DIR", tmp_path)
    monkeypatch.setattr(doctor, "DRIVER_VERSION_FILE", tmp_path / "version.info")
    checks = doctor.run_checks(environ={})
    assert {check.status for check in checks} >= {"fail"}
    assert all(check.fix for check in checks if check.status != "ok")


def test_doctor_imports_neither_torch_nor_torch_npu(doubles: Any) -> None:
    code = textwrap.dedent(
        """
        import json, sys
        from trinity_backend_npu import doctor
        checks = doctor.run_checks()
        print(json.dumps([len(checks), sorted(m for m in ("torch", "torch_npu") if m in sys.modules)]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True, text=True, check=False, env=doubles.subprocess_env(), timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [7, []]
