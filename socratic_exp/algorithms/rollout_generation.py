"""Transformers generation for the rollouts, with what TRL's own call throws away: the KV cache, so that a rollout's
next turn continues from it instead of re-reading its context, and the sampled tokens' log-probabilities, so that
REINFORCE++'s KL needs no second pass of the policy over the batch.

``Continuation`` runs ``model.generate`` the way TRL's ``_generate_single_turn`` does (its generation config, its
unwrapping for generation, no gradients) and keeps the cache between calls. A later call takes, for each row it
continues, the tokens the row adds (the rest of its attempt that the cache does not hold yet, then the teacher's
turn); the cached slots a row does not use (padding, an end-of-sequence token the plain context drops) are masked
out. Positions come from the attention mask, so each token sits where a fresh prefill of the whole context would put
it: the same tokens and, up to float rounding of a different computation order, the same distributions.

Imported by the ``trainer.py`` modules only: it imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

# Generation settings under which the sampled tokens' processed scores are TRL's policy scores (logits / temperature):
# no truncation or penalty between the two
NEUTRAL_SAMPLING = {"top_p": (None, 1.0), "top_k": (None, 0), "min_p": (None,), "repetition_penalty": (None, 1.0)}


def logps_match_policy(trainer: Any) -> bool:
    """Whether the log-probabilities recorded as transformers samples are the policy's that TRL computes for the loss
    (log-softmax of logits / temperature): transformers generation (not vLLM, whose numerics differ), no truncation or
    penalty of the distribution, no extra generation settings."""
    kwargs = getattr(trainer, "generation_kwargs", None)
    if trainer.use_vllm or trainer.use_transformers_continuous_batching or not kwargs:
        return False
    if trainer.args.generation_kwargs:
        return False
    return all(kwargs.get(key) in neutral for key, neutral in NEUTRAL_SAMPLING.items())


def records_policy_logps(trainer: Any) -> bool:
    """Whether this package's generation (``Continuation``) applies and the log-probabilities it records are the
    policy's: transformers generation, neutral sampling, and float32 weights that decode as they are (in bfloat16 the
    cached decoding and the loss's full pass round differently; ``model.decode_dtype`` decodes in another dtype)."""
    from socratic_exp.models.generation import DECODE_DTYPE

    model = trainer.accelerator.unwrap_model(trainer.model)
    float32 = model.dtype == torch.float32 and getattr(model, DECODE_DTYPE, None) is None
    return can_continue(trainer) and logps_match_policy(trainer) and float32


def can_continue(trainer: Any) -> bool:
    """Whether ``Continuation`` applies: transformers generation of a whole model on each process (not vLLM, not
    continuous batching, not a model sharded by FSDP or ZeRO-3, whose generation TRL wraps in collectives)."""
    if trainer.use_vllm or trainer.use_transformers_continuous_batching:
        return False
    return not (trainer.is_fsdp_enabled or getattr(trainer.accelerator.state, "deepspeed_plugin", None))


