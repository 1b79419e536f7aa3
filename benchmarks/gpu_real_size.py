"""GRPO and SocraticPO on a student of Qwen3-0.6B's size: throughput and peak memory measured, beside the planner's.

    python benchmarks/gpu_real_size.py OUT                                   # on a GPU: the 0.6b model, bf16
    python benchmarks/gpu_real_size.py OUT --device cpu --size standin       # the CPU check (about a minute)

It builds a randomly initialised Qwen3 with Qwen3-0.6B's dimensions (``python -m socratic_exp.models.random_qwen3
--size 0.6b``: vocabulary 151,936, tied embeddings; no download), then runs a few steps of ``algorithm=grpo`` and of
``algorithm=socraticpo teacher=rule`` through the real CLI (``python -m socratic_exp model=qwen3_0_6b
model.name=<folder>``), each in a process of its own, bf16 on CUDA (fp32 on CPU). From each run folder's
``summary.json`` and ``metrics.jsonl`` it reads, per algorithm:

- **generated tokens per second** = the student tokens generated in steps 2..n / the sum of TRL's ``step_time`` over
  the same steps (step 1 is left out as warm-up: CUDA kernels, allocator growth, lazy initialisation). A step's
  generated tokens: GRPO, ``completions/mean_length`` x the completions per step (``algorithm.batch_size``, one
  process); SocraticPO, ``socraticpo/generated_tokens`` (every attempt's student tokens, the teacher's turns left out).
  TRL's ``step_time`` is ``Trainer.training_step``'s wall time: generation, rewards (and the teacher), the loss's
  forward and backward; not the optimizer step, logging or checkpoints.
- **step seconds**: TRL's ``step_time`` (mean over steps 2..n), and the wall time between consecutive steps' metric
  records (optimizer step and callbacks included);
- **peak memory**: ``summary.json``'s ``peak_memory`` (torch's peak allocated / reserved on the GPU, the process's peak
  resident set), measured over the whole run (evaluations included);
- **the planner's figure** for the same config: ``socratic_exp.models.memory.plan_memory`` per process, held for the
  whole run (weights + gradients + optimizer state + the options' copies of weights; no activations, KV cache,
  logits or CUDA context): "n/a" where the planner is absent or fails.

Writes ``OUT/gpu_real_size.json`` (written again after each run, so a run cut short leaves what was measured),
``OUT/gpu_real_size.md`` (the table), ``OUT/<algorithm>.log`` (each run's output), ``OUT/plan_<algorithm>.txt`` (the
planner's table) and ``OUT/runs/<algorithm>/`` (each run folder's summary, metrics and log), and prints the table last.
Exit code 0 when every run completed, 1 when one failed, 2 for bad arguments. The checkpoints that TRL writes at the
last step (several GB at 0.6B) are deleted after each run, as is the model unless ``--work`` names the folder.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

REPO = Path(__file__).resolve().parent.parent
ALGORITHMS = ("grpo", "socraticpo")
# Per device: a realistic batch on the GPU (the project's Qwen3 overlay generates 256 tokens per completion); tiny
# values on the CPU, where the check is that the whole pipeline runs, not what it measures.
DEFAULTS: dict[str, dict[str, int]] = {
    "cuda": dict(steps=3, batch_size=8, num_generations=4, max_completion_length=256, eval_samples=8, eval_tokens=64),
    "cpu": dict(steps=2, batch_size=4, num_generations=2, max_completion_length=16, eval_samples=2, eval_tokens=16),
}
TOKENS_PER_SECOND = (
    "student tokens generated in steps 2..n / sum of TRL's step_time over steps 2..n (step 1: warm-up; with one step, "
    "step 1); tokens: GRPO completions/mean_length x batch_size, SocraticPO socraticpo/generated_tokens (all attempts, "
    "teacher turns excluded); step_time: Trainer.training_step's wall time (generation, rewards, loss forward and "
    "backward; no optimizer step)"
)
PROGRESS = re.compile(
    r" - (training: .*|step \d+/\d+ .*|held-out at step .*|saving the checkpoint.*|checkpoint of .*)$"
)
ERROR = re.compile(r"^[A-Za-z_.]*(Error|Exception)\b|^error:|[Ee]rror: ")
SMALL_FILES = ("summary.json", "metrics.jsonl", "socratic_exp.log")


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr (not the usage block), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (--help says more)\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = OneLineParser(
        prog="python benchmarks/gpu_real_size.py",
        description="GRPO and SocraticPO steps on a random Qwen3 of 0.6B parameters (or the 2-layer stand-in): "
        "generated tokens/s, step seconds, peak GPU memory, and the memory planner's figure beside them.",
        epilog="Defaults per device: "
        + "; ".join(f"{d}: " + ", ".join(f"{k}={v}" for k, v in values.items()) for d, values in DEFAULTS.items()),
    )
    parser.add_argument("out", type=Path, help="output folder (the JSON, the table, the logs)")
    parser.add_argument(
        "--device", choices=["auto", "cuda", "cpu"], default="auto", help="auto: cuda if torch sees one"
    )
    parser.add_argument("--size", choices=["0.6b", "standin"], default="0.6b", help="random_qwen3's --size")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS), help="comma-separated, of: grpo, socraticpo")
    parser.add_argument("--steps", type=int, help="optimizer steps per run (algorithm.max_steps)")
    parser.add_argument("--batch-size", type=int, help="completions per step (algorithm.batch_size)")
    parser.add_argument("--num-generations", type=int, help="completions per prompt (algorithm.num_generations)")
    parser.add_argument("--max-completion-length", type=int, help="tokens per completion (per attempt) at most")
    parser.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto", help="auto: bf16 on cuda")
    parser.add_argument("--work", type=Path, help="folder for the model and the run folders (default: a temp one)")
    parser.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="another override for every run"
    )
    args = parser.parse_args(argv)
    names = [a for a in args.algorithms.split(",") if a]
    if not names or any(a not in ALGORITHMS for a in names):
        parser.error(f"--algorithms {args.algorithms}: expected a comma-separated list of {', '.join(ALGORITHMS)}")
    args.algorithms = names
    for key in ("steps", "batch_size", "num_generations", "max_completion_length"):
        value = getattr(args, key)
        if value is not None and value < 1:
            parser.error(f"--{key.replace('_', '-')} {value}: must be >= 1")
    if args.num_generations is not None and args.num_generations < 2:
        parser.error(f"--num-generations {args.num_generations}: must be >= 2 (GRPO's groups)")
    if any("=" not in o for o in args.override):
        parser.error(f"--override {next(o for o in args.override if '=' not in o)}: expected KEY=VALUE")
    return args


def refuse(message: str) -> NoReturn:
    """A bad combination found after parsing: one line, exit 2, as argparse's own errors."""
    print(f"python benchmarks/gpu_real_size.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def say(message: str) -> None:
    print(f"[gpu_real_size {time.strftime('%H:%M:%S')}] {message}", flush=True)


def resolve_device(requested: str) -> str:
    import torch

    cuda = torch.cuda.is_available()
    if requested == "cuda" and not cuda:
        refuse("--device cuda, but torch sees no GPU (--device cpu)")
    return requested if requested != "auto" else "cuda" if cuda else "cpu"


def gpu_name() -> str | None:
    # nvidia-smi, not torch: a CUDA context in this process would take GPU memory beside the runs'
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def overrides_for(algorithm: str, model: Path, device: str, bf16: bool, sizes: dict[str, int], extra: list[str]):
    """The run's command-line overrides: the algorithm at the chosen size, with the rest as small as it goes."""
    teacher = ["teacher=rule"] if algorithm == "socraticpo" else []
    return [
        "model=qwen3_0_6b",
        f"model.name={model}",
        f"model.dtype={'bfloat16' if bf16 else 'float32'}",
        f"algorithm={algorithm}",
        *teacher,
        "logger=none",
        f"algorithm.max_steps={sizes['steps']}",
        f"algorithm.batch_size={sizes['batch_size']}",
        f"algorithm.num_generations={sizes['num_generations']}",
        f"algorithm.max_completion_length={sizes['max_completion_length']}",
        f"algorithm.bf16={str(bf16).lower()}",
        "algorithm.logging_steps=1",  # a metrics record per step (the default averages over 5)
        "algorithm.log_completions=false",
        "eval.every_steps=0",  # only before and after training: the steps are what is timed
        f"eval.max_samples={sizes['eval_samples']}",
        f"eval.max_new_tokens={sizes['eval_tokens']}",
        "eval.pass_k=0",
        "save_final_model=false",  # spares the disk (TRL still checkpoints the last step: deleted after the run)
        *extra,
    ]


def planner_figure(overrides: list[str], device: str, bf16: bool, out: Path, algorithm: str) -> dict[str, Any]:
    """The planner's per-process bytes for the run's config, or why there are none ("n/a")."""
    try:
        from socratic_exp.core.config import compose
        from socratic_exp.models.memory import plan_memory
        from socratic_exp.runtime.assembly import build_components

        plan = plan_memory(
            build_components(compose(*overrides)),
            processes=1,
            device="cpu" if device == "cpu" else "cuda_bf16" if bf16 else "cuda",
        )
        where = "CPU" if device == "cpu" else "GPU"
        held, peak = plan.held(where), plan.peak(where)
        (out / f"plan_{algorithm}.txt").write_text(plan.table() + "\n")
        return {
            "where": where,
            "held_bytes": held,
            "peak_bytes": peak,  # held + the largest phase's extra (none for these two algorithms)
            "held_gib": None if held is None else round(held / 2**30, 3),
            "peak_gib": None if peak is None else round(peak / 2**30, 3),
            "parameters": plan.parameters,
            "rows": [[r.item, r.per_process, r.held] for r in plan.rows],  # item, bytes per process, in the total
            "note": f"plan_memory: weights + gradients + optimizer + copies, per process, on the {where}",
        }
    except Exception as err:  # the planner is being written beside this script: its absence is a result, not a crash
        return {"held_gib": "n/a", "peak_gib": "n/a", "note": f"n/a: {type(err).__name__}: {err}"[:300]}


def run_logged(command: list[str], log: Path, env: dict[str, str], label: str) -> int:
    """Run ``command`` with its output in ``log``, echoing its progress lines (steps, evaluations, checkpoints)."""
    with log.open("w") as sink:
        sink.write("+ " + " ".join(command) + "\n")
        sink.flush()
        child = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        try:
            assert child.stdout is not None
            for line in child.stdout:
                sink.write(line)
                match = PROGRESS.search(line.rstrip("\n"))
                if match:
                    say(f"{label}: {match.group(1)}")
            return child.wait()
        finally:
            if child.poll() is None:  # interrupted here (a timeout's SIGTERM): take the run down too
                child.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=20)


