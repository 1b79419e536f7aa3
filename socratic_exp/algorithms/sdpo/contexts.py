"""The teacher's feedback context, shared by ``algorithm=sdpo`` and ``algorithm=vpd`` (pure: no torch).

**The teacher context.** The teacher is the model conditioned on feedback (privileged context): for rollout y_i of
prompt x it reads C_i and then scores y_i token by token, q(. | x, C_i, y_<t). ``build_contexts`` makes C_i from the
feedback sources of ``algorithm.feedback`` ('+'-joined):

- ``sibling`` (SDPO's implicit feedback): a successful rollout of the same group (score >= ``success_threshold``),
  not the rollout itself when ``dont_reprompt_on_self_success``; the first one in the group, as TRL and the
  official code take it.
- ``environment``: the verifier's verdict on a failed rollout as a sentence, with the answer it read ("Your final
  answer 14 is incorrect: ..."; no answer: format / empty / truncated). That is all a verifier of the testbed or of
  the benchmark tasks knows short of the reference answer (no unit-test output, no intermediate results).
- ``teacher``: the critique of the run's ``teacher/`` option (rule, llm, blackbox) of a failed rollout,
  ``teacher.guide`` as SocraticPO asks for it (with the teacher's own ground-truth setting).

A rollout with neither a demonstration nor feedback has no usable context: it is not distilled (SDPO's
``self_distillation_mask``), and its teacher prompt is the bare prompt. ``feedback_only_without_solution`` drops the
feedback of a rollout that has a demonstration (the official code's ``environment_feedback_only_without_solution``).
``feedback_on_success`` (VPD's default) gives successful rollouts the environment's verdict too ("Your final answer 11
is correct."), with the ``environment`` or ``teacher`` source: VPD's E-step scores successful and failed trajectories
each under its own feedback, so the context's presence says nothing about success, only its content does. SDPO
(TRL, official code) gives feedback to failed rollouts only.

Templates: ``context_style=sdpo`` uses SDPO's (TRL's and the official code's) reprompt / solution / feedback templates
and puts the reprompt in the last user turn of a chat prompt. ``plain`` is for completion-style prompts (the embedded
tiny model, base models), whose completion must follow the question itself: the demonstration (``Note: a correct
solution is ...``) and the feedback lines come before the question, as the principle lines of the tiny student's
warm-start do. Like SDPO, neither style shows the teacher the failed attempt. Custom templates may, with {attempt}:
``reprompt_template='{solution}{prompt}{feedback}' feedback_template='{attempt}\n{feedback_raw}\n'`` is the
warm-start's retry layout, whose teacher lowers the likelihood of every token of the failed attempt, its answer line
included, where the preamble's leaves the answer line alone (``benchmarks/vpd.py contexts``). ``auto`` is ``sdpo`` for
chat models and ``plain`` otherwise.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from socratic_exp.tasks.base import PLAIN_SOLUTION_NOTE, environment_feedback

if TYPE_CHECKING:
    from socratic_exp.teachers.base import Context

FEEDBACK_SOURCES = ("environment", "sibling", "teacher")


@dataclasses.dataclass(frozen=True)
class Templates:
    """How a teacher prompt is put together. ``reprompt``: {prompt} {solution} {feedback}; ``solution``:
    {successful_previous_attempt}; ``feedback``: {feedback_raw} and (our addition) {attempt}."""

    reprompt: str
    solution: str
    feedback: str


# SDPO's templates (TRL's SDPOConfig and the official code's actor.yaml agree).
SDPO_TEMPLATES = Templates(
    reprompt="{prompt}{solution}{feedback}\n\nCorrectly solve the original question.\n",
    solution="\nCorrect solution:\n\n{successful_previous_attempt}\n\n",
    feedback="\nThe following is feedback from your unsuccessful earlier attempt:\n\n{feedback_raw}\n\n",
)
# Completion-style prompts: context lines before the question, as in the tiny student's warm-start.
PLAIN_TEMPLATES = Templates(
    reprompt="{solution}{feedback}{prompt}",
    solution=PLAIN_SOLUTION_NOTE,
    feedback="{feedback_raw}\n",
)
_THINKING = re.compile(r"<think>.*?</think>", re.DOTALL)


def parse_sources(feedback: str) -> tuple[str, ...]:
    """``'sibling+environment'`` -> ('sibling', 'environment'); unknown or repeated names raise ValueError."""
    names = tuple(name.strip() for name in feedback.split("+"))
    unknown = [name for name in names if name not in FEEDBACK_SOURCES]
    if unknown or len(set(names)) != len(names) or not names:
        raise ValueError(f"{unknown or names}")
    return names


@dataclasses.dataclass(frozen=True)
class Rollout:
    """One completion as the context builder sees it."""

    prompt: Context
    completion: str
    score: float
    reason: str
    extracted: str | None = None  # the answer the verifier read


@dataclasses.dataclass(frozen=True)
class TeacherContext:
    """The teacher's prompt for one rollout, and what went into it."""

    prompt: Context
    solution: int | None = None  # index (in the batch) of the sibling whose completion is the demonstration
    feedback: str | None = None

    @property
    def usable(self) -> bool:
        return self.solution is not None or self.feedback is not None


