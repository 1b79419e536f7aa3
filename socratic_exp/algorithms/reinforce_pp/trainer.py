"""REINFORCE++ as a TRL trainer: ``ReinforcePPMixin`` (the KL to the initial policy folded into the returns, then
normalised over the batch: ``returns.py``), which SocraticPO's trainer also builds on, and ``ReinforcePPTrainer``
(``algorithm=reinforce_pp``: one segment per completion, the task's reward at its end).

The subclass exists because TRL's GRPOTrainer has group-relative advantages only: no KL in the reward and no
normalisation over the whole batch. Its ``beta`` KL is a loss term instead, which the config refuses here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer

from socratic_exp.algorithms.reinforce_pp.returns import (
    Weighting,
    Whitening,
    group_centred,
    kl_folded_returns,
    normalized_returns,
)
from socratic_exp.algorithms.rollout_generation import generate_recording, records_policy_logps
from socratic_exp.algorithms.trl_batch import loss_mask, rollout_logps, sequence_inputs

if TYPE_CHECKING:
    from socratic_exp.algorithms.reinforce_pp.config import ReinforcePP

Segments = list[list[tuple[int, int]]]  # per local row: the (start, end) of each segment in its completion


class ReinforcePPMixin:
    """REINFORCE++'s token advantages for a ``trl.GRPOTrainer`` subclass. ``reward_kl_coef`` > 0 makes the initial
    policy (a frozen copy made at start; with LoRA the base model, adapters disabled, no copy) whose k1 KL is folded
    into the returns."""

    def __init__(self, *args: Any, reward_kl_coef: float = 0.0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.ref_policy = None
        if reward_kl_coef > 0:
            from socratic_exp.models.adapters import base_view, is_lora
            from socratic_exp.models.base import frozen_copy

            student = self.accelerator.unwrap_model(self.model)
            # LoRA: the base weights with the adapters disabled (no copy); else a copy of the student as TRL patched
            # it (its fused LM head scores the copy's own weights)
            self.ref_policy = base_view(student) if is_lora(student) else frozen_copy(student)
        # the KL reads the sampled tokens' log-probabilities recorded by the generation, where they are the policy's
        # (set by a trainer whose generation records them), instead of a no-grad pass over the batch
        self.sampled_logps_exact = False

    def _folded_advantages(
        self,
        output: dict[str, Any],
        segments: Segments,
        rewards: list[list[float]],
        *,
        kl_coef: float,
        weighting: Weighting,
        eps: float,
        groups: list[int] | None = None,
        whitening: Whitening = "std",
        kl_metric: str | None = None,
    ) -> torch.Tensor:
        """Each token's advantage: the KL-folded return of its segment, normalised over the global batch (or within
        each rollout's group, ``groups``); tokens outside every segment (teacher turns, padding) get 0.

        ``segments`` are this process's rows; ``rewards`` every process's, rollouts x segments in TRL's global order.
        ``kl_metric`` names the metric that logs the batch's mean KL."""
        kl = self._per_token_kl(output) if self.ref_policy is not None else None
        local_kl = [
            [kl[i, start:end].tolist() if kl is not None else [0.0] * (end - start) for start, end in row]
            for i, row in enumerate(segments)
        ]
        every_kl = gather_object(local_kl) if self.accelerator.num_processes > 1 else local_kl
        returns = kl_folded_returns(rewards, every_kl, kl_coef)
        values = normalized_returns(returns, groups, weighting, eps, whitening)
        offset = self.accelerator.process_index * len(segments)
        completion_ids = output["completion_ids"]
        advantages = torch.zeros(completion_ids.shape, device=completion_ids.device)
        for i, (row, row_values) in enumerate(zip(segments, values[offset : offset + len(segments)], strict=True)):
            for (start, end), tokens in zip(row, row_values, strict=True):
                advantages[i, start:end] = torch.tensor(tokens, device=completion_ids.device)
        if kl is not None and kl_metric:  # the mean over every token of the global batch (gathered above)
            mode = "train" if self.model.training else "eval"
            token_kls = [value for rollout in every_kl for segment in rollout for value in segment]
            self._metrics[mode][kl_metric].append(sum(token_kls) / max(len(token_kls), 1))
        return advantages

    def _per_token_kl(self, output: dict[str, Any]) -> torch.Tensor:
        """Per-token k1 KL, log pi_old - log pi_ref, of the sampled tokens (REINFORCE++'s estimator, with the policy
        that generated them), zero outside TRL's loss mask."""
        input_ids, attention = sequence_inputs(output)
        keep = output["completion_ids"].size(1)
        logps = rollout_logps(self, output)
        with torch.no_grad():
            ref_logps, _, _ = self._get_per_token_logps_and_entropies(self.ref_policy, input_ids, attention, keep)
        return (logps - ref_logps) * loss_mask(output)


class ReinforcePPTrainer(ReinforcePPMixin, GRPOTrainer):
    """``algorithm=reinforce_pp``: TRL's generation and rewards (the task's verifier and any shaping), REINFORCE++'s
    advantages (each completion one segment)."""

    def __init__(self, *args: Any, reinforce: ReinforcePP, **kwargs: Any):
        self.reinforce = reinforce
        self._batch_rewards: list[float] = []
        super().__init__(*args, reward_kl_coef=reinforce.kl_coef, **kwargs)
        self.sampled_logps_exact = self.ref_policy is not None and records_policy_logps(self)

    def _generate_single_turn(
        self, prompt_ids: Any, images: Any, multimodal_fields: Any, num_generations: int, has_tool_images: bool = False
    ) -> tuple[Any, Any]:
        """TRL's generation, with the sampled tokens' log-probabilities recorded where the KL reads them."""
        if self.sampled_logps_exact and images is None and not multimodal_fields:
            return generate_recording(self, prompt_ids)
        return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        """TRL's rewards of every process's completions; their weighted sum is each completion's REINFORCE++ reward
        (an unscorable completion, NaN in TRL, gets 0)."""
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        weights = self.reward_weights.to(rewards_per_func.device)
        self._batch_rewards = (rewards_per_func * weights).nansum(dim=1).tolist()
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        settings = self.reinforce
        rewards = self._batch_rewards
        if settings.baseline == "group":
            rewards = group_centred(rewards, self.num_generations)
        lengths = loss_mask(output).sum(1).tolist()  # right-padded: a completion's tokens are its first ones
        output["advantages"] = self._folded_advantages(
            output,
            [[(0, int(length))] for length in lengths],
            [[reward] for reward in rewards],
            kl_coef=settings.kl_coef,
            weighting="attempts" if settings.normalize_over == "responses" else "tokens",
            eps=settings.advantage_eps,
            kl_metric="reinforce_pp/reward_kl",
        )
        return output
