"""``distiller=dpo``: preference pairs from viewpoints (Socratic-RL, Section 3.4), trained with TRL's DPOTrainer.

For each input the student answers twice: with a helpful viewpoint in context (chosen) and without it, or with a
negative viewpoint (``rejected: negative_viewpoint``: a retired viewpoint, measured unhelpful, else
``negative_viewpoint``) (rejected). The pair's prompt is the bare input, so the preference is learned without the
viewpoint. With ``require_verified`` a pair is kept only when the verifier scores the chosen response above the
rejected one (otherwise most pairs would prefer one right answer over another).
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from socratic_exp.core.component import setting
from socratic_exp.distillers.base import DistillationData, TRLDistiller, as_completion, guided
from socratic_exp.tasks.base import with_context

if TYPE_CHECKING:
    from socratic_exp.models.base import Student
    from socratic_exp.tasks.base import Task


@dataclasses.dataclass(kw_only=True)
class DPODistiller(TRLDistiller):
    beta: float = setting(0.1, "DPO's beta: the strength of the implicit KL to the frozen reference", gt=0.0)
    rejected: Literal["without_viewpoint", "negative_viewpoint"] = setting(
        "without_viewpoint",
        "the rejected response: without_viewpoint | negative_viewpoint (a retired viewpoint, else negative_viewpoint)",
    )
    negative_viewpoint: str = setting(
        "Note: work from left to right, whatever the operators.",
        "the deliberately unhelpful viewpoint of rejected=negative_viewpoint when no viewpoint has retired",
    )
    require_verified: bool = setting(True, "keep a pair only when the verifier scores chosen above rejected")

    def model_copies(self, components: Any) -> list[Any]:
        """The phase's optimizer (``TRLDistiller``) and DPO's frozen reference: a copy of the student as it was before
        the phase (with LoRA TRL's ``ref`` adapter over the shared base weights)."""
        from socratic_exp.models.memory import ADAPTER, STUDENT, ModelCopy

        reference = ModelCopy(
            "DPO reference: a frozen copy of the student",
            of=ADAPTER if components.model.lora.enabled else STUDENT,
            phase="during a distillation",
            key="distill_reference",
            evidence="phases.dpo_phase",
        )
        return [*super().model_copies(components), reference]

    def distill(
        self, student: Student, task: Task, data: DistillationData, out_dir: Path, seed: int
    ) -> dict[str, float]:
        from socratic_exp.models.phases import dpo_phase

        triples = self.paired(data, seed)
        chosen = self.sample(student, guided(triples), seed)
        if self.rejected == "negative_viewpoint":
            negatives = data.negative_viewpoints or [self.negative_viewpoint]
            rng = random.Random(seed + 1)
            rejected_prompts = [with_context(prompt, rng.choice(negatives)) for prompt, _, _ in triples]
        else:
            rejected_prompts = [prompt for prompt, _, _ in triples]
        rejected = self.sample(student, rejected_prompts, seed + 1)
        rows = []
        for (prompt, answer, _), good, bad in zip(triples, chosen, rejected, strict=True):
            if self.require_verified and task.score(good, answer) <= task.score(bad, answer):
                continue
            rows.append(
                {"prompt": prompt, "chosen": as_completion(prompt, good), "rejected": as_completion(prompt, bad)}
            )
        found = {"distill/pairs": float(len(rows)), "distill/pair_yield": len(rows) / max(len(triples), 1)}
        if not rows:
            return found
        metrics = dpo_phase(
            student.model,
            student.tokenizer,
            rows,
            out_dir,
            prefix="distill",
            steps=self.steps,
            batch_size=self.per_process(min(self.batch_size, len(rows))),
            learning_rate=self.learning_rate,
            beta=self.beta,
            seed=seed,
        )
        return metrics | found
