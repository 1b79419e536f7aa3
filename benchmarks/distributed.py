"""2 processes against 1 on the same global batch: training step time per algorithm and the held-out evaluation time.

    python benchmarks/distributed.py [--steps 8] [--out research/results/distributed.json]

Training: ``python -m socratic_exp debug=fast algorithm=<a>`` for ``--steps`` steps, once as 1 process with 2
threads and once as 2 torchrun processes (gloo) with 1 thread each and half the per-process batch, so both use the
same cores on the same global batch; the step time is the run's training wall time (``eval/train_seconds``:
generation, scoring and the update, evaluations excluded) over its steps. Evaluation: the whole held-out split,
greedy and pass@4, timed inside 1 and 2 processes (this file run by torchrun as the ``evaluate`` worker).
On a machine with as many cores as processes a ratio below 1 means the processes overlap their work; small models on
CPU spend much of a step in Python, collectives and padding, so expect little speed-up there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ALGORITHMS = {
    "grpo": ["algorithm=grpo"],
    "entropy_masked": ["algorithm=entropy_masked"],
    "socraticpo": ["algorithm=socraticpo"],
    "sdpo": ["algorithm=sdpo"],
    "vpd": ["algorithm=vpd", "algorithm.e_step_every=1"],
    "socratic_rl": ["algorithm=socratic_rl", "distiller=kl", "algorithm.probe_every=4", "algorithm.distill_every=8"],
}
GLOBAL_BATCH = 16  # completions per optimizer step, as debug=fast


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch(processes: int, program: list[str], threads: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "WANDB_MODE": "disabled", "HYDRA_FULL_ERROR": "0"}
    if processes == 1:
        command = [sys.executable, *program]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}",
                   f"--master_port={free_port()}", *program]  # fmt: skip
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stderr[-3000:]}")
    return proc


def step_seconds(name: str, processes: int, steps: int) -> float:
    with tempfile.TemporaryDirectory() as folder:
        overrides = ["debug=fast", "logger=none", f"algorithm.max_steps={steps}", "eval.every_steps=0",
                     "eval.max_samples=8", f"algorithm.batch_size={GLOBAL_BATCH // processes}",
                     f"algorithm.save_steps={steps}", f"hydra.run.dir={folder}/run", *ALGORITHMS[name]]  # fmt: skip
        launch(processes, ["-m", "socratic_exp", *overrides], threads=2 // processes)
        summary = json.loads((Path(folder) / "run" / "summary.json").read_text())
        return summary["final"]["eval/train_seconds"] / summary["steps"]


def evaluation_seconds(processes: int) -> float:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "seconds.json"
        launch(processes, [str(HERE), "evaluate", str(out)], threads=2 // processes)
        return json.loads(out.read_text())["seconds"]


def evaluate_worker(out: Path) -> None:
    """Inside the launch: the whole held-out split of the default task, timed on every process."""
    from socratic_exp.core import distributed
    from socratic_exp.core.config import compose
    from socratic_exp.runtime.assembly import build_components
    from socratic_exp.runtime.evaluation import Evaluator

    components = build_components(compose("algorithm=grpo", "logger=none", "teacher=none", "eval.pass_k=4"))
    student = components.model.load(components.task)
    distributed.join()
    evaluator = Evaluator(components.task, components.task.build()["eval"], components.eval)
    distributed.gather_objects(0)  # every process starts the clock together
    started = time.perf_counter()
    metrics = evaluator.evaluate(student)
    seconds = max(distributed.gather_objects(time.perf_counter() - started))
    if distributed.is_main():
        out.write_text(json.dumps({"seconds": seconds, "questions": len(evaluator.rows), **metrics}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--out", type=Path, default=HERE.parent / "research" / "results" / "distributed.json")
    args = parser.parse_args()
    from socratic_exp.core.run_folder import machine

    rows = {}
    for name in ALGORITHMS:
        one, two = step_seconds(name, 1, args.steps), step_seconds(name, 2, args.steps)
        rows[name] = {"one_process_s": round(one, 3), "two_processes_s": round(two, 3), "ratio": round(two / one, 2)}
        print(f"{name:<16} step {one:6.3f} s on 1 process, {two:6.3f} s on 2: ratio {two / one:.2f}", flush=True)
    one, two = evaluation_seconds(1), evaluation_seconds(2)
    rows["evaluation"] = {
        "one_process_s": round(one, 2),
        "two_processes_s": round(two, 2),
        "ratio": round(two / one, 2),
    }
    print(f"{'evaluation':<16} {one:6.2f} s on 1 process, {two:6.2f} s on 2: ratio {two / one:.2f}")
    result = {"machine": machine(), "python": platform.python_version(), "steps": args.steps,
              "global_batch": GLOBAL_BATCH, "results": rows}  # fmt: skip
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["evaluate"]:
        evaluate_worker(Path(sys.argv[2]))
    else:
        main()
