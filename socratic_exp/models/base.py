"""The model interface: a student (and its tokenizer) ready for a TRL trainer."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

from socratic_exp.component import Component, setting
from socratic_exp.models.lora import LoRA

if TYPE_CHECKING:
    from socratic_exp.tasks.base import Task


@dataclasses.dataclass(kw_only=True)
class Student:
    """A loaded model with its tokenizer; ``path`` is where it loads from (TRL reloads reference models from it)."""

    model: Any
    tokenizer: Any
    path: str
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    chat: bool = False
    chat_template_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(kw_only=True)
class ModelSpec(Component):
    """A model option. ``chat`` says whether prompts go through the tokenizer's chat template."""

    config_group: ClassVar[str] = "model"

    chat: bool = setting(False, "prompts go through the tokenizer's chat template (system + user turns)")
    lora: LoRA = setting(
        default_factory=LoRA, help="LoRA adapters instead of full fine-tuning (r: 0 = full fine-tuning; see lora.py)"
    )

    def load(self, task: Task) -> Student:
        raise NotImplementedError


def frozen_copy(model: Any) -> Any:
    """A frozen copy of ``model`` with storage of its own. (``copy.deepcopy``, which TRL's
    ``create_reference_model`` uses, keeps sharing memory-mapped weights loaded from safetensors, so the "reference"
    would follow every update.)"""
    import copy
    import functools
    import types

    frozen = copy.deepcopy(model)
    for tensor in [*frozen.parameters(), *frozen.buffers()]:
        tensor.data = tensor.data.clone()
    patched = vars(frozen).get("forward")
    if isinstance(patched, types.MethodType):
        # TRL's fused LM head (``add_fused_lm_head``) patches ``model.forward``: its fused path scores ``self`` (the
        # copy), but its plain path calls the *source's* original forward, captured in TRL's closure. The copy keeps
        # the fused path and sends plain calls to its own class forward (a method, so copies of copies rebind too).
        fused_path = patched.__func__

        @functools.wraps(type(frozen).forward)  # generation validates its kwargs against this signature
        def forward(self: Any, *args: Any, fused_lm_head: bool = False, **kwargs: Any) -> Any:
            if fused_lm_head:
                return fused_path(self, *args, fused_lm_head=True, **kwargs)
            return type(self).forward(self, *args, **kwargs)

        frozen.forward = types.MethodType(forward, frozen)
    return frozen.eval().requires_grad_(False)
