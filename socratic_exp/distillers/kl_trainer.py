"""``distiller=kl``'s trainer: TRL's SDFTTrainer whose teacher is a given frozen model.

Why a subclass: SDFTTrainer reloads its teacher from the model's path; the KL distiller's teacher is a frozen copy of
the *current* student reading the viewpoints, which has no path to reload from.
"""

from __future__ import annotations

from typing import Any

from trl.experimental.sdft import SDFTTrainer


class ViewpointSDFTTrainer(SDFTTrainer):
    """SDFT with the given frozen teacher (the current student) instead of one reloaded from the model's path."""

    def __init__(self, *args: Any, frozen_teacher: Any, **kwargs: Any):
        self._frozen_teacher = frozen_teacher
        super().__init__(*args, **kwargs)

    def _setup_teacher_model(self) -> None:
        self.teacher_model = self._frozen_teacher
