"""How ``algorithm=entropy_masked``'s settings become its trainer (``EntropyMaskedTrainer``, ``trainer.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from socratic_exp.algorithms.grpo.build import GRPOBuild

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import RunContext
    from socratic_exp.algorithms.entropy_masked.config import EntropyMasked


class EntropyMaskedBuild(GRPOBuild):
    settings: EntropyMasked

    def trainer_base(self) -> type:
        from socratic_exp.algorithms.entropy_masked.trainer import EntropyMaskedTrainer

        return EntropyMaskedTrainer

    def trainer_extras(self, ctx: RunContext) -> dict[str, Any]:
        return {"entropy_mask": self.settings, "metrics_sink": ctx.sink}


BUILD = EntropyMaskedBuild
