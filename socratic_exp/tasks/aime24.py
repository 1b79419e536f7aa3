"""``task=aime24``: the 30 problems of AIME 2024 I and II (math-ai/aime24), an evaluation set.

Records are ``{"problem", "answer", "id", "solution", ...}``; answers are integers 0-999 (``"025"`` is kept as
``25``). ``difficulty`` is the problem's third of its contest (1: problems 1-5, 2: 6-10, 3: 11-15) when the id
gives its number, else 0. It has no training split (see ``task=math500``).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from socratic_exp.tasks.benchmark import EvalSetTask, Row
from socratic_exp.tasks.hub_data import Record, optional_text, text


def contest_third(problem_id: object, first_id: int) -> int:
    """1-3 by the problem's position in its 15-problem contest (later AIME problems are harder), else 0."""
    try:
        number = int(str(problem_id)) - first_id
    except ValueError:
        return 0
    return (number % 15) // 5 + 1 if number >= 0 else 0


def integer_text(answer: str) -> str:
    return str(int(answer)) if answer.strip().isdigit() else answer.strip()


@dataclasses.dataclass(kw_only=True)
class Aime24Task(EvalSetTask):
    hub_name: str = "math-ai/aime24"

    name: ClassVar[str] = "aime24"
    first_id: ClassVar[int] = 60  # ids 60-89 in the Qwen2.5-Math / AReaL file

    def to_row(self, record: Record, where: str) -> Row:
        return {
            "prompt": text(record, where, self.name, "problem", "question"),
            "answer": integer_text(text(record, where, self.name, "answer")),
            "reference": optional_text(record, where, self.name, "solution"),
            "difficulty": contest_third(record.get("id"), self.first_id),
        }
