"""``algorithm=entropy_masked``: GRPO whose policy-gradient loss uses only a share ``rho`` of the completion tokens,
chosen by entropy ("Beyond the 80/20 Rule", arXiv 2506.01939).

Every GRPO knob works as in ``algorithm=grpo``; the mask's settings are flat keys here (``algorithm.rho``,
``algorithm.mode``, ``algorithm.normalize``, ``algorithm.forking_tokens``). The mask itself, its normalisation
switch, what it logs and how other algorithms take it as a nested ``algorithm.entropy_mask`` block are in
this package (``mask.py``, ``trainer.py``). At ``rho=1`` it is plain GRPO (same loss and gradient) with the entropy
analysis logged.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from socratic_exp.algorithms.entropy_masked.mask import steps_share_generation
from socratic_exp.algorithms.grpo.config import GRPO
from socratic_exp.core.component import Component, setting

SELECTION_BATCH_FIX = "set algorithm.steps_per_generation to a multiple of algorithm.gradient_accumulation_steps"


def selection_batch_problem(gradient_accumulation_steps: int, steps_per_generation: int | None) -> str | None:
    """Why the mask cannot rank over whole optimizer batches, or None (see ``mask.steps_share_generation``)."""
    steps = steps_per_generation or gradient_accumulation_steps  # TRL's default: one generation per optimizer step
    if steps_share_generation(gradient_accumulation_steps, steps):
        return None
    return (
        f"is not a multiple of gradient_accumulation_steps={gradient_accumulation_steps}: an optimizer step would "
        "span two generation batches, and the entropy mask ranks the tokens of one generation batch"
    )


@dataclasses.dataclass(kw_only=True)
class EntropyMask(Component):
    """The mask's settings: a nested ``algorithm.entropy_mask`` block, or flat keys of ``algorithm=entropy_masked``."""

    config_group: ClassVar[str] = "algorithm.entropy_mask"

    rho: float = setting(
        0.2, "share of completion tokens kept in the policy loss (1.0: plain GRPO, analysis logged)", gt=0.0, le=1.0
    )
    mode: Literal["top", "bottom", "random"] = setting(
        "top", "top: highest entropy (the paper) | bottom: lowest (its ablation: rho=0.8) | random: control"
    )
    normalize: Literal["all_tokens", "kept_tokens"] = setting(
        "all_tokens", "all_tokens: divide by all completion tokens (the paper, Eq. 5) | kept_tokens: by the kept ones"
    )
    forking_tokens: int = setting(8, "highest-entropy tokens per log in the forking_tokens table (0: none)", ge=0)


@dataclasses.dataclass(kw_only=True)
class EntropyMasked(GRPO, EntropyMask):
    def validate(self) -> None:
        GRPO.validate(self)
        EntropyMask.validate(self)
        self.check(
            "trl_args",
            "top_entropy_quantile" not in self.trl_args,
            "sets top_entropy_quantile, TRL's own entropy mask, which this algorithm drives itself",
            "set algorithm.rho instead",
        )
        problem = selection_batch_problem(self.gradient_accumulation_steps, self.steps_per_generation)
        self.check("steps_per_generation", problem is None, problem or "", SELECTION_BATCH_FIX)
