"""The ``hf`` engine's decode loop: one prefill per distinct prompt, then one token at a time for every row.

A GRPO batch asks for ``n`` samples of each prompt, and transformers'
``generate`` runs the prompt's forward pass once per sample. Here a chunk's
distinct prompts are run once each (the *prefill*), their key/value cache is
copied to every row that shares the prompt, and decoding goes on for all rows
together. The prompt's keys and values do not depend on the sample, so every
row sees exactly what a separate prefill would have given it.

The cache writes each step's keys and values into room it allocated
ahead (doubled when full) instead of concatenating the whole history every
step. Sampling, the end of a row (EOS, stop strings, ``max_tokens``) and the
padding of finished rows follow ``generate``'s rules, so a seeded request
draws the same tokens either way.

:func:`unsupported_reason` says when a model cannot take this loop (another
cache layout, such as sliding-window or linear-attention layers, or a
forward pass without position ids); the engine then uses ``generate``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch

#: Called after each step with the ``[B, t]`` tokens generated so far; returns the rows that are done.
StopCheck = Callable[[torch.Tensor], torch.Tensor]
#: Called before sampling with the ``[B, 1]`` previous tokens and the ``[B, V]`` logits; returns the scores.
ScoreProcessor = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


#: New tokens the cache has room for before its first doubling.
FIRST_ROOM = 128


def _cache_argument(model: torch.nn.Module) -> str | None:
    """Return the name under which ``model``'s forward takes a key/value cache, or None."""
    params = inspect.signature(model.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    return None


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """Return why :func:`decode` cannot run ``model`` (None when it can)."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:
        return "this transformers has no per-layer key/value cache"
    from trinity.common.models.vision import is_vision_language

    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return "not a decoder-only transformers model"
    if is_vision_language(config):
        return "a vision-language model (its rotary positions follow the images)"
    params = inspect.signature(model.forward).parameters
    missing = [name for name in ("input_ids", "attention_mask", "position_ids", "use_cache") if name not in params]
    if missing or _cache_argument(model) is None:
        return f"its forward pass does not take {', '.join(missing) or 'a key/value cache'}"
    try:
        layers = DynamicCache(config=config).layers
    except Exception as exc:  # noqa: BLE001 - any failure means: not the plain layout
        return f"its cache layout is not known here ({type(exc).__name__})"
    others = sorted({type(layer).__name__ for layer in layers if type(layer) is not DynamicLayer})
    if others or not layers:
        return f"its cache has {', '.join(others) or 'no'} layers, not only full-attention ones"
    return None


def _growing_layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):  # type: ignore[misc,no-untyped-call]
        """A full-attention cache layer with room allocated ahead, rows copyable per prompt.

        It starts with ``capacity`` positions and doubles when full, never
        past ``limit`` (the longest a row can get) unless asked for more.
        """

        capacity = 0
        limit = 0

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor, *rest: Any) -> None:
            rows, heads, _, width = key_states.shape
            self.device = key_states.device
            self._keys = key_states.new_empty((rows, heads, self.capacity, width))
            self._values = value_states.new_empty((rows, value_states.shape[1], self.capacity, value_states.shape[3]))
            self._length = 0
            self._expose()
            self.is_initialized = True

        def _expose(self) -> None:
            self.keys = self._keys[:, :, : self._length]
            self.values = self._values[:, :, : self._length]

        def _grow(self, rows: torch.Tensor | None, room: int) -> None:
            """Reallocate with ``room`` positions, keeping the filled ones (of ``rows`` only, when given)."""
            for name in ("_keys", "_values"):
                old = getattr(self, name)
                kept = old[:, :, : self._length] if rows is None else old[:, :, : self._length].index_select(0, rows)
                new = old.new_empty((kept.shape[0], old.shape[1], room, old.shape[3]))
                new[:, :, : self._length] = kept
                setattr(self, name, new)
            self._expose()

        def take_rows(self, rows: torch.Tensor) -> None:
            """Make row ``i`` a copy of row ``rows[i]``."""
            if self.is_initialized:
                self._grow(rows, self._keys.shape[2])

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
                   ) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            end = self._length + key_states.shape[-2]
            if end > self._keys.shape[2]:
                self._grow(None, max(end, min(2 * self._keys.shape[2], self.limit)))
            self._keys[:, :, self._length : end] = key_states
            self._values[:, :, self._length : end] = value_states
            self._length = end
            self._expose()
            return self._keys[:, :, :end], self._values[:, :, :end]

    return GrowingLayer


def _growing_cache(capacity: int, limit: int = 0) -> Any:
    """Return an empty cache whose layers hold ``capacity`` positions, then double up to ``limit``."""
    from transformers.cache_utils import Cache, DynamicCache

    capacity = max(1, capacity)
    layer = type("GrowingLayerOf", (_growing_layer_class(),), {"capacity": capacity, "limit": max(capacity, limit)})

    class GrowingCache(DynamicCache):  # type: ignore[misc]
        def __init__(self) -> None:
            Cache.__init__(self, layer_class_to_replicate=layer)

    return GrowingCache()


def left_padded(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``prompts`` as ``[B, W]`` left-padded ids and their attention mask (W: the longest prompt)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids, mask


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids of left-padded rows (``generate``'s: padding positions read 1)."""
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)


