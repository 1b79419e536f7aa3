"""``algorithm=sdpo``'s settings (the dataclass ``conf/algorithm/sdpo.yaml`` names); torch-free.

The help text of each field is its YAML comment; ``build.py`` makes the trainer from these settings.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from socratic_exp.algorithms.grpo.config import GRPO
from socratic_exp.algorithms.sdpo.contexts import (
    PLAIN_TEMPLATES,
    SDPO_TEMPLATES,
    ContextSettings,
    Templates,
    parse_sources,
)
from socratic_exp.core.component import setting
from socratic_exp.core.errors import ConfigError

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import Options


@dataclasses.dataclass(kw_only=True)
class SDPO(GRPO):
    feedback: str = setting(
        "sibling",
        "'+'-joined: sibling (a successful rollout of the group) | environment (the verifier's reason) | teacher "
        "(teacher critique)",
    )
    teacher_weights: Literal["shared", "copy"] = setting(
        "copy", "copy: a separate teacher (memory: one more copy of the weights) | shared: the student itself"
    )
    teacher_regularization: Literal["none", "ema", "trust_region"] = setting(
        "ema",
        "official: ema (the copy moved toward the student after each step) | trust_region (shared weights: logits "
        "lerp(initial student, student, teacher_update_rate)) | none (shared: the live student; copy: the initial one)",
    )
    teacher_update_rate: float = setting(
        0.05,
        "official: ema: the share the copy moves each step | trust_region: the live student's share",
        ge=0.0,
        le=1.0,
    )
    distillation: Literal["sampled_token", "full_logits", "topk_logits"] = setting(
        "sampled_token", "sampled_token (reverse KL on the sampled token) | full_logits | topk_logits"
    )
    alpha: float = setting(1.0, "0: forward KL, 1: reverse KL, between: JSD (sampled_token: 1 only)", ge=0.0, le=1.0)
    topk: int | None = setting(None, "topk_logits: the student's top-k support (capped at the vocabulary)", ge=1)
    add_tail: bool = setting(False, "topk_logits: one more bucket for the rest of the mass")
    is_clip: float | None = setting(
        2.0, "clipped importance ratio pi/pi_old on the distillation loss (null: off)", gt=0.0
    )
    loss_aggregation: Literal["sequence_mean", "token_mean"] = setting(
        "sequence_mean",
        "sequence_mean (TRL: mean per rollout, then over rollouts) | token_mean (official: mean over distilled tokens)",
    )
    success_threshold: float = setting(
        1.0, "a rollout with at least this reward is a demonstration for its siblings", ge=0.0, le=1.0
    )
    dont_reprompt_on_self_success: bool = setting(True, "a successful rollout is not its own demonstration")
    feedback_only_without_solution: bool = setting(False, "drop feedback where a demonstration exists")
    feedback_on_success: bool = setting(
        False, "TRL: feedback for failed rollouts only | true: successful ones get the environment's verdict too"
    )
    remove_thinking: bool = setting(False, "strip <think>...</think> from demonstrations")
    max_reprompt_len: int = setting(
        10240, "teacher prompt tokens kept (cut from the left; also to fit the model's context)", ge=1
    )
    context_style: Literal["auto", "sdpo", "plain"] = setting(
        "auto", "auto: sdpo templates for chat models, plain (tiny / base models) otherwise | sdpo | plain"
    )
    reprompt_template: str | None = setting(None, "null: the style's; placeholders {prompt} {solution} {feedback}")
    solution_template: str | None = setting(None, "null: the style's; placeholder {successful_previous_attempt}")
    feedback_template: str | None = setting(None, "null: the style's; placeholders {feedback_raw} {attempt}")
    hybrid: Literal["none", "joint", "advantage_reshaping", "reweighting"] = setting(
        "none", "none (SDPO) | joint | advantage_reshaping | reweighting (VPD paper, Appendix B)"
    )
    distill_weight: float = setting(1.0, "joint: weight of the distillation loss", ge=0.0)
    rl_weight: float = setting(1.0, "joint: weight of TRL's GRPO loss", ge=0.0)
    reshape_coef: float = setting(1.0, "advantage_reshaping: A_t = A_grpo + coef * (log q - log pi)", ge=0.0)
    reweight_clip: float = setting(
        2.0, "reweighting: token weights within [1/clip, clip], then mean 1 per rollout", ge=1.0
    )

    def validate(self) -> None:
        super().validate()
        try:
            parse_sources(self.feedback)
        except ValueError:
            raise ConfigError(
                self.key("feedback"),
                self.feedback,
                "is not a '+'-joined set of environment, sibling, teacher",
                "e.g. algorithm.feedback=sibling or algorithm.feedback=sibling+environment",
            ) from None
        # as the official code: an EMA needs a separate teacher; the trust region mixes the live student with its
        # initial weights (a teacher copy would make it a third model)
        self.check(
            "teacher_regularization",
            not (self.teacher_regularization == "ema" and self.teacher_weights == "shared"),
            "moves a teacher copy toward the student; with teacher_weights=shared the teacher is the student",
            "set algorithm.teacher_weights=copy, or algorithm.teacher_regularization=none or trust_region",
        )
        self.check(
            "teacher_regularization",
            not (self.teacher_regularization == "trust_region" and self.teacher_weights == "copy"),
            "mixes the live student's logits with the initial student's; a teacher copy has no place in it",
            "set algorithm.teacher_weights=shared, or algorithm.teacher_regularization=ema",
        )
        self.check(
            "alpha",
            not (self.distillation == "sampled_token" and self.alpha != 1.0),
            "sampled-token distillation is the reverse KL only (alpha=1)",
            "use algorithm.distillation=full_logits or topk_logits for forward KL or JSD",
        )
        self.check(
            "topk",
            (self.topk is not None) == (self.distillation == "topk_logits"),
            "is the support of topk_logits distillation, and only of it",
            "set algorithm.topk with algorithm.distillation=topk_logits, else topk=null",
        )
        for name, placeholder in (
            ("reprompt_template", "{prompt}"),
            ("solution_template", "{successful_previous_attempt}"),
            ("feedback_template", "{feedback_raw}"),
        ):
            value = getattr(self, name)
            self.check(name, value is None or placeholder in value, f"must contain {placeholder}")
        self.check(
            "distill_weight",
            not (self.hybrid == "joint" and self.distill_weight == 0 and self.rl_weight == 0),
            "and rl_weight are both 0: the joint loss is empty",
            "give one of them a positive weight",
        )

    def check_compatible(self, components: Options) -> None:
        super().check_compatible(components)
        if "teacher" in parse_sources(self.feedback) and not components.teacher.present:
            raise ConfigError(
                "teacher",
                "none",
                f"algorithm.feedback={self.feedback} asks a teacher for critiques",
                "choose one (e.g. teacher=rule), or another feedback source",
            )

    def context_settings(self, chat: bool) -> ContextSettings:
        style = self.context_style if self.context_style != "auto" else ("sdpo" if chat else "plain")
        base = SDPO_TEMPLATES if style == "sdpo" else PLAIN_TEMPLATES
        templates = Templates(
            reprompt=self.reprompt_template or base.reprompt,
            solution=self.solution_template or base.solution,
            feedback=self.feedback_template or base.feedback,
        )
        return ContextSettings(
            sources=parse_sources(self.feedback),
            templates=templates,
            success_threshold=self.success_threshold,
            dont_reprompt_on_self_success=self.dont_reprompt_on_self_success,
            feedback_only_without_solution=self.feedback_only_without_solution,
            feedback_on_success=self.feedback_on_success,
            remove_thinking=self.remove_thinking,
        )

    def model_copies(self, components: Options) -> list[Any]:
        """GRPO's (TRL's reference model, vLLM's copy) and the teacher's weights as ``SDPOTrainer.__init__`` makes
        them: a frozen copy of the student (``copy``; with LoRA a second adapter, ``teacher``) or none (``shared``),
        and the initial student of the trust region (a frozen copy; with LoRA the base model, adapters disabled)."""
        from socratic_exp.models.memory import ADAPTER, SHARED, STUDENT, ModelCopy, frozen_initial_student

        lora = components.model.lora.enabled
        evidence = "algorithms/sdpo/trainer.py SDPOTrainer.__init__"
        copies = super().model_copies(components)
        if self.teacher_weights == "copy":
            moved = ", moved toward the student by the EMA" if self.teacher_regularization == "ema" else ""
            what = "a second LoRA adapter (teacher) over the shared base" if lora else "frozen_copy of the student"
            trained = self.teacher_is_trained()
            copies.append(
                ModelCopy(
                    "teacher (teacher_weights=copy)",
                    of=ADAPTER if lora else STUDENT,
                    trainable=trained,
                    key="teacher",
                    note=what + moved + ("; trained by the E-step" if trained else ""),
                    evidence=evidence,
                )
            )
        else:
            copies.append(
                ModelCopy("teacher (teacher_weights=shared)", of=SHARED, key="teacher", note="the student itself")
            )
        if self.teacher_regularization == "trust_region":
            name = "initial student (trust region)"
            copies.append(frozen_initial_student(name, "initial_teacher", lora, evidence))
        return copies

    def teacher_is_trained(self) -> bool:
        """Whether the teacher copy has an optimizer of its own (a subclass's E-step); SDPO's only follows the EMA."""
        return False
