"""Socratic-RL's TRL pieces: the trainer that puts V in front of every prompt and hands the scored traces to the
loop, and the callback that runs the loop's phases 3-4 after each step and checkpoints its state.

Why a subclass: TRL has no hook that changes the prompts of a batch before generation; the RL loss is TRL's,
unchanged (the entropy mask composes through ``EntropyMaskMixin``, inert with ``entropy_mask=None``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback
from trl import GRPOTrainer

from socratic_exp.algorithms.entropy_masked.trainer import EntropyMaskMixin
from socratic_exp.core.checkpoints import checkpoint_folder

if TYPE_CHECKING:
    from socratic_exp.algorithms.socratic_rl.loop import ViewpointLoop


class SocraticRLTrainer(EntropyMaskMixin, GRPOTrainer):
    """GRPOTrainer whose batches get the active viewpoints in front of their prompts (pi_S(a | s, V), Section 3.1),
    and whose scored traces go to the teacher's reflection after each generation batch (Algorithm 1, lines 5-13)."""

    def __init__(self, *args: Any, viewpoint_loop: ViewpointLoop, **kwargs: Any):
        self.viewpoint_loop = viewpoint_loop
        super().__init__(*args, **kwargs)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        loop = self.viewpoint_loop
        texts = loop.active_texts()
        # sx_question: the prompt without V, which the verifier hook passes on to the reflection
        shown = [
            {**row, "prompt": loop.in_context(row["prompt"], texts), "sx_question": row["prompt"]} for row in inputs
        ]
        output = super()._generate_and_score_completions(shown)
        mode = "train" if self.model.training else "eval"
        for name, value in loop.reflect(self.state.global_step + 1).items():
            self._metrics[mode][name].append(value)
        return output


class ViewpointLoopCallback(TrainerCallback):
    """Probes, meta-learning and distillation after a step; the loop's state in every checkpoint."""

    def __init__(self, loop: ViewpointLoop):
        self.loop = loop

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        metrics = self.loop.after_step(state.global_step)
        if metrics and self.loop.sink is not None:
            self.loop.sink.log(metrics, state.global_step)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        folder = checkpoint_folder(args, state)
        if state.is_world_process_zero and folder.is_dir():
            self.loop.save(folder)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.loop.restore(checkpoint_folder(args, state), state.global_step)
