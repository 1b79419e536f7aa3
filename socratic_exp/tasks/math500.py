"""``task=math500``: OpenAI's MATH-500 test split (HuggingFaceH4/MATH-500), an evaluation set.

Records are ``{"problem", "solution", "answer", "subject", "level", "unique_id"}``; ``difficulty`` is the MATH
level (1-5) and ``reference`` the solution. It has no training split: train on another set that evaluates on it
(``task=dapo_math task.eval_set=math500``) or give ``task.data_files.train``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from socratic_exp.tasks.benchmark import EvalSetTask, Row
from socratic_exp.tasks.hub_data import Record, optional_text, text


@dataclasses.dataclass(kw_only=True)
class Math500Task(EvalSetTask):
    hub_name: str = "HuggingFaceH4/MATH-500"

    name: ClassVar[str] = "math500"

    def to_row(self, record: Record, where: str) -> Row:
        level = record.get("level")
        finite = isinstance(level, int | float) and not isinstance(level, bool) and math.isfinite(level)
        return {
            "prompt": text(record, where, self.name, "problem", "question"),
            "answer": text(record, where, self.name, "answer", "expected_answer"),
            "reference": optional_text(record, where, self.name, "solution"),
            "difficulty": int(level) if finite else int(str(level)) if str(level).isdigit() else 0,
            "subject": str(record.get("subject") or ""),
        }
