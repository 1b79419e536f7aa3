"""The tiny student's warm-start: supervised training on the task's traces, saved atomically into a folder.

The loss is on the student's own text only: prompts, hints and the wrong first attempt of a retry are context.
The folder gets the weights, the tokenizer and ``warmstart.json`` (settings, training loss, and the machine, code
commit and versions that built it: the same settings build other weights on another CPU, whose bf16 rounding and
kernel splits differ).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from socratic_exp.core.run_folder import git_commit, machine, versions
from socratic_exp.models.char_tokenizer import build_char_tokenizer

if TYPE_CHECKING:
    from socratic_exp.models.tiny import TinyModel
    from socratic_exp.tasks.base import Task, WarmstartExample

log = logging.getLogger(__name__)


LAUNCH_VARIABLES = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                    "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}  # fmt: skip


def warm_start_alone(spec: TinyModel, task: Task, path: Path) -> None:
    """``warm_start``, in a process of its own when this one is one of several (torchrun, ``accelerate launch``):
    there the warm-start's Trainer would join the run's process group, whose other processes wait on the build's
    file lock instead of joining: a deadlock."""
    import multiprocessing

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        warm_start(spec, task, path)
        return
    child = multiprocessing.get_context("spawn").Process(target=_warm_start_single, args=(spec, task, path))
    child.start()
    child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"the warm-start of {path.name} failed in its own process (exit code {child.exitcode})")


def _warm_start_single(spec: TinyModel, task: Task, path: Path) -> None:
    for key in [k for k in os.environ if k in LAUNCH_VARIABLES or k.startswith(("TORCHELASTIC_", "ACCELERATE_"))]:
        del os.environ[key]  # a single process again, before anything reads them
    warm_start(spec, task, path)


def warmstart_arguments(spec: TinyModel, output_dir: str, bf16: bool) -> Any:
    """The warm-start's ``TrainingArguments``: ``spec``'s steps, batch and learning rate, a cosine schedule."""
    import torch
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=output_dir,
        max_steps=spec.warmstart_steps,
        per_device_train_batch_size=spec.warmstart_batch_size,
        learning_rate=spec.warmstart_lr,
        lr_scheduler_type="cosine",
        warmup_steps=max(1, spec.warmstart_steps // 20),
        weight_decay=0.01,
        logging_steps=max(1, spec.warmstart_steps // 10),
        save_strategy="no",
        report_to=[],
        seed=spec.warmstart_seed,
        dataloader_num_workers=0,
        bf16=bf16,  # autocast only: the weights and optimizer state stay float32
        disable_tqdm=False,
        use_cpu=not torch.cuda.is_available(),
    )


def warm_start(spec: TinyModel, task: Task, path: Path) -> None:
    """Build ``spec``'s student for ``task`` into ``path`` (staged in a scratch folder beside it, then renamed)."""
    from transformers import Trainer, set_seed

    from socratic_exp.core.progress_callbacks import quiet_trainer

    started = time.time()
    # provenance, read before training: the code and machine that build these weights
    provenance = {"machine": machine(), "git_commit": git_commit(),
                  "versions": {name: versions().get(name) for name in ("torch", "transformers")}}  # fmt: skip
    bf16 = spec.uses_bf16()
    set_seed(spec.warmstart_seed)
    tokenizer = build_char_tokenizer()
    model = spec.build_untrained(tokenizer)
    log.info(
        "warm-starting model=tiny (%.2fM parameters, %d steps); cached at %s",
        model.num_parameters() / 1e6,
        spec.warmstart_steps,
        path,
    )
    examples = task.warmstart_examples(spec.warmstart_examples, spec.warmstart_seed)
    features = encode_examples(examples, tokenizer, spec.max_length)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}-") as scratch:
        args = warmstart_arguments(spec, os.path.join(scratch, "trainer"), bf16)
        collator = PackingCollator(tokenizer.pad_token_id, spec.max_length)
        trainer = Trainer(model=model, args=args, train_dataset=features, data_collator=collator)
        quiet_trainer(trainer, "warm-start")  # a progress line, not a dictionary per log
        model.config.use_cache = False  # with a cache, transformers ignores packed position ids (masks leak)
        result = trainer.train()
        model.config.use_cache = True
        tokenizer.padding_side = "left"  # generation (TRL and the evaluator) pads on the left
        staged = Path(scratch) / "model"
        model.save_pretrained(staged)
        tokenizer.save_pretrained(staged)
        info = {
            "settings": spec.weight_settings() | {"cache_dir": str(path.parent), "warmstart_bf16": bf16},
            "task": task.warmstart_fingerprint(),
            "parameters": model.num_parameters(),
            "train_loss": result.training_loss,
            "examples": len(features),
            "seconds": round(time.time() - started, 1),
            **provenance,
        }
        (staged / "warmstart.json").write_text(json.dumps(info, indent=2))
        if path.exists():
            shutil.rmtree(path)
        staged.rename(path)
    log.info("warm-start done in %.0f s (loss %.3f)", time.time() - started, result.training_loss)


def encode_examples(examples: list[WarmstartExample], tokenizer: Any, max_length: int) -> list[dict[str, list[int]]]:
    """Token ids with labels: trainable segments keep their ids, context segments are masked (-100); EOS is learned.
    Every segment of every example is tokenized in one batched call (one call per segment took ~4 s of the corpus)."""
    segments = [text for example in examples for text, _ in example]
    ids_of = iter(tokenizer(segments, add_special_tokens=False)["input_ids"])
    features = []
    for example in examples:
        input_ids: list[int] = []
        labels: list[int] = []
        for _, trainable in example:
            ids = next(ids_of)
            input_ids += ids
            labels += ids if trainable else [-100] * len(ids)
        input_ids.append(tokenizer.eos_token_id)
        labels.append(tokenizer.eos_token_id)
        features.append({"input_ids": input_ids[:max_length], "labels": labels[:max_length]})
    return features


class PackingCollator:
    """Packs a batch's traces into as few rows of ``max_length`` tokens as fit them, each trace with its own position
    ids from 0 and no attention mask, so that transformers builds a block-diagonal causal mask: every trace sees only
    itself, exactly as if padded alone, at a fraction of the cost (traces are 10 to 200 characters long, and padding
    every one to the longest in the batch computed mostly padding). Row ends are filled with padding that forms its
    own block and carries no labels."""

    def __init__(self, pad_token_id: int, max_length: int):
        self.pad_token_id = pad_token_id
        self.max_length = max_length

    def __call__(self, features: list[dict[str, list[int]]]) -> dict[str, Any]:
        import torch

        rows: list[dict[str, list[int]]] = []
        for feature in sorted(features, key=lambda f: -len(f["input_ids"])):  # first-fit decreasing
            ids = feature["input_ids"][: self.max_length]
            row = next((r for r in rows if len(r["input_ids"]) + len(ids) <= self.max_length), None)
            if row is None:
                row = {"input_ids": [], "labels": [], "position_ids": []}
                rows.append(row)
            row["input_ids"] += ids
            row["labels"] += feature["labels"][: len(ids)]
            row["position_ids"] += list(range(len(ids)))
        width = max(len(r["input_ids"]) for r in rows)
        for row in rows:
            fill = width - len(row["input_ids"])
            row["input_ids"] += [self.pad_token_id] * fill
            row["labels"] += [-100] * fill
            row["position_ids"] += list(range(fill))
        return {key: torch.tensor([r[key] for r in rows]) for key in ("input_ids", "labels", "position_ids")}
