"""A worker for ``tests/test_vllm.py``: does the engine TRL colocates sample from the trained weights?

    python tests/vllm_workers/sync_check.py <out.json> <cache> <override> ...

Trains the composed config's trainer for its steps, then scores one fixed text (a prompt and a continuation) by the
log-probability of each of its tokens, twice: by vLLM (``prompt_logprobs``) and by the training model (log-softmax of
its logits). Written to ``out.json``: the mean absolute gap per token before training, after training while vLLM
still holds the weights of its last rollout (one update behind: TRL syncs before a rollout, not after a step), and
after ``sync_weights``; and how far training moved the model's own log-probabilities.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from socratic_exp.runtime.assembly import trainer_from

TEXT = "Question: What is 17 + 25?\nWork it out one operation per line.\n17+25=42\nA: 42"


def vllm_logprobs(trainer, ids: list[int]) -> torch.Tensor:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
    (result,) = trainer.vllm_generation.llm.generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)
    return torch.tensor(
        [entry[token].logprob for entry, token in zip(result.prompt_logprobs[1:], ids[1:], strict=True)]
    )


def model_logprobs(trainer, ids: list[int]) -> torch.Tensor:
    model = trainer.accelerator.unwrap_model(trainer.model)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
    return logits.log_softmax(-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]


def gap(trainer, ids: list[int]) -> float:
    return float((vllm_logprobs(trainer, ids) - model_logprobs(trainer, ids)).abs().mean())


def main(out: str, cache: str, *overrides: str) -> None:
    trainer = trainer_from(*overrides, run_dir=Path(cache) / "sync_check")
    ids = trainer.processing_class(TEXT, add_special_tokens=False)["input_ids"]
    before, initial = gap(trainer, ids), model_logprobs(trainer, ids)
    trainer.train()
    stale = gap(trainer, ids)
    trainer.vllm_generation.sync_weights()
    synced = gap(trainer, ids)
    moved = float((model_logprobs(trainer, ids) - initial).abs().mean())
    figures = {"tokens": len(ids) - 1, "before": before, "stale": stale, "synced": synced, "moved": moved,
               "steps": trainer.state.global_step}  # fmt: skip
    Path(out).write_text(json.dumps(figures))


if __name__ == "__main__":
    main(*sys.argv[1:])
