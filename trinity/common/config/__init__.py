"""Typed run configuration: upstream Trinity-RFT's schema, loaded from YAML with one-line errors."""

from trinity.common.config.loader import ConfigError, load_config, parse_config
from trinity.common.config.schema import (
    AlgorithmConfig,
    BufferConfig,
    ClusterConfig,
    Config,
    ExperienceBufferConfig,
    ExplorerConfig,
    FormatConfig,
    InferenceModelConfig,
    ModelConfig,
    MonitorConfig,
    OptimizerConfig,
    SynchronizerConfig,
    TasksetConfig,
    TinyModelConfig,
    TrainerConfig,
)

__all__ = [
    "AlgorithmConfig",
    "BufferConfig",
    "ClusterConfig",
    "Config",
    "ConfigError",
    "ExperienceBufferConfig",
    "ExplorerConfig",
    "FormatConfig",
    "InferenceModelConfig",
    "ModelConfig",
    "MonitorConfig",
    "OptimizerConfig",
    "SynchronizerConfig",
    "TasksetConfig",
    "TinyModelConfig",
    "TrainerConfig",
    "load_config",
    "parse_config",
]
