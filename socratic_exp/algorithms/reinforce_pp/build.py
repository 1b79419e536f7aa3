"""How ``algorithm=reinforce_pp``'s settings become its trainer (``ReinforcePPTrainer``, ``trainer.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from socratic_exp.algorithms.grpo.build import GRPOBuild

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import RunContext
    from socratic_exp.algorithms.reinforce_pp.config import ReinforcePP


class ReinforcePPBuild(GRPOBuild):
    settings: ReinforcePP

    def trainer_base(self) -> type:
        from socratic_exp.algorithms.reinforce_pp.trainer import ReinforcePPTrainer

        return ReinforcePPTrainer

    def trainer_extras(self, ctx: RunContext) -> dict[str, Any]:
        return {"reinforce": self.settings}


BUILD = ReinforcePPBuild
