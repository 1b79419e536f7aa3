"""Benchmark tasks: verifier throughput on MATH-500's gold solutions, and each task's load time from local files.

    python benchmarks/tasks.py [--data ../shared/data] [--repeats 3]

Throughput: ``verify(solution, answer)`` over the 500 MATH-500 solutions (the last ``\\boxed{}`` against the
``answer`` field), cold (first pass: math-verify parses every gold answer) and warm (gold parses cached), plus the
same for GSM8K's 1319 test solutions (number verifier) and SciKnowEval answers (letter verifier). Load time:
reading the files into rows (``read + rows``) and then ``task.build()`` into a ``DatasetDict`` (``build``, after
``import datasets``), in a fresh process per task, median of repeats; evaluation sets read only their eval split.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data"

LOADS = {  # task option -> (constructor arguments with {data}, what to build)
    "gsm8k": ({"data_files": {"train": "{data}/gsm8k/train.jsonl", "eval": "{data}/gsm8k/test.jsonl"}}, "build"),
    "math500": ({"data_files": {"eval": "{data}/math500/test.jsonl"}}, "eval"),
    "aime24": ({"data_files": {"eval": "{data}/aime24/test.jsonl"}}, "eval"),
    "aime25": ({"data_files": {"eval": "{data}/aime25/test.jsonl"}}, "eval"),
    "amc23": ({"data_files": {"eval": "{data}/amc23/test.jsonl"}}, "eval"),
    "multiarith": ({"data_files": {"eval": "{data}/multiarith/test.jsonl"}}, "eval"),
    "sciknoweval": ({"data_dir": "{data}/sciknoweval", "domain": "all"}, "build"),
}
CLASSES = {
    "gsm8k": "socratic_exp.tasks.gsm8k:Gsm8kTask",
    "math500": "socratic_exp.tasks.math500:Math500Task",
    "aime24": "socratic_exp.tasks.aime24:Aime24Task",
    "aime25": "socratic_exp.tasks.aime25:Aime25Task",
    "amc23": "socratic_exp.tasks.amc23:Amc23Task",
    "multiarith": "socratic_exp.tasks.multiarith:MultiArithTask",
    "sciknoweval": "socratic_exp.tasks.sciknoweval:SciKnowEvalTask",
}
LOAD_SCRIPT = """
import importlib, json, sys, time
started = time.perf_counter()
import datasets  # noqa: F401  (build() needs it; its import is timed apart)
imported = time.perf_counter()
module, name = sys.argv[1].split(":")
task = getattr(importlib.import_module(module), name)(**json.loads(sys.argv[2]))
begin = time.perf_counter()
pools = task.pools() if sys.argv[3] == "build" else {"eval": task.load_rows("eval")}
rows_done = time.perf_counter()
sizes = {split: len(rows) for split, rows in task.sized({"train": [], **pools}).items() if rows}
if sys.argv[3] == "build":
    sizes = {split: len(rows) for split, rows in task.build().items()}
done = time.perf_counter()
print(json.dumps({"sizes": sizes, "import_s": imported - started, "rows_s": rows_done - begin,
                  "build_s": done - rows_done}))
"""


def throughput(data: Path) -> None:
    from socratic_exp.tasks.gsm8k import Gsm8kTask
    from socratic_exp.tasks.math500 import Math500Task
    from socratic_exp.tasks.sciknoweval import SciKnowEvalTask

    math500 = Math500Task(data_files={"eval": str(data / "math500/test.jsonl")})
    rows = math500.load_rows("eval")
    for label in ("cold", "warm"):
        started = time.perf_counter()
        correct = sum(math500.score(row["reference"], row["answer"]) for row in rows)
        elapsed = time.perf_counter() - started
        rate = len(rows) / elapsed
        print(f"MATH-500 gold solutions ({label}): {rate:8.0f} items/s  ({correct:.0f}/{len(rows)} correct)")
    wrong = [rows[(i + 1) % len(rows)]["answer"] for i in range(len(rows))]  # mostly through math-verify
    started = time.perf_counter()
    correct = sum(math500.score(row["reference"], w) for row, w in zip(rows, wrong, strict=True))
    rate = len(rows) / (time.perf_counter() - started)
    print(f"MATH-500 against another answer:  {rate:8.0f} items/s  ({correct:.0f}/{len(rows)} judged equal)")
    gsm8k = Gsm8kTask(data_files={"eval": str(data / "gsm8k/test.jsonl")})
    rows = gsm8k.load_rows("eval")
    started = time.perf_counter()
    correct = sum(gsm8k.score(row["reference"], row["answer"]) for row in rows)
    elapsed = time.perf_counter() - started
    print(f"GSM8K gold solutions:           {len(rows) / elapsed:8.0f} items/s  ({correct:.0f}/{len(rows)} correct)")
    sci = SciKnowEvalTask(data_dir=str(data / "sciknoweval"), domain="all")
    rows = sci.sized(sci.pools())["train"] + sci.sized(sci.pools())["eval"]
    completions = [f"<reasoning>...</reasoning><answer>{row['answer']}</answer>" for row in rows]
    started = time.perf_counter()
    correct = sum(sci.score(c, row["answer"]) for c, row in zip(completions, rows, strict=True))
    elapsed = time.perf_counter() - started
    print(f"SciKnowEval tagged letters:     {len(rows) / elapsed:8.0f} items/s  ({correct:.0f}/{len(rows)} correct)")


def load_times(data: Path, repeats: int) -> None:
    print(f"\n{'task':<12} {'splits':<30} {'read + rows':>12} {'build()':>9}   (import datasets not counted)")
    for option, (kwargs, what) in LOADS.items():
        arguments = json.loads(json.dumps(kwargs).replace("{data}", str(data)))
        results = []
        for _ in range(repeats):
            proc = subprocess.run(
                [sys.executable, "-c", LOAD_SCRIPT, CLASSES[option], json.dumps(arguments), what],
                capture_output=True,
                text=True,
                check=True,
                cwd=ROOT,
            )
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        rows = statistics.median(r["rows_s"] for r in results)
        build = statistics.median(r["build_s"] for r in results)
        sizes = " ".join(f"{k}={v}" for k, v in results[0]["sizes"].items())
        shown = f"{build:7.3f} s" if what == "build" else "      -"
        print(f"{option:<12} {sizes:<30} {rows:10.3f} s {shown:>9}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not (args.data / "math500/test.jsonl").is_file():
        sys.exit(f"no benchmark files in {args.data} (pass --data)")
    throughput(args.data)
    load_times(args.data, args.repeats)


if __name__ == "__main__":
    main()
