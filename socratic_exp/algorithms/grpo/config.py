"""``algorithm=grpo``: TRL's GRPOTrainer, configured from the algorithm config.

Everything GRPO does (generation, group-relative advantages, clipping, KL, vLLM) is TRL's. This module maps the
config onto ``trl.GRPOConfig``, adds the task's verifier as the reward function and plugs in the sampler.
Differences from TRL's defaults, chosen for the CPU testbed and stated in ``conf/algorithm/grpo.yaml``:
``learning_rate`` 3e-5 (TRL: 1e-6), ``max_completion_length`` 48 (TRL: 256), ``bf16`` only on GPUs with bf16
(TRL: on), ``log_completions`` on.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from socratic_exp.algorithms.base import Algorithm, RunContext
from socratic_exp.errors import ConfigError

# GRPOConfig fields the run sets itself (from the run folder, seed, logger and model).
RUN_MANAGED_KEYS = {
    "output_dir",
    "run_name",
    "seed",
    "report_to",
    "per_device_train_batch_size",
    "save_strategy",
    "chat_template_kwargs",
}
LossType = Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"]


@dataclasses.dataclass(kw_only=True)
class GRPO(Algorithm):
    max_steps: int = 400
    learning_rate: float = 3e-5
    lr_scheduler_type: str = "constant"
    warmup_steps: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    batch_size: int = 64
    gradient_accumulation_steps: int = 1
    num_generations: int = 8
    steps_per_generation: int | None = None
    num_iterations: int = 1
    max_completion_length: int = 48
    temperature: float = 1.0
    top_p: float = 1.0
    beta: float = 0.0
    epsilon: float = 0.2
    epsilon_high: float | None = None
    loss_type: LossType = "dapo"
    scale_rewards: Literal["group", "batch", "none"] = "group"
    mask_truncated_completions: bool = False
    bf16: bool | None = None
    gradient_checkpointing: bool = False
    logging_steps: int = 5
    save_steps: int = 50
    save_total_limit: int | None = 2
    log_completions: bool = True
    num_completions_to_print: int = 0
    use_vllm: bool = False
    vllm_mode: Literal["colocate", "server"] = "colocate"
    trl_args: dict[str, Any] = dataclasses.field(default_factory=dict)

    def validate(self) -> None:
        for name in (
            "max_steps",
            "batch_size",
            "gradient_accumulation_steps",
            "num_iterations",
            "max_completion_length",
            "logging_steps",
            "save_steps",
            "steps_per_generation",
        ):
            self.check_range(name, ge=1)
        self.check_range("save_total_limit", ge=1)
        self.check_range("num_completions_to_print", ge=0)
        self.check_range("learning_rate", gt=0.0)
        self.check_range("warmup_steps", ge=0)
        self.check_range("weight_decay", ge=0.0)
        self.check_range("max_grad_norm", gt=0.0)
        self.check_range("temperature", gt=0.0)
        self.check_range("top_p", gt=0.0, le=1.0)
        self.check_range("beta", ge=0.0)
        self.check_range("epsilon", ge=0.0)
        self.check_range("epsilon_high", ge=0.0)
        self.check_range("num_generations", ge=2)
        generation_batch = self.batch_size * (self.steps_per_generation or self.gradient_accumulation_steps)
        self.check(
            "num_generations",
            generation_batch % self.num_generations == 0,
            f"must divide the generation batch (batch_size x steps_per_generation = {generation_batch})",
            f"pick a divisor of {generation_batch}, or change algorithm.batch_size",
        )
        clashes = sorted(set(self.trl_args) & ({f.name for f in dataclasses.fields(self)} | RUN_MANAGED_KEYS))
        self.check(
            "trl_args",
            not clashes,
            f"sets {clashes}, which have their own keys or are set by socratic_exp",
            "set them as algorithm.<key> (or let the run set them)",
        )

    def trl_kwargs(self, ctx: RunContext) -> dict[str, Any]:
        """The ``GRPOConfig`` arguments: this config's knobs, the run's paths, and ``trl_args`` verbatim."""
        import torch

        # GRPO's own fields only: a subclass's extra settings are its own, not GRPOConfig's.
        knobs = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(GRPO) if f.name not in ("batch_size", "trl_args")
        }
        if knobs["bf16"] is None:
            knobs["bf16"] = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return {
            **knobs,
            "per_device_train_batch_size": self.batch_size,
            "output_dir": str(ctx.checkpoint_dir),
            "run_name": ctx.run_name,
            "seed": ctx.seed,
            "report_to": ctx.report_to,
            "save_strategy": "steps",
            "chat_template_kwargs": ctx.student.chat_template_kwargs or None,
            **self.trl_args,
        }

    def grpo_config(self, ctx: RunContext) -> Any:
        from trl import GRPOConfig

        known = {f.name for f in dataclasses.fields(GRPOConfig)}
        for key in self.trl_args:
            if key not in known:
                raise ConfigError(
                    f"algorithm.trl_args.{key}",
                    self.trl_args[key],
                    "is not a trl.GRPOConfig field",
                    "check the name against TRL's GRPOConfig docs",
                )
        return GRPOConfig(**self.trl_kwargs(ctx))

    def trainer_base(self) -> type:
        """The TRL trainer class, before the sampler's subclass (an algorithm's own subclass goes here)."""
        from trl import GRPOTrainer

        return GRPOTrainer

    def trainer_extras(self, ctx: RunContext) -> dict[str, Any]:
        """Constructor arguments of ``trainer_base()`` beyond GRPOTrainer's."""
        return {}

    def reward_functions(self, ctx: RunContext) -> list[Any]:
        """TRL's ``reward_funcs``: the task's verifier, whose rewards the sampler observes."""
        return [ctx.components.task.reward_function(on_rewards=ctx.components.sampler.observe)]

    def build_trainer(self, ctx: RunContext) -> Any:
        trainer_cls = ctx.components.sampler.trainer_class(self.trainer_base())
        return trainer_cls(
            model=ctx.student.model,
            reward_funcs=self.reward_functions(ctx),
            args=self.grpo_config(ctx),
            train_dataset=ctx.data["train"],
            processing_class=ctx.student.tokenizer,
            callbacks=ctx.callbacks,
            **self.trainer_extras(ctx),
        )
