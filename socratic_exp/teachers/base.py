"""The teacher interface: corrective guidance for wrong attempts and viewpoints reflected from traces."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from socratic_exp.component import Component

ViewpointKind = Literal["principle", "heuristic", "causal explanation", "counter-example"]


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One student attempt and the verifier's reason for its score."""

    completion: str
    score: float
    reason: str


@dataclasses.dataclass(frozen=True)
class Viewpoint:
    kind: ViewpointKind
    text: str
    source_trace: str


@dataclasses.dataclass(kw_only=True)
class Teacher(Component):
    """A teacher option; all calls are batched over questions."""

    config_group: ClassVar[str] = "teacher"

    access_ground_truth: bool = False

    def guide(self, questions: list[str], attempts: list[list[Attempt]], references: list[str | None]) -> list[str]:
        """Concise corrective guidance for each question's latest (wrong) attempt."""
        raise NotImplementedError

    def reflect(self, questions: list[str], traces: list[str], outcomes: list[float]) -> list[list[Viewpoint]]:
        """Viewpoints drawn from each trace."""
        raise NotImplementedError
