"""``algorithm=reinforce_pp``: the settings (``ReinforcePP``, the dataclass ``conf/algorithm/reinforce_pp.yaml``
targets) and their checks; torch-free. ``build.py`` makes its trainer (``trainer.py``) from them."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from socratic_exp.algorithms.grpo.config import GRPO
from socratic_exp.core.component import setting

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import Options

# REINFORCE++'s KL coefficient: OpenRLHF's default, ``--algo.kl.init_coef 0.01`` with the k1 estimator
# (openrlhf/cli/train_ppo_ray.py); SocraticPO's backend uses it too, its paper giving none.
REINFORCE_PP_KL_COEF = 0.01


@dataclasses.dataclass(kw_only=True)
class ReinforcePP(GRPO):
    kl_coef: float = setting(
        REINFORCE_PP_KL_COEF,
        "beta of the k1 KL to the initial policy folded into the returns (OpenRLHF's default 0.01; 0: no KL, no copy)",
        ge=0.0,
    )
    baseline: Literal["none", "group"] = setting(
        "none",
        "none: REINFORCE++ (OpenRLHF's reinforce) | group: the prompt group's mean reward subtracted first "
        "(REINFORCE++-baseline, OpenRLHF's reinforce_baseline)",
    )
    normalize_over: Literal["tokens", "responses"] = setting(
        "tokens",
        "what the batch mean and std count: tokens (each once, as OpenRLHF whitens) | responses (each once: "
        "SocraticPO's backend with normalize_over=attempts, one attempt per rollout)",
    )
    advantage_eps: float = setting(1e-6, "epsilon of (G - mean) / (std + epsilon)", gt=0.0)

    def validate(self) -> None:
        super().validate()
        self.check(
            "beta",
            self.beta == 0,
            "is TRL's KL in the loss; REINFORCE++ folds the KL into the reward instead",
            "use algorithm.kl_coef (set algorithm.beta=0)",
        )

    def model_copies(self, components: Options) -> list[Any]:
        return super().model_copies(components) + initial_policy_copy(components, self.kl_coef)


def initial_policy_copy(components: Options, kl_coef: float) -> list[Any]:
    """The initial policy whose KL ``ReinforcePPMixin`` folds into the returns (``models/memory.py`` sizes it): a
    frozen copy of the student when ``kl_coef`` > 0 (whole on every process, even under ZeRO-3: ``frozen_copy``
    gathers it), the base model with the adapters disabled under LoRA, nothing at 0."""
    from socratic_exp.models.memory import frozen_initial_student

    if kl_coef <= 0:
        return []
    name = f"initial policy for the KL in the returns (kl_coef={kl_coef:g})"
    evidence = "algorithms/reinforce_pp/trainer.py ReinforcePPMixin.__init__"
    return [frozen_initial_student(name, "initial_policy", components.model.lora.enabled, evidence)]
