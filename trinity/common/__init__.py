"""Pieces shared by the explorer, buffer and trainer: registry, config, experiences."""
