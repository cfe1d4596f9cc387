"""One interface for workflows to call an engine, whether it is a Ray actor or an object in this process.

:class:`EngineClient` wraps an engine (an ``HFEngine``/``vllm`` Ray actor
handle, or any in-process object with the engine methods) and offers plain
blocking methods: ``chat``, ``generate``, ``generate_tokens``,
``model_version``, ``score_tokens`` and a local ``tokenizer``. The scheduler hands workflows a
client bound to the attempt's deadline: a call that would outlive it raises
:class:`TaskTimeoutError` (the Ray call is cancelled), and a call made after
the attempt was abandoned raises :class:`TaskCancelledError`.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch

from trinity.common.models.engine import Completion, SamplingParams

if TYPE_CHECKING:
    from trinity.common.experience import Experience
    from trinity.common.models.openai_api.history import RequestRecord


logger = logging.getLogger(__name__)


class TaskTimeoutError(TimeoutError):
    """An engine call did not finish before the task attempt's deadline."""


class TaskCancelledError(RuntimeError):
    """The task attempt was abandoned (timed out) while its workflow was still running."""


class EngineDeadError(RuntimeError):
    """The engine's actor is gone (its process died or was killed); no call to it can succeed."""

    def __init__(self, index: int, detail: str) -> None:
        super().__init__(f"engine {index} is dead: {detail}")
        #: Position of the engine in the client's engine list.
        self.index = index


class RolloutModel(Protocol):
    """What workflows use: the sampling half of an inference engine plus its tokenizer."""

    def chat(
        self, conversations: Sequence[Sequence[Mapping[str, str]]], params: SamplingParams
    ) -> list[list[Completion]]: ...

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]: ...

    def generate_tokens(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]: ...

    def model_version(self) -> int: ...

    def score_tokens(
        self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], temperature: float = 1.0
    ) -> list[torch.Tensor]: ...

    @property
    def tokenizer(self) -> Any: ...


def is_actor(engine: Any) -> bool:
    """Return True when ``engine`` is a Ray actor handle (without importing Ray when it is not loaded)."""
    if "ray" not in sys.modules:
        return False
    from ray.actor import ActorHandle

    return isinstance(engine, ActorHandle)


_TOKENIZERS: dict[str, Any] = {}
_TOKENIZERS_LOCK = threading.Lock()


def load_tokenizer(path: str) -> Any:
    """Return the tokenizer of folder ``path``, loaded once per process."""
    with _TOKENIZERS_LOCK:
        if path not in _TOKENIZERS:
            from transformers import AutoTokenizer

            _TOKENIZERS[path] = AutoTokenizer.from_pretrained(path)
        return _TOKENIZERS[path]


