"""The Socratic-RL loop around the RL trainer (Algorithm 1): what happens to traces, viewpoints, the teacher and the
student between and after RL steps. The trainer calls ``observe`` with every scored trace and ``reflect`` once per
generation batch (phases 1-2); a callback calls ``after_step`` (phase 3: utility probes and teacher meta-learning;
phase 4: distillation) and saves and restores the loop's state with each checkpoint.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from socratic_exp.algorithms.socratic_rl.knowledge_base import LOG_NAME, KnowledgeBase, ViewpointLog
from socratic_exp.algorithms.socratic_rl.prompts import REFLECTION_TEMPLATE
from socratic_exp.algorithms.socratic_rl.teacher_dpo import TeacherDPO
from socratic_exp.algorithms.socratic_rl.utility import mean, measure_utilities
from socratic_exp.core import distributed
from socratic_exp.tasks.base import with_context
from socratic_exp.teachers.reflection import Reflective, TrainableReflective

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import Options
    from socratic_exp.algorithms.socratic_rl.config import SocraticRL
    from socratic_exp.core.metrics import MetricsSink
    from socratic_exp.models.base import Student
    from socratic_exp.tasks.base import Task
    from socratic_exp.teachers.base import Attempt

STATE_FILE = "socratic_rl_state.json"
Trace = tuple[str, "Attempt"]  # (question without viewpoints, the scored completion)


def context_of(texts: Sequence[str]) -> str:
    """Viewpoints as the lines in front of the question (the form the warm-started student has seen)."""
    return "\n".join(text.strip() for text in texts)


def select_traces(traces: Sequence[Trace], criterion: str) -> list[Trace]:
    """The traces Algorithm 1's line 10 ("outcome is suboptimal or meets generation criteria") sends to reflection,
    by ``reflect_on``: ``wrong`` (score below 1), ``below_group_mean`` (below the mean score of the rollouts of the
    same question in the batch: a negative GRPO advantage) or ``all``. Order is kept."""
    if criterion == "all":
        return list(traces)
    if criterion == "wrong":
        return [(q, a) for q, a in traces if a.score < 1.0]
    by_question: dict[str, list[float]] = defaultdict(list)
    for question, attempt in traces:
        by_question[question].append(attempt.score)
    return [(q, a) for q, a in traces if a.score < mean(by_question[q])]


class Prober:
    """Greedy scores of the student on the probe items with a given set of viewpoints in its context.

    ``rows`` hold rendered prompts (the trainer's form); ``in_context(prompt, texts)`` puts viewpoints in front of
    the question exactly as training does."""

    def __init__(
        self,
        task: Task,
        rows: list[dict[str, Any]],
        student: Student,
        in_context: Callable[[Any, Sequence[str]], Any],
        max_new_tokens: int,
        batch_size: int,
    ):
        self.task = task
        self.rows = rows
        self.student = student
        self.in_context = in_context
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size

    def scores(self, texts: Sequence[str]) -> list[float]:
        from socratic_exp.models.generation import generate

        share, own = distributed.my_share(len(self.rows))  # each process probes its share of the items
        prompts = [self.in_context(self.rows[i]["prompt"], texts) for i in share]
        completions = generate(self.student, prompts, max_new_tokens=self.max_new_tokens, batch_size=self.batch_size)
        scores = [self.task.score(c, self.rows[i]["answer"]) for c, i in zip(completions, share, strict=True)]
        return distributed.gather_shares(len(self.rows), scores[:own])


class ViewpointLoop:
    def __init__(
        self,
        settings: SocraticRL,
        components: Options,
        student: Student,
        probe_rows: list[dict[str, Any]],
        train_rows: Any,
        run_dir: Path,
        sink: MetricsSink | None,
        seed: int,
        prompt_room: int | None,
    ):
        if not isinstance(components.teacher, Reflective):  # SocraticRL.check_compatible refuses it first, in words
            raise TypeError(f"the Socratic-RL loop needs a reflective teacher, not {type(components.teacher).__name__}")
        self.settings = settings
        self.c = components
        self.teacher: Reflective = components.teacher
        # a teacher whose weights write its viewpoints is trained by the loop's DPO meta-updates (teacher_dpo.py)
        trainable = isinstance(self.teacher, TrainableReflective)
        self.teacher_dpo = TeacherDPO(self.teacher, settings, seed) if trainable else None
        self.student = student
        self.train_rows = train_rows
        self.run_dir = run_dir
        self.sink = sink
        self.seed = seed
        self.prompt_room = prompt_room  # tokens a prompt may take (the model's context minus the completion)
        self.log = ViewpointLog(run_dir / LOG_NAME)
        self.kb = KnowledgeBase(
            settings.viewpoint_budget,
            settings.merge_similarity,
            settings.retire_threshold,
            settings.retire_patience,
            self.log,
        )
        self.prober = Prober(
            components.task, probe_rows, student, self.in_context, settings.max_completion_length, batch_size=256
        )
        self.rng = random.Random(seed)
        self.seconds: Counter[str] = Counter()
        self.distillations = 0
        self._traces: list[Trace] = []

    # --- the student's context ------------------------------------------------------------------------------
    def active_texts(self) -> list[str]:
        return [entry.text for entry in self.kb.active]

    def in_context(self, prompt: Any, texts: Sequence[str]) -> Any:
        """``prompt`` with the viewpoints in front; the oldest are left out where the model's context is too short."""
        texts = list(texts)
        while texts:
            candidate = with_context(prompt, context_of(texts))
            if self.prompt_room is None or self._length(candidate) <= self.prompt_room:
                return candidate
            texts = texts[1:]
        return prompt

    def _length(self, prompt: Any) -> int:
        from socratic_exp.models.generation import as_model_input

        return len(self.student.tokenizer(as_model_input(self.student, prompt), add_special_tokens=False).input_ids)

    # --- phase 1-2: interaction and reflection ---------------------------------------------------------------
    def observe(self, questions: Sequence[str], attempts: Sequence[Attempt]) -> None:
        """The scored traces of a batch (questions without viewpoints), in TRL's order (groups are consecutive)."""
        self._traces += list(zip(questions, attempts, strict=True))

    def reflect(self, step: int) -> dict[str, float]:
        """Send up to ``reflections_per_step`` suboptimal traces of the batch to the teacher; file its viewpoints."""
        started = time.perf_counter()
        traces, self._traces = self._traces, []
        # One knowledge base for all processes: every process sees the global batch's traces (in TRL's order: each
        # process holds a consecutive slice) and draws the same ones; the main process asks the teacher, and
        # every process files the same viewpoints.
        traces = [trace for share in distributed.gather_objects(traces) for trace in share]
        eligible = select_traces(traces, self.settings.reflect_on)
        chosen = self.rng.sample(eligible, min(len(eligible), self.settings.reflections_per_step))
        outcomes: Counter[str] = Counter()
        if chosen:
            questions = [q for q, _ in chosen]
            attempts = [a for _, a in chosen]
            asked = self.teacher.reflect(questions, attempts, REFLECTION_TEMPLATE) if distributed.is_main() else None
            viewpoints = distributed.from_main(asked)
            for (question, attempt), viewpoint in zip(chosen, viewpoints, strict=True):
                if viewpoint is None:
                    outcomes["none"] += 1
                    continue
                _, outcome = self.kb.add(
                    viewpoint.text,
                    viewpoint.kind,
                    question,
                    attempt.completion,
                    step,
                    trace_score=attempt.score,
                    trace_reason=attempt.reason,
                )
                outcomes[outcome] += 1
        self.seconds["reflect"] += time.perf_counter() - started
        return {
            "socratic_rl/reflections": float(len(chosen)),
            **{f"socratic_rl/viewpoints_{name}": float(outcomes[name]) for name in ("created", "merged", "none")},
            **self.kb_metrics(),
        }

    def kb_metrics(self) -> dict[str, float]:
        counts = self.kb.counts()
        return {
            "socratic_rl/active": counts["active"],
            "socratic_rl/kb_size": float(len(self.kb.entries)),
            **{f"socratic_rl/kb_{status}": counts[status] for status in ("queued", "retired", "distilled")},
        }

    # --- phase 3-4: utility, meta-learning, distillation -----------------------------------------------------
    def after_step(self, step: int) -> dict[str, float]:
        settings = self.settings
        metrics: dict[str, float] = {}
        if settings.probe_every and step % settings.probe_every == 0 and self.kb.active:
            metrics |= self.probe(step)
        if self.c.distiller.distills and settings.distill_every and step % settings.distill_every == 0:
            metrics |= self.distill(step)
        if metrics:
            metrics |= self.kb_metrics() | {f"socratic_rl/seconds/{k}": v for k, v in self.seconds.items()}
            self._log_table(step)
        return metrics

    def probe(self, step: int) -> dict[str, float]:
        """U(v) of every viewpoint in V (Section 3.3); retirement; the teacher's meta-update from the new
        measurements, each with the trace it was written from as the teacher saw it (question, completion, the
        verifier's score and reason). A teacher that learns by itself keeps what it learned from earlier probes
        (``Reflective.meta_update``); one whose weights write its viewpoints is trained here (``teacher_dpo``, which
        pairs this probe's viewpoints with earlier ones: ``meta_learning.cross_probe_pairs``)."""
        from socratic_exp.teachers.base import Attempt
        from socratic_exp.teachers.reflection import ScoredViewpoint

        started = time.perf_counter()
        active = self.kb.active
        utilities, with_all, without_any = measure_utilities(active, self.prober.scores)
        for entry in active:
            utility, acc_with, acc_without = utilities[entry.id]
            self.kb.record_utility(entry, step, utility, acc_with, acc_without)
        retired = self.kb.retire_useless(step)
        self.seconds["probe"] += time.perf_counter() - started
        values = [u for u, _, _ in utilities.values()]
        metrics = {
            "socratic_rl/probe_acc_with_v": with_all,
            "socratic_rl/probe_acc_without_v": without_any,
            "socratic_rl/utility_mean": mean(values),
            "socratic_rl/utility_min": min(values),
            "socratic_rl/utility_max": max(values),
            "socratic_rl/utility_positive_share": sum(u > 0 for u in values) / len(values),
            "socratic_rl/retired": float(len(retired)),
        }
        if self.settings.meta_learning:
            started = time.perf_counter()
            scored = [
                ScoredViewpoint(
                    e.source_question,
                    Attempt(e.source_trace, e.source_score, e.source_reason),
                    e.text,
                    utilities[e.id][0],
                )
                for e in active
            ]
            # on every process, from the same measurements: the same bookkeeping, or a DPO phase of the teacher's
            # weights that is data-parallel over the processes like the run's trainer
            metrics |= self.teacher.meta_update(scored, REFLECTION_TEMPLATE)
            if self.teacher_dpo is not None:
                metrics |= self.teacher_dpo.update(scored, REFLECTION_TEMPLATE)
            self.seconds["meta"] += time.perf_counter() - started
        return metrics

    def distill(self, step: int) -> dict[str, float]:
        """Compress V (and what earlier distillations internalized) into the student; then V is reset (Algorithm 1,
        lines 19-23; Section 3.4).

        The paper's L_distill is an expectation over D x V_KB. The members used here: D is ``distiller.items`` training
        inputs drawn afresh at each distillation; V_KB is restricted to the viewpoints in V now and those distilled
        before (so a later distillation does not undo an earlier one); retired viewpoints (measured unhelpful) and
        queued ones (never in the student's context, never measured) are left out. Each input is paired with one of
        those viewpoints drawn uniformly (``TRLDistiller.paired``): a sample of ``items`` members of the product, not
        all of it. The DPO distiller's ``negative_viewpoint`` option draws its negatives from the retired ones."""
        from socratic_exp.distillers.base import DistillationData

        to_distill = [e.text for e in self.kb.active] + [e.text for e in self.kb.with_status("distilled")]
        if not to_distill:
            return {"distill/skipped": 1.0}
        started = time.perf_counter()
        self.distillations += 1
        seed = self.seed * 1_000_003 + step
        distiller = self.c.distiller
        rows = self.train_rows.shuffle(seed=seed).select(range(min(distiller.items, len(self.train_rows))))
        data = DistillationData(
            prompts=list(rows["prompt"]),
            answers=list(rows["answer"]),
            viewpoints=to_distill,
            negative_viewpoints=[e.text for e in self.kb.with_status("retired")],
        )
        active = self.active_texts()
        before = self.prober.scores(())
        with_v = mean(self.prober.scores(active)) if active else mean(before)
        metrics = distiller.distill(self.student, self.c.task, data, self.run_dir / "distill" / f"step-{step}", seed)
        after = self.prober.scores(())
        self.kb.distill_reset(step)
        self.seconds["distill"] += time.perf_counter() - started
        solved_before = [i for i, score in enumerate(before) if score >= 1.0]
        forgotten = sum(after[i] < 1.0 for i in solved_before) / len(solved_before) if solved_before else 0.0
        return metrics | {
            "distill/count": float(self.distillations),
            "distill/viewpoints": float(len(to_distill)),
            "distill/probe_acc_before": mean(before),
            "distill/probe_acc_with_v_before": with_v,
            "distill/probe_acc_after": mean(after),
            "distill/forgotten_share": forgotten,
        }

    def _log_table(self, step: int) -> None:
        if self.sink is None:
            return
        rows = [
            {
                "id": e.id,
                "viewpoint": e.text,
                "kind": e.kind,
                "status": e.status,
                "written_at": e.written_at,
                "sources": e.sources,
                "last_utility": e.last_utility,
                "mean_utility": e.mean_utility,
                "source_question": e.source_question,
            }
            for e in self.kb.entries.values()
        ]
        self.sink.logger.log_table("viewpoint_kb", rows, step)

    # --- checkpoints ----------------------------------------------------------------------------------------
    def save(self, folder: Path) -> None:
        version, internal, gauss = self.rng.getstate()
        state = {
            "kb": self.kb.state_dict(),
            "rng": [version, list(internal), gauss],
            "seconds": dict(self.seconds),
            "distillations": self.distillations,
        }
        (folder / STATE_FILE).write_text(json.dumps(state))
        self.teacher.save_meta_state(folder)
        if self.teacher_dpo is not None:
            self.teacher_dpo.save(folder)

    def restore(self, folder: Path, step: int) -> None:
        """Back to the state saved at ``step``; the record keeps the events up to that step only."""
        self.log.truncate_after(step)
        path = folder / STATE_FILE
        if not path.is_file():
            return
        state = json.loads(path.read_text())
        self.kb.load_state_dict(state["kb"])
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.seconds = Counter(state["seconds"])
        self.distillations = state["distillations"]
        self.teacher.load_meta_state(folder)
        if self.teacher_dpo is not None:
            self.teacher_dpo.load(folder)
