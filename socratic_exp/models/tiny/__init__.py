"""``model=tiny``: a small Qwen2 built in code with a character tokenizer, warm-started on the task's traces.

The students of the testbed's own settings ship with the package (``shipped.py``: the same weights on every machine,
no warm-start); any other settings are warm-started (``warmstart.py``) and cached under ``cache_dir/tiny-<key>``,
where the key hashes every setting that changes the weights, so a student is rebuilt only when one of them changes.
Builds are atomic (a temporary folder renamed into place) and locked, so parallel sweep jobs wait for one build
instead of racing. ``python -m socratic_exp.models.tiny build`` rebuilds a shipped student with its manifest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from socratic_exp.core.component import setting
from socratic_exp.core.errors import UserError
from socratic_exp.core.run_folder import default_cache_dir
from socratic_exp.models.base import ModelSpec, Student
from socratic_exp.models.char_tokenizer import load_char_tokenizer

if TYPE_CHECKING:
    from socratic_exp.tasks.base import Task

log = logging.getLogger(__name__)
WARMSTART_FORMAT = 5  # bump when the corpus or training recipe changes in a way the settings do not show


@dataclasses.dataclass(kw_only=True)
class TinyModel(ModelSpec):
    """A Qwen2 decoder with tied embeddings and a character vocabulary (~0.8M parameters by default)."""

    vllm_unloadable: ClassVar[str] = "is built in code with a character tokenizer, which vLLM cannot load"

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
    use_shipped: bool = setting(
        True,
        "load the student the package ships for these settings, where there is one (the same weights on every "
        "machine, no warm-start); false: warm-start and cache it on this machine as for any other settings",
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

        from socratic_exp.models.tiny.shipped import check_weights, find_shipped
        from socratic_exp.models.tiny.warmstart import warm_start_alone

        if not task.fits_tiny_model:  # before the warm-start, which would train it on text it cannot model
            raise UserError(
                f"model=tiny: its character tokenizer and {self.max_length}-character context are made for the "
                f"arithmetic testbed, not {type(task).__name__}",
                "use a Hub model for real benchmarks, e.g. model=qwen3_0_6b",
            )
        shipped = find_shipped(self, task) if self.use_shipped else None
        if shipped is not None:
            log.info("the shipped student %s: %s", shipped.name, shipped.path)
            check_weights(shipped)
            return self._load_from(shipped.path, shipped=shipped.name)
        path = self.cache_path(task)
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):
            if not (path / "warmstart.json").is_file():
                for stale in path.parent.glob(f".{path.name}-*"):  # of a build killed outright (we hold the lock)
                    shutil.rmtree(stale, ignore_errors=True)
                warm_start_alone(self, task, path)
            else:
                log.info("warm-start cache hit: %s", path)
        return self._load_from(path)

    def _load_from(self, path: Path, shipped: str | None = None) -> Student:
        from transformers import AutoModelForCausalLM

        # its name, which the run's summary and the scoreboard's evaluation lines record: the shipped student's
        # (tiny/default, tiny/evidence-seed3) or the warm-start cache's (tiny/tiny-<hash of the build settings>)
        named = {"name": f"tiny/{shipped or path.name}"} | ({"shipped": shipped} if shipped else {})
        info = json.loads((path / "warmstart.json").read_text()) | named
        model = AutoModelForCausalLM.from_pretrained(path)
        return Student(model=model, tokenizer=load_char_tokenizer(str(path)), path=str(path), info=info, chat=self.chat)

    def weight_settings(self) -> dict[str, Any]:
        """The settings that decide the warm-started weights (lora shapes the RL phase; where the cache lives and
        whether a shipped student is used do not change them)."""
        return {k: v for k, v in self.options().items() if k not in ("cache_dir", "lora", "use_shipped")}

    def build_config(self, task: Task) -> dict[str, Any]:
        """What a build reads: the weight settings (``warmstart_bf16`` as set, null included) and the task's corpus."""
        return {
            "format": WARMSTART_FORMAT,
            "model": self.weight_settings(),
            "task": {"target": type(task).__qualname__, **task.warmstart_fingerprint()},
        }

    def cache_path(self, task: Task) -> Path:
        settings = self.build_config(task)
        settings["model"]["warmstart_bf16"] = self.uses_bf16()  # null resolves per machine: a build of its own
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
