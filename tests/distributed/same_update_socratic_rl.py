"""A worker for ``torchrun --nproc_per_node 1|2``: Socratic-RL's loop and distillers on fixed data, whole on one
process or split over two. Each process writes ``<out>/rank<i>.pt`` with:

- ``reflection``: one batch of 8 scored traces (two questions x 4, by hand; each process hands the loop its rows, as
  the reward hook does) goes to the rule teacher's reflection (``reflect_on=below_group_mean``); the loop's metrics
  and its knowledge base afterwards.
- ``probe``: U(v) of the viewpoints in V on the probe items (Section 3.3): the probe's metrics and the measurements.
- ``kl``, ``dpo``, ``sft``: one optimizer step of 4 examples (``distiller.batch_size``, in all) of each distiller on
  the same 8 inputs and viewpoint, from the same weights: the student's weight change and the phase's metrics. The
  phases train with SGD at learning rate 1 and no clipping (the worker patches ``phases.phase_args``), so the
  change is minus the step's gradient: Adam's first step moves each weight by about its learning rate whatever the
  gradient's scale and would hide a wrong normalisation. SDFT samples its responses inside its trainer, each
  process its share of the batch with its own random stream; it draws greedily here (``top_k=1``), so that two
  processes draw what one draws for the whole batch. The DPO and SFT responses are sampled before the phase, for
  the whole batch on every process.

    torchrun --nproc_per_node <1|2> tests/distributed/same_update_socratic_rl.py <out folder>
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

import socratic_exp.models.phases as phases
from socratic_exp.algorithms import builder
from socratic_exp.algorithms.base import RunContext
from socratic_exp.core.config import compose
from socratic_exp.distillers.base import DistillationData
from socratic_exp.runtime.assembly import build_components
from socratic_exp.tasks.base import render_splits
from socratic_exp.teachers.base import Attempt

# (question, answer, completion): the group means are 1/4 and 1/2, so 3 + 2 traces lie below their group's mean;
# the rule teacher finds a precedence error in 4 of them (it writes a viewpoint from the second) and a slip in one
TRACES = [
    ("Q: 2*2-5*3=?\n", "-11", "2*2=4\n5*3=15\n4-15=-11\nA: -11\n"),
    ("Q: 2*2-5*3=?\n", "-11", "2*2=4\n4-5=-1\n-1*3=-3\nA: -3\n"),
    ("Q: 2*2-5*3=?\n", "-11", "2*2=4\n5*3=15\n4-15=-12\nA: -12\n"),
    ("Q: 2*2-5*3=?\n", "-11", "2*2=4\n4-5=-1\n-1*3=-3\nA: -3\n"),
    ("Q: 7+8*2=?\n", "23", "8*2=16\n7+16=23\nA: 23\n"),
    ("Q: 7+8*2=?\n", "23", "7+8=15\n15*2=30\nA: 30\n"),
    ("Q: 7+8*2=?\n", "23", "8*2=16\n7+16=23\nA: 23\n"),
    ("Q: 7+8*2=?\n", "23", "7+8=15\n15*2=30\nA: 30\n"),
]
COMMON = ("algorithm=socratic_rl", "debug=fast", "logger=none", "algorithm.reflect_on=below_group_mean",
          "algorithm.probe_items=8", "+algorithm.trl_args.use_cpu=true")  # fmt: skip
DISTILLERS = {
    "kl": ("distiller=kl", "distiller.num_generations=2", "distiller.kl_samples=4"),
    "dpo": ("distiller=dpo", "distiller.require_verified=false"),
    "sft": ("distiller=sft", "distiller.require_correct=false", "distiller.instruction_share=0.5"),
}
DISTILLER_SETTINGS = ("distiller.items=8", "distiller.steps=1", "distiller.batch_size=4", "distiller.learning_rate=1.0",
                      "distiller.max_completion_length=16")  # fmt: skip


def sgd_phases() -> None:
    """Distillation phases train with SGD, unclipped, and SDFT draws greedily (see the module docstring)."""
    original = phases.phase_args

    def phase_args(config_cls: type, *args: Any, **kwargs: Any) -> Any:
        greedy = {"top_k": 1} if config_cls.__name__ == "SDFTConfig" else {}
        return original(config_cls, *args, **kwargs, optim="sgd", max_grad_norm=0.0, **greedy)

    phases.phase_args = phase_args


def weights(model: Any) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def main(out: Path) -> None:
    from accelerate import PartialState

    state = PartialState(cpu=True)  # the process group (gloo), before the loop gathers anything
    components = build_components(compose(*COMMON, *DISTILLERS["kl"], *DISTILLER_SETTINGS))
    student = components.model.load(components.task)
    components.teacher.attach(components.task, student)
    data = render_splits(components.task.build(), components.task.instruction(), student.chat)
    run_dir = Path(tempfile.mkdtemp())
    context = RunContext(components=components, data=data, student=student, run_dir=run_dir, run_name="same-update",
                         seed=0, callbacks=[], report_to=[])  # fmt: skip
    loop = builder(components.algorithm).build_loop(context)  # the trainer itself runs on one process only
    results: dict[str, Any] = {}

    share = len(TRACES) // state.num_processes
    mine = TRACES[state.process_index * share : (state.process_index + 1) * share]
    verdicts = [components.task.verify(completion, answer) for _, answer, completion in mine]
    attempts = [Attempt(completion, v.score, v.reason) for (_, _, completion), v in zip(mine, verdicts, strict=True)]
    loop.observe([question for question, _, _ in mine], attempts)  # as the reward hook hands them over
    metrics = loop.reflect(step=1)
    results["reflection"] = {"metrics": metrics, "kb": loop.kb.state_dict()}
    metrics = loop.probe(step=1)
    results["probe"] = {"metrics": metrics, "kb": loop.kb.state_dict()}

    sgd_phases()
    train = data["train"].select(range(8))  # twice the batch: a step takes 4 of them, a per-process batch 8
    viewpoints = [entry.text for entry in loop.kb.active]
    inputs = DistillationData(prompts=list(train["prompt"]), answers=list(train["answer"]), viewpoints=viewpoints)
    initial = {k: v.clone() for k, v in student.model.state_dict().items()}
    for name, overrides in DISTILLERS.items():
        distiller = build_components(compose(*COMMON, *overrides, *DISTILLER_SETTINGS)).distiller
        student.model.load_state_dict(initial)
        before = weights(student.model)
        metrics = distiller.distill(student, components.task, inputs, run_dir / name, seed=0)
        results[name] = {"update": weights(student.model) - before, "metrics": metrics}
    torch.save(results, out / f"rank{state.process_index}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
