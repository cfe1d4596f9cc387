"""The OpenAI API half of an engine: start its server, hand out what it recorded.

:class:`ServesOpenAI` is mixed into every engine class. An engine built with
``openai_api`` options (from :func:`api_options`, when the engine group's
config sets ``enable_openai_api``) starts an
:class:`~trinity.common.models.openai_api.server.ApiServer` in its own
process; its methods are remote methods of the engine actor.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trinity.common.models.openai_api.history import HistoryBook, RequestRecord

logger = logging.getLogger(__name__)


def node_address() -> str:
    """Return this node's address for other nodes (Ray's node IP), or the loopback outside Ray."""
    import sys

    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
    return "127.0.0.1"


def api_options(engine: Any, index: int) -> dict[str, Any] | None:
    """Return engine ``index``'s ``openai_api`` constructor option from its group's plan (None: no API)."""
    api = engine.api
    if api is None:
        return None
    return {
        "host": api.host,
        "port": api.port + index if api.port else 0,
        "model_names": [engine.model_path, engine.name],
        "max_prompt_tokens": engine.max_prompt_tokens,
        "context_length": engine.max_model_len,
        "default_max_tokens": engine.max_response_tokens,
        "auto_tool_choice": api.auto_tool_choice,
        "tool_call_parser": api.tool_call_parser,
        "reasoning_parser": api.reasoning_parser,
        "log_requests": api.log_requests,
        "history": api.history,
    }


class ServesOpenAI:
    """The engine methods behind the OpenAI API (see the module docstring)."""

    _api_server: Any = None
    _api_history: HistoryBook | None = None
    _api_options: dict[str, Any] | None = None
    #: ``(version, description)`` of the weights a caller said it loaded (mode serve names the checkpoint).
    _served_weights: tuple[int, str] | None = None

    def mark_served_weights(self, version: int, description: str) -> None:
        """Record what the weights of ``version`` are (e.g. ``checkpoint step-6 (<folder>)``), for ``/v1/models``."""
        self._served_weights = (int(version), description)

    def served_weights(self) -> dict[str, Any]:
        """Return ``{"model_version", "weights"}``: the weights version and what those weights are, in words."""
        version = int(self.model_version())  # type: ignore[attr-defined]
        if self._served_weights is not None and self._served_weights[0] == version:
            weights = self._served_weights[1]
        elif version == 0:
            weights = f"the model folder {getattr(self, 'model_path', '')}".rstrip()
        else:
            weights = f"the trainer's weights of step {version}, synchronised by the run"
        return {"model_version": version, "weights": weights}

    def start_openai_api(self, options: Mapping[str, Any]) -> str:
        """Start this engine's API server with ``options`` (see :func:`api_options`) and return its base URL."""
        from trinity.common.models.openai_api.history import HistoryBook
        from trinity.common.models.openai_api.server import ApiServer, ApiSettings

        self.stop_openai_api()
        settings = ApiSettings(
            model_names=tuple(dict.fromkeys(str(n) for n in options["model_names"])),
            max_prompt_tokens=int(options["max_prompt_tokens"]),
            context_length=int(options["context_length"]),
            default_max_tokens=int(options["default_max_tokens"]),
            auto_tool_choice=bool(options.get("auto_tool_choice", False)),
            tool_call_parser=options.get("tool_call_parser"),
            reasoning_parser=options.get("reasoning_parser"),
            log_requests=bool(options.get("log_requests", False)),
        )
        self._api_history = HistoryBook()
        self._api_options = dict(options)
        server = ApiServer(self, settings, self._api_history)
        url = server.start(options.get("host") or node_address(), int(options.get("port") or 0))
        self._api_server = server
        logger.info("OpenAI-compatible API of %s at %s/v1", settings.model_names[0], url)
        return url

    def openai_api(self) -> dict[str, Any] | None:
        """Return ``{"url", "base_url", "history", "model_names"}`` of this engine's API, or None without one.

        ``url`` is the server (``/health``), ``base_url`` what OpenAI clients take (``url`` + ``/v1``).
        """
        if self._api_server is None or self._api_options is None:
            return None
        return {"url": self._api_server.url, "base_url": f"{self._api_server.url}/v1",
                "history": bool(self._api_options.get("history", False)),
                "model_names": list(self._api_server.settings.model_names)}

    def take_history(self, session: str, clear: bool = True) -> tuple[list[RequestRecord], int]:
        """Return the records of ``session`` and how many did not fit; forget them when ``clear``."""
        if self._api_history is None:
            return [], 0
        book = self._api_history.take(session, clear)
        return book.records, book.dropped

    def drop_history(self, session: str) -> None:
        """Forget what ``session`` was recorded as having received."""
        if self._api_history is not None:
            self._api_history.drop(session)

    def stop_openai_api(self) -> None:
        """Stop the API server (its port is released); no-op when none runs."""
        server, self._api_server = self._api_server, None
        if server is not None:
            server.stop()
