"""``algorithm=vpd``'s settings (the dataclass ``conf/algorithm/vpd.yaml`` names): SDPO's, with the official SDPO
code's M-step defaults and the paper's shared teacher, plus the E-step's; torch-free."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from socratic_exp.algorithms.sdpo.config import SDPO
from socratic_exp.core.component import setting

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import Options


@dataclasses.dataclass(kw_only=True)
class VPD(SDPO):
    # the M-step as the official SDPO code runs it (conf/algorithm/sdpo_official.yaml)
    distillation: Literal["sampled_token", "full_logits", "topk_logits"] = setting(
        "topk_logits", "as the official SDPO code (TRL: sampled_token) | sampled_token | full_logits"
    )
    topk: int | None = setting(100, "official (capped at the vocabulary: the tiny model has 98 tokens)", ge=1)
    add_tail: bool = setting(True, "official: one more bucket for the rest of the mass")
    alpha: float = setting(0.5, "official: JSD (TRL: 1.0). 0: forward KL, 1: reverse KL", ge=0.0, le=1.0)
    success_threshold: float = setting(
        0.5, "official: a rollout with at least this reward is a demonstration for its siblings", ge=0.0, le=1.0
    )
    remove_thinking: bool = setting(True, "official: strip <think>...</think> from demonstrations")
    feedback_only_without_solution: bool = setting(True, "official: drop feedback where a demonstration exists")
    loss_aggregation: Literal["sequence_mean", "token_mean"] = setting(
        "token_mean", "official: mean over the distilled tokens | sequence_mean (TRL)"
    )
    scale_rewards: Literal["group", "batch", "none"] = setting("none", "official (GRPO advantages of the hybrids only)")
    # the teacher is the student with the feedback in context (Section 3: one network, zero extra memory)
    teacher_weights: Literal["shared", "copy"] = setting(
        "shared", "paper: shared (the student with the feedback in context) | copy: a separate teacher (ours)"
    )
    # Our reading (docs/sdpo-vpd.md): the paper names no regularisation of the M-step's teacher; its one teacher
    # regulariser is the E-step's trust region to the current student, and its one network rules out an EMA copy.
    # The official SDPO code always regularises (EMA 0.05 by default): ema / trust_region are that code's modes.
    teacher_regularization: Literal["none", "ema", "trust_region"] = setting(
        "none",
        "our reading: none (the live shared teacher) | ema (teacher_weights=copy) | trust_region (official SDPO's)",
    )
    feedback_on_success: bool = setting(
        True, "paper: successful rollouts get the environment's verdict as their context (C+ of the E-step)"
    )
    # the E-step (Section 3.2; estep.py)
    e_step: Literal["paper", "off"] = setting(
        "paper", "paper: BCO on the teacher against the reference prior (Section 3.2) | off: M-steps only"
    )
    e_step_every: int = setting(5, "F: M-steps per E-step (one E-step, then F M-steps)", ge=1)
    e_step_iterations: int = setting(1, "teacher optimizer steps per E-step, on the same trajectories", ge=1)
    e_step_beta: float = setting(
        0.1, "beta of the implicit reward beta * log(q_phi / pi_ref): the trust region's strength", gt=0.0
    )
    reference_prior: Literal["dynamic", "fixed"] = setting(
        "dynamic", "dynamic: pi_ref = the current student (Eq. 7) | fixed: the initial student (Figure 5 ablation)"
    )
    teacher_learning_rate: float | None = setting(
        None, "E-step AdamW learning rate (null: algorithm.learning_rate)", gt=0.0
    )

    def teacher_is_trained(self) -> bool:
        return self.e_step != "off"

    def model_copies(self, components: Options) -> list[Any]:
        """SDPO's, and the E-step's (``VPDTrainer.__init__``, ``e_step``): its own AdamW over the teacher's parameters
        (the student's trainable ones when shared; the copy's, or its adapter, when copied), the copy's gradients
        during an E-step, and the frozen initial student of ``reference_prior=fixed`` (with LoRA the base model)."""
        from socratic_exp.models.memory import ADAPTER, STUDENT, TRAINABLE, ModelCopy, frozen_initial_student

        copies = super().model_copies(components)
        if self.e_step == "off":
            return copies
        lora = components.model.lora.enabled
        evidence = "algorithms/vpd/trainer.py VPDTrainer.__init__"
        if self.reference_prior == "fixed":
            name = "fixed reference prior (initial student)"
            copies.append(frozen_initial_student(name, "reference_prior", lora, evidence))
        copied = self.teacher_weights == "copy"
        teacher = (ADAPTER if lora else STUDENT) if copied else TRAINABLE
        copies.append(
            ModelCopy(
                "E-step AdamW moments (the teacher's own optimizer)",
                of=teacher,
                state="moments",
                key="e_step_moments",
                note="a torch AdamW outside the Trainer (and outside DeepSpeed: not sharded)"
                + ("" if copied else "; shared weights: over the student's own trainable parameters"),
                evidence=evidence,
            )
        )
        if copied:  # shared weights put the E-step's gradient in the student's own, freed before the M-step
            copies.append(
                ModelCopy(
                    "E-step gradients of the teacher copy",
                    of=teacher,
                    state="gradients",
                    phase="during an E-step",
                    key="e_step_gradients",
                    evidence="algorithms/vpd/trainer.py VPDTrainer.e_step",
                )
            )
        return copies
