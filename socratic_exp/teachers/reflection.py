"""Reflection: what a teacher may offer besides guidance, to a method that asks it for viewpoints drawn from the
student's traces (Socratic-RL). A teacher that never reflects (``teacher=none``) carries none of it.

- ``Reflective``: a teacher that reflects on traces (``reflect``), says on which tasks it cannot
  (``cannot_reflect_on``), and may learn by itself from the measured utility U(v) of its viewpoints (``meta_update``:
  the rule teacher reweights its phrasings, the blackbox teacher shows measured exemplars in its prompt), with that
  state saved in and restored from checkpoints.
- ``TrainableReflective``: a reflective teacher whose viewpoints its own local weights write. It offers what a method
  needs to train those weights on its reflections: weights of its own apart from the student's
  (``decouple_from_student``, then ``separate_model``), and each reflection as a training example
  (``reflection_example``). The training itself (Socratic-RL's DPO meta-update) belongs to the method that runs it.

The interface is the teacher's side of the exchange, so it lives here with the teachers; a method asks
``isinstance(teacher, Reflective)`` and refuses a teacher that is not.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from socratic_exp.core.errors import ConfigError
from socratic_exp.teachers.base import Attempt, Teacher

if TYPE_CHECKING:
    from socratic_exp.tasks.base import Task

ViewpointKind = Literal["principle", "heuristic", "causal explanation", "counter-example"]


@dataclasses.dataclass(frozen=True)
class Viewpoint:
    kind: ViewpointKind
    text: str
    source_trace: str


@dataclasses.dataclass(frozen=True)
class ScoredViewpoint:
    """A viewpoint the teacher wrote, the trace it reflected on, and its measured utility U(v) (Socratic-RL, 3.3):
    the signal of the teacher's meta-learning."""

    question: str
    trace: Attempt
    text: str
    utility: float


VIEWPOINT_LABELS: dict[str, ViewpointKind] = {
    "principle": "principle",
    "heuristic": "heuristic",
    "causal explanation": "causal explanation",
    "counter-example": "counter-example",
    "note": "principle",
}
_LABELLED_LINE = re.compile(r"^\W*(" + "|".join(map(re.escape, VIEWPOINT_LABELS)) + r")\s*:\s*(.+)$", re.IGNORECASE)
MAX_VIEWPOINT_CHARS = 300
MIN_VIEWPOINT_LETTERS = 8  # fewer letters than this is not a readable principle (e.g. a stray number)
_LABEL = re.compile(r"^\s*[A-Za-z -]{2,24}:\s*")


def parse_viewpoint(reply: str, source_trace: str) -> Viewpoint | None:
    """The first labelled line of a teacher's reply (``Principle: ...``), else its first line as a principle; None
    when it holds no readable text."""
    lines = [line.strip() for line in reply.strip().splitlines() if line.strip()]
    if not lines:
        return None
    kind: ViewpointKind = "principle"
    text = lines[0]
    for line in lines:
        if match := _LABELLED_LINE.match(line):
            kind = VIEWPOINT_LABELS[match.group(1).lower()]
            text = f"{match.group(1).capitalize()}: {match.group(2).strip()}"
            break
    text = text[:MAX_VIEWPOINT_CHARS]
    if sum(ch.isalpha() for ch in text.split(":", 1)[-1]) < MIN_VIEWPOINT_LETTERS:
        return None
    return Viewpoint(kind, text, source_trace)


def reflection_template(own: str | None, asked: str | None) -> str:
    """The reflection prompt a teacher writes from: its option's own (``reflect_template``) where set, else the one the
    asking method hands to ``reflect`` / ``reflection_example``."""
    template = own if own is not None else asked
    if template is None:
        raise ConfigError(
            "teacher.reflect_template",
            None,
            "is null, and the method asking for reflections gives no prompt of its own",
            "set teacher.reflect_template to a prompt with {student_answer}",
        )
    return template


def strip_label(text: str) -> str:
    """``Principle: do * first.`` -> ``do * first.``"""
    return _LABEL.sub("", text).strip()


@dataclasses.dataclass(kw_only=True)
class Reflective(Teacher):
    """A teacher that reflects on traces: options implement ``_reflect`` and, where they learn from measured
    utilities by themselves, ``meta_update`` with ``save_meta_state`` / ``load_meta_state``."""

    def cannot_reflect_on(self, task: Task) -> str | None:
        """Why this teacher cannot reflect on ``task``'s traces, in words for an error message (None: it can)."""
        return None

    def cannot_meta_learn(self) -> tuple[str, str] | None:
        """Why this teacher cannot be meta-learned as configured, and the teacher setting that would let it (None: it
        can, or it has nothing to learn)."""
        return None

    def reflect(
        self, questions: Sequence[str], traces: Sequence[Attempt], prompt: str | None = None
    ) -> list[Viewpoint | None]:
        """A viewpoint drawn from each trace, or None where the teacher has nothing to say. ``prompt`` is the asking
        method's reflection prompt, for teachers that write from one (their option's ``reflect_template`` wins where
        set); placeholders: those of ``GUIDANCE_TEMPLATE`` and ``{exemplars}``."""
        if not traces:
            return []
        viewpoints = self._reflect(list(questions), list(traces), prompt)
        self.stats.add(reflections=len(traces), viewpoints=sum(v is not None for v in viewpoints))
        return viewpoints

    def meta_update(self, scored: Sequence[ScoredViewpoint], prompt: str | None = None) -> dict[str, float]:
        """What the teacher learns by itself from the measured utility of its past viewpoints (Socratic-RL, Section
        3.3); returns ``teacher_meta/*`` statistics, {} when it learns nothing by itself (a ``TrainableReflective``
        teacher is trained by the method instead). ``prompt``: the reflection prompt the viewpoints were asked with
        (as in ``reflect``)."""
        return {}

    def save_meta_state(self, folder: Path) -> None:
        """Write what ``meta_update`` learned into a checkpoint folder."""

    def load_meta_state(self, folder: Path) -> None:
        """Restore what ``save_meta_state`` wrote (a resumed run continues with the teacher it had)."""

    def _reflect(self, questions: list[str], traces: list[Attempt], prompt: str | None) -> list[Viewpoint | None]:
        raise NotImplementedError


@dataclasses.dataclass(kw_only=True)
class TrainableReflective(Reflective):
    """A reflective teacher whose viewpoints its own local weights write, which a method may train on its
    reflections (after ``decouple_from_student``, ``separate_model`` holds them)."""

    def decouple_from_student(self) -> None:
        """A teacher that writes with the student's own weights takes a copy of them (as they are now), so that
        training it trains the teacher and not the student; other teachers have nothing to do."""

    def reflection_example(
        self, question: str, trace: Attempt, viewpoint: str, asked: str | None = None
    ) -> tuple[Any, Any]:
        """(prompt, completion): what the teacher reads when reflecting on ``trace`` (with ``asked``, the method's
        reflection prompt, as in ``reflect``) and what it would have generated to write ``viewpoint``, in TRL's
        form for its model: a user turn and an assistant turn for chat models, text and its continuation else."""
        raise NotImplementedError
