"""``distiller=sft``: the knowledge base rewritten as instruction-tuning data (Socratic-RL, Section 3.4), trained with
TRL's SFTTrainer.

Each (input, viewpoint) becomes an example whose instruction is written from the viewpoint (the paper's
``{"instruction": "Solve the following, paying close attention to the order of operations.", "input": "(4+6)*3",
"output": ...}``) and whose output is the student's own response with the viewpoint in context, kept only when the
verifier accepts it (``require_correct``). A share ``1 - instruction_share`` of the examples carries the bare input
instead, so that the behaviour is also learned where no instruction will be given (the unassisted evaluation).
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import TYPE_CHECKING

from socratic_exp.core.component import setting
from socratic_exp.distillers.base import DistillationData, TRLDistiller, as_completion, guided
from socratic_exp.tasks.base import with_context
from socratic_exp.teachers.reflection import strip_label

if TYPE_CHECKING:
    from socratic_exp.models.base import Student
    from socratic_exp.tasks.base import Task


@dataclasses.dataclass(kw_only=True)
class SFTDistiller(TRLDistiller):
    instruction_template: str = setting(
        "Solve the following, paying close attention to this: {viewpoint}",
        "the instruction written from a viewpoint ({viewpoint}: its text without the label)",
    )
    instruction_share: float = setting(
        0.5, "share of examples with the instruction; the rest show the bare input", ge=0.0, le=1.0
    )
    require_correct: bool = setting(True, "keep only responses the verifier accepts")

    def validate(self) -> None:
        super().validate()
        self.check("instruction_template", "{viewpoint}" in self.instruction_template, "must contain {viewpoint}")

    def instruction(self, viewpoint: str) -> str:
        return self.instruction_template.format(viewpoint=strip_label(viewpoint))

    def distill(
        self, student: Student, task: Task, data: DistillationData, out_dir: Path, seed: int
    ) -> dict[str, float]:
        from datasets import Dataset
        from trl import SFTConfig, SFTTrainer

        from socratic_exp.models.phases import phase_args, run_phase

        triples = self.paired(data, seed)
        responses = self.sample(student, guided(triples), seed)
        rng = random.Random(seed)
        rows = []
        for (prompt, answer, viewpoint), response in zip(triples, responses, strict=True):
            if self.require_correct and task.score(response, answer) < 1.0:
                continue
            shown = (
                with_context(prompt, self.instruction(viewpoint)) if rng.random() < self.instruction_share else prompt
            )
            rows.append({"prompt": shown, "completion": as_completion(prompt, response)})
        found = {"distill/examples": float(len(rows)), "distill/example_yield": len(rows) / max(len(triples), 1)}
        if not rows:
            return found
        dataset = Dataset.from_list(rows)
        args = phase_args(
            SFTConfig,
            out_dir,
            steps=self.steps,
            batch_size=self.per_process(min(self.batch_size, len(rows))),
            learning_rate=self.learning_rate,
            seed=seed,
            completion_only_loss=True,
        )
        trainer = SFTTrainer(model=student.model, args=args, train_dataset=dataset, processing_class=student.tokenizer)
        return run_phase(trainer, "distill", eval_dataset=dataset) | found
