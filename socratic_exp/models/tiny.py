"""``model=tiny``: a small Qwen2 built in code, warm-started on the task's traces and cached on disk.

The warm-start is supervised training on ``task.warmstart_examples`` (for arithmetic: traces with a share of
misconceptions, and hint lines followed by corrected attempts), with the loss on the student's own text only:
prompts, hints and the wrong first attempt of a retry are context. The result is cached under
``cache_dir/tiny-<key>``, where the key hashes every setting that changes the weights, so it is rebuilt only
when one of them changes. Builds are atomic (a temporary folder renamed into place) and locked, so parallel
sweep jobs wait for one build instead of racing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from socratic_exp.component import setting
from socratic_exp.errors import UserError
from socratic_exp.models.base import ModelSpec, Student
from socratic_exp.models.char_tokenizer import build_char_tokenizer, load_char_tokenizer
from socratic_exp.run_folder import default_cache_dir, git_commit, machine, versions

if TYPE_CHECKING:
    from socratic_exp.tasks.base import Task, WarmstartExample

log = logging.getLogger(__name__)
WARMSTART_FORMAT = 5  # bump when the corpus or training recipe changes in a way the settings do not show


@dataclasses.dataclass(kw_only=True)
class TinyModel(ModelSpec):
    """A Qwen2 decoder with tied embeddings and a character vocabulary (~0.8M parameters by default)."""

    hidden_size: int = setting(128, "width of the Qwen2 decoder (a multiple of num_heads)", ge=1)
    num_layers: int = setting(4, "decoder layers", ge=1)
    num_heads: int = setting(4, "attention heads per layer (divides hidden_size)", ge=1)
    intermediate_size: int = setting(384, "width of each MLP block", ge=1)
    max_length: int = setting(256, "context length in characters (prompt + completion)", ge=1)
    warmstart_examples: int = setting(40000, "traces in the supervised warm-start corpus", ge=1)
    warmstart_steps: int = setting(1100, "supervised warm-start steps (0: RL from random weights)", ge=0)
    warmstart_batch_size: int = setting(64, "traces per warm-start step", ge=1)
    warmstart_lr: float = setting(2e-3, "AdamW learning rate of the warm-start", gt=0.0)
    warmstart_bf16: bool | None = setting(
        None,
        "bf16 autocast in the warm-start (null: where the device computes bf16 natively, CUDA GPUs with bf16 and "
        "CPUs with AVX512-BF16 or AMX, on which it is about 1.4x faster; off elsewhere, where it would be emulated)",
    )
    warmstart_seed: int = setting(
        0,
        "warm-start seed; not ${seed}: every seed of a sweep starts from the same student ('${seed}': one per seed)",
        ge=0,
    )
    cache_dir: str | None = setting(
        None, "where warm-started students are cached (null: $SOCRATIC_EXP_CACHE or ~/.cache/socratic_exp)"
    )

    def validate(self) -> None:
        self.check(
            "num_heads",
            self.hidden_size % self.num_heads == 0,
            f"must divide model.hidden_size ({self.hidden_size})",
            "pick a divisor of hidden_size",
        )

    # --- public -----------------------------------------------------------------------------------------------
    def load(self, task: Task) -> Student:
        from filelock import FileLock
        from transformers import AutoModelForCausalLM

        if not task.fits_tiny_model:  # before the warm-start, which would train it on text it cannot model
            raise UserError(
                f"model=tiny: its character tokenizer and {self.max_length}-character context are made for the "
                f"arithmetic testbed, not {type(task).__name__}",
                "use a Hub model for real benchmarks, e.g. model=qwen3_0_6b",
            )
        path = self.cache_path(task)
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):
            if not (path / "warmstart.json").is_file():
                for stale in path.parent.glob(f".{path.name}-*"):  # of a build killed outright (we hold the lock)
                    shutil.rmtree(stale, ignore_errors=True)
                self._build(task, path)
            else:
                log.info("warm-start cache hit: %s", path)
        info = json.loads((path / "warmstart.json").read_text())
        model = AutoModelForCausalLM.from_pretrained(path)
        return Student(model=model, tokenizer=load_char_tokenizer(str(path)), path=str(path), info=info, chat=self.chat)

    def cache_path(self, task: Task) -> Path:
        settings = {
            "format": WARMSTART_FORMAT,
            # lora shapes the RL phase, not the warm-started weights; null bf16 resolves per machine
            "model": {k: v for k, v in self.options().items() if k not in ("cache_dir", "lora")}
            | {"warmstart_bf16": self.uses_bf16()},
            "task": {"target": type(task).__qualname__, **task.warmstart_fingerprint()},
        }
        key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
        return Path(self.cache_dir or default_cache_dir()) / f"tiny-{key}"

    def uses_bf16(self) -> bool:
        """Whether the warm-start runs under bf16 autocast (``warmstart_bf16``, resolved for this machine)."""
        if self.warmstart_bf16 is not None:
            return self.warmstart_bf16
        import torch

        if torch.cuda.is_available():
            return torch.cuda.is_bf16_supported(including_emulation=False)  # Ampere and later, not a V100 or T4
        # torch's own CPU feature checks (private: a torch without them counts as no native bf16)
        natively = (
            getattr(torch.cpu, name, lambda: False) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
        )
        return any(check() for check in natively)

    # --- building ---------------------------------------------------------------------------------------------
    def build_untrained(self, tokenizer: Any) -> Any:
        from transformers import Qwen2Config, Qwen2ForCausalLM

        config = Qwen2Config(
            vocab_size=len(tokenizer),
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_heads,
            max_position_embeddings=self.max_length,
            tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            bos_token_id=tokenizer.eos_token_id,
        )
        model = Qwen2ForCausalLM(config)
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        return model

    def _build(self, task: Task, path: Path) -> None:
        import torch
        from transformers import Trainer, TrainingArguments, set_seed

        from socratic_exp.console import quiet_trainer

        started = time.time()
        bf16 = self.uses_bf16()
        set_seed(self.warmstart_seed)
        tokenizer = build_char_tokenizer()
        model = self.build_untrained(tokenizer)
        log.info(
            "warm-starting model=tiny (%.2fM parameters, %d steps); cached at %s",
            model.num_parameters() / 1e6,
            self.warmstart_steps,
            path,
        )
        examples = task.warmstart_examples(self.warmstart_examples, self.warmstart_seed)
        features = encode_examples(examples, tokenizer, self.max_length)
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}-") as scratch:
            args = TrainingArguments(
                output_dir=os.path.join(scratch, "trainer"),
                max_steps=self.warmstart_steps,
                per_device_train_batch_size=self.warmstart_batch_size,
                learning_rate=self.warmstart_lr,
                lr_scheduler_type="cosine",
                warmup_steps=max(1, self.warmstart_steps // 20),
                weight_decay=0.01,
                logging_steps=max(1, self.warmstart_steps // 10),
                save_strategy="no",
                report_to=[],
                seed=self.warmstart_seed,
                dataloader_num_workers=0,
                bf16=bf16,  # autocast only: the weights and optimizer state stay float32
                disable_tqdm=False,
                use_cpu=not torch.cuda.is_available(),
            )
            collator = PackingCollator(tokenizer.pad_token_id, self.max_length)
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
                "settings": {k: v for k, v in self.options().items() if k != "lora"}
                | {"cache_dir": str(path.parent), "warmstart_bf16": bf16},
                "task": task.warmstart_fingerprint(),
                "parameters": model.num_parameters(),
                "train_loss": result.training_loss,
                "examples": len(features),
                "seconds": round(time.time() - started, 1),
                # provenance: the same settings build other weights on another CPU (bf16 rounding, kernel splits)
                "machine": machine(),
                "git_commit": git_commit(),
                "versions": {name: versions().get(name) for name in ("torch", "transformers")},
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
