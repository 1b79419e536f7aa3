"""The distiller interface: compress viewpoint-guided behaviour into the student's weights."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from socratic_exp.component import Component


@dataclasses.dataclass(kw_only=True)
class Distiller(Component):
    config_group: ClassVar[str] = "distiller"

    def distill(
        self, student: Any, tokenizer: Any, prompts: list[str], contexts: list[str], run_dir: Any
    ) -> dict[str, float]:
        """Train ``student`` without ``contexts`` to behave as it does with them; returns metrics."""
        raise NotImplementedError