@torch.no_grad()
def decode(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    max_tokens: int,
    greedy: bool,
    processor: ScoreProcessor,
    eos_ids: Sequence[int],
    pad_id: int,
    stop: StopCheck | None = None,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Generate up to ``max_tokens`` tokens after each prompt; return them as ``[B, L]`` ids (``L <= max_tokens``).

    ``processor`` turns each step's logits into the scores to sample from
    (see :class:`~trinity.common.models.sampling.LogprobRecorder`); greedy
    takes their argmax, otherwise one token is drawn from their softmax.
    A row ends at an EOS id or when ``stop`` says so; its later positions
    hold ``pad_id``. The loop ends when every row has ended.
    """
    distinct: dict[tuple[int, ...], int] = {}
    owner = [distinct.setdefault(tuple(int(t) for t in p), len(distinct)) for p in prompts]
    firsts = list(distinct)
    ids, mask = left_padded(firsts, pad_id)
    width = ids.shape[1]
    ids, mask = ids.to(device), mask.to(device)
    rows = torch.tensor(owner, dtype=torch.long, device=device)

    # rows often end long before max_tokens: room for the first tokens, doubled as decoding goes on
    cache = _growing_cache(width + min(max_tokens, FIRST_ROOM), width + max_tokens)
    cache_arg = _cache_argument(model)
    if cache_arg is None:
        raise ValueError(f"decode: {unsupported_reason(model)}")
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    positions = _positions(mask)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                **{cache_arg: cache}, **keep)
    logits = out.logits[:, -1, :].index_select(0, rows)
    if len(firsts) < len(prompts):
        for layer in cache.layers:
            layer.take_rows(rows)
    mask = mask.index_select(0, rows)
    position = positions[:, -1:].index_select(0, rows)

    eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long, device=device)
    running = torch.ones(len(prompts), dtype=torch.bool, device=device)
    tokens: list[torch.Tensor] = []
    previous = torch.full((len(prompts), 1), pad_id, dtype=torch.long, device=device)
    for step in range(max_tokens):
        scores = processor(previous, logits)
        if greedy:
            chosen = torch.argmax(scores, dim=-1)
        else:
            chosen = torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)
        chosen = torch.where(running, chosen, torch.full_like(chosen, pad_id))
        tokens.append(chosen)
        running &= ~torch.isin(chosen, eos)
        if stop is not None:
            running &= ~stop(torch.stack(tokens, dim=1))
        if step == max_tokens - 1 or not bool(running.any()):
            break
        previous = chosen[:, None]
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
        position = position + 1
        out = model(input_ids=previous, attention_mask=mask, position_ids=position, use_cache=True,
                    **{cache_arg: cache})
        logits = out.logits[:, -1, :]
    return torch.stack(tokens, dim=1)
