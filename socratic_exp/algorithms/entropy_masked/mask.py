"""The mask's maths ("Beyond the 80/20 Rule", arXiv 2506.01939, Section 5, Eq. 5): how many tokens to keep, which
ones, and the weight each kept token gets in the policy loss. Pure functions of tensors: the trainer gathers the
batch's entropies across processes, calls these, and hands the weights to TRL's loss.

Eq. 5 keeps the tokens with ``H >= tau``, ``tau`` the entropy above which the top rho of *all tokens of the batch B*
lie, and divides the kept tokens' clipped objective by *all* the batch's tokens (``1 / sum_i |o^i|``, DAPO's
token-level normalisation): ``normalize=all_tokens``. The official code (verl fork, ``agg_loss(..., response_mask *
entropy_top_mask, "token-mean")``) divides by the kept tokens instead: ``normalize=kept_tokens``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

SEQUENCE_MEAN_LOSSES = ("grpo", "sapo")  # TRL averages these over each sequence's tokens first


def kept_count(tokens: int, rho: float) -> int:
    """How many of ``tokens`` the mask keeps: ``round(rho x tokens)`` (Python's round, half to even), at least one
    (none would train nothing), at most all of them. Eq. 5 keeps "the top rho fraction"; the official code rounds
    up (``int(rho x n + 0.9999)``): at most one token apart."""
    return min(tokens, max(1, round(rho * tokens)))


def steps_share_generation(gradient_accumulation_steps: int, steps_per_generation: int) -> bool:
    """Whether every optimizer step's loss calls come from one generation batch (TRL generates every
    ``steps_per_generation`` loss calls and steps the optimizer every ``gradient_accumulation_steps``), so that
    ranking a generation batch's tokens ranks whole optimizer batches."""
    return steps_per_generation % gradient_accumulation_steps == 0


def selection_scores(entropy: torch.Tensor, mode: str, noise: torch.Tensor | None = None) -> torch.Tensor:
    """What the mask ranks, highest first: the entropy (``top``, Eq. 5), its negation (``bottom``, the paper's
    bottom-80% ablation) or ``noise`` (``random``: uniform draws, the control the paper lacks)."""
    if mode == "top":
        return entropy
    if mode == "bottom":
        return -entropy
    if mode == "random" and noise is not None:
        return noise
    raise ValueError(f"unknown mode {mode!r} (or random without noise)")


def select_top(scores: torch.Tensor, k: int) -> torch.Tensor:
    """A boolean mask of the ``k`` highest ``scores`` (1-D); among equal scores the earlier one wins, so exactly
    ``k`` are kept even when entropies tie (Eq. 5's ``H >= tau`` would keep every tie at the threshold)."""
    import torch

    keep = torch.zeros_like(scores, dtype=torch.bool)
    keep[torch.sort(scores, descending=True, stable=True).indices[:k]] = True
    return keep


def token_weights(
    keep: torch.Tensor,
    valid: torch.Tensor,
    *,
    normalize: str,
    loss_type: str,
    batch_tokens: int,
    batch_kept: int,
) -> torch.Tensor:
    """The weight of each token in TRL's policy loss (``per_token_loss * weight``), for ``keep`` and ``valid``
    (boolean, rows x tokens) of some rows of a batch that has ``batch_tokens`` tokens of which ``batch_kept`` kept.

    ``all_tokens`` (Eq. 5): 1 on kept tokens, 0 elsewhere; TRL's own normaliser then divides by all tokens.
    ``kept_tokens``: kept tokens weigh (tokens / kept tokens), so the normaliser counts kept tokens only. For TRL's
    per-sequence means (``grpo``, ``sapo``) the ratio is each sequence's own (its mean over its kept tokens; a
    sequence with none kept weighs 0); for every other loss type it is the whole batch's."""
    keep = keep & valid
    if normalize == "all_tokens":
        return keep.float()
    if normalize != "kept_tokens":
        raise ValueError(f"unknown normalize {normalize!r}")
    if loss_type in SEQUENCE_MEAN_LOSSES:
        scale = valid.sum(1, keepdim=True) / keep.sum(1, keepdim=True).clamp(min=1)
    else:
        scale = batch_tokens / max(batch_kept, 1)
    return keep * scale
