"""The run's trainer callbacks: TRL's logs into ``metrics.jsonl``, periodic held-out evaluation with the collapse
guard, the training clock, the sampler's state and the tracker's position in checkpoints, checkpoint notices;
``RunCallbacks`` builds a run's list of them."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from socratic_exp.core.checkpoints import TRACKER_POSITION, checkpoint_folder
from socratic_exp.core.console import PROGRESS_LOG, log_step_metrics
from socratic_exp.core.progress_callbacks import ProgressDisplayCallback
from socratic_exp.core.secrets import scrub_training_args
from socratic_exp.models.base import LARGE_MODEL_PARAMETERS
from socratic_exp.runtime.evaluation import TRAIN_SECONDS, TRAIN_TOKENS

TRAIN_CLOCK = "train_clock.json"

log = logging.getLogger("socratic_exp")

if TYPE_CHECKING:
    from socratic_exp.core.console import ProgressDisplay
    from socratic_exp.core.metrics import MetricsSink
    from socratic_exp.loggers.base import Logger
    from socratic_exp.models.base import Student
    from socratic_exp.runtime.assembly import Components
    from socratic_exp.runtime.evaluation import CollapseGuard, Evaluator
    from socratic_exp.samplers.base import PromptSampler
    from socratic_exp.teachers.base import Teacher


class MetricsFileCallback(TrainerCallback):
    """Every trainer log line goes to ``metrics.jsonl`` (W&B receives it from transformers' own callback);
    the sampler's state and the teacher's counters and guidance samples are logged beside it, to both."""

    def __init__(self, sink: MetricsSink, sampler: PromptSampler, teacher: Teacher):
        self.sink = sink
        self.sampler = sampler
        self.teacher = teacher
        self.last_logs: dict[str, Any] = {}

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        self.last_logs.update(logs)  # the latest value of every training metric, for the summary
        self.sink.record(state.global_step, logs)
        log_step_metrics(state.global_step, logs)  # the log file keeps TRL's dictionary; the console does not
        extra = {f"sampler/{k}": v for k, v in self.sampler.metrics().items()} | self.teacher.metrics()
        if extra:
            self.sink.log(extra, state.global_step)
        self.sink.log_table("teacher_guidance", self.teacher.samples(), state.global_step)


class ResumedIntervalsCallback(TrainerCallback):
    """A resumed run logs and saves at the intervals it is run with now (``algorithm.logging_steps``, ``save_steps``
    may change on resume): transformers restores them from the checkpoint's ``trainer_state.json``, with a warning
    only, so a resume's new intervals would not apply."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        state.compute_steps(args, state.max_steps)


class CheckpointNoticeCallback(TrainerCallback):
    """Says when a checkpoint of a large model is being written (seconds to minutes of no step), just before it is:
    after the step's logs and its evaluation, if any (``on_log``: this callback goes last), or at the step's end when
    the step logs nothing. Then how long it took."""

    def __init__(self, display: ProgressDisplay):
        self.display = display
        self._due = False
        self._saving: float | None = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model = kwargs.get("model")
        self._due = bool(  # the model's size is counted only at a save, not at every step
            state.is_world_process_zero
            and control.should_save
            and model is not None
            and model.num_parameters() >= LARGE_MODEL_PARAMETERS
        )
        if self._due and not control.should_log:
            self._announce(state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._due:
            self._announce(state.global_step)

    def _announce(self, step: int) -> None:
        self._due = False
        self.display.flush()
        self._saving = time.monotonic()
        logging.getLogger(PROGRESS_LOG).info("saving the checkpoint of step %d", step)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._saving is not None:
            seconds, self._saving = time.monotonic() - self._saving, None
            logging.getLogger(PROGRESS_LOG).info("checkpoint of step %d saved in %.0f s", state.global_step, seconds)


class TrackerPositionCallback(TrainerCallback):
    """Keeps the tracker's step with each checkpoint (``tracker_position.json``), so that a run resumed from that
    checkpoint continues the tracker's history where the checkpoint left it (``Logger.position``)."""

    def __init__(self, logger: Logger):
        self.logger = logger

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        position = self.logger.position()
        folder = checkpoint_folder(args, state)
        if state.is_world_process_zero and position is not None and folder.is_dir():
            (folder / TRACKER_POSITION).write_text(json.dumps({"position": position}))


class SecretFreeArgumentsCallback(TrainerCallback):
    """Rewrites each checkpoint's ``training_args.bin`` (the pickled TRL arguments) without secrets: a hub token
    given on the command line (``+algorithm.trl_args.hub_token=...``) must not stay in every checkpoint. The
    trainer keeps its own arguments, token included, in memory (``push_to_hub`` still works)."""

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            scrub_training_args(args, checkpoint_folder(args, state))


class TrainClock(TrainerCallback):
    """Training wall time: it runs from the trainer's ``on_train_begin`` (models loaded, the first evaluation done)
    to ``on_train_end``, paused during evaluations; what the method does inside training (a teacher's calls,
    probes, distillation phases) counts. Each checkpoint keeps it (``train_clock.json``), so a resumed run goes on
    from the time of the checkpoint it resumes from, as its metrics do from its step."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.total = 0.0  # seconds up to the last pause
        self.since: float | None = None  # when it last started, while running

    @property
    def seconds(self) -> float:
        return self.total + (self.clock() - self.since if self.since is not None else 0.0)

    def start(self) -> None:
        if self.since is None:
            self.since = self.clock()

    def stop(self) -> None:
        if self.since is not None:
            self.total += self.clock() - self.since
            self.since = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        path = checkpoint_folder(args, state) / TRAIN_CLOCK
        if state.global_step and path.is_file():  # resumed: the time training had taken up to that checkpoint
            self.total = float(json.loads(path.read_text())["seconds"])
        self.start()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.stop()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        folder = checkpoint_folder(args, state)
        if state.is_world_process_zero and folder.is_dir():
            (folder / TRAIN_CLOCK).write_text(json.dumps({"seconds": self.seconds}))


class PeriodicEvalCallback(TrainerCallback):
    """Held-out evaluation every ``every_steps`` optimizer steps (the final one runs after training); a collapse
    guard, when given, can stop training after an evaluation. With a ``clock`` each evaluation records the training
    time so far (``eval/train_seconds``), and the clock stops while it evaluates; each records the tokens trained on
    so far (``eval/train_tokens``).

    The evaluation runs once the step's own logs are in (``on_log``; the step is made to log), so the console's line
    of that step comes before the evaluation's minutes, not after them: this callback goes after the display's."""

    def __init__(
        self,
        evaluator: Evaluator,
        student: Student,
        every_steps: int,
        sink: MetricsSink,
        teacher: Teacher,
        guard: CollapseGuard | None = None,
        clock: TrainClock | None = None,
    ):
        self.evaluator = evaluator
        self.student = student
        self.every_steps = every_steps
        self.sink = sink
        self.teacher = teacher
        self.guard = guard
        self.clock = clock
        self._due: int | None = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step = state.global_step
        if self.every_steps and step % self.every_steps == 0 and step < state.max_steps:
            self._due = step
            control.should_log = True

    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step, self._due = self._due, None
        if step is None or step != state.global_step:
            return
        if self.clock is not None:
            self.clock.stop()
        metrics = self.evaluator.evaluate(self.student, stage=f"at step {step}")
        if self.clock is not None:
            metrics[TRAIN_SECONDS] = round(self.clock.seconds, 3)
        if (tokens := getattr(state, "num_input_tokens_seen", None)) is not None:
            metrics[TRAIN_TOKENS] = int(tokens)
        if state.is_world_process_zero:
            self.sink.log_evaluation(metrics, step, self.teacher.samples())
        if self.guard is not None and self.guard.observe(step, metrics, self.student.model):
            control.should_training_stop = True
        if self.clock is not None:
            self.clock.start()


class SamplerStateCallback(TrainerCallback):
    """The sampler's state (``PromptSampler.state_dict``) goes into every checkpoint folder and comes back when a run
    resumes from one (``on_train_begin`` runs after the trainer has restored its step, before the first batch)."""

    def __init__(self, sampler: PromptSampler):
        self.sampler = sampler

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        import torch

        from socratic_exp.samplers.base import STATE_FILE

        folder = checkpoint_folder(args, state)
        if folder.is_dir():
            torch.save(self.sampler.state_dict(), folder / STATE_FILE)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import torch

        from socratic_exp.samplers.base import STATE_FILE

        path = checkpoint_folder(args, state) / STATE_FILE
        if state.global_step and path.is_file():
            self.sampler.load_state_dict(torch.load(path, weights_only=True))


class RunCallbacks:
    """A run's trainer callbacks (``all``), built here only, in the order the trainer calls them: a resumed run's
    intervals as set now, TRL's logs into ``metrics.jsonl`` (``metrics``, which keeps the latest of each for the
    summary), the training clock (``clock``), the periodic held-out evaluation with the collapse guard, the sampler's
    state in checkpoints, the progress display (after ``metrics``: its line shows the step's numbers), the
    checkpoints' arguments without secrets and, given a ``tracker`` (the main process), the tracker's position in
    each checkpoint. The trainer gets them when it is built
    (``assembly.build_trainer``), before the callbacks it adds itself."""

    def __init__(
        self,
        components: Components,
        sink: MetricsSink,
        evaluator: Evaluator,
        student: Student,
        guard: CollapseGuard,
        display: ProgressDisplay,
        tracker: Logger | None,
    ):
        c = components
        self.metrics = MetricsFileCallback(sink, c.sampler, c.teacher)
        self.clock = TrainClock()  # training wall time, evaluations and loading excluded (eval/train_seconds)
        self.all: list[TrainerCallback] = [
            ResumedIntervalsCallback(),
            self.metrics,
            self.clock,
            SamplerStateCallback(c.sampler),
            ProgressDisplayCallback(display),
            PeriodicEvalCallback(evaluator, student, c.eval.every_steps, sink, c.teacher, guard, self.clock),
            SecretFreeArgumentsCallback(),
            *([TrackerPositionCallback(tracker)] if tracker is not None else []),
            CheckpointNoticeCallback(display),  # last: its line comes just before the checkpoint is written
        ]
