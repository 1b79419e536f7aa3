"""Held-out evaluation: greedy accuracy and pass@k with sampling, overall and by difficulty."""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from socratic_exp.core.component import Component, setting
from socratic_exp.core.distributed import gather_objects, gather_shares, most_on_any_process, my_share
from socratic_exp.models.generation import generate
from socratic_exp.tasks.base import FLEXIBLE, STRICT, render_prompt
from socratic_exp.teachers.base import TeacherStats

log = logging.getLogger("socratic_exp")
TRAIN_SECONDS = "eval/train_seconds"  # logged with every evaluation: training wall time so far, evaluations excluded
# logged with every evaluation: the tokens training has generated and read so far (TRL's num_input_tokens_seen: the
# prompt and completion tokens of every generation batch, every process, dynamic sampling's discarded rounds too), a
# measure of the work done that does not depend on the machine's load
TRAIN_TOKENS = "eval/train_tokens"

if TYPE_CHECKING:
    from datasets import Dataset

    from socratic_exp.models.base import Student
    from socratic_exp.tasks.base import Task, Verdict
    from socratic_exp.teachers.base import Context, Teacher


@dataclasses.dataclass(kw_only=True)
class EvalSettings(Component):
    """``eval.*``: when and how the held-out split is evaluated."""

    config_group: ClassVar[str] = "eval"

    every_steps: int = setting(0, "training steps between held-out evaluations (0: only before and after)", ge=0)
    max_samples: int | None = setting(None, "held-out questions per evaluation (null: the whole split)", ge=1)
    batch_size: int = setting(200, "questions generated for at once during evaluation", ge=1)
    max_new_tokens: int = setting(64, "tokens generated per evaluation answer at most", ge=1)
    pass_k: int = setting(4, "k of pass@k, sampled at eval.temperature (0: greedy accuracy only)", ge=0)
    temperature: float = setting(1.0, "sampling temperature of the pass@k samples", gt=0.0)
    top_p: float = setting(1.0, "nucleus sampling of the pass@k samples (1: off)", gt=0.0, le=1.0)
    sampling_seed: int = setting(
        0, "seed of the pass@k samples: comparable across runs, the training RNG untouched", ge=0
    )
    assisted_attempts: int = setting(
        2, "with a teacher: attempts per question, guidance after each wrong one (eval/assisted_acc)", ge=1
    )
    assisted_before_training: bool = setting(
        True,
        "the evaluation before training makes the assisted attempts too (false: unassisted only, on the same questions;"
        " the first training step comes sooner, and eval/assisted_acc is measured after training only)",
    )
    collapse_margin: float | None = setting(
        None, "stop when the objective falls this far below its best; the best weights are kept (null: off)", ge=0.0
    )
    collapse_patience: int = setting(1, "evaluations in a row below (best - collapse_margin) before stopping", ge=1)

    def validate(self) -> None:
        self.check(
            "collapse_margin",
            self.collapse_margin is None or self.every_steps > 0,
            "watches the evaluations during training, and eval.every_steps=0 runs none",
            "set eval.every_steps, e.g. eval.every_steps=25",
        )

    def metric_names(self, prefix: str = "eval", teacher: bool = False, parsers: Sequence[str] = ()) -> list[str]:
        """The overall metrics an evaluation reports (the accuracies also per difficulty, as ``<name>/d<level>``);
        ``parsers``: the task's answer parsers, whose greedy accuracies are reported side by side."""
        names = ["greedy_acc", "no_answer", *(f"{parser}_acc" for parser in side_by_side(parsers))]
        names += ["sampled_acc", f"pass@{self.pass_k}"] if self.pass_k else []
        if teacher and self.assisted_attempts > 1:
            names.append("assisted_acc")
        return [f"{prefix}/{name}" for name in names]


