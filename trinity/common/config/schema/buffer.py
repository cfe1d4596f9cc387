"""``buffer``: task sets in, experiences out, and the data sets SFT/DPO train on (upstream's section).

Task sets and data sets are read through Hugging Face ``datasets``: a local
folder or a JSON/JSONL/Parquet/Arrow file (``path``), optionally a
``subset_name`` (configuration) and a ``split``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trinity.common.config.schema.fields import inert, refused, refused_values

_MULTIMODAL = ("videos are not supported yet (images are: format.image_key with a vision-language model); "
               "remove the key")


@dataclass
class FormatConfig:
    """Which keys of a record hold what, and how SFT/DPO records are laid out."""

    #: SFT/DPO records: ``messages`` (chat message lists) or ``plaintext`` (prompt/response strings).
    prompt_type: str = "messages"
    #: Key of the prompt text (task sets, plaintext SFT/DPO).
    prompt_key: str = "prompt"
    #: Key of the reference answer (task sets) or of the response (plaintext SFT).
    response_key: str = "response"
    #: Key of a per-record system prompt (wins over ``system_prompt``).
    system_prompt_key: str | None = None
    #: System prompt put before every prompt.
    system_prompt: str | None = None
    #: Key of the message list (``messages`` SFT/DPO).
    messages_key: str = "message"
    #: Key of the tool schemas of a record (passed to the chat template).
    tools_key: str = "tools"
    #: Key of a record's images (one image or a list: PIL images, file paths, bytes), for vision-language models.
    image_key: str | None = None
    #: Key of a record's videos (upstream multimodal).
    video_key: str | None = refused(None, _MULTIMODAL)
    #: Text put at the start of the assistant's reply.
    reply_prefix: str | None = None
    #: Key of a per-record workflow name (routes each task).
    workflow_key: str = ""
    #: Key of a per-record reward function name.
    reward_fn_key: str = ""
    #: DPO: key of the chosen response (plaintext) or conversation (messages).
    chosen_key: str = "chosen"
    #: DPO: key of the rejected response or conversation.
    rejected_key: str = "rejected"
    #: SFT messages: train on every assistant turn of a conversation (else only on its last message).
    enable_concatenated_multi_turn: bool = False
    #: Chat template for this data; None: ``model.custom_chat_template`` or the tokenizer's.
    chat_template: str | None = None
    #: Passed to chat templates that know it.
    enable_thinking: bool | None = None


@dataclass
class GenerationConfig:
    """Sampling settings of a task set's rollouts; unset ones come from ``model``."""

    #: Temperature (0: greedy).
    temperature: float | None = None
    #: Nucleus sampling.
    top_p: float | None = None
    #: Top-k; -1 disables it.
    top_k: int | None = None
    #: Extra log-probs per token (only the sampled token's are recorded).
    logprobs: int | None = None
    #: New tokens at most; default ``model.max_response_tokens``.
    max_tokens: int | None = None
    #: Rollouts per task: set by ``algorithm.repeat_times`` (training) or the task set's ``repeat_times``.
    n: int = refused(1, "rollouts per task come from algorithm.repeat_times (eval: the task set's repeat_times)")


@dataclass
class DataSelectorConfig:
    """In which order a task set is read."""

    #: ``sequential`` (file order), ``shuffle`` (a new permutation each epoch), ``random`` (with replacement),
    #: or a selector: ``offline_easy2hard``, ``difficulty_based`` (BOTS) or a plugin's (trinity.buffer.selector).
    selector_type: str = "sequential"
    #: Seed of ``shuffle`` / ``random``.
    seed: int = 42
    #: Columns of the task set a selector reads (``difficulty_based``: two reference pass rates).
    feature_keys: list[str] = field(default_factory=list)
    #: The selector's arguments (``difficulty_based``: m, lamb, rho, target_reward, tau, do_sample, adaptive_rho).
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class ReplayBufferConfig:
    """Experience replay: the trainer draws batches by priority from a pool of groups it may train on again."""

    #: Draw batches from the replay pool (``<run>/buffer/<name>.replay.sqlite``) instead of in arrival order.
    enable: bool = False
    #: Priority function: ``linear_decay``, ``decay_limit_randomization`` or a registered or dotted-path one.
    priority_fn: str = "linear_decay"
    #: Seconds after a use before a group may serve again; unset: each group is used once.
    reuse_cooldown_time: float | None = None
    #: Arguments of the priority function, over its defaults.
    priority_fn_args: dict[str, Any] = field(default_factory=lambda: {"decay": 2.0})


_SQL_ONLY = "used by upstream's SQL task storage only"


