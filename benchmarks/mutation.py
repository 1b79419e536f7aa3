"""Mutation testing of the methods' pure maths modules with mutmut: the share of mutants the tests kill.

    python benchmarks/mutation.py                      # every module below
    python benchmarks/mutation.py socraticpo_rewards   # one of them (the names of TARGETS)

Each module runs in its own scratch copy of the project (mutmut works in the current folder and its config is one
per project), with only the tests that pin that module, so modules can be scored in parallel. Prints killed /
total per module and the surviving mutants' names; ``mutmut show <name>`` inside the printed scratch folder shows a
survivor's diff.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name -> (module to mutate, the tests that pin it)
TARGETS: dict[str, tuple[str, list[str]]] = {
    "socraticpo_rewards": ("socratic_exp/algorithms/socraticpo/rewards.py", ["tests/test_socraticpo.py"]),
    "reinforce_pp_returns": (
        "socratic_exp/algorithms/reinforce_pp/returns.py",
        ["tests/test_reinforce_pp.py", "tests/test_socraticpo.py"],
    ),
    "dynamic_sampling": ("socratic_exp/algorithms/grpo/dynamic_sampling.py", ["tests/test_dynamic_sampling.py"]),
    "entropy_mask": ("socratic_exp/algorithms/entropy_masked/mask.py", ["tests/test_entropy_masked.py"]),
    "sdpo_losses": ("socratic_exp/algorithms/sdpo/losses.py", ["tests/test_sdpo_losses.py", "tests/test_vpd.py"]),
    "vpd_estep": ("socratic_exp/algorithms/vpd/estep.py", ["tests/test_vpd.py"]),
    "socratic_rl_utility": ("socratic_exp/algorithms/socratic_rl/utility.py", ["tests/test_socratic_rl.py"]),
    "teacher_meta_pairs": ("socratic_exp/algorithms/socratic_rl/meta_learning.py", ["tests/test_socratic_rl.py"]),
    "goldilocks_selector": ("socratic_exp/samplers/goldilocks/selector.py", ["tests/test_goldilocks.py"]),
    "goldilocks_predictor": ("socratic_exp/samplers/goldilocks/predictor.py", ["tests/test_goldilocks.py"]),
}


def score(name: str, keep: bool) -> dict[str, object]:
    module, tests = TARGETS[name]
    scratch = Path(tempfile.mkdtemp(prefix=f"mutmut-{name}-"))
    for folder in ("socratic_exp", "conf", "sweeps", "tests"):
        shutil.copytree(ROOT / folder, scratch / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (scratch / "pyproject.toml").write_text(
        "[tool.mutmut]\n"
        'source_paths = ["socratic_exp"]\n'
        f'only_mutate = ["{module}"]\n'
        'also_copy = ["conf", "sweeps"]\n'
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
        'pytest_add_cli_args = ["-m", "not slow", "-p", "no:cacheprovider", "-q"]\n'
        "\n[tool.pytest.ini_options]\n"
        'markers = ["slow: end-to-end runs", "real: real pretrained model"]\n'
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(scratch)}
    run = subprocess.run(["mutmut", "run"], cwd=scratch, env=env, capture_output=True, text=True)
    results = subprocess.run(
        ["mutmut", "results", "--all", "true"], cwd=scratch, env=env, capture_output=True, text=True
    )
    statuses: dict[str, str] = {}
    for line in results.stdout.splitlines():
        if ":" in line:
            mutant, status = line.rsplit(":", 1)
            statuses[mutant.strip()] = status.strip()
    killed = sum(status == "killed" for status in statuses.values())
    survivors = sorted(m for m, status in statuses.items() if status != "killed")
    if not statuses:
        print(run.stdout[-3000:], run.stderr[-3000:], file=sys.stderr)
    if not keep:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "module": module,
        "killed": killed,
        "total": len(statuses),
        "score": killed / len(statuses) if statuses else float("nan"),
        "survivors": survivors,
        "scratch": str(scratch) if keep else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", choices=[[], *TARGETS], default=[], metavar="NAME")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copy (to run `mutmut show` there)")
    args = parser.parse_args()
    for name in args.names or list(TARGETS):
        result = score(name, args.keep)
        print(f"{name}: {result['killed']}/{result['total']} killed ({result['score']:.1%}) in {result['module']}")
        for survivor in result["survivors"]:
            print(f"  survived: {survivor}")
        if result["scratch"]:
            print(f"  scratch: {result['scratch']}")


if __name__ == "__main__":
    main()
