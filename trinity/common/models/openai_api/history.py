"""What an engine's API server records of the requests it serves, per client session.

A client that sends the ``X-Trinity-Session`` header (every client a
workflow gets from ``engine.get_openai_client()`` does) has each completion
it receives recorded as a :class:`RequestRecord`: the exact prompt and
response token ids, the response's log-probs and the weights version. The
workflow turns them into experiences (:mod:`trinity.common.workflows.agent`)
without re-tokenising anything. Requests without the header are served and
not recorded.

The book is bounded: at most :attr:`HistoryBook.max_sessions` sessions (the
oldest untouched one is dropped first, with a warning) and
:attr:`HistoryBook.max_records` records per session (further ones are
counted in ``dropped`` and never silently lost: :meth:`HistoryBook.take`
reports the count).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch

from trinity.common.array_state import arrays_to_tensors, tensors_to_arrays

logger = logging.getLogger(__name__)

#: The request header naming a client's session.
SESSION_HEADER = "X-Trinity-Session"


@dataclass
class RequestRecord:
    """One completion served to a session: one choice of one request."""

    #: ``chat`` or ``completion``.
    kind: str
    #: Id of the request (shared by its ``n`` choices).
    request_id: str
    #: Index of the choice within the request.
    choice: int
    #: Prompt token ids exactly as the model saw them (chat template applied).
    prompt_tokens: torch.Tensor
    #: Generated token ids (EOS kept when generated).
    response_tokens: torch.Tensor
    #: Policy log-prob of each response token (``log_softmax(logits / temperature)``).
    logprobs: torch.Tensor
    #: Weights version that produced the response.
    model_version: int
    #: ``stop``, ``length`` or ``tool_calls``.
    finish_reason: str
    #: The reply text (what ``message.content`` would hold without tool-call parsing).
    text: str
    #: The request's messages (chat) or prompt text (completion), as sent.
    request: Any = None
    #: Tool calls parsed from the reply (OpenAI ``tool_calls`` items).
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    #: Why the reply, though it looked like a tool call, could not be parsed; None otherwise.
    tool_call_error: str | None = None
    #: Sampling temperature of the request (the log-probs are at this temperature; 0 is greedy, scored at 1).
    temperature: float = 1.0
    #: Messages of the chat request; with ``context_key`` it lets a later request of the session that continues
    #: this conversation be prompted with these tokens (:mod:`~trinity.common.models.openai_api.continuation`).
    message_count: int = 0
    #: Digest of the request's messages followed by this reply, and its tools ("" for completions).
    context_key: str = ""
    #: The reply's thinking, split off by the API's reasoning parser (None without one, or none thought).
    reasoning: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickle state: tensors as numpy arrays (cheaper across Ray)."""
        return tensors_to_arrays(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`__getstate__`."""
        self.__dict__.update(arrays_to_tensors(state))


@dataclass
class SessionHistory:
    """The records of one session, and how many did not fit."""

    records: list[RequestRecord] = field(default_factory=list)
    dropped: int = 0


class HistoryBook:
    """Thread-safe store of :class:`RequestRecord` by session (see the module docstring)."""

    def __init__(self, max_sessions: int = 4096, max_records: int = 4096) -> None:
        self.max_sessions = max_sessions
        self.max_records = max_records
        self._sessions: OrderedDict[str, SessionHistory] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, session: str, records: list[RequestRecord]) -> None:
        """Append ``records`` to ``session`` (created when new)."""
        with self._lock:
            book = self._sessions.get(session)
            if book is None:
                if len(self._sessions) >= self.max_sessions:
                    oldest, gone = self._sessions.popitem(last=False)
                    logger.warning(
                        "request history: %d sessions held; dropped the oldest, %r (%d records never taken)",
                        self.max_sessions, oldest, len(gone.records),
                    )
                book = self._sessions[session] = SessionHistory()
            else:
                self._sessions.move_to_end(session)
            room = self.max_records - len(book.records)
            book.records.extend(records[: max(0, room)])
            book.dropped += max(0, len(records) - max(0, room))

    def take(self, session: str, clear: bool = True) -> SessionHistory:
        """Return ``session``'s records (empty when unknown), removing them when ``clear``."""
        with self._lock:
            book = self._sessions.pop(session, None) if clear else self._sessions.get(session)
            if book is None:
                return SessionHistory()
            return SessionHistory(list(book.records), book.dropped)

    def peek(self, session: str) -> list[RequestRecord]:
        """Return ``session``'s records so far (empty when unknown), keeping them."""
        with self._lock:
            book = self._sessions.get(session)
            return list(book.records) if book is not None else []

    def drop(self, session: str) -> None:
        """Forget ``session``."""
        with self._lock:
            self._sessions.pop(session, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
