"""Trainer callbacks that show a trainer's progress on the console instead of transformers' own printing: the run's
trainer, and trainers built elsewhere (a student's warm-start, Socratic-RL's distillation phases)."""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from socratic_exp.core.console import SHOWN, ProgressDisplay, WorkProgress


def drop_trainer_printing(trainer: Any) -> None:
    """Remove a transformers ``Trainer``'s progress bar and its dictionary per log, unless ``verbose`` keeps them."""
    if SHOWN["verbose"]:
        return
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)


def quiet_trainer(trainer: Any, name: str) -> None:
    """Give a transformers ``Trainer`` (e.g. a model's warm-start) a progress line named ``name`` instead of its
    dictionary per log; with ``verbose`` the trainer is left as it is."""
    if SHOWN["verbose"]:
        return
    drop_trainer_printing(trainer)
    trainer.add_callback(ProgressDisplayCallback(ProgressDisplay(console=SHOWN["console"], name=name)))


class ProgressDisplayCallback(TrainerCallback):
    """Feeds the optimizer steps to the console's progress display (the metrics reach it through the sink)."""

    def __init__(self, display: ProgressDisplay):
        self.display = display

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self.display.start(state.max_steps, state.global_step)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.display.flush()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self.display.advance(state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.display.flush()  # after MetricsFileCallback (added before): the line shows this step's numbers

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self.display.close()


class PhaseProgressCallback(TrainerCallback):
    """A short TRL phase's optimizer steps (Socratic-RL's ``phases``) as the console's other long work
    (``WorkProgress``, main process only): a line when it starts, every tenth, when it ends."""

    def __init__(self, name: str):
        self.name = name
        self.work: WorkProgress | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self.work = WorkProgress(self.name, state.max_steps, "steps")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.work is not None:
            self.work.update(state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.work is not None:
            self.work.close()
            self.work = None
