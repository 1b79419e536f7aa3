"""benchmarks/gpu_smoke.sh, gpu_smoke_wheels.sh and gpu_real_size.py: the cheap checks (syntax, usage, argument
errors), and gpu_real_size.py end to end on CPU with the 2-layer stand-in (slow).

The smoke test itself runs for minutes (on a borrowed GPU machine, or with GPU_SMOKE_DEVICE=cpu here), so it is not
run by the suite.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SMOKE = BENCHMARKS / "gpu_smoke.sh"
WHEELS = BENCHMARKS / "gpu_smoke_wheels.sh"
REAL_SIZE = BENCHMARKS / "gpu_real_size.py"
STEPS = "grpo socraticpo entropy_masked vpd qwen3_lora zero2 zero3 qwen3_real"


def bash(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", *args], capture_output=True, text=True, timeout=60, check=False, env={**os.environ, **(env or {})}
    )


@pytest.mark.parametrize("script", [SMOKE, WHEELS], ids=lambda p: p.name)
def test_the_script_parses(script):
    result = bash("-n", str(script))
    assert result.returncode == 0, result.stderr


def test_help_names_every_step_and_exits_0():
    result = bash(str(SMOKE), "--help")
    assert result.returncode == 0
    assert result.stdout.startswith("usage: bash benchmarks/gpu_smoke.sh LOG_FOLDER")
    assert f"Steps: {STEPS}\n" in result.stdout


def test_the_header_describes_every_step():
    header = SMOKE.read_text().split("set -euo pipefail")[0]
    for step in STEPS.split():
        assert re.search(rf"^#   .*\b{step}\b", header, flags=re.MULTILINE), step


def test_a_missing_log_folder_is_an_error_with_the_usage():
    result = bash(str(SMOKE))
    assert result.returncode == 2
    assert "usage: bash benchmarks/gpu_smoke.sh LOG_FOLDER" in result.stderr
    assert "error: the log folder argument is missing" in result.stderr
    assert result.stdout == ""


def test_more_than_one_argument_is_an_error(tmp_path):
    result = bash(str(SMOKE), str(tmp_path / "a"), str(tmp_path / "b"))
    assert result.returncode == 2
    assert "error: one argument only, the log folder" in result.stderr
    assert not (tmp_path / "a").exists()  # refused before anything is written


def test_the_device_commands_are_written_at_the_top_and_cover_every_step():
    # two commands (a device command runs 10 minutes at most), each packing its log folder into one archive
    head = "\n".join(SMOKE.read_text().splitlines()[:14])
    commands = re.findall(r'run\(command="GPU_SMOKE_STEPS=(\S+) ', head)
    assert [step for steps in commands for step in steps.split(",")] == STEPS.split()
    assert head.count("GPU_SMOKE_ARCHIVE=$OUT/") == 2
    assert head.count('carry=[".whl"], timeout_s=600)') == 2


def test_the_archive_holds_the_log_folder_even_when_a_step_fails(tmp_path):
    archive = tmp_path / "out" / "smoke.tar.gz"
    env = {
        "GPU_SMOKE_DEVICE": "cpu",
        "GPU_SMOKE_WHEELS": "none",
        "GPU_SMOKE_STEPS": "no_such_step",
        "GPU_SMOKE_ARCHIVE": str(archive),
        "GPU_SMOKE_RUNS": str(tmp_path / "runs"),
    }
    result = bash(str(SMOKE), str(tmp_path / "logs"), env=env)
    assert result.returncode == 1
    with tarfile.open(archive) as packed:
        smoke_log = packed.extractfile("logs/smoke.log").read().decode()
    assert "| no_such_step   | FAIL   |" in smoke_log
    assert smoke_log.rstrip().endswith("RESULT: FAIL")


def test_the_device_command_fits_the_device_tool():
    # the device tool runs one command for 600 s at most: the budget (install included) and the command's timeout fit
    text = SMOKE.read_text()
    timeout = int(re.search(r"timeout_s=(\d+)\)", text).group(1))
    budget = int(re.search(r"budget=\$\{GPU_SMOKE_BUDGET:-(\d+)\}", text).group(1))
    real_timeout = int(re.search(r"real_timeout=\$\{GPU_SMOKE_REAL_TIMEOUT:-(\d+)\}", text).group(1))
    assert timeout <= 600
    assert budget + 20 < timeout  # a step cut at the budget is killed 20 s later at most (--kill-after=20)
    assert real_timeout < budget


# --- benchmarks/gpu_real_size.py ------------------------------------------------------------------------------------
def real_size(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REAL_SIZE), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_real_size_help():
    result = real_size("--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python benchmarks/gpu_real_size.py")
    for option in ("--device", "--size", "--algorithms", "--steps", "--work", "--override"):
        assert option in result.stdout


@pytest.mark.parametrize(
    "args, says",
    [
        ([], "the following arguments are required: out"),
        (["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
        (["--size", "8b"], "argument --size: invalid choice: '8b'"),
        (["--algorithms", "grpo,ppo"], "--algorithms grpo,ppo: expected a comma-separated list of grpo, socraticpo"),
        (["--steps", "0"], "--steps 0: must be >= 1"),
        (["--num-generations", "1"], "--num-generations 1: must be >= 2"),
        (["--override", "eval.pass_k"], "--override eval.pass_k: expected KEY=VALUE"),
        (["--device", "cpu", "--batch-size", "5"], "batch size 5 is not a multiple of --num-generations 2"),
    ],
    ids=["no-out", "device", "size", "algorithms", "steps", "generations", "override", "batch"],
)
def test_real_size_refuses_bad_arguments_in_one_line(tmp_path, args, says):
    out = tmp_path / "out"
    result = real_size(*args, *([str(out)] if args else []))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr  # one line, not argparse's usage block
    assert result.stderr.startswith("python benchmarks/gpu_real_size.py: error: ")
    assert says in result.stderr
    assert not out.exists()  # refused before anything is written


@pytest.mark.slow
def test_real_size_runs_end_to_end_on_cpu_with_the_standin(tmp_path):
    # the smoke's qwen3_real step as it runs on CPU: the stand-in built, GRPO and SocraticPO through the CLI (~30 s)
    out = tmp_path / "out"
    result = real_size("--device", "cpu", "--size", "standin", str(out), timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((out / "gpu_real_size.json").read_text())
    assert report["status"] == "completed"
    assert report["device"] == "cpu" and report["size"] == "standin" and report["precision"] == "fp32"
    assert set(report["runs"]) == {"grpo", "socraticpo"}
    for name, run in report["runs"].items():
        assert run["result"] == "PASS", (name, run["result"])
        assert run["steps"] == 2
        assert run["tokens_per_second"] > 0 and run["generated_tokens"] > 0
        assert run["step_seconds"] > 0
        assert run["peak_memory"]["cpu_rss_gib"] > 0
        held = run["planner"]["held_gib"]
        assert held == "n/a" or held > 0, run["planner"]  # "n/a" where the planner is absent or fails
        assert (out / "runs" / name / "summary.json").is_file()
    if report["runs"]["grpo"]["planner"]["held_gib"] != "n/a":
        # SocraticPO holds the initial policy for its returns' KL beside what GRPO (beta=0) holds
        assert report["runs"]["socraticpo"]["planner"]["held_bytes"] > report["runs"]["grpo"]["planner"]["held_bytes"]
    table = (out / "gpu_real_size.md").read_text()
    assert table.splitlines()[-1] != "" and "| grpo | PASS |" in table and "| socraticpo | PASS |" in table
    assert result.stdout.rstrip().endswith(table.rstrip())  # the table is printed last
    assert not list(tmp_path.glob("**/checkpoints"))  # the runs' checkpoints are deleted
