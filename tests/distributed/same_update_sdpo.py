"""A worker for ``torchrun --nproc_per_node 1|2``: SDPO's losses and statistics on one fixed batch of 8 rollouts (two
groups of 4), whole on one process or split by rows over two. Each process writes ``<out>/rank<i>.pt``: for every
case, the gradient of its loss as DDP leaves it (averaged over the processes), the per-row advantages of the
teacher-guided hybrids, and the statistics the trainer recorded.

    torchrun --nproc_per_node <1|2> tests/distributed/same_update_sdpo.py <out folder>

Every process builds the whole batch (rollouts, verdicts, teacher contexts, padded tensors) and keeps its rows, so
the one-process run and the two-process run see the same padded tensors. ``same_update_vpd.py`` reuses the pieces.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch

from socratic_exp.algorithms.sdpo.contexts import Rollout, build_contexts
from socratic_exp.runtime.assembly import trainer_from

GROUP = 4
# (prompt, answer, completion): the first group's completions are long, the second's short, so that the processes
# hold different numbers of tokens (a per-process token mean then differs from the batch's)
ROLLOUTS = [
    ("Q: 2*2-5*3=?\n", "-11", "2*2=4\n5*3=15\n4-15=-11\nA: -11\n"),
    ("Q: 2*2-5*3=?\n", "-11", "2*2=4\n5*3=15\n4-15=-12\nA: -12\n"),
    ("Q: 2*2-5*3=?\n", "-11", "2*2=4\n4-5=-1\n-1*3=-3\nA: -3\n"),
    ("Q: 2*2-5*3=?\n", "-11", "A: 11\n"),
    ("Q: 7+8*2=?\n", "23", "8*2=16\nA: 23\n"),
    ("Q: 7+8*2=?\n", "23", "A: 30\n"),
    ("Q: 7+8*2=?\n", "23", "7+8=15\nA: 30\n"),
    ("Q: 7+8*2=?\n", "23", "A: 23\n"),
]
ADVANTAGES = [0.75, -0.25, -0.25, -0.25, 0.5, -0.5, -0.5, 0.5]  # GRPO's without scaling, by hand: r - group mean
TENSORS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "teacher_input_ids",
           "teacher_attention_mask", "distill_mask", "correct", "advantages")  # fmt: skip


def build_trainer(*overrides: str) -> Any:
    """The algorithm's trainer on the shipped tiny student, on gloo CPU processes (``use_cpu``), outside the training
    loop; a generation batch of 8 completions in all (groups of 4), however many processes share it."""
    per_process = len(ROLLOUTS) // int(os.environ.get("WORLD_SIZE", "1"))
    trainer = trainer_from("debug=fast", "logger=none", "algorithm.num_generations=4",
                           f"algorithm.batch_size={per_process}", *overrides)  # fmt: skip
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which the worker skips
    trainer.model.train()
    return trainer


def whole_batch(trainer: Any) -> tuple[list[Any], dict[str, Any]]:
    """The 8 rollouts' teacher contexts and the batch as the trainer's loss reads it (left-padded prompts,
    right-padded completions, teacher prompt + completion), built the same way on every process."""
    from trl.trainer.utils import pad

    tokenizer = trainer.processing_class
    verdicts = [trainer.components.task.verify(c, a) for _, a, c in ROLLOUTS]
    rollouts = [Rollout(p, c, v.score, v.reason, v.extracted) for (p, _, c), v in zip(ROLLOUTS, verdicts, strict=True)]
    contexts = build_contexts(rollouts, GROUP, trainer.context_settings)
    prompts, _, _ = trainer._tokenize_prompts([p for p, _, _ in ROLLOUTS])
    completions = [tokenizer(c, add_special_tokens=False).input_ids for _, _, c in ROLLOUTS]
    ids = [torch.tensor(list(p)) for p in prompts]
    done = [torch.tensor(c) for c in completions]
    output = {
        "prompt_ids": pad(ids, padding_value=tokenizer.pad_token_id, padding_side="left"),
        "prompt_mask": pad([torch.ones_like(t) for t in ids], padding_value=0, padding_side="left"),
        "completion_ids": pad(done, padding_value=tokenizer.pad_token_id, padding_side="right"),
        "completion_mask": pad([torch.ones_like(t) for t in done], padding_value=0, padding_side="right"),
        "correct": torch.tensor([float(v.score >= trainer.sdpo.success_threshold) for v in verdicts]),
        "distill_mask": torch.tensor([float(c.usable) for c in contexts]),
        "advantages": torch.tensor(ADVANTAGES),
    }
    output["teacher_input_ids"], output["teacher_attention_mask"] = trainer._teacher_inputs(contexts, output)
    # TRL's dapo loss divides by the batch's completion tokens (gathered over processes), as GRPOTrainer passes it
    output["num_items_in_batch"] = output["completion_mask"].sum()
    return contexts, output


def rows_of(trainer: Any) -> slice:
    """This process's rows of the batch: consecutive shares, as TRL splits a generation batch."""
    share = len(ROLLOUTS) // trainer.accelerator.num_processes
    start = trainer.accelerator.process_index * share
    return slice(start, start + share)


