"""What a Ray node started on this machine must be told about its devices."""

from __future__ import annotations

from trinity.device.ray_resources import local_node_resources, ray_detects


def test_a_vendor_key_is_declared_with_the_probe_s_count() -> None:
    assert local_node_resources("ACME", 2) == {"ACME": 2.0}


def test_keys_ray_detects_and_no_devices_declare_nothing() -> None:
    assert ray_detects("GPU") and ray_detects("NPU") and not ray_detects("ACME")
    assert local_node_resources("GPU", 8) == {} and local_node_resources("NPU", 8) == {}
    assert local_node_resources("ACME", 0) == {} and local_node_resources(None, 4) == {}
