"""The distiller interface: compress viewpoint-guided behaviour into the student's weights (Socratic-RL, 3.4).

A distillation gets task inputs (prompts without viewpoints) and the viewpoints to internalize; it pairs each input
with one viewpoint drawn uniformly (a sample of the paper's D x V_KB: which members of V_KB are passed is the loop's
rule, ``ViewpointLoop.distill``), trains the student in place with a TRL trainer for a few steps (the paper's new
student pi'_S starts from the current one), and returns its figures (``distill/*``), among them its own loss on
fixed data before and after.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from socratic_exp.core.component import Component, setting
from socratic_exp.tasks.base import with_context

if TYPE_CHECKING:
    from socratic_exp.models.base import Student
    from socratic_exp.tasks.base import Task
    from socratic_exp.teachers.base import Context


@dataclasses.dataclass(frozen=True)
class DistillationData:
    prompts: list[Context]  # rendered task inputs, without viewpoints
    answers: list[str]
    viewpoints: list[str]  # what to internalize
    negative_viewpoints: list[str] = dataclasses.field(default_factory=list)  # measured unhelpful (retired)


@dataclasses.dataclass(kw_only=True)
class Distiller(Component):
    config_group: ClassVar[str] = "distiller"
    distills: ClassVar[bool] = True  # False: the option that stands for "no distillation" (it trains nothing)

    def distill(
        self, student: Student, task: Task, data: DistillationData, out_dir: Path, seed: int
    ) -> dict[str, float]:
        """Train ``student`` in place; returns ``distill/*`` metrics."""
        raise NotImplementedError


@dataclasses.dataclass(kw_only=True)
class TRLDistiller(Distiller):
    """The options that train with a TRL trainer on responses sampled from the student (with or without viewpoints)."""

    items: int = setting(128, "task inputs per distillation, each paired with one viewpoint drawn uniformly", ge=1)
    steps: int = setting(16, "optimizer steps per distillation", ge=1)
    batch_size: int = setting(16, "examples per optimizer step (over all processes)", ge=1)
    learning_rate: float = setting(1e-5, "learning rate of the distillation phase", gt=0.0)
    temperature: float = setting(1.0, "sampling temperature of the responses the distillation learns from", gt=0.0)
    max_completion_length: int = setting(48, "tokens per sampled response", ge=1)

    def model_copies(self, components: Any) -> list[Any]:
        """What a distillation holds while it runs, for ``models/memory.py``: the phase's own TRL trainer keeps its
        own AdamW moments over what the student trains (the RL trainer keeps its too); options add their copies."""
        from socratic_exp.models.memory import TRAINABLE, ModelCopy

        return [
            ModelCopy(
                "distillation's AdamW moments (the phase's optimizer)",
                of=TRAINABLE,
                state="moments",
                phase="during a distillation",
                key="distill_moments",
                evidence="phases.run_phase (a TRL trainer of its own)",
            )
        ]

    # --- shared by the options ------------------------------------------------------------------------------
    @staticmethod
    def per_process(batch_size: int) -> int:
        """TRL's ``per_device_train_batch_size`` for ``batch_size`` examples per optimizer step in all: in a
        distributed launch each of the N processes takes 1/N of them (rounded down, at least 1), so a step sees the
        batch one process would."""
        from socratic_exp.core.distributed import world_size

        return max(1, batch_size // world_size())

    @staticmethod
    def paired(data: DistillationData, seed: int) -> list[tuple[Context, str, str]]:
        """(input, answer, viewpoint) triples: each input with one viewpoint drawn uniformly, i.e. ``len(prompts)``
        members of D x viewpoints drawn at random (the paper's expectation over D x V_KB, sampled)."""
        rng = random.Random(seed)
        return [(p, a, rng.choice(data.viewpoints)) for p, a in zip(data.prompts, data.answers, strict=True)]

    def sample(self, student: Student, prompts: list[Context], seed: int) -> list[str]:
        """One sampled response per prompt (its own seeded random state: training's is untouched)."""
        from socratic_exp.models.generation import generate

        return generate(
            student,
            prompts,
            max_new_tokens=self.max_completion_length,
            batch_size=max(self.batch_size, 64),
            sample=True,
            temperature=self.temperature,
            seed=seed,
        )


def guided(triples: list[tuple[Any, str, str]]) -> list[Any]:
    """The inputs with their viewpoint in context."""
    return [with_context(prompt, viewpoint) for prompt, _, viewpoint in triples]


def as_completion(prompt: Any, response: str) -> Any:
    """A response in the prompt's form: an assistant turn after chat messages, else the text itself."""
    return [{"role": "assistant", "content": response}] if isinstance(prompt, list) else response
