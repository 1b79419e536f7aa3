"""What the workers share: a method's trainer built as a run builds it, outside the run (no run folder, logger or
evaluation), on the processes of the launch the worker runs in."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from socratic_exp.algorithms.base import RunContext
from socratic_exp.components import build_components
from socratic_exp.hydra_support import compose
from socratic_exp.tasks.base import render_splits


def trainer_from(*overrides: str, run_dir: Path | None = None) -> Any:
    """The trainer of the config that ``overrides`` compose, on its student with its teacher attached."""
    components = build_components(compose(*overrides))
    student = components.model.load(components.task)
    components.teacher.attach(components.task, student)
    data = render_splits(components.task.build(), components.task.instruction(), student.chat)
    context = RunContext(components=components, data=data, student=student, run_name="worker", seed=0,
                         run_dir=run_dir or Path(tempfile.mkdtemp()), callbacks=[], report_to=[])  # fmt: skip
    return components.algorithm.build_trainer(context)
