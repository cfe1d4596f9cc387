"""The trainer's models: loading, the critic's value head, FSDP2 sharding and torch.compile policy.

Nothing here names a device: the device type, the mesh and compile support
come from :mod:`trinity.device`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import nn

import trinity.device

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class TorchCompileUnsupportedError(ValueError):
    """``trainer.use_torch_compile: true`` on a device backend that cannot compile."""


def torch_dtype(name: str) -> torch.dtype:
    """Return the torch dtype of a ``model.dtype`` config value; raises ValueError for an unknown one."""
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"model.dtype: unknown dtype {name!r} (one of {', '.join(_DTYPES)})") from None


def resolve_torch_compile(requested: bool | None) -> bool:
    """Return whether to use ``torch.compile``: the backend's support when ``requested`` is None.

    An explicit ``True`` on a backend that cannot compile raises
    :class:`TorchCompileUnsupportedError` with the backend's reason.
    """
    support = trinity.device.torch_compile_support()
    if requested is None:
        return support.supported
    if requested and not support.supported:
        name = trinity.device.current_selection().name
        reason = support.reason or "no reason given"
        raise TorchCompileUnsupportedError(
            f"trainer.use_torch_compile: true, but the {name!r} device backend cannot compile ({reason}); "
            "set it to false, or leave it unset to follow the backend"
        )
    return requested


def load_causal_lm(path: str, *, trust_remote_code: bool = False,
                   attn_implementation: str | dict[str, str] | None = None) -> nn.Module:
    """Load a Hugging Face causal LM in float32 (the optimizer's master weights) on the CPU.

    A vision-language model (a config with a vision tower) loads as one, images and all.
    ``attn_implementation`` is transformers' attention kernel (``sdpa``, ``flash_attention_2``, ...);
    None leaves the choice to transformers.
    """
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from trinity.common.models.pretrained import load_pretrained
    from trinity.common.models.vision import folder_is_vision_language

    auto = AutoModelForImageTextToText if folder_is_vision_language(path) else AutoModelForCausalLM
    model = load_pretrained(auto.from_pretrained, path, dtype=torch.float32,
                            trust_remote_code=trust_remote_code, attn_implementation=attn_implementation)
    model.config.use_cache = False
    return model  # type: ignore[no-any-return]


class ValueModel(nn.Module):
    """A critic: the policy's architecture without the LM head, plus a linear value head per position."""

    def __init__(self, backbone: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.normal_(self.value_head.weight, std=1.0 / (hidden_size + 1) ** 0.5)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **images: torch.Tensor) -> torch.Tensor:
        """Return ``[B, T]`` values (float32); ``images``: a vision-language backbone's image inputs."""
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                               **images).last_hidden_state
        values: torch.Tensor = self.value_head(hidden.to(self.value_head.weight.dtype))
        return values.squeeze(-1).float()


def load_value_model(path: str, *, trust_remote_code: bool = False,
                     attn_implementation: str | None = None) -> ValueModel:
    """Return a :class:`ValueModel` with the backbone of the causal LM at ``path`` and a fresh value head.

    ``attn_implementation`` as for :func:`load_causal_lm`.
    """
    from transformers import AutoModel

    from trinity.common.models.pretrained import load_pretrained

    backbone = load_pretrained(AutoModel.from_pretrained, path, where="model.critic_model_path", dtype=torch.float32,
                               trust_remote_code=trust_remote_code, attn_implementation=attn_implementation)
    config = backbone.config
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return ValueModel(backbone, int(text_config.hidden_size))


def _block_classes(model: nn.Module) -> set[str]:
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    return names


def shard_model(model: nn.Module, mesh: Any, compute_dtype: torch.dtype, **options: Any) -> nn.Module:
    """Apply FSDP2 ``fully_shard`` to each transformer block, then to the root; return the model.

    Blocks are the module classes the model lists in ``_no_split_modules``.
    With a compute dtype other than float32, parameters are gathered in that
    dtype and gradients reduced in float32 (the sharded weights stay float32).
    ``options`` go to every ``fully_shard`` call (``offload_policy``).
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kwargs: dict[str, Any] = {"mesh": mesh, **options}
    if compute_dtype != torch.float32:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    blocks = _block_classes(model)
    for module in model.modules():
        if type(module).__name__ in blocks:
            fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    return model


def device_mesh(world_size: int) -> Any:
    """Return the 1-D device mesh of the trainer ranks on the selected device type."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(trinity.device.get_device_type(), (world_size,))


