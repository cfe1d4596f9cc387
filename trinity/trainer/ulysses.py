"""Ulysses sequence parallelism: the ranks of a group share one packed sequence, each running a slice of it.

A micro-batch's rows run packed, end to end in one sequence of ``N`` tokens
(padded to a multiple of the group's size ``P``). Each rank of the group runs
the model on its ``N / P`` consecutive tokens: embeddings, MLPs, norms and the
LM head are per token and need nothing else. Attention needs every token of
a row. Before it, an all-to-all swaps the split: each rank then holds the
whole sequence for ``1 / P`` of the attention heads. It runs causal attention
row by row, and a second all-to-all swaps back. The collectives are the
trainer's process group's, so the device backend's collective carries them
(gloo on the CPU, NCCL or HCCL on accelerators).

The attention is a transformers attention function registered under
:data:`ATTENTION_NAME`; a model loaded with that ``attn_implementation``
reads the group and the rows' boundaries from :func:`sharding`'s context,
set around each forward. Token log-probs computed on a slice come back whole
through :func:`gather_sequence`, whose backward keeps each rank's own slice
of the gradient, so the loss code sees whole rows and the gradients equal
those of one rank running the whole sequence.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

#: The ``attn_implementation`` name of sequence-parallel attention.
ATTENTION_NAME = "trinity_ulysses"


class UlyssesError(RuntimeError):
    """Sequence parallelism cannot run this model or forward; the message says why."""


@dataclass(frozen=True)
class SequenceShard:
    """One forward's sequence split: the group, this rank's place in it, and the packed rows' boundaries."""

    #: The process group of the ranks sharing the sequence.
    group: Any
    #: Ranks in the group, and this rank's index among them.
    size: int
    rank: int
    #: ``(start, end)`` of each packed row in the padded sequence (the padding is a row of its own).
    segments: tuple[tuple[int, int], ...]

    @property
    def total(self) -> int:
        """Tokens of the padded sequence."""
        return self.segments[-1][1] if self.segments else 0

    @property
    def chunk(self) -> int:
        """Tokens each rank runs."""
        return self.total // self.size

    def local(self) -> slice:
        """This rank's tokens of the padded sequence."""
        return slice(self.rank * self.chunk, (self.rank + 1) * self.chunk)


#: The split of the forward in flight. A process-wide value, not a context variable: a backward that recomputes
#: activations (gradient checkpointing) runs the forward again, and on an accelerator it does so on autograd's
#: own thread.
_current: list[SequenceShard | None] = [None]


@contextlib.contextmanager
def sharding(shard: SequenceShard) -> Iterator[None]:
    """Run model forwards inside the block on ``shard``'s split; hold it through the backward too when that
    recomputes activations (gradient checkpointing)."""
    previous, _current[0] = _current[0], shard
    try:
        yield
    finally:
        _current[0] = previous


