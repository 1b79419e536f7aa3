"""How ``algorithm=vpd``'s settings become its trainer (``VPDTrainer``, ``trainer.py``): SDPO's build, VPD's trainer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from socratic_exp.algorithms.sdpo.build import SDPOBuild

if TYPE_CHECKING:
    from socratic_exp.algorithms.vpd.config import VPD


class VPDBuild(SDPOBuild):
    settings: VPD

    def trainer_base(self) -> type:
        from socratic_exp.algorithms.vpd.trainer import VPDTrainer

        return VPDTrainer


BUILD = VPDBuild