@dataclasses.dataclass
class EngineClient:
    """A blocking view of one engine for workflows; see the module docstring."""

    #: The engine: a Ray actor handle or an in-process object.
    engine: Any
    #: Tokenizer folder for :attr:`tokenizer` when the engine is an actor; empty: ask the engine (``describe()``).
    tokenizer_path: str = ""
    #: Index of the engine in the explorer's pool (for logs and metrics).
    index: int = 0
    #: ``time.monotonic()`` after which calls raise :class:`TaskTimeoutError`; None: no limit.
    deadline: float | None = None
    #: Set when the attempt is abandoned; calls then raise :class:`TaskCancelledError`.
    cancelled: threading.Event | None = None
    #: Facts learnt from the engine, shared by every bound copy.
    _facts: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    #: This copy's session on the engine's OpenAI API (its requests are recorded under it); new per bind.
    session: str = dataclasses.field(default="", repr=False)
    #: ``(name, size)`` of the burst of attempts this one was started with (see ``trinity.common.models.cohorts``).
    cohort: tuple[str, int] | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.remote = is_actor(self.engine)
        #: Whether this copy handed out an OpenAI client (its session may hold records).
        self.api_used = False
        #: Copies made by :meth:`fork` (their sessions are dropped with this one's).
        self.forks: list[EngineClient] = []
        #: Whether the next sampling call still has to join :attr:`cohort`.
        self._joins_cohort = self.cohort is not None

    def _sampling_call(self, method: str, *args: Any) -> Any:
        """Call sampling ``method``; the first such call of a copy in a cohort joins it (``in_cohort``)."""
        if self._joins_cohort:
            self._joins_cohort = False
            if "in_cohort" not in self._facts:
                self._facts["in_cohort"] = hasattr(self.engine, "in_cohort")
            if self._facts["in_cohort"]:
                assert self.cohort is not None
                return self.call("in_cohort", self.cohort[0], self.cohort[1], method, *args)
        return self.call(method, *args)

    def bind(self, deadline: float | None, cancelled: threading.Event | None = None,
             cohort: tuple[str, int] | None = None) -> EngineClient:
        """Return a client of the same engine whose calls respect ``deadline`` and ``cancelled`` (a new session).

        ``cohort``: the ``(name, size)`` of the attempts started with this one; its first sampling call joins it.
        """
        return dataclasses.replace(self, deadline=deadline, cancelled=cancelled, session=uuid.uuid4().hex,
                                   cohort=cohort)

    def fork(self) -> EngineClient:
        """Return a client of the same engine and deadline with an OpenAI API session of its own.

        Agents playing episodes side by side take one each, so each episode's
        requests are recorded apart; :meth:`drop_history` drops the forks' too.
        """
        child = dataclasses.replace(self, session=uuid.uuid4().hex, cohort=None)
        self.forks.append(child)
        return child

    def _check(self) -> None:
        if self.cancelled is not None and self.cancelled.is_set():
            raise TaskCancelledError("the task attempt was abandoned (timed out); this call is not made")
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise TaskTimeoutError("the task attempt ran past its timeout")

    def call(self, method: str, *args: Any) -> Any:
        """Call ``method`` of the engine with ``args`` and return its result, within the deadline."""
        self._check()
        if not self.remote:
            result = getattr(self.engine, method)(*args)
            self._check()
            return result
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        timeout = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        try:
            ref = getattr(self.engine, method).remote(*args)
            return ray.get(ref, timeout=timeout)
        except RayActorError as exc:
            raise EngineDeadError(self.index, type(exc).__name__) from exc
        except GetTimeoutError:
            try:
                ray.cancel(ref)
            except Exception:  # noqa: BLE001 - best effort: a running actor call may not be cancellable
                pass
            raise TaskTimeoutError(f"engine {self.index}: {method} did not finish within the task timeout") from None

    def chat(
        self, conversations: Sequence[Sequence[Mapping[str, str]]], params: SamplingParams
    ) -> list[list[Completion]]:
        """Sample completions of chat conversations (see ``InferenceEngine.chat``)."""
        return self._sampling_call(  # type: ignore[no-any-return]
            "chat", [[dict(m) for m in c] for c in conversations], params)

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]:
        """Sample completions of raw prompts (see ``InferenceEngine.generate``)."""
        return self._sampling_call("generate", list(prompts), params)  # type: ignore[no-any-return]

    def generate_tokens(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        """Sample completions of prompts given as token ids (multi-turn rollouts)."""
        return self._sampling_call(  # type: ignore[no-any-return]
            "generate_tokens", [list(p) for p in prompts], params)

    def model_version(self) -> int:
        """Return the engine's weights version."""
        return int(self.call("model_version"))

    def score_tokens(
        self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], temperature: float = 1.0
    ) -> list[torch.Tensor]:
        """Return the engine's log-prob of each response token given its prompt (``HFEngine.score_tokens``).

        Raises NotImplementedError when the engine cannot score (the ``vllm``
        engine does not yet).
        """
        if not hasattr(self.engine, "score_tokens"):
            raise NotImplementedError(
                f"engine {self.index} ({type(self.engine).__name__}) cannot score tokens; only the hf engine can "
                "(set engine_type: hf for this model)"
            )
        return self.call(  # type: ignore[no-any-return]
            "score_tokens", [list(p) for p in prompts], [list(r) for r in responses], float(temperature)
        )

    @property
    def tokenizer(self) -> Any:
        """The engine's tokenizer: the engine's own object in-process, else loaded here from its folder."""
        if not self.remote and hasattr(self.engine, "tokenizer"):
            return self.engine.tokenizer
        path = self.tokenizer_path or self._facts.get("tokenizer_path")
        if not path:
            path = self._facts["tokenizer_path"] = str(self.call("describe")["tokenizer_path"])
        return load_tokenizer(path)

    # ------------------------------------------------------------------ OpenAI API

    def openai_api(self) -> dict[str, Any]:
        """Return the engine's API facts (``url``, ``history``, ``model_names``); raises RuntimeError without one."""
        api = self._facts.get("openai_api")
        if api is None:
            api = self._facts["openai_api"] = self.call("describe").get("openai_api")
        if api is None:
            raise RuntimeError(
                f"engine {self.index} serves no OpenAI API; set explorer.rollout_model.enable_openai_api: true "
                "(or the auxiliary model's) in the config"
            )
        return dict(api)

    def _openai_kwargs(self) -> dict[str, Any]:
        api = self.openai_api()
        headers = {}
        if api["history"]:
            from trinity.common.models.openai_api.history import SESSION_HEADER

            headers[SESSION_HEADER] = self.session or uuid.uuid4().hex
            self.session = headers[SESSION_HEADER]
        timeout = None if self.deadline is None else max(1.0, self.deadline - time.monotonic())
        self.api_used = True
        return {"base_url": api["base_url"], "api_key": api.get("api_key", "EMPTY"), "default_headers": headers,
                "timeout": timeout, "max_retries": 0}

    def get_openai_client(self) -> Any:
        """Return an ``openai.OpenAI`` client of this engine's API (its ``model_path`` attribute names the model).

        With ``enable_history`` its requests are recorded for
        :meth:`extract_experience_from_history`; its timeout is what is left of
        the attempt's.
        """
        import openai

        client = openai.OpenAI(**self._openai_kwargs())
        client.model_path = self.openai_api()["model_names"][0]  # type: ignore[attr-defined]
        return client

    def get_openai_async_client(self) -> Any:
        """Return an ``openai.AsyncOpenAI`` client, as :meth:`get_openai_client`."""
        import openai

        client = openai.AsyncOpenAI(**self._openai_kwargs())
        client.model_path = self.openai_api()["model_names"][0]  # type: ignore[attr-defined]
        return client

    def history(self, clear: bool = True) -> list[RequestRecord]:
        """Return what this client's OpenAI clients received, in order; forget it when ``clear``.

        Raises RuntimeError when the engine records no history (``enable_history``
        is off) or when records were dropped for lack of room.
        """
        if not self.openai_api()["history"]:
            raise RuntimeError(
                "history recording is off; set explorer.rollout_model.enable_history: true in the config"
            )
        if not self.session:
            return []
        records, dropped = self.call("take_history", self.session, bool(clear))
        if dropped:
            raise RuntimeError(f"engine {self.index} kept {len(records)} records of this session and dropped "
                               f"{dropped}: a session holds 4096 at most; extract the history more often")
        return list(records)

    def extract_experience_from_history(self, clear: bool = True) -> list[Experience]:
        """Return one experience per completion this client's OpenAI clients received (see :meth:`history`)."""
        from trinity.common.workflows.history import experiences_from_records

        return experiences_from_records(self.history(clear))

    def drop_history(self) -> None:
        """Forget this session's records on the engine (the scheduler calls it when an attempt ends)."""
        for child in self.forks:
            child.drop_history()
        if not (self.api_used and self.session):
            return
        try:
            if self.remote:
                self.engine.drop_history.remote(self.session)  # nothing to wait for
            else:
                self.engine.drop_history(self.session)
        except Exception as exc:  # noqa: BLE001 - a dead engine holds no history any more
            logger.debug("dropping the history of session %s: %s", self.session, exc)

