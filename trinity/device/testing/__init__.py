"""Conformance kit for device-backend authors.

Subclass :class:`BackendConformance` in a test module of your package, set
``backend_name`` and, where the device is absent (CI), override the
``device_runtime`` fixture with a double of your vendor runtime::

    from trinity.device.testing import BackendConformance

    class TestAcmeConformance(BackendConformance):
        backend_name = "acme"
        heavy_modules = ("acme_torch",)

pytest then runs every contract check against your installed backend.
"""

from trinity.device.testing.conformance import BackendConformance

__all__ = ["BackendConformance"]
