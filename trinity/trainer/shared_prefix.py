"""Shared prompt prefixes in the trainer's forward pass: a group's prompt runs once per micro-batch, not once per row.

The rows of a GRPO group share their prompt. Under causal attention a token's
hidden states depend only on the tokens before it, so the prefix that rows
share (their tokens up to the first trained one) has the same hidden states in
each of them. The trainer runs each distinct prefix once and lets every row's
remaining tokens (its *suffix*) attend to that one copy.

The micro-batch becomes one packed sequence, without padding: every distinct
prefix, then every row's suffix. Position ids restart at 0 for each prefix and
each suffix continues its prefix's numbering. Attention over the packed
sequence is :func:`shared_prefix_attention`, registered with transformers'
``AttentionInterface``: a prefix attends causally within itself, a suffix to
its prefix's keys and to its own earlier tokens. Each of the two is one
``scaled_dot_product_attention`` call over padded blocks, so attention costs
what the padded rows' would, while the linear layers (most of the arithmetic)
run on fewer tokens.

Log-probs, losses and gradients equal the padded forward's up to float
rounding: a prefix's hidden states receive the sum of the gradients of the
rows that share it.

Usage (the trainer)::

    why_not = enable(model)               # None, or why this model cannot (it keeps the padded forward)
    layout = shared_prefix_layout(input_ids, attention_mask, response_mask)   # None: no two rows share
    logits = model(input_ids=layout.ids[None], position_ids=layout.positions[None],
                   logits_to_keep=layout.keep, use_cache=False, **{LAYOUT_KEY: layout}).logits
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from torch import nn

#: The keyword that carries the layout from the model's forward to its attention layers.
LAYOUT_KEY = "trinity_shared_prefix"
#: The attention implementation :func:`enable` gives a model (sdpa, plus the shared-prefix layout when one is passed).
ATTENTION_NAME = "trinity_shared_prefix_sdpa"

_registered = False


class SharedPrefixLayout:
    """Where each token of a right-padded ``[B, T]`` micro-batch runs in the packed sequence.

    Attributes (``N`` packed tokens, ``G`` distinct prefixes of at most ``Lp``
    tokens, suffixes of at most ``Ls``):

    * ``ids``, ``positions``: ``[N]`` packed token ids and position ids;
    * ``prefix_index`` / ``prefix_valid``: ``[G, Lp]`` packed index of each prefix token (padding repeats a valid one);
    * ``suffix_index`` / ``suffix_valid``: ``[B, Ls]``, the same for each row's suffix;
    * ``row_group``: ``[B]`` the prefix each row continues;
    * ``suffix_mask``: ``[B, 1, Ls, Lp + Ls]`` which keys each suffix token attends to;
    * ``predicted``: ``[B, T-1]`` the predictions computed (from each row's last prefix token on);
    * ``keep``: sorted packed positions whose logits are needed;
    * ``source``: for each predicted entry (row-major), its row in the kept logits;
    * ``targets``: for each predicted entry, the token it predicts;
    * ``calls``: attention calls that used this layout (every attention layer must).
    """

    ids: torch.Tensor
    positions: torch.Tensor
    prefix_index: torch.Tensor
    prefix_valid: torch.Tensor
    suffix_index: torch.Tensor
    suffix_valid: torch.Tensor
    row_group: torch.Tensor
    suffix_mask: torch.Tensor
    predicted: torch.Tensor
    keep: torch.Tensor
    source: torch.Tensor
    targets: torch.Tensor

    #: The tensor attributes, in the order above.
    TENSORS = ("ids", "positions", "prefix_index", "prefix_valid", "suffix_index", "suffix_valid", "row_group",
               "suffix_mask", "predicted", "keep", "source", "targets")

    def __init__(self, tensors: dict[str, torch.Tensor], rows: int, groups: int) -> None:
        for name in self.TENSORS:
            setattr(self, name, tensors[name])
        self.rows = rows
        self.groups = groups
        self.calls = 0

    def to(self, device: torch.device | str) -> SharedPrefixLayout:
        """Return the layout with its tensors on ``device``."""
        tensors = {name: getattr(self, name).to(device) for name in self.TENSORS}
        return SharedPrefixLayout(tensors, self.rows, self.groups)

    @property
    def tokens(self) -> int:
        """Packed tokens (the padded rows' real tokens less the prefix copies run once)."""
        return int(self.ids.shape[0])


def shared_prefix_layout(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         response_mask: torch.Tensor) -> SharedPrefixLayout | None:
    """Return the packed layout of right-padded rows, or None when no two rows share their prefix.

    A row's prefix is its tokens up to its first trained one (``response_mask``,
    ``[B, T-1]``, marks trained predictions); a row that trains none keeps only
    its last token as suffix. Rows share a prefix when its tokens are equal.
    """
    rows, width = input_ids.shape
    ids = input_ids.cpu()
    lengths = attention_mask.bool().sum(dim=1).cpu()
    trained = response_mask.cpu() != 0
    first_trained = torch.where(trained.any(dim=1), trained.int().argmax(dim=1) + 1, (lengths - 1).clamp(min=1))
    prefix_lengths = torch.minimum(first_trained, lengths)
    token_rows = ids.tolist()
    kept = prefix_lengths.tolist()
    groups: dict[tuple[int, ...], int] = {}
    row_group = [groups.setdefault(tuple(token_rows[r][: kept[r]]), len(groups)) for r in range(rows)]
    suffix_lengths = lengths - prefix_lengths
    if len(groups) == rows or int(suffix_lengths.max()) == 0:
        return None
    group_lengths = torch.tensor([len(prefix) for prefix in groups], dtype=torch.long)
    prefix_starts = group_lengths.cumsum(0) - group_lengths
    prefix_tokens = int(group_lengths.sum())
    suffix_starts = prefix_tokens + suffix_lengths.cumsum(0) - suffix_lengths
    row_of = torch.tensor(row_group, dtype=torch.long)

    packed_ids = torch.tensor(list(itertools.chain.from_iterable(groups))
                              + list(itertools.chain.from_iterable(token_rows[r][kept[r]: int(lengths[r])]
                                                                   for r in range(rows))), dtype=ids.dtype)
    positions = torch.cat([_ramps(torch.zeros_like(group_lengths), group_lengths),
                           _ramps(prefix_lengths, suffix_lengths)])
    total = int(packed_ids.shape[0])
    prefix_index, prefix_valid = _blocks(prefix_starts, group_lengths, total)
    suffix_index, suffix_valid = _blocks(suffix_starts, suffix_lengths, total)
    longest_suffix = suffix_index.shape[1]
    causal = torch.ones(longest_suffix, longest_suffix, dtype=torch.bool).tril()
    suffix_mask = torch.cat([prefix_valid[row_of].unsqueeze(1).expand(-1, longest_suffix, -1),
                             causal.expand(rows, -1, -1)], dim=2).unsqueeze(1)

    column = torch.arange(width - 1).unsqueeze(0)
    start = prefix_lengths.unsqueeze(1)
    predicted = (column >= start - 1) & (column + 1 < lengths.unsqueeze(1))
    last_prefix_token = (prefix_starts + group_lengths - 1)[row_of].unsqueeze(1)
    in_suffix = suffix_starts.unsqueeze(1) + column - start
    source_position = torch.where(column == start - 1, last_prefix_token, in_suffix)[predicted]
    keep, source = torch.unique(source_position, sorted=True, return_inverse=True)
    tensors = {
        "ids": packed_ids, "positions": positions, "prefix_index": prefix_index, "prefix_valid": prefix_valid,
        "suffix_index": suffix_index, "suffix_valid": suffix_valid, "row_group": row_of, "suffix_mask": suffix_mask,
        "predicted": predicted, "keep": keep, "source": source, "targets": ids[:, 1:][predicted],
    }
    return SharedPrefixLayout(tensors, rows, len(groups))


def _ramps(starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Return ``starts[i], starts[i] + 1, ...`` (``lengths[i]`` values) for each ``i``, end to end."""
    total = int(lengths.sum())
    offsets = torch.arange(total) - torch.repeat_interleave(lengths.cumsum(0) - lengths, lengths)
    return torch.repeat_interleave(starts, lengths) + offsets


def _blocks(starts: torch.Tensor, lengths: torch.Tensor, total: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``[n, max(lengths)]`` indices of ``n`` runs in a packed sequence of ``total`` tokens, and their
    validity; padding repeats a valid index."""
    longest = max(1, int(lengths.max()))
    offsets = torch.arange(longest).unsqueeze(0)
    valid = offsets < lengths.unsqueeze(1)
    last = (lengths - 1).clamp(min=0).unsqueeze(1)
    index = (starts.unsqueeze(1) + torch.minimum(offsets, last)).clamp(max=total - 1)
    return index, valid


def shared_prefix_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, *, scaling: float | None = None,
                            dropout: float = 0.0, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers attention function: sdpa, or the shared-prefix attention when the forward carries a layout.

    ``query`` is ``[1, H, N, D]`` and ``key``/``value`` ``[1, H_kv, N, D]`` over
    the packed sequence; returns ``[1, N, H, D]`` as transformers' own functions do.
    """
    layout: SharedPrefixLayout | None = kwargs.get(LAYOUT_KEY)
    if layout is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    if query.shape[0] != 1:
        raise ValueError(f"the shared-prefix layout runs one packed sequence, got a batch of {query.shape[0]}")
    attend = torch.nn.functional.scaled_dot_product_attention
    q, k, v = query[0], key[0], value[0]
    if k.shape[0] != q.shape[0]:  # grouped-query attention: each key head serves several query heads
        k = k.repeat_interleave(q.shape[0] // k.shape[0], dim=0)
        v = v.repeat_interleave(q.shape[0] // v.shape[0], dim=0)
    prefix_q, prefix_k, prefix_v = (t[:, layout.prefix_index].transpose(0, 1) for t in (q, k, v))
    prefix_out = attend(prefix_q, prefix_k, prefix_v, is_causal=True, dropout_p=dropout, scale=scaling)
    suffix_q, suffix_k, suffix_v = (t[:, layout.suffix_index].transpose(0, 1) for t in (q, k, v))
    keys = torch.cat([prefix_k.index_select(0, layout.row_group), suffix_k], dim=2)
    values = torch.cat([prefix_v.index_select(0, layout.row_group), suffix_v], dim=2)
    suffix_out = attend(suffix_q, keys, values, attn_mask=layout.suffix_mask, dropout_p=dropout, scale=scaling)
    out = torch.cat([prefix_out.transpose(1, 2)[layout.prefix_valid], suffix_out.transpose(1, 2)[layout.suffix_valid]])
    layout.calls += 1
    return out.unsqueeze(0), None


def unsupported_reason(model: nn.Module) -> str | None:
    """Return why ``model``'s forward cannot run shared prefixes, or None when it can."""
    config = getattr(model, "config", None)
    if config is None:
        return f"{type(model).__name__} has no transformers config"
    implementation = getattr(config, "_attn_implementation", None)
    if implementation not in ("sdpa", ATTENTION_NAME):
        return f"its attention is {implementation}; shared prefixes run on sdpa only"
    kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"}:
        return f"its layers are not all full attention ({', '.join(sorted(kinds))})"
    if getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None):
        return "it uses sliding-window attention"
    if getattr(config, "num_hidden_layers", None) is None:
        return "its config does not say how many layers it has"
    return None


def enable(model: nn.Module) -> str | None:
    """Give ``model`` the shared-prefix attention (sdpa for every other forward); return why not, or None."""
    why = unsupported_reason(model)
    if why is not None:
        return why
    _register()
    config: Any = model.config
    config._attn_implementation = ATTENTION_NAME
    return None


def attention_layers(model: nn.Module) -> int:
    """Return how many attention calls one forward of ``model`` makes (its layers)."""
    config: Any = model.config
    return int(config.num_hidden_layers)


def _register() -> None:
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(ATTENTION_NAME, shared_prefix_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    _registered = True


def prediction_logprobs(logits: torch.Tensor, source: torch.Tensor, targets: torch.Tensor, temperature: float,
                        with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Return the log-prob of ``targets[i]`` under row ``source[i]`` of ``[K, V]`` logits (and that row's entropy).

    Rows are scaled by ``1 / temperature``; half-precision logits are upcast a
    chunk of rows at a time. Results are float32 for half precision, else the logits' dtype.
    """
    from trinity.algorithm import entropy_from_logits

    scaled = logits / temperature if temperature != 1.0 else logits
    low_precision = scaled.dtype in (torch.float16, torch.bfloat16)
    chunk = 256 if low_precision else max(1, scaled.shape[0])
    pieces = []
    for first in range(0, scaled.shape[0], chunk):
        part = scaled[first: first + chunk]
        pieces.append(torch.logsumexp(part.float() if low_precision else part, dim=-1))
    normalizers = torch.cat(pieces)
    picked = scaled[source, targets]
    logprobs = picked.to(normalizers.dtype) - normalizers[source]
    if not with_entropy:
        return logprobs, None
    return logprobs, entropy_from_logits(scaled)[source]


def token_logprobs(model: nn.Module, layout: SharedPrefixLayout, temperature: float, with_entropy: bool
                   ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Forward ``model`` on the packed layout (on the model's device); return the flat log-probs of the
    predicted entries (``layout.predicted``'s row-major order), their entropies, and the kept logits ``[1, K, V]``.

    Raises RuntimeError when an attention layer of the model did not run through
    :func:`shared_prefix_attention` (its tokens would have attended across rows).
    """
    from trinity.trainer.models import accepts_logits_to_keep

    kwargs: dict[str, Any] = {LAYOUT_KEY: layout}
    if accepts_logits_to_keep(model):
        kwargs["logits_to_keep"] = layout.keep
    logits = model(input_ids=layout.ids.unsqueeze(0), position_ids=layout.positions.unsqueeze(0), use_cache=False,
                   **kwargs).logits
    if logits.shape[1] != layout.keep.shape[0]:  # the model computed every position's logits
        logits = logits[:, layout.keep]
    if layout.calls < attention_layers(model):
        raise RuntimeError(f"{type(model).__name__} ran {layout.calls} of its {attention_layers(model)} attention "
                           "layers through the shared-prefix attention")
    logprobs, entropy = prediction_logprobs(logits[0], layout.source, layout.targets, temperature, with_entropy)
    return logprobs, entropy, logits


def try_enable(model: nn.Module, device: torch.device) -> str | None:
    """Enable shared prefixes on ``model`` and check them on two rows against the padded forward.

    Returns None when they agree, else why not (the model then keeps plain
    sdpa). Every trainer rank must call it (the check is a forward pass).
    """
    why = enable(model)
    if why is not None:
        return why
    config: Any = model.config
    vocab = int(config.vocab_size)
    ids = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 3, 6, 7]]) % vocab
    trained = torch.zeros(2, 4)
    trained[:, 2:] = 1
    layout = shared_prefix_layout(ids, torch.ones_like(ids), trained)
    assert layout is not None
    try:
        with torch.no_grad():
            padded = model(input_ids=ids.to(device), use_cache=False).logits.float()
            expected = torch.log_softmax(padded[:, :-1], dim=-1).gather(-1, ids[:, 1:].to(device).unsqueeze(-1))
            expected = expected.squeeze(-1)[trained.bool().to(device)]
            got, _, logits = token_logprobs(model, layout.to(device), 1.0, False)
        tolerance = 1e-3 if logits.dtype in (torch.float32, torch.float64) else 5e-2
        difference = float((got.float() - expected).abs().max())
        if not difference <= tolerance:
            why = f"its log-probs differ from the padded forward's by {difference:.3g} (more than {tolerance})"
    except (RuntimeError, TypeError, ValueError) as exc:
        why = f"its forward does not take the packed layout ({exc})"
    if why is not None:
        config._attn_implementation = "sdpa"
    return why
