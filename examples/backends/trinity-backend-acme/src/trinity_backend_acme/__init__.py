"""trinity-backend-acme: a device backend for trinity-rft, written as a template for vendors.

Acme is a fictional accelerator. This package finds Acme devices the way a
real backend finds its hardware (device nodes, a visible-devices variable) but
computes on the host CPU, so it runs on any machine. Importing it is cheap:
no torch, no vendor runtime.
"""

__version__ = "0.3.0"
