"""The static facts of the NPU backend (pure data, safe on any machine)."""

from __future__ import annotations

from trinity.device.spec import SPEC_VERSION
from trinity.device.types import AttentionChoice, BackendInfo, CompileSupport, DtypeSupport
from trinity_backend_npu.cann import VISIBLE_DEVICES_VAR

#: Prefixes of the variables an NPU worker inherits from the driver: CANN
#: runtime and logging (ASCEND_), the collective library (HCCL_, LCCL_), ACL
#: runtime options (ACL_), NNAL's ATB and its ops library (ATB_, ASDOPS_),
#: torch_npu's allocator and options (PYTORCH_NPU_) and vllm-ascend (VLLM_ASCEND_).
WORKER_ENV_PREFIXES = (
    "ASCEND_",
    "HCCL_",
    "LCCL_",
    "ACL_",
    "ATB_",
    "ASDOPS_",
    "PYTORCH_NPU_",
    "VLLM_ASCEND_",
)

INFO = BackendInfo(
    name="npu",
    device_type="npu",
    priority=100,
    spec_version=SPEC_VERSION,
    collective_backend="hccl",
    ray_resource_key="NPU",
    visible_devices_env=VISIBLE_DEVICES_VAR,
    worker_env_prefixes=WORKER_ENV_PREFIXES,
    description="Huawei Ascend NPU (910B and newer) through torch_npu and CANN; collectives over HCCL",
)

#: torch.compile is refused on NPU, and this is why.
COMPILE_SUPPORT = CompileSupport(
    supported=False,
    reason=(
        "torch.compile is not supported on Ascend NPU: torch inductor has no NPU driver; "
        "set trainer.use_torch_compile: false"
    ),
)

#: What Ascend 910B and newer compute models in: bfloat16 (first, as upstream Trinity-RFT defaults to it),
#: float16 and float32 on the cube and vector units; their matmul kernels have no float64.
DTYPE_SUPPORT = DtypeSupport(supported=("bfloat16", "float16", "float32"))

#: FlashAttention-2 (flash_attn) is CUDA-only; torch_npu runs torch's scaled_dot_product_attention on its
#: fused attention kernel on Ascend 910B and newer, in each of the dtypes above.
ATTENTION = AttentionChoice("sdpa", "torch_npu's fused scaled_dot_product_attention; flash_attn is CUDA-only")
