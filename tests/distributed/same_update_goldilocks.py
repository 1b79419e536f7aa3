"""A worker for ``torchrun --nproc_per_node 1|2``: ``sampler=goldilocks`` through three generation batches of 2
prompts x 4 completions (8 in all, however many processes share them). At each batch the sampler chooses the prompts,
then every process reports the rewards of its rows (fixed by hand, the rows split between the processes as TRL
splits them) to the sampler's feedback hook; a refit is due after every batch. Each process writes
``<out>/rank<i>.pt``: the prompts chosen, the selector's whole state (predictor weights and Adam state, replay
buffer, counters) after the last feedback, and its metrics.

    torchrun --nproc_per_node <1|2> tests/distributed/same_update_goldilocks.py <out folder>
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from same_update_sdpo import build_trainer

GENERATIONS = 4
# rewards per batch and prompt (y = sqrt(p (1 - p)): 0.4330127, 0.5 | 0, 0 | 0.5, 0.4330127)
REWARDS = [
    [[1, 0, 0, 0], [1, 1, 0, 0]],
    [[1, 1, 1, 1], [0, 0, 0, 0]],
    [[0, 1, 0, 1], [0, 0, 0, 1]],
]


def main(out: Path) -> None:
    trainer = build_trainer("algorithm=grpo", "sampler=goldilocks", "sampler.update_every=2", "sampler.update_steps=5",
                            "sampler.update_batch_size=4", "sampler.hidden_size=8")  # fmt: skip
    selector = trainer._get_train_sampler()  # the sampler's GoldilocksSelector, as the trainer's dataloader gets it
    sampler = selector.settings
    index = trainer.train_dataset["index"]
    processes, rank = trainer.accelerator.num_processes, trainer.accelerator.process_index
    share = len(REWARDS[0]) * GENERATIONS // processes
    mine = slice(rank * share, (rank + 1) * share)
    chosen = []
    for rewards in REWARDS:
        chunk = selector.next_batch()  # the generation batch's prompts (dataset positions)
        chosen.append(chunk)
        rows = [index[position] for position in chunk for _ in range(GENERATIONS)]
        flat = [float(r) for group in rewards for r in group]
        sampler.observe(rows[mine], flat[mine])  # what the reward function hands the sampler on each process
    state = selector.state_dict()  # waits for the last refit
    metrics = sampler.metrics()
    selector.close()
    torch.save({"chosen": chosen, "state": state, "metrics": metrics}, out / f"rank{rank}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
