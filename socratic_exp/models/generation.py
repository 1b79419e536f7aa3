"""Generation with a student (or a teacher loaded like one): the text a model sees for a prompt or a context, and
batched generation that leaves training's random state and the model's train/eval mode as they were."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from socratic_exp.distributed import full_parameters, world_size
from socratic_exp.models.base import is_sharded
from socratic_exp.tasks.base import render_prompt

if TYPE_CHECKING:
    from socratic_exp.models.base import Student
    from socratic_exp.teachers.base import Context


def as_model_input(student: Student, prompt: Context, instruction: str = "") -> str:
    """The text the model sees. A row's prompt goes through ``render_prompt`` (the task's instruction as the system
    turn of a chat model, or as a preamble of a plain prompt); a context already built (chat messages, or the plain
    text of an interaction) is taken as it is."""
    rendered = render_prompt(prompt, instruction, student.chat) if isinstance(prompt, str) else prompt
    if isinstance(rendered, str):
        return rendered
    return student.tokenizer.apply_chat_template(
        rendered, add_generation_prompt=True, tokenize=False, **student.chat_template_kwargs
    )


def generate(
    student: Student,
    prompts: Sequence[Context],
    *,
    max_new_tokens: int,
    batch_size: int,
    sample: bool = False,
    temperature: float = 1.0,
    num_return_sequences: int = 1,
    progress: str | None = None,
    seed: int | None = None,
    instruction: str = "",
) -> list[str]:
    """Batched generation; returns ``len(prompts) * num_return_sequences`` completions (prompt-major order).

    With ``seed``, sampling draws from its own seeded generator state and leaves the caller's (training's)
    random state untouched, so evaluations are comparable across runs and do not perturb training.
    """
    import sys

    import torch
    from tqdm.auto import tqdm

    model, tokenizer = student.model, student.tokenizer
    was_training = model.training
    model.eval()
    outputs: list[str] = []
    devices = [model.device] if model.device.type == "cuda" else []
    # FSDP2 gathers each layer's shards in its forward, a collective: the processes step together until the last
    # one is done (transformers' synced_gpus, which it switches on for ZeRO-3 and its own FSDP only)
    sharded = is_sharded(model)
    synced = sharded and world_size() > 1
    # FSDP2 writes the gathered weights into buffers that inference mode would mark read-only for later steps
    no_grad = torch.no_grad if sharded else torch.inference_mode
    try:
        with full_parameters(model), torch.random.fork_rng(devices=devices, enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            quiet = progress is None or not sys.stderr.isatty()  # transient bars: terminals only, not log files
            for start in tqdm(range(0, len(prompts), batch_size), desc=progress, disable=quiet, leave=False):
                texts = [as_model_input(student, p, instruction) for p in prompts[start : start + batch_size]]
                batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
                with no_grad():
                    generated = model.generate(
                        **batch,
                        max_new_tokens=max_new_tokens,
                        do_sample=sample,
                        temperature=temperature if sample else None,
                        top_p=None,
                        top_k=None,
                        num_return_sequences=num_return_sequences,
                        pad_token_id=tokenizer.pad_token_id,
                        synced_gpus=synced,
                    )
                new_tokens = generated[:, batch["input_ids"].shape[1] :]
                outputs += tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
    finally:
        model.train(was_training)
    return outputs
