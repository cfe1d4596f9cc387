"""Finding Acme devices without touching them.

The Acme driver creates one device node per accelerator: ``/dev/acme0``,
``/dev/acme1``, ... Listing them is a directory read that opens no device and
loads no library, which is what lets the probe run in every process,
including a Ray driver whose workers are forked later. Standard library only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

#: Restricts the devices a process sees, like CUDA_VISIBLE_DEVICES: "0,2", or "" for none.
VISIBLE_DEVICES_ENV = "ACME_VISIBLE_DEVICES"
#: Folder holding the device nodes when it is not /dev (containers that mount them elsewhere, tests).
DEVICE_DIR_ENV = "ACME_DEVICE_DIR"
#: Where the Acme driver creates the device nodes.
DEFAULT_DEVICE_DIR = "/dev"

_NODE_NAME = re.compile(r"acme(\d+)")


def device_dir(environ: Mapping[str, str]) -> Path:
    """Return the folder holding the device nodes: ``$ACME_DEVICE_DIR``, else ``/dev``."""
    return Path(environ.get(DEVICE_DIR_ENV) or DEFAULT_DEVICE_DIR)


def installed_devices(environ: Mapping[str, str]) -> list[int]:
    """Return the ids of the Acme devices on this machine, ascending; ``[]`` when there are none."""
    try:
        names = os.listdir(device_dir(environ))
    except OSError:
        return []
    return sorted(int(match[1]) for match in map(_NODE_NAME.fullmatch, names) if match)


def visible_devices(installed: Sequence[int], environ: Mapping[str, str]) -> list[int]:
    """Return the ids of the devices this process may use, in the order the mask lists them.

    ``ACME_VISIBLE_DEVICES`` unset: every installed device; empty: none;
    otherwise comma-separated ids, each of which must be installed. Raises
    ValueError, with a message for the user, when the mask is malformed or
    names a device that is not there.
    """
    raw = environ.get(VISIBLE_DEVICES_ENV)
    if raw is None:
        return list(installed)
    items = [item.strip() for item in raw.split(",") if item.strip()]
    if not all(item.isdigit() for item in items):
        raise ValueError(f"{VISIBLE_DEVICES_ENV}={raw!r} is not a comma-separated list of device ids such as 0,1")
    ids = [int(item) for item in items]
    missing = [i for i in ids if i not in installed]
    if missing:
        raise ValueError(
            f"{VISIBLE_DEVICES_ENV}={raw!r} names {describe(missing)}, but this machine has {describe(installed)}"
        )
    if len(set(ids)) != len(ids):
        raise ValueError(f"{VISIBLE_DEVICES_ENV}={raw!r} lists a device twice")
    return ids


def describe(ids: Sequence[int]) -> str:
    """Return ``ids`` as device node names for messages: ``"acme0, acme1"``, or ``"no Acme device"``."""
    return ", ".join(f"acme{i}" for i in ids) if ids else "no Acme device"
