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
from typing import Any, ClassVar, Literal

from socratic_exp.algorithms.base import RunContext
from socratic_exp.algorithms.grpo.config import GRPO
from socratic_exp.component import Component


@dataclasses.dataclass(kw_only=True)
class EntropyMask(Component):
    """The mask's settings: a nested ``algorithm.entropy_mask`` block, or flat keys of ``algorithm=entropy_masked``."""

    config_group: ClassVar[str] = "algorithm.entropy_mask"

    rho: float = 0.2
    mode: Literal["top", "bottom", "random"] = "top"
    normalize: Literal["all_tokens", "kept_tokens"] = "all_tokens"
    forking_tokens: int = 8

    def validate(self) -> None:
        self.check_range("rho", gt=0.0, le=1.0)
        self.check_range("forking_tokens", ge=0)


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

    def trainer_base(self) -> type:
        from socratic_exp.algorithms.entropy_masked.trainer import EntropyMaskedTrainer

        return EntropyMaskedTrainer

    def trainer_extras(self, ctx: RunContext) -> dict[str, Any]:
        return {"entropy_mask": self, "metrics_sink": ctx.sink}
