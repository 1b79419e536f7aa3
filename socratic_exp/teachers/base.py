"""The teacher interface: corrective guidance for wrong attempts.

Every option implements ``_guide``; the public ``guide`` wraps it with what every teacher owes the run: the ground
truth is shown only when ``access_ground_truth`` is on, each call is timed and counted, guidance that states the
answer is counted as a leak, and a few (question, attempt, guidance) samples are kept for the W&B table. Reflection on
traces (viewpoints) is an interface of its own that a teacher may also offer: ``teachers/reflection.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import re
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from socratic_exp.core.component import Component, setting

if TYPE_CHECKING:
    from socratic_exp.models.base import Student
    from socratic_exp.tasks.base import Task

Context = str | list[dict[str, str]]  # a plain prompt, or chat messages

# The teacher's guidance prompt, used for all guidance by every teacher option that writes from a prompt: its text is
# the teaching template of the SocraticPO paper (Appendix B.2). Placeholders: {question}, {student_answer},
# {reference_solution}, {ground_truth_block}, {verifier_feedback}, {attempt_number}.
GUIDANCE_TEMPLATE = (
    "You are an expert teacher. Student's answer is incorrect. Please review the student's latest answer and "
    "provide concise, actionable guidance. Prefer hints, corrections, and next-step suggestions over directly "
    "revealing the answer.\n"
    "TEACHING PRINCIPLE:\n"
    "- Point out the main issue in the student's answer.\n"
    "- Give the next step or correction they should try.\n"
    "- Do not solve the full problem for them unless explicitly allowed.\n"
    "- Keep the guidance short and concrete.\n"
    "Question: {question}\n"
    "Student's latest answer: {student_answer}\n"
    "Reference solution: {reference_solution}\n"
    "Ground-truth block: {ground_truth_block}\n"
    "Output Format: Write a short piece of guidance for the student."
)
TEMPLATE_FIELDS = (
    "question",
    "student_answer",
    "reference_solution",
    "ground_truth_block",
    "verifier_feedback",
    "attempt_number",
)
_PLACEHOLDER = re.compile(r"\{(" + "|".join(TEMPLATE_FIELDS) + r")\}")
NOT_PROVIDED = "(not provided)"


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One student attempt and the verifier's verdict on it."""

    completion: str
    score: float
    reason: str


@dataclasses.dataclass(frozen=True)
class GuidanceRequest:
    """What a teacher sees for one question: ``answer`` / ``reference`` are blanked unless the teacher has
    ground-truth access."""

    question: str
    attempts: tuple[Attempt, ...]
    answer: str | None = None
    reference: str | None = None

    @classmethod
    def for_row(cls, row: dict[str, Any], attempts: Sequence[Attempt]) -> GuidanceRequest:
        """The request for a dataset row (its prompt's question, answer and reference) and its attempts so far."""
        from socratic_exp.tasks.base import question_text

        return cls(question_text(row["prompt"]), tuple(attempts), row["answer"], row.get("reference"))

    @property
    def latest(self) -> Attempt:
        return self.attempts[-1]


def render_template(template: str, request: GuidanceRequest) -> str:
    """Fill a teaching template; only the known ``{placeholders}`` are replaced (LaTeX braces stay as they are)."""
    ground_truth = f"The correct final answer is {request.answer}." if request.answer else NOT_PROVIDED
    values = {
        "question": request.question.strip(),
        "student_answer": request.latest.completion.strip(),
        "reference_solution": (request.reference or NOT_PROVIDED).strip(),
        "ground_truth_block": ground_truth,
        "verifier_feedback": request.latest.reason,
        "attempt_number": str(len(request.attempts)),
    }
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def extend_context(context: Context, attempt: str, guidance: str) -> Context:
    """c(k+1) = c(k) || y(k) || f(k): the attempt as the model's turn, then the guidance (a user turn in chat)."""
    if isinstance(context, list):
        return [*context, {"role": "assistant", "content": attempt}, {"role": "user", "content": guidance}]
    attempt = attempt if attempt.endswith("\n") else attempt + "\n"
    return f"{context}{attempt}{guidance.strip()}\n"


_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w]|\.\d)")
_LETTER = re.compile(r"^[A-Z]$")
# Numbers that name a line ("step 3") or are denied ("is not 13") do not state an answer.
_NOT_A_STATEMENT = re.compile(r"\b(?:(?:step|line|attempt)s?|not)\s+-?\d+(?:\.\d+)?", re.IGNORECASE)


def _as_number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def states_answer(guidance: str, answer: str | None, question: str = "") -> bool:
    """Whether ``guidance`` gives away ``answer``.

    Numbers: the value appears as a number in the guidance, unless it already appears in the question (then only
    an explicit statement counts: ``= 14``, ``is 14``, ``A: 14``). Option letters: only answer-like mentions
    (``answer is B``, ``option B``, ``(B)``, ``<answer>B</answer>``). Other answers: the text, spaces ignored.
    """
    answer = (answer or "").strip()
    if not answer or not guidance:
        return False
    guidance = _NOT_A_STATEMENT.sub(" ", guidance[:20_000])
    value = _as_number(answer)
    if value is not None:
        numbers = {_as_number(m.group()) for m in _NUMBER.finditer(guidance)}
        if value not in numbers:
            return False
        if value not in {_as_number(m.group()) for m in _NUMBER.finditer(question)}:
            return True
        plain = re.escape(answer if "." not in answer else answer.rstrip("0").rstrip("."))
        return bool(re.search(rf"(?:=|\bis|A:|answer\W{{0,12}})\s*{plain}(?!\d|\.\d)", guidance, re.IGNORECASE))
    if _LETTER.match(answer):
        letter = re.escape(answer)
        pattern = rf"(?:answer|option|choice)\s*(?:is|:)?\s*\(?{letter}\b|\({letter}\)|<answer>\s*{letter}\s*</answer>"
        return bool(re.search(pattern, guidance))
    squeeze = "".join(answer.split())
    return len(squeeze) >= 2 and squeeze in "".join(guidance.split())


