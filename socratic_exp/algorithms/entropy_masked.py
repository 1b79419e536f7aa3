"""``algorithm=entropy_masked``: GRPO whose policy-gradient loss uses only a share ``rho`` of the completion tokens,
chosen by entropy ("Beyond the 80/20 Rule", arXiv 2506.01939).

Every GRPO knob works as in ``algorithm=grpo``; the mask's settings are flat keys here (``algorithm.rho``,
``algorithm.mode``, ``algorithm.normalize``, ``algorithm.forking_tokens``). The mask itself, its normalisation
switch, what it logs and how other algorithms take it as a nested ``algorithm.entropy_mask`` block are in
``socratic_exp.algorithms.entropy_mask``. At ``rho=1`` it is plain GRPO (same loss and gradient) with the entropy
analysis logged.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from socratic_exp.algorithms.base import RunContext
from socratic_exp.algorithms.entropy_mask import EntropyMask, with_entropy_mask
from socratic_exp.algorithms.grpo import GRPO


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
        return with_entropy_mask(super().trainer_base())

    def trainer_extras(self, ctx: RunContext) -> dict[str, Any]:
        return {"entropy_mask": self, "metrics_sink": ctx.sink}