def padded_segments(lengths: Sequence[int], size: int) -> tuple[tuple[int, int], ...]:
    """Return the rows' ``(start, end)`` in a packed sequence padded to a multiple of ``size`` (padding last)."""
    segments = []
    start = 0
    for length in lengths:
        if length > 0:
            segments.append((start, start + int(length)))
            start += int(length)
    padded = -(-start // size) * size
    if padded > start:
        segments.append((start, padded))
    return tuple(segments)


def _all_to_all(tensor: torch.Tensor, group: Any, size: int, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    import torch.distributed as dist

    sending = torch.stack(torch.tensor_split(tensor, size, dim=scatter_dim)).contiguous()
    received = torch.empty_like(sending)
    dist.all_to_all_single(received, sending, group=group)  # piece i goes to rank i; received[j] is rank j's
    return torch.cat(received.unbind(0), dim=gather_dim)


class _SwapSplit(torch.autograd.Function):
    """All-to-all from a split along ``scatter_dim``'s complement to one along ``scatter_dim``; backward swaps back."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: Any, size: int, scatter_dim: int,  # noqa: PLR0917
                gather_dim: int) -> torch.Tensor:
        ctx.group, ctx.size, ctx.scatter_dim, ctx.gather_dim = group, size, scatter_dim, gather_dim
        return _all_to_all(tensor, group, size, scatter_dim, gather_dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        return _all_to_all(grad, ctx.group, ctx.size, ctx.gather_dim, ctx.scatter_dim), None, None, None, None


def swap_split(tensor: torch.Tensor, shard: SequenceShard, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    """Split ``tensor`` along ``scatter_dim`` across the group and join the pieces received along ``gather_dim``."""
    return _SwapSplit.apply(tensor, shard.group, shard.size, scatter_dim, gather_dim)  # type: ignore[no-any-return,no-untyped-call]


class _GatherKeepOwn(torch.autograd.Function):
    """All-gather along dim 0; backward keeps this rank's slice (every rank computes the same loss from the whole)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: Any, size: int, rank: int) -> torch.Tensor:
        import torch.distributed as dist

        ctx.rank, ctx.rows = rank, tensor.shape[0]
        parts = [torch.empty_like(tensor) for _ in range(size)]
        dist.all_gather(parts, tensor.contiguous(), group=group)
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        start = ctx.rank * ctx.rows
        return grad[start:start + ctx.rows], None, None, None


def gather_sequence(tensor: torch.Tensor, shard: SequenceShard) -> torch.Tensor:
    """The whole sequence's values from each rank's slice (dim 0); the gradient flows back to the own slice only."""
    return _GatherKeepOwn.apply(tensor, shard.group, shard.size, shard.rank)  # type: ignore[no-any-return,no-untyped-call]


def _repeat_heads(tensor: torch.Tensor, times: int) -> torch.Tensor:
    return tensor if times == 1 else tensor.repeat_interleave(times, dim=1)


def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,  # noqa: PLR0917
              attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
              **_: Any) -> tuple[torch.Tensor, None]:
    """Sequence-parallel causal attention of the packed rows (transformers' attention-function signature).

    ``query`` is ``[1, heads, N / P, d]`` (this rank's tokens), ``key`` and
    ``value`` ``[1, kv_heads, N / P, d]``. Returns ``[1, N / P, heads, d]``.
    """
    shard = _current[0]
    if shard is None:
        raise UlyssesError("a sequence-parallel model ran outside trinity.trainer.ulysses.sharding(...)")
    heads, kv_heads = query.shape[1], key.shape[1]
    if heads % shard.size:
        raise UlyssesError(f"{heads} attention heads do not split over {shard.size} sequence-parallel ranks; "
                           "set trainer.ulysses_sequence_parallel_size to a divisor of the head count")
    if kv_heads % shard.size:  # grouped-query attention with fewer key/value heads than ranks: share them out
        key, value = _repeat_heads(key, heads // kv_heads), _repeat_heads(value, heads // kv_heads)
    q, k, v = (swap_split(t, shard, scatter_dim=1, gather_dim=2) for t in (query, key, value))
    grouped = q.shape[1] != k.shape[1]
    outputs = [
        torch.nn.functional.scaled_dot_product_attention(
            q[:, :, start:end], k[:, :, start:end], v[:, :, start:end], dropout_p=dropout, scale=scaling,
            is_causal=True, enable_gqa=grouped)
        for start, end in shard.segments
    ]
    whole = torch.cat(outputs, dim=2)  # [1, heads / P, N, d]
    mine = swap_split(whole, shard, scatter_dim=2, gather_dim=1)  # [1, heads, N / P, d]
    return mine.transpose(1, 2).contiguous(), None


def _no_mask(*_: Any, **__: Any) -> None:
    return None


def register() -> None:
    """Register :func:`attention` (and its mask function: none, rows are kept apart by their boundaries)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION_NAME, attention)
    AttentionMaskInterface.register(ATTENTION_NAME, _no_mask)


def attention_implementation(model_path: str, base: str | None) -> str | dict[str, str]:
    """The ``attn_implementation`` of a sequence-parallel model: :func:`attention` for its language model.

    A vision-language model's vision tower keeps ``base`` (``sdpa`` when None):
    it embeds whole images on every rank, unsplit.
    """
    from trinity.common.models.vision import folder_is_vision_language

    if not folder_is_vision_language(model_path):
        return ATTENTION_NAME
    plain = base or "sdpa"
    return {"": plain, "text_config": ATTENTION_NAME, "vision_config": plain}


@contextlib.contextmanager
def language_model_slice(model: torch.nn.Module, part: slice) -> Iterator[None]:
    """Inside the block, ``model``'s language model runs only ``part`` of the sequence it is given.

    A vision-language model embeds the whole packed sequence, images
    included, on every rank; the language model (``get_decoder()``) then takes
    this rank's slice of the embeddings and of the position ids (last
    dimension), so images that straddle two ranks' slices embed whole.
    """
    get_decoder = getattr(model, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else None
    if not isinstance(decoder, torch.nn.Module):
        raise UlyssesError(f"{type(model).__name__} has no get_decoder(): its language model cannot run a slice")

    def take_slice(_module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
                   ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if kwargs.get("inputs_embeds") is not None:
            kwargs["inputs_embeds"] = kwargs["inputs_embeds"][:, part]
        if kwargs.get("position_ids") is not None:
            kwargs["position_ids"] = kwargs["position_ids"][..., part]
        return args, kwargs

    handle = decoder.register_forward_pre_hook(take_slice, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()
