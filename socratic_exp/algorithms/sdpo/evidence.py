"""SDPO's premise and claim, as the study measures them (``socratic_exp.study``); VPD's premise is the same one.

Premise, per feedback source (sibling solution, environment verdict, teacher critique): the accuracy of the student
conditioned on that feedback (the self-teacher) against the student's own on the same failed rollouts, and the
implicit reward margin: how much more the feedback raises the log-likelihood of a correct solution (the task's
reference solution; where a task has none, a successful rollout of the same question) than of the failed rollout
itself (nats per sequence).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from socratic_exp.core.methods import Claim, Promise

if TYPE_CHECKING:
    from socratic_exp.study.premises import Bench

FEEDBACK_SOURCES = ("sibling", "environment", "teacher")
PROMISES = (
    Promise("sdpo/teacher/accuracy_gain", 0.20, "the student reading a teacher's critique answers better"),
    Promise("sdpo/sibling/accuracy_gain", 0.20, "the student reading a sibling's solution answers better"),
    Promise("sdpo/environment/accuracy_gain", 0.05, "the student told its answer is wrong answers better"),
    Promise("sdpo/teacher/margin", 0.5, "the critique favours a correct solution over the failed rollout (nats)"),
    Promise("sdpo/sibling/margin", 0.5, "the sibling's solution favours a correct solution (nats)"),
    Promise("sdpo/environment/margin", 0.0, "the verdict favours a correct solution over the failed rollout (nats)"),
)
# SDPO as TRL sets it up against GRPO: every algorithm setting is SDPO's
CLAIMS = (Claim("sdpo>grpo", "SDPO", "self-distillation from feedback beats GRPO", "sdpo", "grpo",
                changes=("algorithm.",)),)  # fmt: skip


def premises(bench: Bench) -> dict[str, float]:
    from socratic_exp.algorithms.sdpo.contexts import PLAIN_TEMPLATES, SDPO_TEMPLATES, Rollout

    rows = bench.eval_rows[: max(1, len(bench.eval_rows) // 4)]
    completions = bench.sample([r["prompt"] for r in rows], n=bench.group_size, salt=5)
    rollouts = []
    for i, completion in enumerate(completions):
        row = rows[i // bench.group_size]
        verdict = bench.c.task.verify(completion, row["answer"])
        rollouts.append(Rollout(bench.prompt(row), completion, verdict.score, verdict.reason, verdict.extracted))
    # the templates an SDPO / VPD run of this student uses (context_style=auto: SDPO's in a chat's user turn)
    chat = bench.student.chat
    run_settings = getattr(bench.c.algorithm, "context_settings", None)
    templates = run_settings(chat).templates if run_settings else (SDPO_TEMPLATES if chat else PLAIN_TEMPLATES)
    figures: dict[str, float] = {}
    for source in FEEDBACK_SOURCES:
        figures |= _feedback_figures(bench, source, templates, rows, rollouts)
    return figures


def _feedback_figures(
    bench: Bench, source: str, templates: Any, rows: list[dict], rollouts: list[Any]
) -> dict[str, float]:
    """One feedback source's premises: how much its contexts lift the failed rollouts' accuracy, and how much
    more they lift a correct solution's log-probability than the failed rollout's own (the margin)."""
    from socratic_exp.algorithms.sdpo.contexts import ContextSettings, build_contexts
    from socratic_exp.teachers.base import Attempt, GuidanceRequest

    size = bench.group_size  # rollouts per question

    def critic(indices: list[int]) -> list[str]:
        requests = [
            GuidanceRequest.for_row(
                rows[i // size], [Attempt(rollouts[i].completion, rollouts[i].score, rollouts[i].reason)]
            )
            for i in indices
        ]
        return bench.teacher.guide(requests)

    contexts = build_contexts(rollouts, size, ContextSettings(sources=(source,), templates=templates), critic)
    failed = [i for i, ctx in enumerate(contexts) if ctx.usable and rollouts[i].score < 1.0]
    if not failed:
        return {}
    answers = bench.sample([contexts[i].prompt for i in failed], salt=6)
    teacher_acc = statistics.fmean(bench.score(a, rows[i // size]) for i, a in zip(failed, answers, strict=True))
    per_question = [statistics.fmean(r.score for r in rollouts[q * size : (q + 1) * size])
                    for q in range(len(rows))]  # fmt: skip
    student_acc = statistics.fmean(per_question[i // size] for i in failed)
    figures = {
        f"sdpo/{source}/contexts": float(len(failed)),
        f"sdpo/{source}/teacher_accuracy": teacher_acc,
        f"sdpo/{source}/student_accuracy": student_acc,
        f"sdpo/{source}/accuracy_gain": teacher_acc - student_acc,
    }

    def correct_solution(index: int) -> str | None:
        """The row's reference solution; on a task without one, a successful rollout of the same question."""
        question = index // size
        group = rollouts[question * size : (question + 1) * size]
        return rows[question].get("reference") or next((r.completion for r in group if r.score >= 1.0), None)

    scored = [(i, correct) for i in failed if (correct := correct_solution(i)) is not None]
    if not scored:  # no reference solution and no successful sibling: no margin to measure
        return figures
    bare = [rollouts[i].prompt for i, _ in scored]
    with_feedback = [contexts[i].prompt for i, _ in scored]
    own = [rollouts[i].completion for i, _ in scored]
    correct = [solution for _, solution in scored]
    lift_correct = _mean_diff(bench.logps(with_feedback, correct), bench.logps(bare, correct))
    lift_failed = _mean_diff(bench.logps(with_feedback, own), bench.logps(bare, own))
    return figures | {
        f"sdpo/{source}/lift_correct": lift_correct,
        f"sdpo/{source}/lift_failed": lift_failed,
        f"sdpo/{source}/margin": lift_correct - lift_failed,
    }


def _mean_diff(a: Sequence[float], b: Sequence[float]) -> float:
    return statistics.fmean(x - y for x, y in zip(a, b, strict=True))
