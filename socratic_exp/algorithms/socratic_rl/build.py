"""How ``algorithm=socratic_rl``'s settings become its trainer (``SocraticRLTrainer``, ``trainer.py``) and the
viewpoint loop beside it (``loop.py``): the loop reads the verifier's scored traces through the reward function, and
its callback runs first, so that a distillation at an evaluation step is done before that evaluation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from socratic_exp.algorithms.grpo.build import GRPOBuild
from socratic_exp.teachers.reflection import TrainableReflective

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import RunContext
    from socratic_exp.algorithms.socratic_rl.config import SocraticRL
    from socratic_exp.algorithms.socratic_rl.loop import ViewpointLoop


class SocraticRLBuild(GRPOBuild):
    settings: SocraticRL
    loop: ViewpointLoop  # made by ``build``, before the trainer

    def reward_functions(self, ctx: RunContext) -> list[Any]:
        """The task's verifier; the scored traces (with the questions as they were before the viewpoints) go to the
        loop for reflection, the rewards to the sampler."""
        from socratic_exp.tasks.base import question_text
        from socratic_exp.teachers.base import Attempt

        loop = self.loop

        def reflect_on(texts: list[str], verdicts: list[Any], columns: dict[str, Any]) -> None:
            questions = [question_text(q) for q in columns["sx_question"]]
            loop.observe(questions, [Attempt(t, v.score, v.reason) for t, v in zip(texts, verdicts, strict=True)])

        return [ctx.components.task.reward_function(on_rewards=ctx.components.sampler.observe, on_verdicts=reflect_on)]

    def trainer_base(self) -> type:
        from socratic_exp.algorithms.socratic_rl.trainer import SocraticRLTrainer

        return SocraticRLTrainer

    def trainer_extras(self, ctx: RunContext) -> dict[str, Any]:
        return {"viewpoint_loop": self.loop, "entropy_mask": self.settings.entropy_mask, "metrics_sink": ctx.sink}

    def build(self, ctx: RunContext) -> Any:
        from socratic_exp.algorithms.socratic_rl.trainer import ViewpointLoopCallback

        self.loop = self.build_loop(ctx)
        ctx.callbacks.insert(0, ViewpointLoopCallback(self.loop))  # first: see the module docstring
        return super().build(ctx)

    def build_loop(self, ctx: RunContext) -> ViewpointLoop:
        """The viewpoint loop on the run's student, probe questions and run folder."""
        from socratic_exp.algorithms.socratic_rl.loop import ViewpointLoop

        settings = self.settings
        if isinstance(teacher := ctx.components.teacher, TrainableReflective):
            teacher.decouple_from_student()  # its meta-learning trains a copy, not the student
        probe = ctx.data["probe"] if "probe" in ctx.data else ctx.data["train"].shuffle(seed=ctx.seed)
        limit = getattr(ctx.student.model.config, "max_position_embeddings", None)
        return ViewpointLoop(
            settings,
            ctx.components,
            ctx.student,
            probe.select(range(min(settings.probe_items, len(probe)))).to_list(),
            ctx.data["train"],
            ctx.run_dir,
            ctx.sink,
            ctx.seed,
            prompt_room=limit - settings.max_completion_length if limit else None,
        )


BUILD = SocraticRLBuild