def local_share(trainer: Any, output: dict[str, Any]) -> dict[str, Any]:
    rows = rows_of(trainer)
    return {k: (v[rows] if k in TENSORS else v) for k, v in output.items()}


def gradient(model: Any) -> torch.Tensor:
    """Every parameter's gradient, flattened (zeros where there is none)."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in model.parameters()])


def metrics_of(trainer: Any) -> dict[str, list[float]]:
    """The statistics the trainer recorded since the last call (then forgotten)."""
    recorded = {k: [float(x) for x in v] for k, v in trainer._metrics["train"].items() if k.startswith("self_")}
    trainer._metrics["train"].clear()
    return recorded


CASES: dict[str, dict[str, Any]] = {
    # TRL's SDPO aggregation: the mean per rollout, then over rollouts
    "sequence_mean": {"loss_aggregation": "sequence_mean", "hybrid": "none"},
    # the official code's: the mean over every distilled token of the batch (JSD on the full logits, VPD's default)
    "token_mean": {"loss_aggregation": "token_mean", "hybrid": "none", "distillation": "full_logits", "alpha": 0.5},
    # B.23: the distillation plus TRL's GRPO loss (dapo: the token mean over the batch)
    "joint": {"loss_aggregation": "token_mean", "hybrid": "joint", "distillation": "sampled_token", "alpha": 1.0},
    # TRL's GRPO loss on the teacher-guided per-token advantages
    "advantage_reshaping": {"hybrid": "advantage_reshaping"},
    "reweighting": {"hybrid": "reweighting"},
}


def main(out: Path) -> None:
    trainer = build_trainer("algorithm=sdpo", "algorithm.feedback=sibling+environment")
    model = trainer.accelerator.prepare_model(trainer.model)  # DDP on two processes: gradients averaged over them
    contexts, whole = whole_batch(trainer)
    batch = local_share(trainer, whole)
    results: dict[str, Any] = {}
    trainer._metrics["train"].clear()
    trainer._record_context_metrics(contexts[rows_of(trainer)], batch["correct"], "train")
    results["contexts"] = {"metrics": metrics_of(trainer)}
    for name, settings in CASES.items():
        for key, value in settings.items():
            setattr(trainer.sdpo, key, value)
        inputs = dict(batch)
        advantages = None
        if trainer.sdpo.hybrid in ("advantage_reshaping", "reweighting"):
            advantages = trainer._teacher_guided_advantages(inputs, "train")
            inputs["advantages"] = advantages
        trainer.model.zero_grad(set_to_none=True)
        loss = trainer.compute_loss(model, inputs)
        loss.backward()
        results[name] = {"gradient": gradient(trainer.model), "advantages": advantages, "metrics": metrics_of(trainer)}
    torch.save(results, out / f"rank{trainer.accelerator.process_index}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
