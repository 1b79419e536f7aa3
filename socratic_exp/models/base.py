"""The model interface: a student (and its tokenizer) ready for a TRL trainer."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from socratic_exp.core import distributed
from socratic_exp.core.component import Component, setting
from socratic_exp.core.console import PROGRESS_LOG
from socratic_exp.core.secrets import scrub_training_args
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
    # the run's vLLM engine once the trainer has started one (``models.vllm_engine``): evaluations generate with it
    engine: Any = None


@dataclasses.dataclass(kw_only=True)
class ModelSpec(Component):
    """A model option. ``chat`` says whether prompts go through the tokenizer's chat template."""

    config_group: ClassVar[str] = "model"
    # what vLLM cannot load (a model built in code, with a tokenizer of its own) says so: use_vllm is refused
    vllm_unloadable: ClassVar[str] = ""

    chat: bool = setting(False, "prompts go through the tokenizer's chat template (system + user turns)")
    lora: LoRA = setting(
        default_factory=LoRA, help="LoRA adapters instead of full fine-tuning (r: 0 = full fine-tuning; see lora.py)"
    )

    def load(self, task: Task) -> Student:
        raise NotImplementedError


def frozen_copy(model: Any) -> Any:
    """A frozen copy of ``model`` with storage of its own. (``copy.deepcopy``, which TRL's
    ``create_reference_model`` uses, keeps sharing memory-mapped weights loaded from safetensors, so the "reference"
    would follow every update.) A model sharded across processes (FSDP2, DeepSpeed ZeRO-3) is copied from its
    gathered full parameters, a whole unsharded model on every process: a deep copy would copy this process's shard.
    Every process must call it at the same point then (the gathering is collective)."""
    import functools
    import types

    frozen = _gathered_copy(model) if is_sharded(model) else _private_copy(model)
    patched = vars(model).get("forward")
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


def _private_copy(model: Any) -> Any:
    import copy

    frozen = copy.deepcopy(model)
    for tensor in [*frozen.parameters(), *frozen.buffers()]:
        tensor.data = tensor.data.clone()
    return frozen


def is_sharded(model: Any) -> bool:
    """FSDP2 holds its parameters as DTensors (a shard each), ZeRO-3 as partitions tagged ``ds_id``."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) or hasattr(p, "ds_id") for p in model.parameters())


def _gathered_copy(model: Any) -> Any:
    """An unsharded transformers model of ``model``'s class and config, from its gathered full state dict."""
    import copy

    import torch
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import FSDPModule

    from socratic_exp.core.distributed import full_parameters

    if any(hasattr(p, "ds_id") for p in model.parameters()):
        with full_parameters(model):
            state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    else:  # FSDP2: every process receives the full tensors
        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    unwrapped = next(cls for cls in type(model).__mro__ if not issubclass(cls, FSDPModule))  # FSDP2's subclass
    with torch.device("meta"):
        frozen = unwrapped(copy.deepcopy(model.config))
    frozen.load_state_dict(state, assign=True, strict=False)
    persistent = set(state)
    for name, buffer in model.named_buffers():  # buffers are never sharded; the state dict lacks the non-persistent
        if name not in persistent:
            owner, _, leaf = name.rpartition(".")
            frozen.get_submodule(owner).register_buffer(leaf, buffer.detach().clone(), persistent=False)
    if getattr(model.config, "tie_word_embeddings", False):
        frozen.tie_weights()
    still_meta = [name for name, tensor in [*frozen.named_parameters(), *frozen.named_buffers()] if tensor.is_meta]
    if still_meta:
        raise RuntimeError(f"frozen_copy: no gathered value for {still_meta[:3]} of the sharded model")
    frozen.generation_config = copy.deepcopy(model.generation_config)
    return frozen


LARGE_MODEL_PARAMETERS = 50_000_000  # a load or checkpoint from this size on (200 MB in float32) is announced


def announce_load(student: Student, seconds: float) -> None:
    """A line once a large student has loaded: the console's first word after the start-up of a real model (the
    tiny model loads in a blink and says nothing)."""
    parameters = student.model.num_parameters()
    if parameters >= LARGE_MODEL_PARAMETERS:
        name = student.info.get("name", type(student.model).__name__)
        dtype = str(student.model.dtype).removeprefix("torch.")
        logging.getLogger(PROGRESS_LOG).info(
            "student %s loaded in %.0f s (%.1fM parameters, %s)", name, seconds, parameters / 1e6, dtype
        )


def save_final_model(trainer: Any, student: Student, lora: LoRA, folder: Path) -> None:
    """The final model: with LoRA and ``model.lora.merge_on_save`` the adapters merged into the weights (a plain
    transformers model), else what the trainer saves (the weights, or the adapters alone)."""
    if lora.enabled and lora.merge_on_save:
        from socratic_exp.models.adapters import save_merged

        if distributed.is_main():
            save_merged(student.model, student.tokenizer, folder)
    else:
        trainer.save_model(str(folder))
    scrub_training_args(trainer.args, folder)
