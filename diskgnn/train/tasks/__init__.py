"""What a run learns: node classification or link prediction, each one module behind one protocol (base.py).

The rest of train/ asks the run's task (`cfg.task_spec`) what differs between tasks (what an epoch's batches are
cut from, which eval sets exist and how big, the model's output and head, the loss, evaluation and its metric,
the plan's and the summary's lines) instead of testing `--task`. A new task is one module here plus its line
in TASKS.
"""

from __future__ import annotations

from .base import EVAL_EPOCH, Task
from .link import LinkTask
from .node import NodeTask

TASKS: dict[str, type[Task]] = {"node": NodeTask, "link": LinkTask}

__all__ = ["EVAL_EPOCH", "TASKS", "Task"]
