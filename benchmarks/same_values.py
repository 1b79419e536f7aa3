"""Whether a refactoring kept behaviour: ``debug=fast seed=0`` for every algorithm and sampler, values compared.

    python benchmarks/same_values.py record before.json      # on the code before
    python benchmarks/same_values.py record after.json       # on the code after
    python benchmarks/same_values.py compare before.json after.json
    python benchmarks/same_values.py record grpo.json grpo grpo+goldilocks   # some combinations only

``record`` runs each combination below in its own process (CPU, the shipped default student) and keeps every
logged value of ``metrics.jsonl`` and the final table of ``summary.json``, timings and memory aside. ``compare``
lists each value that differs; it exits 1 when any does. Same machine for both records: the values are compared
exactly.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tqdm import tqdm

from socratic_exp import algorithms, samplers
from socratic_exp.core.metrics import MetricsFile

# Every declared method (an algorithm on its own, a sampler under GRPO), then the compositions and presets that
# build their trainer another way: a new method folder is recorded without an edit here.
COMBINATIONS = (
    {method.name: [f"algorithm={method.name}"] for method in algorithms.declared()}
    | {f"grpo+{method.name}": ["algorithm=grpo", f"sampler={method.name}"] for method in samplers.declared()}
    | {
        "grpo+dynamic_sampling": ["algorithm=grpo", "algorithm.dynamic_sampling={max_rounds:3,batches_per_round:2}"],
        "goldilocks+dynamic_sampling": [
            "algorithm=grpo",
            "sampler=goldilocks",
            "algorithm.dynamic_sampling={max_rounds:3,batches_per_round:2}",
        ],
        "sdpo_official": ["algorithm=sdpo_official"],
    }
)
# What differs between two runs of the same code: clocks, throughput, memory.
UNTIMED = re.compile(r"(second|_s$|/s$|_ms$|time|runtime|per_second|latency|memory|_mb$|_gb$|flos)")


def _kept(record: dict) -> dict:
    return {k: v for k, v in record.items() if not UNTIMED.search(k)}


def record(out: Path, names: list[str]) -> None:
    unknown = sorted(set(names) - set(COMBINATIONS))
    if unknown:
        sys.exit(f"error: no combination {', '.join(unknown)} (fix: name one of {', '.join(COMBINATIONS)})")
    chosen = {name: COMBINATIONS[name] for name in names} if names else COMBINATIONS
    values: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as root:
        for name, overrides in tqdm(chosen.items(), desc="runs", unit="run"):
            folder = Path(root) / name
            command = [sys.executable, "-m", "socratic_exp", "debug=fast", "seed=0", "logger=none",
                       f"hydra.run.dir={folder}", *overrides]  # fmt: skip
            subprocess.run(command, check=True, capture_output=True)
            summary = json.loads((folder / "summary.json").read_text())
            values[name] = {
                "metrics": [_kept(r) for r in MetricsFile(folder / "metrics.jsonl").read()],
                "final": _kept(summary.get("final") or {}),
            }
    out.write_text(json.dumps(values, indent=1, sort_keys=True))


def compare(before: Path, after: Path) -> int:
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    differences = []
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            differences.append(f"{name}: only in {'after' if name not in a else 'before'}")
            continue
        if len(a[name]["metrics"]) != len(b[name]["metrics"]):
            differences.append(f"{name}: {len(a[name]['metrics'])} records before, {len(b[name]['metrics'])} after")
        for i, (ra, rb) in enumerate(zip(a[name]["metrics"], b[name]["metrics"], strict=False)):
            ra, rb = _kept(ra), _kept(rb)
            for key in sorted(set(ra) | set(rb)):
                if ra.get(key) != rb.get(key):
                    differences.append(f"{name} record {i} {key}: {ra.get(key)!r} -> {rb.get(key)!r}")
        for key in sorted(set(a[name]["final"]) | set(b[name]["final"])):
            was, now = a[name]["final"].get(key), b[name]["final"].get(key)
            if was != now:
                differences.append(f"{name} final {key}: {was!r} -> {now!r}")
    values = sum(len(_kept(r)) for run in a.values() for r in run["metrics"])
    print("\n".join(differences[:50]) or f"same values: {len(a)} runs, {values} logged values")
    return 1 if differences else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "record":
        record(Path(sys.argv[2]), sys.argv[3:])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
