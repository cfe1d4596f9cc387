"""``agentscope_react_workflow``: AgentScope's ReAct agent answers a task, asking the rollout engine's OpenAI API.

Upstream Trinity-RFT's AgentScope recipes (``examples/agentscope_react``)
name this workflow. Each episode builds an AgentScope (1.x) ``ReActAgent``
whose chat model is the episode's ``openai.AsyncOpenAI`` client of the
engine, asks it the task's question with a structured answer (a ``result``
field holding the solution, the final answer in ``\\boxed{}``) and rewards
the answer with the task type's reward. Every model call the agent made is
recorded by the engine and becomes an experience (``multi_step_grpo``), as
in :class:`~trinity.common.workflows.agent.AgentWorkflow`.

Workflow args: ``type`` (the task type, ``gsm8k``), ``max_iters`` (the
agent's reasoning-acting rounds, 10), ``experience_mode``. The reward is the
sum of the type's reward parts (for ``gsm8k``: ``math_boxed_reward``'s
``accuracy`` and ``format_score`` against the text after ``####``).

Config: ``enable_openai_api``, ``enable_history``, ``enable_auto_tool_choice``
and a ``tool_call_parser`` on the rollout model. AgentScope asks for its
structured answer with ``tool_choice: required``; the server parses the reply
for calls as with ``auto`` (it has no guided decoding to force one), and the
agent asks again when no call came. Needs ``pip install 'trinity-rft[agentscope]'``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trinity.common.models.engine import SamplingParams
from trinity.common.workflows.agent import AgentWorkflow, Episode
from trinity.common.workflows.base import Task, WorkflowError

#: What to install when AgentScope is missing.
INSTALL_HINT = "pip install 'trinity-rft[agentscope]' (AgentScope 1.x)"


def _gsm8k_reward(result: str, answer: Any) -> dict[str, float]:
    from trinity.common.rewards.math_rewards import math_boxed_reward

    truth = str(answer)
    truth = truth.split("####", 1)[1].strip() if "####" in truth else truth.strip()
    parts: dict[str, float] = math_boxed_reward(result, truth, with_think=False, format_score_coef=0.1)
    return parts


@dataclass(frozen=True)
class TaskType:
    """How the agent is prompted for one kind of task, and how its answer is rewarded."""

    #: The agent's system prompt.
    system_prompt: str
    #: What the ``result`` field of the structured answer asks for.
    result_description: str
    #: ``(result, task answer) -> reward parts``.
    reward: Callable[[str, Any], dict[str, float]]


TASK_TYPES: dict[str, TaskType] = {
    "gsm8k": TaskType(
        system_prompt=("You are an agent that solves math word problems. Work the problem out, then give the final "
                       "answer within \\boxed{}."),
        result_description="Your solution of the math problem, with the final answer in \\boxed{}, e.g. \\boxed{42}",
        reward=_gsm8k_reward,
    ),
}


def _drop_thinking_skips(record: logging.LogRecord) -> bool:
    # With a reasoning_parser the replies carry reasoning_content, which AgentScope keeps as a thinking block and
    # leaves out of its next request, warning on every call; that is what upstream's recipes want.
    return "Unsupported block type thinking" not in record.getMessage()


def _agentscope() -> Any:
    try:
        import agentscope
    except ImportError as exc:
        raise WorkflowError(f"agentscope_react_workflow needs AgentScope, which cannot be imported here "
                            f"({exc}); {INSTALL_HINT}") from None
    if not str(getattr(agentscope, "__version__", "0")).startswith("1."):
        raise WorkflowError(f"agentscope_react_workflow is written for AgentScope 1.x, found "
                            f"{agentscope.__version__}; {INSTALL_HINT}")
    library_logger = logging.getLogger("as")
    if _drop_thinking_skips not in library_logger.filters:
        library_logger.addFilter(_drop_thinking_skips)
    return agentscope


def answer_model(description: str) -> Any:
    """Return the pydantic model of the agent's structured answer: one ``result`` string."""
    from pydantic import BaseModel, Field, create_model

    return create_model("TaskAnswer", __base__=BaseModel, result=(str, Field(description=description)))


class AgentScopeReActWorkflow(AgentWorkflow):
    """AgentScope's ReAct agent on the engine's OpenAI API; see the module docstring."""

    uses_async_client = True

    def __init__(self, sampling: SamplingParams | None = None, *, type: str = "gsm8k",  # upstream names it type
                 max_iters: int = 10, experience_mode: str = "step") -> None:
        super().__init__(sampling, experience_mode=experience_mode, max_env_steps=max_iters)
        if type not in TASK_TYPES:
            raise WorkflowError(f"agentscope_react_workflow: task type {type!r} is not known; "
                                f"known: {', '.join(sorted(TASK_TYPES))} (workflow_args.type)")
        _agentscope()
        self.task_type = TASK_TYPES[type]
        self.max_iters = max_iters

    def run_episode(self, client: Any, model: str, task: Task, episode: int) -> Episode:
        """Ask the ReAct agent ``task``'s question and reward its structured answer."""
        return asyncio.run(self._episode(client, model, task))

    async def _episode(self, client: Any, model: str, task: Task) -> Episode:
        from agentscope.agent import ReActAgent
        from agentscope.formatter import OpenAIChatFormatter
        from agentscope.message import Msg
        from agentscope.model import OpenAIChatModel

        chat_model = OpenAIChatModel(model_name=model, api_key="EMPTY", stream=False,
                                     generate_kwargs=self.request_options(task))
        chat_model.client = client  # the engine's client: its requests are recorded as the episode's history
        agent = ReActAgent(name="react_agent", sys_prompt=self.task_type.system_prompt, model=chat_model,
                           formatter=OpenAIChatFormatter(), max_iters=self.max_iters)
        agent.set_console_output_enabled(False)
        try:
            reply = await agent.reply(Msg("user", str(task.prompt), role="user"),
                                      structured_model=answer_model(self.task_type.result_description))
        finally:
            await client.close()
        result = str((reply.metadata or {}).get("result", ""))
        parts = self.task_type.reward(result, task.answer)
        memory = len(await agent.memory.get_memory())
        return Episode(float(sum(parts.values())), {
            "answer": result,
            "metrics": {**parts, "react_memory_length": float(memory), "answered": float(bool(result))},
        })
