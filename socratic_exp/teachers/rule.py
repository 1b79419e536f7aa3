"""``teacher=rule``: a diagnostic teacher for the arithmetic task (Socratic-RL, Section 7, Phase 1).

It replays the student's chain of thought (``teachers/diagnosis.py``), finds the first wrong step, names its
class and writes one short ``Hint:`` line pointing at that step, in the wording the warm-started student has
seen in its context. Without ground-truth access it never states the final result (it can compute it, but a
rule teacher that does would not be a teacher). ``reflect`` turns recurring error classes into viewpoints
("Principle: work out the brackets first.").

On other tasks it knows no more than the verifier: it turns the verdict's reason (wrong / format / empty /
truncated) into a fixed sentence, and reflects nothing.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import TYPE_CHECKING

from socratic_exp.tasks import expressions as ex
from socratic_exp.tasks.arithmetic import GUIDANCE, PRINCIPLES, ArithmeticTask, expression_in
from socratic_exp.teachers.base import Attempt, GuidanceRequest, Teacher, Viewpoint, ViewpointKind
from socratic_exp.teachers.diagnosis import Diagnosis, diagnose

if TYPE_CHECKING:
    from socratic_exp.models.base import Student
    from socratic_exp.tasks.base import Task

HINTS = {
    "precedence": GUIDANCE["precedence"][1],  # "Hint: step {n} ignores that * comes before {op}."
    "order": "Hint: step {n}: work + and - from left to right.",
    "parentheses": GUIDANCE["parentheses"][1],  # "Hint: step {n} ignores the brackets."
    "slip": GUIDANCE["slip"][1],  # "Hint: step {n} is wrong: {left}{op}{right} is not {result}."
    "copy_step": "Hint: step {n} uses {wrote} but the expression has {expected}.",
    "copy_answer": "Hint: copy the result of your last step into the A: line.",
    "no_answer": "Hint: end with the line A: <number>.",
    "format": "Hint: write one step per line as a op b=c, then A: <number>.",
}
VIEWPOINTS: dict[str, tuple[ViewpointKind, str]] = {
    "precedence": ("principle", PRINCIPLES["precedence"][0]),
    "order": ("principle", "Principle: work + and - from left to right."),
    "parentheses": ("principle", PRINCIPLES["parentheses"][0]),
    "slip": ("heuristic", PRINCIPLES["slip"][0]),
    "copy": ("heuristic", "Heuristic: copy every number exactly as it is written."),
    "no_answer": ("heuristic", "Heuristic: finish with the line A: <number>."),
    "format": ("heuristic", "Heuristic: write one step per line, then A: <number>."),
}
VERIFIER_FEEDBACK = {
    "format": "Your answer is not in the required format: end with the final answer written as the question asks.",
    "empty": "You gave no answer: work through the problem and end with a final answer.",
    "truncated": "Your answer was cut off before the final answer: be more concise.",
    "wrong": "Your final answer is incorrect: re-check each step of your reasoning.",
}


def error_key(diagnosis: Diagnosis) -> str:
    """The class used for hints, viewpoints and counts (``order`` splits left-to-right slips off precedence)."""
    if diagnosis.error == "precedence" and diagnosis.order_only:
        return "order"
    return diagnosis.error or "none"


def hint_for(diagnosis: Diagnosis) -> str:
    key = error_key(diagnosis)
    wrote, expected = diagnosis.wrote, diagnosis.expected
    if key == "copy":
        if wrote is None or expected is None:
            return HINTS["copy_answer"]
        return HINTS["copy_step"].format(
            n=diagnosis.step,
            wrote=f"{wrote.left}{wrote.op}{wrote.right}",
            expected=f"{expected.left}{expected.op}{expected.right}",
        )
    if wrote is None:
        return HINTS.get(key, HINTS["format"])
    return HINTS[key].format(n=diagnosis.step, op=wrote.op, left=wrote.left, right=wrote.right, result=wrote.result)


@dataclasses.dataclass(kw_only=True)
class RuleTeacher(Teacher):
    min_occurrences: int = 2  # an error class becomes a viewpoint once it has been seen this many times

    def __post_init__(self) -> None:
        self._arithmetic = True
        self._seen_errors: Counter[str] = Counter()
        super().__post_init__()

    def validate(self) -> None:
        super().validate()
        self.check_range("min_occurrences", ge=1)

    def attach(self, task: Task, student: Student) -> None:
        self._arithmetic = isinstance(task, ArithmeticTask)

    def diagnose(self, question: str, completion: str) -> Diagnosis | None:
        """The diagnosis of an arithmetic trace, or None when the question holds no readable expression."""
        text = expression_in(question) if self._arithmetic else None
        if text is None:
            return None
        try:
            return diagnose(ex.parse(text), completion)
        except ex.ParseError:
            return None

    def _guide(self, requests: list[GuidanceRequest]) -> list[str]:
        texts = []
        for request in requests:
            diagnosis = self.diagnose(request.question, request.latest.completion)
            if diagnosis is None:
                text = VERIFIER_FEEDBACK.get(request.latest.reason.split()[0] if request.latest.reason else "", "")
                text = text or VERIFIER_FEEDBACK["wrong"]
            else:
                self.stats.add(**{f"error_{error_key(diagnosis)}": 1})
                text = hint_for(diagnosis) if diagnosis.error else VERIFIER_FEEDBACK["wrong"]
            if request.answer is not None:
                text += f" The answer is {request.answer}."
            texts.append(text)
        return texts

    def _reflect(self, questions: list[str], traces: list[Attempt]) -> list[Viewpoint | None]:
        viewpoints: list[Viewpoint | None] = []
        for question, trace in zip(questions, traces, strict=True):
            diagnosis = self.diagnose(question, trace.completion) if trace.score < 1.0 else None
            if diagnosis is None or diagnosis.error is None:
                viewpoints.append(None)
                continue
            key = error_key(diagnosis)
            self._seen_errors[key] += 1
            if self._seen_errors[key] < self.min_occurrences:
                viewpoints.append(None)
                continue
            kind, text = VIEWPOINTS[key]
            viewpoints.append(Viewpoint(kind, text, source_trace=question + trace.completion))
        return viewpoints
