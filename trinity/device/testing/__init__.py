"""Conformance kit for device-backend authors.

Subclass :class:`BackendConformance` in a test module of your package, set
``backend_name`` and, where the device is absent (CI), override the
``device_runtime`` fixture with a double of your vendor runtime::

    from trinity.device.testing import BackendConformance

    class TestAcmeConformance(BackendConformance):
        backend_name = "acme"
        heavy_modules = ("acme_torch",)

pytest then runs every contract check against your installed backend.

The device tests run in the pytest process. If your double registers a
device type through torch's PrivateUse1 slot (``rename_privateuse1_backend``),
that rename is permanent for the process and changes ``torch.accelerator`` for
every later test: run the kit in a child pytest process, or register the
double's device module without the rename in the shared process.
"""

from trinity.device.testing.conformance import BackendConformance

__all__ = ["BackendConformance"]
