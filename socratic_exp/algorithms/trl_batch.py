"""What trainers read off TRL's GRPO batch dicts (``prompt_ids``/``completion_ids`` and their masks), in one place.

Imported by the ``trainer.py`` modules only: it imports torch.
"""

from __future__ import annotations

from typing import Any

import torch


def loss_mask(batch: dict[str, Any]) -> torch.Tensor:
    """The tokens TRL's loss trains on: the completion mask, times the tool mask (e.g. teacher turns) where present."""
    mask = batch["completion_mask"]
    return mask if batch.get("tool_mask") is None else mask * batch["tool_mask"]


def sequence_inputs(batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt and completion as one sequence: (input_ids, attention_mask)."""
    return (
        torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1),
        torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1),
    )


@torch.no_grad()
def rollout_logps(trainer: Any, batch: dict[str, Any]) -> torch.Tensor:
    """Per-token log-probabilities of the sampled completion tokens under the policy that generated them: TRL's
    ``old_per_token_logps`` when it computed them (an off-policy step); else the ones recorded as the tokens were
    sampled, where they are the policy's (``rollout_generation.records_policy_logps``); else one no-grad pass of the
    current model."""
    logps = batch.get("old_per_token_logps")
    if logps is None and getattr(trainer, "sampled_logps_exact", False):
        logps = batch.get("sampling_per_token_logps")
    if logps is None:
        input_ids, attention_mask = sequence_inputs(batch)
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, input_ids, attention_mask, batch["completion_ids"].size(1)
        )
    return logps


def full_logits(model: Any, input_ids: Any, attention_mask: Any, keep: int, temperature: float) -> Any:
    """Next-token logits of the last ``keep`` positions' tokens, divided by the sampling temperature.

    The class's own forward is called, past TRL's fused-LM-head patch of ``model.forward``: plain logits, from the
    model's own weights, with its logit scaling and soft-capping.
    """
    outputs = type(model).forward(
        model, input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep + 1, use_cache=False
    )
    return outputs.logits[:, :-1][:, -keep:].float() / temperature
