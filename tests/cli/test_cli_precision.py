"""`trinity run` shows the model dtype and attention kernel the backend decides, and refuses a dtype it cannot do."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli._runner import Runner
from tests.cli.test_cli_run import GOOD, write
from tests.fakedist import add_backend

#: A backend (computing on the CPU) whose device has bfloat16 units only.
HALF_ONLY = '''
from trinity.device import AttentionChoice, DtypeSupport


@hookimpl
def trinity_supported_dtypes():
    return DtypeSupport(("bfloat16",), unsupported={"float32": "the halfdev matrix units have no float32 path"})


@hookimpl
def trinity_attention_implementation(dtype):
    return AttentionChoice("eager", "halfdev has no fused attention")
'''


@pytest.fixture
def halfdev(site: Path) -> Path:
    add_backend(site, "halfdev", priority=1, extra=HALF_ONLY)
    return site


def test_dry_run_shows_the_resolved_dtype_and_attention(trinity: Runner, tmp_path: Path) -> None:
    result = trinity("run", "--config", str(write(tmp_path, GOOD)), "--dry-run", timeout=60)
    assert result.returncode == 0, result.stderr
    assert ("dtype float32 (auto: the okdev backend's preferred; the device computes in float32, bfloat16, "
            "float16)") in result.stdout
    assert "attention sdpa (torch scaled_dot_product_attention)" in result.stdout


def test_dry_run_for_npu_resolves_auto_to_bfloat16(trinity: Runner, tmp_path: Path) -> None:
    config = write(tmp_path, GOOD + "cluster:\n  node_num: 1\n  gpu_per_node: 2\n")
    result = trinity("run", "--config", str(config), "--dry-run", "--device", "npu", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "dtype bfloat16 (auto: the npu backend's preferred" in result.stdout
    assert "attention sdpa (torch_npu's fused scaled_dot_product_attention; flash_attn is CUDA-only)" in result.stdout


def test_an_explicit_dtype_is_shown_as_configured(trinity: Runner, tmp_path: Path) -> None:
    config = write(tmp_path, GOOD + "explorer:\n  rollout_model:\n    dtype: bf16\n")
    result = trinity("run", "--config", str(config), "--dry-run", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "dtype bfloat16 (as configured;" in result.stdout


@pytest.mark.usefixtures("halfdev")
def test_a_dtype_the_device_cannot_do_is_refused_in_the_dry_run(trinity: Runner, tmp_path: Path) -> None:
    config = write(tmp_path, GOOD + "explorer:\n  rollout_model:\n    dtype: float32\n")
    result = trinity("run", "--config", str(config), "--dry-run", "--device", "halfdev", timeout=60)
    assert result.returncode == 2
    assert result.error_line() == (
        f"trinity: error: {config}: explorer.rollout_model.dtype: dtype float32 is not supported on the halfdev "
        "backend: the halfdev matrix units have no float32 path; use one of bfloat16 (or auto: bfloat16)"
    )
    result = trinity("run", "--config", str(write(tmp_path, GOOD)), "--dry-run", "--device", "halfdev", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "dtype bfloat16 (auto: the halfdev backend's preferred" in result.stdout
    assert "attention eager (halfdev has no fused attention)" in result.stdout


@pytest.mark.usefixtures("halfdev")
def test_a_run_is_refused_before_ray_is_contacted(trinity: Runner, tmp_path: Path) -> None:
    # nothing answers at the Ray address: reaching Ray would end the run with another error
    config = write(tmp_path, GOOD + "cluster:\n  device: halfdev\n  ray_address: 127.0.0.1:1\n"
                   "explorer:\n  rollout_model:\n    dtype: fp32\ncheckpoint_root_dir: ROOT/ckpt\n")
    result = trinity("run", "--config", str(config), timeout=120)
    assert result.returncode == 2
    assert "explorer.rollout_model.dtype: dtype float32 is not supported on the halfdev backend" in result.error_line()
    assert not (tmp_path / "ckpt").exists(), "a refused run leaves no run folder (nor its lock files) behind"


#: A backend (computing on the CPU) whose device cannot hold the trainer's tensors in host memory.
NO_OFFLOAD = '''
from trinity.device import OffloadSupport


@hookimpl
def trinity_offload_support():
    return OffloadSupport(False, reason="pinned host memory is not mapped into the pindev address space")
'''

OFFLOAD = ("trainer:\n  trainer_config:\n    actor_rollout_ref:\n      actor:\n        fsdp_config:\n"
           "          param_offload: true\n      ref:\n        fsdp_config:\n          optimizer_offload: true\n")


def test_offload_is_shown_with_the_backends_answer(trinity: Runner, tmp_path: Path) -> None:
    result = trinity("run", "--config", str(write(tmp_path, GOOD + OFFLOAD)), "--dry-run", timeout=60)
    assert result.returncode == 0, result.stderr
    assert ("offload: actor parameters, gradients and optimizer state (the device is the host: parameters and "
            "optimizer state stay where they are)") in result.stdout


def test_offload_a_backend_cannot_do_is_refused_with_its_reason(trinity: Runner, tmp_path: Path, site: Path) -> None:
    add_backend(site, "pindev", priority=1, extra=NO_OFFLOAD)
    config = write(tmp_path, GOOD + OFFLOAD)
    result = trinity("run", "--config", str(config), "--dry-run", "--device", "pindev", timeout=60)
    assert result.returncode == 2
    assert result.error_line() == (
        f"trinity: error: {config}: trainer.trainer_config: the actor ask(s) for offload (fsdp_config.param_offload "
        "/ optimizer_offload / offload_policy), but the pindev backend cannot: pinned host memory is not mapped "
        "into the pindev address space; set those keys false"
    )