def side_by_side(parsers: Sequence[str]) -> list[str]:
    """The parsers whose greedy accuracy every evaluation reports, strict and flexible where the task has them: a
    format problem shows as the gap between the two (and in ``no_answer``), whichever parser the rewards use."""
    return [parser for parser in (STRICT, FLEXIBLE) if parser in parsers]


OVERALL_ONLY = ("no_answer", f"{STRICT}_acc", f"{FLEXIBLE}_acc")  # not broken down by difficulty


class Evaluator:
    """Scores a model on a held-out split with the task's verifier."""

    def __init__(self, task: Task, dataset: Dataset, settings: EvalSettings, teacher: Teacher | None = None):
        if settings.max_samples is not None and len(dataset) > settings.max_samples:
            dataset = dataset.select(range(settings.max_samples))
        self.task = task
        self.rows = dataset.to_list()
        self.settings = settings
        self.teacher = teacher if teacher is not None and settings.assisted_attempts > 1 else None

    def evaluate(
        self,
        student: Student,
        prefix: str = "eval",
        prompts: Sequence[str] | None = None,
        stage: str = "",
        assisted: bool = True,
    ) -> dict[str, float]:
        """Greedy accuracy and (if ``pass_k``) pass@k, overall and per difficulty, as ``{prefix}/...`` metrics;
        with a teacher also the assisted accuracy and the teacher's counters (``{prefix}/teacher/...``).

        ``prompts`` replaces the rows' prompts (e.g. with a hint in context) while answers stay the same. In a
        distributed launch each process answers its share of the questions and every process returns the metrics of
        the whole split (collectives: every process calls this at the same point). Each pass reports its progress
        under ``prefix`` and ``stage`` (``eval before training: greedy``). ``assisted=False`` skips the teacher's
        assisted attempts (``eval.assisted_before_training``).
        """
        settings = self.settings
        prompts = list(prompts) if prompts is not None else [row["prompt"] for row in self.rows]
        share, own = my_share(len(prompts))
        mine = [prompts[i] for i in share]
        answers = [self.rows[i]["answer"] for i in share]
        common = {
            "max_new_tokens": settings.max_new_tokens,
            "batch_size": settings.batch_size,
            "instruction": self.task.instruction(),
        }
        label = f"{prefix} {stage}".strip()
        greedy = generate(student, mine, progress=f"{label}: greedy", **common)
        verdicts = [self.task.verify(c, a) for c, a in zip(greedy, answers, strict=True)]
        # per question: greedy score, no readable answer (format errors, kept apart from wrong answers), ...
        results: list[dict[str, float]] = [
            {"greedy_acc": v.score, "no_answer": float(v.extracted is None)} for v in verdicts
        ]
        for parser in side_by_side(self.task.answer_parsers):
            for result, completion, answer in zip(results, greedy, answers, strict=True):
                result[f"{parser}_acc"] = self.task.verify_as(parser, completion, answer).score
        teacher_counts: Counter[str] = Counter()
        if self.teacher is not None and assisted:
            solved, teacher_counts = self._assisted(student, label, share[:own], mine, greedy, verdicts)
            for result, value in zip(results, solved, strict=False):
                result["assisted_acc"] = value
        if settings.pass_k:
            self._sampled(student, label, mine, answers, results, common)
        metrics = self._aggregated(prefix, gather_shares(len(prompts), results[:own]))
        if self.teacher is not None and assisted:
            stats = TeacherStats()
            stats.counts = sum(gather_objects(teacher_counts), Counter())
            metrics |= {f"{prefix}/{name}": value for name, value in stats.drain().items()}
        return metrics

    def _sampled(
        self,
        student: Student,
        label: str,
        mine: list[str],
        answers: list[Any],
        results: list[dict[str, float]],
        common: dict[str, Any],
    ) -> None:
        """Each question's sampled accuracy and pass@k over ``pass_k`` samples, into its ``results`` row."""
        settings, k = self.settings, self.settings.pass_k
        sampled = generate(
            student,
            mine,
            sample=True,
            temperature=settings.temperature,
            top_p=settings.top_p,
            num_return_sequences=k,
            progress=f"{label}: pass@{k}",
            seed=settings.sampling_seed,
            **common,
        )
        scores = [self.task.score(c, answers[i // k]) for i, c in enumerate(sampled)]
        for i, result in enumerate(results):
            tries = scores[i * k : (i + 1) * k]
            result["sampled_acc"] = sum(tries) / k
            result[f"pass@{k}"] = float(max(tries) > 0)

    def _aggregated(self, prefix: str, every: list[dict[str, float]]) -> dict[str, float]:
        """The whole split's per-question results as metrics: overall, and per difficulty (and group) where they
        have one."""
        levels = [row.get("difficulty") for row in self.rows]
        group_key = self.task.metric_group
        groups = [row.get(group_key) for row in self.rows] if group_key else None
        metrics: dict[str, float] = {}
        for name in every[0]:
            values = [result[name] for result in every]
            if name in OVERALL_ONLY:
                metrics[f"{prefix}/{name}"] = sum(values) / len(values)
            else:
                metrics |= _by_level(f"{prefix}/{name}", values, levels, groups)
        return metrics

    def _assisted(
        self,
        student: Student,
        label: str,
        rows: list[int],
        prompts: list[str],
        greedy: list[str],
        verdicts: list[Verdict],
    ) -> tuple[list[float], Counter[str]]:
        """Up to ``assisted_attempts`` greedy attempts per question; after each wrong one the teacher's guidance
        joins the context (prompt || attempt || guidance), as in a SocraticPO rollout. ``rows`` are the questions
        of this process (``prompts`` may be longer: padding); returns whether each was solved, and the teacher's
        counters. Every process makes the same retries with as many contexts, padded to the most on any process."""
        from socratic_exp.teachers.base import Attempt, GuidanceRequest, extend_context

        assert self.teacher is not None
        history = [[Attempt(c, v.score, v.reason)] for c, v in zip(greedy, verdicts, strict=True)][: len(rows)]
        instruction = self.task.instruction()
        contexts: list[Context] = [render_prompt(p, instruction, student.chat) for p in prompts]
        with self.teacher.separate_stats() as stats:
            attempts = self.settings.assisted_attempts
            for attempt in range(2, attempts + 1):
                active = [i for i, tries in enumerate(history) if tries[-1].score < 1.0]
                width = most_on_any_process(len(active))
                if not width:
                    break
                requests = [GuidanceRequest.for_row(self.rows[rows[i]], history[i]) for i in active]
                for i, guidance in zip(active, self.teacher.guide(requests), strict=True):
                    contexts[i] = extend_context(contexts[i], history[i][-1].completion, guidance)
                padded = [contexts[i] for i in active] + [contexts[active[0] if active else 0]] * (width - len(active))
                retries = generate(
                    student,
                    padded,
                    max_new_tokens=self.settings.max_new_tokens,
                    batch_size=self.settings.batch_size,
                    progress=f"{label}: assisted attempt {attempt}/{attempts}",
                )  # the contexts already hold the instruction: no ``instruction`` here
                for i, completion in zip(active, retries, strict=False):
                    verdict = self.task.verify(completion, self.rows[rows[i]]["answer"])
                    history[i].append(Attempt(completion, verdict.score, verdict.reason))
            counts = stats.counts
        return [max(attempt.score for attempt in tries) for tries in history], counts


class CollapseGuard:
    """Watches the held-out objective at every evaluation and keeps the weights of its best one.

    With ``margin`` set, ``observe`` says stop once the objective has been more than ``margin`` below its best for
    ``patience`` evaluations in a row (late collapse, as reported for self-distillation on math); the run then stops
    training, puts the best weights back as the final model and records why in ``summary.json``. Without a margin it
    only tracks the best evaluation (no weights kept), which the summary reports beside the final one.
    """

    def __init__(self, metric: str, margin: float | None, patience: int = 1, lora: bool = False):
        self.metric = metric
        self.lora = lora  # LoRA leaves the base weights as they are: only the adapter's are kept
        self.margin = margin
        self.patience = patience
        self.best: float | None = None
        self.best_step: int | None = None
        self.below = 0
        self.stopped_at: int | None = None
        self.last: tuple[int, float] | None = None
        self._weights: dict[str, Any] | None = None

    def observe(self, step: int, metrics: dict[str, Any], model: Any) -> bool:
        """Record an evaluation; True when the run should stop (and restore the best weights)."""
        value = metrics.get(self.metric)
        if value is None:
            return False
        self.last = (step, value)
        if self.best is None or value > self.best:
            self.best, self.best_step, self.below = value, step, 0
            if self.margin is not None and self.lora:
                from socratic_exp.models.adapters import lora_weights

                self._weights = lora_weights(model)  # none at step 0, before the trainer adds the adapters
            elif self.margin is not None:
                self._weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            return False
        self.below = self.below + 1 if value < self.best - (self.margin or 0.0) else 0
        if self.margin is not None and self.below >= self.patience and self.stopped_at is None:
            self.stopped_at = step
        return self.stopped_at is not None

    def restore(self, model: Any) -> None:
        if self._weights is not None and self.lora:
            from socratic_exp.models.adapters import load_lora_weights

            load_lora_weights(model, self._weights)
        elif self._weights is not None:
            model.load_state_dict(self._weights)

    def final(self, step: int, evaluator: Evaluator, student: Student) -> dict[str, Any]:
        """The final held-out evaluation at ``step``; after a collapse (training stopped by this guard, or this
        evaluation falling too far) the best weights are put back and evaluated as the final model."""
        final = None if self.stopped_at is not None else evaluator.evaluate(student, stage="after training")
        if final is None or self.observe(step, final, student.model):
            self.restore(student.model)
            log.warning(
                "collapse: %s fell more than %s below its best (%.4f at step %s); stopped at step %s with the "
                "best weights as the final model",
                self.metric,
                self.margin,
                self.best,
                self.best_step,
                self.stopped_at,
            )
            final = evaluator.evaluate(student, stage="of the best weights")
        return final

    @property
    def summary(self) -> dict[str, Any]:
        """What ``summary.json`` records of the guard: its metric and margin, the best and last evaluations, and
        where it stopped training."""
        summary = {"metric": self.metric, "margin": self.margin, "best": self.best, "best_step": self.best_step}
        if self.last is not None:
            summary["last_step"], summary["last"] = self.last
        if self.stopped_at is not None:
            summary |= {"stopped_at_step": self.stopped_at, "restored_step": self.best_step}
        return summary


def _by_level(name: str, values: list[float], levels: list[Any], groups: list[Any] | None = None) -> dict[str, float]:
    """The mean, per difficulty (``name/d3``) and, for tasks with a ``metric_group``, per group (``name/physics``)
    with their unweighted mean (``name/group_mean``, the papers' average across domains)."""
    metrics = {name: sum(values) / len(values)}
    grouped: dict[Any, list[float]] = defaultdict(list)
    for value, level in zip(values, levels, strict=True):
        if level is not None:
            grouped[level].append(value)
    for level in sorted(grouped):
        metrics[f"{name}/d{level}"] = sum(grouped[level]) / len(grouped[level])
    if groups is not None:
        by_group: dict[str, list[float]] = defaultdict(list)
        for value, group in zip(values, groups, strict=True):
            if group is not None:
                by_group[str(group)].append(value)
        means = {group: sum(v) / len(v) for group, v in sorted(by_group.items())}
        metrics |= {f"{name}/{group}": mean for group, mean in means.items()}
        if means:
            metrics[f"{name}/group_mean"] = sum(means.values()) / len(means)
    return metrics
