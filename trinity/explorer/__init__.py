"""The explorer: runs workflows on inference engines and produces experiences.

:class:`Scheduler` runs a step's :class:`~trinity.common.workflows.Task` list
over engine-bound runners with timeouts and retries.
"""

from trinity.explorer.scheduler import Scheduler, StepResult, TaskFailure

__all__ = ["Scheduler", "StepResult", "TaskFailure"]
