"""The sections of a run configuration: upstream Trinity-RFT 0.5's schema, plus a few ``(trinity-rft)`` keys.

Every field has a default and a ``#:`` comment. Types are enforced by
:mod:`trinity.common.config.loader`; settings refused or inert here carry
that in their field metadata (:mod:`trinity.common.config.schema.fields`);
derived values (device layout, lengths, the trainer's micro-batching) are
resolved into a plan, never written back into the config.
"""

from trinity.common.config.schema.algorithm import AlgorithmConfig, OptimizerConfig
from trinity.common.config.schema.buffer import (
    BufferConfig,
    DataSelectorConfig,
    ExperienceBufferConfig,
    ExplorerInput,
    FormatConfig,
    GenerationConfig,
    ReplayBufferConfig,
    TasksetConfig,
    TrainerInput,
)
from trinity.common.config.schema.explorer import (
    DynamicTimeoutConfig,
    ExplorerConfig,
    ExternalEndpointConfig,
    InferenceModelConfig,
    OverRolloutConfig,
)
from trinity.common.config.schema.model import ExternalModelConfig, ModelConfig, TinkerConfig, TinyModelConfig
from trinity.common.config.schema.run import (
    ClusterConfig,
    Config,
    DataProcessorConfig,
    ExperiencePipelineConfig,
    LogConfig,
    MonitorConfig,
    OperatorConfig,
    ServiceConfig,
    StageConfig,
    SynchronizerConfig,
)
from trinity.common.config.schema.trainer import TrainerConfig

__all__ = [
    "AlgorithmConfig",
    "BufferConfig",
    "ClusterConfig",
    "Config",
    "DataProcessorConfig",
    "DataSelectorConfig",
    "DynamicTimeoutConfig",
    "ExperienceBufferConfig",
    "ExperiencePipelineConfig",
    "ExplorerConfig",
    "ExplorerInput",
    "ExternalEndpointConfig",
    "ExternalModelConfig",
    "FormatConfig",
    "GenerationConfig",
    "InferenceModelConfig",
    "LogConfig",
    "ModelConfig",
    "MonitorConfig",
    "OperatorConfig",
    "OptimizerConfig",
    "OverRolloutConfig",
    "ReplayBufferConfig",
    "ServiceConfig",
    "StageConfig",
    "SynchronizerConfig",
    "TasksetConfig",
    "TinkerConfig",
    "TinyModelConfig",
    "TrainerConfig",
    "TrainerInput",
]
