"""``distiller=none``: no distillation phase (Socratic-RL without knowledge distillation: V is never reset)."""

from __future__ import annotations

import dataclasses

from socratic_exp.distillers.base import Distiller


@dataclasses.dataclass(kw_only=True)
class NoDistiller(Distiller):
    distills = False
