"""``distiller=kl``: policy distillation, Socratic-RL's default (Section 3.4)

    L_distill = E_{(x, v) ~ D x V_KB} KL( pi_S(. | x, v) || pi'_S(. | x) )

on TRL's SDFTTrainer, whose teacher is the same model with privileged context in its prompt: here the viewpoint,
placed in front of the question (``teacher_prompt_template``) as during training. Defaults follow the formula:
forward KL over the full vocabulary (``divergence_alpha: 0``, ``mode: full_logits``; SDFT's defaults are a JSD over
the top 100 logits) on responses sampled from the guided student (``generate_from: teacher``; SDFT samples from
the student).

The subclass exists because SDFT's "base" teacher is rebuilt from the model's path, i.e. the checkpoint the run
started from; Socratic-RL's teacher is the student as it is now (before this distillation), so it gets a frozen
copy of the current weights (with LoRA: a frozen copy of the student's adapter, deleted after the phase).

``distill/kl_before`` / ``kl_after``: the mean per-token KL above on a fixed set of ``kl_samples`` guided responses.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from socratic_exp.core.component import setting
from socratic_exp.distillers.base import DistillationData, TRLDistiller, guided
from socratic_exp.tasks.base import with_context

if TYPE_CHECKING:
    from socratic_exp.models.base import Student
    from socratic_exp.tasks.base import Task
    from socratic_exp.teachers.base import Context


@dataclasses.dataclass(kw_only=True)
class KLDistiller(TRLDistiller):
    num_generations: int = setting(4, "responses sampled per input (batch_size must be a multiple)", ge=1)
    divergence_alpha: float = setting(
        0.0, "0: forward KL(teacher || student), the paper's | 1: reverse KL | between: JSD (SDFT: 0.5)", ge=0.0, le=1.0
    )
    mode: Literal["full_logits", "topk_logits", "sampled_token"] = setting(
        "full_logits", "full_logits | topk_logits | sampled_token (SDFT's default: topk_logits)"
    )
    topk: int = setting(100, "logits kept per token with mode=topk_logits", ge=1)
    generate_from: Literal["teacher", "student"] = setting(
        "teacher", "teacher: sample with the viewpoint in context (behavioural cloning) | student (on-policy)"
    )
    kl_samples: int = setting(32, "fixed guided responses on which distill/kl_before and kl_after are measured", ge=1)

    def validate(self) -> None:
        super().validate()
        self.check(
            "batch_size",
            self.batch_size % self.num_generations == 0,
            f"must be a multiple of distiller.num_generations ({self.num_generations})",
        )

    def model_copies(self, components: Any) -> list[Any]:
        """The phase's optimizer (``TRLDistiller``) and its teacher: a frozen snapshot of the student as it is now
        (with LoRA a snapshot adapter over the shared base weights), deleted when the phase ends."""
        from socratic_exp.models.memory import ADAPTER, STUDENT, ModelCopy

        lora = components.model.lora.enabled
        snapshot = ModelCopy(
            "distillation teacher: a frozen snapshot of the student",
            of=ADAPTER if lora else STUDENT,
            phase="during a distillation",
            key="distill_snapshot",
            evidence="distillers/kl.py KLDistiller.distill (" + ("adapter_copy" if lora else "frozen_copy") + ")",
        )
        return [*super().model_copies(components), snapshot]

    def distill(
        self, student: Student, task: Task, data: DistillationData, out_dir: Path, seed: int
    ) -> dict[str, float]:
        import os

        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # SDFT lives in trl.experimental
        from datasets import Dataset
        from trl.experimental.sdft import SDFTConfig

        from socratic_exp.models.adapters import SNAPSHOT_ADAPTER, adapter_copy, drop_adapter, is_lora
        from socratic_exp.models.base import frozen_copy
        from socratic_exp.models.phases import phase_args, run_phase

        triples = self.paired(data, seed)
        lora = is_lora(student.model)
        # the student as it is now: with LoRA a frozen copy of its adapter over the shared base weights
        snapshot = adapter_copy(student.model, SNAPSHOT_ADAPTER) if lora else frozen_copy(student.model)
        try:
            teacher = dataclasses.replace(student, model=snapshot)
            fixed = triples[: self.kl_samples]
            responses = self.sample(teacher, guided(fixed), seed)
            probe = [
                (prompt, viewpoint, response) for (prompt, _, viewpoint), response in zip(fixed, responses, strict=True)
            ]
            kl_before = context_kl(student, teacher.model, probe)
            rows = [{"prompt": prompt, "privileged_context": viewpoint} for prompt, _, viewpoint in triples]
            args = phase_args(
                SDFTConfig,
                out_dir,
                steps=self.steps,
                batch_size=self.per_process(self.batch_size),
                learning_rate=self.learning_rate,
                seed=seed,
                num_generations=self.num_generations,
                max_completion_length=self.max_completion_length,
                temperature=self.temperature,
                distillation_mode=self.mode,
                distillation_alpha=self.divergence_alpha,
                distillation_topk=self.topk if self.mode == "topk_logits" else None,
                generate_from_teacher=self.generate_from == "teacher",
                teacher_prompt_template="{privileged_context}\n{prompt}",
                chat_template_kwargs=student.chat_template_kwargs or None,
                # "live" leaves the teacher's adapter to our snapshot; TRL's default, "base", would disable the adapters
                **({"teacher_model_kind": "live"} if lora else {}),
            )
            from socratic_exp.distillers.kl_trainer import ViewpointSDFTTrainer

            trainer = ViewpointSDFTTrainer(
                model=student.model,
                args=args,
                train_dataset=Dataset.from_list(rows),
                processing_class=student.tokenizer,
                frozen_teacher=teacher.model,
            )
            metrics = run_phase(trainer, "distill")
            kl_after = context_kl(student, teacher.model, probe)
            return metrics | {"distill/kl_before": kl_before, "distill/kl_after": kl_after}
        finally:
            if lora:
                drop_adapter(student.model, SNAPSHOT_ADAPTER)


def context_kl(student: Student, teacher_model: Any, examples: list[tuple[Context, str, str]]) -> float:
    """Mean per-token KL(teacher(. | x, v, y<t) || student(. | x, y<t)) over the response tokens of (x, v, y)."""
    import torch

    from socratic_exp.models.generation import as_model_input

    tokenizer = student.tokenizer
    total = count = 0.0
    with torch.no_grad():
        for prompt, viewpoint, response in examples:
            response_ids = tokenizer(response, add_special_tokens=False).input_ids
            if not response_ids:
                continue
            log_probs = []
            for model, context in ((teacher_model, with_context(prompt, viewpoint)), (student.model, prompt)):
                prefix = tokenizer(as_model_input(student, context), add_special_tokens=False).input_ids
                ids = torch.tensor([prefix + response_ids], device=model.device)
                logits = model(input_ids=ids).logits[0, len(prefix) - 1 : -1].float()
                log_probs.append(logits.log_softmax(-1))
            teacher_lp, student_lp = log_probs
            total += float((teacher_lp.exp() * (teacher_lp - student_lp)).sum())
            count += len(response_ids)
    return total / max(count, 1.0)
