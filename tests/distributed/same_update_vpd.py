"""A worker for ``torchrun --nproc_per_node 1|2``: VPD's E-step and M-step on the fixed batch of
``same_update_sdpo.py`` (8 rollouts, each with a feedback context; 3 successes, 5 failures, split 1/3 and 2/2 between
the two processes), whole on one process or split by rows over two. Each process writes ``<out>/rank<i>.pt``:

- ``e_step_sgd``: the E-step's update of the (shared) teacher weights with plain SGD at learning rate 1 and no
  clipping, i.e. minus the E-step's gradient, and its telemetry. SGD because Adam's first step moves each weight by
  about its learning rate whatever the gradient's scale, which would hide a wrong normalisation.
- ``e_step_adamw``: the weights after the trainer's own E-step (AdamW, clipping), which must be the same on every
  process, bit for bit.
- ``m_step``: the gradient of the M-step (VPD's defaults: JSD on the top-k logits with a tail, token mean), as DDP
  leaves it.

    torchrun --nproc_per_node <1|2> tests/distributed/same_update_vpd.py <out folder>
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from same_update_sdpo import build_trainer, gradient, local_share, metrics_of, whole_batch

from socratic_exp.algorithms.vpd.estep import RunningShift


def weights(model: Any) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def main(out: Path) -> None:
    trainer = build_trainer("algorithm=vpd", "algorithm.feedback=sibling+environment")
    model = trainer.accelerator.prepare_model(trainer.model)  # DDP on two processes, for the M-step
    _, whole = whole_batch(trainer)
    batch = local_share(trainer, whole)
    student = trainer.accelerator.unwrap_model(trainer.model)
    initial = {k: v.clone() for k, v in student.state_dict().items()}
    results: dict[str, Any] = {}
    trainer._metrics["train"].clear()

    adamw, clip = trainer.e_optimizer, trainer.sdpo.max_grad_norm
    trainer.e_optimizer = torch.optim.SGD(trainer.teacher_parameters, lr=1.0)
    trainer.sdpo.max_grad_norm = float("inf")
    before = weights(student)
    telemetry = trainer.e_step(batch)
    results["e_step_sgd"] = {"update": weights(student) - before, "telemetry": telemetry}

    student.load_state_dict(initial)
    trainer.e_optimizer, trainer.sdpo.max_grad_norm, trainer.shift = adamw, clip, RunningShift()
    telemetry = trainer.e_step(batch)
    results["e_step_adamw"] = {"weights": weights(student), "telemetry": telemetry}

    student.load_state_dict(initial)
    trainer.model.zero_grad(set_to_none=True)
    trainer.compute_loss(model, batch).backward()
    results["m_step"] = {"gradient": gradient(trainer.model), "metrics": metrics_of(trainer)}
    torch.save(results, out / f"rank{trainer.accelerator.process_index}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