class SampledLogps:
    """The log-probability of each token ``generate`` picks, under the scores it picked from (after temperature):
    a logits processor keeps the step's scores and a stopping criterion, called once the token is chosen, reads the
    chosen token's log-softmax. Never stops anything."""

    def __init__(self) -> None:
        self.steps: list[torch.Tensor] = []
        self._scores: torch.Tensor | None = None

    def keep_scores(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._scores = scores
        return scores

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        chosen = input_ids[:, -1:]
        picked = self._scores.gather(1, chosen).squeeze(1) - self._scores.logsumexp(-1)
        self.steps.append(picked.float())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def rows(self, lengths: Sequence[int]) -> list[list[float]]:
        """Each row's first ``lengths[i]`` log-probabilities (its completion's tokens)."""
        table = torch.stack(self.steps, 1).tolist() if self.steps else [[] for _ in lengths]
        return [row[:length] for row, length in zip(table, lengths, strict=True)]


def generate_recording(trainer: Any, prompt_ids: list[list[int]]) -> tuple[list[list[int]], list[list[float]]]:
    """TRL's transformers generation of ``prompt_ids`` with each sampled token's log-probability recorded; the
    completions as TRL cuts them (up to and including the first end-of-sequence token)."""
    continuation = Continuation(trainer, keep_cache=False, record_logps=True)
    completions = continuation.start(prompt_ids)
    return completions, continuation.last_logps


class Continuation:
    """A batch of contexts generated turn by turn, the KV cache kept between the turns (see the module docstring).

    ``start(prompt_ids)`` generates the first turn of every row; ``extend(rows, added)`` generates the next turn of
    the rows listed (indices into the previous call's rows), each continuing its own last context with the tokens
    in ``added``. With ``record_logps``, ``last_logps`` holds the sampled tokens' log-probabilities of the last call
    (a log-sum-exp over the vocabulary at every token: only where something reads them)."""

    def __init__(self, trainer: Any, *, keep_cache: bool = True, record_logps: bool = False):
        self.trainer = trainer
        self.keep_cache = keep_cache
        self.record_logps = record_logps
        self.cache: Any = None
        self.ids: torch.Tensor | None = None  # the last call's sequences, cached part first
        self.mask: torch.Tensor | None = None  # which of their slots each row's context uses
        self.pending: list[list[int]] = []  # per row: its tokens after the cached part (not yet in the cache)
        self.last_logps: list[list[float]] = []

    def start(self, prompt_ids: Sequence[Sequence[int]]) -> list[list[int]]:
        width = max(map(len, prompt_ids))
        pad = self._pad_id()
        ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompt_ids])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids])
        return self._generate(ids, mask, None)

    def extend(self, rows: Sequence[int], added: Sequence[Sequence[int]]) -> list[list[int]]:
        """The next turn of ``rows``; ``added[j]`` (at least one token) follows row ``rows[j]``'s kept completion."""
        index = torch.tensor(list(rows), dtype=torch.long)
        cached = self.cache.get_seq_length()
        self.cache.batch_select_indices(index.to(self._device()))
        new = [self.pending[r] + list(a) for r, a in zip(rows, added, strict=True)]
        width = max(map(len, new))
        pad = self._pad_id()
        tail_ids = torch.tensor([[pad] * (width - len(n)) + n for n in new])
        tail_mask = torch.tensor([[0] * (width - len(n)) + [1] * len(n) for n in new])
        ids = torch.cat([self.ids[index, :cached], tail_ids], 1)
        mask = torch.cat([self.mask[index, :cached], tail_mask], 1)
        return self._generate(ids, mask, self.cache)

    def _generate(self, ids: torch.Tensor, mask: torch.Tensor, cache: Any) -> list[list[int]]:
        from transformers import DynamicCache, LogitsProcessorList, StoppingCriteriaList
        from trl.models import unwrap_model_for_generation

        trainer = self.trainer
        device = self._device()
        recorder = SampledLogps() if self.record_logps else None
        with (
            unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                generation_kwargs=trainer.generation_kwargs,
                gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
            ) as model,
            torch.no_grad(),
        ):
            if cache is None and self.keep_cache:  # the model's layer kinds (sliding windows, ...), as generate's own
                cache = DynamicCache(config=model.config)
            sequences = model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                generation_config=trainer.generation_config,
                logits_processor=LogitsProcessorList([recorder.keep_scores] if recorder else []),
                stopping_criteria=StoppingCriteriaList([recorder] if recorder else []),
                past_key_values=cache,
            )
        start = ids.size(1)
        completions = [_until_eos(row.tolist(), trainer.eos_token_ids) for row in sequences[:, start:].cpu()]
        self.last_logps = recorder.rows([len(c) for c in completions]) if recorder else []
        if self.keep_cache:
            self.cache = cache
            held = cache.get_seq_length() - start  # the generated tokens the cache holds (all but the last)
            self.ids = sequences.cpu()
            used = torch.tensor([[1] * min(len(c), held) + [0] * (held - min(len(c), held)) for c in completions])
            self.mask = torch.cat([mask, used.reshape(len(completions), held)], 1)
            self.pending = [c[held:] for c in completions]
        return completions

    def drop_last_tokens(self, row: int, count: int) -> None:
        """Row ``row``'s context goes on without the last ``count`` tokens of its completion (a plain context drops
        an end-of-sequence token before the teacher's turn): their cached slots are masked out."""
        if count <= 0:
            return
        pending = self.pending[row]
        from_pending = min(count, len(pending))
        self.pending[row] = pending[: len(pending) - from_pending]
        rest = count - from_pending
        if rest:
            used = self.mask[row].nonzero().flatten()
            self.mask[row, used[-rest:]] = 0

    def _device(self) -> Any:
        return self.trainer.accelerator.device

    def _pad_id(self) -> int:
        return self.trainer._tokenizer.pad_token_id


def _until_eos(tokens: list[int], eos_ids: Sequence[int]) -> list[int]:
    """The completion up to and including its first end-of-sequence token (TRL's cut)."""
    for position, token in enumerate(tokens):
        if token in eos_ids:
            return tokens[: position + 1]
    return tokens
