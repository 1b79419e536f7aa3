"""Shared fixtures: composing configs in-process and running the app in a subprocess, with isolated folders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from socratic_exp.hydra_support import compose  # noqa: F401  (re-exported for the tests)

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
# the real benchmark files (never copied into the repo); SOCRATIC_EXP_DATA points elsewhere
SHARED_DATA = Path(os.environ.get("SOCRATIC_EXP_DATA") or ROOT.parent / "shared" / "data")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real benchmark files; tests that need them skip when the folder is absent."""
    if not (SHARED_DATA / "gsm8k" / "test.jsonl").is_file():
        pytest.skip(f"real benchmark files not found in {SHARED_DATA} (set SOCRATIC_EXP_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One warm-start cache for the whole session (the quick warm-start builds in seconds)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def run_app(tmp_path, cache_dir):
    """Run ``python -m socratic_exp`` with outputs under tmp_path; returns (completed process, outputs root)."""

    def run(*overrides: str, timeout: int = 600, env: dict[str, str] | None = None):
        outputs = tmp_path / "outputs"
        full_env = {
            **os.environ,
            "SOCRATIC_EXP_OUTPUTS": str(outputs),
            "SOCRATIC_EXP_CACHE": str(cache_dir),
            "WANDB_MODE": "offline",
            "WANDB_SILENT": "true",
            "HYDRA_FULL_ERROR": "0",
            **(env or {}),
        }
        proc = subprocess.run(
            [sys.executable, "-m", "socratic_exp", *overrides],
            cwd=tmp_path,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return proc, outputs

    return run


def run_dirs(outputs: Path) -> list[Path]:
    return sorted(p.parent for p in outputs.glob("*/*/summary.json") if p.parent.parent.name != "multirun")


def read_summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def build_trainer(components, student, data, run_name: str = "test"):
    """The algorithm's TRL trainer as a run builds it, outside the training loop (a temporary run folder, no
    callbacks, no loggers)."""
    import tempfile

    from socratic_exp.algorithms.base import RunContext

    ctx = RunContext(
        components=components,
        data=data,
        student=student,
        run_dir=Path(tempfile.mkdtemp()),
        run_name=run_name,
        seed=0,
        callbacks=[],
        report_to=[],
    )
    return components.algorithm.build_trainer(ctx)
