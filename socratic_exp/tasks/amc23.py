"""``task=amc23``: 40 AMC 2023 problems with numeric answers (math-ai/amc23), an evaluation set.

Records are ``{"problem", "answer", "id", ...}``; answers are stored as floats (``27.0``) and kept as ``27``.
It has no training split (see ``task=math500``).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from socratic_exp.tasks.benchmark import EvalSetTask, Row
from socratic_exp.tasks.hub_data import Record, text


@dataclasses.dataclass(kw_only=True)
class Amc23Task(EvalSetTask):
    hub_name: str = "math-ai/amc23"

    name: ClassVar[str] = "amc23"

    def to_row(self, record: Record, where: str) -> Row:
        return {
            "prompt": text(record, where, self.name, "problem", "question"),
            "answer": text(record, where, self.name, "answer"),
            "difficulty": 0,
        }
