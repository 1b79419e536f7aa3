"""Short TRL training phases inside a run, on a model the run holds: the distillers' steps (``distiller=``) and a
trainable teacher's DPO meta-updates.

A phase is an ordinary TRL trainer (SFTTrainer, DPOTrainer, SDFTTrainer) run for a few steps on a model that the
RL trainer also holds; the weights change in place. A phase writes no checkpoints and reports to no logger of its
own: its figures come back as a dict that the run logs beside its RL metrics.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def phase_args(
    config_cls: type, out_dir: Path, *, steps: int, batch_size: int, learning_rate: float, seed: int, **extra: Any
) -> Any:
    """A TRL config for a short phase: constant learning rate, no checkpoints, no logger, no gradient checkpointing
    (TRL's trainers switch it on by default, and the RL trainer holding the same model would inherit it)."""
    import torch

    return config_cls(
        output_dir=str(out_dir),
        max_steps=steps,
        per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=batch_size,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        seed=seed,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
        activation_checkpointing=False,
        dataloader_pin_memory=torch.cuda.is_available(),
        disable_tqdm=True,
        # as the run's trainer: TrainingArguments set the launch's processes up anew, and on CPU without use_cpu
        # accelerate would leave the phase's processes ungrouped
        use_cpu=not torch.cuda.is_available(),
        **extra,
    )


def run_phase(trainer: Any, prefix: str, eval_dataset: Any = None) -> dict[str, float]:
    """Train; with ``eval_dataset`` also TRL's loss on it before and after (the phase's own objective on fixed
    data, so "it lowered its loss" is measured, not read off noisy training logs). Its steps are reported as the
    console's other long work (``WorkProgress``), under ``prefix``."""
    from transformers import PrinterCallback

    from socratic_exp.core.progress_callbacks import PhaseProgressCallback

    trainer.remove_callback(PrinterCallback)  # the phase's figures are returned and logged by the run
    trainer.add_callback(PhaseProgressCallback(prefix))
    started = time.perf_counter()
    metrics: dict[str, float] = {}
    if eval_dataset is not None:
        metrics[f"{prefix}/loss_before"] = float(trainer.evaluate(eval_dataset)["eval_loss"])
        # transformers' evaluation marks the model as prepared by accelerate, and the train() that follows would skip
        # its DDP wrapping: on several processes each would step with its own share's gradient and their weights part
        if trainer.model_wrapped is trainer.model:
            trainer.model._is_accelerate_prepared = False
    trainer.train()
    if eval_dataset is not None:
        metrics[f"{prefix}/loss_after"] = float(trainer.evaluate(eval_dataset)["eval_loss"])
    train_logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    if train_logs:
        metrics[f"{prefix}/train_loss_first"] = float(train_logs[0]["loss"])
        metrics[f"{prefix}/train_loss_last"] = float(train_logs[-1]["loss"])
    metrics[f"{prefix}/steps"] = float(trainer.state.global_step)
    metrics[f"{prefix}/seconds"] = time.perf_counter() - started
    return metrics


def dpo_phase(
    model: Any,
    tokenizer: Any,
    rows: list[dict[str, Any]],
    out_dir: Path,
    *,
    prefix: str,
    steps: int,
    batch_size: int,
    learning_rate: float,
    beta: float,
    seed: int,
) -> dict[str, float]:
    """DPO (TRL's DPOTrainer) on ``prompt`` / ``chosen`` / ``rejected`` rows, against a frozen copy of the model as it
    was before the phase. With LoRA that copy is TRL's: a ``ref`` adapter copied from the trained one (no copy of the
    base weights), deleted after the phase so that the next phase copies the adapter afresh."""
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from socratic_exp.models.adapters import drop_adapter, is_lora
    from socratic_exp.models.base import frozen_copy

    pairs = Dataset.from_list(rows)
    args = phase_args(
        DPOConfig,
        out_dir,
        steps=steps,
        batch_size=min(batch_size, len(rows)),
        learning_rate=learning_rate,
        seed=seed,
        beta=beta,
    )
    lora = is_lora(model)
    trainer = DPOTrainer(
        model=model,
        ref_model=None if lora else frozen_copy(model),
        args=args,
        train_dataset=pairs,
        processing_class=tokenizer,
    )
    try:
        metrics = run_phase(trainer, prefix, eval_dataset=pairs)
    finally:
        if lora:
            drop_adapter(model, "ref")
    margins = [entry["rewards/margins"] for entry in trainer.state.log_history if "rewards/margins" in entry]
    if margins:
        metrics[f"{prefix}/reward_margin"] = float(margins[-1])
    return metrics | {f"{prefix}/pairs": float(len(rows))}
