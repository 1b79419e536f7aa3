"""What the algorithms do with LoRA adapters (``model.lora.r > 0``), in one place. Imports torch and peft: only the
trainers and phases that meet a PEFT model import it.

TRL's trainers wrap the student with ``peft.get_peft_model`` (``peft_config=``); the trained adapter is named
``default``. Wherever the full-fine-tuning code makes a second copy of the weights, a LoRA run uses the one set of base
weights it already has:

- **the initial policy** (GRPO's KL reference, SocraticPO's REINFORCE++ KL, VPD's fixed prior): the base model with the
  adapters disabled (``base_view``): the adapters start at zero (``lora_B = 0``), so that is the student at step 0;
- **a frozen snapshot of the student as it is now** (``distiller=kl``'s teacher, the DPO phases' reference): a second
  adapter holding a copy of ``default`` (``adapter_copy``), deleted when the phase ends;
- **a teacher of its own** (SDPO / VPD ``teacher_weights=copy``): a second adapter, ``teacher``, started as a copy of
  ``default`` (the initial student) and moved toward the student after each step (``AdapterEMACallback``: the EMA
  runs on the adapter matrices A and B, as TRL's own PEFT EMA teacher does, not on their product).

An ``AdapterView`` is the PEFT model seen with one adapter active (or none): a module that code taking a model can
score and generate with, whose ``parameters()`` are that adapter's only, so an optimizer, an EMA or ``requires_grad_``
on "the teacher's parameters" touches exactly them and never the shared base weights.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import is_peft_model
from transformers import TrainerCallback

STUDENT_ADAPTER = "default"  # peft's name for the adapter get_peft_model creates (the one TRL trains)
TEACHER_ADAPTER = "teacher"  # SDPO / VPD teacher_weights=copy (the name TRL's own SDPO uses)
SNAPSHOT_ADAPTER = "snapshot"  # a phase's frozen copy of the student (distiller=kl's teacher)
BASE_PREFIX = "base_model.model."  # what PeftModel puts in front of the wrapped model's parameter names


def is_lora(model: Any) -> bool:
    """Whether ``model`` is a PEFT model (or a view of one)."""
    return isinstance(model, AdapterView) or is_peft_model(model)


@contextlib.contextmanager
def adapter_scope(model: Any, adapter: str | None) -> Iterator[None]:
    """Forward passes inside use ``adapter`` (None: no adapter, the base model). Every ``requires_grad`` flag is kept:
    peft's ``set_adapter`` makes the adapter it activates trainable and the others frozen, which would unfreeze a
    frozen snapshot and freeze the student's adapter mid-step."""
    if adapter is None:
        with model.disable_adapter():
            yield
        return
    previous = model.active_adapter
    if previous == adapter:
        yield
        return
    flags = [(p, p.requires_grad) for p in model.parameters()]
    try:
        model.set_adapter(adapter)
        _restore_flags(flags)
        yield
    finally:
        model.set_adapter(previous)
        _restore_flags(flags)


def _restore_flags(flags: list[tuple[Any, bool]]) -> None:
    for parameter, flag in flags:
        parameter.requires_grad_(flag)


class AdapterView(torch.nn.Module):
    """A PEFT model seen with one adapter active (``adapter=None``: none, i.e. the base weights), as a model of its
    own. It holds no weights: the PEFT model is not registered as a submodule, so ``parameters()`` are the adapter's
    (none for the base view), and ``train(mode)`` switches the shared model's mode (training or inference) for the
    caller's passes."""

    def __init__(self, peft_model: Any, adapter: str | None):
        super().__init__()
        self.__dict__["peft_model"] = peft_model  # not a submodule: its parameters are not the view's
        self.adapter = adapter

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with adapter_scope(self.peft_model, self.adapter):
            return self.peft_model(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        with adapter_scope(self.peft_model, self.adapter):
            return self.peft_model.generate(*args, **kwargs)

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, torch.nn.Parameter]]:
        if self.adapter is None:
            return iter(())
        marker = f".{self.adapter}."
        return ((prefix + name, p) for name, p in self.peft_model.named_parameters() if marker in name)

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]:
        return (parameter for _, parameter in self.named_parameters())

    def train(self, mode: bool = True) -> AdapterView:
        self.training = mode
        self.peft_model.train(mode)
        return self

    @property
    def device(self) -> torch.device:
        return self.peft_model.device

    @property
    def dtype(self) -> torch.dtype:
        return self.peft_model.dtype

    @property
    def config(self) -> Any:
        return self.peft_model.config

    @property
    def generation_config(self) -> Any:
        return self.peft_model.generation_config


