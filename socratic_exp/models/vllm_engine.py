"""Held-out evaluation through the run's vLLM engine (``algorithm.use_vllm`` in colocate mode).

TRL starts one ``vllm.LLM`` per training process for the rollouts; ``VLLMEngine`` lends it to ``generate`` so that
the held-out split is answered by vLLM too, on the weights trained so far (TRL's ``sync_weights`` before every
evaluation: TRL itself syncs only before its next rollout). Prompts are rendered and tokenized exactly as the
transformers path does (``as_model_input``, no special tokens added), greedy is temperature 0, and sampled passes
draw from a per-request seed, so an evaluation leaves training's random state alone. Each process answers its own
share of the questions with its own engine, as with transformers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from socratic_exp.models.base import Student
    from socratic_exp.teachers.base import Context


class VLLMEngine:
    """``trl``'s ``VLLMGeneration`` of a colocated trainer, as a generator of held-out answers."""

    def __init__(self, generation: Any):
        self.generation = generation

    @classmethod
    def of(cls, trainer: Any) -> VLLMEngine | None:
        """The engine of a trainer that generates with a colocated vLLM, else None (server mode's engine holds
        another process's weights and serves the rollouts only)."""
        generation = getattr(trainer, "vllm_generation", None)
        if not getattr(trainer, "use_vllm", False) or generation is None or generation.mode != "colocate":
            return None
        return cls(generation)

    @property
    def dtype(self) -> str:
        """The dtype the engine computes in (vLLM serves a float32 model in bf16 where the hardware has it)."""
        return str(self.generation.llm.llm_engine.model_config.dtype).removeprefix("torch.")

    def generate(
        self,
        student: Student,
        prompts: Sequence[Context],
        *,
        max_new_tokens: int,
        batch_size: int,
        sample: bool,
        temperature: float,
        top_p: float,
        num_return_sequences: int,
        progress: str | None,
        seed: int | None,
        instruction: str,
    ) -> list[str]:
        """``models.generation.generate``'s contract: ``len(prompts) * num_return_sequences`` completions."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        from socratic_exp.core.console import WorkProgress
        from socratic_exp.core.distributed import is_main
        from socratic_exp.models.generation import as_model_input

        self.generation.sync_weights()  # every process at the same point: a collective under ZeRO-3
        texts = [as_model_input(student, p, instruction) for p in prompts]
        token_ids = student.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        params = SamplingParams(
            n=num_return_sequences,
            max_tokens=max_new_tokens,
            temperature=temperature if sample else 0.0,
            top_p=top_p if sample else 1.0,
            seed=seed if sample else None,
            skip_special_tokens=True,
        )
        work = WorkProgress(progress, len(texts), "questions") if progress and is_main() else None
        outputs: list[str] = []
        try:
            for start in range(0, len(token_ids), batch_size):
                batch = [TokensPrompt(prompt_token_ids=ids) for ids in token_ids[start : start + batch_size]]
                results = self.generation.llm.generate(batch, params, use_tqdm=False)
                outputs += [choice.text for result in results for choice in result.outputs]
                if work is not None:
                    work.update(start + len(batch), f"batch {start // batch_size + 1} done")
        finally:
            if work is not None:
                work.close()
        return outputs