def last_error(log: Path) -> str:
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ERROR.search(ln) and not ln.startswith("+ ")]
    return (errors or lines or ["(no output)"])[-1][:200]


def measure(run_dir: Path, algorithm: str, batch_size: int) -> dict[str, Any]:
    """Steps, generated tokens/s, step seconds and peak memory from a run folder's summary.json and metrics.jsonl."""
    summary = json.loads((run_dir / "summary.json").read_text())
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in records if "step_time" in r]  # the trainer's per-step records (logging_steps=1)
    per_step = []
    for i, r in enumerate(steps):
        if algorithm == "socraticpo":
            tokens = r.get("socraticpo/generated_tokens")
        else:
            length = r.get("completions/mean_length")
            tokens = None if length is None else length * batch_size
        wall = r["time"] - steps[i - 1]["time"] if i else None
        per_step.append({"step": r["step"], "generated_tokens": tokens, "step_time": r["step_time"], "wall_s": wall})
    measured = per_step[1:] or per_step  # step 1 warms up: left out when there is another
    tokens = [s["generated_tokens"] for s in measured]
    seconds = sum(s["step_time"] for s in measured)
    walls = [s["wall_s"] for s in measured if s["wall_s"] is not None]
    rollout = [r.get("socraticpo/rollout_seconds") for r in steps[1:] or steps]
    result: dict[str, Any] = {
        "status": summary.get("status"),
        "steps": summary.get("steps"),
        "parameters": (summary.get("student") or {}).get("parameters"),
        "dtype": (summary.get("student") or {}).get("dtype"),
        "measured_steps": [s["step"] for s in measured],
        "generated_tokens": None if None in tokens else sum(tokens),
        "tokens_per_second": None if None in tokens or seconds <= 0 else round(sum(tokens) / seconds, 1),
        "step_seconds": round(statistics.mean(s["step_time"] for s in measured), 3) if measured else None,
        "wall_step_seconds": round(statistics.mean(walls), 3) if walls else None,
        "first_step_seconds": round(per_step[0]["step_time"], 3) if per_step else None,
        "train_runtime_s": (summary.get("train") or {}).get("train_runtime"),
        "run_wall_time_s": summary.get("wall_time_s"),
        "peak_memory": summary.get("peak_memory") or {},
        "per_step": per_step,
    }
    if algorithm == "socraticpo" and None not in tokens and None not in rollout and sum(rollout) > 0:
        # generation alone (the rule teacher's turns, milliseconds, included): the step's other work left out
        result["rollout_tokens_per_second"] = round(sum(tokens) / sum(rollout), 1)
    return result


