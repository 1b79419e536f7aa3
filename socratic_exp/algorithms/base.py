"""The algorithm interface: an option's settings and their checks (``Algorithm``), what it reads of the run's other
options (``Options``), and what its trainer is built from (``RunContext``). What builds a trainer lives in each
method folder's ``build.py``, beside the trainer (``socratic_exp.algorithms.builder`` finds it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from socratic_exp.core.component import Component, setting

if TYPE_CHECKING:
    from datasets import DatasetDict

    from socratic_exp.core.metrics import MetricsSink
    from socratic_exp.distillers.base import Distiller
    from socratic_exp.models.base import ModelSpec, Student
    from socratic_exp.samplers.base import PromptSampler
    from socratic_exp.tasks.base import Task
    from socratic_exp.teachers.base import Teacher


class Options(Protocol):
    """The run's options as an algorithm reads them (the run's ``Components`` has them, and more)."""

    task: Task
    model: ModelSpec
    algorithm: Algorithm
    teacher: Teacher
    sampler: PromptSampler
    distiller: Distiller
    choices: dict[str, str]  # the option chosen in each group, e.g. {"algorithm": "grpo"}


@dataclasses.dataclass(kw_only=True)
class RunContext:
    """What an algorithm's trainer is built from."""

    components: Options
    data: DatasetDict
    student: Student
    run_dir: Path
    run_name: str
    seed: int
    callbacks: list[Any]
    report_to: list[str]
    sink: MetricsSink | None = None  # metrics.jsonl and the logger, for what a trainer logs itself (e.g. tables)

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "checkpoints"


@dataclasses.dataclass(kw_only=True)
class Algorithm(Component):
    """An algorithm option. The class flags say which other groups it uses, so wrong combinations fail early."""

    config_group: ClassVar[str] = "algorithm"
    requires_teacher: ClassVar[bool] = False
    uses_distiller: ClassVar[bool] = False

    max_steps: int = setting(100, "optimizer steps of the run", ge=1)

    def check_compatible(self, components: Options) -> None:
        """Checks that need the other components (e.g. the model's context length)."""
