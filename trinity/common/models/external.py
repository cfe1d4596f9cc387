"""An auxiliary model served outside the run: an OpenAI-compatible endpoint (``engine_type: external``).

No engine starts for it. Workflows reach it as they reach an engine's API,
``self.auxiliary[name].get_openai_client()``; its base URL and key are read
from the environment variables the config names when the client is made (the
key never enters the run's plan, logs or records). Nothing it answers is
recorded or trained on.
"""

from __future__ import annotations

import os
from typing import Any

from trinity.common.config.plan.explorer import ExternalPlan


class ExternalEndpoint:
    """The engine-shaped stand-in for an external endpoint: it describes the endpoint and does nothing else."""

    def __init__(self, name: str, endpoint: ExternalPlan) -> None:
        self.name = name
        self.endpoint = endpoint

    def describe(self) -> dict[str, Any]:
        """Return what an engine's ``describe`` says, with the endpoint as its OpenAI API (no history)."""
        url = os.environ.get(self.endpoint.base_url_env, "").rstrip("/")
        if not url:
            raise RuntimeError(f"auxiliary model {self.name!r}: the environment variable "
                               f"{self.endpoint.base_url_env} (its endpoint's base URL) is not set in this process")
        return {
            "engine": "external",
            "model_path": self.endpoint.model_name,
            "openai_api": {"url": url.removesuffix("/v1"), "base_url": url, "history": False,
                           "model_names": [self.endpoint.model_name],
                           "api_key": os.environ.get(self.endpoint.api_key_env) or "EMPTY"},
        }

    def model_version(self) -> int:
        """Return 0: the run never changes the endpoint's weights."""
        return 0

    def device_assignments(self) -> list[dict[str, Any]]:
        """Return no workers: nothing of the run serves this model."""
        return []

    def _only_openai(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"auxiliary model {self.name!r} is an external endpoint: call it through "
            f"self.auxiliary[{self.name!r}].get_openai_client()"
        )

    chat = generate = generate_tokens = score_tokens = _only_openai

    def take_history(self, session: str, clear: bool = True) -> tuple[list[Any], int]:
        """Return nothing: an external endpoint's requests are not recorded."""
        return [], 0

    def drop_history(self, session: str) -> None:
        """Do nothing (nothing is recorded)."""

    def shutdown(self) -> None:
        """Do nothing: the endpoint is not the run's to stop."""