@dataclass
class TasksetConfig:
    """A task set: where its records are, which keys hold what, and which workflow runs them."""

    #: Name in metrics; default ``taskset_<i>`` / ``eval_taskset_<i>``.
    name: str = ""
    #: ``file``: read through Hugging Face ``datasets``.
    storage_type: str = refused_values("file", {
        "sql": "task sets are read from files here (storage_type: file)",
        "queue": "task sets are read from files here (storage_type: file)",
    })
    #: A local folder or a JSON/JSONL/Parquet/Arrow file (or a hub id where the hub is reachable).
    path: str | None = None
    #: Split to read.
    split: str = "train"
    #: Dataset configuration (``datasets`` ``name``).
    subset_name: str | None = None
    #: Which keys hold the prompt, answer, workflow, ...
    format: FormatConfig = field(default_factory=FormatConfig)
    #: Workflow running these tasks; default ``buffer.explorer_input.default_workflow_type``.
    default_workflow_type: str | None = None
    #: Reward function; default ``buffer.explorer_input.default_reward_fn_type`` or the workflow's own.
    default_reward_fn_type: str | None = None
    #: Sampling settings of the rollouts.
    rollout_args: GenerationConfig = field(default_factory=GenerationConfig)
    #: Extra arguments of the workflow.
    workflow_args: dict[str, Any] = field(default_factory=dict)
    #: Extra arguments of the reward function.
    reward_fn_args: dict[str, Any] = field(default_factory=dict)
    #: Deprecated spelling of ``data_selector``.
    task_selector: DataSelectorConfig | None = None
    #: Read order.
    data_selector: DataSelectorConfig = field(default_factory=DataSelectorConfig)
    #: Retries of SQL reads (upstream).
    max_retry_times: int = inert(3, _SQL_ONLY)
    #: Seconds between SQL read retries (upstream).
    max_retry_interval: int = inert(1, _SQL_ONLY)
    #: Show a progress bar while the data set loads.
    enable_progress_bar: bool = False
    #: Rollouts per task of an evaluation set (training sets use ``algorithm.repeat_times``).
    repeat_times: int = 1


@dataclass
class ExperienceBufferConfig:
    """Where experiences go between explorer and trainer, or the data set SFT/DPO train on."""

    #: Name of the buffer (file names, metrics).
    name: str = ""
    #: ``queue`` (in memory; with a ``path`` every experience is also recorded there), ``sql`` (SQLite via
    #: SQLAlchemy, persistent) or ``file`` (JSONL experiences; a data set for SFT/DPO).
    storage_type: str = "queue"
    #: ``sqlite:///file.db`` for ``sql``; a JSONL file; for SFT/DPO the data set (like a task set's path).
    path: str | None = None
    #: Queue capacity in experiences (back-pressure on the explorer).
    capacity: int = 10000
    #: Seconds the trainer waits for a batch before failing.
    max_read_timeout: float = 1800.0
    #: Experience replay (upstream).
    replay_buffer: ReplayBufferConfig = field(default_factory=ReplayBufferConfig)
    #: Retries of SQL operations (upstream).
    max_retry_times: int = inert(3, "SQLite writes here are transactional and not retried")
    #: Seconds between SQL retries (upstream).
    max_retry_interval: int = inert(1, "SQLite writes here are transactional and not retried")
    #: Data set split (SFT/DPO).
    split: str = "train"
    #: Data set configuration (SFT/DPO).
    subset_name: str | None = None
    #: Record layout (SFT/DPO).
    format: FormatConfig = field(default_factory=FormatConfig)
    #: Show a progress bar while the data set loads.
    enable_progress_bar: bool = False
    #: Read order of a data set.
    data_selector: DataSelectorConfig = field(default_factory=DataSelectorConfig)
    #: What the records are: ``experience``, ``sft`` or ``dpo``; default: what the algorithm trains on.
    schema_type: str | None = None
    #: Passes over an auxiliary data set (the main buffer uses ``buffer.total_epochs``).
    total_epochs: int = 1


@dataclass
class ExplorerInput:
    """The task sets the explorer rolls out and evaluates."""

    #: The training task set.
    taskset: TasksetConfig | None = None
    #: Several training task sets (upstream); one is supported here.
    tasksets: list[TasksetConfig] = field(default_factory=list)
    #: Evaluation task sets.
    eval_tasksets: list[TasksetConfig] = field(default_factory=list)
    #: Workflow of task sets that name none.
    default_workflow_type: str | None = None
    #: Workflow of evaluation task sets that name none (wins over ``default_workflow_type`` for them).
    default_eval_workflow_type: str | None = None
    #: Reward function of task sets that name none.
    default_reward_fn_type: str | None = None


@dataclass
class TrainerInput:
    """What the trainer reads."""

    #: The main experience buffer (or the SFT/DPO data set).
    experience_buffer: ExperienceBufferConfig | None = None
    #: Extra data sets by name, e.g. ``sft_dataset`` mixed into RL batches by ``mix``/``mix_chord``.
    auxiliary_buffers: dict[str, ExperienceBufferConfig] = field(default_factory=dict)


@dataclass
class BufferConfig:
    """Batches, epochs and the buffers."""

    #: Tasks per explorer step.
    batch_size: int = 1
    #: Experiences per training step, taken in whole tasks (as many as fit, at least one); 0: ``batch_size`` whole
    #: tasks per step (``batch_size * algorithm.repeat_times`` experiences when each rollout is one experience).
    train_batch_size: int = 0
    #: Passes over the training task set (or the SFT/DPO data set).
    total_epochs: int = 1
    #: Stop after this many steps; None: run all epochs.
    total_steps: int | None = None
    #: Explorer input.
    explorer_input: ExplorerInput = field(default_factory=ExplorerInput)
    #: Trainer input.
    trainer_input: TrainerInput = field(default_factory=TrainerInput)
