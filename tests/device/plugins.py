"""Small, real backend plugins used by the core tests (no device involved)."""

from __future__ import annotations

import threading

from trinity.device import BackendInfo, ProbeResult, hookimpl
from trinity.device.spec import SPEC_VERSION


def info(name: str, priority: int = 10, key: str | None = "ACCEL", spec_version: int = SPEC_VERSION) -> BackendInfo:
    """Return a BackendInfo computing on the CPU, for test backends."""
    return BackendInfo(
        name=name,
        device_type="cpu",
        priority=priority,
        spec_version=spec_version,
        collective_backend="gloo",
        ray_resource_key=key,
        visible_devices_env=f"{name.upper()}_VISIBLE_DEVICES",
        worker_env_prefixes=(f"{name.upper()}_",),
        description=f"test backend {name}",
    )


class FakeAccel:
    """A backend whose availability the test decides."""

    def __init__(self, name: str = "accel", priority: int = 10, available: bool = True, key: str | None = "ACCEL",
                 spec_version: int = SPEC_VERSION) -> None:
        self._info = info(name, priority, key, spec_version)
        self.available = available
        self.probes = 0
        self.synced = 0
        self.device = 0

    @hookimpl
    def trinity_backend_info(self) -> BackendInfo:
        return self._info

    @hookimpl
    def trinity_probe(self) -> ProbeResult:
        self.probes += 1
        if self.available:
            return ProbeResult(available=True, device_count=2)
        return ProbeResult.unavailable(f"no {self._info.name} device files found under /dev")

    @hookimpl
    def trinity_synchronize(self) -> None:
        self.synced += 1

    @hookimpl
    def trinity_set_device(self, local_rank: int) -> None:
        self.device = local_rank

    @hookimpl
    def trinity_current_device_index(self) -> int:
        return self.device


class RaisingProbe(FakeAccel):
    """Its probe raises, as a buggy vendor probe would."""

    @hookimpl
    def trinity_probe(self) -> ProbeResult:
        raise RuntimeError("driver query failed")


class HangingProbe(FakeAccel):
    """Its probe blocks until released, as a probe stuck in a driver call would."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.release = threading.Event()

    @hookimpl
    def trinity_probe(self) -> ProbeResult:
        self.release.wait(30)
        return ProbeResult(available=True, device_count=1)


class UnknownHook(FakeAccel):
    """Implements a hook the spec does not declare."""

    @hookimpl
    def trinity_warp_drive(self) -> None:
        """Not part of the contract."""


class WrongArgument(FakeAccel):
    """Names an argument the spec does not declare."""

    @hookimpl
    def trinity_set_device(self, device_index: int) -> None:  # type: ignore[override]
        self.device = device_index


class Unmarked(FakeAccel):
    """Forgot the marker on a hook, which would silently be ignored."""

    def trinity_empty_cache(self) -> None:
        """Missing @hookimpl."""


class NoProbe:
    """Lacks the required probe."""

    @hookimpl
    def trinity_backend_info(self) -> BackendInfo:
        return info("noprobe")


class SubsetArguments(FakeAccel):
    """Takes fewer arguments than the spec declares (allowed)."""

    @hookimpl
    def trinity_worker_env(self) -> dict[str, str]:
        return {"SUBSET_WORKER": "1"}


class BrokenDoctor(FakeAccel):
    """A doctor check that raises instead of reporting."""

    @hookimpl
    def trinity_doctor(self) -> list[object]:
        raise OSError("cannot read driver version")


class MisspelledHook(FakeAccel):
    """Spells a hook the British way, as a vendor might."""

    @hookimpl
    def trinity_synchronise(self) -> None:
        """Meant to be trinity_synchronize."""
