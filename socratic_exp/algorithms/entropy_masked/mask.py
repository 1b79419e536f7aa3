"""The mask's maths ("Beyond the 80/20 Rule", arXiv 2506.01939, Section 4): how many tokens to keep and which."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

SEQUENCE_MEAN_LOSSES = ("grpo", "sapo")  # TRL averages these over each sequence's tokens first


def kept_count(tokens: int, rho: float) -> int:
    """How many of ``tokens`` the mask keeps: rho of them, rounded, at least one (none would train nothing)."""
    return min(tokens, max(1, round(rho * tokens)))


def select_top(scores: torch.Tensor, k: int) -> torch.Tensor:
    """A boolean mask of the ``k`` highest ``scores`` (1-D); among equal scores the earlier one wins."""
    import torch

    keep = torch.zeros_like(scores, dtype=torch.bool)
    keep[torch.sort(scores, descending=True, stable=True).indices[:k]] = True
    return keep
