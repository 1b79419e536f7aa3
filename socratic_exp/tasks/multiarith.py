"""``task=multiarith``: MultiArith (Roy & Roth 2015) multi-step arithmetic word problems, integer answers.

Records are ``{"input", "target"}`` (the math-evaluation-harness file: all 600 problems) or ``{"question",
"final_ans"}`` (the Hub's ChilleD/MultiArith, split into train 420 / test 180). Exact duplicate questions are
dropped by default (the 600-problem file has 20, with the same targets), so a question never counts twice.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from socratic_exp.core.component import setting
from socratic_exp.tasks import verifiers
from socratic_exp.tasks.base import Verdict
from socratic_exp.tasks.benchmark import BenchmarkTask, Row
from socratic_exp.tasks.hub_data import Record, text


@dataclasses.dataclass(kw_only=True)
class MultiArithTask(BenchmarkTask):
    hub_name: str = "ChilleD/MultiArith"
    dedupe: bool = setting(True, "drop exact duplicate questions (the 600-problem file has 20)")

    name: ClassVar[str] = "multiarith"
    answer_parsers: ClassVar[tuple[str, ...]] = verifiers.ALL_PARSERS
    answer_format: ClassVar[str | None] = verifiers.FINAL_ANSWER_FORMS

    def to_row(self, record: Record, where: str) -> Row:
        return {
            "prompt": text(record, where, self.name, "input", "question").strip(),
            "answer": text(record, where, self.name, "target", "final_ans").strip(),
            "difficulty": 0,
        }

    def dedupe_key(self, row: Row) -> str | None:
        return row["prompt"] if self.dedupe else None

    def verify_strict(self, completion: str, answer: str) -> Verdict:
        return verifiers.verify_number(completion, answer)
