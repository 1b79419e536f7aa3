"""How ``algorithm=grpo``'s settings become a TRL trainer: ``GRPOBuild``, which every algorithm's build extends.

It maps the settings onto ``trl.GRPOConfig``, adds the task's verifier (and its shaping) as the reward functions,
and composes the trainer class in one place (``trainer_class``): the method's trainer (TRL's ``GRPOTrainer`` here),
DAPO's dynamic sampling around it when asked for (``dynamic_sampling_trainer.py``), and the sampler's layer on top
when the sampler orders the prompts itself (``samplers.base.PromptOrderLayer``). Torch-free until it builds.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from socratic_exp.algorithms.grpo.config import GRPO

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import RunContext


class GRPOBuild:
    """A trainer built from an algorithm's settings. A method's build subclasses it and overrides ``trainer_base``
    (its TRL subclass), ``trainer_extras`` (that class's own constructor arguments) and, where it scores rollouts its
    own way, ``reward_functions`` / ``task_shaping``."""

    def __init__(self, settings: GRPO) -> None:
        self.settings = settings

    def trl_kwargs(self, ctx: RunContext) -> dict[str, Any]:
        """The ``GRPOConfig`` arguments: the GRPO settings, the run's paths, and ``trl_args`` verbatim."""
        import torch

        settings = self.settings
        # GRPO's own fields only: a subclass's extra settings are its own, not GRPOConfig's.
        knobs = {
            f.name: getattr(settings, f.name)
            for f in dataclasses.fields(GRPO)
            if f.name not in ("batch_size", "trl_args", "dynamic_sampling")
        }
        if knobs["bf16"] is None:
            knobs["bf16"] = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return {
            **knobs,
            "per_device_train_batch_size": settings.batch_size,
            "output_dir": str(ctx.checkpoint_dir),
            "run_name": ctx.run_name,
            "seed": ctx.seed,
            "report_to": ctx.report_to,
            "save_strategy": "steps",
            "chat_template_kwargs": ctx.student.chat_template_kwargs or None,
            # without a GPU, so that a launch of several processes joins them over gloo (MULTI_CPU): accelerate
            # would otherwise run each as a process of its own
            "use_cpu": not torch.cuda.is_available(),
            **self.reward_weights(ctx),
            **settings.trl_args,
        }

    def reward_weights(self, ctx: RunContext) -> dict[str, Any]:
        """TRL's ``reward_weights`` where the format reward is on (a weight per reward function: the verifier's 1,
        then the task's shaping), else nothing: TRL weighs every function 1."""
        task = ctx.components.task
        if not (task.format_reward and self.task_shaping(ctx)):
            return {}
        return {"reward_weights": [1.0, *task.shaping_weights()]}

    def task_shaping(self, ctx: RunContext) -> list[Any]:
        """The task's reward functions after the verifier's (``Task.shaping_rewards``)."""
        return ctx.components.task.shaping_rewards(self.settings.max_completion_length)

    def grpo_config(self, ctx: RunContext) -> Any:
        from trl import GRPOConfig

        return GRPOConfig(**self.trl_kwargs(ctx))

    def trainer_base(self) -> type:
        """The method's TRL trainer class, before the layers ``trainer_class`` adds around it."""
        from trl import GRPOTrainer

        return GRPOTrainer

    def trainer_extras(self, ctx: RunContext) -> dict[str, Any]:
        """Constructor arguments of ``trainer_base()`` beyond GRPOTrainer's."""
        return {}

    def reward_functions(self, ctx: RunContext) -> list[Any]:
        """TRL's ``reward_funcs``, the task's first (the verifier, whose rewards the sampler observes); the task's
        shaping (``task.overlong_buffer``) follows them in ``build``."""
        return [ctx.components.task.reward_function(on_rewards=ctx.components.sampler.observe)]

    def trainer_class(self, ctx: RunContext) -> tuple[type, dict[str, Any]]:
        """The trainer class, composed here alone, and the constructor arguments its layers take besides TRL's.

        From the outside in (the MRO): the sampler's ``PromptOrderLayer`` where the sampler orders the prompts,
        ``DynamicSamplingMixin`` where ``dynamic_sampling`` is set, the method's trainer (``trainer_base``), and
        dynamic sampling's ``GenerationReplay`` just above TRL's ``GRPOTrainer``."""
        sampler = ctx.components.sampler
        base, extras = self.trainer_base(), self.trainer_extras(ctx)
        outer: list[type] = []
        inner: list[type] = [base]
        if sampler.chooses_prompts():
            from socratic_exp.samplers.base import PromptOrderLayer

            outer.append(PromptOrderLayer)
            extras["prompt_order"] = sampler
        if self.settings.dynamic_sampling is not None:
            from trl import GRPOTrainer

            from socratic_exp.algorithms.grpo.dynamic_sampling_trainer import DynamicSamplingMixin, GenerationReplay

            outer.append(DynamicSamplingMixin)
            inner = [GenerationReplay] if base is GRPOTrainer else [base, GenerationReplay]
            extras |= {"dynamic_sampling": self.settings.dynamic_sampling, "prompt_sampler": sampler}
        if not outer:
            return base, extras
        name = "".join(layer.__name__.removesuffix("Layer").removesuffix("Mixin") for layer in outer) + base.__name__
        return type(name, (*outer, *inner), {}), extras

    def build(self, ctx: RunContext) -> Any:
        """The trainer; with ``model.lora.r > 0`` TRL wraps the student in LoRA adapters (``peft_config``), and the
        run's student becomes that PEFT model, so that evaluation, teachers and distillers see the adapters."""
        if self.settings.use_vllm and self.settings.vllm_mode == "colocate":
            from socratic_exp.algorithms.vllm_cpu import keep_linear_weights

            keep_linear_weights()  # on vLLM's CPU backend only: its linear layers keep weights TRL can sync
        trainer_cls, extras = self.trainer_class(ctx)
        peft_config = ctx.components.model.lora.peft_config()
        trainer = trainer_cls(
            model=ctx.student.model,
            reward_funcs=self.reward_functions(ctx) + self.task_shaping(ctx),
            args=self.grpo_config(ctx),
            train_dataset=ctx.data["train"],
            processing_class=ctx.student.tokenizer,
            callbacks=ctx.callbacks,
            peft_config=peft_config,
            **extras,
        )
        if peft_config is not None:
            ctx.student.model = trainer.model
        return trainer


BUILD = GRPOBuild