def logprobs_and_entropy(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Return ``[B, T-1]`` token log-probs (and entropies) of ``logits / temperature``."""
    from trinity.algorithm import entropy_from_logits, token_logprobs

    logprobs = token_logprobs(logits, input_ids, temperature=temperature)
    if not with_entropy:
        return logprobs, None
    scaled = logits[:, :-1]
    if temperature != 1.0:
        scaled = scaled / temperature
    return logprobs, entropy_from_logits(scaled)


def first_response_column(response_mask: torch.Tensor) -> int:
    """Return the first column of ``[B, T-1]`` ``response_mask`` any row trains on (0 when none does)."""
    columns = torch.nonzero(response_mask.any(dim=0))
    return int(columns[0, 0]) if columns.numel() else 0


class PackedLayout(NamedTuple):
    """Where each row of a right-padded ``[B, T]`` micro-batch lands when its real tokens run end to end.

    ``real``: the ``[B, T]`` real-token mask. ``positions``: ``[N]`` position ids
    restarting at 0 per row. ``predicted``: the ``[B, T-1]`` mask of predictions
    that exist (of a real next token). ``source``: for each of those, in row-major
    order, its index among the packed sequence's predictions.
    """

    real: torch.Tensor
    positions: torch.Tensor
    predicted: torch.Tensor
    source: torch.Tensor


def packed_layout(attention_mask: torch.Tensor) -> PackedLayout:
    """Return the :class:`PackedLayout` of right-padded rows with ``attention_mask``."""
    real = attention_mask.bool()
    lengths = real.sum(dim=1)
    starts = lengths.cumsum(0) - lengths
    device = attention_mask.device
    positions = torch.arange(int(lengths.sum()), device=device) - torch.repeat_interleave(starts, lengths)
    # row i's prediction t (of token t + 1, t < length - 1) is packed prediction starts[i] + t
    predicted = real[:, 1:]
    source = (starts.unsqueeze(1) + torch.arange(real.shape[1] - 1, device=device))[predicted]
    return PackedLayout(real, positions, predicted, source)


def accepts_logits_to_keep(model: nn.Module) -> bool:
    """Whether ``model``'s forward takes ``logits_to_keep`` (compute the LM head on the last positions only)."""
    cls = type(model)
    known = _TAKES_LOGITS_TO_KEEP.get(cls)
    if known is None:
        import inspect

        try:
            known = "logits_to_keep" in inspect.signature(cls.forward).parameters
        except (TypeError, ValueError):
            known = False
        _TAKES_LOGITS_TO_KEEP[cls] = known
    return known


_TAKES_LOGITS_TO_KEEP: dict[type, bool] = {}


def fused_kernels_for(params: list[nn.Parameter]) -> bool:
    """Whether torch has fused AdamW kernels for ``params`` (all floating point, on devices it supports).

    The fused AdamW step is one kernel over every tensor instead of a dozen
    per tensor: on the CPU about 4x faster for small models. A device must be
    one torch lists for fused optimizers *and* have the ``_fused_adamw_``
    kernel registered in this process (an out-of-tree device plugin may
    be listed without providing it); otherwise the default implementation is kept.
    """
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    supported = set(_get_fused_kernels_supported_devices())
    devices = {p.device.type for p in params}
    return (
        bool(params)
        and all(torch.is_floating_point(p) for p in params)
        and devices <= supported
        and all(_has_fused_adamw_kernel(device) for device in devices)
    )


def _has_fused_adamw_kernel(device_type: str) -> bool:
    key = "PrivateUse1" if device_type == torch._C._get_privateuse1_backend_name() else device_type.upper()
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key("aten::_fused_adamw_", key))
    except RuntimeError:  # a dispatch key torch does not know
        return False
