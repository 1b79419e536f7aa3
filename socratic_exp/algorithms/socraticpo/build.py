"""How ``algorithm=socraticpo``'s settings become its trainer (``SocraticPOTrainer``, ``trainer.py``): the rollout
rewards each attempt itself, so TRL's reward function only logs the trajectory's return."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from socratic_exp.algorithms.grpo.build import GRPOBuild

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import RunContext
    from socratic_exp.algorithms.socraticpo.config import SocraticPO


class SocraticPOBuild(GRPOBuild):
    settings: SocraticPO

    def trl_kwargs(self, ctx: RunContext) -> dict[str, Any]:
        # TRL's vLLM importance-sampling correction (on by default in TRL) needs per-token sampling log-probabilities,
        # which the interactive rollout does not return; the paper has no such correction: off (validate refuses it on)
        return {"vllm_importance_sampling_correction": False, **super().trl_kwargs(ctx)}

    def reward_functions(self, ctx: RunContext) -> list[Any]:
        return [socratic_return]  # the rollout verifies and observes; TRL only logs its returns

    def task_shaping(self, ctx: RunContext) -> list[Any]:
        return []  # the rollout rewards each attempt itself, the format reward included (task.format_reward)

    def trainer_base(self) -> type:
        from socratic_exp.algorithms.socraticpo.trainer import SocraticPOTrainer

        return SocraticPOTrainer

    def trainer_extras(self, ctx: RunContext) -> dict[str, Any]:
        settings = self.settings
        return {
            "socratic": settings,
            "components": ctx.components,
            "chat": ctx.student.chat,
            "entropy_mask": settings.entropy_mask,
            "metrics_sink": ctx.sink,
            "reward_kl_coef": settings.reward_kl_coef,
        }


def socratic_return(completions: list[Any], trajectory_return: list[float], **_: Any) -> list[float]:
    """R(tau) = sum of the attempts' rewards (Eq. 14), computed by the rollout (TRL logs it as the reward)."""
    return list(trajectory_return)


BUILD = SocraticPOBuild
