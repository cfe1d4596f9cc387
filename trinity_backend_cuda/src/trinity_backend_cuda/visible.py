"""How many GPUs ``CUDA_VISIBLE_DEVICES`` leaves to this process, computed the way CUDA does.

The CUDA runtime reads the variable once, at initialisation:

* unset: every GPU the driver has is visible;
* set but empty: no GPU is visible;
* otherwise a comma-separated list, read left to right, of GPU identifiers:
  an integer index (read like ``strtoul``: surrounding blanks are skipped and
  ``"1gpu"`` reads as 1), a ``GPU-<UUID>`` (a unique prefix of the UUID
  ``nvidia-smi -L`` prints is enough) or a ``MIG-<UUID>`` MIG instance;
* the first invalid entry (negative, not a number, out of range, an unknown or
  ambiguous UUID) ends the list: only the entries before it are visible, so
  ``0,2,-1,1`` shows GPUs 0 and 2 (CUDA programming guide, "CUDA Environment
  Variables");
* naming the same GPU twice hides every GPU (the behaviour
  ``torch.cuda._parse_visible_devices`` models as well).

Choices where CUDA's behaviour is not documented, stated so they can be revisited:

* each entry is classified on its own, so a list may mix indices and UUIDs;
* a CUDA process enumerates a single MIG instance (MIG user guide), so a list
  whose first entry is a ``MIG-`` id yields one device and the rest is ignored;
  MIG ids are not checked against the driver (NVML lists MIG instances only
  per parent GPU, which the probe does not walk); a ``MIG-`` entry after GPUs
  ends the list;
* integer indices are checked against NVML's GPU count only; NVML orders GPUs
  by PCI bus id while CUDA orders them fastest first unless
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, which changes which GPU an index means but
  not how many are visible.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from trinity_backend_cuda.info import VISIBLE_DEVICES_ENV

_INDEX = re.compile(r"\+?(\d+)")


@dataclass(frozen=True)
class VisibleDevices:
    """The GPUs a process will see."""

    #: Number of GPUs visible to CUDA.
    count: int
    #: Entries of the variable CUDA will not use (the first invalid one and all after it).
    ignored: tuple[str, ...] = ()
    #: When ``count`` is 0: why, with the fix. Otherwise a note on ignored entries, or ``""``.
    explanation: str = ""


def needs_uuids(value: str | None) -> bool:
    """Return True when ``value`` names GPUs by UUID, so NVML must be asked for the UUIDs."""
    return value is not None and any(entry.strip().startswith("GPU-") for entry in value.split(","))


def resolve(value: str | None, physical_count: int, uuids: Sequence[str] = ()) -> VisibleDevices:
    """Return the GPUs CUDA makes visible when ``CUDA_VISIBLE_DEVICES`` is ``value``.

    ``physical_count`` is the driver's GPU count (NVML) and ``uuids`` the GPUs'
    UUIDs by NVML index (needed only when ``value`` contains ``GPU-`` entries).
    """
    if value is None:
        return VisibleDevices(count=physical_count)
    if not value.strip():
        return VisibleDevices(
            count=0,
            explanation=(
                f"{VISIBLE_DEVICES_ENV} is set to an empty string, which hides every GPU from CUDA; "
                f"unset it or list the GPUs to use (e.g. {VISIBLE_DEVICES_ENV}=0,1)"
            ),
        )
    entries = value.split(",")
    chosen: list[str] = []
    for position, raw in enumerate(entries):
        entry = raw.strip()
        if entry.startswith("MIG-") and not chosen:
            return _single_mig(entries)
        key, why = _identify(entry, physical_count, uuids)
        if key is None:
            return _cut(value, entries, position=position, chosen=chosen, physical_count=physical_count, why=why)
        if key in chosen:
            return VisibleDevices(
                count=0,
                ignored=tuple(entries),
                explanation=(
                    f"{VISIBLE_DEVICES_ENV}={value!r} names GPU {key} twice, and CUDA then hides every GPU; "
                    "list each GPU once"
                ),
            )
        chosen.append(key)
    return VisibleDevices(count=len(chosen))


def _single_mig(entries: list[str]) -> VisibleDevices:
    """The list starts with a MIG id: CUDA enumerates that one MIG instance only."""
    rest = tuple(entries[1:])
    note = (
        f"{VISIBLE_DEVICES_ENV} entries {', '.join(rest)} are ignored: a CUDA process enumerates a single MIG instance"
        if rest
        else ""
    )
    return VisibleDevices(count=1, ignored=rest, explanation=note)


def _identify(entry: str, physical_count: int, uuids: Sequence[str]) -> tuple[str | None, str]:
    """Return ``(NVML index as text, "")`` for a valid entry, else ``(None, why it is invalid)``."""
    if entry.startswith("GPU-"):
        return _identify_uuid(entry, uuids)
    if entry.startswith("MIG-"):
        return None, "is a MIG id after whole GPUs"
    match = _INDEX.match(entry)
    if match is None:
        why = "is negative" if entry.startswith("-") else "is neither a GPU index, a GPU-<UUID> nor a MIG-<UUID>"
        return None, why
    index = int(match.group(1))
    if index >= physical_count:
        return None, f"is out of range (the driver has {physical_count} GPU(s))"
    return str(index), ""


def _identify_uuid(entry: str, uuids: Sequence[str]) -> tuple[str | None, str]:
    """Resolve a ``GPU-`` entry, which may be any unique prefix of a GPU's UUID."""
    matches = [index for index, uuid in enumerate(uuids) if uuid and uuid.startswith(entry)]
    if len(matches) == 1:
        return str(matches[0]), ""
    if matches:
        return None, f"is a UUID prefix matching {len(matches)} GPUs"
    return None, "matches the UUID of no GPU on this machine (see `nvidia-smi -L`)"


def _cut(
    value: str, entries: list[str], *, position: int, chosen: list[str], physical_count: int, why: str
) -> VisibleDevices:
    """The list ends at ``entries[position]``, which is invalid for reason ``why``."""
    bad = entries[position].strip()
    ignored = tuple(entries[position:])
    if not chosen:
        available = f"indices 0..{physical_count - 1}" if physical_count > 0 else "none"
        return VisibleDevices(
            count=0,
            ignored=ignored,
            explanation=(
                f"{VISIBLE_DEVICES_ENV}={value!r} leaves no GPU visible: its first entry {bad!r} {why}, "
                f"and CUDA stops reading the list there; the driver has {physical_count} GPU(s) ({available}); "
                f"fix the list or unset {VISIBLE_DEVICES_ENV}"
            ),
        )
    return VisibleDevices(
        count=len(chosen),
        ignored=ignored,
        explanation=(
            f"{VISIBLE_DEVICES_ENV} entries from {bad!r} on are ignored: {bad!r} {why}, and CUDA stops reading "
            "the list at the first invalid entry"
        ),
    )
