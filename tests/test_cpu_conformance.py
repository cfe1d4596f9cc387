"""The built-in CPU backend passes the conformance kit on this machine, no double needed."""

from trinity.device.testing import BackendConformance


class TestCpuConformance(BackendConformance):
    backend_name = "cpu"
