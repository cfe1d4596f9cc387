"""An OpenAI-compatible HTTP server in front of one rollout engine.

:class:`ApiServer` serves ``GET /health``, ``GET /v1/models``,
``POST /v1/chat/completions`` and ``POST /v1/completions`` (Starlette on
uvicorn, in a thread of the engine's process) on top of the engine contract:
``chat_prompt_tokens`` (the chat template, with ``tools``), ``generate_tokens``
and the tokenizer. Concurrent requests reach the engine from a pool of
threads, so the engine batches them as it batches concurrent runners.

Beyond the OpenAI fields, each response carries what a trainer needs:
``prompt_token_ids`` (top level, per choice for completions), ``token_ids``
and ``model_version`` per choice (the names vLLM uses for the first two).
Requests with the ``X-Trinity-Session`` header are recorded in the engine's
:class:`~trinity.common.models.openai_api.history.HistoryBook`.

Streaming sends the finished completion as server-sent events, one chunk per
token (the ``hf`` engine samples a whole batch before it returns, so the
first chunk comes when the completion is done). Errors are OpenAI error
objects: 400 for a malformed request or one past the context length, 404 for
an unknown model, 500 (message only, the traceback goes to the engine's log)
for a failure of the engine.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from trinity.common.models.engine import Completion, SamplingParams
from trinity.common.models.openai_api.continuation import context_key, continued_prompt, reply_message
from trinity.common.models.openai_api.history import SESSION_HEADER, HistoryBook, RequestRecord
from trinity.common.models.openai_api.protocol import (
    ApiError,
    ChatRequest,
    CompletionRequest,
    decode_body,
    read_chat_request,
    read_completion_request,
)
from trinity.common.models.openai_api.reasoning import REASONING_PARSERS, SplitReply
from trinity.common.models.openai_api.tool_calls import TOOL_CALL_PARSERS, ParsedReply

logger = logging.getLogger(__name__)

#: Threads that may wait in the engine at once (the engine batches what arrives together).
REQUEST_THREADS = 128
#: What a route's work returns: the JSON payload, or the events to stream.
Reply = tuple[dict[str, Any] | None, Iterator[dict[str, Any]] | None]


@dataclass
class ApiSettings:
    """How an engine's API server behaves (from the engine group's config)."""

    #: Model names requests may give (``/v1/models`` lists them; the first is the model folder).
    model_names: tuple[str, ...]
    #: Prompt tokens at most (longer prompts get a 400: the engine would truncate them).
    max_prompt_tokens: int
    #: Prompt plus new tokens at most.
    context_length: int
    #: ``max_tokens`` when a request gives none (cut to what the context leaves).
    default_max_tokens: int
    #: ``tool_choice: auto`` allowed (``enable_auto_tool_choice``).
    auto_tool_choice: bool = False
    #: Registry name of the tool-call parser, or None.
    tool_call_parser: str | None = None
    #: Log each request (``enable_log_requests``).
    log_requests: bool = False
    #: Registry name of the reasoning parser, or None.
    reasoning_parser: str | None = None


def _error_response(error: ApiError) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse(error.body(), status_code=error.status)


class ApiServer:
    """The OpenAI-compatible server of one engine; see the module docstring."""

    def __init__(self, engine: Any, settings: ApiSettings, history: HistoryBook) -> None:
        self.engine = engine
        self.settings = settings
        self.history = history
        if settings.tool_call_parser is not None:
            self._parser: Callable[[str], ParsedReply] | None = TOOL_CALL_PARSERS.get(settings.tool_call_parser)
        else:
            self._parser = None
        self._split: Callable[[str], SplitReply] | None = (
            REASONING_PARSERS.get(settings.reasoning_parser) if settings.reasoning_parser is not None else None)
        self._pool = ThreadPoolExecutor(max_workers=REQUEST_THREADS, thread_name_prefix="openai-api")
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.url = ""
        #: Completion requests answered (``/health`` reports it).
        self.served = 0
        self._served_lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle

    def start(self, host: str, port: int = 0, timeout_s: float = 30.0) -> str:
        """Bind ``host:port`` (0: a free port), serve in a thread, and return the base URL (``http://host:port``)."""
        import uvicorn

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            raise OSError(f"the OpenAI API server cannot bind {host}:{port}: {exc.strerror or exc}") from None
        sock.listen(1024)
        self._socket = sock
        config = uvicorn.Config(self.app(), log_level="warning", lifespan="off", access_log=False,
                                timeout_graceful_shutdown=5)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="openai-api-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the OpenAI API server on {host}:{port} did not start")
            time.sleep(0.01)
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        self.url = f"http://{shown}:{bound}"
        return self.url

    def stop(self) -> None:
        """Stop serving and release the port (waits for the server thread)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
        if self._socket is not None:
            self._socket.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._server = self._thread = self._socket = None

    # ------------------------------------------------------------------ routes

    def app(self) -> Any:
        """Return the Starlette application."""
        from starlette.applications import Starlette
        from starlette.routing import Route

        return Starlette(routes=[
            Route("/health", self._health, methods=["GET"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/chat/completions", self._guarded(self._chat), methods=["POST"]),
            Route("/v1/completions", self._guarded(self._completions), methods=["POST"]),
        ])

    async def _health(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        return JSONResponse({"status": "ok", **self.engine.served_weights(), "requests": self.served})

    async def _models(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        created = int(time.time())
        served = self.engine.served_weights()  # beyond OpenAI's fields, as vLLM adds its own: what is served
        return JSONResponse({"object": "list", "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "trinity-rft",
             "root": self.settings.model_names[0], **served}
            for name in self.settings.model_names
        ]})

    def _guarded(self, handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """Wrap a route: ApiError becomes its error object; anything else a 500 with its message, never a trace."""

        async def guarded(request: Any) -> Any:
            try:
                return await handler(request)
            except ApiError as error:
                return _error_response(error)
            except Exception as exc:  # the client gets the message, the log gets the traceback
                logger.exception("OpenAI API request to %s failed", request.url.path)
                return _error_response(ApiError(500, f"the engine failed: {type(exc).__name__}: {exc}",
                                                kind="internal_error"))

        return guarded

    def _check_model(self, model: str | None) -> str:
        if model is None:
            raise ApiError(400, "model is required; GET /v1/models lists the names served", param="model")
        if model not in self.settings.model_names:
            raise ApiError(404, f"the model {model!r} is not served here; this server serves "
                           f"{', '.join(repr(n) for n in self.settings.model_names)}",
                           param="model", code="model_not_found")
        return model

    def _budget(self, prompt_tokens: int, params: SamplingParams, explicit: bool, what: str, param: str
                ) -> SamplingParams:
        """Check a prompt against the context length; return ``params`` with ``max_tokens`` settled."""
        limit = self.settings.context_length
        if prompt_tokens > self.settings.max_prompt_tokens:
            raise ApiError(400, f"{what} has {prompt_tokens} tokens, more than this engine's "
                           f"{self.settings.max_prompt_tokens} prompt tokens (model.max_prompt_tokens); shorten it",
                           param=param,
                           code="context_length_exceeded")
        room = limit - prompt_tokens
        if explicit and params.max_tokens > room:
            raise ApiError(400, f"this model's context length is {limit} tokens; {what} has {prompt_tokens} and "
                           f"max_tokens asks for {params.max_tokens} more; lower max_tokens to {room} at most",
                           param="max_tokens", code="context_length_exceeded")
        if not explicit:
            params = SamplingParams(**{**params.__dict__, "max_tokens": max(1, min(params.max_tokens, room))})
        return params

    def _generate(self, prompts: list[list[int]], params: SamplingParams, state: dict[str, bool]
                  ) -> list[list[Completion]]:
        """Sample (in a pool thread); hands over the request :meth:`_dispatch` announced to the engine."""
        if state.get("incoming"):
            state["incoming"] = False
            result: list[list[Completion]] = self.engine.generate_tokens(prompts, params, incoming=True)
        else:
            result = self.engine.generate_tokens(prompts, params)
        return result

    def _top_logprobs(self, prompt: list[int], completion: Completion, k: int, temperature: float
                      ) -> list[list[tuple[int, float]]]:
        scorer = getattr(self.engine, "top_logprobs", None)
        if scorer is None:
            raise ApiError(400, f"top_logprobs is not supported by the {type(self.engine).__name__} engine",
                           param="top_logprobs")
        result: list[list[tuple[int, float]]] = scorer(prompt, completion.response_tokens.tolist(), k, temperature)
        return result

    def _token_text(self, token: int) -> str:
        return str(self.engine.tokenizer.decode([token]))

    # ------------------------------------------------------------------ chat

    async def _chat(self, request: Any) -> Any:
        return await self._dispatch(request, self._chat_sync)

    def _chat_sync(self, body: dict[str, Any], session: str | None, state: dict[str, bool]) -> Reply:
        chat = read_chat_request(body, self.settings.default_max_tokens)
        model = self._check_model(chat.model)
        parse = chat.tools is not None and chat.tool_choice == "auto"
        if parse and (not self.settings.auto_tool_choice or self._parser is None):
            raise ApiError(400, "tool_choice \"auto\" needs explorer.rollout_model.enable_auto_tool_choice: true and "
                           "a tool_call_parser (e.g. hermes) in the config", param="tool_choice")
        try:
            prompt = self._chat_prompt(chat, session)
        except Exception as exc:  # noqa: BLE001 - a template that cannot render these messages is the client's to fix
            raise ApiError(400, f"the chat template cannot render these messages: {type(exc).__name__}: {exc}",
                           param="messages") from None
        explicit = body.get("max_tokens") is not None or body.get("max_completion_tokens") is not None
        params = self._budget(len(prompt), chat.params, explicit, "the messages' prompt", "messages")
        if self.settings.log_requests:
            logger.info("chat request: %d prompt tokens, n=%d, max_tokens=%d, tools=%d", len(prompt), params.n,
                        params.max_tokens, len(chat.tools or ()))
        completions = self._generate([prompt], params, state)[0]
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        splits = [self._split(c.text) if self._split is not None else SplitReply(None, c.text) for c in completions]
        parsed = [self._parser(s.content) if parse and self._parser is not None else ParsedReply(s.content)
                  for s in splits]
        tops = [self._top_logprobs(prompt, c, chat.top_logprobs, params.temperature) if chat.top_logprobs
                else None for c in completions]
        self._record(session, [RequestRecord(
            kind="chat", request_id=request_id, choice=i, prompt_tokens=c.prompt_tokens,
            response_tokens=c.response_tokens, logprobs=c.logprobs, model_version=c.model_version,
            finish_reason=self._finish_reason(c, p), text=c.text, request=chat.raw_messages,
            tool_calls=[t.as_openai() for t in p.tool_calls], tool_call_error=p.error,
            temperature=params.temperature, message_count=len(chat.messages),
            context_key=context_key([*chat.messages, reply_message(p.content, [t.as_openai() for t in p.tool_calls])],
                                    chat.tools) if session else "",
            reasoning=s.reasoning,
        ) for i, (c, p, s) in enumerate(zip(completions, parsed, splits, strict=True))])
        usage = self._usage(len(prompt), completions)
        if chat.stream:
            return None, self._chat_events(request_id, model, chat, completions=completions, parsed=parsed,
                                           tops=tops, usage=usage, splits=splits)
        choices = []
        for i, (c, p, top, split) in enumerate(zip(completions, parsed, tops, splits, strict=True)):
            message: dict[str, Any] = {"role": "assistant", "content": p.content}
            if self._split is not None:
                message["reasoning_content"] = split.reasoning
            if p.tool_calls:
                message["tool_calls"] = [t.as_openai() for t in p.tool_calls]
            choice: dict[str, Any] = {
                "index": i, "message": message, "finish_reason": self._finish_reason(c, p),
                "logprobs": {"content": self._chat_logprobs(c, top)} if chat.logprobs else None,
                "token_ids": c.response_tokens.tolist(), "model_version": c.model_version,
            }
            if p.error is not None:
                choice["tool_call_error"] = p.error
            choices.append(choice)
        return {
            "id": request_id, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": usage, "prompt_token_ids": prompt,
        }, None

    def _chat_prompt(self, chat: ChatRequest, session: str | None) -> list[int]:
        """Return the prompt tokens of ``chat``: continuing the session's recorded turn it extends, else rendered."""
        if session:
            continued = continued_prompt(self.engine, self.history.peek(session), chat.messages, chat.tools)
            if continued is not None:
                return continued
        return list(self.engine.chat_prompt_tokens(chat.messages, tools=chat.tools))

    @staticmethod
    def _finish_reason(completion: Completion, parsed: ParsedReply) -> str:
        return "tool_calls" if parsed.tool_calls and completion.finish_reason == "stop" else completion.finish_reason

    @staticmethod
    def _usage(prompt_tokens: int, completions: Sequence[Completion]) -> dict[str, int]:
        generated = sum(len(c.response_tokens) for c in completions)
        return {"prompt_tokens": prompt_tokens, "completion_tokens": generated,
                "total_tokens": prompt_tokens + generated}

    def _chat_logprobs(self, completion: Completion, top: list[list[tuple[int, float]]] | None
                       ) -> list[dict[str, Any]]:
        entries = []
        for k, (token, logprob) in enumerate(zip(completion.response_tokens.tolist(),
                                                 completion.logprobs.tolist(), strict=True)):
            text = self._token_text(token)
            entries.append({
                "token": text, "logprob": logprob, "bytes": list(text.encode()),
                "top_logprobs": [{"token": self._token_text(t), "logprob": lp,
                                  "bytes": list(self._token_text(t).encode())} for t, lp in top[k]]
                if top is not None else [],
            })
        return entries

    def _deltas(self, completion: Completion, content: str) -> list[str]:
        """Split ``content`` into per-token pieces (a piece waits while its token ends inside a character)."""
        ids = completion.response_tokens.tolist()
        pieces, sent = [], 0
        for k in range(1, len(ids) + 1):
            text = str(self.engine.tokenizer.decode(ids[:k], skip_special_tokens=True))
            end = min(len(text), len(content))
            if text.endswith("\ufffd") and k < len(ids):
                pieces.append("")
                continue
            pieces.append(content[sent:end] if end > sent else "")
            sent = max(sent, end)
        if sent < len(content):
            pieces.append(content[sent:])
        return pieces

    def _chat_events(self, request_id: str, model: str, chat: ChatRequest, *, completions: list[Completion],
                     parsed: list[ParsedReply], tops: list[Any], usage: dict[str, int],
                     splits: list[SplitReply]) -> Iterator[dict[str, Any]]:
        created = int(time.time())

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
            return {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": choices, **extra}

        for i, (c, p, top) in enumerate(zip(completions, parsed, tops, strict=True)):
            yield chunk([{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                          "finish_reason": None}])
            logprobs = self._chat_logprobs(c, top) if chat.logprobs else None
            if self._split is not None:  # thinking and answer in one delta each, the log-probs with the answer
                if splits[i].reasoning:
                    yield chunk([{"index": i, "delta": {"reasoning_content": splits[i].reasoning}, "logprobs": None,
                                  "finish_reason": None}])
                delta: dict[str, Any] = {"content": p.content or ""}
                if p.tool_calls:
                    delta["tool_calls"] = [{"index": j, **t.as_openai()} for j, t in enumerate(p.tool_calls)]
                yield chunk([{"index": i, "delta": delta,
                              "logprobs": {"content": logprobs} if logprobs is not None else None,
                              "finish_reason": None}])
            elif p.tool_calls:
                if p.content:
                    yield chunk([{"index": i, "delta": {"content": p.content}, "logprobs": None,
                                  "finish_reason": None}])
                yield chunk([{"index": i, "delta": {"tool_calls": [
                    {"index": j, **t.as_openai()} for j, t in enumerate(p.tool_calls)]},
                    "logprobs": {"content": logprobs} if logprobs is not None else None, "finish_reason": None}])
            else:
                for k, piece in enumerate(self._deltas(c, p.content or "")):
                    entry = None
                    if logprobs is not None:
                        entry = {"content": logprobs[k : k + 1]}
                    yield chunk([{"index": i, "delta": {"content": piece}, "logprobs": entry, "finish_reason": None}])
            yield chunk([{"index": i, "delta": {}, "logprobs": None, "finish_reason": self._finish_reason(c, p),
                          "token_ids": c.response_tokens.tolist(), "model_version": c.model_version}])
        if chat.include_usage:
            yield chunk([], usage=usage)

    # ------------------------------------------------------------------ completions

    async def _completions(self, request: Any) -> Any:
        return await self._dispatch(request, self._completions_sync)

    def _completions_sync(self, body: dict[str, Any], session: str | None, state: dict[str, bool]) -> Reply:
        req = read_completion_request(body, self.settings.default_max_tokens)
        model = self._check_model(req.model)
        tokenizer = self.engine.tokenizer
        prompts = [list(tokenizer(p, add_special_tokens=True)["input_ids"]) if isinstance(p, str) else list(p)
                   for p in req.prompts]
        if any(not p for p in prompts):
            raise ApiError(400, "a prompt tokenizes to no tokens; give some text", param="prompt")
        explicit = body.get("max_tokens") is not None
        params = req.params
        for number, prompt in enumerate(prompts):
            params = self._budget(len(prompt), params, explicit, f"prompt {number}", "prompt")
        if self.settings.log_requests:
            logger.info("completion request: %d prompts, n=%d, max_tokens=%d", len(prompts), params.n,
                        params.max_tokens)
        results = self._generate(prompts, params, state)
        request_id = f"cmpl-{uuid.uuid4().hex}"
        flat = [(p, c) for p, per_prompt in enumerate(results) for c in per_prompt]
        self._record(session, [RequestRecord(
            kind="completion", request_id=request_id, choice=i, prompt_tokens=c.prompt_tokens,
            response_tokens=c.response_tokens, logprobs=c.logprobs, model_version=c.model_version,
            finish_reason=c.finish_reason, text=c.text, request=req.prompts[p], temperature=params.temperature,
        ) for i, (p, c) in enumerate(flat)])
        tops = [self._top_logprobs(prompts[p], c, req.logprobs, params.temperature) if req.logprobs else None
                for p, c in flat]
        usage = self._usage(sum(len(p) for p in prompts), [c for _, c in flat])
        choices = [{
            "index": i, "text": c.text, "finish_reason": c.finish_reason,
            "logprobs": self._completion_logprobs(c, top) if req.logprobs is not None else None,
            "prompt_token_ids": prompts[p], "token_ids": c.response_tokens.tolist(), "model_version": c.model_version,
        } for i, ((p, c), top) in enumerate(zip(flat, tops, strict=True))]
        if req.stream:
            return None, self._completion_events(request_id, model, req, choices=choices, flat=flat, usage=usage)
        return {"id": request_id, "object": "text_completion", "created": int(time.time()),
                "model": model, "choices": choices, "usage": usage}, None

    def _completion_logprobs(self, completion: Completion, top: list[list[tuple[int, float]]] | None
                             ) -> dict[str, Any]:
        tokens = [self._token_text(t) for t in completion.response_tokens.tolist()]
        offsets, at = [], 0
        for text in tokens:
            offsets.append(at)
            at += len(text)
        return {
            "tokens": tokens, "token_logprobs": completion.logprobs.tolist(), "text_offset": offsets,
            "top_logprobs": [{self._token_text(t): lp for t, lp in row} for row in top] if top is not None else None,
        }

    def _completion_events(self, request_id: str, model: str, req: CompletionRequest, *,
                           choices: list[dict[str, Any]], flat: list[tuple[int, Completion]],
                           usage: dict[str, int]) -> Iterator[dict[str, Any]]:
        created = int(time.time())
        for choice, (_, c) in zip(choices, flat, strict=True):
            for piece in self._deltas(c, c.text):
                yield {"id": request_id, "object": "text_completion", "created": created, "model": model,
                       "choices": [{"index": choice["index"], "text": piece, "logprobs": None,
                                    "finish_reason": None}]}
            yield {"id": request_id, "object": "text_completion", "created": created, "model": model,
                   "choices": [{**choice, "text": ""}]}
        if req.include_usage:
            yield {"id": request_id, "object": "text_completion", "created": created, "model": model,
                   "choices": [], "usage": usage}

    # ------------------------------------------------------------------ plumbing

    def _record(self, session: str | None, records: list[RequestRecord]) -> None:
        if session:
            self.history.add(session, records)

    async def _dispatch(self, request: Any, work: Callable[[dict[str, Any], str | None, dict[str, bool]], Reply]
                        ) -> Any:
        """Read the body here, do the rest in a pool thread (the event loop stays free to accept requests).

        The request is announced to an engine that batches (``note_incoming``)
        before the thread starts, so a batch forming meanwhile waits for it.
        """
        from starlette.responses import JSONResponse, StreamingResponse

        body = decode_body(await request.body())
        session = request.headers.get(SESSION_HEADER)
        note = getattr(self.engine, "note_incoming", None)
        if note is not None:
            note()
        state = {"incoming": note is not None}

        def run() -> Reply:
            try:
                payload, events = work(body, session, state)
                return payload, None if events is None else iter(list(events))  # decoded here, not in the loop
            finally:
                if state["incoming"]:  # not handed over: failed before sampling
                    self.engine.forget_incoming()

        payload, events = await asyncio.get_running_loop().run_in_executor(self._pool, run)
        with self._served_lock:
            self.served += 1
        if events is None:
            return JSONResponse(payload)

        async def stream() -> AsyncIterator[bytes]:
            for event in events:
                yield f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")
