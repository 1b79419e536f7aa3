"""``algorithm=socratic_rl``: Socratic-RL (Wu, 2025; Algorithm 1, Sections 3.2-3.5) on TRL's GRPOTrainer.

No public code exists for this paper; the choices below are ours and are listed in the README.

1. **Student interaction.** The active viewpoints V are put in front of every training prompt (``with_context``:
   before the question, where the warm-started student has seen principles), and GRPO trains the student on
   those rollouts: pi_S(a | s, V).
2. **Teacher reflection.** Traces selected by ``reflect_on`` (``wrong``, ``below_group_mean``, ``all``), at most
   ``reflections_per_step`` per batch, go to ``teacher.reflect``; its viewpoints join V and V_KB, near-duplicates
   merged, V capped at ``viewpoint_budget`` (``viewpoints/knowledge_base.py``).
3. **Utility.** Every ``probe_every`` steps U(v) of each viewpoint in V on ``probe_items`` probe questions
   (``viewpoints/utility.py``); viewpoints at or below ``retire_threshold`` for ``retire_patience`` probes retire.
4. **Teacher meta-learning** (``meta_learning``): each probe's measurements go to ``teacher.meta_update`` (rule:
   phrasings reweighted; llm: DPO on utility-ranked pairs; blackbox: exemplars in its prompt).
5. **Distillation** every ``distill_every`` steps through the ``distiller`` group; then V is reset.

Everything is recorded in ``viewpoints.jsonl``; ``python -m socratic_exp.viewpoints <run>`` prints it.

The subclass exists because TRL has no hook that changes the prompts of a batch before generation; the RL loss is
TRL's, unchanged (an entropy mask composes as for SocraticPO).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from socratic_exp.algorithms.entropy_masked.config import EntropyMask
from socratic_exp.algorithms.grpo.config import GRPO
from socratic_exp.errors import ConfigError, UserError

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import RunContext
    from socratic_exp.components import Components
    from socratic_exp.viewpoints.loop import ViewpointLoop


@dataclasses.dataclass(kw_only=True)
class SocraticRL(GRPO):
    requires_teacher = True
    uses_distiller = True

    max_steps: int = 150
    reflect_on: Literal["wrong", "below_group_mean", "all"] = "wrong"
    reflections_per_step: int = 8
    viewpoint_budget: int = 1
    merge_similarity: float = 0.8
    probe_every: int = 10
    probe_items: int = 100
    retire_threshold: float = 0.0
    retire_patience: int = 2
    meta_learning: bool = True
    distill_every: int = 50
    entropy_mask: EntropyMask | None = None

    def validate(self) -> None:
        super().validate()
        for name in ("reflections_per_step", "viewpoint_budget", "probe_items", "retire_patience"):
            self.check_range(name, ge=1)
        self.check_range("merge_similarity", gt=0.0, le=1.0)
        self.check_range("probe_every", ge=0)
        self.check_range("distill_every", ge=0)
        self.check_range("retire_threshold", ge=-1.0, le=1.0)

    def check_compatible(self, components: Components) -> None:
        from socratic_exp.tasks.arithmetic import ArithmeticTask
        from socratic_exp.teachers.llm import LLMTeacher
        from socratic_exp.teachers.rule import RuleTeacher

        teacher, name = components.teacher, components.choices["teacher"]
        if isinstance(teacher, RuleTeacher) and not isinstance(components.task, ArithmeticTask):
            raise ConfigError(
                "teacher",
                name,
                f"the rule teacher reflects only on task=arithmetic traces (task={components.choices['task']})",
                "use teacher=llm or teacher=blackbox for algorithm=socratic_rl on this task",
            )
        if self.meta_learning and isinstance(teacher, LLMTeacher) and teacher.backend == "vllm":
            raise ConfigError(
                "algorithm.meta_learning",
                True,
                "trains the teacher's weights with DPO, which a vLLM-served teacher does not expose",
                "use teacher.backend=transformers, or algorithm.meta_learning=false",
            )

    def reward_functions(self, ctx: RunContext) -> list[Any]:
        """The task's verifier; the scored traces (with the questions as they were before the viewpoints) go to the
        loop for reflection, the rewards to the sampler."""
        from socratic_exp.tasks.base import question_text
        from socratic_exp.teachers.base import Attempt

        loop = self._loop

        def reflect_on(texts: list[str], verdicts: list[Any], columns: dict[str, Any]) -> None:
            questions = [question_text(q) for q in columns["sx_question"]]
            loop.observe(questions, [Attempt(t, v.score, v.reason) for t, v in zip(texts, verdicts, strict=True)])

        return [ctx.components.task.reward_function(on_rewards=ctx.components.sampler.observe, on_verdicts=reflect_on)]

    def trainer_base(self) -> type:
        from socratic_exp.algorithms.entropy_masked.trainer import with_entropy_mask

        return with_entropy_mask(_trainer_class(super().trainer_base()))

    def trainer_extras(self, ctx: RunContext) -> dict[str, Any]:
        return {"viewpoint_loop": self._loop, "entropy_mask": self.entropy_mask}

    def build_trainer(self, ctx: RunContext) -> Any:
        self._loop = self.build_loop(ctx)
        # first, so that a distillation at an evaluation step is done before that evaluation
        ctx.callbacks.insert(0, _callback(self._loop))
        return super().build_trainer(ctx)

    def build_loop(self, ctx: RunContext) -> ViewpointLoop:
        from socratic_exp.teachers.llm import LLMTeacher
        from socratic_exp.viewpoints.loop import ViewpointLoop

        teacher = ctx.components.teacher
        if isinstance(teacher, LLMTeacher):
            teacher.decouple_from_student()
        probe = ctx.data["probe"] if "probe" in ctx.data else ctx.data["train"].shuffle(seed=ctx.seed)
        limit = getattr(ctx.student.model.config, "max_position_embeddings", None)
        return ViewpointLoop(
            self,
            ctx.components,
            ctx.student,
            probe.select(range(min(self.probe_items, len(probe)))).to_list(),
            ctx.data["train"],
            ctx.run_dir,
            ctx.sink,
            ctx.seed,
            prompt_room=limit - self.max_completion_length if limit else None,
        )


def _trainer_class(base: type) -> type:
    class SocraticRLTrainer(base):  # type: ignore[misc, valid-type]
        """GRPOTrainer whose batches get the active viewpoints in front of their prompts, and whose scored traces
        go to the teacher's reflection after each generation batch."""

        def __init__(self, *args: Any, viewpoint_loop: ViewpointLoop, **kwargs: Any):
            self.viewpoint_loop = viewpoint_loop
            super().__init__(*args, **kwargs)
            if self.accelerator.num_processes > 1:
                raise UserError(
                    "algorithm=socratic_rl runs on one process: its knowledge base is not synchronised across ranks",
                    "launch it without accelerate's multi-process modes",
                )

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            loop = self.viewpoint_loop
            texts = loop.active_texts()
            shown = [
                {**row, "prompt": loop.in_context(row["prompt"], texts), "sx_question": row["prompt"]} for row in inputs
            ]
            output = super()._generate_and_score_completions(shown)
            mode = "train" if self.model.training else "eval"
            for name, value in loop.reflect(self.state.global_step + 1).items():
                self._metrics[mode][name].append(value)
            return output

    return SocraticRLTrainer


def _callback(loop: ViewpointLoop) -> Any:
    from pathlib import Path

    from transformers import TrainerCallback

    class ViewpointLoopCallback(TrainerCallback):
        """Probes, meta-learning and distillation after a step; the loop's state in every checkpoint."""

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            metrics = loop.after_step(state.global_step)
            if metrics and loop.sink is not None:
                loop.sink.log(metrics, state.global_step)

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                loop.save(folder)

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            loop.restore(Path(args.output_dir) / f"checkpoint-{state.global_step}", state.global_step)

    return ViewpointLoopCallback()