def base_view(model: Any) -> AdapterView:
    """The initial policy of a LoRA run: the base weights, adapters disabled (no copy)."""
    return AdapterView(model, None)


def adapter_copy(model: Any, name: str, source: str = STUDENT_ADAPTER, trainable: bool = False) -> AdapterView:
    """A new adapter ``name`` holding a copy of adapter ``source`` (replacing an earlier ``name``), frozen unless
    ``trainable``; the student's adapter stays the active, trainable one."""
    if name in model.peft_config:
        model.delete_adapter(name)
    flags = [(p, p.requires_grad) for p in model.parameters()]
    model.add_adapter(name, model.peft_config[source])
    _restore_flags(flags)
    view = AdapterView(model, name)
    sources = dict(AdapterView(model, source).named_parameters())
    with torch.no_grad():
        for target_name, parameter in view.named_parameters():
            parameter.copy_(sources[target_name.replace(f".{name}.", f".{source}.")])
            parameter.requires_grad_(trainable)
    return view


def drop_adapter(model: Any, name: str) -> None:
    """Delete adapter ``name`` (a phase's snapshot) if present; the student's adapter stays active and trainable."""
    if name in model.peft_config:
        flags = [(p, p.requires_grad) for p in model.parameters()]
        model.delete_adapter(name)
        _restore_flags(flags)


class AdapterEMACallback(TrainerCallback):
    """After each optimizer step the teacher adapter moves ``rate`` of the way to the student's adapter (the LoRA form
    of SDPO's EMA teacher copy)."""

    def __init__(self, teacher: AdapterView, rate: float):
        self.teacher = teacher
        self.rate = rate

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        ema_update(self.teacher, self.rate)


@torch.no_grad()
def ema_update(teacher: AdapterView, rate: float, source: str = STUDENT_ADAPTER) -> None:
    """teacher <- (1 - rate) * teacher + rate * student, matrix by matrix."""
    student = dict(AdapterView(teacher.peft_model, source).named_parameters())
    for name, parameter in teacher.named_parameters():
        parameter.mul_(1.0 - rate).add_(student[name.replace(f".{teacher.adapter}.", f".{source}.")], alpha=rate)


def lora_weights(model: Any) -> dict[str, torch.Tensor]:
    """The student adapter's weights on the CPU, by the wrapped model's parameter names (a PEFT model and the model
    it wraps give the same names); empty before the adapters exist."""
    marker = f".{STUDENT_ADAPTER}."
    return {
        name.removeprefix(BASE_PREFIX): p.detach().to("cpu", copy=True)
        for name, p in model.named_parameters()
        if "lora_" in name and marker in name
    }


@torch.no_grad()
def load_lora_weights(model: Any, weights: dict[str, torch.Tensor]) -> None:
    """Put ``lora_weights`` back; an adapter matrix they lack (they were taken before the adapters existed) is reset
    to the start, ``lora_B = 0``, where the adapter adds nothing to the base weights."""
    marker = f".{STUDENT_ADAPTER}."
    for name, parameter in model.named_parameters():
        if "lora_" not in name or marker not in name:
            continue
        saved = weights.get(name.removeprefix(BASE_PREFIX))
        if saved is not None:
            parameter.copy_(saved)
        elif "lora_B" in name:
            parameter.zero_()


def save_merged(model: Any, tokenizer: Any, folder: Path) -> None:
    """The student with its adapter merged into the base weights, saved as a plain transformers model (the end of a
    run: the merge happens in place and removes every adapter)."""
    merged = model.merge_and_unload()
    merged.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
