"""A worker for ``tests/test_vllm.py`` under ``torchrun --nproc_per_node 1|2``: one GRPO step whose rollouts come from
the engine TRL colocates on each process, and what the optimizer steps with.

    torchrun --nproc_per_node <1|2> tests/distributed/same_update_vllm.py <out folder> <override> ...

The global batch is fixed: global row g is the training split's row g // 2 (groups of 2 completions), process i takes
rows ``[i * n, (i + 1) * n)`` as TRL's sampler would hand them. vLLM samples each row with a seed of its own, the row's
global index (a ``SamplingParams`` per prompt in place of TRL's one), so that the same row draws the same completion
whichever process and engine generate it. The reward is the completion's share of digits: it differs within almost
every group of a random model's completions, so the step is a real one whatever the task's verifier would say of
them. Written to ``<out>/rank<i>.pt``: per global row its completion, vLLM's sampling log-probabilities and its
advantage; process 0 adds the gradient after DDP's all-reduce.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
from same_update_policy import Record  # the all-reduced gradient, as the CPU tier's same-update worker records it

from socratic_exp.runtime.assembly import trainer_from

GLOBAL_ROWS = 8


def digit_share(completions: list[Any], **_: Any) -> list[float]:
    """The share of a completion's characters that are digits (chat completions: the assistant turn's content)."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [sum(ch.isdigit() for ch in text) / max(len(text), 1) for text in texts]


def main(out: str, *overrides: str) -> None:
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    local = GLOBAL_ROWS // processes
    trainer = trainer_from(*overrides, "algorithm.max_steps=1", f"algorithm.batch_size={local}",
                           "algorithm.max_grad_norm=1e9", "+algorithm.trl_args.use_cpu=true")  # fmt: skip
    rank = trainer.accelerator.process_index
    offset = rank * local
    trainer.reward_funcs = [digit_share]
    trainer.reward_func_names = ["digit_share"]
    trainer.reward_processing_classes = [None]
    trainer.reward_weights = torch.ones(1)

    llm = trainer.vllm_generation.llm
    engine_generate = llm.generate

    def seeded(prompts: list[Any], sampling_params: Any, **kwargs: Any) -> Any:
        per_row = []
        for j in range(len(prompts)):
            params = sampling_params.clone()
            params.seed = offset + j
            per_row.append(params)
        return engine_generate(prompts, sampling_params=per_row, **kwargs)

    llm.generate = seeded
    rows = [dict(trainer.train_dataset[g // 2]) for g in range(GLOBAL_ROWS)]
    result: dict[str, Any] = {"rows": {}}
    generate_and_score = trainer._generate_and_score_completions

    def fixed_batch(inputs: list[dict[str, Any]]) -> dict[str, Any]:
        assert len(inputs) == local
        output = generate_and_score(rows[offset : offset + local])
        mask = output["completion_mask"].bool()
        sampling = output.get("sampling_per_token_logps")
        for i in range(local):
            result["rows"][offset + i] = {
                "completion": output["completion_ids"][i][mask[i]].tolist(),
                "sampling_logps": sampling[i][mask[i]].tolist() if sampling is not None else None,
                "advantage": float(output["advantages"][i]),
            }
        return output

    trainer._generate_and_score_completions = fixed_batch
    trainer.add_callback(Record(trainer, result))
    trainer.train()
    Path(out).mkdir(parents=True, exist_ok=True)
    torch.save(result, Path(out) / f"rank{rank}.pt")


if __name__ == "__main__":
    main(*sys.argv[1:])
