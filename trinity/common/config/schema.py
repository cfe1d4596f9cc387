"""The sections of a run configuration. Every field has a default and a ``#:`` comment.

Field types are enforced by :mod:`trinity.common.config.loader`; cross-field
rules (lengths, intervals, device layout) by ``check()`` methods and the
cluster validator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Mode = Literal["both", "explore", "train", "bench"]


@dataclass
class TinyModelConfig:
    """A small causal LM built offline (tokenizer trained locally) when ``model.model_path`` is missing."""

    #: Transformer width.
    hidden_size: int = 64
    #: Number of decoder layers.
    num_layers: int = 2
    #: Attention heads.
    num_heads: int = 4
    #: Width of the MLP.
    intermediate_size: int = 128
    #: Target byte-level BPE vocabulary size (chat markers included).
    vocab_size: int = 400
    #: Seed of the initial weights.
    seed: int = 0


@dataclass
class ModelConfig:
    """The policy model and how it samples."""

    #: Hugging Face model folder.
    model_path: str = ""
    #: Tokenizer folder; defaults to ``model_path``.
    tokenizer_path: str = ""
    #: When set and ``model_path`` does not exist, build a tiny model there first.
    tiny: TinyModelConfig | None = None
    #: Prompts longer than this are truncated from the left.
    max_prompt_tokens: int = 256
    #: New tokens generated per rollout at most.
    max_response_tokens: int = 64
    #: Sampling temperature for rollouts.
    temperature: float = 1.0
    #: Nucleus sampling.
    top_p: float = 1.0
    #: Top-k sampling; 0 disables it.
    top_k: int = 0
    #: Parameter dtype for training and inference.
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"


@dataclass
class ClusterConfig:
    """Where the job runs."""

    #: Ray address to connect to; empty: connect to a running local cluster, else start one.
    ray_address: str = ""
    #: Nodes to use.
    node_num: int = 1
    #: Accelerators per node (ignored on the CPU backend).
    devices_per_node: int = 1
    #: Device backend: ``auto`` or an installed backend's name (``cpu``, ``cuda``, ``npu``, ...).
    device: str = "auto"
    #: CPUs (Ray's logical CPUs; fractions allowed) per engine and per trainer process.
    cpus_per_bundle: float = 1.0


@dataclass
class TaskSetConfig:
    """A task set: a JSONL or Parquet file of tasks and how to turn each into a rollout."""

    #: Name used in metrics (``train``, ``eval/gsm8k``).
    name: str = "train"
    #: File path (``.jsonl`` / ``.parquet``), or a folder of such files.
    path: str = ""
    #: Key of the prompt text in each record.
    prompt_key: str = "question"
    #: Key of the reference answer.
    answer_key: str = "answer"
    #: Workflow (registry name) that runs each task.
    workflow: str = "math"
    #: Reward function (registry name) the workflow uses; empty: the workflow's own default.
    reward_fn: str = ""
    #: Extra arguments for the workflow.
    workflow_args: dict[str, Any] = field(default_factory=dict)
    #: Rollouts per task for evaluation sets (training uses ``algorithm.repeat_times``).
    repeat_times: int = 1
    #: Sampling temperature override (evaluation often uses 0 = greedy); None keeps ``model.temperature``.
    temperature: float | None = None


@dataclass
class StorageConfig:
    """Where experiences go between explorer and trainer."""

    #: ``queue`` (Ray queue, default), ``sqlite`` (persistent, SQLAlchemy) or ``jsonl``.
    storage_type: Literal["queue", "sqlite", "jsonl"] = "queue"
    #: File for ``sqlite``/``jsonl``; default under the run's checkpoint folder.
    path: str = ""
    #: Queue capacity in experiences (back-pressure on the explorer); 0 means unbounded.
    capacity: int = 0


@dataclass
class BufferConfig:
    """Tasks in, experiences out."""

    #: Tasks per training step (each repeated ``algorithm.repeat_times`` times).
    batch_size: int = 8
    #: Passes over the training task set.
    total_epochs: int = 1
    #: Stop after this many steps (0: run all epochs).
    total_steps: int = 0
    #: Training tasks.
    train_tasks: TaskSetConfig = field(default_factory=TaskSetConfig)
    #: Evaluation task sets.
    eval_tasks: list[TaskSetConfig] = field(default_factory=list)
    #: The experience buffer.
    experience_buffer: StorageConfig = field(default_factory=StorageConfig)
    #: Shuffle training tasks each epoch (seeded).
    shuffle: bool = True
    #: How the trainer draws experiences (registry): ``default`` (FIFO, whole groups) or ``staleness``.
    sample_strategy: str = "default"
    #: Its arguments (``staleness``: ``max_staleness``, ``mode``).
    sample_strategy_args: dict[str, Any] = field(default_factory=dict)
    #: Reward shapers applied before storing, in order: ``[{name: scale, args: {factor: 2}}]``.
    reward_shaping: list[dict[str, Any]] = field(default_factory=list)
    #: Seconds the trainer waits for a batch of experiences before failing.
    read_timeout: float = 600.0


@dataclass
class ExplorerConfig:
    """Rollout generation."""

    #: Inference engine: ``hf`` (transformers, any device) or ``vllm``.
    engine_type: Literal["hf", "vllm"] = "hf"
    #: Number of inference engines.
    engine_num: int = 1
    #: Devices per engine (tensor parallel size).
    tensor_parallel_size: int = 1
    #: Workflow runners per engine (concurrent tasks).
    runners_per_engine: int = 2
    #: Seconds a task may take before it is retried.
    timeout: float = 300.0
    #: Retries of a failed or timed-out task before it is skipped (and counted).
    max_retries: int = 2
    #: Evaluate every N steps (0: only at the end).
    eval_interval: int = 0
    #: Evaluate before the first step too.
    eval_on_start: bool = True
    #: Generation batch size inside one engine (``hf``; ``vllm`` batches continuously).
    max_batch_size: int = 32
    #: ``vllm``: fraction of each device's memory the engine may take (vLLM's ``gpu_memory_utilization``).
    memory_utilization: float = 0.9
    #: ``vllm``: run the model eagerly (no CUDA/ACL graphs): slower decoding, faster start, less memory.
    enforce_eager: bool = False
    #: ``vllm``: reuse the KV cache of shared prompt prefixes (reset after every weight sync).
    enable_prefix_caching: bool = True
    #: ``vllm``: context length the engine reserves KV cache for; 0: the model's own maximum.
    max_model_len: int = 0


@dataclass
class SynchronizerConfig:
    """How and when weights flow from trainer to engines."""

    #: ``online`` (backend collective), ``offline``/``checkpoint``, ``memory``, or the collective's own name.
    sync_method: str = "online"
    #: Sync every N trainer steps.
    sync_interval: int = 1
    #: Explorer runs this many steps ahead of the trainer (0: strictly on-policy).
    sync_offset: int = 0
    #: Seconds a sync may take before the run fails.
    sync_timeout: float = 600.0
    #: Bucket size of the online broadcast, in MiB.
    bucket_size_mb: int = 64
    #: After each sync, compare the engines' weight checksums with the trainer's (slow; for debugging and tests).
    verify_checksums: bool = False


@dataclass
class TrainerConfig:
    """Policy (and critic) updates."""

    #: Training engine: ``fsdp`` (FSDP2, built in).
    engine: Literal["fsdp"] = "fsdp"
    #: Trainer processes (data-parallel, FSDP2-sharded).
    trainer_num: int = 1
    #: Save a checkpoint every N steps (0: only at the end).
    save_interval: int = 0
    #: Gradient clipping by global norm (0 disables).
    grad_clip: float = 1.0
    #: Rows per forward/backward; the step's batch is split into micro-batches.
    micro_batch_size: int = 8
    #: PPO epochs over each batch.
    ppo_epochs: int = 1
    #: ``torch.compile`` the model; None: what the device backend supports.
    use_torch_compile: bool | None = None
    #: Keep this many latest checkpoints (0 keeps all).
    max_checkpoints: int = 2


@dataclass
class OptimizerConfig:
    """AdamW with linear warmup."""

    #: Learning rate.
    lr: float = 1e-5
    #: Weight decay.
    weight_decay: float = 0.0
    #: Adam betas.
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    #: Linear warmup steps.
    warmup_steps: int = 0
    #: Critic learning rate (PPO); None: same as ``lr``.
    critic_lr: float | None = None


@dataclass
class AlgorithmConfig:
    """What is optimised."""

    #: Algorithm type (registry): ``grpo``, ``ppo``, ``sft``, ``dpo``, ...
    algorithm_type: str = "grpo"
    #: Rollouts per task (GRPO group size).
    repeat_times: int = 4
    #: Optimizer.
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    #: Advantage function (registry); empty: the algorithm's default.
    advantage_fn: str = ""
    #: Its arguments.
    advantage_fn_args: dict[str, Any] = field(default_factory=dict)
    #: Policy loss (registry); empty: the algorithm's default.
    policy_loss_fn: str = ""
    #: Its arguments.
    policy_loss_fn_args: dict[str, Any] = field(default_factory=dict)
    #: KL estimator used as a reward penalty; empty: none.
    kl_penalty_fn: str = ""
    #: KL estimator used as a loss term; empty: none.
    kl_loss_fn: str = ""
    #: Coefficient of the KL term (penalty or loss).
    kl_coef: float = 0.0
    #: Entropy bonus coefficient.
    entropy_coef: float = 0.0
    #: Loss aggregation: ``token-mean``, ``seq-mean-token-mean``, ``seq-mean-token-sum``.
    loss_agg_mode: str = "token-mean"


@dataclass
class MonitorConfig:
    """Where metrics go."""

    #: TensorBoard event files under the run folder.
    tensorboard: bool = True
    #: Metrics as JSON lines under the run folder.
    jsonl: bool = True
    #: A reward-curve PNG at the end of the run.
    plot: bool = True
    #: Rich progress display on the console.
    progress: bool = True
    #: Log to Weights & Biases (needs wandb installed).
    wandb: bool = False


@dataclass
class Config:
    """A whole run."""

    #: ``both`` (explore and train), ``explore``, ``train`` or ``bench`` (evaluate checkpoints).
    mode: Mode = "both"
    #: Project name (folder level 1).
    project: str = "trinity"
    #: Run name (folder level 2).
    name: str = "run"
    #: Root of checkpoints, buffers and metrics: ``<root>/<project>/<name>``.
    checkpoint_root_dir: str = "./checkpoints"
    #: Global seed.
    seed: int = 42
    model: ModelConfig = field(default_factory=ModelConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    buffer: BufferConfig = field(default_factory=BufferConfig)
    explorer: ExplorerConfig = field(default_factory=ExplorerConfig)
    synchronizer: SynchronizerConfig = field(default_factory=SynchronizerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
