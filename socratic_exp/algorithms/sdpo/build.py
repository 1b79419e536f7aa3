"""How ``algorithm=sdpo``'s settings become its trainer (``SDPOTrainer``, ``trainer.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from socratic_exp.algorithms.grpo.build import GRPOBuild

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import RunContext
    from socratic_exp.algorithms.sdpo.config import SDPO


class SDPOBuild(GRPOBuild):
    settings: SDPO

    def trainer_base(self) -> type:
        from socratic_exp.algorithms.sdpo.trainer import SDPOTrainer

        return SDPOTrainer

    def trainer_extras(self, ctx: RunContext) -> dict[str, Any]:
        return {"sdpo": self.settings, "components": ctx.components, "chat": ctx.student.chat}


BUILD = SDPOBuild
