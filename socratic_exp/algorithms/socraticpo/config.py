"""``algorithm=socraticpo``: the settings (``SocraticPO``, the dataclass ``conf/algorithm/socraticpo.yaml`` targets)
and their checks; torch-free. ``build.py`` makes its trainer (``trainer.py``) from them."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from socratic_exp.algorithms.entropy_masked.config import EntropyMask
from socratic_exp.algorithms.grpo.config import GRPO
from socratic_exp.algorithms.reinforce_pp.config import REINFORCE_PP_KL_COEF, initial_policy_copy
from socratic_exp.core.component import setting
from socratic_exp.core.errors import ConfigError

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import Options

# TRL losses that sum token terms over the batch and divide by a count that does not depend on how the tokens are
# grouped into sequences: only with them is a packed rollout the same as its attempts trained as separate samples.
TOKEN_LEVEL_LOSSES = ("dapo", "cispo")


@dataclasses.dataclass(kw_only=True)
class SocraticPO(GRPO):
    max_steps: int = setting(
        30, "optimizer steps; a step costs about 3 GRPO steps, so the default experiment stays near 40 s", ge=1
    )
    max_attempts: int = setting(
        3, "K: student attempts per rollout (the teacher's guidance follows each wrong one but the last)", ge=1, le=16
    )
    reward_decay: bool = setting(True, "r(k) = mu_{k-1} * delta(k) (Eq. 17-19); false: the paper's 'w/o rd'")
    backend: Literal["reinforce_pp", "grpo"] = setting(
        "reinforce_pp",
        "reinforce_pp: the paper's (KL folded into the returns, normalised over the batch, Eq. 20) | "
        "grpo: normalised within each prompt's group, TRL's beta KL in the loss",
    )
    guidance: Literal["teacher", "fixed_retry"] = setting(
        "teacher", "teacher | fixed_retry (the paper's 'w/o tg': retry_prompt instead of the teacher)"
    )
    retry_prompt: str = setting("Hint: try again.", "the fixed line after a wrong attempt with guidance=fixed_retry")
    kl_coef: float | None = setting(
        None,
        "beta of the k1 KL to the initial policy folded into the returns (reinforce_pp); null: 0.01 with "
        "reinforce_pp (OpenRLHF's REINFORCE++ default; the paper gives none), unused by grpo",
        ge=0.0,
    )
    normalize_over: Literal["attempts", "tokens"] = setting(
        "attempts",
        "what the batch mean and std count: attempts (each once, Eq. 20 and Theorem 1) | "
        "tokens (each student token once, as OpenRLHF normalises REINFORCE++'s returns)",
    )
    advantage_eps: float = setting(1e-6, "epsilon of (r - mean) / (std + epsilon) (Eq. 20)", gt=0.0)
    baseline: Literal["none", "prompt"] = setting(
        "none",
        "none: the decayed rewards themselves (Eq. 20) | prompt: each attempt's reward minus the mean over every "
        "attempt of its prompt's rollouts (the authors' code: verl's reinforce_plus_plus_baseline over attempt rows)",
    )
    whitening: Literal["std", "verl"] = setting(
        "std",
        "std: (r - mean) / (std + advantage_eps) (Eq. 20) | verl: (r - mean) / sqrt(unbiased variance + 1e-8), "
        "verl's masked_whiten (the authors' code)",
    )
    teacher_kl_every: int = setting(
        1, "steps between teacher-student KL diagnostics (Figure 6; needs a local teacher model; 0: off)", ge=0
    )
    entropy_mask: EntropyMask | None = setting(
        None, "e.g. {rho: 0.2, mode: top}: train on the high-entropy student tokens only (as entropy_masked)"
    )
    reuse_cache: bool = setting(
        True,
        "a later attempt continues from the KV cache of the attempts before it (transformers generation): the same "
        "tokens as re-reading the context, without its cost; false: each attempt re-reads its whole context",
    )

    @property
    def reward_kl_coef(self) -> float:
        """beta of the KL folded into the returns: ``kl_coef``, or REINFORCE++'s default (the paper gives none: its
        Table 5 is not in the text we have) for ``reinforce_pp``."""
        if self.backend == "grpo":
            return 0.0
        return REINFORCE_PP_KL_COEF if self.kl_coef is None else self.kl_coef

    def validate(self) -> None:
        super().validate()
        self.check(
            "trl_args",
            not (self.entropy_mask and "top_entropy_quantile" in self.trl_args),
            "sets top_entropy_quantile, TRL's own entropy mask, next to algorithm.entropy_mask",
            "set algorithm.entropy_mask.rho instead",
        )
        self.check("retry_prompt", bool(self.retry_prompt.strip()), "is empty", "give the fixed retry line")
        self.check(
            "loss_type",
            self.loss_type in TOKEN_LEVEL_LOSSES,
            "weighs a token by its packed rollout (all its attempts), so per-attempt advantages are not exact",
            "set algorithm.loss_type=dapo (a token-level loss)",
        )
        self.check(
            "trl_args",
            self.trl_args.get("importance_sampling_level", "token") == "token",
            "sets a sequence-level importance ratio, which would span every attempt of a packed rollout",
            "leave trl_args.importance_sampling_level unset (token)",
        )
        self.check(
            "trl_args",
            not (self.use_vllm and self.trl_args.get("vllm_importance_sampling_correction", False)),
            "turns on TRL's vLLM importance-sampling correction, which needs sampling log-probabilities per token; "
            "the interactive rollout returns none",
            "leave trl_args.vllm_importance_sampling_correction unset (off for socraticpo)",
        )
        self.check(
            "beta",
            not (self.backend == "reinforce_pp" and self.beta > 0),
            "is TRL's KL in the loss; the reinforce_pp backend folds the KL into the reward instead",
            "use algorithm.kl_coef with backend=reinforce_pp, or algorithm.backend=grpo",
        )
        self.check(
            "baseline",
            not (self.backend == "grpo" and self.baseline != "none"),
            "subtracts a prompt baseline, which the grpo backend's group normalisation already does",
            "use algorithm.baseline=prompt with backend=reinforce_pp",
        )
        self.check(
            "kl_coef",
            not (self.backend == "grpo" and self.kl_coef),
            "folds the KL into the reward, which only the reinforce_pp backend does",
            "use algorithm.beta with backend=grpo",
        )

    def check_compatible(self, components: Options) -> None:
        super().check_compatible(components)
        if components.task.overlong_buffer:
            raise ConfigError(
                "task.overlong_buffer",
                components.task.overlong_buffer,
                "shapes TRL's reward functions; algorithm=socraticpo rewards each attempt itself (Eq. 17-19)",
                "set task.overlong_buffer=0 with algorithm=socraticpo",
            )
        if self.guidance == "teacher" and not components.teacher.present:
            raise ConfigError(
                "teacher",
                "none",
                "algorithm=socraticpo with guidance=teacher needs a teacher",
                "choose one (e.g. teacher=rule), or algorithm.guidance=fixed_retry",
            )

    def model_copies(self, components: Options) -> list[Any]:
        """GRPO's (TRL's reference model with backend=grpo and beta > 0; vLLM's copy) and, with the reinforce_pp
        backend, REINFORCE++'s initial policy. The teacher's own weights, if any, are the teacher option's."""
        return super().model_copies(components) + initial_policy_copy(components, self.reward_kl_coef)
