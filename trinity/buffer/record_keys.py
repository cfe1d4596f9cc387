"""Which keys the records of a data set need, given its ``format`` section and what the records are.

Shared by the dry-run check (:mod:`trinity.buffer.dataset_check`) and the
formatters (:mod:`trinity.buffer.formatters`), so both ask for the same keys
and word a missing key the same way. Imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trinity.common.config.schema.buffer import FormatConfig

#: What the records of a data set are: tasks (explorer input), SFT or DPO samples (trainer input).
SCHEMAS = ("task", "sft", "dpo")
#: ``format.prompt_type`` values.
PROMPT_TYPES = ("messages", "plaintext")


def prompt_type_of(fmt: FormatConfig) -> str:
    """Return ``fmt.prompt_type`` lower-cased; raises ValueError when it is neither ``messages`` nor ``plaintext``."""
    value = str(fmt.prompt_type).lower()
    if value not in PROMPT_TYPES:
        raise ValueError(f"format.prompt_type must be 'messages' or 'plaintext', got {fmt.prompt_type!r}")
    return value


def required_keys(fmt: FormatConfig, schema: str, *, require_response: bool = True) -> dict[str, str]:
    """Return ``{format field: record key}`` for the keys every record of a ``schema`` data set must have.

    ``schema`` is ``task``, ``sft`` or ``dpo`` (``experience`` and None read as
    ``task``: such buffers hold no data set). Task records need ``prompt_key``
    and, when ``require_response``, ``response_key``; SFT/DPO records need the
    keys of their ``prompt_type``. ``system_prompt_key`` is required when set;
    ``tools_key``, ``workflow_key`` and ``reward_fn_key`` never are (a record
    without them uses the defaults, as upstream). Raises ValueError for an
    unknown schema or prompt type.
    """
    kind = "task" if schema in (None, "", "experience") else schema
    if kind not in SCHEMAS:
        raise ValueError(f"unknown data set schema {schema!r}; use one of {', '.join(SCHEMAS)}")
    keys: dict[str, str] = {}
    if kind == "task":
        keys["prompt_key"] = fmt.prompt_key
        if require_response:
            keys["response_key"] = fmt.response_key
        if fmt.system_prompt_key:
            keys["system_prompt_key"] = fmt.system_prompt_key
        return keys
    if prompt_type_of(fmt) == "messages":
        keys["messages_key"] = fmt.messages_key
        if kind == "dpo":
            keys["chosen_key"] = fmt.chosen_key
            keys["rejected_key"] = fmt.rejected_key
        return keys
    if fmt.system_prompt_key:
        keys["system_prompt_key"] = fmt.system_prompt_key
    keys["prompt_key"] = fmt.prompt_key
    if kind == "sft":
        keys["response_key"] = fmt.response_key
    else:
        keys["chosen_key"] = fmt.chosen_key
        keys["rejected_key"] = fmt.rejected_key
    return keys


def describe_keys(keys: Iterable[object]) -> str:
    """Return the keys as a short comma-separated list (``none`` when there is none)."""
    names = [str(k) for k in keys]
    if len(names) > 20:
        names = [*names[:20], f"... ({len(names) - 20} more)"]
    return ", ".join(names) or "none"


def missing_key_message(where: str, field: str, key: str, present: Iterable[object]) -> str:
    """Return the one-line message for a record at ``where`` lacking ``key`` (the value of ``format.<field>``)."""
    return (
        f"{where} has no key {key!r} (format.{field}); its keys: {describe_keys(present)}; "
        f"set format.{field} to the key that holds it, or fix the data"
    )
