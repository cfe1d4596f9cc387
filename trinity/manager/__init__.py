"""Run management helpers: checkpoint conversion for ``trinity convert``."""

from trinity.manager.checkpoint_converter import CheckpointError, ConversionError, convert_checkpoint

__all__ = ["CheckpointError", "ConversionError", "convert_checkpoint"]
