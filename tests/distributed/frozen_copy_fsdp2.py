"""A worker for ``torchrun --nproc_per_node 2``: ``frozen_copy`` of a model sharded by FSDP2 (on CPU, gloo) is a
whole model with the weights it had, which stays put while the sharded source trains; and the evaluation's
``generate`` on the sharded model returns when one process's answers end before the other's (each forward is a
collective). Each process writes what it saw to ``<out>/rank<i>.json``.

    torchrun --nproc_per_node 2 tests/distributed/frozen_copy_fsdp2.py <out folder>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from transformers import LlamaConfig, LlamaForCausalLM
from trl.trainer.utils import add_fused_lm_head

from socratic_exp.models.base import Student, frozen_copy
from socratic_exp.models.char_tokenizer import build_char_tokenizer
from socratic_exp.models.generation import generate

PROMPTS = ["1+2=", "7*8", "9-", "Q: 3", "A:", "x", "(5"]  # different last characters: different first tokens


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)  # the same weights on both processes, as from_pretrained would load them
    tokenizer = build_char_tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, tie_word_embeddings=True)  # fmt: skip
    model = LlamaForCausalLM(config)
    # The end of an answer: the first greedy token of rank 0's prompt, which rank 1's prompt does not begin with,
    # so rank 0's answer ends after one token and rank 1's goes on
    first = {p: int(model(**tokenizer(p, return_tensors="pt", add_special_tokens=False)).logits[0, -1].argmax())
             for p in PROMPTS}  # fmt: skip
    mine = PROMPTS[0] if dist.get_rank() == 0 else next(p for p in PROMPTS if first[p] != first[PROMPTS[0]])
    model.generation_config.eos_token_id = first[PROMPTS[0]]
    add_fused_lm_head(model)  # what TRL's GRPOTrainer does to the student
    ids = torch.tensor([[11, 12, 13, 14, 15]])
    before = model(input_ids=ids).logits.detach()
    fused_before = model(input_ids=ids, labels=ids, fused_lm_head=True).log_probs.detach()
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    sharded = sum(isinstance(p, DTensor) for p in model.parameters())
    student = Student(model=model, tokenizer=tokenizer, path="")
    answer = generate(student, [mine], max_new_tokens=6, batch_size=1)[0]
    copy = frozen_copy(model)
    plain = copy(input_ids=ids).logits
    fused = copy(input_ids=ids, labels=ids, fused_lm_head=True).log_probs
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)  # the source trains on
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    moved = model(input_ids=ids).logits.detach()
    result = {
        "sharded_parameters": sharded,
        "answer_length": len(answer),
        "copy_dtensors": sum(isinstance(p, DTensor) for p in copy.parameters()),
        "copy_parameters": sum(p.numel() for p in copy.parameters()),
        "tied": copy.lm_head.weight is copy.model.embed_tokens.weight,
        "copy_equals_before": torch.equal(plain, before),
        "fused_equals_before": torch.allclose(fused, fused_before, atol=1e-6),
        "copy_after_step_unchanged": torch.equal(copy(input_ids=ids).logits, before),
        "source_moved": not torch.allclose(moved, before),
        "frozen": not any(p.requires_grad for p in copy.parameters()),
    }
    (out / f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
