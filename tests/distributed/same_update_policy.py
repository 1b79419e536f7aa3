"""A worker for ``torchrun --nproc_per_node 1|2``: one optimizer step of each case (SocraticPO, the entropy mask, plain
GRPO) on one fixed global batch of hand-made completions, split evenly over the processes, and what each process saw
written to ``<out>/<case>/rank<i>.pt``: per global row its advantages and entropy-mask weights, the batch statistics
the trainer logged, SocraticPO's decayed rewards, and (process 0) the gradient the optimizer steps with, after DDP's
all-reduce. ``tests/test_same_update_policy.py`` compares a 1-process run with a 2-process one.

    torchrun --nproc_per_node 2 tests/distributed/same_update_policy.py <out folder> <cache> <case> [<case> ...]

The batch: global row g is the training split's g-th row (distinct prompts, so that no two tokens share a context and
their entropies cannot tie; ties would be broken by TRL's per-process shuffle order). The completions replace the
generation (``_generate_single_turn``): attempt k of row g is ``<g-dependent working>\\nA: <answer>`` whose answer is
right where the case's outcome table says so, scored by the task's real verifier. Process i takes rows
``[i * n, (i + 1) * n)``, the rows TRL's sampler would hand it (``batch_size`` is the global batch divided by the
processes and by ``steps_per_generation``).
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from socratic_exp.core.config import compose
from socratic_exp.runtime.assembly import Workbench, build_components, build_trainer
from socratic_exp.tasks.base import render_splits

GLOBAL_ROWS = 8  # completions per generation batch, all processes together
# SocraticPO's outcome table, delta per attempt of each global row (K = 3). Process 0 of 2 gets rows 0-3 (mostly
# solved at once), process 1 rows 4-7 (never at once): per-process statistics would differ sharply from global ones.
OUTCOMES = [[1], [1], [1], [0, 1], [0, 0, 1], [0, 0, 0], [0, 1], [0, 0, 0]]
CORRECT = {0, 3, 4}  # single-attempt cases: the right rows (groups of 2: mixed on both processes, and uniform)

COMMON = (
    "logger=none",
    "algorithm.max_steps=1",
    "algorithm.save_steps=100",
    "algorithm.logging_steps=100",  # TRL clears its metrics at each log; they are read before the optimizer step
    "algorithm.log_completions=false",
    "algorithm.num_generations=2",
    "algorithm.max_grad_norm=1e9",  # no clipping: it would rescale, and so hide, a wrong overall factor
    "+algorithm.trl_args.use_cpu=true",  # gloo MULTI_CPU under torchrun
)
# TRL's generation, which the script replaces (the KV-cache continuation: tests/test_rollout_generation.py)
SOCRATICPO = ("algorithm=socraticpo", "algorithm.guidance=fixed_retry", "algorithm.teacher_kl_every=0",
              "algorithm.reuse_cache=false")  # fmt: skip
CASES: dict[str, tuple[str, ...]] = {
    # the paper's backend; beta 0.1 (default 0.01) so that the folded KL moves the advantages well past float noise
    "socraticpo_reinforce_pp": (*SOCRATICPO, "algorithm.kl_coef=0.1"),
    # group normalisation, token weighting, and the entropy mask composed (teacher turns outside its ranking)
    "socraticpo_grpo": (
        *SOCRATICPO,
        "algorithm.backend=grpo",
        "algorithm.normalize_over=tokens",
        "algorithm.entropy_mask={rho:0.5,mode:top}",
    ),
    "entropy_top": ("algorithm=entropy_masked", "algorithm.rho=0.2", "algorithm.mode=top"),
    "entropy_bottom": (
        "algorithm=entropy_masked",
        "algorithm.rho=0.8",
        "algorithm.mode=bottom",
        "algorithm.normalize=kept_tokens",
    ),
    # the paper overlay's (experiment=entropy_masked_dapo_qwen3) mask: rho 0.2 top over all tokens, clip-higher, and a
    # generation batch split into several loss calls, ranked at once before them (_weigh_generation_batch). The overlay
    # feeds 16 optimizer steps from one generation batch; here its 2 loss calls make one step, which so covers the
    # whole batch on any process count (over several steps, TRL's per-process shuffle and split put other rows in each)
    "entropy_overlay": (
        "algorithm=entropy_masked",
        "algorithm.rho=0.2",
        "algorithm.mode=top",
        "algorithm.normalize=all_tokens",
        "algorithm.epsilon_high=0.28",
        "algorithm.gradient_accumulation_steps=2",
        "algorithm.steps_per_generation=2",
    ),
    "grpo": ("algorithm=grpo",),
    # REINFORCE++ on its own: the group baseline, the folded KL (beta 0.1) and whitening over the global batch's tokens
    "reinforce_pp": ("algorithm=reinforce_pp", "algorithm.kl_coef=0.1", "algorithm.baseline=group"),
}


def completion_text(row: dict[str, Any], g: int, attempt: int, right: bool) -> str:
    """Attempt ``attempt`` of global row ``g``: a few digits of working whose count varies by row (so processes hold
    different token counts), then the final answer, right or off by one."""
    answer = row["answer"] if right else str(int(row["answer"]) + 1 + attempt)
    return f"{'7' * (g % 5)}+{g}{attempt}\nA: {answer}\n"


class Script:
    """The fixed completions, in place of ``_generate_single_turn``: a call's rows are told apart by their prompt
    (each global row has its own), and the attempt is the call's index within the current generation batch."""

    def __init__(self, trainer: Any, rows: list[dict[str, Any]], offset: int, outcomes: list[list[int]]):
        self.trainer, self.rows, self.offset, self.outcomes = trainer, rows, offset, outcomes
        self.prompts: dict[int, tuple[int, ...]] = {}
        self.calls = 0

    def __call__(self, prompt_ids: list[list[int]], *args: Any, **kwargs: Any) -> tuple[list[list[int]], None]:
        tokenizer, eos = self.trainer.processing_class, self.trainer.eos_token_ids[0]
        attempt, self.calls = self.calls, self.calls + 1
        if attempt == 0:  # the local rows in order: learn each global row's prompt
            self.prompts = {self.offset + i: tuple(ids) for i, ids in enumerate(prompt_ids)}
        completions = []
        for ids in prompt_ids:
            g = next((g for g, p in self.prompts.items() if tuple(ids[: len(p)]) == p), None)
            if g is None or (attempt > 0 and len(ids) == len(self.prompts[g])):
                completions.append([eos])  # SocraticPO's filler row (a bare prompt after the first call): dropped
                continue
            text = completion_text(self.rows[g], g, attempt, bool(self.outcomes[g][attempt]))
            completions.append(tokenizer(text, add_special_tokens=False)["input_ids"] + [eos])
        return completions, None


