"""``algorithm=grpo``'s settings (``GRPO``, the dataclass ``conf/algorithm/grpo.yaml`` names, which every algorithm
extends) and their checks; torch-free. ``build.py`` makes TRL's GRPOTrainer from them.

Everything GRPO does (generation, group-relative advantages, clipping, KL, vLLM) is TRL's.
Differences from TRL's defaults (TRL 1.16), chosen for the CPU testbed and stated in each field's help and
``conf/algorithm/grpo.yaml``: ``max_steps`` 400 (TRL: -1, epochs), ``learning_rate`` 1e-4 (TRL: 1e-6),
``lr_scheduler_type`` constant (TRL: linear), ``batch_size`` 64 (TRL: 8), ``max_completion_length`` 48 (TRL: 512),
``bf16`` only on GPUs with bf16 (TRL: on), ``gradient_checkpointing`` off (TRL: on), ``logging_steps`` 5 (TRL: 10),
``save_steps`` 50 (TRL: 500), ``save_total_limit`` 2 (TRL: all), ``log_completions`` on (TRL: off),
``num_completions_to_print`` 0 (TRL: all).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from socratic_exp.algorithms.base import Algorithm
from socratic_exp.algorithms.grpo.dynamic_sampling import DynamicSampling
from socratic_exp.algorithms.trl_args import check_trl_args
from socratic_exp.core.component import setting
from socratic_exp.core.errors import ConfigError

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import Options

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
    max_steps: int = setting(400, "optimizer steps of the run (TRL: -1, i.e. num_train_epochs)", ge=1)
    learning_rate: float = setting(1e-4, "AdamW learning rate; hub models want e.g. 1e-6 (TRL: 1e-6)", gt=0.0)
    lr_scheduler_type: str = setting("constant", "transformers' learning-rate schedule name (TRL: linear)")
    warmup_steps: int = setting(0, "linear warm-up steps from 0 to learning_rate", ge=0)
    weight_decay: float = setting(0.0, "AdamW weight decay (bias and LayerNorm excluded)", ge=0.0)
    max_grad_norm: float = setting(1.0, "gradient-norm clipping threshold", gt=0.0)
    batch_size: int = setting(
        64, "completions per device per optimizer step: TRL's per_device_train_batch_size (TRL: 8)", ge=1
    )
    gradient_accumulation_steps: int = setting(1, "micro-batches accumulated per optimizer step", ge=1)
    num_generations: int = setting(8, "G: completions per prompt (must divide the generation batch)", ge=2)
    steps_per_generation: int | None = setting(
        None, "optimizer steps each generation batch serves (null: gradient_accumulation_steps)", ge=1
    )
    num_iterations: int = setting(1, "mu: policy updates per generation batch (PPO-style reuse)", ge=1)
    max_completion_length: int = setting(48, "tokens generated per completion at most (TRL: 512)", ge=1)
    temperature: float = setting(1.0, "sampling temperature of the training completions", gt=0.0)
    top_p: float = setting(1.0, "nucleus sampling of the training completions (1: off)", gt=0.0, le=1.0)
    beta: float = setting(0.0, "KL coefficient to the reference model (0: no reference model is loaded)", ge=0.0)
    epsilon: float = setting(0.2, "lower clipping range of the importance ratio", ge=0.0)
    epsilon_high: float | None = setting(None, "upper clipping range (DAPO clip-higher; null: = epsilon)", ge=0.0)
    loss_type: LossType = setting("dapo", "TRL's loss aggregation: dapo = token-level mean over the batch")
    scale_rewards: Literal["group", "batch", "none"] = setting(
        "group", "advantage scaling: std within each group, over the batch, or none (Dr. GRPO)"
    )
    mask_truncated_completions: bool = setting(False, "leave completions cut at max_completion_length out of the loss")
    bf16: bool | None = setting(None, "bf16 mixed precision (null: on for CUDA GPUs with bf16, off on CPU; TRL: on)")
    gradient_checkpointing: bool = setting(False, "recompute activations to save GPU memory (TRL: on)")
    logging_steps: int = setting(5, "steps between TRL's metric logs, averaged over them (TRL: 10)", ge=1)
    save_steps: int = setting(50, "steps between checkpoints (TRL: 500)", ge=1)
    save_total_limit: int | None = setting(2, "checkpoints kept, the newest (null: all; TRL: null)", ge=1)
    log_completions: bool = setting(True, "TRL's completions table at each log, to W&B and parquet (TRL: off)")
    num_completions_to_print: int = setting(
        0, "completions printed to the console at each log (0: none; TRL: null, all)", ge=0
    )
    use_vllm: bool = setting(False, "generate with vLLM instead of transformers' generate()")
    vllm_mode: Literal["colocate", "server"] = setting(
        "colocate", "vLLM in the training process (colocate) or a separate trl vllm-serve (server)"
    )
    dynamic_sampling: DynamicSampling | None = setting(
        None,
        "e.g. {max_rounds: 10, batches_per_round: 3}: DAPO's dynamic sampling, groups whose task rewards are all "
        "equal dropped and new prompts' groups generated until the batch is full (null: off)",
    )
    trl_args: dict[str, Any] = setting(
        default_factory=dict, help="any other trl.GRPOConfig field, passed through verbatim"
    )

    def validate(self) -> None:
        generation_batch = self.batch_size * (self.steps_per_generation or self.gradient_accumulation_steps)
        self.check(
            "num_generations",
            generation_batch % self.num_generations == 0,
            f"must divide the generation batch (batch_size x steps_per_generation = {generation_batch})",
            f"pick a divisor of {generation_batch}, or change algorithm.batch_size",
        )
        self.check(
            "warmup_steps",
            not (self.warmup_steps and self.lr_scheduler_type == "constant"),
            "is ignored by lr_scheduler_type=constant (transformers' constant schedule has no warm-up)",
            "set algorithm.lr_scheduler_type=constant_with_warmup",
        )
        clashes = sorted(set(self.trl_args) & ({f.name for f in dataclasses.fields(self)} | RUN_MANAGED_KEYS))
        self.check(
            "trl_args",
            not clashes,
            f"sets {clashes}, which have their own keys or are set by socratic_exp",
            "set them as algorithm.<key> (or let the run set them)",
        )
        check_trl_args(self.trl_args)  # every other key a GRPOConfig field (read from TRL's source: no import)

    def check_compatible(self, components: Options) -> None:
        if self.use_vllm and components.model.vllm_unloadable:
            raise ConfigError(
                "algorithm.use_vllm",
                True,
                f"model={components.choices.get('model', 'tiny')} {components.model.vllm_unloadable}",
                "use a Hub model (model=smollm2_135m, model=qwen3_0_6b, ...) or algorithm.use_vllm=false",
            )
        buffer = components.task.overlong_buffer
        if buffer >= self.max_completion_length:
            raise ConfigError(
                "task.overlong_buffer",
                buffer,
                f"must be below algorithm.max_completion_length={self.max_completion_length}: the penalty would "
                "start before the first token",
                f"set task.overlong_buffer below {self.max_completion_length} (DAPO: 4096 of 20480)",
            )
        weights, functions = self.trl_args.get("reward_weights"), 1 + bool(buffer)  # the verifier, its shaping
        if weights is not None and components.task.format_reward:
            raise ConfigError(
                "algorithm.trl_args.reward_weights",
                weights,
                f"and task.format_reward={components.task.format_reward:g} both weigh the reward functions",
                "leave reward_weights unset: the run weighs the verifier 1, the overlong penalty 1, the format reward "
                "task.format_reward",
            )
        if weights is not None and len(weights) != functions:
            raise ConfigError(
                "algorithm.trl_args.reward_weights",
                weights,
                f"gives {len(weights)} weights for {functions} reward functions (the verifier"
                + (", then the overlong penalty)" if buffer else ")"),
                f"give {functions} weights, or leave it unset",
            )

    def model_copies(self, components: Options) -> list[Any]:
        """What TRL's GRPOTrainer holds besides the student (``models/memory.py`` sizes it; subclasses add theirs):
        the reference model when ``beta`` > 0, and vLLM's own copy of the weights in colocate mode."""
        from socratic_exp.models.memory import SHARED, STUDENT, ModelCopy

        copies = []
        if self.beta > 0:
            name, key = f"reference model (beta={self.beta:g})", "reference"
            if components.model.lora.enabled:  # GRPOTrainer.__init__: a PEFT student needs no ref_model
                copies.append(ModelCopy(name, of=SHARED, key=key, note="the base model with the adapters disabled"))
            else:
                copies.append(
                    ModelCopy(
                        name,
                        of=STUDENT,
                        sharded=True,
                        key=key,
                        note="TRL reloads it from the student's path at the student's dtype (ZeRO-3 shards it)",
                        evidence="trl/trainer/grpo_trainer.py GRPOTrainer.__init__ (create_model_from_path)",
                    )
                )
        if self.use_vllm and self.vllm_mode == "colocate":
            share = self.trl_args.get("vllm_gpu_memory_utilization", 0.3)  # GRPOConfig's default
            split = int(self.trl_args.get("vllm_tensor_parallel_size", 1))
            sleeps = self.trl_args.get("vllm_enable_sleep_mode", False)
            note = (
                f"vllm.LLM(model=<the student's path>) in each process, 16-bit, inside the "
                f"vllm_gpu_memory_utilization={share:g} of each GPU (on CPU: of the RAM) that vLLM reserves with its "
                "KV cache"
                + (f", split over vllm_tensor_parallel_size={split}" if split > 1 else "")
                + ("; sleep mode frees it during the optimizer step" if sleeps else "")
            )
            copies.append(
                ModelCopy(
                    "vLLM's copy of the weights (colocate)",
                    of=STUDENT,
                    dtype="bfloat16",
                    divide=split,
                    counted=False,
                    key="vllm",
                    note=note,
                    evidence="trl/generation/vllm_generation.py VLLMGeneration._init_vllm",
                )
            )
        return copies
