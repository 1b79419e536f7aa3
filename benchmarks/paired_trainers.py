"""Trainers of several configurations on copies of one student, built as a run builds its trainer
(``socratic_exp.runtime.assembly``), and whole steps of them timed in pairs, for benchmarks that compare their steps."""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from socratic_exp.runtime.assembly import Workbench, build_trainer

if TYPE_CHECKING:
    from socratic_exp.runtime.assembly import Components


def on_own_copy(bench: Workbench, components: Components | None = None) -> Workbench:
    """``bench`` with ``components`` (by default its own) on a copy of its student's weights, the teacher attached to
    that copy as a run attaches it (a self-guiding teacher reads the weights its trainer trains)."""
    components = components or bench.components
    student = copy.copy(bench.student)
    student.model = copy.deepcopy(bench.student.model)
    components.teacher.attach(components.task, student)
    return dataclasses.replace(bench, components=components, student=student)


def stepping_trainer(bench: Workbench, run_dir: Path) -> Any:
    """The bench's trainer on its student (not copied), in train mode, for steps driven outside a training loop."""
    trainer = build_trainer(bench, run_dir, run_name="bench")
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop otherwise
    return trainer


def build_trainers(options: dict[str, Components], bench: Workbench, run_root: Path) -> dict[str, Any]:
    """One stepping trainer per ``options`` entry (name -> Components), each on its own copy of ``bench``'s student
    and on its data (the options share the task)."""
    return {
        name: stepping_trainer(on_own_copy(bench, components), run_root / name.replace(" ", "_"))
        for name, components in options.items()
    }


@dataclasses.dataclass
class TimedStep:
    """One trainer's whole step in a round: rollout, then loss and backward (the optimizer step left out)."""

    round: int  # 0 is the first; the callers count their warm-up rounds from it
    name: str
    trainer: Any
    batch: dict[str, Any]
    rollout_s: float
    loss_s: float
    cpu_s: float  # the process's CPU time over the step (all threads)

    @property
    def step_s(self) -> float:
        return self.rollout_s + self.loss_s


def paired_steps(trainers: dict[str, Any], rows: Any, prompts: int, group: int, rounds: int) -> Iterator[TimedStep]:
    """``rounds`` rounds of one whole step per trainer on the same prompts (round r takes ``prompts`` rows of
    ``rows`` from r * prompts on, each ``group`` times), from the same torch seed; which trainer goes first rotates,
    so none always runs on the machine's first or last moments. No training loop moves ``global_step`` here, so a
    trainer with an E-step runs one every step."""
    import torch

    for round_ in range(rounds):
        batch_rows = [rows[(round_ * prompts + i) % len(rows)] for i in range(prompts)]
        batch_rows = [row for row in batch_rows for _ in range(group)]
        order = list(trainers.items())
        shift = round_ % len(order)
        for name, trainer in order[shift:] + order[:shift]:
            torch.manual_seed(round_)
            if hasattr(trainer, "e_step"):
                trainer._last_e_step = None
            start, start_cpu = time.perf_counter(), time.process_time()
            batch = trainer._generate_and_score_completions(batch_rows)
            middle = time.perf_counter()
            trainer.compute_loss(trainer.model, batch).backward()
            trainer.model.zero_grad()
            end, end_cpu = time.perf_counter(), time.process_time()
            yield TimedStep(round_, name, trainer, batch, middle - start, end - middle, end_cpu - start_cpu)
