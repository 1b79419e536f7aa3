"""``task=gsm8k``: grade-school math word problems (openai/gsm8k), integer answers.

Records are ``{"question", "answer"}`` where ``answer`` is the worked solution (with ``<<a*b=c>>`` calculator
annotations) ending in a ``#### N`` line. The row's ``answer`` is N (thousands separators dropped), ``reference``
the solution, ``difficulty`` its number of reasoning lines. Splits: the Hub's ``train`` (7473) and ``test`` (1319).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from socratic_exp.core.errors import UserError
from socratic_exp.tasks import verifiers
from socratic_exp.tasks.base import Verdict
from socratic_exp.tasks.benchmark import BenchmarkTask, Row
from socratic_exp.tasks.hub_data import Record, text


@dataclasses.dataclass(kw_only=True)
class Gsm8kTask(BenchmarkTask):
    hub_name: str = "openai/gsm8k"
    hub_config: str | None = "main"

    name: ClassVar[str] = "gsm8k"
    answer_parsers: ClassVar[tuple[str, ...]] = verifiers.ALL_PARSERS
    answer_format: ClassVar[str | None] = verifiers.FINAL_ANSWER_FORMS

    def to_row(self, record: Record, where: str) -> Row:
        solution = text(record, where, self.name, "answer")
        if "####" not in solution or verifiers.gold_number(solution) is None:
            raise UserError(
                f"{where}: malformed gsm8k row: the answer does not end in a '#### <number>' line",
                "use the openai/gsm8k format (the worked solution, then '#### N')",
            )
        steps = solution.rsplit("####", 1)[0].strip()
        final = solution.rsplit("####", 1)[1].strip().replace(",", "")
        return {
            "prompt": text(record, where, self.name, "question"),
            "answer": final,
            "reference": solution,
            "difficulty": max(1, len([line for line in steps.splitlines() if line.strip()])),
        }

    def verify_strict(self, completion: str, answer: str) -> Verdict:
        return verifiers.verify_number(completion, answer)
