"""Real, throwaway distributions on disk, for tests and benchmarks of backend discovery.

:func:`write_distribution` writes a module and a ``NAME-VERSION.dist-info``
folder (``METADATA`` and ``entry_points.txt``) into a directory. Put that
directory on ``PYTHONPATH`` (or ``sys.path``) and ``importlib.metadata`` finds
the distribution exactly as it finds an installed package, entry points
included: nothing is mocked.

:func:`backend_source` returns the source of a small, well-behaved backend
module; pass ``extra`` to append hooks or statements that make it misbehave.

This module imports nothing from trinity, so a benchmark can use it too.
"""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Mapping
from pathlib import Path

#: The entry-point group device backends register under.
ENTRY_POINT_GROUP = "trinity.backends"


def write_distribution(
    site: Path,
    name: str,
    modules: Mapping[str, str],
    backends: Mapping[str, str],
    *,
    version: str = "0.1.0",
) -> Path:
    """Write distribution ``name`` into ``site`` and return its ``.dist-info`` folder.

    ``modules`` maps a top-level module name to its source (written as
    ``site/<module>.py``); ``backends`` maps a backend name to its entry-point
    value (``"module"`` or ``"module:attribute"``) under ``trinity.backends``.
    """
    site.mkdir(parents=True, exist_ok=True)
    for module, source in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    folder = site / f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
    folder.mkdir()
    (folder / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: throwaway test distribution\n",
        encoding="utf-8",
    )
    lines = [f"[{ENTRY_POINT_GROUP}]", *(f"{backend} = {value}" for backend, value in backends.items())]
    (folder / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "top_level.txt").write_text("".join(f"{m}\n" for m in modules), encoding="utf-8")
    return folder


def backend_source(
    name: str,
    *,
    priority: int = 10,
    available: bool = True,
    device_count: int = 1,
    reason: str = "",
    spec_version: str = "SPEC_VERSION",
    ray_resource_key: str | None = None,
    extra: str = "",
) -> str:
    """Return the source of a backend module called ``name`` computing on the CPU.

    ``spec_version`` is a Python expression (the current ``SPEC_VERSION`` by
    default); ``extra`` is appended verbatim (dedented) after the two required hooks.
    """
    return textwrap.dedent(
        f'''\
        """Throwaway device backend {name!r} for tests."""

        from trinity.device import BackendInfo, DoctorCheck, ProbeResult, hookimpl
        from trinity.device.spec import SPEC_VERSION


        @hookimpl
        def trinity_backend_info():
            return BackendInfo(
                name={name!r},
                device_type="cpu",
                priority={priority!r},
                spec_version={spec_version},
                collective_backend="gloo",
                ray_resource_key={ray_resource_key!r},
                visible_devices_env={name.upper() + "_VISIBLE_DEVICES"!r},
                worker_env_prefixes=({name.upper() + "_"!r},),
                description="throwaway test backend {name}",
            )


        @hookimpl
        def trinity_probe():
            return ProbeResult(available={available!r}, device_count={device_count!r}, reason={reason!r})
        '''
    ) + "\n" + textwrap.dedent(extra)


def add_backend(site: Path, name: str, distribution: str | None = None, **source_options: object) -> Path:
    """Write a one-backend distribution (module ``fake_<name>``) made by :func:`backend_source`."""
    module = f"fake_{name}"
    source = backend_source(name, **source_options)  # type: ignore[arg-type]
    return write_distribution(site, distribution or f"fake-backend-{name}", {module: source}, {name: module})


def environ_with(
    site: Path, variables: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Return ``base`` (default ``os.environ``) with ``site`` first on ``PYTHONPATH`` plus ``variables``.

    The ``TRINITY_*`` variables that steer selection are dropped from ``base``
    first, so only ``variables`` decide.
    """
    env = dict(os.environ if base is None else base)
    for var in ("TRINITY_DEVICE", "TRINITY_DEVICE_RESOLVED", "TRINITY_PROBE_TIMEOUT", "TRINITY_DEBUG"):
        env.pop(var, None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    env.update(variables or {})
    return env
