"""``task=dapo_math``: DAPO-Math-17k (BytedTsinghua-SIA/DAPO-Math-17k), integer-answer competition problems.

Accepted record shapes: the original verl rows ``{"prompt": [{"role": "user", "content": ...}], "reward_model":
{"ground_truth": ...}}``, open-r1/DAPO-Math-17k-Processed's ``{"prompt": str, "solution": str}``, or plain
``{"problem", "answer"}``. DAPO's own instruction around each problem ("Solve the following math problem step by
step ... Answer: $Answer ...") is stripped so that the task's instruction applies (the verifier still accepts an
``Answer:`` line). The original repeats every problem 100 times (1.79M rows): rows are de-duplicated by problem.
The eval split is MATH-500 by default (as in the VPD paper), another evaluation set, or a held-out slice.
"""

from __future__ import annotations

import dataclasses
import re
from typing import ClassVar

from socratic_exp.core.errors import UserError
from socratic_exp.tasks.benchmark import MathTrainingTask, Row
from socratic_exp.tasks.hub_data import Record, as_text, present, text

_DAPO_HEAD = re.compile(r"^\s*Solve the following math problem step by step\..*?\n\s*\n", re.DOTALL)
_DAPO_TAIL = re.compile(r"\n\s*\n\s*Remember to put your answer on its own line after \"Answer:\"\.?\s*$")


def bare_problem(prompt: str) -> str:
    """The problem without DAPO's instruction before and after it."""
    return _DAPO_TAIL.sub("", _DAPO_HEAD.sub("", prompt, count=1)).strip()


@dataclasses.dataclass(kw_only=True)
class DapoMathTask(MathTrainingTask):
    hub_name: str = "BytedTsinghua-SIA/DAPO-Math-17k"
    eval_set: str = "math500"

    name: ClassVar[str] = "dapo_math"
    parquet_columns: ClassVar[tuple[str, ...]] = ("prompt", "reward_model", "solution", "problem", "answer")

    def to_row(self, record: Record, where: str) -> Row:
        name, prompt = present(record, where, self.name, "prompt", "problem")
        if isinstance(prompt, list):  # verl chat messages
            turns = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
            if not turns:
                raise UserError(
                    f"{where}: malformed dapo_math row: {name!r} is a list without a user message",
                    f"write {name!r} as text or as chat messages [{{role: user, content: ...}}]",
                )
            prompt = as_text(turns[0], where, self.name, f"{name}[user].content")
        problem = as_text(prompt, where, self.name, name)
        reward_model = record.get("reward_model")
        if isinstance(reward_model, dict) and reward_model.get("ground_truth") is not None:
            answer = as_text(reward_model["ground_truth"], where, self.name, "reward_model.ground_truth")
        else:
            answer = text(record, where, self.name, "solution", "answer")
        return {"prompt": bare_problem(problem), "answer": answer.strip(), "difficulty": 0}

    def dedupe_key(self, row: Row) -> str | None:
        return row["prompt"]
