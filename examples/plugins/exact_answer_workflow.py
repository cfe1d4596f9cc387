"""A workflow in upstream Trinity-RFT's shape (its developer guide's example), registered as ``exact_answer``.

    trinity run --config examples/quickstart/cpu.yaml --plugin-dir examples/plugins \
        --set buffer.explorer_input.default_workflow_type=exact_answer

Each task's ``repeat_times`` replies come from one chat call (``can_repeat``);
a reply earns 1 when its text is the task's answer, plus the score of the
task set's reward function when it names one (``reward_fn``). The framework
groups the replies by task, numbers them and records the weights version.
"""

from __future__ import annotations

from trinity.common.experience import Experience
from trinity.common.models.model import ModelWrapper
from trinity.common.workflows import WORKFLOWS, Task, Workflow


@WORKFLOWS.register_module("exact_answer")
class ExactAnswerWorkflow(Workflow):
    can_repeat: bool = True

    def __init__(self, *, task: Task, model: ModelWrapper, auxiliary_models: list | None = None) -> None:
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        self.question = task.raw_task[task.format_args.prompt_key]
        self.answer = str(task.raw_task.get(task.format_args.response_key, ""))
        self.reward_fn = task.reward_fn(**task.reward_fn_args) if task.reward_fn else None

    def run(self) -> list[Experience]:
        replies = self.model.chat([{"role": "user", "content": self.question}], n=self.repeat_times,
                                  temperature=self.task.rollout_args.temperature)
        experiences = []
        for reply in replies:
            reward = float(reply.response_text.strip() == self.answer)
            if self.reward_fn is not None:
                reward += sum(self.reward_fn(response=reply.response_text, truth=self.answer).values())
            experiences.append(Experience(tokens=reply.tokens, prompt_length=reply.prompt_length,
                                          logprobs=reply.logprobs, reward=reward,
                                          metrics={"exact": float(reply.response_text.strip() == self.answer)}))
        self.logger.debug("task %s: rewards %s", self.task.index, [e.reward for e in experiences])
        return experiences
