"""``model.lora``: LoRA adapters (``peft``) instead of full fine-tuning, for every algorithm.

The block is torch- and peft-free: composing a config imports neither. ``r: 0`` is full fine-tuning (the default of
every shipped model option: the papers fine-tune all weights, and the ``experiment=`` overlays' learning rates are
full-fine-tuning ones). With ``r > 0`` the run hands ``peft_config()`` to TRL's trainer (``peft_config=``), which wraps
the student with ``peft.get_peft_model``; what each algorithm then does with the adapters (reference model, teacher,
distillers) is in ``socratic_exp/models/adapters.py`` and docs/real-models.md (its LoRA section).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from socratic_exp.core.component import Component, setting
from socratic_exp.core.errors import UserError


@dataclasses.dataclass(kw_only=True)
class LoRA(Component):
    config_group: ClassVar[str] = "model.lora"

    r: int = setting(0, "LoRA rank (0: full fine-tuning, no adapters)", ge=0, le=4096)
    alpha: float | None = setting(None, "LoRA scaling numerator: updates scale by alpha / r (null: 2 x r)", gt=0.0)
    dropout: float = setting(0.0, "dropout on the adapters' input during training", ge=0.0, lt=1.0)
    target_modules: str | list[str] | None = setting(
        "all-linear",
        "modules that get adapters: all-linear (every linear layer but the LM head) | a list of module names | "
        "null: peft's per-architecture default (Qwen2/Llama: q_proj, v_proj)",
    )
    merge_on_save: bool = setting(
        True, "the final model (checkpoints/final) saved with the adapters merged into the weights (false: adapters)"
    )

    @property
    def enabled(self) -> bool:
        return self.r > 0

    def validate(self) -> None:
        self.check(
            "target_modules",
            self.target_modules is None or len(self.target_modules) > 0,
            "names no module",
            "use all-linear, a list such as [q_proj, v_proj], or null for peft's default",
        )

    def peft_config(self) -> Any:
        """The ``peft.LoraConfig`` that TRL's trainers take as ``peft_config`` (None for full fine-tuning)."""
        if not self.enabled:
            return None
        try:
            from peft import LoraConfig
        except ImportError:
            raise UserError(
                f"model.lora.r={self.r}: LoRA needs the peft package, which is not installed",
                "pip install -e . (peft is a dependency), or set model.lora.r=0 for full fine-tuning",
            ) from None
        targets = self.target_modules
        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha if self.alpha is not None else 2 * self.r,
            lora_dropout=self.dropout,
            target_modules=list(targets) if isinstance(targets, list | tuple) else targets,
            bias="none",
            task_type="CAUSAL_LM",
        )
