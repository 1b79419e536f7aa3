"""benchmarks/gpu_smoke.sh and gpu_smoke_wheels.sh: the cheap checks only (syntax, usage, argument errors).

The smoke test itself runs for minutes (on a borrowed GPU machine, or with GPU_SMOKE_DEVICE=cpu here), so it is not
run by the suite.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SMOKE = BENCHMARKS / "gpu_smoke.sh"
WHEELS = BENCHMARKS / "gpu_smoke_wheels.sh"


def bash(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", *args], capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.parametrize("script", [SMOKE, WHEELS], ids=lambda p: p.name)
def test_the_script_parses(script):
    result = bash("-n", str(script))
    assert result.returncode == 0, result.stderr


def test_help_names_every_step_and_exits_0():
    result = bash(str(SMOKE), "--help")
    assert result.returncode == 0
    assert result.stdout.startswith("usage: bash benchmarks/gpu_smoke.sh LOG_FOLDER")
    assert "Steps: grpo socraticpo entropy_masked vpd qwen3_lora zero2 zero3" in result.stdout


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


def test_the_device_command_is_written_at_the_top():
    head = SMOKE.read_text().splitlines()[:8]
    assert any('bash benchmarks/gpu_smoke.sh $OUT/gpu_smoke", carry=[".whl"]' in line for line in head)
