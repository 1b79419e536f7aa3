"""Trainers of several algorithms built from one warm-started student, for benchmarks that compare their steps."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from socratic_exp.algorithms.base import RunContext


def build_trainer(components: Any, data: dict[str, Any], student: Any, run_dir: Path) -> Any:
    """The algorithm's trainer on ``student`` (not copied), in train mode, outside a training loop."""
    ctx = RunContext(
        components=components,
        data=data,
        student=student,
        run_dir=run_dir,
        run_name="bench",
        seed=0,
        callbacks=[],
        report_to=[],
    )
    trainer = components.algorithm.build_trainer(ctx)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop otherwise
    return trainer


def build_trainers(options: dict[str, Any], data: dict[str, Any], student: Any, run_root: Path) -> dict[str, Any]:
    """One trainer per ``options`` entry (name -> Components), each on its own copy of ``student``."""
    trainers = {}
    for name, components in options.items():
        own = copy.copy(student)
        own.model = copy.deepcopy(student.model)
        trainers[name] = build_trainer(components, data, own, run_root / name)
    return trainers