@dataclasses.dataclass(frozen=True)
class ContextSettings:
    """The settings ``build_contexts`` reads (the algorithm config has them under the same names)."""

    sources: tuple[str, ...]
    templates: Templates
    success_threshold: float = 1.0
    dont_reprompt_on_self_success: bool = True
    feedback_only_without_solution: bool = False
    feedback_on_success: bool = False
    remove_thinking: bool = False


def build_contexts(
    rollouts: Sequence[Rollout],
    group_size: int,
    settings: ContextSettings,
    critic: Callable[[list[int]], list[str]] | None = None,
) -> list[TeacherContext]:
    """The teacher context of every rollout; rollouts come in groups of ``group_size`` completions of one prompt.

    ``critic(indices)`` returns the teacher's critique of those (failed) rollouts; it is called once, for the
    rollouts whose critique is used.
    """
    if len(rollouts) % group_size:
        raise ValueError(f"{len(rollouts)} rollouts do not form groups of {group_size}")
    succeeded = [r.score >= settings.success_threshold for r in rollouts]
    solutions: list[int | None] = [None] * len(rollouts)
    if "sibling" in settings.sources:
        for i in range(len(rollouts)):
            start = i - i % group_size
            found = [
                j
                for j in range(start, start + group_size)
                if succeeded[j] and not (settings.dont_reprompt_on_self_success and j == i)
            ]
            solutions[i] = found[0] if found else None
    feedback_allowed = [
        not (settings.feedback_only_without_solution and solutions[i] is not None) for i in range(len(rollouts))
    ]
    wants_feedback = [not succeeded[i] and feedback_allowed[i] for i in range(len(rollouts))]
    feedback: list[list[str]] = [[] for _ in rollouts]
    if "environment" in settings.sources:
        for i, rollout in enumerate(rollouts):
            if wants_feedback[i]:
                feedback[i].append(environment_feedback(rollout.reason, rollout.extracted))
    if "teacher" in settings.sources:
        if critic is None:
            raise ValueError("feedback source 'teacher' needs a critic")
        asked = [i for i in range(len(rollouts)) if wants_feedback[i]]
        for i, text in zip(asked, critic(asked) if asked else [], strict=True):
            if text.strip():
                feedback[i].append(text.strip())
    if settings.feedback_on_success and {"environment", "teacher"} & set(settings.sources):
        for i, rollout in enumerate(rollouts):  # a critique of a correct answer is the verdict itself
            if succeeded[i] and feedback_allowed[i]:
                feedback[i].append(environment_feedback(rollout.reason, rollout.extracted))
    contexts = []
    for i, rollout in enumerate(rollouts):
        solution, notes = solutions[i], feedback[i]
        if solution is None and not notes:
            contexts.append(TeacherContext(rollout.prompt))
            continue
        text = "\n".join(notes) if notes else None
        prompt = reprompt(rollout, rollouts[solution].completion if solution is not None else None, text, settings)
        contexts.append(TeacherContext(prompt, solution, text))
    return contexts


def reprompt(rollout: Rollout, demonstration: str | None, feedback: str | None, settings: ContextSettings) -> Context:
    """The teacher prompt: the templates filled in, as the text of a plain prompt or the last user turn of a chat."""
    templates = settings.templates
    solution_text = ""
    if demonstration is not None:
        if settings.remove_thinking:
            demonstration = _THINKING.sub("", demonstration).strip()
        solution_text = templates.solution.format(successful_previous_attempt=demonstration.rstrip("\n"))
    feedback_text = ""
    if feedback is not None:
        feedback_text = templates.feedback.format(feedback_raw=feedback, attempt=rollout.completion.rstrip("\n"))
    prompt = rollout.prompt
    question = prompt if isinstance(prompt, str) else prompt[-1]["content"]
    text = templates.reprompt.format(prompt=question, solution=solution_text, feedback=feedback_text)
    if isinstance(prompt, str):
        return text
    if prompt[-1].get("role") != "user":
        raise ValueError("a chat prompt must end with a user turn to be reprompted")
    return [*prompt[:-1], {"role": "user", "content": text}]
