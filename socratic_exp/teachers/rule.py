"""``teacher=rule``: a diagnostic teacher for the arithmetic task (Socratic-RL, Section 7, Phase 1).

It replays the student's chain of thought (``tasks/diagnosis.py``), finds the first wrong step, names its
class and writes one short ``Hint:`` line pointing at that step, in the wording the warm-started student has
seen in its context. Without ground-truth access it never states the final result (it can compute it, but a
rule teacher that does would not be a teacher). ``reflect`` turns recurring error classes into viewpoints
("Principle: work out the brackets first."), choosing among the phrasings of each class; its meta-learning
(Socratic-RL, Phase 1 of Section 7) reweights the phrasings by their measured utility: a softmax over each
phrasing's mean U(v) at ``phrasing_temperature`` (unmeasured phrasings count as 0).

On other tasks it knows no more than the verifier: it turns the verdict's reason (wrong / format / empty /
truncated) into a fixed sentence, and reflects nothing.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from socratic_exp.core.component import setting
from socratic_exp.tasks import expressions as ex
from socratic_exp.tasks.arithmetic import GUIDANCE, PRINCIPLES, SLIP_IN_LAST_STEP, ArithmeticTask, expression_in
from socratic_exp.tasks.base import VERIFIER_FEEDBACK
from socratic_exp.tasks.diagnosis import Diagnosis, diagnose
from socratic_exp.teachers.base import Attempt, GuidanceRequest
from socratic_exp.teachers.reflection import Reflective, ScoredViewpoint, Viewpoint, parse_viewpoint

if TYPE_CHECKING:
    from socratic_exp.models.base import Student
    from socratic_exp.tasks.base import Task

HINTS = {
    "precedence": GUIDANCE["precedence"][1],  # "Hint: step {n} ignores that * comes before {op}."
    "order": "Hint: step {n}: work + and - from left to right.",
    "parentheses": GUIDANCE["parentheses"][1],  # "Hint: step {n} ignores the brackets."
    "slip": GUIDANCE["slip"][1],  # "Hint: step {n} is wrong: {left}{op}{right} is {value}, not {result}."
    "copy_step": GUIDANCE["copy"][0],  # "Hint: step {n} uses {wrote} but the expression has {expected}."
    "copy_answer": "Hint: copy the result of your last step into the A: line.",
    "no_answer": "Hint: end with the line A: <number>.",
    "format": "Hint: write one step per line as a op b=c, then A: <number>.",
}
# Each error class's viewpoint phrasings (the warm-started student has seen the PRINCIPLES lines before questions).
VIEWPOINTS: dict[str, tuple[str, ...]] = {
    "precedence": PRINCIPLES["precedence"],
    "order": ("Principle: work + and - from left to right.",),
    "parentheses": PRINCIPLES["parentheses"],
    "slip": PRINCIPLES["slip"],
    "copy": ("Heuristic: copy every number exactly as it is written.",),
    "no_answer": ("Heuristic: finish with the line A: <number>.",),
    "format": ("Heuristic: write one step per line, then A: <number>.",),
}


def error_key(diagnosis: Diagnosis) -> str:
    """The class used for hints, viewpoints and counts (``order`` splits left-to-right slips off precedence)."""
    if diagnosis.error == "precedence" and diagnosis.order_only:
        return "order"
    return diagnosis.error or "none"


def hint_for(diagnosis: Diagnosis) -> str:
    """The one-line hint for a diagnosed wrong attempt, in the words of the warm-start corpus."""
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
    template = SLIP_IN_LAST_STEP if diagnosis.last_step else HINTS[key]  # the value there would be the answer
    return template.format(
        n=diagnosis.step,
        op=wrote.op,
        left=wrote.left,
        right=wrote.right,
        result=wrote.result,
        value=ex.apply(wrote.op, wrote.left, wrote.right),
    )


@dataclasses.dataclass(kw_only=True)
class RuleTeacher(Reflective):
    min_occurrences: int = setting(
        2, "Socratic-RL reflect(): an error class becomes a viewpoint once seen this many times", ge=1
    )
    phrasing_temperature: float = setting(
        0.02, "Socratic-RL meta-learning: softmax temperature over each phrasing's mean measured utility U(v)", gt=0.0
    )
    seed: int = setting(0, "seed of the phrasing choice", ge=0)

    def __post_init__(self) -> None:
        self._arithmetic = True
        self._seen_errors: Counter[str] = Counter()
        self._utility: dict[str, list[float]] = {}  # phrasing -> [sum of utilities, measurements]
        self._rng = random.Random(self.seed)
        super().__post_init__()

    def attach(self, task: Task, student: Student) -> None:
        super().attach(task, student)
        self._arithmetic = isinstance(task, ArithmeticTask)

    def cannot_reflect_on(self, task: Task) -> str | None:
        if isinstance(task, ArithmeticTask):
            return None
        return "the rule teacher reflects only on task=arithmetic traces"

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

    def _reflect(self, questions: list[str], traces: list[Attempt], prompt: str | None) -> list[Viewpoint | None]:
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
            phrasings = VIEWPOINTS[key]
            text = self._rng.choices(phrasings, weights=self.phrasing_weights(phrasings))[0]
            viewpoints.append(parse_viewpoint(text, source_trace=question + trace.completion))  # kind: its label
        return viewpoints

    def phrasing_weights(self, phrasings: tuple[str, ...]) -> list[float]:
        """Softmax over the phrasings' mean measured utility (uniform until meta-learning has measured any)."""
        means = [self._mean_utility(text) for text in phrasings]
        top = max(means)
        return [math.exp((m - top) / self.phrasing_temperature) for m in means]

    def _mean_utility(self, text: str) -> float:
        total, count = self._utility.get(text, (0.0, 0))
        return total / count if count else 0.0

    def meta_update(self, scored: Sequence[ScoredViewpoint], prompt: str | None = None) -> dict[str, float]:
        for item in scored:
            entry = self._utility.setdefault(item.text, [0.0, 0])
            entry[0] += item.utility
            entry[1] += 1
        # how peaked the choice has become: the mean, over classes with several phrasings, of the top weight
        peaks = []
        for phrasings in VIEWPOINTS.values():
            if len(phrasings) > 1:
                weights = self.phrasing_weights(phrasings)
                peaks.append(max(weights) / sum(weights))
        return {"teacher_meta/updates": float(len(scored)), "teacher_meta/top_phrasing_weight": sum(peaks) / len(peaks)}

    def save_meta_state(self, folder: Path) -> None:
        state = {"utility": self._utility, "seen": self._seen_errors, "rng": self._rng.getstate()}
        (folder / "rule_teacher.json").write_text(json.dumps(state))

    def load_meta_state(self, folder: Path) -> None:
        path = folder / "rule_teacher.json"
        if path.is_file():
            state = json.loads(path.read_text())
            self._utility = {text: list(v) for text, v in state["utility"].items()}
            self._seen_errors = Counter(state["seen"])
            version, internal, gauss = state["rng"]
            self._rng.setstate((version, tuple(internal), gauss))
