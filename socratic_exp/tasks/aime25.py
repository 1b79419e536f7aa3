"""``task=aime25``: the 30 problems of AIME 2025 I and II (math-ai/aime25), an evaluation set.

Records are ``{"problem", "answer", "id"}`` (ids "0"-"29"). Known defect of the common copies: two problems (ids
18 and 27) contain form-feed characters where ``\\frac`` lost its backslash to JSON escaping; they are repaired
(``\\x0c`` -> ``\\f``). ``difficulty`` as in ``task=aime24``. It has no training split (see ``task=math500``).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from socratic_exp.tasks.aime24 import contest_third, integer_text
from socratic_exp.tasks.benchmark import EvalSetTask, Row
from socratic_exp.tasks.hub_data import Record, text


def repair_form_feeds(problem: str) -> str:
    """``"\\frac"`` written unescaped in JSON decodes to a form feed + ``rac``: put the backslash back."""
    return problem.replace("\x0c", "\\f")


@dataclasses.dataclass(kw_only=True)
class Aime25Task(EvalSetTask):
    hub_name: str = "math-ai/aime25"

    name: ClassVar[str] = "aime25"

    def to_row(self, record: Record, where: str) -> Row:
        return {
            "prompt": repair_form_feeds(text(record, where, self.name, "problem", "question")),
            "answer": integer_text(text(record, where, self.name, "answer")),
            "difficulty": contest_third(record.get("id"), 0),
        }
