"""From a config to a trainer: the student and data a run trains on, and the trainer its algorithm builds from them.
The run, the tests and the benchmarks all build through here, so they train what a run trains."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datasets import DatasetDict

    from socratic_exp.components import Components
    from socratic_exp.models.base import Student
    from socratic_exp.run_folder import MetricsSink


@dataclasses.dataclass
class Workbench:
    """The components with their student loaded (its teacher attached) and the task's data."""

    components: Components
    splits: DatasetDict  # as the task builds them (rows with prompt, answer, ...)
    student: Student
    data: DatasetDict  # rendered for the trainer: chat messages or plain prompts, as evaluation renders them


def workbench(components: Components) -> Workbench:
    from socratic_exp.tasks.base import render_splits

    splits = components.task.build()
    student = components.model.load(components.task)
    components.teacher.attach(components.task, student)
    data = render_splits(splits, components.task.instruction(), student.chat)
    return Workbench(components=components, splits=splits, student=student, data=data)


def build_trainer(
    bench: Workbench,
    run_dir: Path,
    *,
    run_name: str = "run",
    seed: int = 0,
    callbacks: list[Any] | None = None,
    report_to: list[str] | None = None,
    sink: MetricsSink | None = None,
) -> Any:
    """The algorithm's TRL trainer on the workbench's student and data, its checkpoints under ``run_dir``; it calls
    ``callbacks`` in their order (an algorithm may put its own first), before those it adds itself."""
    from socratic_exp.algorithms.base import RunContext

    context = RunContext(components=bench.components, data=bench.data, student=bench.student, run_dir=run_dir,
                         run_name=run_name, seed=seed, callbacks=list(callbacks or []), report_to=report_to or [],
                         sink=sink)  # fmt: skip
    return bench.components.algorithm.build_trainer(context)


def trainer_from(*overrides: str, run_dir: Path | None = None) -> Any:
    """The trainer of the config that ``overrides`` compose (no run folder, logger or evaluation around it)."""
    from socratic_exp.components import build_components
    from socratic_exp.hydra_support import compose

    bench = workbench(build_components(compose(*overrides)))
    return build_trainer(bench, run_dir or Path(tempfile.mkdtemp()))
