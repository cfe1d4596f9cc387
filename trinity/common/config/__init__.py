"""Typed run configuration: dataclass sections loaded from YAML with one-line errors."""

from trinity.common.config.loader import ConfigError, load_config, parse_config
from trinity.common.config.schema import (
    AlgorithmConfig,
    BufferConfig,
    ClusterConfig,
    Config,
    ExplorerConfig,
    ModelConfig,
    MonitorConfig,
    OptimizerConfig,
    StorageConfig,
    SynchronizerConfig,
    TaskSetConfig,
    TinyModelConfig,
    TrainerConfig,
)

__all__ = [
    "AlgorithmConfig",
    "BufferConfig",
    "ClusterConfig",
    "Config",
    "ConfigError",
    "ExplorerConfig",
    "ModelConfig",
    "MonitorConfig",
    "OptimizerConfig",
    "StorageConfig",
    "SynchronizerConfig",
    "TaskSetConfig",
    "TinyModelConfig",
    "TrainerConfig",
    "load_config",
    "parse_config",
]
