"""Backends that ship inside trinity-rft itself (only the CPU one)."""
