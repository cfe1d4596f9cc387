"""Layouts on simulated accelerator clusters: Ray nodes advertising GPU/NPU resources on this CPU machine."""