def keep_small_files(run_dir: Path, to: Path) -> None:
    to.mkdir(parents=True, exist_ok=True)
    for name in SMALL_FILES:
        if (run_dir / name).is_file():
            shutil.copy2(run_dir / name, to / name)


def size_text(size: Any) -> str:
    if not isinstance(size, int):
        return "n/a"
    scale, unit = next(((s, u) for s, u in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")) if size >= s), (1, "B"))
    return f"{size / scale:.3f} {unit}" if scale > 1 else f"{size} B"


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table(report: dict[str, Any]) -> str:
    gpu = report["device"] == "cuda"
    head = (
        f"gpu_real_size: random Qwen3 {report['size']} ({fmt(report.get('parameters'))} parameters), "
        f"{report['precision']} on {report.get('gpu') or report['device']}; {report['settings']}"
    )
    columns = ["algorithm", "result", "steps", "gen. tokens", "tokens/s", "step s (TRL)", "step s (wall)",
               "1st step s", "peak GPU alloc. GiB", "peak GPU reserved GiB", "peak CPU RSS GiB",
               f"planner, held ({'GPU' if gpu else 'CPU'})", "run s"]  # fmt: skip
    lines = [head, "", "| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for name, run in report["runs"].items():
        peak, plan = run.get("peak_memory") or {}, run.get("planner") or {}
        cells = [
            name,
            run.get("result", "?"),
            fmt(run.get("steps")),
            fmt(run.get("generated_tokens"), 0),
            fmt(run.get("tokens_per_second"), 1),
            fmt(run.get("step_seconds"), 3),
            fmt(run.get("wall_step_seconds"), 3),
            fmt(run.get("first_step_seconds"), 2),
            fmt(peak.get("gpu_allocated_gib"), 3),
            fmt(peak.get("gpu_reserved_gib"), 3),
            fmt(peak.get("cpu_rss_gib"), 3),
            size_text(plan.get("held_bytes")),
            fmt(run.get("seconds"), 0),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"tokens/s: {report['tokens_per_second_definition']}.",
        "step s (TRL): mean step_time over the same steps; step s (wall): mean time between consecutive steps' metric "
        "records (optimizer step and callbacks included); 1st step s: step 1's step_time (warm-up).",
        "peak memory: summary.json peak_memory (torch.cuda.max_memory_allocated / max_memory_reserved, ru_maxrss), "
        "over the whole run, evaluations included; planner: plan_memory's per-process held bytes (weights, gradients, "
        "optimizer, the options' weight copies; no activations, KV cache, logits or CUDA context).",
    ]
    notes = {
        run["planner"]["note"] for run in report["runs"].values() if run.get("planner", {}).get("held_gib") == "n/a"
    }
    lines += [f"planner: {note}" for note in sorted(notes)]
    return "\n".join(lines)


def write(report: dict[str, Any], out: Path) -> str:
    text = table(report)
    (out / "gpu_real_size.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "gpu_real_size.md").write_text(text + "\n")
    return text


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # a timeout's SIGTERM: unwind (finally blocks write what was measured and stop the run in progress)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    device = resolve_device(args.device)
    bf16 = args.precision == "bf16" or (args.precision == "auto" and device == "cuda")
    if device == "cpu" and bf16:
        say("note: --precision bf16 on the CPU is emulated where the CPU lacks it, and slow")
    sizes = dict(DEFAULTS[device])
    for key in ("steps", "batch_size", "num_generations", "max_completion_length"):
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    if sizes["batch_size"] % sizes["num_generations"]:
        refuse(f"batch size {sizes['batch_size']} is not a multiple of --num-generations {sizes['num_generations']}")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = (args.work or Path(tempfile.mkdtemp(prefix="gpu_real_size."))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    model = work / f"qwen3-{args.size}"
    env = dict(os.environ)
    # no network on the target: hub clients fail fast on a cache miss; nothing but the local folder is loaded
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled",
               TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")  # fmt: skip
    env["SOCRATIC_EXP_OUTPUTS"] = str(work / "outputs")  # SOCRATIC_EXP_RUN_DIR pins each run; this, anything else
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # --device cpu on a GPU machine: keep torch off the GPU
        # one intra-op thread unless told otherwise: the stand-in's ops gain nothing from more, and on a busy 2-core
        # machine (a test suite beside it) spinning OpenMP threads made its steps ~100x slower (0.05 s -> 5 s)
        env.setdefault("OMP_NUM_THREADS", "1")
    report: dict[str, Any] = {
        "status": "running",
        "device": device,
        "gpu": gpu_name() if device == "cuda" else None,
        "size": args.size,
        "precision": "bf16" if bf16 else "fp32",
        "settings": ", ".join(f"{k}={v}" for k, v in sizes.items()),
        "tokens_per_second_definition": TOKENS_PER_SECOND,
        "parameters": None,
        "omp_num_threads": env.get("OMP_NUM_THREADS"),
        "runs": {},
    }
    failed = False
    try:
        say(f"device {device} ({report['gpu'] or 'no GPU name'}), {report['precision']}; {report['settings']}")
        say(f"building the random Qwen3 ({args.size}) in {model}")
        t0 = time.monotonic()
        build_log = out / "build_model.log"
        command = [sys.executable, "-m", "socratic_exp.models.random_qwen3", str(model), "--size", args.size]
        if run_logged(command, build_log, env, "build") != 0:
            report["build"] = f"FAIL: {last_error(build_log)}"
            say(f"building the model failed: {last_error(build_log)} (log: {build_log})")
            failed = True
            return 1
        report["build_seconds"] = round(time.monotonic() - t0, 1)
        say(f"built in {report['build_seconds']:.0f} s: {build_log.read_text().strip().splitlines()[-1]}")
        for algorithm in args.algorithms:
            overrides = overrides_for(algorithm, model, device, bf16, sizes, args.override)
            run_dir = work / algorithm
            run = report["runs"][algorithm] = {"result": "running", "run_dir": str(run_dir), "overrides": overrides}
            run["planner"] = planner_figure(overrides, device, bf16, out, algorithm)
            say(f"{algorithm}: planner {size_text(run['planner'].get('held_bytes'))} per process (held)")
            shutil.rmtree(run_dir, ignore_errors=True)
            log = out / f"{algorithm}.log"
            say(f"{algorithm}: {sizes['steps']} steps (log: {log})")
            t0 = time.monotonic()
            rc = run_logged(
                [sys.executable, "-m", "socratic_exp", *overrides], log, {**env, "SOCRATIC_EXP_RUN_DIR": str(run_dir)},
                algorithm,
            )  # fmt: skip
            run["seconds"] = round(time.monotonic() - t0, 1)
            shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # GBs at 0.6B; nothing here reads them
            keep_small_files(run_dir, out / "runs" / algorithm)
            try:
                run.update(measure(run_dir, algorithm, sizes["batch_size"]))
            except (OSError, ValueError, KeyError) as err:
                run["measure_error"] = f"{type(err).__name__}: {err}"
            if rc != 0:
                run["result"] = f"FAIL (exit {rc}: {last_error(log)})"
            elif run.get("status") != "completed":
                run["result"] = f"FAIL (exit 0 but summary status: {run.get('status', 'no summary.json')})"
            else:
                run["result"] = "PASS"
            failed |= run["result"] != "PASS"
            report["parameters"] = report["parameters"] or run.get("parameters")
            say(f"{algorithm}: {run['result']} in {run['seconds']:.0f} s; {fmt(run.get('tokens_per_second'), 1)} "
                f"generated tokens/s, peak {run.get('peak_memory')}")  # fmt: skip
            write(report, out)
        return 1 if failed else 0
    finally:
        results = [r.get("result") for r in report["runs"].values()]
        for name, run in report["runs"].items():
            if run.get("result") == "running":  # cut short (a timeout): its folder's small files are still worth having
                keep_small_files(Path(run["run_dir"]), out / "runs" / name)
                run["result"] = f"INTERRUPTED (after {time.monotonic() - started:.0f} s of the script)"
        if "running" in results:
            report["status"] = "interrupted"
        elif failed or any(r != "PASS" for r in results):
            report["status"] = "failed"
        else:
            report["status"] = "completed" if len(results) == len(args.algorithms) else "interrupted"
        report["seconds"] = round(time.monotonic() - started, 1)
        text = write(report, out)
        if args.work is None:  # ours: the model (GBs at 0.6B) and the run folders, whose small files are in OUT
            shutil.rmtree(work, ignore_errors=True)
        else:
            shutil.rmtree(model, ignore_errors=True)
        say(f"{report['status']} in {report['seconds']:.0f} s; {out / 'gpu_real_size.json'}")
        print("\n" + text, flush=True)


if __name__ == "__main__":
    sys.exit(main())
