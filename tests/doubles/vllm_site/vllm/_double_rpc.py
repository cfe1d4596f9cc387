"""What may cross the (modelled) process boundary between the engine and its workers.

vLLM sends ``collective_rpc`` arguments and results through msgpack: builtins
and tensors pass, anything else needs ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``
(pickle). The double always refuses anything else, and hands every worker its
own copy, as a real process boundary would.
"""

from __future__ import annotations

from typing import Any

import torch

_SCALARS = (type(None), bool, int, float, str, bytes)


def transport(value: Any, where: str) -> Any:
    """Return a copy of ``value`` as the receiving process would see it; ``TypeError`` if it cannot be sent.

    Allowed: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``list``,
    ``tuple``, ``dict`` with ``str`` keys (subclasses arrive as the plain type),
    and ``torch.Tensor`` (arrives as a plain, detached CPU copy). ``where``
    names the value in the error message.
    """
    if type(value) in _SCALARS:
        return value
    if isinstance(value, bool | int | float | bytes):  # e.g. an IntEnum member arrives as its plain value
        return next(base for base in (bool, int, float, bytes) if isinstance(value, base))(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True).as_subclass(torch.Tensor)
    if isinstance(value, list | tuple):  # subclasses (a NamedTuple) arrive as the plain container
        items = [transport(item, f"{where}[{i}]") for i, item in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):  # an OrderedDict (a state_dict) arrives as a plain dict
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"{where}: dict key {key!r} of type {type(key).__qualname__} cannot cross the process boundary "
                    "(only str keys are sent without VLLM_ALLOW_INSECURE_SERIALIZATION=1)"
                )
            out[str.__str__(key)] = transport(item, f"{where}[{key!r}]")
        return out
    raise TypeError(
        f"{where}: object of type {type(value).__module__}.{type(value).__qualname__} cannot cross the process "
        "boundary: only None/bool/int/float/str/bytes, list/tuple/dict and torch.Tensor are sent without "
        "VLLM_ALLOW_INSECURE_SERIALIZATION=1 (send plain data instead)"
    )
