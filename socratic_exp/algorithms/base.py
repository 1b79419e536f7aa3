"""The algorithm interface: build a TRL trainer from the run's components."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from socratic_exp.core.component import Component, setting

if TYPE_CHECKING:
    from datasets import DatasetDict

    from socratic_exp.core.metrics import MetricsSink
    from socratic_exp.models.base import Student
    from socratic_exp.runtime.assembly import Components


@dataclasses.dataclass(kw_only=True)
class RunContext:
    """What an algorithm needs to build its trainer."""

    components: Components
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

    def check_compatible(self, components: Components) -> None:
        """Checks that need the other components (e.g. the model's context length)."""

    def build_trainer(self, ctx: RunContext) -> Any:
        raise NotImplementedError
