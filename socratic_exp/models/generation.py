"""Generation with a student (or a teacher loaded like one): the text a model sees for a prompt or a context,
batched generation that leaves training's random state and the model's train/eval mode as they were, and decoding
in a narrower dtype than training's (``decode_in``)."""

from __future__ import annotations

import contextlib
import math
import types
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from socratic_exp.core.distributed import full_parameters, world_size
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
    top_p: float = 1.0,
    num_return_sequences: int = 1,
    progress: str | None = None,
    seed: int | None = None,
    instruction: str = "",
) -> list[str]:
    """Batched generation; returns ``len(prompts) * num_return_sequences`` completions (prompt-major order).

    With ``seed``, sampling draws from its own seeded generator state and leaves the caller's (training's)
    random state untouched, so evaluations are comparable across runs and do not perturb training. With
    ``progress`` (a name), the main process reports the questions done as the tokens come
    (``console.WorkProgress``): a batch of a real model can take minutes.
    """
    if student.engine is not None:  # the run's vLLM engine (models/vllm_engine.py)
        return student.engine.generate(
            student, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size, sample=sample,
            temperature=temperature, top_p=top_p, num_return_sequences=num_return_sequences, progress=progress,
            seed=seed, instruction=instruction,
        )  # fmt: skip
    import torch

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
    counter = TokenProgress(progress, len(prompts), batch_size, max_new_tokens) if progress else None
    try:
        with full_parameters(model), torch.random.fork_rng(devices=devices, enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            for start in range(0, len(prompts), batch_size):
                texts = [as_model_input(student, p, instruction) for p in prompts[start : start + batch_size]]
                batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
                with no_grad():
                    generated = model.generate(
                        **batch,
                        max_new_tokens=max_new_tokens,
                        do_sample=sample,
                        temperature=temperature if sample else None,
                        top_p=top_p if sample and top_p < 1.0 else None,
                        top_k=None,
                        num_return_sequences=num_return_sequences,
                        pad_token_id=tokenizer.pad_token_id,
                        synced_gpus=synced,
                        stopping_criteria=counter.batch(start, len(texts)) if counter else None,
                    )
                new_tokens = generated[:, batch["input_ids"].shape[1] :]
                outputs += tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
                if counter:
                    counter.batch_done()
    finally:
        if counter:
            counter.close()
        model.train(was_training)
    return outputs


class TokenProgress:
    """The questions a ``generate`` call has done, counted as its tokens come: a stopping criterion that never stops,
    called by ``model.generate`` at every token, advances a ``WorkProgress`` by the batch's share of its token budget
    (a batch that ends early jumps to its end). Only the main process reports (each process answers its share)."""

    def __init__(self, name: str, questions: int, batch_size: int, max_new_tokens: int):
        from socratic_exp.core.console import WorkProgress
        from socratic_exp.core.distributed import is_main

        self.work = WorkProgress(name, questions, "questions") if is_main() else None
        self.batches = math.ceil(questions / batch_size) if questions else 0
        self.batch_size, self.max_new_tokens = batch_size, max_new_tokens
        self.start = self.size = self.tokens = 0

    def batch(self, start: int, size: int) -> list[Any]:
        from transformers import StoppingCriteriaList

        self.start, self.size, self.tokens = start, size, 0
        return StoppingCriteriaList([self])

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        self.tokens += 1
        if self.work is not None:
            detail = f"{self._batch_name()}, token {self.tokens}/{self.max_new_tokens}"
            self.work.update(self.start + self.size * min(1.0, self.tokens / self.max_new_tokens), detail)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def batch_done(self) -> None:
        if self.work is not None:
            self.work.update(self.start + self.size, f"{self._batch_name()} done")

    def _batch_name(self) -> str:
        return f"batch {self.start // self.batch_size + 1}/{self.batches}"

    def close(self) -> None:
        if self.work is not None:
            self.work.close()


DECODE_DTYPE = "_socratic_decode_dtype"  # the attribute ``decode_in`` marks a model with (its dtype's name)


def decode_in(model: Any, dtype: str) -> None:
    """Every ``model.generate`` call (the evaluations', TRL's rollouts', the rollouts' own) decodes with the weights
    cast to ``dtype``; training keeps its weights as they are. On a CPU, decoding reads every weight once per token
    step, so bfloat16 halves what a step reads; the cast costs one pass over the weights per call. Copies of the
    model (``copy.deepcopy``) decode the same way: the method rebinds to the copy."""
    generate = type(model).generate

    def generate_in_dtype(self: Any, *args: Any, **kwargs: Any) -> Any:
        with weights_in(self, dtype):
            return generate(self, *args, **kwargs)

    model.generate = types.MethodType(generate_in_dtype, model)
    setattr(model, DECODE_DTYPE, dtype)


def decoding_dtype(student: Student) -> str:
    """The dtype the student's answers are decoded in: its vLLM engine's, or its model's (``decode_in``'s cast)."""
    if student.engine is not None:
        return student.engine.dtype
    return getattr(student.model, DECODE_DTYPE, None) or str(student.model.dtype).removeprefix("torch.")


@contextlib.contextmanager
def weights_in(model: Any, dtype: str) -> Iterator[None]:
    """The model's floating-point parameters cast to ``dtype`` within the block; the originals are set aside and put
    back after it, not rounded (the cast copies are made outside inference mode: they stay ordinary tensors)."""
    import torch

    target = getattr(torch, dtype)
    kept = []
    with torch.inference_mode(False), torch.no_grad():
        for parameter in model.parameters():
            if parameter.is_floating_point() and parameter.dtype != target:
                kept.append((parameter, parameter.data))
                parameter.data = parameter.data.to(target)
    try:
        yield
    finally:
        for parameter, data in kept:
            parameter.data = data
