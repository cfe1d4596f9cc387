"""``model``: the policy model, its lengths and default sampling (upstream Trinity-RFT's section)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trinity.common.config.schema.fields import inert, refused


@dataclass
class TinyModelConfig:
    """(trinity-rft) A small causal LM built offline when ``model.model_path`` does not exist yet."""

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
    #: A vision-language model (Qwen2.5-VL's layout, a one-block vision tower) instead of a text-only one.
    vision: bool = False


@dataclass
class LoraConfig:
    """A LoRA adapter trained instead of the full policy (upstream's ``model.lora_configs`` entry)."""

    #: The adapter's name (upstream names the vLLM LoRA request with it).
    name: str | None = None
    #: A PEFT adapter folder to start from (``adapter_config.json`` + weights); None: a fresh adapter.
    path: str | None = None
    #: Name of the base model for vLLM's LoRA requests.
    base_model_name: str | None = inert(None, "the LoRA slot serves the run's own base model")
    #: Rank of the adapter matrices.
    lora_rank: int = 32
    #: Scale numerator: the update is ``lora_alpha / lora_rank * B @ A``.
    lora_alpha: int = 32
    #: Adapter dtype in vLLM.
    lora_dtype: str = inert("auto", "adapters train in float32 like the rest of the trainer's master weights")
    #: Modules that get an adapter: ``all-linear`` (every linear layer but the output head), or module names.
    target_modules: str | list[str] = "all-linear"
    #: Modules excluded from ``target_modules`` (names or a regular expression).
    exclude_modules: str | list[str] | None = None
    #: Upstream's mark of an adapter it wrote itself.
    is_dummy: bool = inert(False, "upstream sets it itself; here a missing path means a fresh adapter")


@dataclass
class TinkerConfig:
    """Upstream's Tinker service backend (accepted in a config; trinity-rft does not implement it)."""

    #: Train and sample through the Tinker service.
    enable: bool = refused(False, "the Tinker service is not supported; train locally (remove model.tinker)")
    #: LoRA rank of the Tinker model.
    rank: int = 16
    #: Seed.
    seed: int | None = None
    #: Train the MLP weights.
    train_mlp: bool = True
    #: Train the attention weights.
    train_attn: bool = True
    #: Train the unembedding.
    train_unembed: bool = True
    #: Service URL.
    base_url: str | None = None


@dataclass
class ExternalModelConfig:
    """An OpenAI-compatible endpoint evaluated in mode ``bench`` instead of a local model (upstream)."""

    #: Evaluate the external endpoint instead of a local model (mode bench only).
    enable: bool = False
    #: Environment variable holding the endpoint URL.
    base_url_env: str = "OPENAI_BASE_URL"
    #: Environment variable holding the API key.
    api_key_env: str = "OPENAI_API_KEY"
    #: Model name at the endpoint.
    model_name: str | None = None


@dataclass
class ModelConfig:
    """The policy model and how it samples by default."""

    #: Hugging Face model folder (a hub id works only where the hub is reachable).
    model_path: str = ""
    #: Allow the model's own code (``transformers`` ``trust_remote_code``).
    trust_remote_code: bool = False
    #: Critic (value model) folder for PPO; default: ``model_path``.
    critic_model_path: str = ""
    #: A Jinja chat template replacing the tokenizer's.
    custom_chat_template: str | None = None
    #: File holding a Jinja chat template (wins over ``custom_chat_template``).
    chat_template_path: str | None = None
    #: Default sampling temperature of rollouts.
    temperature: float = 1.0
    #: Default nucleus sampling.
    top_p: float = 1.0
    #: Default top-k; -1 (or 0) disables it.
    top_k: int = -1
    #: Log-probs returned per token beyond the sampled one; 0: the sampled token's only (all that is recorded).
    logprobs: int = 0
    #: Context length (prompt + response); derived from the two below when unset.
    max_model_len: int | None = None
    #: Prompt tokens at most (prompts are truncated from the left when ``enable_prompt_truncation``).
    max_prompt_tokens: int | None = None
    #: New tokens per rollout at most.
    max_response_tokens: int | None = None
    #: New tokens per rollout at least (EOS is suppressed until then).
    min_response_tokens: int = 0
    #: Truncate prompts longer than ``max_prompt_tokens`` (else such a prompt fails its task).
    enable_prompt_truncation: bool = True
    #: Repetition penalty of rollouts (1.0: none).
    repetition_penalty: float = 1.0
    #: Passed to chat templates that know it (Qwen3); None leaves the template's default.
    enable_thinking: bool | None = None
    #: Train a LoRA adapter instead of the full policy (at most one; upstream's shape).
    lora_configs: list[LoraConfig] | None = None
    #: vLLM's sharding of LoRA computation.
    fully_sharded_loras: bool = inert(False, "a vllm engine's LoRA slot keeps vLLM's default sharding")
    #: vLLM's host cache of LoRA adapters.
    max_cpu_loras: int | None = inert(None, "a vllm engine holds one adapter, the policy's")
    #: RoPE scaling passed to the model config.
    rope_scaling: dict[str, Any] | None = None
    #: RoPE theta passed to the model config.
    rope_theta: float | None = None
    #: Upstream's Tinker service.
    tinker: TinkerConfig = field(default_factory=TinkerConfig)
    #: Upstream's external endpoint for bench.
    external_model: ExternalModelConfig = field(default_factory=ExternalModelConfig)
    #: (trinity-rft) When set and ``model_path`` does not exist, build a tiny model there first.
    tiny: TinyModelConfig | None = None