class Record(TrainerCallback):
    """What the optimizer steps with: the gradient (all-reduced) and the batch statistics logged so far."""

    def __init__(self, trainer: Any, result: dict[str, Any]):
        self.trainer, self.result = trainer, result

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        if self.trainer.accelerator.is_main_process:
            self.result["grads"] = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
        self.result["metrics"] = {name: list(values) for name, values in self.trainer._metrics["train"].items()}


def run_case(case: str, out: Path, cache: str, student: Any, splits: Any, data: Any) -> None:
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    overrides = CASES[case]
    steps = int(next((o.split("=")[1] for o in overrides if "steps_per_generation" in o), 1))
    per_device = GLOBAL_ROWS // (processes * steps)  # the same global generation batch for any process count
    components = build_components(
        compose(*COMMON, *overrides, f"model.cache_dir={cache}", f"algorithm.batch_size={per_device}")
    )
    bench = Workbench(components=components, splits=splits, student=copy.deepcopy(student), data=data)
    trainer = build_trainer(bench, Path(tempfile.mkdtemp()), run_name=case)
    rank = trainer.accelerator.process_index
    rows = [dict(data["train"][g]) for g in range(GLOBAL_ROWS)]
    local = GLOBAL_ROWS // processes
    offset = rank * local
    outcomes = OUTCOMES if case.startswith("socraticpo") else [[int(g in CORRECT)] for g in range(GLOBAL_ROWS)]
    script = Script(trainer, rows, offset, outcomes)
    trainer._generate_single_turn = script
    if getattr(trainer, "ref_policy", None) is not None:
        # At step 1 the policy is its own initial copy (KL 0): perturb the copy, the same on every process.
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in trainer.ref_policy.parameters():
                p.add_(0.02 * torch.randn(p.shape, generator=generator))

    result: dict[str, Any] = {"rows": {}, "mask": {}}
    by_completion: dict[tuple[int, ...], int] = {}
    generate_and_score = trainer._generate_and_score_completions

    def fixed_batch(inputs: list[dict[str, Any]]) -> dict[str, Any]:
        script.calls = 0
        mine = [dict(rows[g]) for g in range(offset, offset + len(inputs))]
        output = generate_and_score(mine)
        mask = output["completion_mask"].bool()
        for i, g in enumerate(range(offset, offset + len(inputs))):
            ids = output["completion_ids"][i][mask[i]].tolist()
            by_completion[tuple(ids)] = g
            advantages = output["advantages"][i]
            advantages = advantages[mask[i]] if advantages.dim() else advantages
            student = output.get("tool_mask")  # SocraticPO: 1 on the student's tokens, 0 on the teacher's turns
            result["rows"][g] = {
                "completion": ids,
                "advantages": advantages.tolist(),
                "student": student[i][mask[i]].tolist() if student is not None else [1] * len(ids),
                "segments": trainer._rollouts[i].segments if hasattr(trainer, "_rollouts") else [(0, len(ids))],
            }
        if hasattr(trainer, "_rewards"):
            result["rewards"] = trainer._rewards
        return output

    trainer._generate_and_score_completions = fixed_batch
    if getattr(trainer, "entropy_mask_settings", None) is not None:
        high_entropy_mask = trainer.get_high_entropy_mask

        def recorded_mask(entropies: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
            weights = high_entropy_mask(entropies, mask, threshold)
            inputs = trainer._loss_inputs
            valid = inputs["completion_mask"].bool()
            for i, ids in enumerate(inputs["completion_ids"]):
                g = by_completion[tuple(ids[valid[i]].tolist())]
                result["mask"][g] = {
                    "weights": weights[i][valid[i]].tolist(),
                    "entropy": entropies[i][valid[i]].tolist(),
                }
            return weights

        trainer.get_high_entropy_mask = recorded_mask
    trainer.add_callback(Record(trainer, result))
    trainer.train()
    (out / case).mkdir(parents=True, exist_ok=True)
    torch.save(result, out / case / f"rank{rank}.pt")


def main(out: Path, cache: str, cases: list[str]) -> None:
    components = build_components(compose(*COMMON, "algorithm=grpo", f"model.cache_dir={cache}"))
    student = components.model.load(components.task)
    splits = components.task.build()
    data = render_splits(splits, components.task.instruction(), student.chat)
    data["train"] = data["train"].select(range(4 * GLOBAL_ROWS))
    assert len(set(data["train"]["prompt"][:GLOBAL_ROWS])) == GLOBAL_ROWS  # the script tells rows by their prompt
    for case in cases:
        run_case(case, out, cache, student, splits, data)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