class TeacherStats:
    """Counters since the last ``drain``: calls, requests, latency, tokens, failures, retries, cache hits, leaks."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, **amounts: float) -> None:
        self.counts.update(amounts)

    def drain(self) -> dict[str, float]:
        counts, self.counts = self.counts, Counter()
        if not counts:
            return {}
        metrics = {f"teacher/{name}": float(value) for name, value in counts.items()}
        requests = counts.get("requests", 0)
        if requests:
            metrics["teacher/latency_per_request_s"] = counts.get("latency_s", 0.0) / requests
            metrics["teacher/leak_rate"] = counts.get("answer_leaks", 0) / requests
        return metrics


@dataclasses.dataclass(kw_only=True)
class Teacher(Component):
    """A teacher option; all calls are batched over questions."""

    config_group: ClassVar[str] = "teacher"
    present: ClassVar[bool] = True  # False: the option that stands for "no teacher" (it gives no guidance)

    access_ground_truth: bool = setting(
        False, "true: the teacher is given the reference answer / solution (its template's ground-truth blocks)"
    )
    log_samples: int = setting(
        16, "(question, attempt, guidance) rows kept per logging interval for the W&B table (0: none)", ge=0
    )
    answer_tokens: int | None = setting(
        None,
        "the student's latest answer cut to its first N tokens (the student's tokenizer) before the teacher reads "
        "it (null: the whole answer; SocraticPO's authors cut at 1024)",
        ge=1,
    )

    def __post_init__(self) -> None:
        self._student_tokenizer: Any = None
        self.stats = TeacherStats()
        self._samples: list[dict[str, Any]] = []
        self._seen = 0
        self._sample_rng = random.Random(0)
        super().__post_init__()

    # --- lifecycle --------------------------------------------------------------------------------------------
    def preflight(self) -> None:
        """Cheap start-up checks before any model loads (e.g. that a server answers); raise UserError."""

    def attach(self, task: Task, student: Student) -> None:
        """Called once the task and student exist (a self-guiding teacher shares the student's weights); an option
        that attaches more calls this first."""
        self._student_tokenizer = getattr(student, "tokenizer", None)

    def close(self) -> None:
        """Release clients, threads and models."""

    # --- capabilities (what an algorithm may rely on) ---------------------------------------------------------
    def separate_model(self) -> tuple[Any, Any] | None:
        """The teacher's own local (model, tokenizer), apart from the student's, when it has one; else None (a
        remote teacher, a rule, or self-guidance with the student's weights)."""
        return None

    # --- the interface ----------------------------------------------------------------------------------------
    def guide(self, requests: Sequence[GuidanceRequest]) -> list[str]:
        """Concise corrective guidance for each request's latest (wrong) attempt."""
        if not requests:
            return []
        shown = [self._shown(r) for r in requests]
        start = time.perf_counter()
        texts = self._guide(shown)
        self.stats.add(calls=1, requests=len(requests), latency_s=time.perf_counter() - start)
        for request, text in zip(requests, texts, strict=True):
            leaked = states_answer(text, request.answer, request.question)
            self.stats.add(answer_leaks=int(leaked), guidance_chars=len(text))
            self._keep_sample(request, text, leaked)
        return texts

    @contextlib.contextmanager
    def separate_stats(self) -> Iterator[TeacherStats]:
        """Count the calls inside the block apart (e.g. an evaluation's, so they do not mix with training's)."""
        saved, self.stats = self.stats, TeacherStats()
        try:
            yield self.stats
        finally:
            self.stats = saved

    def _shown(self, request: GuidanceRequest) -> GuidanceRequest:
        """The request as the teacher reads it: the ground truth blanked without access, the answer cut."""
        if not self.access_ground_truth:
            request = dataclasses.replace(request, answer=None, reference=None)
        if self.answer_tokens and self._student_tokenizer is not None:
            tokenizer, latest = self._student_tokenizer, request.latest
            ids = tokenizer(latest.completion, add_special_tokens=False)["input_ids"]
            if len(ids) > self.answer_tokens:
                cut = dataclasses.replace(latest, completion=tokenizer.decode(ids[: self.answer_tokens]))
                request = dataclasses.replace(request, attempts=(*request.attempts[:-1], cut))
        return request

    def metrics(self) -> dict[str, float]:
        """``teacher/*`` counters since the last call."""
        return self.stats.drain()

    def samples(self) -> list[dict[str, Any]]:
        """A uniform sample of the guidance given since the last call (rows of the W&B table)."""
        samples, self._samples, self._seen = self._samples, [], 0
        return samples

    # --- to implement -----------------------------------------------------------------------------------------
    def _guide(self, requests: list[GuidanceRequest]) -> list[str]:
        raise NotImplementedError

    def _keep_sample(self, request: GuidanceRequest, guidance: str, leaked: bool) -> None:
        # Reservoir sampling: every guidance of the interval is equally likely to reach the table.
        row = {
            "question": request.question,
            "attempt": request.latest.completion,
            "reason": request.latest.reason,
            "guidance": guidance,
            "leaked": leaked,
        }
        self._seen += 1
        if len(self._samples) < self.log_samples:
            self._samples.append(row)
        elif self.log_samples and (slot := self._sample_rng.randrange(self._seen)) < self.log_samples:
            self._samples[slot] = row
