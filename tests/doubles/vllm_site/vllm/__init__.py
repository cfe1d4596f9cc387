"""A CPU test double of the part of vLLM's public V1 API that trinity's ``vllm`` engine uses.

It is a real (small, slow) engine: it loads a Hugging Face causal LM with
transformers and samples tokens with the requested parameters. See README.md
next to this package for what it models and what it does not.
"""

from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs
from vllm.inputs import TextPrompt, TokensPrompt
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import RequestOutputKind, SamplingParams

__version__ = "0.11.0+trinity.double"

#: Marks this package as the test double (real vLLM has no such attribute).
IS_TRINITY_DOUBLE = True

__all__ = [
    "IS_TRINITY_DOUBLE",
    "AsyncEngineArgs",
    "CompletionOutput",
    "EngineArgs",
    "RequestOutput",
    "RequestOutputKind",
    "SamplingParams",
    "TextPrompt",
    "TokensPrompt",
    "__version__",
]
